"""The functions this provider registers with ircore, and their ``supports_args`` predicates.

Each implementation is the kernel launch, with exactly the native op's signature (the core
compares the torch schema its annotations imply; ``Tensor | None`` is the same annotation as
``Optional[Tensor]``). The core calls it on real tensors only: from eager dispatch, and from the
op it builds for compiled graphs (``torch.ops.ircore_triton.<op>``, see ircore._torch_ops).
Predicates run on every eager dispatch, after the core's argument check (see below).
No ``from __future__ import annotations`` here: annotations stay real objects.
"""

import os

import torch
from torch import Tensor

from . import act_kernels as _ak
from . import fp8_matmul_kernels as _mk
from . import kernels as _k
from . import norm_kernels as _nk
from . import quant_kernels as _qk
from . import rope_kernels as _rk

__all__ = [
    "fatrelu_and_mul",
    "fatrelu_and_mul_supports",
    "gelu_and_mul",
    "gelu_and_mul_supports",
    "mul_and_silu",
    "mul_and_silu_supports",
    "swigluoai_and_mul",
    "swigluoai_and_mul_supports",
    "block_scaled_mm_fp8",
    "block_scaled_mm_fp8_invariant",
    "block_scaled_mm_fp8_supports",
    "fused_add_rms_norm",
    "fused_add_rms_norm_functional",
    "fused_add_rms_norm_invariant",
    "fused_add_rms_norm_supports",
    "fused_qk_norm_rope",
    "fused_qk_norm_rope_supports",
    "layer_norm",
    "layer_norm_supports",
    "rms_norm",
    "rms_norm_gated",
    "rms_norm_gated_supports",
    "rms_norm_gated_invariant",
    "rms_norm_invariant",
    "rms_norm_supports",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_embedding_query_only_supports",
    "rotary_embedding_supports",
    "rotary_pos_emb",
    "rotary_pos_emb_supports",
    "scaled_mm_fp8",
    "scaled_mm_fp8_invariant",
    "scaled_mm_fp8_supports",
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
    "rms_norm_static_fp8_quant_invariant",
    "fused_add_rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant_supports",
    "fused_add_rms_norm_static_fp8_quant_invariant",
    "rms_norm_dynamic_quant_fp8",
    "rms_norm_dynamic_quant_fp8_supports",
    "rms_norm_dynamic_quant_fp8_invariant",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8_supports",
    "fused_add_rms_norm_dynamic_quant_fp8_invariant",
    "rms_norm_group_quant_fp8",
    "rms_norm_group_quant_fp8_supports",
    "rms_norm_group_quant_fp8_invariant",
    "fused_add_rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8_supports",
    "fused_add_rms_norm_group_quant_fp8_invariant",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_static_quant_fp8_supports",
    "silu_and_mul_group_quant_fp8",
    "silu_and_mul_group_quant_fp8_supports",
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
# fp8 matmuls: e4m3fn on NVIDIA GPUs with fp8 tensor cores (sm_89+; Triton's interpreter in tests),
# e4m3fnuz on ROCm. Any M, N, K and strides (the kernels mask and address by strides).
_FP8_OK = (
    (torch.float8_e4m3fnuz,)
    if torch.version.hip
    else (torch.float8_e4m3fn,)
    if _INTERPRET or not torch.cuda.is_available() or torch.cuda.get_device_capability() >= (8, 9)
    else ()
)


def block_scaled_mm_fp8(
    a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, block_size: list[int], out_dtype: torch.dtype
) -> Tensor:
    """Block-scaled fp8 matmul by the Triton kernel (one K tile per activation group)."""
    return _mk.block_scaled_mm_fp8(a, b, scale_a, scale_b, block_size, out_dtype)


def block_scaled_mm_fp8_invariant(
    a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, block_size: list[int], out_dtype: torch.dtype
) -> Tensor:
    """block_scaled_mm_fp8 with one launch config for every M (batch-invariant mode)."""
    return _mk.block_scaled_mm_fp8(a, b, scale_a, scale_b, block_size, out_dtype, _mk.INVARIANT_BLOCK)


def block_scaled_mm_fp8_supports(
    a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, block_size: list[int], out_dtype: torch.dtype
) -> bool:
    """A GPU fp8 type (see ``_FP8_OK``) and a group width ``block_size[1]`` that is a power of two in
    [16, 256] (one K tile per group; ``tl.dot`` needs K tiles of at least 16)."""
    bk = block_size[1]
    return a.dtype in _FP8_OK and 16 <= bk <= 256 and not bk & (bk - 1) and _device_ok(a)


def scaled_mm_fp8(
    a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, out_dtype: torch.dtype, bias: Tensor | None = None
) -> Tensor:
    """Per-tensor / per-row / per-column scaled fp8 matmul by the Triton kernel."""
    return _mk.scaled_mm_fp8(a, b, scale_a, scale_b, out_dtype, bias)


def scaled_mm_fp8_invariant(
    a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, out_dtype: torch.dtype, bias: Tensor | None = None
) -> Tensor:
    """scaled_mm_fp8 with its tiles fixed for every M (batch-invariant mode)."""
    return _mk.scaled_mm_fp8(a, b, scale_a, scale_b, out_dtype, bias, invariant=True)


def scaled_mm_fp8_supports(
    a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, out_dtype: torch.dtype, bias: Tensor | None = None
) -> bool:
    """A GPU fp8 type (see ``_FP8_OK``); any shape and strides."""
    return a.dtype in _FP8_OK and _device_ok(a)
# ---------------------------------------------------------------------- position ops (rope_kernels)
# In place (the ops declare query/key, q/k and qkv inplace_args; ircore clones for callers that
# must not see them change). The predicates run after the ops' own checks (dtypes, shapes,
# devices, positions within the cache on CPU) and test what the kernels add: a Triton device and
# strides the kernels can address without a copy (unit channel stride; token dims that collapse
# to one stride). Those depend on strides, not only on the call signature: not cached by it.


def rotary_embedding(
    positions: Tensor,
    query: Tensor,
    key: Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    offsets: Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """In place: rotates ``query`` and ``key`` (fp32 maths, one rounding); returns them."""
    _rk.rotary_embedding_(positions, query, key, head_size, rotary_dim, cos_sin_cache, is_neox_style,
                          offsets, cos_sin_format, inverse, rope_dim_offset)  # fmt: skip
    return query, key


def rotary_embedding_supports(
    positions: Tensor,
    query: Tensor,
    key: Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    offsets: Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> bool:
    """GPU tensors; query and key (distinct tensors) addressable as [tokens, heads, head_size]
    with unit channel stride (:func:`ircore_triton.rope_kernels.head_layout`)."""
    tokens = positions.numel()
    return (
        key is not query
        and _device_ok(query)
        and _rk.head_layout(query, tokens, head_size) is not None
        and _rk.head_layout(key, tokens, head_size) is not None
    )


def rotary_embedding_query_only(
    positions: Tensor,
    query: Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    offsets: Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> Tensor:
    """In place: rotates ``query`` by the same kernel as :func:`rotary_embedding` (so bit for bit
    its query output); returns it."""
    _rk.rotary_embedding_(positions, query, None, head_size, rotary_dim, cos_sin_cache, is_neox_style,
                          offsets, cos_sin_format, inverse, rope_dim_offset)  # fmt: skip
    return query


def rotary_embedding_query_only_supports(
    positions: Tensor,
    query: Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    offsets: Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> bool:
    """As :func:`rotary_embedding_supports`, for query alone."""
    return _device_ok(query) and _rk.head_layout(query, positions.numel(), head_size) is not None


def rotary_pos_emb(
    q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1
) -> tuple[Tensor, Tensor]:
    """In place: Hugging Face's ``apply_rotary_pos_emb`` into ``q`` and ``k`` where they lie (HF's
    transposed views included: no contiguous copy); fp32 maths, one rounding; returns them."""
    _rk.rotary_pos_emb_(q, k, cos, sin, unsqueeze_dim)
    return q, k


def rotary_pos_emb_supports(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> bool:
    """GPU tensors; q and k distinct, 4-D, with unit channel stride and the same sizes but for
    the heads; cos/sin unsqueezed at a dim that lands on one of q's first three (HF's (B, H, S, D)
    with ``unsqueeze_dim=1``, or (B, S, H, D) with 2) with unit channel stride."""
    if q.dim() != 4 or k.dim() != 4 or k is q or not _device_ok(q):
        return False
    hd = _rk.hf_head_dim(q, cos, unsqueeze_dim)
    return (
        hd >= 0
        and all(q.shape[d] == k.shape[d] for d in range(3) if d != hd)
        and q.stride(-1) == 1
        and k.stride(-1) == 1
        and cos.stride(-1) == 1
        and sin.stride(-1) == 1
    )


def fused_qk_norm_rope(
    qkv: Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: Tensor,
    k_weight: Tensor,
    cos_sin_cache: Tensor,
    is_neox: bool,
    position_ids: Tensor,
) -> Tensor:
    """In place: per-head RMSNorm then RoPE of qkv's q and k heads in one pass (fp32, one
    rounding; v untouched); returns ``qkv``."""
    _rk.fused_qk_norm_rope_(qkv, num_heads_q, num_heads_k, head_dim, eps, q_weight, k_weight,
                            cos_sin_cache, is_neox, position_ids)  # fmt: skip
    return qkv


def fused_qk_norm_rope_supports(
    qkv: Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: Tensor,
    k_weight: Tensor,
    cos_sin_cache: Tensor,
    is_neox: bool,
    position_ids: Tensor,
) -> bool:
    """GPU tensor; qkv's token dims collapse to one row stride, unit channel stride."""
    return _device_ok(qkv) and _rk.head_layout(qkv, position_ids.numel(), head_dim) is not None


def rms_norm_invariant(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """rms_norm launched with a configuration fixed per hidden size (batch-invariant mode)."""
    from . import invariant_kernels

    return invariant_kernels.rms_norm(x, weight, epsilon, variance_size)


def rms_norm_gated_invariant(
    x: Tensor,
    gate: Tensor,
    weight: Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> Tensor:
    """rms_norm_gated launched with its warps fixed per group size (batch-invariant mode)."""
    from . import invariant_kernels

    args = (group_size, norm_before_gate, round_normalized)
    return invariant_kernels.rms_norm_gated(x, gate, weight, epsilon, *args)


def fused_add_rms_norm_invariant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """In place, as :func:`fused_add_rms_norm`, with a configuration fixed per hidden size."""
    from . import invariant_kernels

    invariant_kernels.fused_add_rms_norm_(x, x_residual, weight, epsilon, variance_size)
    return x, x_residual


# ---------------------------------------------------------------------- fp8 quant (quant_kernels)
# The quant ops and the fused RMSNorm / SiLU-and-mul + quant ops: one program per row, the row in
# registers (at most quant_kernels.MAX_ROW_BLOCK elements as [groups, group width] padded to
# powers of two), or split (the static and plain/silu group forms) or walked in chunks (the norm
# forms) where the autotune picks it. The predicates run after the ops' own checks (scale shapes
# that broadcast, group_shape (1, g), scale_alignment, even silu width, weight and residual like
# x) and test what the kernels add: a Triton device, an e4m3 type (_QUANT_FP8_OK), unit last-dim
# stride of x (and the residual), and the row block. Weights, scales and scale_ub of any float
# dtype (read in fp32). They read the fp8_dtype and group_shape arguments: not cached by signature.
# Both fp8 types on every device: the kernel encodes by the bits where the hardware's cast is not
# used (quant_kernels._encode_fp8), so e4m3fnuz (vLLM's 224) runs on NVIDIA GPUs as on ROCm.
_QUANT_FP8_OK = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def _quant_ok(x: Tensor, fp8_dtype: torch.dtype, k: int, group: int | None = None) -> bool:
    return (
        fp8_dtype in _QUANT_FP8_OK
        and _qk.row_block(k, group) <= _qk.MAX_ROW_BLOCK
        and _device_ok(x)
        and _rows_ok(x)
    )


def static_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """``clamp(x * (1/scale), ±fp8_max)`` in fp8 by the Triton kernel (any static scale layout)."""
    return _qk.static_quant_fp8(x, scale, fp8_dtype, num_token_padding)


def static_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """GPU tensor, unit last-dim stride, a Triton fp8 type, a row of at most MAX_ROW_BLOCK."""
    return _quant_ok(x, fp8_dtype, x.shape[-1])


def static_group_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """The same kernel as :func:`static_quant_fp8` (the scale addressed per row and column group)."""
    return _qk.static_quant_fp8(x, scale, fp8_dtype, num_token_padding)


def static_group_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """As :func:`static_quant_fp8_supports`."""
    return _quant_ok(x, fp8_dtype, x.shape[-1])


def dynamic_quant_fp8(
    x: Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Dynamic fp8 quant by the Triton kernel: per token one launch, per tensor two."""
    return _qk.dynamic_quant_fp8(x, per_token, fp8_dtype, scale_ub, num_token_padding)


def dynamic_quant_fp8_supports(
    x: Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """GPU tensor, unit last-dim stride, a Triton fp8 type, a row of at most MAX_ROW_BLOCK."""
    return _quant_ok(x, fp8_dtype, x.shape[-1])


def dynamic_group_quant_fp8(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """Per-group dynamic fp8 quant by the Triton kernel; scales in the op's layout."""
    return _qk.dynamic_group_quant_fp8(x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)


def dynamic_group_quant_fp8_supports(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """GPU tensor, unit last-dim stride, a Triton fp8 type, any group size whose padded row block
    (``next_pow2(groups) * next_pow2(g)``) is at most MAX_ROW_BLOCK."""
    return _quant_ok(x, fp8_dtype, x.shape[-1], int(group_shape[-1]))


def rms_norm_static_fp8_quant(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> Tensor:
    """RMSNorm (fp32, rounded to x's dtype) then static quant, one pass over the row."""
    return _qk.rms_norm_static_fp8_quant(x, weight, epsilon, scale, fp8_dtype, num_token_padding)


def rms_norm_static_fp8_quant_supports(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> bool:
    """GPU tensor, unit last-dim stride, a Triton fp8 type, a row of at most MAX_ROW_BLOCK."""
    return _quant_ok(x, fp8_dtype, x.shape[-1])


def fused_add_rms_norm_static_fp8_quant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Add (rounded), RMSNorm and static quant in one pass: ``(q, residual)``, a new residual."""
    return _qk.fused_add_rms_norm_static_fp8_quant(
        x, x_residual, weight, epsilon, scale, fp8_dtype, num_token_padding
    )


def fused_add_rms_norm_static_fp8_quant_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> bool:
    """As :func:`rms_norm_static_fp8_quant_supports`, and the residual's last-dim stride 1."""
    return _quant_ok(x, fp8_dtype, x.shape[-1]) and _rows_ok(x_residual)


def rms_norm_dynamic_quant_fp8(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """RMSNorm then dynamic quant: one pass per token, two launches per tensor."""
    return _qk.rms_norm_dynamic_quant_fp8(
        x, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding
    )


def rms_norm_dynamic_quant_fp8_supports(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """GPU tensor, unit last-dim stride, a Triton fp8 type, a row of at most MAX_ROW_BLOCK."""
    return _quant_ok(x, fp8_dtype, x.shape[-1])


def fused_add_rms_norm_dynamic_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Add, RMSNorm and dynamic quant: ``(q, scale, residual)``."""
    return _qk.fused_add_rms_norm_dynamic_quant_fp8(
        x, x_residual, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding
    )


def fused_add_rms_norm_dynamic_quant_fp8_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """As :func:`rms_norm_dynamic_quant_fp8_supports`, and the residual's last-dim stride 1."""
    return _quant_ok(x, fp8_dtype, x.shape[-1]) and _rows_ok(x_residual)


def rms_norm_group_quant_fp8(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """RMSNorm then per-group quant in one pass over the row."""
    return _qk.rms_norm_group_quant_fp8(
        x, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


def rms_norm_group_quant_fp8_supports(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """As :func:`dynamic_group_quant_fp8_supports`."""
    return _quant_ok(x, fp8_dtype, x.shape[-1], int(group_shape[-1]))


def fused_add_rms_norm_group_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Add, RMSNorm and per-group quant in one pass: ``(q, scales, residual)``."""
    return _qk.fused_add_rms_norm_group_quant_fp8(
        x, x_residual, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


def fused_add_rms_norm_group_quant_fp8_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """As :func:`dynamic_group_quant_fp8_supports`, and the residual's last-dim stride 1."""
    return _quant_ok(x, fp8_dtype, x.shape[-1], int(group_shape[-1])) and _rows_ok(x_residual)


def silu_and_mul_static_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """``silu(gate) * up`` (rounded to x's dtype) then static quant, one pass."""
    return _qk.silu_and_mul_static_quant_fp8(x, scale, fp8_dtype, num_token_padding)


def silu_and_mul_static_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """GPU tensor, unit last-dim stride, a Triton fp8 type, an output row (half of x's) of at most
    MAX_ROW_BLOCK."""
    return _quant_ok(x, fp8_dtype, x.shape[-1] // 2)


def silu_and_mul_group_quant_fp8(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """``silu(gate) * up`` then per-group quant, one pass."""
    return _qk.silu_and_mul_group_quant_fp8(
        x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


def silu_and_mul_group_quant_fp8_supports(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """As :func:`dynamic_group_quant_fp8_supports`, on the output row (half of x's)."""
    return _quant_ok(x, fp8_dtype, x.shape[-1] // 2, int(group_shape[-1]))


# The fused norm + quant ops in batch-invariant mode: their default launch picks, per row-count
# bucket, between the whole row and a walk in chunks whose sum of squares has another rounding
# order (quant_kernels.norm_candidates); these variants take the whole row, fixed per hidden size.
def rms_norm_static_fp8_quant_invariant(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> Tensor:
    """rms_norm_static_fp8_quant with the whole row in one program (batch-invariant mode)."""
    cfg = _qk.whole_row(x)
    return _qk.rms_norm_static_fp8_quant(x, weight, epsilon, scale, fp8_dtype, num_token_padding, cfg)


def fused_add_rms_norm_static_fp8_quant_invariant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """fused_add_rms_norm_static_fp8_quant with the whole row in one program (batch-invariant mode)."""
    return _qk.fused_add_rms_norm_static_fp8_quant(
        x, x_residual, weight, epsilon, scale, fp8_dtype, num_token_padding, _qk.whole_row(x)
    )


def rms_norm_dynamic_quant_fp8_invariant(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """rms_norm_dynamic_quant_fp8 with the whole row in one program (batch-invariant mode)."""
    return _qk.rms_norm_dynamic_quant_fp8(
        x, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding, _qk.whole_row(x)
    )


def fused_add_rms_norm_dynamic_quant_fp8_invariant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """fused_add_rms_norm_dynamic_quant_fp8 with the whole row in one program (batch-invariant mode)."""
    return _qk.fused_add_rms_norm_dynamic_quant_fp8(
        x, x_residual, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding, _qk.whole_row(x)
    )


def rms_norm_group_quant_fp8_invariant(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """rms_norm_group_quant_fp8 with the whole row in one program (batch-invariant mode)."""
    cfg = _qk.whole_row(x, int(group_shape[-1]))
    return _qk.rms_norm_group_quant_fp8(
        x, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment, cfg
    )


def fused_add_rms_norm_group_quant_fp8_invariant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """fused_add_rms_norm_group_quant_fp8 with the whole row in one program (batch-invariant mode)."""
    cfg = _qk.whole_row(x, int(group_shape[-1]))
    return _qk.fused_add_rms_norm_group_quant_fp8(
        x, x_residual, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment, cfg
    )
