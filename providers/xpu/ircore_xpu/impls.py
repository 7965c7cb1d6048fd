"""The functions this provider registers, and their ``supports_args`` predicates.

Imported by ircore only after :func:`ircore_xpu.provider.ircore_check_platform` passed, so
``torch.ops._C.*`` are vllm-xpu-kernels' XPU ops here. What the adapter has to get right, from
the kernels' sources (``csrc/layernorm.cpp``, ``activation.cpp``):

- ``rms_norm`` takes inputs of rank 2, 3 or 4 with any row strides (rows are addressed through
  ``stride(-2..-4)``; a non-unit last stride is made contiguous by the op) and writes a
  contiguous ``result``: other ranks are flattened first, which the predicate makes sure is a
  view. fp32, fp16 and bf16; the weight must have x's dtype and be contiguous.
- ``fused_add_rms_norm`` (in place: ``residual <- x + residual``, ``x <- norm(residual)``)
  checks nothing: it addresses the input's rows by ``stride(-2)`` with a unit last stride and
  the residual's rows at ``row * hidden``, so x must be 2-D with unit last stride or contiguous,
  and the residual contiguous.
- ``silu_and_mul`` reads contiguous rows with vector loads sized from the hidden size alone: the
  input must be contiguous and 16-byte aligned (an unaligned input is copied first).
- ``rotary_embedding`` (in place; also ``rotary_embedding_query_only`` with ``key=None``) has
  the 6-argument schema ``(positions, query, key, head_size, cos_sin_cache, is_neox)``: no
  ``rope_dim_offset``, ``inverse``, ``offsets`` or deepseek format, so the predicates take the
  standard format with ``rope_dim_offset == 0`` and ``inverse`` off (``rotary_dim`` is the cache's
  width). The kernel (``csrc/pos_encoding_kernels.cpp``) wants positions 1-D or 2-D with the
  activations' leading sizes equal to positions' shape, reads positions flat, puts token ``t`` at
  ``t * stride(positions.dim() - 1)`` (so a ``[B, S, ...]`` activation needs ``stride(0) ==
  S * stride(1)``), heads at ``query.stride(-2)`` for ``[..., heads, head_size]`` queries and at
  ``head_size`` otherwise -- for the key as well, so both must agree -- with unit channel stride;
  the cache is read as contiguous rows of the query's dtype.
- The gated activations (``csrc/activation.cpp``): ``mul_and_silu``, ``gelu_and_mul`` (erf;
  ``gelu_tanh_and_mul`` for ``approximate="tanh"``), ``fatrelu_and_mul`` (``threshold`` passed as
  the kernel's float) read contiguous rows with vector loads of up to 16 bytes, like
  ``silu_and_mul`` (an unaligned input is copied first); ``swigluoai_and_mul`` reads interleaved
  pairs with scalar loads. They round ``act(a)`` to the input's dtype before the product (two
  roundings where native rounds once: within the ops' tolerances). Releases without one of these
  ops still serve the others: its predicate then declines every call.
- ``fused_qk_norm_rope`` (``csrc/fused_qknorm_rope.cpp``, in place, the op's own schema):
  qkv and position_ids contiguous (any number of token dimensions: passed as their
  ``[tokens, width]`` and ``[tokens]`` views), fp16/bf16 qkv with weights of its dtype, contiguous;
  the cache contiguous in fp32/fp16/bf16; head_dim 64, 128, 256 or 512. RMSNorm and RoPE in fp32,
  rounded once (native rounds after the norm and after each RoPE operation: within the op's
  tolerance). Optional per release, like the activations.
- fp8 quant (``csrc/quantization/fp8/fp8_quant.cpp``, read at commit 004c5c1; optional per
  release): e4m3fn only (the kernels define no e4m3fnuz), maximum 448 as the op's, ``x * (1 /
  scale)`` clamped before the cast, float32 scales. ``static_quant_fp8`` with a per-tensor
  scale through ``static_scaled_fp8_quant`` (rows at ``stride(-2)`` with a unit last stride:
  2-D with any row stride, or contiguous); per-token, per-channel and group scales declined
  (the 1-D ones need the release's group_shape argument, and its multi-group vector path passes
  ``get_local_range(gj)`` for ``gj > 0``). ``dynamic_quant_fp8`` per token through
  ``dynamic_per_token_scaled_fp8_quant`` (contiguous; its scale is the op's:
  ``max(min(amax, ub) / 448, 1 / (448 * 512))``); per tensor with the op's scale from one torch
  reduction, then the static kernel (``dynamic_scaled_fp8_quant`` floors no scale: an all-zero
  tensor gives scale 0 and, through ``fmin``/``fmax`` of NaN, 448 where the op gives 0).
  ``dynamic_group_quant_fp8`` through ``per_token_group_fp8_quant`` with ``eps = 0``
  (contiguous, groups dividing K, a multiple of 4 elements; row-major scales, or column-major on
  2-D): not with ``use_ue8m0`` (the kernel rounds to a power of two after the floor, the op
  before: a zero group differs) nor ``scale_alignment > 1``.
- The fused norm/activation + quant kernels (``csrc/layernorm_quant.cpp``, ``activation.cpp``,
  ``quantization/fused_kernels/fused_silu_mul_block_quant.cpp``, read at 4543b58; optional per
  release): e4m3fn only, 448 and the ``1 / (448 * 512)`` floor, norms in fp32 (the weight
  promoted), a weight of the input's dtype that is not optional (ones for ``None``). The static
  norms read rows at ``stride(-2)`` in aligned vectors; the per-token one contiguous rows; the
  per-block one rows at ``stride(0)`` (contiguous before #397) with 16-byte vectors and a group's
  amax reduced over ``g / vec`` sub-group lanes by an xor butterfly (a power of two up to 32),
  ue8m0 after the floor (declined); the residual forms add into ``residual`` in place at ``row *
  hidden`` (a contiguous copy here, returned as the op's residual). ``silu_and_mul_quant``:
  fp16/bf16, contiguous. ``silu_and_mul_per_block_quant``'s adapter is written but not registered
  (README).
- Releases before the optional weight (``Tensor weight``) get a cached tensor of ones for
  ``weight=None``. Empty inputs never reach a kernel.

The implementations run only on real tensors (compiled graphs hold the op ircore builds around
each of them; the in-place one's declares its writes), so they may read data pointers; the
predicates also run at compile time on fake tensors and read only metadata.
"""

import torch
from torch import Tensor

import ircore
from ircore.kit import unit_weight
from ircore.ops._quant import E4M3FN, fp8_max, min_scale

__all__ = [
    "FUSED",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8_supports",
    "fused_add_rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8_fake",
    "fused_add_rms_norm_group_quant_fp8_supports",
    "fused_add_rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant_supports",
    "rms_norm_dynamic_quant_fp8",
    "rms_norm_dynamic_quant_fp8_supports",
    "rms_norm_group_quant_fp8",
    "rms_norm_group_quant_fp8_fake",
    "rms_norm_group_quant_fp8_supports",
    "rms_norm_static_fp8_quant",
    "rms_norm_static_fp8_quant_supports",
    "silu_and_mul_group_quant_fp8",
    "silu_and_mul_group_quant_fp8_fake",
    "silu_and_mul_group_quant_fp8_supports",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_static_quant_fp8_supports",
    "dynamic_group_quant_fp8",
    "dynamic_group_quant_fp8_fake",
    "dynamic_group_quant_fp8_supports",
    "dynamic_quant_fp8",
    "dynamic_quant_fp8_supports",
    "static_quant_fp8",
    "static_quant_fp8_supports",
    "fatrelu_and_mul",
    "fatrelu_and_mul_supports",
    "fused_add_rms_norm",
    "fused_add_rms_norm_supports",
    "fused_qk_norm_rope",
    "fused_qk_norm_rope_supports",
    "gelu_and_mul",
    "gelu_and_mul_supports",
    "mul_and_silu",
    "mul_and_silu_supports",
    "rms_norm",
    "rms_norm_supports",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_embedding_query_only_supports",
    "rotary_embedding_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
    "swigluoai_and_mul",
    "swigluoai_and_mul_supports",
]

# The platform's tensors (``xpu``; ``cpu`` under a simulated platform in tests, where a stand-in
# of vllm-xpu-kernels registers the same ops for the CPU).
_DEVICE = ircore.current_platform().device_type
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_rms_norm = torch.ops._C.rms_norm.default
_fused_add_rms_norm = torch.ops._C.fused_add_rms_norm.default
_silu_and_mul = torch.ops._C.silu_and_mul.default
_rotary_embedding = torch.ops._C.rotary_embedding.default


def _optional(name: str) -> torch._ops.OpOverload | None:
    """``torch.ops._C.<name>`` if this release has it with an XPU kernel (the platform check
    verified its call form), else None."""
    if not hasattr(torch.ops._C, name):
        return None
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"_C::{name}", "XPU"):
        return None
    return getattr(torch.ops._C, name).default


#: The optional kernels (the gated activations', fused_qk_norm_rope's), None where this release
#: lacks one.
ACTIVATIONS = {
    name: _optional(name)
    for name in (
        "mul_and_silu",
        "gelu_and_mul",
        "gelu_tanh_and_mul",
        "fatrelu_and_mul",
        "swigluoai_and_mul",
        "fused_qk_norm_rope",
    )
}
#: The fp8 quant kernels, None where this release lacks one.
QUANT = {
    name: _optional(name)
    for name in ("static_scaled_fp8_quant", "dynamic_per_token_scaled_fp8_quant", "per_token_group_fp8_quant")
}


def _optional_weight(op: torch._ops.OpOverload) -> bool:
    return isinstance(op._schema.arguments[2].type, torch._C.OptionalType)


_PASS_NONE = _optional_weight(_rms_norm) and _optional_weight(_fused_add_rms_norm)


def _weight(weight: Tensor | None, x: Tensor) -> Tensor | None:
    return unit_weight(x) if weight is None and not _PASS_NONE else weight


# ---------------------------------------------------------------------- implementations
def rms_norm(x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None) -> Tensor:
    """``torch.ops._C.rms_norm`` into a new contiguous tensor of x's shape."""
    rows = x if 2 <= x.dim() <= 4 else x.view(-1, x.shape[-1])
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        _rms_norm(out, rows, _weight(weight, x), epsilon)
    return out.view(x.shape)


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """In place: ``x_residual <- x + x_residual``, ``x <- rms_norm(x_residual)``; returns both."""
    if x.numel():
        hidden = x.shape[-1]
        rows = x if x.dim() == 2 else x.view(-1, hidden)
        _fused_add_rms_norm(rows, x_residual.view(-1, hidden), _weight(weight, x), epsilon)
    return x, x_residual


def silu_and_mul(x: Tensor) -> Tensor:
    """``torch.ops._C.silu_and_mul(out, x)``; x copied first if its data is not 16-byte aligned."""
    out = torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)
    if x.numel():
        _silu_and_mul(out, x if x.data_ptr() % 16 == 0 else x.clone())
    return out


def _aligned(x: Tensor) -> Tensor:
    return x if x.data_ptr() % 16 == 0 else x.clone()


def _half_out(x: Tensor) -> Tensor:
    return torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)


def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    """``torch.ops._C.gelu_and_mul`` (erf) or ``gelu_tanh_and_mul`` (tanh) into a new tensor."""
    out = _half_out(x)
    kernel = ACTIVATIONS["gelu_and_mul" if approximate == "none" else "gelu_tanh_and_mul"]
    if x.numel() and kernel is not None:
        kernel(out, _aligned(x))
    return out


def mul_and_silu(x: Tensor) -> Tensor:
    """``torch.ops._C.mul_and_silu(out, x)``."""
    out = _half_out(x)
    kernel = ACTIVATIONS["mul_and_silu"]
    if x.numel() and kernel is not None:
        kernel(out, _aligned(x))
    return out


def fatrelu_and_mul(x: Tensor, threshold: float = 0.0) -> Tensor:
    """``torch.ops._C.fatrelu_and_mul(out, x, threshold)`` (its schema marks the input written;
    the kernel only reads it)."""
    out = _half_out(x)
    kernel = ACTIVATIONS["fatrelu_and_mul"]
    if x.numel() and kernel is not None:
        kernel(out, _aligned(x), threshold)
    return out


def swigluoai_and_mul(x: Tensor, alpha: float = 1.702, limit: float = 7.0) -> Tensor:
    """``torch.ops._C.swigluoai_and_mul(out, x, alpha, limit)`` on interleaved gate/up pairs."""
    out = _half_out(x)
    kernel = ACTIVATIONS["swigluoai_and_mul"]
    if x.numel() and kernel is not None:
        kernel(out, x, alpha, limit)
    return out


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
    """In place: ``torch.ops._C.fused_qk_norm_rope`` on the ``[tokens, width]`` view of qkv."""
    kernel = ACTIVATIONS["fused_qk_norm_rope"]
    if position_ids.numel() and kernel is not None:
        kernel(
            qkv.view(-1, qkv.shape[-1]), num_heads_q, num_heads_k, num_heads_v, head_dim, eps,
            q_weight, k_weight, cos_sin_cache, is_neox, position_ids.view(-1),
        )  # fmt: skip
    return qkv


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
    """In place: ``torch.ops._C.rotary_embedding`` rotates query and key; returns them."""
    if positions.numel():
        _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox_style)
    return query, key


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
    """In place: ``torch.ops._C.rotary_embedding`` with ``key=None``; returns query."""
    if positions.numel():
        _rotary_embedding(positions, query, None, head_size, cos_sin_cache, is_neox_style)
    return query


# The predicates run after the core's own argument check (float x with a non-empty last dim,
# weight 1-D of size hidden on x's device, residual like x, even last dim for silu_and_mul), so
# they test only what the kernels add.
def _weight_ok(weight: Tensor | None, x: Tensor) -> bool:
    return weight is None or (weight.dtype is x.dtype and weight.is_contiguous())


def rms_norm_supports(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    """On the platform's device; rank 2-4 (any strides) or contiguous; weight (if any) like x."""
    return (
        variance_size is None
        and x.device.type == _DEVICE
        and x.dtype in _FLOATS
        and _weight_ok(weight, x)
        and (2 <= x.dim() <= 4 or x.is_contiguous())
    )


def fused_add_rms_norm_supports(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    """On the platform's device; x 2-D with unit last stride or contiguous; residual contiguous."""
    return (
        variance_size is None
        and x.device.type == _DEVICE
        and x.dtype in _FLOATS
        and _weight_ok(weight, x)
        and x.stride(-1) == 1
        and (x.dim() == 2 or x.is_contiguous())
        and x_residual.is_contiguous()
    )


def silu_and_mul_supports(x: Tensor) -> bool:
    """On the platform's device, contiguous."""
    return x.device.type == _DEVICE and x.dtype in _FLOATS and x.is_contiguous()


def _heads(x: Tensor, pdim: int, head_size: int) -> int:
    """Heads of x if the kernel addresses it right: leading sizes are positions' (checked by the
    caller), then ``[heads * head_size]`` or ``[heads, head_size]``, unit channel stride; else 0."""
    if x.stride(-1) != 1:
        return 0
    if x.dim() == pdim + 1:
        return x.shape[-1] // head_size
    return x.shape[-2] if x.dim() == pdim + 2 and x.shape[-1] == head_size else 0


def _rope_layout(positions: Tensor, x: Tensor, head_size: int, head_stride: int) -> int:
    """Heads of x (0 if the kernel would misread it): tokens where positions put them, heads
    where ``head_stride`` puts them."""
    pdim = positions.dim()
    own_head_stride = x.stride(-2) if x.dim() == pdim + 2 else head_size
    if (
        tuple(x.shape[:pdim]) != tuple(positions.shape)
        or own_head_stride != head_stride
        or (pdim == 2 and x.shape[0] > 1 and x.stride(0) != x.shape[1] * x.stride(1))
    ):
        return 0
    return _heads(x, pdim, head_size)


def _rope_supported(
    positions: Tensor,
    query: Tensor,
    key: Tensor | None,
    head_size: int,
    cos_sin_cache: Tensor,
    offsets: Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> bool:
    if not (
        cos_sin_format == "standard"
        and offsets is None
        and not inverse
        and rope_dim_offset == 0
        and query.device.type == _DEVICE
        and query.dtype in _FLOATS
        and cos_sin_cache.dtype is query.dtype
        and cos_sin_cache.is_contiguous()
        and positions.dim() in (1, 2)
        and positions.is_contiguous()
    ):
        return False
    pdim = positions.dim()
    head_stride = query.stride(-2) if query.dim() == pdim + 2 else head_size
    heads = _rope_layout(positions, query, head_size, head_stride)
    kv_heads = heads if key is None else _rope_layout(positions, key, head_size, head_stride)
    return heads > 0 and kv_heads > 0 and heads % kv_heads == 0


def rotary_embedding_supports(
    positions: Tensor,
    query: Tensor,
    key: Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    offsets: Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> bool:
    """Standard format, no rope_dim_offset or inverse (the 6-argument schema has neither); the
    cache of query's dtype, contiguous; positions 1-D/2-D contiguous with query and key laid
    out as the kernel addresses them (see the module docstring); heads a multiple of key heads."""
    return _rope_supported(
        positions, query, key, head_size, cos_sin_cache, offsets, cos_sin_format, inverse, rope_dim_offset
    )


def rotary_embedding_query_only_supports(
    positions: Tensor,
    query: Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    offsets: Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> bool:
    """As :func:`rotary_embedding_supports`, without a key."""
    return _rope_supported(
        positions, query, None, head_size, cos_sin_cache, offsets, cos_sin_format, inverse, rope_dim_offset
    )


def _activation_supported(name: str, x: Tensor) -> bool:
    return (
        ACTIVATIONS[name] is not None
        and x.device.type == _DEVICE
        and x.dtype in _FLOATS
        and x.is_contiguous()
    )


def gelu_and_mul_supports(x: Tensor, approximate: str) -> bool:
    """This release has the kernel for ``approximate``; on the platform's device, contiguous."""
    return _activation_supported("gelu_and_mul" if approximate == "none" else "gelu_tanh_and_mul", x)


def mul_and_silu_supports(x: Tensor) -> bool:
    """This release has the kernel; on the platform's device, contiguous."""
    return _activation_supported("mul_and_silu", x)


def fatrelu_and_mul_supports(x: Tensor, threshold: float) -> bool:
    """This release has the kernel; on the platform's device, contiguous."""
    return _activation_supported("fatrelu_and_mul", x)


def swigluoai_and_mul_supports(x: Tensor, alpha: float, limit: float) -> bool:
    """This release has the kernel; on the platform's device, contiguous."""
    return _activation_supported("swigluoai_and_mul", x)


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
    """This release has the kernel; fp16/bf16 qkv on the platform's device, contiguous, with
    contiguous position_ids, weights of its dtype and a contiguous cache; head_dim 64-512."""
    return (
        ACTIVATIONS["fused_qk_norm_rope"] is not None
        and qkv.device.type == _DEVICE
        and qkv.dtype in (torch.float16, torch.bfloat16)
        and head_dim in (64, 128, 256, 512)
        and qkv.is_contiguous()
        and position_ids.is_contiguous()
        and q_weight.dtype is qkv.dtype
        and k_weight.dtype is qkv.dtype
        and q_weight.is_contiguous()
        and k_weight.is_contiguous()
        and cos_sin_cache.is_contiguous()
    )


# ---------------------------------------------------------------------- fp8 quant
def _quant_out(x: Tensor, num_token_padding: int | None) -> tuple[Tensor, Tensor]:
    """``(out, rows)``: the e4m3fn output with the op's zero padding rows along dimension 0, and
    the contiguous view of its first ``x.shape[0]`` rows that a kernel writes."""
    if num_token_padding is None or num_token_padding <= x.shape[0]:
        out = torch.empty(x.shape, dtype=E4M3FN, device=x.device)
        return out, out
    out = torch.empty((num_token_padding, *x.shape[1:]), dtype=E4M3FN, device=x.device)
    out[x.shape[0] :].zero_()
    return out, out[: x.shape[0]]


def _fp32(t: Tensor) -> Tensor:
    return t if t.dtype is torch.float32 else t.float()


def static_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """``_C.static_scaled_fp8_quant(out, x, scale, None)``, per-tensor scale."""
    out, rows = _quant_out(x, num_token_padding)
    if x.numel():
        QUANT["static_scaled_fp8_quant"](rows, x, _fp32(scale).reshape(1), None)  # type: ignore[misc]
    return out


def dynamic_quant_fp8(
    x: Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Per token: ``_C.dynamic_per_token_scaled_fp8_quant(out, x, scale, scale_ub)``. Per tensor:
    the op's scale from one max-abs reduction, then ``_C.static_scaled_fp8_quant``."""
    out, rows = _quant_out(x, num_token_padding)
    if per_token:
        scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
        if x.numel():
            ub = None if scale_ub is None else _fp32(scale_ub).reshape(1)
            QUANT["dynamic_per_token_scaled_fp8_quant"](rows, x, scale, ub)  # type: ignore[misc]
        return out, scale
    amax = torch.linalg.vector_norm(x, float("inf"), dtype=torch.float32).reshape(1)
    scale = (amax / fp8_max(E4M3FN)).clamp_(min=min_scale(E4M3FN))
    QUANT["static_scaled_fp8_quant"](rows, x, scale, None)  # type: ignore[misc]
    return out, scale


def dynamic_group_quant_fp8(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """``_C.per_token_group_fp8_quant(x, q, scales, g, 0.0, -448, 448, False)`` into scales of
    the op's shape and layout (the kernel reads the layout from their strides)."""
    q, scales = dynamic_group_quant_fp8_fake(
        x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    if x.numel():
        m = fp8_max(E4M3FN)
        flat = scales if column_major else scales.view(-1, scales.shape[-1])
        QUANT["per_token_group_fp8_quant"](x, q, flat, int(group_shape[-1]), 0.0, -m, m, False)  # type: ignore[misc]
    return q, scales


def dynamic_group_quant_fp8_fake(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """The outputs, unfilled, in the op's layout: column-major scales have strides ``(1, M)``
    (compiled graphs are told so: the op's own fake says contiguous)."""
    groups = x.shape[-1] // int(group_shape[-1])
    q = torch.empty(x.shape, dtype=E4M3FN, device=x.device)
    if column_major:  # 2-D x (the predicate)
        return q, torch.empty((groups, x.shape[0]), dtype=torch.float32, device=x.device).t()
    return q, torch.empty((*x.shape[:-1], groups), dtype=torch.float32, device=x.device)


def _quant_x(x: Tensor) -> bool:
    return x.device.type == _DEVICE and x.dtype in _FLOATS


def static_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """This release has the kernel; e4m3fn; a per-tensor scale; a unit last stride with rows at
    ``stride(-2)`` (2-D, or contiguous)."""
    return (
        QUANT["static_scaled_fp8_quant"] is not None
        and fp8_dtype is E4M3FN
        and scale.numel() == 1
        and _quant_x(x)
        and x.stride(-1) == 1
        and (x.dim() == 2 or x.is_contiguous())
    )


def dynamic_quant_fp8_supports(
    x: Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """e4m3fn; per token: contiguous x; per tensor: as :func:`static_quant_fp8_supports`."""
    if fp8_dtype is not E4M3FN or not _quant_x(x):
        return False
    if per_token:
        return QUANT["dynamic_per_token_scaled_fp8_quant"] is not None and x.is_contiguous()
    return (
        QUANT["static_scaled_fp8_quant"] is not None
        and x.stride(-1) == 1
        and (x.dim() == 2 or x.is_contiguous())
    )


def dynamic_group_quant_fp8_supports(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """e4m3fn, no ue8m0, ``scale_alignment == 1``; contiguous x whose last dim the group (a
    multiple of 4 elements) divides; column-major scales on 2-D x only."""
    g = int(group_shape[-1])
    return (
        QUANT["per_token_group_fp8_quant"] is not None
        and fp8_dtype is E4M3FN
        and not use_ue8m0
        and scale_alignment == 1
        and g % 4 == 0
        and x.shape[-1] % g == 0
        and _quant_x(x)
        and x.is_contiguous()
        and (not column_major or x.dim() == 2)
    )


# ---------------------------------------------------------------------- fused norm/activation + fp8 quant
#: The fused kernels (csrc/layernorm_quant.cpp, activation.cpp,
#: quantization/fused_kernels/fused_silu_mul_block_quant.cpp, read at 4543b58), None where this
#: release lacks one.
FUSED = {
    name: _optional(name)
    for name in (
        "rms_norm_static_fp8_quant",
        "fused_add_rms_norm_static_fp8_quant",
        "rms_norm_dynamic_per_token_quant",
        "rms_norm_per_block_quant",
        "silu_and_mul_quant",
        "silu_and_mul_per_block_quant",
    )
}
_HALF = (torch.float16, torch.bfloat16)
#: rms_norm_per_block_quant keeps a whole row in work-group local memory (``row_smem``):
#: rows up to 32 KiB, half the 64 KiB of the smallest Intel GPUs' SLM (the kernel adds its own
#: local memory; the real limit was not measured).
_BLOCK_ROW_BYTES = 32768


def _fp8_out(
    shape: tuple[int, ...], device: torch.device, num_token_padding: int | None
) -> tuple[Tensor, Tensor]:
    """``(out, rows)``: an e4m3fn output of ``shape`` with the op's zero padding rows along
    dimension 0, and the contiguous view of its first ``shape[0]`` rows a kernel writes."""
    if num_token_padding is None or num_token_padding <= shape[0]:
        out = torch.empty(shape, dtype=E4M3FN, device=device)
        return out, out
    out = torch.empty((num_token_padding, *shape[1:]), dtype=E4M3FN, device=device)
    out[shape[0] :].zero_()
    return out, out[: shape[0]]


def _norm_weight(weight: Tensor | None, x: Tensor) -> Tensor:
    """The fused kernels take a weight (not optional) and load it in 16-byte vectors."""
    return unit_weight(x) if weight is None else _aligned(weight)


def _residual_out(x_residual: Tensor) -> Tensor:
    """The kernels add into ``residual`` in place (rows at ``row * hidden``): a new contiguous copy."""
    return x_residual.clone(memory_format=torch.contiguous_format)


def _rows2d(x: Tensor) -> Tensor:
    return x if x.dim() == 2 else x.view(-1, x.shape[-1])


def rms_norm_static_fp8_quant(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> Tensor:
    """``_C.rms_norm_static_fp8_quant(out, x2d, weight, scale_fp32, epsilon)``; x copied first
    if its data is not 16-byte aligned (vector loads)."""
    out, rows = _fp8_out(tuple(x.shape), x.device, num_token_padding)
    if x.numel():
        kernel = FUSED["rms_norm_static_fp8_quant"]
        kernel(rows, _aligned(_rows2d(x)), _norm_weight(weight, x), _fp32(scale).reshape(1), epsilon)  # type: ignore[misc]
    return out


def fused_add_rms_norm_static_fp8_quant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``_C.fused_add_rms_norm_static_fp8_quant(out, x2d, residual, weight, scale, epsilon)`` on a
    contiguous copy of the residual, which the kernel turns into ``x + x_residual``."""
    out, rows = _fp8_out(tuple(x.shape), x.device, num_token_padding)
    residual = _residual_out(x_residual)
    if x.numel():
        kernel = FUSED["fused_add_rms_norm_static_fp8_quant"]
        w, s = _norm_weight(weight, x), _fp32(scale).reshape(1)
        kernel(rows, _aligned(_rows2d(x)), _rows2d(residual), w, s, epsilon)  # type: ignore[misc]
    return out, residual


def _dynamic(
    x: Tensor,
    residual: Tensor | None,
    weight: Tensor | None,
    epsilon: float,
    scale_ub: Tensor | None,
    num_token_padding: int | None,
) -> tuple[Tensor, Tensor]:
    out, rows = _fp8_out(tuple(x.shape), x.device, num_token_padding)
    scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    if x.numel():
        ub = None if scale_ub is None else _fp32(scale_ub).reshape(1)
        kernel = FUSED["rms_norm_dynamic_per_token_quant"]
        kernel(rows, x, _norm_weight(weight, x), scale, epsilon, ub, residual)  # type: ignore[misc]
    return out, scale


def rms_norm_dynamic_quant_fp8(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Per token: ``_C.rms_norm_dynamic_per_token_quant(out, x, weight, scale, epsilon, ub, None)``."""
    return _dynamic(x, None, weight, epsilon, scale_ub, num_token_padding)


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
    """As :func:`rms_norm_dynamic_quant_fp8` with a contiguous copy of the residual, which the
    kernel turns into ``x + x_residual``."""
    residual = _residual_out(x_residual)
    q, scale = _dynamic(x, residual, weight, epsilon, scale_ub, num_token_padding)
    return q, scale, residual


def _group_scales(x: Tensor, g: int, column_major: bool) -> Tensor:
    """The op's scales layout: row-major ``x.shape[:-1] + (groups,)``, or ``(1, M)`` strides."""
    groups = x.shape[-1] // g
    if column_major:  # 2-D x (the predicates)
        return torch.empty((groups, x.shape[0]), dtype=torch.float32, device=x.device).t()
    return torch.empty((*x.shape[:-1], groups), dtype=torch.float32, device=x.device)


def _rms_group(
    x: Tensor,
    residual: Tensor | None,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
) -> tuple[Tensor, Tensor]:
    g = int(group_shape[-1])
    q = torch.empty(x.shape, dtype=E4M3FN, device=x.device)
    scales = _group_scales(x, g, column_major)
    if x.numel():
        kernel = FUSED["rms_norm_per_block_quant"]
        res = None if residual is None else _rows2d(residual)
        kernel(  # type: ignore[misc]
            q, _aligned(_rows2d(x)), _norm_weight(weight, x), scales, epsilon, None, res, g, column_major
        )
    return q, scales


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
    """``_C.rms_norm_per_block_quant(q, x2d, weight, scales, epsilon, None, None, g, column_major)``
    into scales of the op's layout (``scale_ue8m0`` left at its default, False)."""
    return _rms_group(x, None, weight, epsilon, group_shape, column_major)


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
    """As :func:`rms_norm_group_quant_fp8` with a contiguous copy of the residual, which the
    kernel turns into ``x + x_residual``."""
    residual = _residual_out(x_residual)
    q, scales = _rms_group(x, residual, weight, epsilon, group_shape, column_major)
    return q, scales, residual


def silu_and_mul_static_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """``_C.silu_and_mul_quant(out, x, scale_fp32)``; x copied first if not 16-byte aligned."""
    out, rows = _fp8_out((*x.shape[:-1], x.shape[-1] // 2), x.device, num_token_padding)
    if x.numel():
        FUSED["silu_and_mul_quant"](rows, _aligned(x), _fp32(scale).reshape(1))  # type: ignore[misc]
    return out


def silu_and_mul_group_quant_fp8(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """``_C.silu_and_mul_per_block_quant(q2d, x2d, scales2d, g, None, column_major)`` (``scale_ue8m0``
    left at its default, False)."""
    g = int(group_shape[-1])
    half = _half_out(x)
    q = torch.empty(half.shape, dtype=E4M3FN, device=x.device)
    scales = _group_scales(half, g, column_major)
    if x.numel():
        kernel = FUSED["silu_and_mul_per_block_quant"]
        flat = scales if column_major else scales.view(-1, scales.shape[-1])
        kernel(_rows2d(q), _aligned(_rows2d(x)), flat, g, None, column_major)  # type: ignore[misc]
    return q, scales


def rms_norm_group_quant_fp8_fake(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    """The outputs, unfilled, in the op's layout (column-major scales: strides ``(1, M)``)."""
    q = torch.empty(x.shape, dtype=E4M3FN, device=x.device)
    return q, _group_scales(x, int(group_shape[-1]), column_major)


def fused_add_rms_norm_group_quant_fp8_fake(
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
    q, scales = rms_norm_group_quant_fp8_fake(
        x, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    return q, scales, torch.empty(x.shape, dtype=x.dtype, device=x.device)


def silu_and_mul_group_quant_fp8_fake(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[Tensor, Tensor]:
    half = _half_out(x)
    q = torch.empty(half.shape, dtype=E4M3FN, device=x.device)
    return q, _group_scales(half, int(group_shape[-1]), column_major)


# The predicates run after the op's own check (shapes, dtypes, devices, a valid scale/group).
def _fused_norm_x(x: Tensor, weight: Tensor | None, fp8_dtype: torch.dtype) -> bool:
    """e4m3fn; x on the platform's device in fp32/fp16/bf16; a weight of x's dtype, contiguous
    (the kernels TORCH_CHECK the dtype and load it as contiguous vectors)."""
    return fp8_dtype is E4M3FN and x.device.type == _DEVICE and x.dtype in _FLOATS and _weight_ok(weight, x)


def _row_view(x: Tensor) -> bool:
    """Rows at ``stride(-2)`` with a unit last stride: 2-D with any row stride, or contiguous."""
    return x.stride(-1) == 1 and (x.dim() == 2 or x.is_contiguous())


def rms_norm_static_fp8_quant_supports(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> bool:
    """This release has the kernel; e4m3fn; a per-tensor scale; rows at ``stride(-2)``."""
    return (
        FUSED["rms_norm_static_fp8_quant"] is not None
        and _fused_norm_x(x, weight, fp8_dtype)
        and scale.numel() == 1
        and _row_view(x)
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
    """As :func:`rms_norm_static_fp8_quant_supports` (any residual layout: it is copied)."""
    return (
        FUSED["fused_add_rms_norm_static_fp8_quant"] is not None
        and _fused_norm_x(x, weight, fp8_dtype)
        and scale.numel() == 1
        and _row_view(x)
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
    """Per token (the kernel has no per-tensor form); e4m3fn; contiguous x (TORCH_CHECKed)."""
    return (
        FUSED["rms_norm_dynamic_per_token_quant"] is not None
        and per_token
        and _fused_norm_x(x, weight, fp8_dtype)
        and x.is_contiguous()
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
    """As :func:`rms_norm_dynamic_quant_fp8_supports` (any residual layout: it is copied)."""
    return rms_norm_dynamic_quant_fp8_supports(
        x, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding
    )


def _block_group_ok(x: Tensor, g: int, column_major: bool, use_ue8m0: bool, scale_alignment: int) -> bool:
    """rms_norm_per_block_quant's groups: ``lanes = g / (16 / itemsize)`` vector lanes reduced
    by an xor butterfly inside a 32-lane sub-group, so ``lanes`` a power of two up to 32 (other
    counts mix neighbouring groups, 0 divides by zero); K a multiple of g; no ue8m0 (rounded
    after the floor, the op before); column-major scales on 2-D x with ``scale_alignment == 1``
    (the kernel's strides are ``(1, M)``); the row within local memory."""
    vec = 16 // x.element_size()
    lanes = g // vec
    return (
        not use_ue8m0
        and g % vec == 0
        and 0 < lanes <= 32
        and lanes & (lanes - 1) == 0
        and x.shape[-1] % g == 0
        and x.shape[-1] * x.element_size() <= _BLOCK_ROW_BYTES
        and (not column_major or (x.dim() == 2 and scale_alignment == 1))
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
    """e4m3fn; contiguous x (releases before #397 read rows at ``row * hidden``); groups as
    :func:`_block_group_ok`."""
    return (
        FUSED["rms_norm_per_block_quant"] is not None
        and _fused_norm_x(x, weight, fp8_dtype)
        and x.is_contiguous()
        and _block_group_ok(x, int(group_shape[-1]), column_major, use_ue8m0, scale_alignment)
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
    """As :func:`rms_norm_group_quant_fp8_supports` (any residual layout: it is copied)."""
    return rms_norm_group_quant_fp8_supports(
        x, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


def silu_and_mul_static_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """e4m3fn; fp16/bf16 (TORCH_CHECKed), contiguous; a per-tensor scale."""
    return (
        FUSED["silu_and_mul_quant"] is not None
        and fp8_dtype is E4M3FN
        and scale.numel() == 1
        and x.device.type == _DEVICE
        and x.dtype in _HALF
        and x.is_contiguous()
    )


def silu_and_mul_group_quant_fp8_supports(
    x: Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> bool:
    """e4m3fn; fp16/bf16, contiguous; groups of 32, 64 or 128 dividing the output's width (the
    kernel's TORCH_CHECKs); no ue8m0 (after the floor, and from the unrounded product);
    column-major scales on 2-D x with ``scale_alignment == 1``."""
    g = int(group_shape[-1])
    return (
        FUSED["silu_and_mul_per_block_quant"] is not None
        and fp8_dtype is E4M3FN
        and not use_ue8m0
        and g in (32, 64, 128)
        and (x.shape[-1] // 2) % g == 0
        and x.device.type == _DEVICE
        and x.dtype in _HALF
        and x.is_contiguous()
        and (not column_major or (x.dim() == 2 and scale_alignment == 1))
    )
