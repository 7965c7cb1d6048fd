"""The fp8 quant kernels (quant_kernels.py) beyond the conformance kit (which runs every sample of
the 12 ops against their fp64 references, test_conformance.py) and the batch-invariance claims
(test_batch_invariant.py): the exact e4m3 encoding by the bits, what the predicates decline, and,
on a GPU, real sizes and the hardware cast against the bits."""

import pytest
import torch
import triton
import triton.language as tl
from conftest import GPU
from ircore_triton import impls
from ircore_triton import quant_kernels as qk
from ircore_triton.norm_kernels import _round_to
from ircore_triton.provider import QUANT_OPS

import ircore
from ircore.ops._quant import fp8_max
from ircore.testing import assert_close_to_reference

DEVICE = GPU or "cpu"
FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


@triton.jit
def _encode_kernel(X, Y, N: tl.constexpr, BIAS: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, qk._encode_fp8(tl.load(X + i), BIAS, 0x7F if BIAS == 7 else 0x80, BIAS == 7))


@triton.jit
def _round_kernel(X, Y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, _round_to(tl.load(X + i), tl.bfloat16))


def test_rounding_to_bf16_keeps_nan_and_rounds_to_nearest_even() -> None:
    """The norm forms' rounding of the residual sum and of y (norm_kernels._round_to): a GPU's
    NaN (0x7FFFFFFF, and its negative) stays NaN rather than wrapping to a zero; infinities, the
    overflow past bf16's largest value, ties and subnormals as torch's cast."""
    bits = [0x7FFFFFFF, -1, 0x7FC00000, 0x7F800000, -8388608, 0x7F7FFFFF, 0x3F808000, 0x3F818000,
            0x3F808001, 0x00008000, 0x00018000, 0, -2147483648, 0x3F800000, 0x7F7F7FFF, 0x7F7F8000]  # fmt: skip
    x = torch.tensor(bits, dtype=torch.int32).view(torch.float32).to(DEVICE)
    y = torch.empty_like(x)
    _round_kernel[(1,)](x, y, N=x.numel())
    nan = x.isnan()
    assert y[nan].isnan().all(), y[nan].view(torch.int32)
    expected = x.to(torch.bfloat16).float()
    assert torch.equal(y[~nan].view(torch.int32), expected[~nan].view(torch.int32))


@triton.jit
def _hw_cast_kernel(X, Y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, tl.load(X + i).to(tl.float8e4nv))


def _edge_values(fp8_dtype: torch.dtype) -> torch.Tensor:
    """Every finite fp8 value, the midpoints between neighbours (ties: to even), points a quarter
    step either side, -0 and NaN, clamped to the op's range as the kernel's input is."""
    m = fp8_max(fp8_dtype)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8_dtype).float()
    v = codes[codes.isfinite()].unique().sort().values
    v = v[v.abs() <= m]
    mid = (v[1:] + v[:-1]) / 2
    step = v[1:] - v[:-1]
    vals = torch.cat(
        [v, mid, mid - step / 4, mid + step / 4, torch.tensor([-0.0, float("nan"), 1e-30, -1e-30])]
    )
    n = triton.next_power_of_2(vals.numel())
    return torch.cat([vals, torch.zeros(n - vals.numel())]).clamp(-m, m)


@pytest.mark.parametrize("fp8_dtype", FP8, ids=str)
def test_encoding_by_the_bits_is_torchs_cast(fp8_dtype: torch.dtype) -> None:
    """_encode_fp8 gives torch's round-to-nearest-even bits for every value, tie, subnormal, -0
    (none for e4m3fnuz, whose 0x80 is NaN) and NaN (Triton's interpreter rounds 127.99 to 64)."""
    x = _edge_values(fp8_dtype).to(DEVICE)
    y = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    _encode_kernel[(1,)](x, y, N=x.numel(), BIAS=8 if fp8_dtype == torch.float8_e4m3fnuz else 7)
    expected = x.to(fp8_dtype).view(torch.uint8)
    nan = x.isnan()
    assert torch.equal(y[~nan], expected[~nan]), (x[y != expected], y[y != expected], expected[y != expected])
    assert (y[nan] == (0x80 if fp8_dtype == torch.float8_e4m3fnuz else 0x7F)).all()


def test_predicates_decline_what_the_kernels_do_not_take() -> None:
    """Rows past the register block (also by the padded group block), a non-unit last-dim
    stride, a residual without one; and the per-token-only invariance claim."""
    e4 = torch.float8_e4m3fn
    x = torch.empty(2, 14336, device=DEVICE)
    s = torch.ones(1, device=DEVICE)
    assert impls.static_quant_fp8_supports(x, s, e4)
    assert impls.dynamic_group_quant_fp8_supports(x, [1, 128], True, True, e4, 4)
    assert impls.silu_and_mul_group_quant_fp8_supports(
        torch.empty(2, 2 * 14336, device=DEVICE), [1, 128], False, False, e4
    )
    wide = torch.empty(2, qk.MAX_ROW_BLOCK + 1, device=DEVICE)
    assert not impls.static_quant_fp8_supports(wide, s, e4)
    assert not impls.dynamic_quant_fp8_supports(wide, True, e4)
    # 20000 in groups of 96: 256 groups (padded) x 128 = 32768 fits; groups of 80 (250 -> 256 x 128) too,
    # groups of 130 (154 -> 256 x 256) do not
    x20k = torch.empty(2, 20000, device=DEVICE)
    assert impls.dynamic_group_quant_fp8_supports(x20k, [1, 96], False, False, e4)
    assert not impls.dynamic_group_quant_fp8_supports(x20k, [1, 130], False, False, e4)
    xt = torch.empty(256, 4, device=DEVICE).t()
    assert not impls.rms_norm_static_fp8_quant_supports(xt, None, 1e-6, s, e4)
    r = torch.empty(4, 256, device=DEVICE)
    assert not impls.fused_add_rms_norm_dynamic_quant_fp8_supports(r, xt, None, 1e-6, True, e4)
    assert impls.fused_add_rms_norm_dynamic_quant_fp8_supports(r, r.clone(), None, 1e-6, True, e4)


def test_padding_rows_are_zero_and_scales_keep_their_layout() -> None:
    """The kit never compares padding rows: they must still be zeros (the op's contract), and a
    3-D column-major group scale has the native's strides."""
    x = torch.randn(3, 64, device=DEVICE)
    q = impls.static_quant_fp8(x, torch.full((1,), 0.01, device=DEVICE), torch.float8_e4m3fnuz, 8)
    assert q.shape == (8, 64) and not q[3:].view(torch.uint8).any()
    q, s = impls.dynamic_quant_fp8(x, True, torch.float8_e4m3fn, None, 5)
    assert q.shape == (5, 64) and s.shape == (3, 1) and not q[3:].view(torch.uint8).any()
    x3 = torch.randn(2, 3, 128, device=DEVICE)
    q, s = impls.dynamic_group_quant_fp8(x3, [1, 64], True, False, torch.float8_e4m3fn)
    ref = ircore.get_op("dynamic_group_quant_fp8").native(x3, [1, 64], True, False, torch.float8_e4m3fn)[1]
    assert s.stride() == ref.stride() and torch.equal(s, ref)


@pytest.mark.parametrize("form", ["plain", "norm", "add_norm"])
def test_per_tensor_scale_of_one_row_takes_one_launch_with_the_batched_bits(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-tensor dynamic quant of a single row runs the per-token launch (one kernel, where a
    batch takes an amax pass, a reduction and the quant): the same q and scale as the same row at
    the top of a batch whose other rows (zeros) leave the tensor's amax the row's; the fused add's
    residual output too. scale_ub is ignored, as the op says."""
    e4 = torch.float8_e4m3fn
    x, r = torch.randn(1, 96, device=DEVICE) * 3, torch.randn(1, 96, device=DEVICE)
    w = 1 + 0.1 * torch.randn(96, device=DEVICE)
    pad = torch.zeros(2, 96, device=DEVICE)
    xb, rb = torch.cat([x, pad]), torch.cat([r, pad])
    ub = torch.full((1,), 1e-3, device=DEVICE)
    launches: list[int] = []
    launch = qk._launch
    monkeypatch.setattr(qk, "_launch", lambda *a, **kw: launches.append(kw["quant"]) or launch(*a, **kw))
    if form == "plain":
        one, batch = qk.dynamic_quant_fp8(x, False, e4, ub), qk.dynamic_quant_fp8(xb, False, e4)
    elif form == "norm":
        one = qk.rms_norm_dynamic_quant_fp8(x, w, 1e-6, False, e4, ub)
        batch = qk.rms_norm_dynamic_quant_fp8(xb, w, 1e-6, False, e4)
    else:
        one = qk.fused_add_rms_norm_dynamic_quant_fp8(x, r, w, 1e-6, False, e4, ub)
        batch = qk.fused_add_rms_norm_dynamic_quant_fp8(xb, rb, w, 1e-6, False, e4)
        assert torch.equal(one[2], batch[2][:1])
    assert launches == [qk._DYNAMIC, qk._AMAX, qk._FROM_AMAX]  # one launch for the row, two for the batch
    assert one[1].shape == (1,) and torch.equal(one[1], batch[1])
    assert torch.equal(one[0].view(torch.uint8), batch[0][:1].view(torch.uint8))
    if form == "plain":
        assert_close_to_reference(ircore.get_op("dynamic_quant_fp8"), one, (x, False, e4))


# ---------------------------------------------------------------------- GPU: real sizes
gpu = pytest.mark.skipif(GPU is None, reason="needs a GPU: real sizes take minutes in Triton's interpreter")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("fp8_dtype", FP8, ids=str)
def test_hardware_cast_matches_the_bits(fp8_dtype: torch.dtype) -> None:
    """Where the kernel uses the hardware's cast (e4m3fn on NVIDIA), it gives the bits' result."""
    if fp8_dtype != torch.float8_e4m3fn or torch.version.hip:
        pytest.skip("the hardware cast is used for e4m3fn on NVIDIA GPUs only")
    x = _edge_values(fp8_dtype).to(DEVICE)
    y = torch.empty(x.numel(), dtype=fp8_dtype, device=DEVICE)
    _hw_cast_kernel[(1,)](x, y, N=x.numel())
    bits = torch.empty(x.numel(), dtype=torch.uint8, device=DEVICE)
    _encode_kernel[(1,)](x, bits, N=x.numel(), BIAS=7)
    ok = ~x.isnan()
    assert torch.equal(y.view(torch.uint8)[ok], bits[ok])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("fp8_dtype", FP8, ids=str)
@pytest.mark.parametrize("hidden", [4096, 8192, 14336])
@pytest.mark.parametrize("tokens", [1, 33, 2048])
@pytest.mark.parametrize("name", QUANT_OPS)
def test_real_sizes(name: str, tokens: int, hidden: int, fp8_dtype: torch.dtype) -> None:
    """Each op at model sizes (bf16), against its fp64 reference with the kit's fp8 comparison."""
    op = ircore.get_op(name)
    args = list(op.make_inputs((tokens, hidden), torch.bfloat16, DEVICE, 0))
    at = [i for i, a in enumerate(args) if a is torch.float8_e4m3fn]
    assert len(at) == 1, f"{name}'s make_inputs: expected one fp8 dtype argument to replace"
    args[at[0]] = fp8_dtype
    args = tuple(args)
    assert getattr(impls, f"{name}_supports")(*args)
    assert_close_to_reference(op, getattr(impls, name)(*args), args)
