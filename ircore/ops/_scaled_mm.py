"""FP8 scaled matmuls: per-tensor / per-row scales, and 1x128-group x 128x128-block scales.

Both take vLLM's argument orders, so ports bind without adapters: ``scaled_mm_fp8``'s ``b`` is
``[K, N]`` (as ``torch._scaled_mm`` and vLLM's ``cutlass_scaled_mm``: a weight ``w [N, K]`` is
passed as ``w.t()``), ``block_scaled_mm_fp8``'s ``b`` is the weight ``[N, K]`` itself (as vLLM's
``w8a8_block_fp8_matmul`` and transformers' ``FP8Linear``, whose ``weight_scale_inv`` is
``scale_b``). Natives dequantize in fp32 and multiply in fp32: what every kernel is measured
against (kernels accumulate in fp32 in another order; the tolerances allow for it).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ircore.op import Sample, Tolerance, register_op
from ircore.ops import _checks, _samples
from ircore.ops._quant import dynamic_group_quant_fp8, fp8_max, min_scale

FP8_DTYPES = frozenset({torch.float8_e4m3fn, torch.float8_e4m3fnuz})
_OUT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_F32 = torch.float32
E4M3 = torch.float8_e4m3fn

# Kernels accumulate K products in fp32 in their own order: loose in every output dtype, keyed
# by the fp8 input dtype (the first floating-point argument, which the conformance kit reads).
MATMUL_TOLERANCES = {
    torch.float8_e4m3fn: Tolerance(atol=2e-2, rtol=1.6e-2),
    torch.float8_e4m3fnuz: Tolerance(atol=2e-2, rtol=1.6e-2),
}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------- checks
def _check_operands(op: str, a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> None:
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 2:
            _checks.bad_argument(op, name, f"has shape {tuple(t.shape)}; expected a 2-D fp8 matrix")
        if t.dtype not in FP8_DTYPES:
            _checks.bad_argument(
                op, name, f"has dtype {t.dtype}; expected torch.float8_e4m3fn or torch.float8_e4m3fnuz"
            )
    if b.dtype != a.dtype:
        _checks.bad_argument(
            op, "b", f"has dtype {b.dtype} but a has {a.dtype}; both must be the same fp8 type"
        )
    if b.device != a.device:
        _checks.bad_argument(op, "b", f"is on {b.device} but a is on {a.device}")
    if out_dtype not in _OUT_DTYPES:
        _checks.bad_argument(op, "out_dtype", f"is {out_dtype}; expected torch.float32, float16 or bfloat16")


def _check_scale(op: str, name: str, scale: torch.Tensor, a: torch.Tensor, allowed: dict[str, tuple]) -> None:
    if scale.dtype != _F32:
        _checks.bad_argument(op, name, f"has dtype {scale.dtype}; scales are torch.float32")
    if scale.device != a.device:
        _checks.bad_argument(op, name, f"is on {scale.device} but a is on {a.device}")
    shape = tuple(scale.shape)
    if scale.numel() == 1 and "per-tensor" in allowed:
        return
    if shape not in allowed.values():
        wanted = ", ".join(f"{kind} {s}" for kind, s in allowed.items())
        _checks.bad_argument(op, name, f"has shape {shape}; expected {wanted}")


def _check_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None,
) -> None:
    op = "scaled_mm_fp8"  # the annotations were checked before this runs
    _check_operands(op, a, b, out_dtype)
    (m, k), (kb, n) = a.shape, b.shape
    if kb != k:
        _checks.bad_argument(
            op, "b", f"has shape {tuple(b.shape)}; expected ({k}, N): [K, N], a weight [N, K] as w.t()"
        )
    _check_scale(op, "scale_a", scale_a, a, {"per-tensor": (1,), "per-row": (m, 1)})
    _check_scale(op, "scale_b", scale_b, a, {"per-tensor": (1,), "per-column": (1, n)})
    if bias is not None:
        if tuple(bias.shape) != (n,) or bias.dtype != out_dtype or bias.device != a.device:
            _checks.bad_argument(
                op,
                "bias",
                f"is {tuple(bias.shape)} {bias.dtype} on {bias.device}; "
                f"expected ({n},) {out_dtype} on {a.device}",
            )


def _check_block_size(op: str, block_size: list[int]) -> tuple[int, int]:
    if len(block_size) != 2 or min(block_size) < 1:
        _checks.bad_argument(
            op,
            "block_size",
            f"is {list(block_size)}; expected [block_n, block_k] of positive ints, e.g. [128, 128]",
        )
    return block_size[0], block_size[1]


def _check_block_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> None:
    # The valid call in one expression (an eager decode pays this once per FP8 linear: the careful
    # checks below cost ~4 us of Python, benchmarks/fp8_host_cpu.py); anything it does not vouch
    # for, or that raises in it, gets the careful checks and their messages.
    try:
        (m, k), (n, kb) = a.shape, b.shape
        bn, bk = block_size
        dev = a.device
        if (
            a.dtype in FP8_DTYPES
            and b.dtype is a.dtype
            and out_dtype in _OUT_DTYPES
            and kb == k
            and bn >= 1
            and bk >= 1
            and scale_a.dtype is _F32
            and scale_b.dtype is _F32
            and scale_a.shape == (m, -(-k // bk))
            and scale_b.shape == (-(-n // bn), -(-k // bk))
            and b.device == dev
            and scale_a.device == dev
            and scale_b.device == dev
        ):
            return
    except (TypeError, ValueError, AttributeError):
        pass
    op = "block_scaled_mm_fp8"  # the annotations were checked before this runs
    _check_operands(op, a, b, out_dtype)
    bn, bk = _check_block_size(op, block_size)
    (m, k), (n, kb) = a.shape, b.shape
    if kb != k:
        _checks.bad_argument(
            op, "b", f"has shape {tuple(b.shape)}; expected (N, {k}): the weight [N, K] itself"
        )
    groups = _cdiv(k, bk)
    _check_scale(op, "scale_a", scale_a, a, {"per-token-group": (m, groups)})
    _check_scale(op, "scale_b", scale_b, a, {"per-block": (_cdiv(n, bn), groups)})


# ---------------------------------------------------------------------- natives and references
# Each element's scale by index (column // block), not by repeat_interleave and a slice: Inductor
# (torch 2.13, CPU) computes ``x * s.repeat_interleave(128, 1)[:, :K]`` wrong when K % 128 != 0.
def _dequantize_blocks(
    w: torch.Tensor, scale: torch.Tensor, bn: int, bk: int, dtype: torch.dtype
) -> torch.Tensor:
    n, k = w.shape
    rows = torch.arange(n, device=w.device) // bn
    cols = torch.arange(k, device=w.device) // bk
    return w.to(dtype) * scale.to(dtype)[rows][:, cols]


def _dequantize_groups(a: torch.Tensor, scale: torch.Tensor, bk: int, dtype: torch.dtype) -> torch.Tensor:
    cols = torch.arange(a.shape[1], device=a.device) // bk
    return a.to(dtype) * scale.to(dtype)[:, cols]


def _scaled_mm_in(
    dtype: torch.dtype,
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    out = (a.to(dtype) * scale_a.to(dtype).reshape(-1, 1)) @ (b.to(dtype) * scale_b.to(dtype).reshape(1, -1))
    return out if bias is None else out + bias.to(dtype)


def _scaled_mm_reference(a, b, scale_a, scale_b, out_dtype, bias):
    return _scaled_mm_in(torch.float64, a, b, scale_a, scale_b, bias)


def _block_scaled_mm_reference(a, b, scale_a, scale_b, block_size, out_dtype):
    bn, bk = block_size
    f64 = torch.float64
    return _dequantize_groups(a, scale_a, bk, f64) @ _dequantize_blocks(b, scale_b, bn, bk, f64).t()


# ---------------------------------------------------------------------- inputs
def quantize_fp8(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype = torch.float8_e4m3fn
) -> torch.Tensor:
    """``x / scale`` clamped to the fp8 range, then cast (casts do not saturate on every torch)."""
    big = fp8_max(fp8_dtype)
    return (x.float() / scale).clamp(-big, big).to(fp8_dtype)


def quantize_blocks(
    w: torch.Tensor, block: tuple[int, int] = (128, 128), fp8_dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight ``[N, K]`` quantized in ``block`` tiles: ``(fp8 weight, scale [N/bn, K/bk])``, as
    transformers' ``Fp8Quantize`` stores them (scale = block amax / fp8 max; an all-zero block
    keeps scale 1). Ragged edge blocks are allowed."""
    bn, bk = block
    n, k = w.shape
    big = fp8_max(fp8_dtype)
    padded = torch.zeros(_cdiv(n, bn) * bn, _cdiv(k, bk) * bk, dtype=_F32, device=w.device)
    padded[:n, :k] = w.float()
    tiles = padded.reshape(_cdiv(n, bn), bn, _cdiv(k, bk), bk)
    amax = tiles.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / big, torch.ones_like(amax))
    q = (tiles / scale[:, None, :, None]).clamp(-big, big).reshape(padded.shape)[:n, :k]
    return q.to(fp8_dtype).contiguous(), scale


def quantize_groups(
    x: torch.Tensor, group: int = 128, fp8_dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations ``[M, K]`` quantized per token and group of ``group`` columns: ``(fp8, scale
    [M, K/group])``, what ``dynamic_group_quant_fp8`` gives (row-major scales, no ue8m0) for x in
    fp32: scale = group amax / fp8 max floored at ``1 / (fp8 max * 512)``."""
    return dynamic_group_quant_fp8.native(x.float(), [1, group], False, False, fp8_dtype)


def row_and_column_scales(
    scale_a: torch.Tensor, scale_b: torch.Tensor, m: int, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``scaled_mm_fp8``'s scales in the one form a rowwise GEMM reads (cuBLASLt's rowwise
    ``_scaled_mm``, AITER's ``gemm_a8w8``, oneDNN's ``fp8_gemm``): ``scale_a`` as a contiguous
    ``[M, 1]``, ``scale_b`` as a contiguous ``[1, N]``, a per-tensor scale expanded (a copy of
    M or N floats)."""
    return (
        scale_a.reshape(-1, 1).expand(m, 1).contiguous(),
        scale_b.reshape(1, -1).expand(1, n).contiguous(),
    )


def _per_row(x: torch.Tensor, dim: int, fp8_dtype: torch.dtype = E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().amax(dim, keepdim=True) / fp8_max(fp8_dtype)).clamp(min=min_scale(fp8_dtype))
    return quantize_fp8(x, scale, fp8_dtype), scale.float()


def _scaled_mm_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    """``dtype`` is the output dtype; operands are e4m3fn, and e4m3fnuz once (AMD's gfx942 fp8:
    an adapter that decodes it as e4m3fn, or the reverse, is off by a factor of 2)."""
    gen = _samples.generator(seed + 7, device)
    for m, k, n in ((1, 32, 16), (5, 64, 48), (16, 128, 32), (0, 32, 16)):
        x = _samples.randn((m, k), _F32, device, gen)
        w = _samples.randn((n, k), _F32, device, gen, scale=0.05)
        a, sa = _per_row(x, 1)
        wq, sw = _per_row(w, 1)  # per output channel
        b, sb = wq.t(), sw.reshape(1, n)
        yield Sample((a, b, sa, sb, dtype, None), f"{m}x{k}x{n} per-row x per-column")
        one_a = x.abs().amax().reshape(1) / 448 if m else torch.ones(1, device=device)
        one_b = sb.amax().reshape(1)
        yield Sample(
            (quantize_fp8(x, one_a), quantize_fp8(w, one_b).t(), one_a, one_b, dtype, None),
            f"{m}x{k}x{n} per-tensor",
        )
    bias = _samples.randn((48,), dtype, device, gen)
    x, w = _samples.randn((5, 64), _F32, device, gen), _samples.randn((48, 64), _F32, device, gen)
    (a, sa), (wq, sw) = _per_row(x, 1), _per_row(w, 1)
    yield Sample((a, wq.t(), sa, sw.reshape(1, 48), dtype, bias), "5x64x48 per-row, bias")
    yield Sample((a, wq.t().contiguous(), sa, sw.reshape(1, 48), dtype, None), "5x64x48 b row-major")
    fnuz = torch.float8_e4m3fnuz
    (a, sa), (wq, sw) = _per_row(x, 1, fnuz), _per_row(w, 1, fnuz)
    yield Sample((a, wq.t(), sa, sw.reshape(1, 48), dtype, None), "5x64x48 per-row x per-column, e4m3fnuz")


def _block_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 8, device)
    for (m, k, n), block in (
        ((4, 256, 128), (128, 128)),
        ((3, 200, 70), (128, 128)),  # ragged last group and block
        ((7, 96, 64), (32, 32)),
        ((0, 128, 128), (128, 128)),
        ((16, 512, 256), (128, 128)),
    ):
        x = _samples.randn((m, k), _F32, device, gen)
        w = _samples.randn((n, k), _F32, device, gen, scale=0.05)
        a, sa = quantize_groups(x, block[1])
        b, sb = quantize_blocks(w, block)
        yield Sample((a, b, sa, sb, list(block), dtype), f"{m}x{k}x{n} blocks {block[0]}x{block[1]}")
    x = torch.zeros(2, 128, device=device)
    a, sa = quantize_groups(x, 128)
    b, sb = quantize_blocks(_samples.randn((128, 128), _F32, device, gen), (128, 128))
    yield Sample((a, b, sa, sb, [128, 128], dtype), "2x128x128 all-zero activations")
    fnuz = torch.float8_e4m3fnuz
    x = _samples.randn((4, 256), _F32, device, gen)
    w = _samples.randn((128, 256), _F32, device, gen, scale=0.05)
    (a, sa), (b, sb) = quantize_groups(x, 128, fnuz), quantize_blocks(w, (128, 128), fnuz)
    yield Sample((a, b, sa, sb, [128, 128], dtype), "4x256x128 blocks 128x128, e4m3fnuz")


def _mnk(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """``(M, K)`` (N = K) or ``(M, N, K)``."""
    if len(shape) == 2:
        return shape[0], shape[1], shape[1]
    m, n, k = shape
    return m, k, n


def _make_scaled_mm_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    m, k, n = _mnk(shape)
    gen = _samples.generator(seed, device)
    (a, sa), (wq, sw) = (
        _per_row(_samples.randn((m, k), _F32, device, gen), 1),
        _per_row(_samples.randn((n, k), _F32, device, gen, scale=0.05), 1),
    )
    return (a, wq.t(), sa, sw.reshape(1, n), dtype, None)


def _make_block_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    m, k, n = _mnk(shape)
    gen = _samples.generator(seed, device)
    a, sa = quantize_groups(_samples.randn((m, k), _F32, device, gen), 128)
    b, sb = quantize_blocks(_samples.randn((n, k), _F32, device, gen, scale=0.05), (128, 128))
    return (a, b, sa, sb, [128, 128], dtype)


#: Why native takes no part in batch-invariant mode (``register_op(batch_invariant=...)``).
_GEMM_VARIES = (
    "a matmul: torch's GEMM chooses how it splits the K reduction by the row count (cuBLAS split-K "
    "by M, the CPU BLAS's own paths for few rows)"
)


# ---------------------------------------------------------------------- the ops
@register_op(
    check_args=_check_scaled_mm,
    tolerances=MATMUL_TOLERANCES,
    sample_inputs=_scaled_mm_samples,
    make_inputs=_make_scaled_mm_inputs,
    reference=_scaled_mm_reference,
    batch_invariant=_GEMM_VARIES,
)
def scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(a * scale_a) @ (b * scale_b) + bias`` in ``out_dtype``: ``a [M, K]`` and ``b [K, N]`` fp8
    (e4m3fn or e4m3fnuz, the same), float32 scales ``scale_a`` per tensor (one element) or per row
    ``[M, 1]``, ``scale_b`` per tensor or per column ``[1, N]``; ``bias [N]`` of ``out_dtype``.

    Dequantized in fp32, multiplied in fp32, the bias added in fp32, rounded once to ``out_dtype``.
    ``b`` may have any strides (``w.t()`` of a row-major weight is the usual, column-major one).
    """
    return _scaled_mm_in(_F32, a, b, scale_a, scale_b, bias).to(out_dtype)


@register_op(
    check_args=_check_block_scaled_mm,
    tolerances=MATMUL_TOLERANCES,
    sample_inputs=_block_samples,
    make_inputs=_make_block_inputs,
    reference=_block_scaled_mm_reference,
    batch_invariant=_GEMM_VARIES,
)
def block_scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """``dequant(a) @ dequant(b).T`` in ``out_dtype``, DeepSeek-V3 / transformers FP8 style:
    ``a [M, K]`` fp8 activations with ``scale_a [M, ceil(K / block_k)]`` (one scale per token and
    group of ``block_k`` columns, as ``dynamic_group_quant_fp8`` makes them), ``b [N, K]`` the fp8
    weight with ``scale_b [ceil(N / block_n), ceil(K / block_k)]`` (one per ``block_n x block_k``
    tile: transformers' ``weight_scale_inv``); ``block_size = [block_n, block_k]``, usually
    ``[128, 128]``; ragged last groups and tiles allowed.

    Dequantized in fp32 (value times its group's or tile's scale), multiplied in fp32, rounded once.
    """
    bn, bk = block_size
    return (_dequantize_groups(a, scale_a, bk, _F32) @ _dequantize_blocks(b, scale_b, bn, bk, _F32).t()).to(
        out_dtype
    )
