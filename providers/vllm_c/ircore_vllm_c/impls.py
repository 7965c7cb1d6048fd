"""The implementations registered with ircore, and the predicates saying which calls they take.

Each implementation is this provider's compiled torch op (``torch.ops.ircore_vllm_c.*``, loaded by
:func:`ircore_vllm_c.kernels.load_kernels` before ircore imports this module), whose schema is the
op's (``fused_add_rms_norm``'s the in-place one: ``Tensor(a!) x, Tensor(b!) residual -> ()``).

The predicates run on every eager call, after the core's own argument check (so x is a
float32/float16/bfloat16 tensor with a non-empty last dimension, the weight is 1-D of size
hidden on x's device, variance_size is in range, the residual matches x, and silu_and_mul's
last dimension is even). On top of that, what the kernels handle:

- device: CPU always (once loaded); CUDA when the CUDA kernels are loaded;
- dtype: float32, float16, bfloat16; weight (when given) of x's dtype or float32, 1-D, of
  size hidden;
- any layout: rows with one row stride are read (and written, in place) directly, anything
  else goes through a contiguous copy inside the op; any hidden size >= 1 (16-byte vector paths
  where aligned, element-wise paths elsewhere);
- variance_size: None or 1 <= variance_size <= hidden;
- silu_and_mul: an even last dimension;
- rms_norm_gated: a weight of x's dtype or float32, any group_size the core accepts (a divisor
  of hidden), gate of any layout (as x);
- layer_norm: weight and bias of x's dtype (the core's own rule), either or both None;
- gelu_and_mul, mul_and_silu, fatrelu_and_mul, swigluoai_and_mul: any input the core accepts
  (an even last dimension; approximate "none" or "tanh"; threshold and alpha not NaN, limit
  >= 0), on a device whose kernels are loaded. mul_and_silu's choice is cached by call signature; the
  other three ops read argument values (a str, floats) and are not, so their one-line
  predicates run on every eager call.
"""

import torch

from . import kernels

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

_F32 = torch.float32


# The kernels are the compiled torch ops themselves (loaded before this module is imported): ircore
# calls them directly in eager mode, and compiled graphs hold them as they are, with the op's fake.
#: RMSNorm by the compiled kernel (fp32 math, one rounding).
rms_norm = torch.ops.ircore_vllm_c.rms_norm.default
#: In place, like vLLM: the residual sum goes into ``x_residual``, the output into ``x``.
fused_add_rms_norm = torch.ops.ircore_vllm_c.fused_add_rms_norm.default
#: ``silu(x[..., :d]) * x[..., d:]`` by the compiled kernel (fp32 math).
silu_and_mul = torch.ops.ircore_vllm_c.silu_and_mul.default
#: Gated RMSNorm (the op's three forms) by the compiled kernel, per row or per group.
rms_norm_gated = torch.ops.ircore_vllm_c.rms_norm_gated.default
#: LayerNorm (mean, then the variance of x - mean) by the compiled kernel.
layer_norm = torch.ops.ircore_vllm_c.layer_norm.default
#: ``gelu(x[..., :d], approximate) * x[..., d:]`` by the compiled kernel (fp32 math, one rounding).
gelu_and_mul = torch.ops.ircore_vllm_c.gelu_and_mul.default
#: ``x[..., :d] * silu(x[..., d:])`` by the compiled kernel.
mul_and_silu = torch.ops.ircore_vllm_c.mul_and_silu.default
#: ``threshold(x[..., :d]) * x[..., d:]`` by the compiled kernel.
fatrelu_and_mul = torch.ops.ircore_vllm_c.fatrelu_and_mul.default
#: GPT-OSS's clamped SwiGLU on interleaved (gate, up) pairs by the compiled kernel.
swigluoai_and_mul = torch.ops.ircore_vllm_c.swigluoai_and_mul.default


# The predicates are written out in one expression each: they run on every eager call.
def rms_norm_supports(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """True for calls the kernel handles (see the module docstring)."""
    return (weight is None or weight.dtype is x.dtype or weight.dtype is _F32) and (
        (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)
    )


def fused_add_rms_norm_supports(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """As :func:`rms_norm_supports` (the core has checked the residual against x)."""
    return (weight is None or weight.dtype is x.dtype or weight.dtype is _F32) and (
        (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)
    )


def silu_and_mul_supports(x: torch.Tensor) -> bool:
    """Any input the core accepts, on a device whose kernels are loaded."""
    return (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)


def rms_norm_gated_supports(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> bool:
    """A weight of x's dtype or float32, on a device whose kernels are loaded."""
    return (weight.dtype is x.dtype or weight.dtype is _F32) and (
        (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)
    )


def layer_norm_supports(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> bool:
    """Any input the core accepts, on a device whose kernels are loaded."""
    return (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)


def gelu_and_mul_supports(x: torch.Tensor, approximate: str = "none") -> bool:
    """Any input the core accepts, on a device whose kernels are loaded."""
    return (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)


def mul_and_silu_supports(x: torch.Tensor) -> bool:
    """Any input the core accepts, on a device whose kernels are loaded."""
    return (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)


def fatrelu_and_mul_supports(x: torch.Tensor, threshold: float = 0.0) -> bool:
    """Any input the core accepts, on a device whose kernels are loaded."""
    return (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)


def swigluoai_and_mul_supports(x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> bool:
    """Any input the core accepts, on a device whose kernels are loaded."""
    return (x.is_cpu and kernels.CPU_LOADED) or (x.is_cuda and kernels.CUDA_LOADED)
