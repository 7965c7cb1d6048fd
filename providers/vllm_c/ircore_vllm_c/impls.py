"""The implementations registered with ircore, and the predicates saying which calls they take.

Each function has exactly the native op's signature and calls this provider's torch op
(``torch.ops.ircore_vllm_c.*``, loaded by :func:`ircore_vllm_c.kernels.load_kernels`).

What the kernels handle (the predicates say exactly this, and run on every eager call, so they
are a handful of attribute reads):

- device: CPU always (once loaded); CUDA when the CUDA kernels are loaded;
- dtype: float32, float16, bfloat16; weight (when given) of x's dtype or float32, 1-D, of
  size hidden;
- any layout: rows with one row stride are read (and written, in place) directly, anything
  else goes through a contiguous copy inside the op; any hidden size >= 1 (16-byte vector paths
  where aligned, element-wise paths elsewhere);
- variance_size: None or 1 <= variance_size <= hidden;
- silu_and_mul: an even last dimension.

Annotations are deliberately not postponed (no ``from __future__ import annotations``): the
core infers a torch schema from them and compares it with the native one.
"""

import torch

from . import kernels

__all__ = [
    "fused_add_rms_norm",
    "fused_add_rms_norm_supports",
    "rms_norm",
    "rms_norm_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
]

_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _device_ok(x: torch.Tensor) -> bool:
    if x.is_cuda:
        return kernels.cuda_loaded()
    return x.is_cpu and kernels.cpu_loaded()


def _norm_ok(x: torch.Tensor, weight: torch.Tensor | None, variance_size: int | None) -> bool:
    if x.dtype not in _DTYPES or x.dim() == 0:
        return False
    hidden = x.shape[-1]
    if hidden == 0 or not _device_ok(x):
        return False
    if variance_size is not None and not 0 < variance_size <= hidden:
        return False
    if weight is not None:
        if weight.dtype != x.dtype and weight.dtype != torch.float32:
            return False
        if weight.dim() != 1 or weight.shape[0] != hidden:
            return False
        if weight.device != x.device:
            return False
    return True


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> torch.Tensor:
    """RMSNorm by the compiled kernel (fp32 math, one rounding)."""
    return torch.ops.ircore_vllm_c.rms_norm.default(x, weight, epsilon, variance_size)


def rms_norm_supports(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """True for calls the kernel handles (see the module docstring)."""
    return _norm_ok(x, weight, variance_size)


def fused_add_rms_norm(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """In place, like vLLM: the residual sum goes into ``x_residual``, the output into ``x``."""
    torch.ops.ircore_vllm_c.fused_add_rms_norm.default(x, x_residual, weight, epsilon, variance_size)
    return x, x_residual


def fused_add_rms_norm_supports(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """As :func:`rms_norm_supports`, with a residual of x's shape, dtype and device."""
    return (
        _norm_ok(x, weight, variance_size)
        and x_residual.dtype == x.dtype
        and x_residual.shape == x.shape
        and x_residual.device == x.device
    )


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` by the compiled kernel (fp32 math)."""
    return torch.ops.ircore_vllm_c.silu_and_mul.default(x)


def silu_and_mul_supports(x: torch.Tensor) -> bool:
    """Float dtypes, an even non-empty last dimension, a loaded device."""
    return x.dtype in _DTYPES and x.dim() > 0 and x.shape[-1] > 0 and x.shape[-1] % 2 == 0 and _device_ok(x)
