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

The RoPE ops (``rotary_embedding``, ``rotary_embedding_query_only``, ``rotary_pos_emb``,
``fused_qk_norm_rope``) are in place: the kernels write the rotated query/key (q/k, qkv) into
their inputs, registered as in-place implementations (ircore clones for functional calls).
Their numerics differ from native's within the ops' tolerance: cos/sin are read in the cache's
own dtype and widened to fp32, every product and sum is fp32 (with FMA), and each output is
rounded once (native's standard format rounds cos/sin and every operation to the activations'
dtype; fused_qk_norm_rope's native also rounds the normalised heads before the rotation). What
they take:

- rotary_embedding / rotary_embedding_query_only: float32/float16/bfloat16 activations with a
  cache of float32 or the activations' dtype (vLLM's two; a bfloat16 cache with float16
  activations, say, runs native); neox and gptj; partial rotary with rope_dim_offset; the
  deepseek format with or without offsets; inverse; any head size and rotary_dim. Query/key whose
  token dimensions collapse to one stride with unit-stride channels (``[T, H*D]``, ``[T, H, D]``,
  views of one qkv buffer, any head stride) are rotated where they lie; other layouts on a
  contiguous copy written back. T = 0 does nothing. CPU checks every position (plus offset)
  against the cache's rows; CUDA does not (as vLLM's kernel: the core checks CPU calls only).
- rotary_pos_emb (Hugging Face's form): q and k 4-D, cos and sin 3-D, unsqueeze_dim naming one
  of q's first three dimensions (0, 1, 2 or -4, -3, -2: HF's ``(B, H, S, D)`` with 1 and
  ``(B, S, H, D)`` with 2); key heads may differ from query heads.
  Any strides (HF's transposed views are written in place, never copied) where the last
  dimension is unit-stride; cos/sin are read in full (both halves, no assumption that they are
  equal), broadcast over batch or sequence where they have size 1.
- fused_qk_norm_rope: a cache of float32 or qkv's dtype, weights of any float dtype (widened to
  fp32 once per call), both styles, any even head_dim, qkv of any layout
  (rows with one stride in place, others on a copy written back).
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
    "fused_add_rms_norm_invariant",
    "fused_add_rms_norm_supports",
    "fused_qk_norm_rope",
    "fused_qk_norm_rope_supports",
    "layer_norm",
    "layer_norm_invariant",
    "layer_norm_supports",
    "rms_norm",
    "rms_norm_gated",
    "rms_norm_gated_invariant",
    "rms_norm_gated_supports",
    "rms_norm_invariant",
    "rms_norm_supports",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_embedding_query_only_supports",
    "rotary_embedding_supports",
    "rotary_pos_emb",
    "rotary_pos_emb_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
    "static_quant_fp8",
    "static_quant_fp8_supports",
    "static_group_quant_fp8",
    "static_group_quant_fp8_supports",
    "dynamic_quant_fp8",
    "dynamic_quant_fp8_supports",
    "dynamic_group_quant_fp8",
    "dynamic_group_quant_fp8_supports",
    "rms_norm_static_fp8_quant",
    "rms_norm_static_fp8_quant_supports",
    "fused_add_rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant_supports",
    "rms_norm_dynamic_quant_fp8",
    "rms_norm_dynamic_quant_fp8_supports",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8_supports",
    "rms_norm_group_quant_fp8",
    "rms_norm_group_quant_fp8_supports",
    "fused_add_rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8_supports",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_static_quant_fp8_supports",
    "silu_and_mul_group_quant_fp8",
    "silu_and_mul_group_quant_fp8_supports",
    "quant_row_fits",
]

_F32 = torch.float32
_ops = torch.ops.ircore_vllm_c


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
#: RoPE in place (fp32 math, one rounding): query and key rotated where they lie.
rotary_embedding = torch.ops.ircore_vllm_c.rotary_embedding.default
#: As rotary_embedding, query only.
rotary_embedding_query_only = torch.ops.ircore_vllm_c.rotary_embedding_query_only.default
#: Hugging Face's apply_rotary_pos_emb in place, on strided (B, H, S, D) views.
rotary_pos_emb = torch.ops.ircore_vllm_c.rotary_pos_emb.default
#: Per-head RMSNorm of q and k, then RoPE, in place on the packed qkv (fp32 between the two).
fused_qk_norm_rope = torch.ops.ircore_vllm_c.fused_qk_norm_rope.default


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


# Batch invariance (ImplSpec.batch_invariant and invariant_fn, see provider.py). On CPU the
# default kernels are invariant as they are: they parallelise over rows only (at::parallel_for, a
# grain by hidden size) and reduce each row in one thread with a vector width fixed by the ISA.
# On CUDA they are not: rms_norm/fused_add_rms_norm pick vectors per thread and threads per row by
# the row count (csrc/cuda_ops.cu, pick_norm_config), and every norm's 16-byte vector path is
# chosen by pointer alignment, so the `<op>_invariant` variants below run the `<op>_invariant`
# CUDA ops instead (csrc/cuda_norm_invariant.cu: a launch fixed per hidden size, dtype and op,
# each row's reduction order independent of the grid and of alignment). The conformance kit
# checks the claims at 1, 3, 64 and 1000 rows on each device.
def rms_norm_invariant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> torch.Tensor:
    """rms_norm in batch-invariant mode: the launch fixed per hidden size on CUDA, the default
    kernel elsewhere (invariant as it is)."""
    if x.is_cuda:
        return _ops.rms_norm_invariant.default(x, weight, epsilon, variance_size)
    return rms_norm(x, weight, epsilon, variance_size)


def fused_add_rms_norm_invariant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`rms_norm_invariant`, in place like :data:`fused_add_rms_norm` (returns the two
    tensors it wrote, as the op's in-place form does)."""
    if x.is_cuda:
        _ops.fused_add_rms_norm_invariant.default(x, x_residual, weight, epsilon, variance_size)
    else:
        fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)
    return x, x_residual


def rms_norm_gated_invariant(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> torch.Tensor:
    """As :func:`rms_norm_invariant` (per row or per group: one block per group either way)."""
    if x.is_cuda:
        return _ops.rms_norm_gated_invariant.default(
            x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized
        )
    return rms_norm_gated(x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized)


def layer_norm_invariant(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> torch.Tensor:
    """As :func:`rms_norm_invariant`."""
    if x.is_cuda:
        return _ops.layer_norm_invariant.default(x, weight, bias, epsilon)
    return layer_norm(x, weight, bias, epsilon)


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


def rotary_embedding_supports(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> bool:
    """A cache of float32 or query's dtype, on a device whose kernels are loaded (see the module
    docstring)."""
    return (cos_sin_cache.dtype is query.dtype or cos_sin_cache.dtype is _F32) and (
        (query.is_cpu and kernels.CPU_LOADED) or (query.is_cuda and kernels.CUDA_LOADED)
    )


def rotary_embedding_query_only_supports(
    positions: torch.Tensor,
    query: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> bool:
    """As :func:`rotary_embedding_supports`."""
    return (cos_sin_cache.dtype is query.dtype or cos_sin_cache.dtype is _F32) and (
        (query.is_cpu and kernels.CPU_LOADED) or (query.is_cuda and kernels.CUDA_LOADED)
    )


def rotary_pos_emb_supports(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> bool:
    """4-D q and k, 3-D cos/sin, unsqueeze_dim naming one of q's first three dimensions (the
    heads), on a device whose kernels are loaded (see the module docstring)."""
    return bool(
        q.dim() == 4
        and k.dim() == 4
        and cos.dim() == 3
        and -4 <= unsqueeze_dim <= 2
        and ((q.is_cpu and kernels.CPU_LOADED) or (q.is_cuda and kernels.CUDA_LOADED))
    )


def fused_qk_norm_rope_supports(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> bool:
    """A cache of float32 or qkv's dtype, on a device whose kernels are loaded."""
    return (cos_sin_cache.dtype is qkv.dtype or cos_sin_cache.dtype is _F32) and (
        (qkv.is_cpu and kernels.CPU_LOADED) or (qkv.is_cuda and kernels.CUDA_LOADED)
    )


# ----------------------------------------------------------------------------------------------
# FP8 quantisation and the fused norm/activation + quant ops (ircore/ops/_quant.py, _norm_quant.py):
# CUDA kernels (csrc/cuda_quant.cu) and CPU kernels (csrc/cpu_quant_kernels.cpp, one pass per row,
# 3x to 20x faster than the natives on the CPU measured: README). What the kernels take, on top
# of the core's checks:
#
# - CPU: a CPU tensor x with the CPU kernels loaded, both fp8 dtypes (e4m3fn, and e4m3fnuz with
#   vLLM's maximum 224), any row length, every mode below;
# - CUDA: a CUDA tensor x with the CUDA kernels loaded, fp8_dtype torch.float8_e4m3fn only:
#   e4m3fnuz (vLLM's ROCm format, max 224) is declined, since the kernels cast with CUDA's e4m3
#   conversion, which has no fnuz encoding; the fused ops (norm or silu_and_mul first) keep the
#   row they quantise in registers, or past them in shared memory: a quantised row of at most
#   96 KiB (QUANT_ROW_BYTES: hidden <= 49152 in 16-bit dtypes, 24576 in float32; silu_and_mul
#   counts half of x's last dimension); the plain quant ops take any row;
# - on both, anything else the core accepts (float32/float16/bfloat16 x): any layout (rows with
#   one stride read in place, others from a contiguous copy), every static scale form (per
#   tensor, channel, token, group), per-token and per-tensor dynamic scales with scale_ub and
#   num_token_padding, groups of any size (a ragged last group), row- or column-major scales with
#   any scale_alignment, use_ue8m0, a norm weight of any float dtype or none.
#
# The predicates read a dtype argument (fp8_dtype) and, for the fused ops, a size: they are not
# cached by call signature (provider.py), and run in one expression on every eager call.

_E4M3FN = torch.float8_e4m3fn
_E4M3FNUZ = torch.float8_e4m3fnuz
#: The longest quantised row the fused kernels keep in shared memory (bytes; cuda_quant.h's
#: kMaxRowBytes).
QUANT_ROW_BYTES = 96 * 1024

static_quant_fp8 = torch.ops.ircore_vllm_c.static_quant_fp8.default
static_group_quant_fp8 = torch.ops.ircore_vllm_c.static_group_quant_fp8.default
dynamic_quant_fp8 = torch.ops.ircore_vllm_c.dynamic_quant_fp8.default
dynamic_group_quant_fp8 = torch.ops.ircore_vllm_c.dynamic_group_quant_fp8.default
rms_norm_static_fp8_quant = torch.ops.ircore_vllm_c.rms_norm_static_fp8_quant.default
fused_add_rms_norm_static_fp8_quant = torch.ops.ircore_vllm_c.fused_add_rms_norm_static_fp8_quant.default
rms_norm_dynamic_quant_fp8 = torch.ops.ircore_vllm_c.rms_norm_dynamic_quant_fp8.default
fused_add_rms_norm_dynamic_quant_fp8 = torch.ops.ircore_vllm_c.fused_add_rms_norm_dynamic_quant_fp8.default
rms_norm_group_quant_fp8 = torch.ops.ircore_vllm_c.rms_norm_group_quant_fp8.default
fused_add_rms_norm_group_quant_fp8 = torch.ops.ircore_vllm_c.fused_add_rms_norm_group_quant_fp8.default
silu_and_mul_static_quant_fp8 = torch.ops.ircore_vllm_c.silu_and_mul_static_quant_fp8.default
silu_and_mul_group_quant_fp8 = torch.ops.ircore_vllm_c.silu_and_mul_group_quant_fp8.default


def quant_row_fits(x: torch.Tensor, halve: bool = False) -> bool:
    """Whether a fused kernel can keep x's quantised row (half of it for silu_and_mul) in shared
    memory: the device-independent half of the fused ops' predicates."""
    return (x.shape[-1] >> halve) * x.element_size() <= QUANT_ROW_BYTES


def static_quant_fp8_supports(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """Both fp8 dtypes on CPU, e4m3fn on CUDA (see the block comment above)."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED)
    )


def static_group_quant_fp8_supports(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """Both fp8 dtypes on CPU, e4m3fn on CUDA."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED)
    )


def dynamic_quant_fp8_supports(
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """Both fp8 dtypes on CPU, e4m3fn on CUDA; per token or per tensor (two passes)."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED)
    )


def dynamic_group_quant_fp8_supports(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """Both fp8 dtypes on CPU, e4m3fn on CUDA; any group size and scale layout."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED)
    )


def rms_norm_static_fp8_quant_supports(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, a row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x))
    )


def fused_add_rms_norm_static_fp8_quant_supports(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, a row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x))
    )


def rms_norm_dynamic_quant_fp8_supports(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, a row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x))
    )


def fused_add_rms_norm_dynamic_quant_fp8_supports(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, a row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x))
    )


def rms_norm_group_quant_fp8_supports(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, a row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x))
    )


def fused_add_rms_norm_group_quant_fp8_supports(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, a row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x))
    )


def silu_and_mul_static_quant_fp8_supports(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, an output row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x, True))
    )


def silu_and_mul_group_quant_fp8_supports(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """Both fp8 dtypes on CPU; e4m3fn on CUDA, an output row of at most QUANT_ROW_BYTES."""
    return bool(
        (x.is_cpu and kernels.CPU_LOADED and (fp8_dtype is _E4M3FN or fp8_dtype is _E4M3FNUZ))
        or (fp8_dtype is _E4M3FN and x.is_cuda and kernels.CUDA_LOADED and quant_row_fits(x, True))
    )
