"""The functions this provider registers with ircore, and their ``supports_args`` predicates.

Each implementation is the kernel launch, with exactly the native op's signature (the core
compares the torch schema its annotations imply; ``Tensor | None`` is the same annotation as
``Optional[Tensor]``). The core calls it on real tensors only: from eager dispatch, and from the
op it builds for compiled graphs (``torch.ops.ircore_triton.<op>``, see ircore._torch_ops).
Predicates run on every eager dispatch, after the core's argument check (see below).
No ``from __future__ import annotations`` here: annotations stay real objects.
"""

import os

from torch import Tensor

from . import act_kernels as _ak
from . import kernels as _k
from . import norm_kernels as _nk

__all__ = [
    "fatrelu_and_mul",
    "fatrelu_and_mul_supports",
    "gelu_and_mul",
    "gelu_and_mul_supports",
    "mul_and_silu",
    "mul_and_silu_supports",
    "swigluoai_and_mul",
    "swigluoai_and_mul_supports",
    "fused_add_rms_norm",
    "fused_add_rms_norm_functional",
    "fused_add_rms_norm_supports",
    "layer_norm",
    "layer_norm_supports",
    "rms_norm",
    "rms_norm_gated",
    "rms_norm_gated_supports",
    "rms_norm_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
]

# CPU counts as a Triton device only under Triton's interpreter (tests).
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    """RMSNorm over the last dim in fp32, by the Triton kernel; a new contiguous tensor."""
    return _k.rms_norm(x, weight, epsilon, variance_size)


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """In place: ``x_residual <- x + x_residual``; ``x <- rms_norm(x_residual)``; returns both."""
    _k.fused_add_rms_norm_(x, x_residual, weight, epsilon, variance_size)
    return x, x_residual


def fused_add_rms_norm_functional(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Out-of-place variant (new tensors), for measuring against the in-place one; not registered."""
    return _k.fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)


def silu_and_mul(x: Tensor) -> Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` in fp32, ``d = x.shape[-1] // 2``."""
    return _k.silu_and_mul(x)


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


def rms_norm_gated(
    x: Tensor,
    gate: Tensor,
    weight: Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> Tensor:
    """Gated RMSNorm in fp32 by the Triton kernel (one row or group per program); a new tensor."""
    return _nk.rms_norm_gated(x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized)


def rms_norm_gated_supports(
    x: Tensor,
    gate: Tensor,
    weight: Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> bool:
    """GPU tensor, unit last-dim stride for x and gate, a weight of x's dtype, a group (the row
    when ``group_size`` is None) of at most :data:`ircore_triton.norm_kernels.MAX_ROW_BLOCK`."""
    return (
        weight.dtype is x.dtype
        and (x.shape[-1] if group_size is None else group_size) <= _nk.MAX_ROW_BLOCK
        and _device_ok(x)
        and _rows_ok(x)
        and _rows_ok(gate)
    )


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, epsilon: float) -> Tensor:
    """LayerNorm over the last dim in fp32 by the Triton kernel (one row per program)."""
    return _nk.layer_norm(x, weight, bias, epsilon)


def layer_norm_supports(x: Tensor, weight: Tensor | None, bias: Tensor | None, epsilon: float) -> bool:
    """GPU tensor, unit last-dim stride, a row of at most ``MAX_ROW_BLOCK`` elements (the core
    has checked that weight and bias have x's dtype)."""
    return x.shape[-1] <= _nk.MAX_ROW_BLOCK and _device_ok(x) and _rows_ok(x)


# The gated activations (act_kernels.py): as silu_and_mul, a Triton device and a unit last-dim
# stride (any row stride); the core has checked the even last dim and the parameters' values.
def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    """``gelu(x[..., :d], approximate) * x[..., d:]`` in fp32 by the Triton kernel."""
    return _ak.gelu_and_mul(x, approximate)


def gelu_and_mul_supports(x: Tensor, approximate: str = "none") -> bool:
    """GPU tensor (cuda/xpu), unit last-dim stride."""
    return _device_ok(x) and (x.is_contiguous() or x.stride(-1) == 1)


def mul_and_silu(x: Tensor) -> Tensor:
    """``x[..., :d] * silu(x[..., d:])`` in fp32 by the Triton kernel."""
    return _ak.mul_and_silu(x)


def mul_and_silu_supports(x: Tensor) -> bool:
    """GPU tensor (cuda/xpu), unit last-dim stride."""
    return _device_ok(x) and (x.is_contiguous() or x.stride(-1) == 1)


def fatrelu_and_mul(x: Tensor, threshold: float = 0.0) -> Tensor:
    """``F.threshold(x[..., :d], threshold, 0) * x[..., d:]`` in fp32 by the Triton kernel."""
    return _ak.fatrelu_and_mul(x, threshold)


def fatrelu_and_mul_supports(x: Tensor, threshold: float = 0.0) -> bool:
    """GPU tensor (cuda/xpu), unit last-dim stride."""
    return _device_ok(x) and (x.is_contiguous() or x.stride(-1) == 1)


def swigluoai_and_mul(x: Tensor, alpha: float = 1.702, limit: float = 7.0) -> Tensor:
    """GPT-OSS's clamped SwiGLU (interleaved gate/up) in fp32 by the Triton kernel."""
    return _ak.swigluoai_and_mul(x, alpha, limit)


def swigluoai_and_mul_supports(x: Tensor, alpha: float = 1.702, limit: float = 7.0) -> bool:
    """GPU tensor (cuda/xpu), unit last-dim stride."""
    return _device_ok(x) and (x.is_contiguous() or x.stride(-1) == 1)
