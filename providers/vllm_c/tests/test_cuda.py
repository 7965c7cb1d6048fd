"""CUDA-only paths: every launch configuration, the two-pass kernel for long rows, the
element-wise path for misaligned rows, CUDA graphs and a second device. Skipped without a GPU."""

import _ref
import pytest
import torch
from bench_gpu import NORM_VARIANTS
from conftest import requires_cuda
from ircore_vllm_c import kernels

import ircore
from ircore.testing import assert_pdl_chain_matches

pytestmark = [requires_cuda, pytest.mark.gpu]
ops = torch.ops.ircore_vllm_c


def _randn(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).cuda()


@pytest.fixture
def forced_config():
    yield ops._cuda_set_norm_config
    ops._cuda_set_norm_config(0, 0, 0)


def _round_tpr(t):
    return 1 << max(0, (t - 1).bit_length()) if t <= 32 else min(1024, -(-t // 32) * 32)


def _expected_variant(nv, rows, minb, nvec):
    """(nv, tpr, rows, minb) that forcing a compiled (nv, rows, minb) gives (nv 0: loop kernel)."""
    tpr = _round_tpr(-(-nvec // nv))
    if tpr * nv < nvec or (nv > 1 and tpr > 512):
        return 0, None, 1, 1
    if tpr > (1024 if nv * rows == 1 else 512):  # over that kernel's thread bound: one row
        return nv, tpr, 1, 1
    return nv, tpr, rows, minb


WEIGHTS = ["none", "x", "fp32"]


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("hidden", [64, 1000, 4096, 8192])
def test_rows_per_group_variants(forced_config, hidden, weight, dtype):
    """Each compiled (nv, rows, minb), forced: rows not a multiple of rows x groups per block,
    row-strided x, a hidden not a multiple of the threads, variance_size, weights of each kind."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    nvec = hidden // vec
    vs = hidden // 3
    w = None
    if weight != "none":
        w = _randn((hidden,), dtype if weight == "x" else torch.float32, 3, scale=0.1) + 1
    for tokens in (1, 3, 37, 130):
        base = _randn((tokens, hidden + 16), dtype, hidden + tokens)
        x = base[:, :hidden]  # row stride hidden + 16: 16-byte aligned rows, not contiguous
        r = _randn((tokens, hidden), dtype, hidden + 1)
        exp = _ref.rms_norm(x, w, 1e-6)
        exp_vs = _ref.rms_norm(x, w, 1e-6, vs)
        exp_out, exp_res = _ref.fused_add_rms_norm(x, r, w, 1e-6, vs)
        for nv, rows, minb in NORM_VARIANTS:
            want = _expected_variant(nv, rows, minb, nvec)
            for block in (0, 256, 512):
                forced_config(nv, 0, block, rows, minb)
                _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), exp, dtype)
                _ref.assert_close(ops.rms_norm(x, w, 1e-6, vs), exp_vs, dtype)
                got = ops._cuda_last_norm_config()
                assert (got[0], got[3], got[4]) == (want[0], want[2], want[3]), (nv, rows, minb, block, got)
                if want[0]:
                    assert (got[1], got[5]) == (want[1], vec)
                    assert got[2] % 32 == 0 and got[2] % got[1] == 0
                    assert got[2] <= (1024 if got[0] * got[3] == 1 else 512)
                xb, rb = base.clone()[:, :hidden], r.clone()
                ops.fused_add_rms_norm(xb, rb, w, 1e-6, vs)
                torch.testing.assert_close(rb, exp_res, atol=0, rtol=0)
                _ref.assert_close(xb, exp_out, dtype)
                got_fused = ops._cuda_last_norm_config()
                assert (got_fused[0], got_fused[3], got_fused[4]) == (got[0], got[3], got[4])


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_forced_loop_kernel_keeps_its_threads(forced_config, dtype):
    """Threads per row that do not cover the row run the two-pass loop kernel with exactly
    those threads (bench_gpu.py --sweep's loop configs), for both norms and variance_size."""
    hidden = 8192 + 24  # a last partial round of vectors
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    x = _randn((37, hidden), dtype, 1)
    r = _randn((37, hidden), dtype, 2)
    w = _randn((hidden,), dtype, 3, scale=0.1) + 1
    exp_out, exp_res = _ref.fused_add_rms_norm(x, r, w, 1e-6, 5000)
    for tpr in (128, 256, 512):
        forced_config(1, tpr, 0, 1, 1)
        _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), dtype)
        assert list(ops._cuda_last_norm_config())[:3] == [0, tpr, tpr]
        xb, rb = x.clone(), r.clone()
        ops.fused_add_rms_norm(xb, rb, w, 1e-6, 5000)
        torch.testing.assert_close(rb, exp_res, atol=0, rtol=0)
        _ref.assert_close(xb, exp_out, dtype)
        assert list(ops._cuda_last_norm_config()) == [0, tpr, tpr, 1, 1, vec]


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_rows_per_group_on_the_elementwise_path(forced_config, dtype):
    """Misaligned rows (1-element vectors) have one row per group: a forced rows falls back."""
    base = _randn((37, 1001), dtype, 1)
    x = base[:, 1:]  # 2- or 4-byte offset
    r = _randn((37, 1000), dtype, 2)
    w = _randn((1000,), dtype, 3, scale=0.1) + 1
    exp_out, exp_res = _ref.fused_add_rms_norm(x, r, w, 1e-6)
    for rows in (2, 4):
        forced_config(1, 0, 0, rows, 4)
        _ref.assert_close(ops.rms_norm(x, w, 1e-6, 77), _ref.rms_norm(x, w, 1e-6, 77), dtype)
        got = ops._cuda_last_norm_config()
        assert (got[0], got[3], got[4], got[5]) == (1, 1, 1, 1)
        xb, rb = base.clone()[:, 1:], r.clone()
        ops.fused_add_rms_norm(xb, rb, w, 1e-6, None)
        torch.testing.assert_close(rb, exp_res, atol=0, rtol=0)
        _ref.assert_close(xb, exp_out, dtype)
        got = ops._cuda_last_norm_config()
        assert (got[0], got[3], got[4], got[5]) == (1, 1, 1, 1)


# The automatic choice (nv, tpr, block, rows, minb, elements per vector), bf16, on the H200's 132
# SMs: chosen from the H200 launch sweeps (bench_gpu.py --sweep; the measurements behind each
# choice are in pick_norm_config's comments).
AUTO = [
    ("rms_norm", 16, 4096, "x", [2, 256, 256, 1, 1, 8]),  # one wave: two loads per thread
    ("rms_norm", 1, 8192, "x", [2, 512, 512, 1, 1, 8]),
    ("fused_add_rms_norm", 128, 4096, "x", [2, 256, 256, 1, 1, 8]),
    ("rms_norm", 1024, 4096, "x", [2, 256, 256, 1, 1, 8]),  # mid size: two loads per thread
    ("rms_norm", 1024, 8192, "x", [4, 256, 256, 1, 1, 8]),  # mid size: four loads per thread
    ("fused_add_rms_norm", 1024, 4096, "x", [4, 128, 512, 1, 1, 8]),
    ("rms_norm", 8192, 4096, "x", [2, 256, 512, 1, 1, 8]),  # bandwidth: two loads per thread
    ("rms_norm", 8192, 4096, "fp32", [2, 256, 512, 1, 1, 8]),
    ("rms_norm", 8192, 8192, "x", [2, 512, 512, 1, 1, 8]),
    ("fused_add_rms_norm", 8192, 4096, "x", [1, 512, 1024, 1, 1, 8]),  # x and residual: one each
    ("fused_add_rms_norm", 8192, 8192, "x", [1, 1024, 1024, 1, 1, 8]),
]


@pytest.mark.parametrize(("op", "tokens", "hidden", "weight", "expected"), AUTO)
def test_automatic_config(forced_config, op, tokens, hidden, weight, expected):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if sms != 132:
        pytest.skip(f"the expected choices are for 132 SMs (H100/H200 SXM); this GPU has {sms}")
    forced_config(0, 0, 0)
    x = _randn((tokens, hidden), torch.bfloat16, 1)
    w = _randn((hidden,), torch.bfloat16 if weight == "x" else torch.float32, 2, scale=0.1) + 1
    if op == "rms_norm":
        _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), torch.bfloat16)
    else:
        r = _randn((tokens, hidden), torch.bfloat16, 3)
        xb, rb = x.clone(), r.clone()
        ops.fused_add_rms_norm(xb, rb, w, 1e-6, None)
        _ref.assert_close(xb, _ref.fused_add_rms_norm(x, r, w, 1e-6)[0], torch.bfloat16)
    assert list(ops._cuda_last_norm_config()) == expected


def test_set_norm_config_checks(forced_config):
    for args in [(3, 0, 0), (0, 2000, 0), (0, 0, 0, 3, 0), (0, 0, 0, 0, 5), (0, 0, 0, -1, 0)]:
        with pytest.raises(RuntimeError, match="_cuda_set_norm_config"):
            forced_config(*args)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [64, 1000, 4096, 8192])
def test_every_forced_config(forced_config, hidden, dtype):
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    nvec = -(-hidden // vec)
    x = _randn((37, hidden), dtype, hidden)
    r = _randn((37, hidden), dtype, hidden + 1)
    w = _randn((hidden,), dtype, 3, scale=0.1) + 1
    for nv in (1, 2, 4):
        for tpr in (1, 4, 32, 96, 128, 256, 512, 1024):
            for block in (0, 128, 512, 1024):
                forced_config(nv, tpr, block)
                _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), dtype)
                xb, rb = x.clone(), r.clone()
                ops.fused_add_rms_norm(xb, rb, w, 1e-6, 7)
                exp_out, exp_res = _ref.fused_add_rms_norm(x, r, w, 1e-6, 7)
                torch.testing.assert_close(rb, exp_res, atol=0, rtol=0)
                _ref.assert_close(xb, exp_out, dtype)
    assert nvec > 0


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("tokens", [1, 300])
@pytest.mark.parametrize("hidden", [16384, 40000, 65536 + 8, 40001])
def test_long_rows(tokens, hidden, dtype):
    x = _randn((tokens, hidden), dtype, hidden)
    r = _randn((tokens, hidden), dtype, hidden + 1)
    w = _randn((hidden,), dtype, 3, scale=0.1) + 1
    _ref.assert_close(ops.rms_norm(x, w, 1e-6, hidden // 3), _ref.rms_norm(x, w, 1e-6, hidden // 3), dtype)
    xb, rb = x.clone(), r.clone()
    ops.fused_add_rms_norm(xb, rb, w, 1e-6, None)
    exp_out, exp_res = _ref.fused_add_rms_norm(x, r, w, 1e-6)
    torch.testing.assert_close(rb, exp_res, atol=0, rtol=0)
    _ref.assert_close(xb, exp_out, dtype)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_misaligned_rows(dtype):
    base = _randn((9, 4096 + 1), dtype, 1)
    x = base[:, 1:]  # 2- or 4-byte offset: element-wise path
    w = _randn((4096,), dtype, 2)
    _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), dtype)
    _ref.assert_close(ops.silu_and_mul(x), _ref.silu_and_mul(x), dtype)
    wb = _randn((4097,), dtype, 5)[1:]  # misaligned weight
    _ref.assert_close(ops.rms_norm(x, wb, 1e-6, None), _ref.rms_norm(x, wb, 1e-6), dtype)
    xa = _randn((9, 4096), dtype, 6)
    w32 = _randn((4096 + 4,), torch.float32, 7)[4:]  # 16- but not 32-byte aligned fp32 weight
    _ref.assert_close(ops.rms_norm(xa, w32, 1e-6, None), _ref.rms_norm(xa, w32, 1e-6), dtype)


def test_many_rows_bandwidth_regime():
    for dtype in _ref.DTYPES:
        x = _randn((8192, 4096), dtype, 1)
        w = _randn((4096,), dtype, 2)
        _ref.assert_close(ops.rms_norm(x, w, 1e-6, None), _ref.rms_norm(x, w, 1e-6), dtype)
        x2 = _randn((4096, 2 * 4096), dtype, 3)
        _ref.assert_close(ops.silu_and_mul(x2), _ref.silu_and_mul(x2), dtype)


def test_cuda_graph_capture():
    x = _randn((16, 4096), torch.bfloat16, 1)
    r = _randn((16, 4096), torch.bfloat16, 2)
    w = _randn((4096,), torch.bfloat16, 3)
    xb, rb = x.clone(), r.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = ops.rms_norm(x, w, 1e-6, None)  # warm-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.rms_norm(x, w, 1e-6, None)
        ops.fused_add_rms_norm(xb, rb, w, 1e-6, None)
    xb.copy_(x)
    rb.copy_(r)
    graph.replay()
    torch.cuda.synchronize()
    _ref.assert_close(out, _ref.rms_norm(x, w, 1e-6), torch.bfloat16)
    exp_out, exp_res = _ref.fused_add_rms_norm(x, r, w, 1e-6)
    _ref.assert_close(xb, exp_out, torch.bfloat16)
    torch.testing.assert_close(rb, exp_res, atol=0, rtol=0)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device():
    x = _randn((4, 4096), torch.bfloat16, 1).to("cuda:1")
    w = _randn((4096,), torch.bfloat16, 2).to("cuda:1")
    out = ops.rms_norm(x, w, 1e-6, None)
    assert out.device == x.device
    _ref.assert_close(out, _ref.rms_norm(x, w, 1e-6), torch.bfloat16)


@pytest.mark.slow
def test_compiled_graph_calls_the_cuda_kernels():
    """The ops, called directly, under torch.compile: their fakes are the ircore ops', given when
    ircore registered the provider."""
    ircore.dispatch.ensure_loaded()
    assert "vllm_c" in ircore.ops.rms_norm.impls
    x = _randn((8, 4096), torch.bfloat16, 1)
    w = _randn((4096,), torch.bfloat16, 2)
    f = torch.compile(lambda x, w: ops.rms_norm(x, w, 1e-6, None) + 1, fullgraph=True)
    _ref.assert_close(f(x, w), _ref.rms_norm(x, w, 1e-6) + 1, torch.bfloat16)


def _dependent_chain(x, r, w, steps=40):
    """Each call reads what the previous one wrote (norm -> fused in place -> silu -> ...), so a
    kernel that touched memory before its predecessor finished would change the result."""
    out = torch.empty_like(x)
    silu = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype, device=x.device)
    for _ in range(steps):
        ops.rms_norm_out(out, x, w, 1e-6, None)
        ops.fused_add_rms_norm(out, r, w, 1e-6, None)
        ops.silu_and_mul_out(silu, out)
        x[:, : x.shape[1] // 2].copy_(silu)  # a copy kernel in between, as in a model
        ops.fused_add_rms_norm(x, out, w, 1e-6, None)
    return x, r, out


@pytest.mark.parametrize("tokens", [1, 16, 1024])
def test_pdl_dependent_calls_match_plain_launches(tokens):
    """With programmatic dependent launch (sm_90+) every kernel waits for its predecessor before
    touching memory: a chain of dependent calls, eager and in a CUDA graph, gives bit for bit what
    plain launches give."""
    dev = torch.cuda.current_device()
    assert ops._cuda_set_pdl(-1, dev) == (torch.cuda.get_device_capability()[0] >= 9)
    w = _randn((4096,), torch.bfloat16, 3, scale=0.1) + 1
    inputs = (_randn((tokens, 4096), torch.bfloat16, 1), _randn((tokens, 4096), torch.bfloat16, 2))
    assert_pdl_chain_matches(lambda x, r: _dependent_chain(x, r, w), inputs, kernels.set_pdl)


def test_set_pdl_checks():
    with pytest.raises(RuntimeError, match="mode must be -1, 0 or 1"):
        ops._cuda_set_pdl(2, 0)
