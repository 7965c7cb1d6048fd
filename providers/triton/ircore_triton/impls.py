"""The functions this provider registers with ircore, and their ``supports_args`` predicates.

Each implementation has exactly the native op's signature (the core compares the torch schema
its annotations imply; ``Tensor | None`` is the same annotation as ``Optional[Tensor]``).
Under tracing (torch.compile, make_fx, fake tensors, any dispatch mode) it calls the provider's
opaque torch op, so graphs record one node per call; in plain eager calls it calls the launcher
directly, which saves the dispatcher round trip (about 2 us a call) on the launch path.
Predicates run on every eager dispatch, after the core's argument check (see below).
No ``from __future__ import annotations`` here: annotations stay real objects.
"""

import os

import torch
from torch import Tensor

from . import kernels as _k
from . import ops as _ops  # noqa: F401 - defines torch.ops.ircore_triton.*

__all__ = [
    "fused_add_rms_norm",
    "fused_add_rms_norm_functional",
    "fused_add_rms_norm_supports",
    "rms_norm",
    "rms_norm_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
]

_OPS = torch.ops.ircore_triton
_rms_norm_op = _OPS.rms_norm.default
_fused_add_rms_norm_op = _OPS.fused_add_rms_norm.default
_fused_add_rms_norm_inplace_op = _OPS.fused_add_rms_norm_inplace.default
_silu_and_mul_op = _OPS.silu_and_mul.default

_is_compiling = torch.compiler.is_compiling  # dynamo folds this to True: no graph break
_dispatch_stack_len = torch._C._len_torch_dispatch_stack

# CPU counts as a Triton device only under Triton's interpreter (tests).
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    """RMSNorm over the last dim in fp32, by the Triton kernel; a new contiguous tensor."""
    if not _is_compiling() and type(x) is Tensor and not _dispatch_stack_len():
        return _k.rms_norm(x, weight, epsilon, variance_size)
    return _rms_norm_op(x, weight, epsilon, variance_size)


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """In place: ``x_residual <- x + x_residual``; ``x <- rms_norm(x_residual)``; returns both."""
    if not _is_compiling() and type(x) is Tensor and not _dispatch_stack_len():
        _k.fused_add_rms_norm_(x, x_residual, weight, epsilon, variance_size)
    else:
        _fused_add_rms_norm_inplace_op(x, x_residual, weight, epsilon, variance_size)
    return x, x_residual


def fused_add_rms_norm_functional(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Out-of-place variant (new tensors), for measuring against the in-place one."""
    if not _is_compiling() and type(x) is Tensor and not _dispatch_stack_len():
        return _k.fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)
    return _fused_add_rms_norm_op(x, x_residual, weight, epsilon, variance_size)


def silu_and_mul(x: Tensor) -> Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` in fp32, ``d = x.shape[-1] // 2``."""
    if not _is_compiling() and type(x) is Tensor and not _dispatch_stack_len():
        return _k.silu_and_mul(x)
    return _silu_and_mul_op(x)


# The predicates run on every eager call, after the core's own argument check (float x with a
# non-empty last dim, weight 1-D of size hidden on x's device, variance_size in range, residual
# like x, even last dim for silu_and_mul). They test only what these kernels add: a Triton GPU
# device, a weight of x's dtype, and a unit last-dim stride (any row stride is fine).
def _device_ok(x: Tensor) -> bool:
    return x.is_cuda or x.is_xpu or (_INTERPRET and x.is_cpu)


def _rows_ok(x: Tensor) -> bool:
    return x.is_contiguous() or x.stride(-1) == 1 or x.shape[-1] == 1


def rms_norm_supports(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    """GPU tensor (cuda/xpu), unit last-dim stride, weight (if any) of x's dtype."""
    return (weight is None or weight.dtype is x.dtype) and _device_ok(x) and _rows_ok(x)


def fused_add_rms_norm_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """As :func:`rms_norm_supports`, for x and the residual."""
    return (
        (weight is None or weight.dtype is x.dtype)
        and _device_ok(x)
        and _rows_ok(x)
        and _rows_ok(x_residual)
    )


def silu_and_mul_supports(x: Tensor) -> bool:
    """GPU tensor (cuda/xpu), unit last-dim stride."""
    return _device_ok(x) and (x.is_contiguous() or x.stride(-1) == 1)
