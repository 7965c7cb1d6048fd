"""The functions this provider registers, and their ``supports_args`` predicates.

Imported by ircore only after :func:`ircore_aiter.provider.ircore_check_platform` passed, so
``aiter`` is importable here. What the adapter has to get right, from AITER's sources (0.1.7 to
0.1.20):

- AITER's norm kernels take a 2-D ``(rows, hidden)`` input and address rows by ``stride(0)``
  with a unit last stride assumed, unchecked: a 3-D contiguous input would be read with the
  batch stride as the row stride. So every input is flattened to 2-D, which the predicates make
  sure is a view (no copy): any 2-D tensor with unit last stride (row-strided views such as a QKV
  split are fine), and contiguous tensors of other ranks. Outputs are reshaped back.
- fp16 and bf16 only; the weight must have x's dtype (one dtype string for x, weight and out)
  and be contiguous. ``weight=None`` is passed as a cached tensor of ones.
- ``rmsnorm2d_fwd_with_add`` is not in place: it writes ``out`` and ``residual_out``, fresh
  tensors here, with exactly six positional arguments (later releases added parameters).
- ``silu_and_mul`` reads the input as contiguous rows of ``2*d`` and stores up to 8 elements at
  a time from ``d`` alone: ``d`` must be a multiple of 8 and the input 16-byte aligned (an
  unaligned input is copied first).
- Empty inputs never reach a kernel (a launch with no rows is an invalid launch on HIP).
- The first call of each kernel builds it (hipcc, minutes, under a file lock in AITER's JIT
  directory): warm up before capturing CUDA graphs.

The implementations run only on real tensors (compiled graphs hold the op ircore builds around
each of them), so they may read data pointers; the predicates also run at compile time on fake
tensors and read only metadata.
"""

import aiter
import torch
from torch import Tensor

import ircore
from ircore.kit import unit_weight

__all__ = [
    "fused_add_rms_norm",
    "fused_add_rms_norm_supports",
    "rms_norm",
    "rms_norm_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
]

# The platform's tensors (``cuda`` on ROCm builds of torch; ``cpu`` under a simulated platform
# in tests, where a stand-in of AITER computes on the CPU).
_DEVICE = ircore.current_platform().device_type
_HALF = (torch.float16, torch.bfloat16)


def _weight(weight: Tensor | None, x: Tensor) -> Tensor:
    return unit_weight(x) if weight is None else weight


def _rows(x: Tensor) -> Tensor:
    """The ``(rows, hidden)`` view AITER reads; the predicates guarantee it is a view."""
    return x if x.dim() == 2 else x.view(-1, x.shape[-1])


# ---------------------------------------------------------------------- implementations
def rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    """``aiter.rms_norm`` on the 2-D view of x; the result has x's shape (a new contiguous tensor)."""
    if not x.numel():
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return aiter.rms_norm(_rows(x), _weight(weight, x), float(epsilon)).view(x.shape)


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``aiter.rmsnorm2d_fwd_with_add`` into fresh tensors (not in place): ``(out, x + x_residual)``."""
    rows = _rows(x)
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    residual_out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        aiter.rmsnorm2d_fwd_with_add(
            out, rows, _rows(x_residual), residual_out, _weight(weight, x), float(epsilon)
        )
    return out.view(x.shape), residual_out.view(x.shape)


def silu_and_mul(x: Tensor) -> Tensor:
    """``aiter.silu_and_mul(out, x)``; x copied first if its data is not 16-byte aligned."""
    out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
    if x.numel():
        aiter.silu_and_mul(out, x if x.data_ptr() % 16 == 0 else x.clone())
    return out


# The predicates run after the core's own argument check (float x with a non-empty last dim,
# weight 1-D of size hidden on x's device, residual like x, even last dim for silu_and_mul), so
# they test only what AITER adds.
def _flat_view(x: Tensor) -> bool:
    """Unit last stride, and rows that flatten to 2-D without a copy (2-D, or contiguous)."""
    return x.stride(-1) == 1 and (x.dim() <= 2 or x.is_contiguous())


def rms_norm_supports(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    """fp16/bf16 on the platform's device, a view AITER can address, weight (if any) like x."""
    return (
        variance_size is None
        and x.dtype in _HALF
        and x.device.type == _DEVICE
        and (weight is None or (weight.dtype is x.dtype and weight.is_contiguous()))
        and _flat_view(x)
    )


def fused_add_rms_norm_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """As :func:`rms_norm_supports`, and a contiguous residual (later releases require it)."""
    return rms_norm_supports(x, weight, epsilon, variance_size) and x_residual.is_contiguous()


def silu_and_mul_supports(x: Tensor) -> bool:
    """fp16/bf16 on the platform's device, contiguous, half of the last dim a multiple of 8."""
    return x.dtype in _HALF and x.device.type == _DEVICE and x.is_contiguous() and (x.shape[-1] // 2) % 8 == 0
