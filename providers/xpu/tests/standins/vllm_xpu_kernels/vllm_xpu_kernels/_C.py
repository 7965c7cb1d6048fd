"""STAND-IN for ``vllm_xpu_kernels._C`` (a compiled extension in the real package).

Like the real one it owns the torch namespace ``_C`` (``TORCH_LIBRARY(_C, ...)``: one owner per
process, which is why it cannot coexist with vLLM's own ``vllm._C``) and defines, with the
0.1.16 schemas::

    rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()
    fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()
    silu_and_mul(Tensor! result, Tensor input) -> ()
    rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size,
                     Tensor cos_sin_cache, bool is_neox) -> ()
    mul_and_silu(Tensor! out, Tensor input) -> ()
    gelu_and_mul(Tensor! out, Tensor input) -> ()
    gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()
    fatrelu_and_mul(Tensor! out, Tensor! input, float threshold) -> ()
    swigluoai_and_mul(Tensor! out, Tensor input, float alpha=1.702, float limit=7.0) -> ()
    fused_qk_norm_rope(Tensor! qkv, int num_heads_q, int num_heads_k, int num_heads_v,
                       int head_dim, float eps, Tensor q_weight, Tensor k_weight,
                       Tensor cos_sin_cache, bool is_neox, Tensor position_ids) -> ()

and the fp8 quant kernels (csrc/quantization/fp8/fp8_quant.cpp, read at commit 004c5c1)::

    static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, int[]? group_shape=None) -> ()
    dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale, Tensor? scale_ub) -> ()
    per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size,
                              float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()

Its kernels are registered for XPU (as the real ones) and for the CPU, where they compute, and
they address memory as the real SYCL kernels do (csrc/layernorm.cpp, activation.cpp):

- rms_norm: ranks 2-4 only, rows through the input's strides (a non-unit last stride is made
  contiguous), ``result`` must be contiguous; weight of the input's dtype, 1-D, contiguous;
- fused_add_rms_norm: no checks; input rows at ``row * input.stride(-2)`` with a unit last
  stride, residual rows at ``row * hidden``, the weight read as the input's dtype;
- silu_and_mul: contiguous rows of ``2d`` in, ``d`` out, 16-byte aligned vector loads;
- the gated activations (csrc/activation.cpp): contiguous rows of ``2d`` in (halves ``[a | b]``;
  swigluoai_and_mul: interleaved ``gate, up`` pairs), ``d`` out; mul_and_silu, gelu[_tanh]_and_mul
  and fatrelu_and_mul load vectors of up to 16 bytes, aligned to their width (the kernel halves
  the width while half of it would still cover ``d`` with ``min(d, 1024)`` work-items, so only
  ``d > 1024`` gets vectors; scalar when ``d`` is not a multiple of the width) and compute ``act(a)`` in fp32 rounded to the input's type, then the
  product in that type (two roundings); fatrelu compares in fp32 with the threshold cast to
  float; swigluoai_and_mul computes in fp32, rounded once;
- fused_qk_norm_rope (csrc/fused_qknorm_rope.cpp, in place): its TORCH_CHECKs (qkv 2-D and
  contiguous, position_ids 1-D contiguous int64, weights 1-D of head_dim, contiguous, of qkv's
  dtype, the cache 2-D contiguous), fp16/bf16 qkv only, head_dim 64/128/256/512 only; the
  q and k heads at ``token * heads * head_dim``; RMSNorm and RoPE in fp32 (the cache read in its
  own dtype at ``pos * rotary_dim``), rounded once; a position outside the cache reads out of
  bounds (an error here);
- rotary_embedding (csrc/pos_encoding_kernels.cpp, in place): the TORCH_CHECKs of the real one
  (positions 1-D or 2-D, query/key leading sizes equal to positions', hidden a multiple of
  head_size, heads a multiple of key heads); token ``t`` at ``t * stride(positions.dim() - 1)``
  (positions read flat), heads at ``query.stride(-2)`` if query is ``[..., heads, head_size]``
  else at ``head_size`` (for key too), unit channel stride, the first ``rot_dim =
  cos_sin_cache.size(1)`` channels rotated; cache rows at ``pos * rot_dim`` read as the query's
  scalar type (``data_ptr<scalar_t>`` refuses another dtype); every product and sum rounded to
  that type; a position outside the cache reads out of bounds (an error here).

- fp8 quant: e4m3fn (or e5m2) outputs only (no e4m3fnuz: ``quant_type_max`` is defined for
  those two), maximum ``numeric_limits::max()`` (448), ``x * (1 / scale)`` clamped to it before
  the cast; scales float32 (``data_ptr<float>``). static_scaled_fp8_quant: input and result
  with a unit last stride, ``numel / hidden`` rows at ``row * stride(-2)`` of each (modelled
  for a one-element scale only). dynamic_per_token_scaled_fp8_quant: input and result
  contiguous; ``scale[row] = max(min(amax, ub) / 448, 1 / (448 * 512))``.
  per_token_group_fp8_quant: input and output_q contiguous, ``numel % group_size == 0``,
  output_s 2-D, column-major when ``stride(0) < stride(1)`` (a group's scale at ``group *
  stride(1) + row``); amax from ``eps``, ``max(amax / 448, 1 / (448 * 512))`` (the fp8_max
  argument unused), **then** ue8m0 rounding (vLLM's native rounds first);

- fused norm/activation + fp8 quant (csrc/layernorm_quant.cpp, activation.cpp,
  quantization/fused_kernels/fused_silu_mul_block_quant.cpp, read at 4543b58): the TORCH_CHECKs
  of each (weight of the input's dtype, float32 scales, contiguous outputs, e4m3fn where the real
  one allows int8 too), norms in fp32 with the weight promoted (one rounding, at the fp8 store),
  448 and the ``1 / (448 * 512)`` floor. rms_norm_static_fp8_quant: rows at ``stride(-2)``
  (unit last stride assumed), vectors of ``gcd(16 / size, hidden)`` elements (1 when the row
  stride is not a multiple), aligned to their width; fused_add_rms_norm_static_fp8_quant: the
  sum added and rounded in the input's type, written into ``residual`` (rows at ``row * hidden``),
  the variance from the rounded sum; rms_norm_dynamic_per_token_quant: contiguous input,
  ``max(min(amax, ub) / 448, floor)``, residual as the static one; rms_norm_per_block_quant:
  rows at ``stride(0)`` (unit last stride checked), 16-byte vectors (a tail of fewer than
  ``16 / size`` elements never read nor written), a group's amax reduced over the aligned block
  of ``next_pow2(group / vec)`` vector lanes (the xor butterfly), its scale stored by lanes
  ``c % (group / vec) == 0`` at ``c / (group / vec)``, ue8m0 after the floor, the whole row in
  local memory (refused beyond 64 KiB); silu_and_mul_quant: fp16/bf16 only, contiguous rows,
  ``silu`` rounded to the input's type, the product too, then ``* (1 / scale)``;
  silu_and_mul_per_block_quant: its TORCH_CHECKs (groups 32/64/128, 2-D contiguous input),
  silu-and-mul in fp32 (not rounded), ``x / scale``, scale_ub, ue8m0 after the floor;

``IRCORE_STANDIN_XPU_VARIANT``: ``required-weight`` (releases before the optional weight),
``no-xpu-kernel`` (rms_norm registered for the CPU only), ``changed`` (a hypothetical release
whose rms_norm takes ``(input, result, ...)``). ``CALLS`` counts kernel calls.
"""

import math
import os
from collections import Counter

import torch

if os.environ.get("IRCORE_FIXTURE_IMPORT_LOG"):
    with open(os.environ["IRCORE_FIXTURE_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

VARIANT = os.environ.get("IRCORE_STANDIN_XPU_VARIANT", "")
CALLS: Counter = Counter()
_WEIGHT = "Tensor weight" if VARIANT == "required-weight" else "Tensor? weight"
_RMS = "rms_norm(Tensor input, Tensor! result" if VARIANT == "changed" else "rms_norm(Tensor! result, Tensor input"
SCHEMAS = {
    "rms_norm": f"{_RMS}, {_WEIGHT}, float epsilon) -> ()",
    "fused_add_rms_norm": f"fused_add_rms_norm(Tensor! input, Tensor! residual, {_WEIGHT}, float epsilon) -> ()",
    "silu_and_mul": "silu_and_mul(Tensor! result, Tensor input) -> ()",
    "mul_and_silu": "mul_and_silu(Tensor! out, Tensor input) -> ()",
    "gelu_and_mul": "gelu_and_mul(Tensor! out, Tensor input) -> ()",
    "gelu_tanh_and_mul": "gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()",
    "fatrelu_and_mul": "fatrelu_and_mul(Tensor! out, Tensor! input, float threshold) -> ()",
    "swigluoai_and_mul": "swigluoai_and_mul(Tensor! out, Tensor input, float alpha=1.702, float limit=7.0) -> ()",
    "fused_qk_norm_rope": (
        "fused_qk_norm_rope(Tensor! qkv, int num_heads_q, int num_heads_k, int num_heads_v, int head_dim, "
        "float eps, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, bool is_neox, Tensor position_ids) -> ()"
    ),
    "rotary_embedding": (
        "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()"
    ),
}
SCHEMAS.update(
    {
        "static_scaled_fp8_quant": (
            "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, int[]? group_shape=None) -> ()"
        ),
        "dynamic_per_token_scaled_fp8_quant": (
            "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale, Tensor? scale_ub) -> ()"
        ),
        "per_token_group_fp8_quant": (
            "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, "
            "float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()"
        ),
    }
)
#: The fused norm/activation + quant kernels (csrc/torch_bindings.cpp at 4543b58).
SCHEMAS.update(
    {
        "rms_norm_static_fp8_quant": (
            "rms_norm_static_fp8_quant(Tensor! result, Tensor input, Tensor weight, Tensor scale, float epsilon) -> ()"
        ),
        "fused_add_rms_norm_static_fp8_quant": (
            "fused_add_rms_norm_static_fp8_quant(Tensor! result, Tensor input, Tensor! residual, Tensor weight, "
            "Tensor scale, float epsilon) -> ()"
        ),
        "rms_norm_dynamic_per_token_quant": (
            "rms_norm_dynamic_per_token_quant(Tensor! result, Tensor input, Tensor weight, Tensor! scale, "
            "float epsilon, Tensor? scale_ub, Tensor!? residual) -> ()"
        ),
        "rms_norm_per_block_quant": (
            "rms_norm_per_block_quant(Tensor! result, Tensor input, Tensor weight, Tensor! scale, float epsilon, "
            "Tensor? scale_ub, Tensor!? residual, int group_size, bool is_scale_transposed, "
            "bool scale_ue8m0=False) -> ()"
        ),
        "silu_and_mul_quant": "silu_and_mul_quant(Tensor! result, Tensor input, Tensor scale) -> ()",
        "silu_and_mul_per_block_quant": (
            "silu_and_mul_per_block_quant(Tensor! out, Tensor input, Tensor! scales, int group_size, "
            "Tensor? scale_ub=None, bool is_scale_transposed=False, bool scale_ue8m0=False) -> ()"
        ),
    }
)
_FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _fp8_checks(name, out, input, *scales):
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"stand-in _C::{name}: \"{name}\" not implemented for '{input.dtype}'")
    if out.dtype not in _FP8:
        raise RuntimeError(f"stand-in _C::{name}: \"{name}_fp8_type\" not implemented for '{out.dtype}'")
    for s in scales:
        if s is not None and s.dtype != torch.float32:
            raise RuntimeError(f"stand-in _C::{name}: expected scalar type Float but found {s.dtype}")
    CALLS[name] += 1


def _convert(y, out_dtype):
    m = torch.finfo(out_dtype).max  # quant_type_max_v: 448 for e4m3fn
    return y.clamp(-m, m).to(out_dtype)


def static_scaled_fp8_quant(result, input, scale, group_shape=None):
    if input.stride(-1) != 1:
        raise RuntimeError("stand-in _C::static_scaled_fp8_quant: last dimension of input must be contiguous")
    if result.stride(-1) != 1:
        raise RuntimeError("stand-in _C::static_scaled_fp8_quant: last dimension of output must be contiguous")
    _fp8_checks("static_scaled_fp8_quant", result, input, scale)
    if scale.numel() != 1:
        raise NotImplementedError("stand-in _C::static_scaled_fp8_quant models the per-tensor scale only")
    hidden = input.size(-1)
    rows = input.numel() // hidden
    x = input.as_strided((rows, hidden), (input.stride(-2) if input.dim() > 1 else hidden, 1))
    o = result.as_strided((rows, hidden), (result.stride(-2) if result.dim() > 1 else hidden, 1))
    inv = 1.0 / scale.as_strided((1,), (1,))
    o.copy_(_convert(x.float() * inv, result.dtype))


def dynamic_per_token_scaled_fp8_quant(result, input, scale, scale_ub):
    if not input.is_contiguous() or not result.is_contiguous():
        raise RuntimeError("stand-in _C::dynamic_per_token_scaled_fp8_quant: Expected input.is_contiguous()")
    _fp8_checks("dynamic_per_token_scaled_fp8_quant", result, input, scale, scale_ub)
    hidden = input.size(-1)
    rows = input.numel() // hidden
    x = input.as_strided((rows, hidden), (hidden, 1)).float()
    amax = x.abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        amax = torch.minimum(amax, scale_ub.as_strided((1,), (1,)))
    m = torch.finfo(result.dtype).max
    s = torch.clamp(amax / m, min=1.0 / (m * 512.0))
    scale.as_strided((rows, 1), (1, 1)).copy_(s)
    result.as_strided((rows, hidden), (hidden, 1)).copy_(_convert(x * (1.0 / s), result.dtype))


def per_token_group_fp8_quant(input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0):
    if not input.is_contiguous() or not output_q.is_contiguous():
        raise RuntimeError("stand-in _C::per_token_group_fp8_quant: Expected input.is_contiguous()")
    if input.numel() % group_size or output_s.dim() != 2:
        raise RuntimeError("stand-in _C::per_token_group_fp8_quant: Expected input.numel() % group_size == 0")
    _fp8_checks("per_token_group_fp8_quant", output_q, input, output_s)
    groups = input.numel() // group_size
    x = input.as_strided((groups, group_size), (group_size, 1)).float()
    m = torch.finfo(output_q.dtype).max
    amax = torch.clamp(x.abs().amax(dim=-1, keepdim=True), min=float(eps))
    s = torch.clamp(amax / m, min=1.0 / (m * 512.0))
    if scale_ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(torch.clamp(s.abs(), min=1e-10))))
    output_q.as_strided((groups, group_size), (group_size, 1)).copy_(_convert(x * (1.0 / s), output_q.dtype))
    if output_s.stride(0) < output_s.stride(1):  # column-major: group j of row r at j * stride(1) + r
        per_row = output_s.size(1)
        idx = torch.arange(groups)
        flat = (idx % per_row) * output_s.stride(1) + idx // per_row
    else:
        flat = torch.arange(groups)
    if groups:
        output_s.as_strided((int(flat.max()) + 1,), (1,))[flat] = s.squeeze(-1)


def _as_input_dtype(weight, x, hidden):
    """The kernels read the weight as the input's scalar type."""
    return weight.as_strided((weight.numel(),), (1,)).view(torch.uint8).view(x.dtype)[:hidden]


def _normalize(rows, weight, epsilon):
    xf = rows.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    return out if weight is None else out * weight.float()


def rms_norm(result, input, weight, epsilon):
    CALLS["rms_norm"] += 1
    if input.dim() not in (2, 3, 4):
        raise RuntimeError("stand-in _C::rms_norm: Expects rank 2, 3 or 4 tensors")
    if not result.is_contiguous() or result.shape != input.shape:
        raise RuntimeError("stand-in _C::rms_norm: out must be contiguous and of the input's shape")
    if weight is not None:
        if weight.dtype != input.dtype:
            raise RuntimeError("stand-in _C::rms_norm: weight dtype must match input dtype")
        if weight.dim() not in (1, 2) or not weight.is_contiguous():
            raise RuntimeError("stand-in _C::rms_norm: weight must be 1D or 2D and contiguous")
    x = input if input.stride(-1) == 1 else input.contiguous()
    result.copy_(_normalize(x, weight, epsilon).to(input.dtype))  # rows through x's own strides


def fused_add_rms_norm(input, residual, weight, epsilon):
    CALLS["fused_add_rms_norm"] += 1
    hidden = input.shape[-1]
    tokens = input.numel() // hidden
    x = input.as_strided((tokens, hidden), (input.stride(-2), 1))
    r = residual.as_strided((tokens, hidden), (hidden, 1))
    total = (x.float() + r.float()).to(input.dtype)
    r.copy_(total)
    w = None if weight is None else _as_input_dtype(weight, input, hidden)
    x.copy_(_normalize(total, w, epsilon).to(input.dtype))


def silu_and_mul(result, input):
    CALLS["silu_and_mul"] += 1
    if input.data_ptr() % 16 or result.data_ptr() % 16:
        raise RuntimeError("stand-in _C::silu_and_mul: misaligned 16-byte vector access")
    d = input.shape[-1] // 2
    tokens = input.numel() // (2 * d)
    xf = input.as_strided((tokens, 2 * d), (2 * d, 1)).float()
    y = torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]
    result.as_strided((tokens, d), (d, 1)).copy_(y.to(result.dtype))


def _act_rows(name, out, input, vector=True):
    """The (a, b) halves of each contiguous ``2d`` row, and the ``[tokens, d]`` rows of out."""
    CALLS[name] += 1
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"stand-in _C::{name}: not implemented for '{input.dtype}'")
    d = input.shape[-1] // 2
    width = 16 // input.element_size()
    while width > 1 and (width >> 1) * min(d, 1024) >= d:
        width >>= 1
    if d % width:
        width = 1
    align = width * input.element_size()  # aligned_vec<scalar_t, width>
    if vector and width > 1 and (input.data_ptr() % align or out.data_ptr() % align):
        raise RuntimeError(f"stand-in _C::{name}: misaligned {width}-wide vector access")
    tokens = input.numel() // (2 * d)
    rows = input.as_strided((tokens, 2 * d), (2 * d, 1))
    return rows, out.as_strided((tokens, d), (d, 1)), d


def _act_then_mul(name, out, input, act, act_first=True):
    rows, dst, d = _act_rows(name, out, input)
    a, b = rows[:, :d], rows[:, d:]
    if act_first:
        dst.copy_(act(a.float()).to(input.dtype) * b)  # act rounded to the type, product in it
    else:
        dst.copy_(a * act(b.float()).to(input.dtype))


def mul_and_silu(out, input):
    _act_then_mul("mul_and_silu", out, input, torch.nn.functional.silu, act_first=False)


def gelu_and_mul(out, input):
    _act_then_mul("gelu_and_mul", out, input, torch.nn.functional.gelu)


def gelu_tanh_and_mul(out, input):
    _act_then_mul("gelu_tanh_and_mul", out, input, lambda a: torch.nn.functional.gelu(a, approximate="tanh"))


def fatrelu_and_mul(out, input, threshold):
    thr = torch.tensor(threshold, dtype=torch.float64).float()  # the kernel's float parameter
    _act_then_mul("fatrelu_and_mul", out, input, lambda a: torch.where(a > thr, a, 0.0))


def swigluoai_and_mul(out, input, alpha=1.702, limit=7.0):
    rows, dst, _ = _act_rows("swigluoai_and_mul", out, input, vector=False)
    lim = float(torch.tensor(limit, dtype=torch.float64).float())
    gate = rows[:, 0::2].float().clamp(max=lim)
    up = rows[:, 1::2].float().clamp(min=-lim, max=lim)
    alpha32 = torch.tensor(alpha, dtype=torch.float64).float()
    dst.copy_(((up + 1.0) * (gate * torch.sigmoid(gate * alpha32))).to(input.dtype))


def fused_qk_norm_rope(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                       cos_sin_cache, is_neox, position_ids):
    CALLS["fused_qk_norm_rope"] += 1
    name = "stand-in _C::fused_qk_norm_rope"
    for label, t in (("qkv", qkv), ("position_ids", position_ids), ("q_weight", q_weight),
                     ("k_weight", k_weight), ("cos_sin_cache", cos_sin_cache)):
        if not t.is_contiguous():
            raise RuntimeError(f"{name}: {label} must be contiguous")
    if position_ids.dtype != torch.int64 or qkv.dim() != 2 or position_ids.dim() != 1:
        raise RuntimeError(f"{name}: qkv must be 2-D, position_ids 1-D int64")
    if q_weight.dim() != 1 or k_weight.dim() != 1 or q_weight.size(0) != head_dim or k_weight.size(0) != head_dim:
        raise RuntimeError(f"{name}: weights must be 1-D of head_dim")
    rot = cos_sin_cache.size(1)
    if cos_sin_cache.dim() != 2 or rot % 2 or rot > head_dim:
        raise RuntimeError(f"{name}: cos/sin cache must be 2-D [max_position, rotary_dim <= head_dim], even")
    if qkv.dtype != q_weight.dtype or qkv.dtype != k_weight.dtype:
        raise RuntimeError(f"{name}: qkv, q_weight and k_weight must have the same dtype")
    tokens, heads = qkv.size(0), num_heads_q + num_heads_k + num_heads_v
    if position_ids.size(0) != tokens or qkv.size(1) != heads * head_dim:
        raise RuntimeError(f"{name}: token count or width does not match")
    if qkv.dtype not in (torch.float16, torch.bfloat16) or cos_sin_cache.dtype not in _FLOATS:
        raise RuntimeError(f"{name}: not implemented for '{qkv.dtype}' with a '{cos_sin_cache.dtype}' cache")
    if head_dim not in (64, 128, 256, 512):
        raise RuntimeError(f"{name}: Unsupported head dimension for fused_qk_norm_rope: {head_dim}")
    if tokens and (int(position_ids.min()) < 0 or int(position_ids.max()) >= cos_sin_cache.size(0)):
        raise RuntimeError(f"{name}: a position reads out of bounds of the cache")
    qk = qkv.view(tokens, heads, head_dim)[:, : num_heads_q + num_heads_k]
    x = qk.float()
    w = torch.cat((q_weight.float().expand(num_heads_q, head_dim), k_weight.float().expand(num_heads_k, head_dim)))
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + float(torch.tensor(eps).float())) * w
    rows = cos_sin_cache.float()[position_ids]
    cos, sin = rows[:, None, : rot // 2], rows[:, None, rot // 2 :]
    part = x[..., :rot]
    a, b = (part[..., : rot // 2], part[..., rot // 2 :]) if is_neox else (part[..., 0::2], part[..., 1::2])
    na, nb = a * cos - b * sin, b * cos + a * sin
    rotated = torch.cat((na, nb), -1) if is_neox else torch.stack((na, nb), -1).flatten(-2)
    x = torch.cat((rotated, x[..., rot:]), -1)
    qk.copy_(x.to(qkv.dtype))  # one rounding


def _rotate_in_place(x, tokens, heads, token_stride, head_stride, rows, pos, is_neox):
    """Rotate the first rot_dim channels of each head of x, addressed as the SYCL kernel does."""
    rot_dim = rows.shape[1]
    half = rot_dim // 2
    view = x.as_strided((tokens, heads, rot_dim), (token_stride, head_stride, 1))
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= rows.shape[0]):
        raise RuntimeError("stand-in _C::rotary_embedding: a position reads out of bounds of the cache")
    cos_sin = rows[pos]
    cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]
    if is_neox:
        a, b = view[..., :half], view[..., half:]
    else:
        a, b = view[..., 0::2], view[..., 1::2]
    new_a, new_b = a * cos - b * sin, b * cos + a * sin  # in the scalar type, one rounding per op
    a.copy_(new_a)
    b.copy_(new_b)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    CALLS["rotary_embedding"] += 1
    if query.dtype not in _FLOATS:
        raise RuntimeError(f"stand-in _C::rotary_embedding: not implemented for '{query.dtype}'")
    pdim = positions.dim()
    if pdim not in (1, 2):
        raise RuntimeError("stand-in _C::rotary_embedding: positions must have shape [num_tokens] or [batch_size, seq_len]")
    for t in (query,) if key is None else (query, key):
        if tuple(t.shape[:pdim]) != tuple(positions.shape):
            raise RuntimeError("stand-in _C::rotary_embedding: query, key and positions must have the same number of tokens")
    tokens = positions.numel()
    q_hidden = query.numel() // tokens
    k_hidden = key.numel() // tokens if key is not None else 0
    if q_hidden % head_size or k_hidden % head_size:
        raise RuntimeError("stand-in _C::rotary_embedding: hidden size is not a multiple of head_size")
    heads = q_hidden // head_size
    kv_heads = k_hidden // head_size if key is not None else heads
    if heads % kv_heads:
        raise RuntimeError("stand-in _C::rotary_embedding: num_heads % num_kv_heads != 0")
    if cos_sin_cache.dtype != query.dtype:
        raise RuntimeError(
            f"stand-in _C::rotary_embedding: expected scalar type {query.dtype} but found {cos_sin_cache.dtype}"
        )
    rot_dim = cos_sin_cache.size(1)
    seq_dim = pdim - 1
    head_stride = query.stride(-2) if query.dim() == pdim + 2 else head_size
    rows = cos_sin_cache.as_strided((cos_sin_cache.size(0), rot_dim), (rot_dim, 1))
    pos = positions.as_strided((tokens,), (1,))
    _rotate_in_place(query, tokens, heads, query.stride(seq_dim), head_stride, rows, pos, is_neox)
    if key is not None:
        _rotate_in_place(key, tokens, kv_heads, key.stride(seq_dim), head_stride, rows, pos, is_neox)


# ---------------------------------------------------------------- fused norm / activation + quant
_FLOOR = 1.0 / (448.0 * 512.0)  # fp8::min_scaling_factor<Float8_e4m3fn>


def _check(cond, name, message):
    if not cond:
        raise RuntimeError(f"stand-in _C::{name}: {message}")


def _fused_checks(name, result, input, weight, *scales, fp8=(torch.float8_e4m3fn,)):
    _check(result.is_contiguous(), name, "out must be contiguous")
    _check(weight is None or weight.dtype == input.dtype, name, "weight and input must have the same dtype")
    _check(input.dtype in _FLOATS, name, f'"{name}" not implemented for \'{input.dtype}\'')
    _check(result.dtype in fp8, name, f"output must be one of {fp8}, got {result.dtype}")
    for s in scales:
        _check(s is None or s.dtype == torch.float32, name, "expected scalar type Float")
    CALLS[name] += 1


def _vectors(name, vec, *tensors):
    """aligned_vec / vec_n_t loads and stores: each pointer aligned to the vector's bytes."""
    for t in tensors:
        _check(t.data_ptr() % (vec * t.element_size()) == 0, name, "misaligned vector access")


def _norm_rows(rows, weight, epsilon, inv_rms=None):
    """``x * inv_rms * float(w)`` in fp32 (4543b58: the weight promoted, one rounding at the store)."""
    xf = rows.float()
    if inv_rms is None:
        inv_rms = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    return xf * inv_rms * weight.float()


def _store_fp8(y, dtype):
    return y.clamp(-448.0, 448.0).to(dtype)


def _add_in_place(name, x, residual, tokens, hidden):
    """The sum added and rounded in the input's type, written into the residual (rows at
    ``row * hidden``, as wide as ``x``); returns the rounded sum."""
    _check(residual.dtype == x.dtype, name, "residual and input must have the same dtype")
    r = residual.as_strided((tokens, x.shape[1]), (hidden, 1))
    total = (x.float() + r.float()).to(x.dtype)
    r.copy_(total)
    return total


def rms_norm_static_fp8_quant(result, input, weight, scale, epsilon, residual=None):
    name = "fused_add_rms_norm_static_fp8_quant" if residual is not None else "rms_norm_static_fp8_quant"
    if residual is not None:
        _check(residual.is_contiguous(), name, "residual must be contiguous")
    _fused_checks(name, result, input, weight, scale, fp8=_FP8)
    hidden = input.size(-1)
    tokens = input.numel() // hidden
    stride = input.stride(-2) if input.dim() > 1 else hidden
    vec = math.gcd(16 // input.element_size(), hidden)
    vec = vec if stride % vec == 0 else 1
    _vectors(name, vec, input, weight)
    x = input.as_strided((tokens, hidden), (stride, 1))  # the unit last stride assumed, unchecked
    if residual is not None:
        x = _add_in_place(name, x, residual, tokens, hidden)
    y = _norm_rows(x, weight.as_strided((hidden,), (1,)), epsilon) * (1.0 / scale.as_strided((1,), (1,)))
    result.as_strided((tokens, hidden), (hidden, 1)).copy_(_store_fp8(y, result.dtype))


def fused_add_rms_norm_static_fp8_quant(result, input, residual, weight, scale, epsilon):
    rms_norm_static_fp8_quant(result, input, weight, scale, epsilon, residual)


def rms_norm_dynamic_per_token_quant(result, input, weight, scale, epsilon, scale_ub, residual):
    name = "rms_norm_dynamic_per_token_quant"
    _check(input.is_contiguous(), name, "input must be contiguous")
    if residual is not None:
        _check(residual.is_contiguous(), name, "residual must be contiguous")
    _fused_checks(name, result, input, weight, scale, scale_ub)
    hidden = input.size(-1)
    tokens = input.numel() // hidden
    x = input.as_strided((tokens, hidden), (hidden, 1))
    if residual is not None:
        x = _add_in_place(name, x, residual, tokens, hidden)
    y = _norm_rows(x, weight, epsilon)
    amax = y.abs().amax(-1, keepdim=True)
    if scale_ub is not None:
        amax = torch.minimum(amax, scale_ub.as_strided((1,), (1,)))
    s = torch.clamp(amax / 448.0, min=_FLOOR)
    scale.as_strided((tokens, 1), (1, 1)).copy_(s)
    result.as_strided((tokens, hidden), (hidden, 1)).copy_(_store_fp8(y * (1.0 / s), result.dtype))


def _block_scales(y, group, vec, ub, ue8m0):
    """The per-block kernels' scales and quantised values of the fp32 rows ``y`` ``[tokens, n]``
    (n a multiple of ``vec``): a vector lane's amax reduced over the aligned block of
    ``next_pow2(group / vec)`` lanes (the xor butterfly), each lane quantised with its block's
    scale; the scale of group ``c / lanes`` stored by the lanes ``c % lanes == 0``."""
    tokens, n = y.shape
    lanes = group // vec
    block = 1 << (lanes - 1).bit_length()
    nvec = n // vec
    pad = -nvec % block
    lane_amax = torch.nn.functional.pad(y.abs().view(tokens, nvec, vec).amax(-1), (0, pad))
    block_amax = lane_amax.view(tokens, -1, block).amax(-1).repeat_interleave(block, -1)[:, :nvec]
    s = torch.clamp(block_amax / 448.0, min=_FLOOR)
    if ub is not None:
        s = torch.clamp(torch.minimum(s, ub.as_strided((1,), (1,))), min=_FLOOR)
    if ue8m0:  # after the floor (the op rounds first)
        s = torch.exp2(torch.ceil(torch.log2(torch.clamp(s.abs(), min=1e-10))))
    q = (y.view(tokens, nvec, vec) / s.unsqueeze(-1)).view(tokens, n)
    return q, s[:, ::lanes][:, : (nvec + lanes - 1) // lanes]


def _store_scales(scales, s, tokens, groups, transposed):
    st = (1, tokens) if transposed else (groups, 1)
    scales.as_strided((tokens, groups), st).copy_(s[:, :groups])


def rms_norm_per_block_quant(result, input, weight, scale, epsilon, scale_ub, residual, group_size,
                             is_scale_transposed, scale_ue8m0=False):
    name = "rms_norm_per_block_quant"
    _check(input.stride(-1) == 1, name, "input must be contiguous in the last dimension")
    _check(input.size(-1) % group_size == 0, name, "hidden_size must be divisible by group_size")
    if residual is not None:
        _check(residual.is_contiguous(), name, "residual must be contiguous")
    _fused_checks(name, result, input, weight, scale)
    hidden = input.size(-1)
    tokens = input.numel() // hidden
    _check(hidden * input.element_size() <= 65536, name, "local memory (the row) exceeds the device's 64 KiB")
    vec = 16 // input.element_size()
    _check(group_size // vec > 0, name, "integer division by zero (lane % lanes_per_group)")
    _vectors(name, vec, input, weight, result, *([residual] if residual is not None else []))
    n = hidden // vec * vec  # a tail of fewer than vec elements is never read nor written
    x = input.as_strided((tokens, n), (input.stride(0), 1))  # rows at stride(0)
    if residual is not None:
        x = _add_in_place(name, x, residual, tokens, hidden)
    xf = x.float()
    inv_rms = torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) / hidden + epsilon)
    y = _norm_rows(x, weight.as_strided((n,), (1,)), epsilon, inv_rms)
    q, s = _block_scales(y, group_size, vec, None, scale_ue8m0)
    result.as_strided((tokens, n), (hidden, 1)).copy_(_store_fp8(q, result.dtype))
    _store_scales(scale, s, tokens, min(s.shape[1], hidden // group_size), is_scale_transposed)


def silu_and_mul_quant(result, input, scale):
    name = "silu_and_mul_quant"
    _check(result.dtype in _FP8, name, "out must be float8_e4m3fn or float8_e5m2")
    _check(input.dtype in (torch.float16, torch.bfloat16), name, "input must be float16 or bfloat16")
    _check(scale.dtype == torch.float32, name, "expected scalar type Float")
    CALLS[name] += 1
    d = input.size(-1) // 2
    tokens = input.numel() // input.size(-1)
    vec = 16 // input.element_size()
    while vec > 1 and (vec >> 1) * min(d, 1024) >= d:
        vec >>= 1
    vec = vec if d % vec == 0 else 1
    _vectors(name, vec, input)
    xy = input.as_strided((tokens, 2 * d), (2 * d, 1))  # contiguous rows, unchecked
    a = (xy[:, :d].float() / (1.0 + torch.exp(-xy[:, :d].float()))).to(input.dtype)  # silu_kernel -> T
    prod = (a.float() * xy[:, d:].float()).to(input.dtype)  # the product in T
    y = prod.float() * (1.0 / scale.as_strided((1,), (1,)))
    result.as_strided((tokens, d), (d, 1)).copy_(_store_fp8(y, result.dtype))


def silu_and_mul_per_block_quant(out, input, scales, group_size, scale_ub=None, is_scale_transposed=False,
                                 scale_ue8m0=False):
    name = "silu_and_mul_per_block_quant"
    _check(out.dtype in _FP8, name, "out must be float8_e4m3fn, float8_e5m2, or int8")
    _check(input.dtype in (torch.float16, torch.bfloat16), name, "input must be float16 or bfloat16")
    _check(out.is_contiguous() and input.is_contiguous(), name, "out and input must be contiguous")
    _check(scales.dtype == torch.float32, name, "scales must be float32")
    _check(group_size in (32, 64, 128), name, f"group_size must be 32, 64, or 128, got {group_size}")
    _check(input.dim() == 2 and out.dim() == 2, name, "input must be 2-dimensional")
    tokens, d = input.size(0), out.size(-1)
    _check(input.size(-1) == 2 * d and d % group_size == 0, name, "hidden_size must be divisible by group_size")
    groups = d // group_size
    _check(tuple(scales.shape) == (tokens, groups), name, "scales must have logical shape [num_tokens, num_groups]")
    CALLS[name] += 1
    if tokens == 0:
        return
    vec = 16 // input.element_size()
    _vectors(name, vec, input, out)
    g, u = input[:, :d].float(), input[:, d:].float()
    y = g / (1.0 + torch.exp(-g)) * u  # fp32, not rounded
    q, s = _block_scales(y, group_size, vec, scale_ub, scale_ue8m0)
    out.copy_(_store_fp8(q, out.dtype))
    _store_scales(scales, s, tokens, groups, is_scale_transposed)


def _changed_rms_norm(input, result, weight, epsilon):
    rms_norm(result, input, weight, epsilon)


_KERNELS = {"rms_norm": _changed_rms_norm if VARIANT == "changed" else rms_norm,
            "fused_add_rms_norm": fused_add_rms_norm, "silu_and_mul": silu_and_mul,
            "rotary_embedding": rotary_embedding, "mul_and_silu": mul_and_silu, "gelu_and_mul": gelu_and_mul,
            "gelu_tanh_and_mul": gelu_tanh_and_mul, "fatrelu_and_mul": fatrelu_and_mul,
            "swigluoai_and_mul": swigluoai_and_mul, "fused_qk_norm_rope": fused_qk_norm_rope,
            "static_scaled_fp8_quant": static_scaled_fp8_quant,
            "dynamic_per_token_scaled_fp8_quant": dynamic_per_token_scaled_fp8_quant,
            "per_token_group_fp8_quant": per_token_group_fp8_quant,
            "rms_norm_static_fp8_quant": rms_norm_static_fp8_quant,
            "fused_add_rms_norm_static_fp8_quant": fused_add_rms_norm_static_fp8_quant,
            "rms_norm_dynamic_per_token_quant": rms_norm_dynamic_per_token_quant,
            "rms_norm_per_block_quant": rms_norm_per_block_quant,
            "silu_and_mul_quant": silu_and_mul_quant,
            "silu_and_mul_per_block_quant": silu_and_mul_per_block_quant}
_LIB = torch.library.Library("_C", "DEF")  # raises if another library owns _C (vLLM's _C)
for _name, _schema in SCHEMAS.items():
    _LIB.define(_schema)
    _LIB.impl(_name, _KERNELS[_name], "CPU")
    if not (VARIANT == "no-xpu-kernel" and _name == "rms_norm"):
        _LIB.impl(_name, _KERNELS[_name], "XPU")
