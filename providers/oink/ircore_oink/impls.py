"""The functions this provider registers, and their ``supports_args`` predicates.

Imported by ircore only after :func:`ircore_oink.provider.ircore_check_platform` passed, so
``torch.ops.oink.*`` exist here. Oink's ops take 2-D ``(rows, hidden)`` tensors and run their
CuTeDSL kernels only on layouts they can address by pointer; anything else goes through a slow
PyTorch reference path inside Oink. The predicates admit exactly the fast-path layouts, so
everything else goes to the next provider (a fast kernel) instead:

- x (and the residual) viewable as 2-D without a copy; unit last stride; the row stride a
  multiple of 256 bits (16 elements of fp16/bf16, 8 of fp32); data 16-byte aligned;
- a weight (Oink's is not optional) of x's dtype, contiguous, 16-byte aligned (32 for fp32);
- for the in-place fused op, a contiguous residual.

``rms_norm``'s output keeps x's row stride (Oink allocates it like x's rows): :func:`rms_norm_fake`
says so, as the fake of the op compiled graphs hold for this implementation, so row-strided x (a
QKV split) runs on Oink under ``torch.compile`` too.

The predicates also run at compile time on fake tensors, so they read metadata only: alignment
is judged from the storage offset (allocations themselves are aligned; a tensor over memory from
elsewhere that is not gets Oink's slower, still right, reference path). The row stride is not a
fact of the call signature, so they are asked on every call (no ``cache_by_signature``). Empty
inputs never reach a kernel. Oink compiles a kernel per shape on first use: warm up before
capturing CUDA graphs.
"""

from itertools import pairwise

import torch
from torch import Tensor

import ircore

__all__ = [
    "fused_add_rms_norm",
    "fused_add_rms_norm_supports",
    "rms_norm",
    "rms_norm_fake",
    "rms_norm_supports",
]

# The platform's tensors (``cuda``; ``cpu`` under a simulated platform in tests, where a stand-in
# of KernelAgent-Oink registers the same ops).
_DEVICE = ircore.current_platform().device_type
_rmsnorm = torch.ops.oink.rmsnorm.default
_fused_add_rms_norm = torch.ops.oink.fused_add_rms_norm.default
#: elements per 256 bits: the row stride Oink's pointer path needs is a multiple of this
_ROW_ELEMENTS = {torch.float16: 16, torch.bfloat16: 16, torch.float32: 8}


def _rows(x: Tensor) -> Tensor | None:
    """x as ``(rows, hidden)`` without a copy, or None when only a copy could make it."""
    if x.dim() == 2:
        return x
    leading = [(size, stride) for size, stride in zip(x.shape[:-1], x.stride()[:-1]) if size != 1]
    for (_, outer), (size, inner) in pairwise(leading):
        if outer != inner * size:
            return None
    return x.view(-1, x.shape[-1])


def rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    """``torch.ops.oink.rmsnorm`` on the 2-D view of x; the result has x's shape (contiguous rows)."""
    if not x.numel():
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return _rmsnorm(_rows(x), weight, epsilon).view(x.shape)


def rms_norm_fake(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """What :func:`rms_norm` returns, on fake tensors: x's rows, at x's row stride."""
    rows = _rows(x) if x.numel() else None
    if rows is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return torch.empty_strided(rows.shape, rows.stride(), dtype=x.dtype, device=x.device).view(x.shape)


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """In place: ``x_residual <- x + x_residual``, ``x <- rms_norm(x_residual)``; returns both."""
    if x.numel():
        _fused_add_rms_norm(_rows(x), _rows(x_residual), weight, epsilon)
    return x, x_residual


def _aligned(t: Tensor, alignment: int = 16) -> bool:
    """t's data starts ``alignment``-byte aligned in its (aligned) allocation: metadata only."""
    return t.storage_offset() * t.element_size() % alignment == 0


def _fast_rows(t: Tensor) -> Tensor | None:
    """t's 2-D view if Oink's pointer path takes it (unit last stride, 256-bit rows, aligned)."""
    rows = _rows(t)
    if rows is None or rows.stride(1) != 1 or rows.stride(0) % _ROW_ELEMENTS[t.dtype] or not _aligned(rows):
        return None
    return rows


def _fast_call(x: Tensor, weight: Tensor | None, variance_size: int | None) -> Tensor | None:
    """x's 2-D view if Oink's pointer path takes x and the weight (of x's dtype), else None."""
    if variance_size is not None or weight is None or x.device.type != _DEVICE or weight.dtype is not x.dtype:
        return None
    if not weight.is_contiguous() or not _aligned(weight, 32 if x.dtype is torch.float32 else 16):
        return None
    return _fast_rows(x)


def rms_norm_supports(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    """On the platform's device, a weight like x, and rows Oink's fast path addresses."""
    return _fast_call(x, weight, variance_size) is not None


def fused_add_rms_norm_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """Oink's fast path for x (any row stride it takes) and the weight, and a contiguous residual."""
    return (
        _fast_call(x, weight, variance_size) is not None
        and x_residual.is_contiguous()
        and _fast_rows(x_residual) is not None
    )
