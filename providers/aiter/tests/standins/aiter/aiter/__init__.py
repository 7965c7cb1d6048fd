"""STAND-IN for AMD's AITER (``import aiter``), for ircore's CPU tests; not AITER.

It exposes what ircore's ``aiter`` provider calls, with AITER's call forms and structure: each
function is a ``(*args, **kwargs)`` wrapper around a torch op ``torch.ops.aiter.<name>`` whose
schema is inferred from the Python declaration with every tensor marked mutable (AITER's
``torch_compile_guard``), so the parameters are readable only from the op. The kernels compute
on the CPU but address memory the way AITER's do, so a marshalling mistake gives wrong numbers
or an error here as it would on the GPU:

- norms: ``n = size(-1)``, ``m = numel // n``, rows at ``stride(0)`` of each tensor, unit last
  stride assumed (a 3-D contiguous input is read with its batch stride as the row stride);
  fp16/bf16 only; the weight read as ``n`` contiguous elements of x's dtype whatever its dtype;
- silu_and_mul: contiguous rows of ``2d`` in, ``d`` out, vector width ``min(8, next_pow2(d // 64))``
  (a ``d`` that is not a multiple writes past the row), 16-byte aligned loads;
- rope (``aiter/ops/rope.py`` ``rope_cached_positions[_2c]_fwd_impl``, HIP
  ``csrc/kernels/rope/pos_fwd_kernels.cu``): "sbhd" inputs and outputs ``[s, b, h, d]`` addressed
  through their own four strides (int32 on the device); positions ``[s, b]`` asserted 2-D with
  ``stride(1) == 1`` and read as contiguous ``[s, b]`` rows (``sid * b + bid``); ``cos``/``sin``
  ``[max_pos, 1, 1, f]`` read at ``pos * f + i`` from their data pointers (contiguous rows
  assumed, unchecked); a position outside ``[0, max_pos)`` leaves its token untouched;
  ``rotate_style`` 0 (neox: pairs ``(i, i + r/2)``) or 1 (gptj: ``(2i, 2i + 1)``); rotated width
  ``r = 2f`` with ``reuse_freqs_front_part`` (one cos/sin per pair) else ``f``; the rotated
  channels at the front of each head, or at the back with ``nope_first``, the others copied;
  fp32 maths from the input's and the cache's own dtypes (any of fp32/fp16/bf16 each), one
  rounding per output. The ``*_inplace`` Python functions pass the input as the output;
- fp8 quant (``aiter/ops/quant.py``, HIP ``csrc/kernels/quant_kernels.cu``, read at AITER's head
  of 2026): ``static_per_tensor_quant(out, input, scale)``, ``dynamic_per_tensor_quant(out, input,
  scale)``, ``dynamic_per_token_scaled_quant(out, input, scales, scale_ub=None, shuffle_scale=False,
  num_rows=None, num_rows_factor=1)``, and the CK ``rmsnorm2d_fwd_with_dynamicquant(out, input,
  yscale, weight, epsilon, use_model_sensitive_rmsnorm=0)``: output buffers passed in; input and
  out read as contiguous rows of ``cols = size(-1)`` from their data pointers (``blockIdx.x *
  cols``), 16-byte vectors; ``out`` must have AITER's ``dtypes.fp8`` for the arch (``GPU_ARCHS``,
  as AITER's chip_info reads it: e4m3fnuz on gfx942, e4m3fn otherwise); scales fp32. Maths as
  the kernels: the fp8 maximum is ``finfo(out.dtype).max`` (**240** for e4m3fnuz, not vLLM's
  224), ``x * (1/scale)`` saturated to it; dynamic scales ``amax / max`` with **no floor** (an
  all-zero row or tensor gets scale 0 and NaN values, 0 * inf);
- fp8 GEMMs (``gemm_a8w8_blockscale``, ``gemm_a8w8``): in ``aiter/ops/gemm_op_a8w8.py``, as in
  AITER, re-exported here;
- a launch with no rows fails, as an empty grid does on HIP.

``IRCORE_STANDIN_AITER_FORM`` picks the release modelled: ``0.1.7`` (default), ``head``
(AITER's head after 0.1.7: ``gemma_norm`` 7th parameter of rmsnorm2d_fwd_with_add, ``limit`` of silu_and_mul) or
``changed`` (a hypothetical release that swapped ``weight`` and ``epsilon``, which ircore must
refuse). ``CALLS`` counts kernel launches per function.
"""

import os
from collections import Counter

import torch
from torch import Tensor

if os.environ.get("IRCORE_FIXTURE_IMPORT_LOG"):
    with open(os.environ["IRCORE_FIXTURE_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

FORM = os.environ.get("IRCORE_STANDIN_AITER_FORM", "0.1.7")
CALLS: Counter = Counter()
_HALF = (torch.float16, torch.bfloat16)
_LIB = torch.library.Library("aiter", "FRAGMENT")


def _launch(name: str, rows: int) -> None:
    if rows == 0:
        raise RuntimeError(f"stand-in aiter.{name}: launch with an empty grid (HIP: invalid configuration)")
    CALLS[name] += 1


def _rows(t: Tensor) -> Tensor:
    """The (m, n) rows an AITER norm kernel reads or writes: row stride = stride(0), unit last."""
    n = t.shape[-1]
    return t.as_strided((t.numel() // n, n), (t.stride(0), 1))


def _check_half(name: str, t: Tensor) -> None:
    if t.dtype not in _HALF:
        raise RuntimeError(f"stand-in aiter.{name}: ck rmsnorm2d only support fp16 and bf16 data type")


def _weight_as(weight: Tensor, x: Tensor, n: int) -> Tensor:
    """n contiguous elements of x's dtype from weight's data (one dtype for x, weight and out)."""
    raw = weight.as_strided((weight.numel(),), (1,)).view(torch.uint8)
    return raw.view(x.dtype)[:n]


def _norm(rows: Tensor, weight: Tensor, epsilon: float, gemma: bool) -> Tensor:
    xf = rows.float()
    w = weight.float() + 1.0 if gemma else weight.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon) * w).to(rows.dtype)


def _check_epsilon(name: str, epsilon: object) -> None:
    if not isinstance(epsilon, float):  # AITER type-checks the first call against its annotations
        raise TypeError(f"{name}: epsilon needs to be <class 'float'> but got {type(epsilon)}")


# ---------------------------------------------------------------------- kernels (CPU)
def _rms_norm_kernel(input: Tensor, weight: Tensor, epsilon: float, use_model_sensitive_rmsnorm: int = 0) -> Tensor:
    _check_half("rms_norm", input)
    rows = _rows(input)
    _launch("rms_norm", rows.shape[0])
    out = torch.empty_like(input, memory_format=torch.contiguous_format)
    _rows(out).copy_(_norm(rows, _weight_as(weight, input, rows.shape[1]), epsilon, False))
    return out


def _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon, gemma_norm=False) -> None:
    _check_half("rmsnorm2d_fwd_with_add", input)
    x, r = _rows(input), _rows(residual_in)
    _launch("rmsnorm2d_fwd_with_add", x.shape[0])
    total = x.float() + r.float()
    _rows(residual_out).copy_(total.to(input.dtype))
    w = _weight_as(weight, input, x.shape[1])
    _rows(out).copy_(_norm(total.to(input.dtype), w, epsilon, bool(gemma_norm)))


def _next_pow2(v: int) -> int:
    return 1 if v <= 1 else 1 << (v - 1).bit_length()


def _silu_and_mul_kernel(out: Tensor, input: Tensor, limit: float = 0.0) -> None:
    if input.dtype not in _HALF:
        raise RuntimeError(f"stand-in aiter.silu_and_mul: not implemented for '{input.dtype}'")
    d = input.shape[-1] // 2
    tokens = input.numel() // (2 * d)
    _launch("silu_and_mul", tokens)
    vec = min(8, _next_pow2(d // 64))
    if d % vec:
        raise RuntimeError(f"stand-in aiter.silu_and_mul: d={d} is not a multiple of the {vec}-wide stores")
    if input.data_ptr() % 16 or out.data_ptr() % 16:
        raise RuntimeError("stand-in aiter.silu_and_mul: misaligned 16-byte vector access")
    rows = input.as_strided((tokens, 2 * d), (2 * d, 1))
    xf = rows.float()
    y = torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]
    out.as_strided((tokens, d), (d, 1)).copy_(y.to(out.dtype))


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _rope_kernel(outputs, inputs, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first) -> None:
    name = "rope_cached_positions_2c_fwd_impl" if len(inputs) == 2 else "rope_cached_positions_fwd_impl"
    if positions.dim() != 2 or positions.stride(1) != 1:
        raise RuntimeError(f"stand-in aiter.{name}: Assertion `1 == positions.stride(1) && 2 == positions.dim()' failed")
    if any(t.dim() != 4 for t in (*outputs, *inputs)):
        raise RuntimeError(f"stand-in aiter.{name}: inputs and outputs must be [s, b, h, d]")
    if inputs[0].dtype not in _FLOATS or cos.dtype not in _FLOATS:
        raise RuntimeError(f"stand-in aiter.{name}: does't support {inputs[0].dtype} with {cos.dtype}.")
    if rotate_style not in (0, 1):
        raise RuntimeError(f"stand-in aiter.{name}: does't support rotate type {rotate_style}.")
    size_s = min(inputs[0].size(0), positions.size(0))
    size_b = min(inputs[0].size(1), positions.size(1))
    _launch(name, size_s * size_b)
    size_d, size_f, max_pos = inputs[0].size(3), cos.size(3), cos.size(0)
    rot = 2 * size_f if reuse_freqs_front_part else size_f
    half = rot // 2
    pos = positions.as_strided((size_s * size_b,), (1,))  # rows of the grid, sid * size_b + bid
    valid = (pos >= 0) & (pos < max_pos)
    rows_cos = cos.as_strided((max_pos, size_f), (size_f, 1)).float()
    rows_sin = sin.as_strided((max_pos, size_f), (size_f, 1)).float()
    c, sn = rows_cos[pos.clamp(0, max_pos - 1)], rows_sin[pos.clamp(0, max_pos - 1)]  # [n, f]
    if reuse_freqs_front_part:
        c0, s0, c1, s1 = c, sn, c, sn
    elif rotate_style == 0:
        c0, s0, c1, s1 = c[:, :half], sn[:, :half], c[:, half:], sn[:, half:]
    else:
        c0, s0, c1, s1 = c[:, 0::2], sn[:, 0::2], c[:, 1::2], sn[:, 1::2]
    start = size_d - rot if nope_first else 0
    n = size_s * size_b
    for out, inp in zip(outputs, inputs, strict=True):
        heads = inp.size(2)
        view_in = inp.as_strided((size_s, size_b, heads, size_d), inp.stride())
        view_out = out.as_strided((size_s, size_b, heads, size_d), out.stride())
        x = view_in.float().reshape(n, heads, size_d)
        part = x[..., start : start + rot]
        a, b = (part[..., :half], part[..., half:]) if rotate_style == 0 else (part[..., 0::2], part[..., 1::2])
        na = a * c0[:, None] - b * s0[:, None]
        nb = b * c1[:, None] + a * s1[:, None]
        y = x.clone()
        rotated = torch.cat((na, nb), -1) if rotate_style == 0 else torch.stack((na, nb), -1).flatten(-2)
        y[..., start : start + rot] = rotated
        skipped = ~valid.view(size_s, size_b)  # tokens whose position is out of range are left alone
        keep = view_out[skipped].clone()
        view_out.copy_(y.to(out.dtype).view(size_s, size_b, heads, size_d))
        view_out[skipped] = keep


def _rope_1c(output, input, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first) -> None:
    _rope_kernel((output,), (input,), cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first)


def _rope_2c(output_x, output_y, input_x, input_y, cos, sin, positions, rotate_style, reuse, nope_first) -> None:
    _rope_kernel((output_x, output_y), (input_x, input_y), cos, sin, positions, rotate_style, reuse, nope_first)


def rope_cached_positions_fwd_impl(
    output: Tensor,
    input: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    rotate_style: int,
    reuse_freqs_front_part: bool,
    nope_first: bool,
) -> None: ...


def rope_cached_positions_2c_fwd_impl(
    output_x: Tensor,
    output_y: Tensor,
    input_x: Tensor,
    input_y: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    rotate_style: int,
    reuse_freqs_front_part: bool,
    nope_first: bool,
) -> None: ...


# ---------------------------------------------------------------------- fp8 quant (CPU)
def _arch_fp8() -> torch.dtype:
    """AITER's ``dtypes.fp8``: e4m3fnuz on gfx942, e4m3fn on the other archs (gfx950)."""
    arch = os.environ.get("GPU_ARCHS", "gfx942").split(";")[0].split(":")[0]
    return torch.float8_e4m3fnuz if arch == "gfx942" else torch.float8_e4m3fn


def _quant_rows(name: str, out: Tensor, input: Tensor) -> tuple[Tensor, Tensor]:
    """The contiguous ``(rows, cols)`` an AITER quant kernel reads and writes (``blockIdx.x * cols``
    from the data pointers, whatever the strides), after the kernel's checks."""
    if input.dtype not in _HALF:
        raise RuntimeError(f"stand-in aiter.{name}: input dtype {input.dtype} not supported (fp16/bf16)")
    if out.dtype != _arch_fp8():
        raise RuntimeError(f"stand-in aiter.{name}: out dtype {out.dtype} is not this arch's fp8 {_arch_fp8()}")
    cols = input.shape[-1]
    rows = input.numel() // cols
    _launch(name, rows)
    if input.data_ptr() % 16 or out.data_ptr() % 16 or (cols * input.element_size()) % 16 or cols % 16:
        raise RuntimeError(f"stand-in aiter.{name}: misaligned 16-byte vector access")
    return out.as_strided((rows, cols), (cols, 1)), input.as_strided((rows, cols), (cols, 1))


def _check_fp32(name: str, t: Tensor) -> None:
    if t.dtype != torch.float32:
        raise RuntimeError(f"stand-in aiter.{name}: scale must be float32 (read as float*), got {t.dtype}")


def _saturate(y: Tensor, out_dtype: torch.dtype) -> Tensor:
    """The kernel's store: saturated to ``finfo(out).max`` (240 for e4m3fnuz), NaN kept."""
    m = torch.finfo(out_dtype).max
    return y.clamp(-m, m).to(out_dtype)


def _static_per_tensor_quant_kernel(out: Tensor, input: Tensor, scale: Tensor) -> None:
    _check_fp32("static_per_tensor_quant", scale)
    o, x = _quant_rows("static_per_tensor_quant", out, input)
    inv = 1.0 / scale.as_strided((1,), (1,))
    o.copy_(_saturate(x.float() * inv, out.dtype))


def _dynamic_per_tensor_quant_kernel(out: Tensor, input: Tensor, scale: Tensor) -> None:
    _check_fp32("dynamic_per_tensor_quant", scale)
    o, x = _quant_rows("dynamic_per_tensor_quant", out, input)
    s = x.float().abs().amax() / torch.finfo(out.dtype).max  # no floor
    scale.as_strided((1,), (1,)).fill_(s)
    o.copy_(_saturate(x.float() * (1.0 / s), out.dtype))


def _dynamic_per_token_scaled_quant_kernel(
    out, input, scales, scale_ub=None, shuffle_scale=False, num_rows=None, num_rows_factor=1
) -> None:
    _check_fp32("dynamic_per_token_scaled_quant", scales)
    o, x = _quant_rows("dynamic_per_token_scaled_quant", out, input)
    s = x.float().abs().amax(dim=-1, keepdim=True) / torch.finfo(out.dtype).max  # no floor
    scales.as_strided((x.shape[0], 1), (1, 1)).copy_(s)
    o.copy_(_saturate(x.float() * (1.0 / s), out.dtype))


def _with_dynamicquant_kernel(out, input, yscale, weight, epsilon, use_model_sensitive_rmsnorm=0) -> None:
    _check_half("rmsnorm2d_fwd_with_dynamicquant", input)
    _check_fp32("rmsnorm2d_fwd_with_dynamicquant", yscale)
    rows = _rows(input)
    _launch("rmsnorm2d_fwd_with_dynamicquant", rows.shape[0])
    y = _norm(rows, _weight_as(weight, input, rows.shape[1]), epsilon, False).float()
    s = y.abs().amax(dim=-1, keepdim=True) / torch.finfo(out.dtype).max  # no floor
    yscale.as_strided((rows.shape[0], 1), (1, 1)).copy_(s)
    _rows(out).copy_(_saturate(y * (1.0 / s), out.dtype))


def static_per_tensor_quant(out: Tensor, input: Tensor, scale: Tensor) -> None: ...


def dynamic_per_tensor_quant(out: Tensor, input: Tensor, scale: Tensor) -> None: ...


def dynamic_per_token_scaled_quant(
    out: Tensor,
    input: Tensor,
    scales: Tensor,
    scale_ub: Tensor | None = None,
    shuffle_scale: bool = False,
    num_rows: Tensor | None = None,
    num_rows_factor: int = 1,
) -> None: ...


def rmsnorm2d_fwd_with_dynamicquant(
    out: Tensor, input: Tensor, yscale: Tensor, weight: Tensor, epsilon: float, use_model_sensitive_rmsnorm: int = 0
) -> None: ...


# ---------------------------------------------------------------------- declarations per release
def rms_norm(input: Tensor, weight: Tensor, epsilon: float, use_model_sensitive_rmsnorm: int = 0) -> Tensor: ...


if FORM == "head":

    def rmsnorm2d_fwd_with_add(
        out: Tensor,
        input: Tensor,
        residual_in: Tensor,
        residual_out: Tensor,
        weight: Tensor,
        epsilon: float,
        gemma_norm: bool = False,
        use_model_sensitive_rmsnorm: int = 0,
    ) -> None: ...

    def silu_and_mul(out: Tensor, input: Tensor, limit: float = 0.0) -> None: ...

    def _with_add(out, input, residual_in, residual_out, weight, epsilon, gemma_norm=False, msr=0):
        _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon, gemma_norm)

elif FORM == "changed":

    def rmsnorm2d_fwd_with_add(
        out: Tensor, input: Tensor, residual_in: Tensor, residual_out: Tensor, epsilon: float, weight: Tensor
    ) -> None: ...

    def silu_and_mul(out: Tensor, input: Tensor) -> None: ...

    def _with_add(out, input, residual_in, residual_out, epsilon, weight):
        _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon)

else:

    def rmsnorm2d_fwd_with_add(
        out: Tensor,
        input: Tensor,
        residual_in: Tensor,
        residual_out: Tensor,
        weight: Tensor,
        epsilon: float,
        use_model_sensitive_rmsnorm: int = 0,
    ) -> None: ...

    def silu_and_mul(out: Tensor, input: Tensor) -> None: ...

    def _with_add(out, input, residual_in, residual_out, weight, epsilon, msr=0):
        _with_add_kernel(out, input, residual_in, residual_out, weight, epsilon)


def _guard(declaration, kernel, epsilon_at=None):
    """AITER's torch_compile_guard: a torch op aiter::<name>, and a (*args, **kwargs) caller."""
    name = declaration.__name__
    _LIB.define(name + torch.library.infer_schema(declaration, mutates_args="unknown"))
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, kernel, key)
    op = getattr(torch.ops.aiter, name)

    def wrapper_custom(*args, **kwargs):
        if epsilon_at is not None and len(args) > epsilon_at:
            _check_epsilon(name, args[epsilon_at])
        return op(*args, **kwargs)

    return wrapper_custom


rms_norm = _guard(rms_norm, _rms_norm_kernel, epsilon_at=2)
rmsnorm2d_fwd_with_add = _guard(rmsnorm2d_fwd_with_add, _with_add, epsilon_at=5 if FORM != "changed" else 4)
silu_and_mul = _guard(silu_and_mul, _silu_and_mul_kernel)
rope_cached_positions_fwd_impl = _guard(rope_cached_positions_fwd_impl, _rope_1c)
static_per_tensor_quant = _guard(static_per_tensor_quant, _static_per_tensor_quant_kernel)
dynamic_per_tensor_quant = _guard(dynamic_per_tensor_quant, _dynamic_per_tensor_quant_kernel)
dynamic_per_token_scaled_quant = _guard(dynamic_per_token_scaled_quant, _dynamic_per_token_scaled_quant_kernel)
rmsnorm2d_fwd_with_dynamicquant = _guard(rmsnorm2d_fwd_with_dynamicquant, _with_dynamicquant_kernel, epsilon_at=4)
rope_cached_positions_2c_fwd_impl = _guard(rope_cached_positions_2c_fwd_impl, _rope_2c)


def rope_cached_positions_fwd_inplace(
    input: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    rotate_style: int,
    reuse_freqs_front_part: bool,
    nope_first: bool,
) -> None:
    """AITER's Python function: the kernel with the input as its output."""
    rope_cached_positions_fwd_impl(input, input, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first)


def rope_cached_positions_2c_fwd_inplace(
    input_x: Tensor,
    input_y: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    rotate_style: int,
    reuse_freqs_front_part: bool,
    nope_first: bool,
) -> None:
    """AITER's Python function: the two-channel kernel with the inputs as its outputs."""
    rope_cached_positions_2c_fwd_impl(
        input_x, input_y, input_x, input_y, cos, sin, positions, rotate_style, reuse_freqs_front_part, nope_first
    )


# AITER's ``from .ops.gemm_op_a8w8 import *``: last, the module uses _guard, CALLS and _arch_fp8.
from aiter.ops.gemm_op_a8w8 import gemm_a8w8, gemm_a8w8_blockscale  # noqa: E402, F401
