"""Argument checks shared by the op library: cheap, since they run before every eager call."""

from __future__ import annotations

import torch

from ircore._argtypes import bad_argument
from ircore.op import get_op

FLOAT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_DTYPE_NAMES = "float32, float16, bfloat16"


def check_types(op: str, *args: object) -> None:
    """Each argument of the type the op's signature declares (the careful checks start here)."""
    get_op(op).check_types(*args)


def check_float(op: str, arg: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        bad_argument(op, arg, f"has dtype {t.dtype}; expected one of {_DTYPE_NAMES}")


def check_epsilon(op: str, epsilon: float) -> None:
    """A real number >= 0: a negative or NaN epsilon is a mistake, not a request for NaN rows."""
    if not epsilon >= 0:
        bad_argument(op, "epsilon", f"is {epsilon!r}; expected a number >= 0 (not NaN), e.g. 1e-6")


def check_weight(op: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """``weight`` must be 1-D, of size ``x.shape[-1]``, floating point, on x's device."""
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        bad_argument(
            op,
            "weight",
            f"has shape {tuple(weight.shape)}; expected ({x.shape[-1]},), the size of the last "
            f"dimension of x {tuple(x.shape)}",
        )
    if weight.dtype not in FLOAT_DTYPES:
        bad_argument(op, "weight", f"has dtype {weight.dtype}; expected one of {_DTYPE_NAMES}")
    if weight.device != x.device:
        bad_argument(op, "weight", f"is on {weight.device} but x is on {x.device}")


def check_variance_size(op: str, x: torch.Tensor, variance_size: int) -> None:
    if not 0 < variance_size <= x.shape[-1]:
        bad_argument(
            op,
            "variance_size",
            f"is {variance_size}; expected 1 <= variance_size <= {x.shape[-1]} (x.shape[-1])",
        )


def check_rows(op: str, x: torch.Tensor) -> None:
    """At least one dimension, and a non-empty last one (there is nothing to normalise)."""
    if x.dim() == 0:
        bad_argument(op, "x", "is a 0-d tensor; expected at least one dimension")
    if x.shape[-1] == 0:
        bad_argument(op, "x", f"has an empty last dimension (shape {tuple(x.shape)})")
