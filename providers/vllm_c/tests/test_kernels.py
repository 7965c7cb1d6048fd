"""The torch ops against fp64 references: shapes, dtypes, weight None, variance_size, layouts,
the in-place contract, every CPU ISA this machine has, and CUDA where there is a GPU."""

import _ref
import pytest
import torch
from conftest import DEVICES
from ircore_vllm_c import impls

import ircore

ops = torch.ops.ircore_vllm_c

TOKENS = [1, 3, 16, 257]
HIDDEN = [8, 64, 1000, 4096, 1, 7, 33, 4097]
ISAS = ["scalar", "avx2", "avx512", "avx512bf16"]


def _supported_isas():
    have = []
    for isa in ISAS:
        try:
            ops._set_cpu_isa(isa)
        except RuntimeError:
            continue
        have.append(isa)
    ops._set_cpu_isa("auto")
    return have


CPU_ISAS = _supported_isas()
# Every CPU ISA, plus each extra device (its own kernels, no ISA switch).
TARGETS = [("cpu", isa) for isa in CPU_ISAS] + [(d, None) for d in DEVICES if d != "cpu"]
TARGET_IDS = [f"{d}-{i}" if i else d for d, i in TARGETS]


@pytest.fixture(params=TARGETS, ids=TARGET_IDS)
def target(request):
    device, isa = request.param
    if isa is not None:
        ops._set_cpu_isa(isa)
    try:
        yield device
    finally:
        ops._set_cpu_isa("auto")


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(shape, dtype, device, seed, scale=1.0, shift=0.0):
    t = torch.randn(shape, generator=_gen(seed), dtype=torch.float32) * scale + shift
    return t.to(dtype).to(device)


def _weight(hidden, dtype, device, seed=1):
    return _randn((hidden,), dtype, device, seed, scale=0.1, shift=1.0)


# ----------------------------------------------------------------------------------- rms_norm


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_rms_norm(target, tokens, hidden, dtype):
    x = _randn((tokens, hidden), dtype, target, tokens * 7 + hidden, scale=2.0)
    w = _weight(hidden, dtype, target)
    out = ops.rms_norm(x, w, 1e-6, None)
    assert out.is_contiguous() and out.device == x.device
    _ref.assert_close(out, _ref.rms_norm(x, w, 1e-6), dtype)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [64, 1000, 4097])
def test_rms_norm_no_weight_and_variance_size(target, hidden, dtype):
    x = _randn((5, hidden), dtype, target, 3, scale=3.0)
    _ref.assert_close(ops.rms_norm(x, None, 1e-5, None), _ref.rms_norm(x, None, 1e-5), dtype)
    w = _weight(hidden, dtype, target)
    for vs in (1, 17, hidden // 2, hidden - 1, hidden):
        vs = max(vs, 1)
        _ref.assert_close(ops.rms_norm(x, w, 1e-6, vs), _ref.rms_norm(x, w, 1e-6, vs), dtype)
        _ref.assert_close(ops.rms_norm(x, None, 1e-6, vs), _ref.rms_norm(x, None, 1e-6, vs), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("hidden", [64, 1000, 4096, 4097])
def test_fp32_weight(target, hidden, dtype):
    x = _randn((9, hidden), dtype, target, hidden, scale=2.0)
    w = _weight(hidden, torch.float32, target)
    for vs in (None, hidden // 2 or 1):
        _ref.assert_close(ops.rms_norm(x, w, 1e-6, vs), _ref.rms_norm(x, w, 1e-6, vs), dtype)
        r = _randn((9, hidden), dtype, target, hidden + 3)
        _check_fused(x.clone(), r, w, 1e-6, vs, dtype)
    xs = _randn((9, hidden + 8), dtype, target, 1)[:, 8:]
    _ref.assert_close(ops.rms_norm(xs, w, 1e-6, None), _ref.rms_norm(xs, w, 1e-6), dtype)


def _layouts(tokens, hidden, dtype, device, seed):
    """Non-contiguous inputs: (label, tensor)."""
    base = _randn((tokens, hidden + 24), dtype, device, seed)
    yield "row-stride", base[:, :hidden]
    yield "row-stride-offset", base[:, 3 : 3 + hidden]  # misaligned start: element-wise path
    yield "3d-chained", _randn((2, tokens, hidden + 8), dtype, device, seed + 1)[:, :, :hidden]
    yield "transposed", _randn((hidden, tokens), dtype, device, seed + 2).t()
    yield "3d-unchainable", _randn((tokens, 3, hidden), dtype, device, seed + 3).transpose(0, 1)
    yield "expanded", _randn((1, hidden), dtype, device, seed + 4).expand(tokens, hidden)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [64, 1000, 4096])
def test_rms_norm_layouts(target, hidden, dtype):
    w = _weight(hidden, dtype, target)
    for label, x in _layouts(9, hidden, dtype, target, hidden):
        out = ops.rms_norm(x, w, 1e-6, None)
        assert out.is_contiguous(), label
        _ref.assert_close(out, _ref.rms_norm(x, w, 1e-6), dtype)


def test_large_fresh_output(target):
    """Outputs >= 32 MB take the huge-page path on CPU."""
    x = _randn((2048, 4096), torch.float32, target, 8)
    w = _weight(4096, torch.float32, target)
    _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), torch.float32)


def test_rms_norm_shapes_and_empty(target):
    x = _randn((2, 3, 4, 128), torch.bfloat16, target, 5)
    w = _weight(128, torch.bfloat16, target)
    _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), torch.bfloat16)
    x1 = _randn((128,), torch.float32, target, 6)
    _ref.assert_close(ops.rms_norm(x1, None, 1e-6, None), _ref.rms_norm(x1, None, 1e-6), torch.float32)
    empty = torch.empty((0, 32), device=target)
    assert ops.rms_norm(empty, None, 1e-6, None).shape == (0, 32)


def test_rms_norm_extreme_values(target):
    x = torch.tensor([[1e-20] * 8, [3e4] * 8, [0.0] * 8], device=target)
    _ref.assert_close(ops.rms_norm(x, None, 1e-6, None), _ref.rms_norm(x, None, 1e-6), torch.float32)
    xh = torch.full((2, 64), 60000.0, dtype=torch.float16, device=target)  # x^2 overflows fp16
    _ref.assert_close(ops.rms_norm(xh, None, 1e-6, None), _ref.rms_norm(xh, None, 1e-6), torch.float16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("hidden", [8, 64, 1000, 4097])
def test_values_whose_squares_leave_fp32(target, hidden, dtype):
    """The core's semantics: a row whose fp32 sum of squares overflows comes out 0 (NaN at inf)."""
    x = _ref.beyond_fp32_rows(hidden, dtype, target)
    w = _weight(hidden, dtype, target)
    for out, residual in (
        (ops.rms_norm(x, w, 1e-6, None), x),
        _fused_in_place(x.clone(), torch.zeros_like(x), w),
    ):
        _ref.assert_close(out, _ref.rms_norm(residual, w, 1e-6), dtype)
        assert (out[:2] == 0).all() and out[2:4].abs().min() > 0
        assert out[4, hidden // 2].isnan() and (out[4] == 0).sum() == hidden - 1


def _fused_in_place(x, r, w):
    ops.fused_add_rms_norm(x, r, w, 1e-6, None)
    return x, r


# ------------------------------------------------------------------------- fused_add_rms_norm


def _check_fused(x, r, w, eps, vs, dtype):
    x0, r0 = x.clone(), r.clone()
    expected_out, expected_res = _ref.fused_add_rms_norm(x0, r0, w, eps, vs)
    x_ptr, r_ptr = x.data_ptr(), r.data_ptr()
    ret = ops.fused_add_rms_norm(x, r, w, eps, vs)
    assert ret is None
    assert x.data_ptr() == x_ptr and r.data_ptr() == r_ptr
    torch.testing.assert_close(r, expected_res, atol=0, rtol=0)  # one rounding of an fp32 sum
    _ref.assert_close(x, expected_out, dtype)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("tokens", TOKENS)
def test_fused_add_rms_norm(target, tokens, hidden, dtype):
    x = _randn((tokens, hidden), dtype, target, tokens + hidden)
    r = _randn((tokens, hidden), dtype, target, tokens + hidden + 1, scale=2.0)
    _check_fused(x, r, _weight(hidden, dtype, target), 1e-6, None, dtype)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [64, 1000, 4097])
def test_fused_no_weight_and_variance_size(target, hidden, dtype):
    for vs in (None, 1, 17, hidden // 2, hidden - 1):
        for w in (None, _weight(hidden, dtype, target)):
            x = _randn((4, hidden), dtype, target, 11)
            r = _randn((4, hidden), dtype, target, 12)
            _check_fused(x, r, w, 1e-5, vs, dtype)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_fused_layouts(target, dtype):
    hidden = 1000
    w = _weight(hidden, dtype, target)
    for (label, x), (_, r) in zip(
        _layouts(6, hidden, dtype, target, 1), _layouts(6, hidden, dtype, target, 50), strict=True
    ):
        if label == "expanded":  # overlapping rows cannot be written in place
            continue
        _check_fused(x, r, w, 1e-6, None, dtype)
    # x contiguous, residual strided, and the other way round
    base = _randn((6, hidden + 8), dtype, target, 3)
    _check_fused(_randn((6, hidden), dtype, target, 4), base[:, :hidden], w, 1e-6, None, dtype)
    base = _randn((6, hidden + 8), dtype, target, 5)
    _check_fused(base[:, 8:], _randn((6, hidden), dtype, target, 6), w, 1e-6, None, dtype)


def test_fused_impl_writes_in_place_and_ircore_returns_its_inputs(target):
    x = _randn((3, 64), torch.float16, target, 1)
    r = _randn((3, 64), torch.float16, target, 2)
    w = _weight(64, torch.float16, target)
    expected_out, expected_res = _ref.fused_add_rms_norm(x, r, w, 1e-6)
    # the kernel is the in-place torch op (it returns nothing); what dispatch runs returns x, r
    impl = ircore.ops.fused_add_rms_norm.validate_impl("check_vllm_c", impls.fused_add_rms_norm, inplace=True)
    out, res = impl.run(x, r, w, 1e-6)
    assert out is x and res is r
    _ref.assert_close(out, expected_out, torch.float16)
    torch.testing.assert_close(res, expected_res, atol=0, rtol=0)


# ------------------------------------------------------------------------------ silu_and_mul


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [2, 8, 64, 1000, 4096, 14, 66, 8194])
@pytest.mark.parametrize("tokens", TOKENS)
def test_silu_and_mul(target, tokens, hidden, dtype):
    x = _randn((tokens, hidden), dtype, target, tokens * 3 + hidden, scale=3.0)
    out = ops.silu_and_mul(x)
    assert out.shape == (tokens, hidden // 2) and out.is_contiguous()
    _ref.assert_close(out, _ref.silu_and_mul(x), dtype)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_silu_and_mul_layouts_and_extremes(target, dtype):
    for _, x in _layouts(5, 256, dtype, target, 9):
        _ref.assert_close(ops.silu_and_mul(x), _ref.silu_and_mul(x), dtype)
    x = torch.tensor([[-100.0, -20.0, 0.0, 20.0, 100.0, 1.0, 1.0, 1.0, 1.0, 1.0]], device=target).to(dtype)
    _ref.assert_close(ops.silu_and_mul(x), _ref.silu_and_mul(x), dtype)
    x3 = _randn((2, 3, 128), dtype, target, 4)
    _ref.assert_close(ops.silu_and_mul(x3), _ref.silu_and_mul(x3), dtype)
    assert ops.silu_and_mul(torch.empty((0, 16), dtype=dtype, device=target)).shape == (0, 8)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_streaming_stores(target, dtype):
    """The out variants write large outputs with non-temporal stores: forced on here."""
    if target != "cpu":
        pytest.skip("CPU only")
    prev = ops._set_cpu_stream_bytes(1)
    try:
        for hidden in (64, 1000, 4096, 4097):
            x = _randn((7, hidden), dtype, target, hidden)
            w = _weight(hidden, dtype, target)
            out = torch.empty_like(x)
            ops.rms_norm_out(out, x, w, 1e-6, None)
            _ref.assert_close(out, _ref.rms_norm(x, w, 1e-6), dtype)
            x2 = _randn((7, 2 * hidden), dtype, target, hidden + 1)
            out2 = torch.empty_like(x)
            ops.silu_and_mul_out(out2, x2)
            _ref.assert_close(out2, _ref.silu_and_mul(x2), dtype)
    finally:
        ops._set_cpu_stream_bytes(prev)


# ------------------------------------------------------------------------------ out variants


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_out_variants(target, dtype):
    x = _randn((5, 1000), dtype, target, 21)
    w = _weight(1000, dtype, target)
    out = torch.empty_like(x)
    assert ops.rms_norm_out(out, x, w, 1e-6, 100) is None
    _ref.assert_close(out, _ref.rms_norm(x, w, 1e-6, 100), dtype)
    out2 = torch.empty((5, 500), dtype=dtype, device=target)
    assert ops.silu_and_mul_out(out2, x) is None
    _ref.assert_close(out2, _ref.silu_and_mul(x), dtype)
    with pytest.raises(RuntimeError, match="out must have shape"):
        ops.rms_norm_out(out2, x, w, 1e-6, None)
    with pytest.raises(RuntimeError, match="out must be contiguous"):
        ops.silu_and_mul_out(torch.empty((500, 5), dtype=dtype, device=target).t(), x)


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise(device):
    x = torch.randn(4, 64, device=device)
    with pytest.raises(RuntimeError, match="rms_norm: x must be float32"):
        ops.rms_norm(x.double(), None, 1e-6, None)
    with pytest.raises(RuntimeError, match="weight must have shape"):
        ops.rms_norm(x, torch.ones(32, device=device), 1e-6, None)
    with pytest.raises(RuntimeError, match="weight dtype"):
        ops.rms_norm(x, torch.ones(64, device=device, dtype=torch.float16), 1e-6, None)
    with pytest.raises(RuntimeError, match="variance_size"):
        ops.rms_norm(x, None, 1e-6, 65)
    with pytest.raises(RuntimeError, match="residual must have the shape"):
        ops.fused_add_rms_norm(x, torch.randn(4, 32, device=device), None, 1e-6, None)
    with pytest.raises(RuntimeError, match="must be even"):
        ops.silu_and_mul(torch.randn(4, 7, device=device))
    with pytest.raises(RuntimeError, match="_set_cpu_isa: unknown ISA"):
        ops._set_cpu_isa("sse9")
