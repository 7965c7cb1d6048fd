"""Argument checks shared by the op library: cheap, since they run before every eager call."""

from __future__ import annotations

from typing import NoReturn

import torch

from ircore.errors import InvalidArgumentError

FLOAT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_DTYPE_NAMES = "float32, float16, bfloat16"


def bad_argument(op: str, arg: str, problem: str) -> NoReturn:
    """Raise the one error every bad input gets: op, argument, what is wrong, what is wanted."""
    raise InvalidArgumentError(f"ircore.ops.{op}: argument {arg!r} {problem}")


def check_float(op: str, arg: str, t: torch.Tensor) -> None:
    if t.dtype not in FLOAT_DTYPES:
        bad_argument(op, arg, f"has dtype {t.dtype}; expected one of {_DTYPE_NAMES}")


def check_tensor(op: str, arg: str, t: object) -> None:
    if not isinstance(t, torch.Tensor):
        bad_argument(op, arg, f"must be a torch.Tensor, got {type(t).__name__}")


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
