"""FP8 quantization (static, dynamic per-token/per-tensor, dynamic per-group): vLLM's IR ops as
they are on vLLM main (``vllm/ir/ops/quant.py``), with explicit ``fp8_dtype``.

Constants (one place; kernels should import them): the largest value is 448 for e4m3fn and
**224** for e4m3fnuz (as vLLM: ``finfo(e4m3fnuz).max`` is 240, which vLLM found hurts accuracy);
the smallest dynamic scale is ``1 / (fp8_max * 512)``. Every native clamps to ``±fp8_max``
before it casts: a cast does not saturate on torch 2.11 (480 -> NaN), so an implementation that
skips the clamp is wrong on the GPU even where the CPU build of torch 2.13 saturates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from ircore.op import Quantized, Sample, Tolerance, register_op
from ircore.ops import _checks, _samples

_FLOAT = _checks.FLOAT_DTYPES
E4M3FN = torch.float8_e4m3fn
E4M3FNUZ = torch.float8_e4m3fnuz
#: the fp8 dtypes the quant ops produce
FP8_DTYPES = (E4M3FN, E4M3FNUZ)
_FP8_NAMES = "torch.float8_e4m3fn, torch.float8_e4m3fnuz"
#: Scale outputs are fp32 from an exact amax: within a few fp32 ulps whatever the input dtype.
QUANT_TOLERANCES = {d: Tolerance(atol=0.0, rtol=1e-5) for d in (torch.float32, torch.float16, torch.bfloat16)}


def fp8_max(fp8_dtype: torch.dtype) -> float:
    """The largest magnitude quantisation produces: 448 (e4m3fn), 224 for e4m3fnuz (vLLM's value,
    not ``finfo.max`` = 240)."""
    return 224.0 if fp8_dtype == E4M3FNUZ else float(torch.finfo(fp8_dtype).max)


def min_scale(fp8_dtype: torch.dtype) -> float:
    """The floor of a dynamic scale, ``1 / (fp8_max * 512)``: an all-zero row or group gets it
    (never 0, whose reciprocal would make NaN)."""
    return 1.0 / (fp8_max(fp8_dtype) * 512.0)


def per_tensor_dependence(per_token: bool) -> str | None:
    """Why a dynamic quantisation call depends on the whole batch (``register_op(batch_dependent=)``
    of the dynamic ops): per tensor, its one scale is the maximum over every row."""
    if per_token:
        return None
    return (
        "per_token=False takes one scale from the maximum of the whole tensor, so every row's "
        "result depends on the other rows; quantise per token (per_token=True) for a batch-invariant result"
    )


def static_scale_dependence(x: torch.Tensor, scale: torch.Tensor) -> str | None:
    """Why a static quantisation call depends on the whole batch: a 2-D ``x`` with a scale per
    group of tokens (more than one group of rows, fewer groups than rows), which gives each row
    the scale of its position's group, a grid the row count decides."""
    groups = prep_static_scale(scale, x).shape[0]
    if x.dim() != 2 or not 1 < groups < x.shape[0]:
        return None
    return (
        f"a static scale per group of tokens ({groups} groups over {x.shape[0]} rows) gives each row the "
        "scale of its position's group, and the groups move with the row count; pass one scale per "
        f"token ({x.shape[0]}, 1), per tensor or per channel for a batch-invariant result"
    )


# ---------------------------------------------------------------------- shared pieces
def prep_static_scale(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """vLLM's ``_prep_static_scale``: a static scale as 2-D, to broadcast over ``x.shape[-2:]``.

    One element -> ``(1, 1)``; 1-D of length ``K = x.shape[-1]`` -> ``(1, K)`` (per channel or
    group of channels); any other 1-D -> ``(L, 1)`` (per token or group of tokens). **When M == K a
    1-D scale is per channel**: pass a per-token scale as ``(M, 1)``.
    """
    if scale.numel() == 1:
        return scale.reshape(1, 1)
    if scale.dim() == 1:
        return scale.unsqueeze(-2) if scale.shape[0] == x.shape[-1] else scale.unsqueeze(-1)
    return scale


def group_broadcast(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """vLLM's ``_group_broadcast``: repeat each scale over its group so that ``t`` broadcasts to
    ``shape`` (each dimension of ``t`` is 1 or divides ``shape``'s)."""
    for i, s in enumerate(shape):
        size = t.shape[i] if i < t.dim() else 1
        if size != s and size != 1:
            t = t.unsqueeze(i + 1).expand(*t.shape[: i + 1], s // size, *t.shape[i + 1 :]).flatten(i, i + 1)
    return t


def _quantize(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """``x * (1/scale)`` in fp32, clamped to ±fp8_max, then cast (vLLM's ``quant_fp8``)."""
    m = fp8_max(fp8_dtype)
    out = x.to(torch.float32) * group_broadcast(scale.to(torch.float32), tuple(x.shape[-2:])).reciprocal()
    return out.clamp(-m, m).to(fp8_dtype)


def quantize_by(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype) -> torch.Tensor:
    """``x * (1/scale)`` for a scale that already broadcasts to x (a dynamic ``(..., 1)`` or
    ``(1,)`` scale): on 2-D x exactly vLLM's ``quant_fp8``, and right for 3-D x too."""
    m = fp8_max(fp8_dtype)
    return (x.to(torch.float32) * scale.to(torch.float32).reciprocal()).clamp(-m, m).to(fp8_dtype)


def pad_rows(out: torch.Tensor, num_token_padding: int | None) -> torch.Tensor:
    """Zero rows appended along dimension 0 up to ``num_token_padding`` (never fewer rows)."""
    if num_token_padding is not None and num_token_padding > out.shape[0]:
        out = F.pad(out, (0, 0) * (out.dim() - 1) + (0, num_token_padding - out.shape[0]), "constant", 0.0)
    return out


def group_size_of(x: torch.Tensor, group_shape: list[int]) -> tuple[int, int]:
    """``(group_size, number of groups)`` along x's last dimension (the last group may be ragged)."""
    g = int(group_shape[-1])
    return g, -(-x.shape[-1] // g)


def tma_aligned(m: int, scale_alignment: int) -> int:
    """``m`` rounded up to a multiple of ``16 // scale_alignment`` (DeepGEMM's TMA alignment of a
    column-major scale tensor whose elements take ``scale_alignment`` bytes; 1: ``m``)."""
    if scale_alignment <= 1:
        return m
    step = 16 // scale_alignment
    return -(-m // step) * step


def layout_scales(scales: torch.Tensor, column_major: bool, scale_alignment: int) -> torch.Tensor:
    """Group scales ``x.shape[:-1] + (G,)`` in their promised layout: row-major; column-major
    (strides ``(1, M)`` over the last two dims); with ``scale_alignment > 1`` (2-D only),
    column-major with the column stride rounded up for TMA, ``(1, tma_aligned(M))``."""
    if not column_major:
        return scales
    if scale_alignment > 1:
        m, g = scales.shape
        out = torch.empty_strided(
            (m, g), (1, tma_aligned(m, scale_alignment)), dtype=scales.dtype, device=scales.device
        )
        return out.copy_(scales)
    return scales.transpose(-2, -1).contiguous().transpose(-1, -2)


def group_scales_fp32(
    x: torch.Tensor, group_shape: list[int], use_ue8m0: bool, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x grouped (rows, G, g) zero-padded, scales (rows, G, 1) fp32)`` as vLLM's native: amax /
    fp8_max, rounded up to a power of two with ``use_ue8m0``, **then** floored at min_scale."""
    g, groups = group_size_of(x, group_shape)
    padded = F.pad(x, (0, groups * g - x.shape[-1])) if groups * g != x.shape[-1] else x
    grouped = padded.reshape(-1, groups, g)
    scales = grouped.abs().amax(dim=-1, keepdim=True).float() / fp8_max(fp8_dtype)
    if use_ue8m0:
        scales = pow2_ceil(scales)
    return grouped, scales.clamp(min=min_scale(fp8_dtype))


def pow2_ceil(s: torch.Tensor) -> torch.Tensor:
    """``2 ** ceil(log2(s))`` for ``s >= 0``, exactly: by the exponent (``frexp``), not by
    ``log2``, which CUDA documents to 1 ulp: a result a hair above an integer would turn an exact
    power of two into the next one. 0, NaN and inf are kept."""
    mantissa, exponent = torch.frexp(s)
    return torch.where(torch.isfinite(s) & (mantissa > 0.5), torch.ldexp(torch.ones_like(s), exponent), s)


# ---------------------------------------------------------------------- checks
def check_fp8_dtype(op: str, fp8_dtype: torch.dtype) -> None:
    if fp8_dtype not in FP8_DTYPES:
        _checks.bad_argument(op, "fp8_dtype", f"is {fp8_dtype}; expected one of {_FP8_NAMES}")


def check_quant_x(op: str, x: torch.Tensor, arg: str = "x") -> None:
    """A float tensor of at least 2 dimensions (tokens, hidden) with a non-empty last one."""
    _checks.check_float(op, arg, x)
    if x.dim() < 2:
        _checks.bad_argument(
            op,
            arg,
            f"has shape {tuple(x.shape)}; expected at least 2 dimensions (tokens, hidden): "
            "reshape it to (1, -1)",
        )
    if not x.shape[-1]:
        _checks.bad_argument(op, arg, f"has an empty last dimension (shape {tuple(x.shape)})")


def check_padding(op: str, num_token_padding: int | None) -> None:
    if num_token_padding is not None and num_token_padding < 0:
        _checks.bad_argument(
            op, "num_token_padding", f"is {num_token_padding}; expected None or a count >= 0"
        )


def check_static_scale(
    op: str, x: torch.Tensor, scale: torch.Tensor, of: str = "x's last two dimensions"
) -> None:
    """A float scale on x's device whose vLLM normalisation (:func:`prep_static_scale`) broadcasts
    over ``x.shape[-2:]`` by groups. ``of``: whose dimensions ``x``'s are, for the message (the
    silu forms pass their output's shape)."""
    if scale.dtype not in _FLOAT:
        _checks.bad_argument(op, "scale", f"has dtype {scale.dtype}; expected float32 (or float16, bfloat16)")
    if scale.device != x.device:
        _checks.bad_argument(op, "scale", f"is on {scale.device} but x is on {x.device}")
    m, k = x.shape[-2:]
    fits = scale.dim() <= 2 and scale.numel() > 0
    if fits:
        a, b = prep_static_scale(scale, x).shape
        # each size is 1, the dimension's, or divides it (groups): what group_broadcast expands
        fits = all(size in (1, dim) or (size <= dim and dim % size == 0) for size, dim in ((a, m), (b, k)))
    if not fits:
        _checks.bad_argument(
            op,
            "scale",
            f"has shape {tuple(scale.shape)}, which does not broadcast over {of} "
            f"(M, K) = ({m}, {k}); expected one element (per tensor), ({k},) per channel, ({m},) or "
            f"({m}, 1) per token, or 2-D (M/gm, K/gn) group scales whose sizes divide M and K "
            "(a 1-D scale of length K is per channel even when M == K)",
        )


def check_scale_ub(op: str, x: torch.Tensor, scale_ub: torch.Tensor) -> None:
    if scale_ub.numel() != 1 or scale_ub.dtype not in _FLOAT:
        _checks.bad_argument(
            op,
            "scale_ub",
            f"is {scale_ub.dtype} of shape {tuple(scale_ub.shape)}; expected one float32 element, "
            "the upper bound of the per-token amax",
        )
    if scale_ub.device != x.device:
        _checks.bad_argument(op, "scale_ub", f"is on {scale_ub.device} but x is on {x.device}")


def check_per_tensor_rows(op: str, x: torch.Tensor, per_token: bool) -> None:
    if not per_token and not x.numel():
        _checks.bad_argument(
            op,
            "x",
            f"has no elements (shape {tuple(x.shape)}); a per-tensor scale needs at least one "
            "(per_token=True takes empty batches)",
        )


def check_group_args(
    op: str, x: torch.Tensor, group_shape: list[int], column_major: bool, scale_alignment: int
) -> None:
    if (
        len(group_shape) not in (1, 2)
        or group_shape[-1] < 1
        or (len(group_shape) == 2 and group_shape[0] != 1)
    ):
        _checks.bad_argument(
            op,
            "group_shape",
            f"is {list(group_shape)}; expected (1, g) or (g,) with g >= 1: each group is g elements "
            "of one token's row",
        )
    if scale_alignment not in (1, 2, 4, 8, 16):
        _checks.bad_argument(
            op,
            "scale_alignment",
            f"is {scale_alignment}; expected 1 (none) or the scale element size in bytes for TMA "
            "alignment: 2, 4 (float32 scales), 8 or 16",
        )
    if scale_alignment > 1 and column_major and x.dim() != 2:
        _checks.bad_argument(
            op,
            "x",
            f"has shape {tuple(x.shape)}; TMA-aligned column-major scales (scale_alignment > 1) "
            "need a 2-D x (tokens, hidden)",
        )


# ---------------------------------------------------------------------- quantized_outputs (kit)
def static_view(
    q_index: int,
    rows: Callable[[tuple[Any, ...]], int],
    x_of: Callable[[tuple[Any, ...]], torch.Tensor],
    scale_arg: int,
) -> Callable[..., dict[int, Quantized]]:
    """``quantized_outputs`` of an op with a static scale argument: output ``q_index`` without its
    padding rows, the scale argument broadcast as the op applies it."""

    def view(args: tuple[Any, ...], outs: tuple[Any, ...]) -> dict[int, Quantized]:
        x = x_of(args)
        scale = group_broadcast(prep_static_scale(args[scale_arg], x).double(), tuple(x.shape[-2:]))
        return {q_index: Quantized(outs[q_index][: rows(args)], scale, fp8_max(args[scale_arg + 1]))}

    return view


def dynamic_view(
    q_index: int, scale_index: int, rows: Callable[[tuple[Any, ...]], int], dtype_arg: int
) -> Callable[..., dict[int, Quantized]]:
    """``quantized_outputs`` of a dynamic op: output ``q_index`` without padding rows, divided by
    output ``scale_index`` (``(..., 1)`` per token, ``(1,)`` per tensor)."""

    def view(args: tuple[Any, ...], outs: tuple[Any, ...]) -> dict[int, Quantized]:
        return {q_index: Quantized(outs[q_index][: rows(args)], outs[scale_index], fp8_max(args[dtype_arg]))}

    return view


def group_view(
    q_index: int, scale_index: int, group_arg: int, dtype_arg: int
) -> Callable[..., dict[int, Quantized]]:
    """``quantized_outputs`` of a group op: each scale repeated over its group (the ragged last
    group cut to the row's length)."""

    def view(args: tuple[Any, ...], outs: tuple[Any, ...]) -> dict[int, Quantized]:
        q = outs[q_index]
        g = int(args[group_arg][-1])
        scale = outs[scale_index].repeat_interleave(g, dim=-1)[..., : q.shape[-1]]
        return {q_index: Quantized(q, scale, fp8_max(args[dtype_arg]))}

    return view


def _first_rows(args: tuple[Any, ...]) -> int:
    return int(args[0].shape[0])


# ---------------------------------------------------------------------- references (fp64)
def static_reference(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> torch.Tensor:
    """``clamp(x / scale, ±fp8_max)`` in fp64, unrounded (in fp8 units), padded as the op."""
    m = fp8_max(fp8_dtype)
    s = group_broadcast(prep_static_scale(scale, x).double(), tuple(x.shape[-2:]))
    return pad_rows((x.double() / s).clamp(-m, m), num_token_padding)


def dynamic_reference(
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = fp8_max(fp8_dtype)
    xd = x.double()
    if per_token:
        amax = xd.abs().amax(dim=-1, keepdim=True)
        if scale_ub is not None:
            amax = amax.clamp(max=float(scale_ub.reshape(())))
    else:
        amax = xd.abs().amax().reshape(1)
    scale = (amax / m).clamp(min=min_scale(fp8_dtype))
    return pad_rows((xd / scale).clamp(-m, m), num_token_padding), scale


def group_reference(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    m = fp8_max(fp8_dtype)
    g, groups = group_size_of(x, group_shape)
    xd = x.double()
    padded = F.pad(xd, (0, groups * g - x.shape[-1]))
    grouped = padded.reshape(*x.shape[:-1], groups, g)
    scales = grouped.abs().amax(dim=-1, keepdim=True) / m
    if use_ue8m0:
        scales = pow2_ceil(scales)
    scales = scales.clamp(min=min_scale(fp8_dtype))
    q = (grouped / scales).clamp(-m, m).reshape(*x.shape[:-1], groups * g)[..., : x.shape[-1]]
    return q, scales.squeeze(-1)


# ---------------------------------------------------------------------- samples
def special_rows(
    shape: tuple[int, int], dtype: torch.dtype, device: str, gen: torch.Generator
) -> torch.Tensor:
    """Random rows with, in turn: an all-zero row (row 1), one with |x| far beyond the fp8
    maximum (row 2, x 1e3), one with an all-zero group at the start (row 0's first 64)."""
    x = _samples.randn(shape, dtype, device, gen, scale=2.0)
    x[1] = 0
    if shape[0] > 2:
        x[2] = (x[2].float() * 1e3).to(dtype)
    x[0, :64] = 0
    return x


def with_inf(x: torch.Tensor) -> torch.Tensor:
    """x with +inf and -inf in its first row (and a value beyond 448 in the second)."""
    x = x.clone()
    x[0, 3], x[0, 5] = float("inf"), float("-inf")
    x[1, 0] = 600.0
    return x


def static_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 20, device)

    def scale(shape: tuple[int, ...], lo: float = 0.005) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device=device) * 0.02 + lo

    x = _samples.randn((9, 256), dtype, device, gen, scale=2.0)
    yield Sample((x, scale(()), E4M3FN, None), "9x256 per-tensor 0-d scale")
    yield Sample((x, scale((1,)), E4M3FNUZ, None), "9x256 per-tensor e4m3fnuz (max 224)")
    yield Sample((x, scale((256,)), E4M3FN, None), "9x256 per-channel (K,) scale")
    yield Sample((x, scale((9,)), E4M3FN, None), "9x256 per-token (M,) scale")
    yield Sample((x, scale((9, 1)), E4M3FN, 16), "9x256 per-token (M,1) scale, padded to 16 rows")
    yield Sample((x, scale((3, 4)), E4M3FN, None), "9x256 group scale (3,4): groups of 3x64")
    xs = _samples.randn((64, 64), dtype, device, gen)
    yield Sample((xs, scale((64,)), E4M3FN, None), "64x64 (M == K): a 1-D scale is per channel")
    yield Sample((with_inf(x), scale((1,), 0.001), E4M3FN, None), "9x256 |x| beyond the fp8 max and inf")
    yield Sample((with_inf(x), scale((1,), 0.001), E4M3FNUZ, None), "9x256 e4m3fnuz: beyond 224 and inf")
    yield Sample(
        (_samples.strided_rows(5, 128, dtype, device, gen), scale(()), E4M3FN, 8),
        "5x128 row stride 192, padded",
    )
    yield Sample((_samples.randn((2, 3, 64), dtype, device, gen), scale(()), E4M3FN, None), "2x3x64")
    yield Sample((_samples.randn((0, 64), dtype, device, gen), scale(()), E4M3FN, 4), "0x64 padded to 4")


def make_static_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    gen = _samples.generator(seed, device)
    x = _samples.randn(shape, dtype, device, gen, scale=2.0)
    return (x, torch.full((1,), 0.02, device=device), E4M3FN, None)


def dynamic_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 21, device)
    x = special_rows((7, 256), dtype, device, gen)
    ub = torch.tensor([40.0], device=device)
    yield Sample((x, True, E4M3FN, None, None), "7x256 per-token, a zero row, a row x1e3")
    yield Sample((x, False, E4M3FN, None, None), "7x256 per-tensor")
    yield Sample((x, True, E4M3FNUZ, None, 12), "7x256 per-token e4m3fnuz (max 224), padded to 12")
    yield Sample((x, False, E4M3FNUZ, None, 12), "7x256 per-tensor e4m3fnuz, padded to 12")
    yield Sample(
        (with_inf(x), True, E4M3FN, ub, None), "7x256 per-token, scale_ub 40, inf and beyond the max"
    )
    yield Sample(
        (torch.zeros(3, 64, dtype=dtype, device=device), False, E4M3FN, None, None),
        "3x64 all zeros per-tensor",
    )
    yield Sample(
        (x[2:3], False, E4M3FN, ub, 4), "1x256 per-tensor one row (an upper bound given: ignored), padded 4"
    )
    yield Sample(
        (_samples.strided_rows(5, 128, dtype, device, gen), True, E4M3FN, None, None), "5x128 row stride 192"
    )
    yield Sample(
        (_samples.randn((2, 3, 64), dtype, device, gen), True, E4M3FN, None, None), "2x3x64 per-token"
    )
    yield Sample(
        (_samples.randn((0, 64), dtype, device, gen), True, E4M3FN, None, 4), "0x64 per-token padded to 4"
    )


def make_dynamic_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    x = _samples.randn(shape, dtype, device, _samples.generator(seed, device), scale=2.0)
    return (x, True, E4M3FN, None, None)


def group_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 22, device)
    x = special_rows((5, 256), dtype, device, gen)
    yield Sample((x, [1, 128], False, False, E4M3FN, 1), "5x256 g128, zero groups, a row x1e3")
    yield Sample((x, [1, 64], True, False, E4M3FN, 1), "5x256 g64 column-major")
    yield Sample((x, [1, 64], True, True, E4M3FN, 4), "5x256 g64 column-major ue8m0, TMA-aligned stride 8")
    yield Sample((x, [1, 128], False, True, E4M3FNUZ, 1), "5x256 g128 ue8m0 e4m3fnuz (max 224)")
    xr = _samples.randn((3, 200), dtype, device, gen, scale=3.0)
    yield Sample((xr, [1, 64], False, False, E4M3FN, 1), "3x200 g64: ragged last group of 8")
    yield Sample((xr, (64,), True, True, E4M3FN, 1), "3x200 g64 ragged, column-major ue8m0")
    yield Sample(
        (_samples.strided_rows(4, 128, dtype, device, gen), [1, 32], False, False, E4M3FN, 1),
        "4x128 row stride 192 g32",
    )
    yield Sample(
        (_samples.randn((2, 3, 128), dtype, device, gen), [1, 64], True, False, E4M3FN, 1),
        "2x3x128 g64 column-major",
    )
    yield Sample((_samples.randn((0, 128), dtype, device, gen), [1, 128], False, False, E4M3FN, 1), "0x128")
    # no rows, scales column-major with the TMA-aligned stride: still (0, G), as the fake says
    yield Sample(
        (_samples.randn((0, 128), dtype, device, gen), [1, 64], True, False, E4M3FN, 4),
        "0x128 g64 column-major, TMA-aligned stride",
    )


def make_group_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    x = _samples.randn(shape, dtype, device, _samples.generator(seed, device), scale=2.0)
    return (x, [1, min(128, shape[-1])], False, False, E4M3FN, 1)


# ---------------------------------------------------------------------- static_quant_fp8
def _check_static(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> None:
    try:  # the common valid call (a per-tensor scale) in one expression
        if (
            x.dtype in _FLOAT
            and x.dim() >= 2
            and x.shape[-1]
            and (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and scale.numel() == 1
            and scale.dtype in _FLOAT
            and scale.device == x.device
            and (num_token_padding is None or num_token_padding >= 0)
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _static_checks("static_quant_fp8", x, scale, fp8_dtype, num_token_padding)


def _static_checks(
    op: str, x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> None:
    _checks.check_types(op, x, scale, fp8_dtype, num_token_padding)
    check_quant_x(op, x)
    check_static_scale(op, x, scale)
    check_fp8_dtype(op, fp8_dtype)
    check_padding(op, num_token_padding)


_STATIC_VIEW = static_view(0, _first_rows, lambda a: a[0], 1)


@register_op(
    check_args=_check_static,
    tolerances=QUANT_TOLERANCES,
    sample_inputs=static_samples,
    make_inputs=make_static_inputs,
    reference=static_reference,
    quantized_outputs=_STATIC_VIEW,
    batch_invariant=True,  # elementwise: each element scaled by the scale given for it
    batch_dependent=lambda x, scale, *rest: static_scale_dependence(x, scale),
)
def static_quant_fp8(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> torch.Tensor:
    """Quantise ``x`` with a given scale: ``clamp(x.float() * (1/scale), ±fp8_max).to(fp8_dtype)``.

    ``scale`` (any float dtype, used in fp32) is per tensor (one element), per channel
    (``(K,)``), per token (``(M,)`` or ``(M, 1)``) or per group (2-D ``(M/gm, K/gn)``), broadcast
    over ``x.shape[-2:]``: a 1-D scale whose length is K is per channel, **also when M == K**
    (vLLM's rule; give a per-token scale as ``(M, 1)`` there). ``fp8_max`` is 448 (e4m3fn) or 224
    (e4m3fnuz). ``num_token_padding`` appends zero rows along dimension 0 up to that count.
    """
    q = _quantize(x, prep_static_scale(scale, x), fp8_dtype)
    return pad_rows(q, num_token_padding)


def _check_static_group(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> None:
    try:
        if (
            x.dtype in _FLOAT
            and x.dim() >= 2
            and x.shape[-1]
            and (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and scale.numel() == 1
            and scale.dtype in _FLOAT
            and scale.device == x.device
            and (num_token_padding is None or num_token_padding >= 0)
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _static_checks("static_group_quant_fp8", x, scale, fp8_dtype, num_token_padding)


def _static_group_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    for sample in static_samples(dtype, device, seed):
        if "group" in sample.label or "channel" in sample.label or "M == K" in sample.label:
            yield sample


@register_op(
    check_args=_check_static_group,
    tolerances=QUANT_TOLERANCES,
    sample_inputs=_static_group_samples,
    make_inputs=make_static_inputs,
    reference=static_reference,
    quantized_outputs=_STATIC_VIEW,
    batch_invariant=True,  # elementwise: each element scaled by its group's given scale
    batch_dependent=lambda x, scale, *rest: static_scale_dependence(x, scale),
)
def static_group_quant_fp8(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> torch.Tensor:
    """:func:`static_quant_fp8` under its own name (vLLM declares both, with one body): group
    scales ``(M/gm, K/gn)``, or ``(K/g,)`` per channel group; kernels specialise on the name."""
    q = _quantize(x, prep_static_scale(scale, x), fp8_dtype)
    return pad_rows(q, num_token_padding)


# ---------------------------------------------------------------------- dynamic_quant_fp8
def _check_dynamic(
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> None:
    try:
        if (
            x.dtype in _FLOAT
            and x.dim() >= 2
            and x.shape[-1]
            and (per_token is True or (per_token is False and x.numel()))
            and (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and scale_ub is None
            and (num_token_padding is None or num_token_padding >= 0)
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    op = "dynamic_quant_fp8"
    _checks.check_types(op, x, per_token, fp8_dtype, scale_ub, num_token_padding)
    check_quant_x(op, x)
    check_per_tensor_rows(op, x, per_token)
    check_fp8_dtype(op, fp8_dtype)
    if scale_ub is not None:
        check_scale_ub(op, x, scale_ub)
    check_padding(op, num_token_padding)


def dynamic_scale(
    x: torch.Tensor, per_token: bool, fp8_dtype: torch.dtype, scale_ub: torch.Tensor | None
) -> torch.Tensor:
    """vLLM's dynamic scale, fp32: ``max(amax / fp8_max, min_scale)``; the amax per row (clamped
    by ``scale_ub``, per token only) or of the whole tensor."""
    if per_token:
        amax = x.abs().amax(dim=-1, keepdim=True).to(torch.float32)
        if scale_ub is not None:
            amax = amax.clamp(max=scale_ub.float())
    else:
        amax = x.abs().max().unsqueeze(-1).to(torch.float32)
    return (amax / fp8_max(fp8_dtype)).clamp(min=min_scale(fp8_dtype))


@register_op(
    check_args=_check_dynamic,
    tolerances=QUANT_TOLERANCES,
    sample_inputs=dynamic_samples,
    make_inputs=make_dynamic_inputs,
    reference=dynamic_reference,
    quantized_outputs=dynamic_view(0, 1, _first_rows, 2),
    batch_invariant=True,  # per token: each row's scale from its own exact max
    batch_dependent=lambda x, per_token, *rest: per_tensor_dependence(per_token),
)
def dynamic_quant_fp8(
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise with a scale taken from x: returns ``(q, scale)``, scale fp32.

    ``scale = max(amax / fp8_max, 1 / (fp8_max * 512))``, amax per row (``per_token``: scale
    ``x.shape[:-1] + (1,)``, amax clamped to ``scale_ub`` if given) or of the whole tensor
    (scale ``(1,)``; ``scale_ub`` is then ignored, as in vLLM). ``q = clamp(x * (1/scale),
    ±fp8_max)``; ``num_token_padding`` pads ``q`` (not the scale) with zero rows.

    **Per-tensor (per_token=False) depends on the whole batch**: a row's result changes with the
    other rows in the call (the amax is theirs too), so batch-invariant mode refuses it
    (``batch_dependent``); per token it is batch-invariant.
    """
    scale = dynamic_scale(x, per_token, fp8_dtype, scale_ub)
    return pad_rows(quantize_by(x, scale, fp8_dtype), num_token_padding), scale


# ---------------------------------------------------------------------- dynamic_group_quant_fp8
def _check_group(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> None:
    try:
        if (
            x.dtype in _FLOAT
            and x.dim() >= 2
            and x.shape[-1]
            and (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and len(group_shape) == 2
            and group_shape[0] == 1
            and group_shape[1] >= 1
            and scale_alignment == 1
            and column_major.__class__ is bool
            and use_ue8m0.__class__ is bool
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    op = "dynamic_group_quant_fp8"
    _checks.check_types(op, x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)
    check_quant_x(op, x)
    check_group_args(op, x, group_shape, column_major, scale_alignment)
    check_fp8_dtype(op, fp8_dtype)


def group_quant(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The body of :func:`dynamic_group_quant_fp8` (the fused ops call it on the norm's output)."""
    m = fp8_max(fp8_dtype)
    g, groups = group_size_of(x, group_shape)
    grouped, scales = group_scales_fp32(x, group_shape, use_ue8m0, fp8_dtype)
    q = (
        (grouped / scales)
        .clamp(-m, m)
        .to(fp8_dtype)
        .reshape(-1, groups * g)[:, : x.shape[-1]]
        .reshape(x.shape)
        .contiguous()  # a ragged last group: not a view of the padded buffer (kernels return rows of K)
    )
    scales = scales.reshape(*x.shape[:-1], groups)
    return q, layout_scales(scales, column_major, scale_alignment)


@register_op(
    check_args=_check_group,
    batch_invariant=True,  # each group's scale from its own row (an exact max)
    tolerances=QUANT_TOLERANCES,
    sample_inputs=group_samples,
    make_inputs=make_group_inputs,
    reference=group_reference,
    quantized_outputs=group_view(0, 1, 1, 4),
)
def dynamic_group_quant_fp8(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each group of ``g = group_shape[-1]`` elements of a row with its own scale:
    returns ``(q, scales)``, scales fp32 of shape ``x.shape[:-1] + (ceil(K/g),)``.

    ``scale = amax / fp8_max`` per group (a ragged last group is zero-padded), rounded up to a
    power of two with ``use_ue8m0``, **then** floored at ``1 / (fp8_max * 512)``; ``q =
    clamp(x / scale, ±fp8_max)`` (this op divides; the static and dynamic ones multiply by the
    reciprocal, as in vLLM). ``column_major`` gives the scales strides ``(1, M)`` over their last
    two dims; with it, ``scale_alignment`` (the scale element size in bytes for DeepGEMM's TMA, 4
    for fp32; 2-D x only) rounds that column stride up to a multiple of ``16 // scale_alignment``.
    ``group_shape`` is ``(1, g)`` or ``(g,)``.
    """
    return group_quant(x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)
