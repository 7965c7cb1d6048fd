"""The functions this provider registers with ircore, and their ``supports_args`` predicates.

Each implementation has exactly the native op's signature (the core compares the torch schema
its annotations imply; ``Tensor | None`` is the same annotation as ``Optional[Tensor]``).
Under tracing (torch.compile, make_fx, fake tensors, any dispatch mode) it calls the provider's
opaque torch op, so graphs record one node per call; in plain eager calls it calls the launcher
directly, which saves the dispatcher round trip (about 2 us a call) on the launch path.
Predicates run on every eager dispatch, so they only read cheap tensor attributes.
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

_DTYPES = frozenset((torch.float32, torch.float16, torch.bfloat16))
# Devices Triton has a GPU backend for; CPU only under Triton's interpreter (tests).
_DEVICE_TYPES = frozenset(
    ("cuda", "xpu", "cpu") if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") else ("cuda", "xpu")
)


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


def _norm_ok(x: Tensor, weight: Tensor | None, variance_size: int | None) -> bool:
    if x.device.type not in _DEVICE_TYPES or x.dtype not in _DTYPES or x.dim() == 0:
        return False
    n = x.shape[-1]
    if n == 0 or (n > 1 and x.stride(-1) != 1):
        return False
    if weight is not None and (weight.dtype != x.dtype or weight.device != x.device):
        return False
    return variance_size is None or 0 < variance_size <= n


def rms_norm_supports(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    """GPU tensor (cuda/xpu), fp32/fp16/bf16, unit last-dim stride, weight of x's dtype."""
    return _norm_ok(x, weight, variance_size)


def fused_add_rms_norm_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """As :func:`rms_norm_supports`, and the residual matches x in dtype, device and last dim."""
    if not _norm_ok(x, weight, variance_size):
        return False
    return (
        x_residual.dtype == x.dtype
        and x_residual.device == x.device
        and x_residual.shape == x.shape
        and (x.shape[-1] == 1 or x_residual.stride(-1) == 1)
    )


def silu_and_mul_supports(x: Tensor) -> bool:
    """GPU tensor (cuda/xpu), fp32/fp16/bf16, even last dim with unit stride."""
    if x.device.type not in _DEVICE_TYPES or x.dtype not in _DTYPES or x.dim() == 0:
        return False
    h = x.shape[-1]
    return h > 0 and h % 2 == 0 and x.stride(-1) == 1
