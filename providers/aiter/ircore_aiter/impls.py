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
- RoPE goes through the HIP "sbhd" kernels ``rope_cached_positions_2c_fwd_inplace`` (query and
  key) and ``rope_cached_positions_fwd_inplace`` (query only), in place. They address
  ``[s, b, h, d]`` views through their own strides (so strided views, such as a QKV split or HF's
  transposed heads, need no copy) and read positions as a contiguous ``[s, b]``: a query
  ``[T, ...]`` is viewed as ``[T, 1, H, D]``, a ``[B, S, ...]`` one as ``[B, S, H, D]``, and the
  positions reshaped to match (a copy of T int64s at most). ``cos`` and ``sin`` are read as
  contiguous ``[max_pos, 1, 1, rotary_dim / 2]`` rows (``reuse_freqs_front_part``): the two
  halves of ``cos_sin_cache`` are copied once per cache and kept while that cache lives
  unchanged. Maths in fp32 from the cache's own dtype (fp32, fp16 or bf16, independently of the
  activations'), one rounding per output. Full rotary only (``rotary_dim == head_size``, as
  vLLM's AITER path asserts), standard format, no ``inverse`` or ``rope_dim_offset``; strides
  must fit the kernel's int32. A position outside the cache leaves its token unrotated (the
  kernel skips it): ircore's check refuses such positions on CPU only (docs/ops.md).
- fp8 quant (unfused) goes through the HIP ``static_per_tensor_quant(out, input, scale)`` only: it reads
  ``input`` and writes ``out`` as contiguous rows of ``cols`` (``blockIdx.x * cols`` from the
  data pointers) with 16-byte vectors, a float32 scale, and saturates at ``finfo(out).max``,
  which is **240 for e4m3fnuz** where the op (as vLLM) clamps at 224; its output dtype is
  AITER's ``dtypes.fp8`` for the arch (e4m3fnuz on gfx942, e4m3fn on gfx950). So
  ``static_quant_fp8`` runs on gfx950 with e4m3fn (448 on both sides) and is declined for
  e4m3fnuz (a value beyond 232 scale units would give 240, the op 224). ``dynamic_quant_fp8``
  per tensor takes its scale in torch (``max(amax / fp8_max, 1 / (fp8_max * 512))``, the op's,
  with 224 for e4m3fnuz) and quantises with that kernel: ``|x / scale| <= fp8_max`` then, so the
  kernel's 240 never applies and e4m3fnuz is right on gfx942. AITER's own dynamic kernels
  (``dynamic_per_tensor_quant``, ``dynamic_per_token_scaled_quant``, the group quant, the CK
  ``rmsnorm2d_fwd_with_dynamicquant`` family) divide by ``finfo.max`` (240) and floor no scale
  (an all-zero row gets scale 0 and NaN values): not used (README).
- The fused static ops go through AITER's Triton wrappers ``fused_rms_fp8_per_tensor_static_quant``
  and ``fused_silu_mul_fp8_per_tensor_static_quant`` (``aiter.ops.triton.fused_fp8_quant``, 0.1.9
  on): ``M, N = x.shape`` with any 2-D strides, the weight read from its data pointer (contiguous,
  any float dtype), the norm (or product) rounded to x's dtype, ``* (1 / scale)`` and a clamp at
  ``finfo(dtype_quant).max``: e4m3fn on gfx950 only (240 for e4m3fnuz). Their ``(M, N)`` output is
  the wrapper's own, so padding rows are declined. AITER's dynamic and group fused kernels floor
  no scale and clamp e4m3fnuz at 240: not used (README, with the source lines).
- Empty inputs never reach a kernel (a launch with no rows is an invalid launch on HIP).
- The first call of each kernel builds it (hipcc, minutes, under a file lock in AITER's JIT
  directory): warm up before capturing CUDA graphs.

The implementations run only on real tensors (compiled graphs hold the op ircore builds around
each of them), so they may read data pointers; the predicates also run at compile time on fake
tensors and read only metadata.
"""

import importlib
import math
import weakref
from collections.abc import Callable
from typing import Any

import aiter
import torch
from torch import Tensor

import ircore
from ircore.kit import call_form_problem, unit_weight
from ircore.ops._quant import E4M3FN, E4M3FNUZ, fp8_max, min_scale

__all__ = [
    "fused_add_rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant_supports",
    "rms_norm_static_fp8_quant",
    "rms_norm_static_fp8_quant_supports",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_static_quant_fp8_supports",
    "fused_add_rms_norm",
    "dynamic_quant_fp8",
    "dynamic_quant_fp8_supports",
    "fused_add_rms_norm_supports",
    "rms_norm",
    "rms_norm_supports",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_embedding_query_only_supports",
    "rotary_embedding_supports",
    "silu_and_mul",
    "silu_and_mul_supports",
    "static_quant_fp8",
    "static_quant_fp8_supports",
]

# The platform's tensors (``cuda`` on ROCm builds of torch; ``cpu`` under a simulated platform
# in tests, where a stand-in of AITER computes on the CPU).
_DEVICE = ircore.current_platform().device_type
_HALF = (torch.float16, torch.bfloat16)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_INT32_MAX = 2**31 - 1
_NEOX, _GPTJ = 0, 1  # AITER's rotate_style


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


_HALVES: dict[int, tuple[weakref.ref, int, Tensor, Tensor]] = {}


def _cos_sin(cache: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin of ``cache`` as contiguous ``[max_pos, 1, 1, rotary_dim / 2]``, made once per
    cache tensor and version (an in-place change of the cache makes them again)."""
    entry = _HALVES.get(id(cache))
    if entry is not None and entry[0]() is cache and entry[1] == cache._version:
        return entry[2], entry[3]
    rows, width = cache.shape
    cos, sin = (half.contiguous().view(rows, 1, 1, width // 2) for half in cache.chunk(2, dim=-1))
    key = id(cache)
    _HALVES[key] = (weakref.ref(cache, lambda _ref: _HALVES.pop(key, None)), cache._version, cos, sin)
    return cos, sin


def _lead(x: Tensor, tokens: int) -> int:
    """How many leading (token) dimensions x has: ``[*, heads * head_size]`` (preferred, as the
    op reads it) or ``[*, heads, head_size]``, ``*`` holding the tokens."""
    return x.dim() - 1 if math.prod(x.shape[:-1]) == tokens else x.dim() - 2


def _sb(x: Tensor, tokens: int) -> tuple[int, ...]:
    """The ``(s, b)`` sizes of x's sbhd view; ``()`` where x has more than two token dimensions."""
    lead = _lead(x, tokens)
    return (tokens, 1) if lead == 1 else tuple(x.shape[:2]) if lead == 2 else ()


def _sbhd(x: Tensor, head_size: int, tokens: int) -> Tensor:
    """The ``[s, b, h, d]`` view of x: ``[T, 1, H, D]`` or ``[B, S, H, D]`` (the predicates
    guarantee one or two token dimensions)."""
    lead = _lead(x, tokens)
    heads = x.view(*x.shape[:lead], -1, head_size) if x.dim() == lead + 1 else x
    return heads.unsqueeze(1) if lead == 1 else heads


def _positions(positions: Tensor, x4: Tensor) -> Tensor:
    """Positions as the contiguous ``[s, b]`` the kernel reads (``sid * b + bid``): a copy of T
    int64s where they are not already (``stride(1) == 1`` alone is not enough)."""
    return positions.reshape(x4.shape[0], x4.shape[1]).contiguous()


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
    """In place: ``aiter.rope_cached_positions_2c_fwd_inplace`` on the sbhd views of query and key."""
    if positions.numel():
        tokens = positions.numel()
        q4, k4 = _sbhd(query, head_size, tokens), _sbhd(key, head_size, tokens)
        cos, sin = _cos_sin(cos_sin_cache)
        style = _NEOX if is_neox_style else _GPTJ
        pos = _positions(positions, q4)
        # rotate_style, reuse_freqs_front_part (cos/sin hold rotary_dim / 2), nope_first
        aiter.rope_cached_positions_2c_fwd_inplace(q4, k4, cos, sin, pos, style, True, False)
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
    """In place: ``aiter.rope_cached_positions_fwd_inplace`` on the sbhd view of query."""
    if positions.numel():
        q4 = _sbhd(query, head_size, positions.numel())
        cos, sin = _cos_sin(cos_sin_cache)
        style = _NEOX if is_neox_style else _GPTJ
        aiter.rope_cached_positions_fwd_inplace(q4, cos, sin, _positions(positions, q4), style, True, False)
    return query


#: None where this AITER lacks the kernel (the quant predicates then decline every call).
_STATIC_QUANT = getattr(aiter, "static_per_tensor_quant", None)


def _arch_fp8() -> torch.dtype:
    """AITER's fp8 on this platform's arch (``aiter.dtypes.fp8``): the only dtype its quant
    kernels write: e4m3fnuz on gfx942, e4m3fn on gfx950. Read per call (simulated platforms)."""
    arch = (ircore.current_platform().gcn_arch or "").split(":")[0]
    return E4M3FNUZ if arch == "gfx942" else E4M3FN


def _quant_out(x: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None) -> tuple[Tensor, Tensor]:
    """``(out, rows)``: the fp8 output with the op's zero padding rows along dimension 0, and the
    contiguous view of its first ``x.shape[0]`` rows that the kernel writes."""
    if num_token_padding is None or num_token_padding <= x.shape[0]:
        out = torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
        return out, out
    out = torch.empty((num_token_padding, *x.shape[1:]), dtype=fp8_dtype, device=x.device)
    out[x.shape[0] :].zero_()
    return out, out[: x.shape[0]]


def _aligned(x: Tensor) -> Tensor:
    return x if x.data_ptr() % 16 == 0 else x.clone()


def static_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """``aiter.static_per_tensor_quant(out, x, scale)`` (per-tensor scale, as float32)."""
    out, rows = _quant_out(x, fp8_dtype, num_token_padding)
    if x.numel():
        scale32 = scale.reshape(1) if scale.dtype is torch.float32 else scale.float().reshape(1)
        _STATIC_QUANT(rows, _aligned(x), scale32)  # type: ignore[misc]
    return out


def dynamic_quant_fp8(
    x: Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Per tensor: the op's scale from one max-abs reduction (no temporary), then
    ``aiter.static_per_tensor_quant`` with it (never the 240 clamp, never a zero scale)."""
    amax = torch.linalg.vector_norm(x, float("inf"), dtype=torch.float32).reshape(1)
    scale = (amax / fp8_max(fp8_dtype)).clamp_(min=min_scale(fp8_dtype))
    out, rows = _quant_out(x, fp8_dtype, num_token_padding)
    _STATIC_QUANT(rows, _aligned(x), scale)  # type: ignore[misc]
    return out, scale


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


def _rope_supported(
    positions: Tensor,
    query: Tensor,
    key: Tensor | None,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: Tensor,
    offsets: Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> bool:
    tokens = positions.numel()
    sb = _sb(query, tokens)
    return (
        cos_sin_format == "standard"
        and offsets is None
        and not inverse
        and rope_dim_offset == 0
        and rotary_dim == head_size
        and query.device.type == _DEVICE
        and query.dtype in _FLOATS
        and cos_sin_cache.dtype in _FLOATS
        and sb != ()
        and all(s <= _INT32_MAX for s in query.stride())
        and (key is None or (_sb(key, tokens) == sb and all(s <= _INT32_MAX for s in key.stride())))
    )


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
    """Full rotary, standard format, no inverse or rope_dim_offset; fp32/fp16/bf16 activations
    and cache (any pairing); one or two token dimensions, the same for query and key; any
    strides that fit in int32 (query and key viewed as sbhd with the same ``s, b``)."""
    return _rope_supported(
        positions, query, key, head_size, rotary_dim, cos_sin_cache, offsets, cos_sin_format, inverse,
        rope_dim_offset,
    )  # fmt: skip


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
        positions, query, None, head_size, rotary_dim, cos_sin_cache, offsets, cos_sin_format, inverse,
        rope_dim_offset,
    )  # fmt: skip


def _quant_x(x: Tensor) -> bool:
    """fp16/bf16 on the platform's device, contiguous rows of a multiple of 16 elements (the
    kernel's 16-byte vectors; conservative, from its source)."""
    return (
        _STATIC_QUANT is not None
        and x.dtype in _HALF
        and x.device.type == _DEVICE
        and x.is_contiguous()
        and x.shape[-1] % 16 == 0
    )


def static_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """A per-tensor scale, and an fp8 dtype the kernel clamps as the op does: e4m3fn (448) where
    AITER writes e4m3fn (gfx950); never e4m3fnuz (the kernel's maximum is 240, the op's 224)."""
    return scale.numel() == 1 and fp8_dtype is E4M3FN and _arch_fp8() is E4M3FN and _quant_x(x)


def dynamic_quant_fp8_supports(
    x: Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: Tensor | None = None,
    num_token_padding: int | None = None,
) -> bool:
    """Per tensor only, in the arch's fp8 (either: the scale is the op's, see above)."""
    return per_token is False and fp8_dtype is _arch_fp8() and _quant_x(x)


# ------------------------------------------------------- fused norm/activation + static fp8 quant
def _triton_wrapper(name: str, params: tuple[str, ...]) -> Callable[..., Any] | None:
    """AITER's Triton wrapper ``aiter.ops.triton.fused_fp8_quant.<name>`` (at AITER's head the
    module is ``quant/fused_fp8_quant``, kept under the old name by an import hook) if this
    release has it with ``params`` (0.1.9 on), else None: the predicates then decline."""
    try:
        module = importlib.import_module("aiter.ops.triton.fused_fp8_quant")
    except Exception:
        return None
    fn = getattr(module, name, None)
    if fn is None or call_form_problem(f"aiter.ops.triton.fused_fp8_quant.{name}", fn, params):
        return None
    return fn  # type: ignore[no-any-return]


_RMS_PARAMS = (
    "inp1", "inp1_weight", "inp1_epsilon", "inp1_scale", "inp2", "inp2_weight", "inp2_epsilon",
    "dtype_quant", "res1", "output_unquantized_inp1", "rmsnorm_convert_to_inp1_type",
)  # fmt: skip
_FUSED_RMS = _triton_wrapper("fused_rms_fp8_per_tensor_static_quant", _RMS_PARAMS)
_FUSED_SILU = _triton_wrapper(
    "fused_silu_mul_fp8_per_tensor_static_quant",
    ("inp", "inp_scale", "dtype_quant", "silu_convert_to_inp_type"),
)
#: One program per row holding the whole row (``tl.arange(0, next_pow2(N))``): Triton's largest block.
_MAX_ROW = 2**20


def rms_norm_static_fp8_quant(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> Tensor:
    """``fused_rms_fp8_per_tensor_static_quant(x2d, weight, epsilon, scale, dtype_quant=fp8_dtype,
    rmsnorm_convert_to_inp1_type=True)`` (the norm rounded to x's dtype before it is quantised,
    as the op); its ``(M, N)`` output viewed as x's shape."""
    if not x.numel():
        return torch.empty(x.shape, dtype=fp8_dtype, device=x.device)
    w = _weight(weight, x)
    q = _FUSED_RMS(_rows(x), w, epsilon, scale, dtype_quant=fp8_dtype, rmsnorm_convert_to_inp1_type=True)  # type: ignore[misc]
    q = q[0]
    return q.view(x.shape)  # type: ignore[no-any-return]


def fused_add_rms_norm_static_fp8_quant(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> tuple[Tensor, Tensor]:
    """As :func:`rms_norm_static_fp8_quant` with ``res1=x_residual``: the kernel writes the sum
    (``out_res1``, a new tensor) and normalises it."""
    if not x.numel():
        return torch.empty(x.shape, dtype=fp8_dtype, device=x.device), torch.empty_like(x)
    q, _, _, residual = _FUSED_RMS(  # type: ignore[misc]
        _rows(x),
        _weight(weight, x),
        epsilon,
        scale,
        dtype_quant=fp8_dtype,
        res1=_rows(x_residual),
        rmsnorm_convert_to_inp1_type=True,
    )
    return q.view(x.shape), residual.view(x.shape)


def silu_and_mul_static_quant_fp8(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> Tensor:
    """``fused_silu_mul_fp8_per_tensor_static_quant(x2d, scale, fp8_dtype, True)`` (the product
    rounded to x's dtype before it is quantised, as the op), viewed as the op's output shape."""
    shape = (*x.shape[:-1], x.shape[-1] // 2)
    if not x.numel():
        return torch.empty(shape, dtype=fp8_dtype, device=x.device)
    return _FUSED_SILU(_rows(x), scale, fp8_dtype, True).view(shape)  # type: ignore[misc, no-any-return]


def _fused_static_ok(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> bool:
    """e4m3fn on gfx950 (the wrappers clamp at ``finfo(dtype_quant).max``: 448 as the op, but 240
    for e4m3fnuz where the op clamps at 224); a per-tensor scale; fp32/fp16/bf16 x on the
    platform's device that flattens to 2-D without a copy (the kernels read any 2-D strides);
    no padding rows (the wrappers allocate their ``(M, N)`` output)."""
    return (
        fp8_dtype is E4M3FN
        and _arch_fp8() is E4M3FN
        and scale.numel() == 1
        and x.device.type == _DEVICE
        and x.dtype in _FLOATS
        and (x.dim() == 2 or x.is_contiguous())
        and (num_token_padding is None or num_token_padding <= x.shape[0])
    )


def rms_norm_static_fp8_quant_supports(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> bool:
    """This AITER has the wrapper (0.1.9 on); :func:`_fused_static_ok`; a contiguous weight (read
    from its data pointer; any float dtype, widened to fp32); rows up to 2^20 elements."""
    return (
        _FUSED_RMS is not None
        and _fused_static_ok(x, scale, fp8_dtype, num_token_padding)
        and (weight is None or weight.is_contiguous())
        and x.shape[-1] <= _MAX_ROW
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
    """As :func:`rms_norm_static_fp8_quant_supports`, and a residual that flattens to 2-D too."""
    return rms_norm_static_fp8_quant_supports(x, weight, epsilon, scale, fp8_dtype, num_token_padding) and (
        x_residual.dim() == 2 or x_residual.is_contiguous()
    )


def silu_and_mul_static_quant_fp8_supports(
    x: Tensor, scale: Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> bool:
    """This AITER has the wrapper (0.1.9 on); :func:`_fused_static_ok`; halves up to 2^20."""
    return (
        _FUSED_SILU is not None
        and _fused_static_ok(x, scale, fp8_dtype, num_token_padding)
        and x.shape[-1] // 2 <= _MAX_ROW
    )
