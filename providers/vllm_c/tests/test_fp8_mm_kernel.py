"""The CPU kernel of block_scaled_mm_fp8 (csrc/cpu_fp8_mm*.cpp) against the op's native, and
scaled_mm_fp8 through it (one K group: per-row / per-tensor scales, bias, b's two layouts).

Both fp8 dtypes, M in {1, 3, 17}, ragged K groups and N blocks, block sizes that are not multiples
of the kernel's 8 lanes, row- and column-major scale_a, each out_dtype, every fp8 encoding (NaNs
included), NaN in a or b, zero scales, non-contiguous operands; the batch-invariance claim (a row
alone equals itself inside a batch, bit for bit, with one thread or two: few rows are computed
from the weight's bytes, more from widened tiles); the scalar, AVX2 and AVX-512 copies give the
same bits; ircore chooses the kernel on the CPU, in batch-invariant mode too. The op's own
samples and the claim run through the conformance kit too (test_provider.py::test_conformance_kit).
"""

import itertools

import pytest
import torch
from ircore_vllm_c import scaled_mm

import ircore
from ircore.ops import block_scaled_mm_fp8, scaled_mm_fp8
from ircore.ops._scaled_mm import quantize_blocks, quantize_groups

FP8 = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]
OUT = [torch.float32, torch.float16, torch.bfloat16]
# (K, N, block_size): ragged last group and block, blocks not multiples of 8, tiny blocks
SHAPES = [(200, 70, (128, 128)), (96, 64, (32, 32)), (300, 130, (48, 20)), (37, 9, (4, 5))]
native = block_scaled_mm_fp8.native
kernel = scaled_mm.block_scaled_mm_fp8


def _args(m, k, n, block, fp8, out_dtype, seed=0, column_major=False):
    g = torch.Generator().manual_seed(seed)
    a, sa = quantize_groups(torch.randn(m, k, generator=g), block[1], fp8)
    b, sb = quantize_blocks(torch.randn(n, k, generator=g) * 0.05, block, fp8)
    if column_major:
        sa = sa.t().contiguous().t()  # strides (1, M)
    return a, b, sa, sb, list(block), out_dtype


def _assert_matches_native(args):
    got, want = kernel(*args), native(*args)
    assert got.dtype is want.dtype and got.shape == want.shape and got.is_contiguous()
    if want.dtype is torch.float32:  # sums in another order than the BLAS: a few fp32 ulps
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    else:  # the fp32 results round to the same value or a neighbour
        torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("fp8", FP8, ids=str)
@pytest.mark.parametrize("out_dtype", OUT, ids=str)
@pytest.mark.parametrize(("k", "n", "block"), SHAPES)
@pytest.mark.parametrize("column_major", [False, True], ids=["sa-rows", "sa-cols"])
def test_matches_native(fp8, out_dtype, k, n, block, column_major):
    for m in (1, 3, 17):
        _assert_matches_native(_args(m, k, n, block, fp8, out_dtype, seed=m, column_major=column_major))


@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_every_fp8_encoding_is_widened_exactly(fp8):
    """One byte per row of a (K = 1; all 256, NaNs included) against b = 1, and the transpose:
    out is each value (times its scales, powers of two: exact) as torch's cast widens it."""
    values = torch.arange(256, dtype=torch.uint8).view(fp8).reshape(256, 1)
    one = torch.ones(1, 1).to(fp8)
    want = values.float() * 0.5 * 2.0
    for a, b in ((values, one), (one, values)):
        sa, sb = torch.full((a.shape[0], 1), 0.5), torch.full((b.shape[0], 1), 2.0)
        got = kernel(a, b, sa, sb, [1, 1], torch.float32).reshape(256, 1)
        assert torch.equal(got.isnan(), want.isnan()) and got.isnan().sum() == (2 if fp8 is FP8[0] else 1)
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("fp8", FP8, ids=str)
@pytest.mark.parametrize("m", [2, 5])  # from the weight's bytes; from widened tiles
def test_nan_in_a_or_b_gives_the_natives_nans(fp8, m):
    a, b, sa, sb, block, out_dtype = _args(m, 200, 70, (128, 128), fp8, torch.float32)
    nan = torch.tensor(float("nan")).to(fp8)
    a, b = a.clone(), b.clone()
    a[1, 150] = nan  # one row NaN
    b[33, 3] = nan  # one column NaN (a full chunk of 8)
    b[40, 197] = nan  # and another (the ragged last chunk)
    got, want = kernel(a, b, sa, sb, block, out_dtype), native(a, b, sa, sb, block, out_dtype)
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().sum() == 70 + 2 * m - 2
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("fp8", FP8, ids=str)
def test_zero_scales(fp8):
    a, b, sa, sb, block, out_dtype = _args(4, 96, 64, (32, 32), fp8, torch.float32)
    sa, sb = sa.clone(), sb.clone()
    sa[2] = 0.0  # a row's every group
    sb[1, :] = 0.0  # a block row of the weight
    sa[0, 1] = 0.0  # one group of one row
    got, want = kernel(a, b, sa, sb, block, out_dtype), native(a, b, sa, sb, block, out_dtype)
    assert got[2].eq(0).all() and got[:, 32:64].eq(0).all()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_non_contiguous_operands_and_empty_calls():
    a, b, sa, sb, block, out_dtype = _args(6, 200, 70, (128, 128), torch.float8_e4m3fn, torch.bfloat16)
    wide_a = torch.zeros(6, 256, dtype=torch.uint8).view(a.dtype)
    wide_a[:, :200] = a
    wt = b.t().contiguous().t()  # the weight [N, K] column-major
    _assert_matches_native((wide_a[:, :200], wt, sa, sb, block, out_dtype))
    e4m3 = torch.float8_e4m3fn
    no_k = (
        torch.empty(3, 0, dtype=e4m3),
        torch.empty(70, 0, dtype=e4m3),
        torch.empty(3, 0),
        torch.empty(1, 0),
    )
    for args in (
        _args(0, 200, 70, (128, 128), e4m3, torch.float16),
        _args(3, 200, 0, (128, 128), e4m3, torch.float16),
        (*no_k, [128, 128], torch.float16),
    ):
        m, n = args[0].shape[0], args[1].shape[0]
        got = kernel(*args)
        assert got.shape == (m, n) and got.dtype is torch.float16
        assert torch.equal(got, native(*args))


@pytest.mark.parametrize("fp8", FP8, ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_a_row_alone_equals_itself_in_any_batch(fp8, threads):
    """The claim behind block_scaled_mm_fp8_batch_invariant: bit for bit, whatever M, the row's
    place, scale_a's layout or the thread count."""
    k, n, block = 300, 130, (128, 64)
    big = _args(64, k, n, block, fp8, torch.float32, seed=3)
    a, b, sa, sb = big[:4]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        full = kernel(a, b, sa, sb, list(block), torch.float32)
        cols = kernel(a, b, sa.t().contiguous().t(), sb, list(block), torch.float32)
        assert torch.equal(full, cols)
        for m in (1, 3, 17):
            for start in (0, 64 - m, 23):
                part = kernel(a[start : start + m], b, sa[start : start + m], sb, list(block), torch.float32)
                assert torch.equal(part, full[start : start + m])
    finally:
        torch.set_num_threads(before)


def test_every_isa_copy_gives_the_same_bits():
    """Scalar, AVX2 and (where the CPU has it) AVX-512, whose widened-tile path pairs columns in
    16 lanes: the same sums in the same order. Tiles of 16 weight rows: N = 70 and 130 end in an
    odd tile, N = 9 and 64 in an even one; M 1 reads bytes, 5 and 17 widened tiles."""
    ops = torch.ops.ircore_vllm_c
    isas = []
    for isa in ("scalar", "avx2", "avx512"):
        try:
            ops._set_cpu_isa(isa)
        except RuntimeError:
            continue
        isas.append(isa)
    if len(isas) < 2:
        pytest.skip("one ISA here")
    try:
        for fp8 in FP8:
            for (k, n, block), m in itertools.product(SHAPES, (1, 5, 17)):
                args = _args(m, k, n, block, fp8, torch.float32, seed=k)
                outs = []
                for isa in isas:
                    ops._set_cpu_isa(isa)
                    outs.append(kernel(*args))
                assert all(torch.equal(o, outs[0]) for o in outs), (fp8, k, n, block, m)
                _assert_matches_native(args)
    finally:
        ops._set_cpu_isa("auto")


def _scaled_args(m, k, n, fp8, out_dtype, per_tensor, bias, column_major_b, seed=0):
    """scaled_mm_fp8's operands: b [K, N] as w.t() of a row-major weight, or row-major itself."""
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.05
    big = 448.0 if fp8 is FP8[0] else 224.0
    if per_tensor:
        sa, sb = x.abs().amax().reshape(1) / big, w.abs().amax().reshape(1) / big
        wq = (w / sb).clamp(-big, big).to(fp8)
    else:
        sa, sb = x.abs().amax(1, keepdim=True) / big, w.abs().amax(1).reshape(1, n) / big
        wq = (w / sb.reshape(n, 1)).clamp(-big, big).to(fp8)
    a = (x / sa).clamp(-big, big).to(fp8)
    b = wq.t() if column_major_b else wq.t().contiguous()
    bias_t = torch.randn(n, generator=g).to(out_dtype) if bias else None
    return a, b, sa.float(), sb.float(), out_dtype, bias_t


@pytest.mark.parametrize("fp8", FP8, ids=str)
@pytest.mark.parametrize("out_dtype", OUT, ids=str)
@pytest.mark.parametrize("per_tensor", [False, True], ids=["per-row", "per-tensor"])
@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("column_major_b", [True, False], ids=["w.t()", "b-rows"])
def test_scaled_mm_matches_native(fp8, out_dtype, per_tensor, bias, column_major_b):
    """scaled_mm_fp8 on the CPU: the same kernel as one K group; K = 200 (a ragged last chunk)."""
    for m in (1, 3, 17):
        args = _scaled_args(m, 200, 70, fp8, out_dtype, per_tensor, bias, column_major_b, seed=m)
        got, want = scaled_mm.scaled_mm_fp8(*args), scaled_mm_fp8.native(*args)
        assert got.dtype is want.dtype and got.shape == want.shape
        if out_dtype is torch.float32:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        else:
            torch.testing.assert_close(got.float(), want.float(), rtol=8e-3, atol=1e-5)


def test_scaled_mm_nan_and_empty_calls():
    a, b, sa, sb, out_dtype, bias = _scaled_args(4, 64, 24, FP8[0], torch.float32, False, True, True)
    a = a.clone()
    a[2, 5] = torch.tensor(float("nan")).to(FP8[0])
    got, want = (
        scaled_mm.scaled_mm_fp8(a, b, sa, sb, out_dtype, bias),
        scaled_mm_fp8.native(a, b, sa, sb, out_dtype, bias),
    )
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan().sum() == 24
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    e4m3 = FP8[0]
    bias = torch.randn(24)
    for a0, b0 in (
        (torch.empty(0, 64, dtype=e4m3), b),
        (torch.empty(3, 0, dtype=e4m3), torch.empty(0, 24, dtype=e4m3)),
    ):
        args = (a0, b0, torch.ones(a0.shape[0], 1), torch.ones(1, 24), torch.float32, bias)
        assert torch.equal(scaled_mm.scaled_mm_fp8(*args), scaled_mm_fp8.native(*args))


def test_ircore_chooses_the_kernel_on_the_cpu_in_either_mode():
    args = _args(8, 512, 256, (128, 128), torch.float8_e4m3fn, torch.bfloat16)
    assert ircore.explain("block_scaled_mm_fp8", *args).chosen == "vllm_c"
    assert scaled_mm.block_scaled_mm_fp8_supports(*args)
    assert scaled_mm.block_scaled_mm_fp8_batch_invariant(*args)
    want = kernel(*args)
    assert torch.equal(block_scaled_mm_fp8(*args), want)
    with ircore.batch_invariant():
        assert torch.equal(block_scaled_mm_fp8(*args), want)
    args = _scaled_args(8, 256, 64, FP8[0], torch.bfloat16, False, True, True)
    assert ircore.explain("scaled_mm_fp8", *args).chosen == "vllm_c"
    assert torch.equal(scaled_mm_fp8(*args), scaled_mm.scaled_mm_fp8(*args))
