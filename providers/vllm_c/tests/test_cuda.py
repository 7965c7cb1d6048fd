"""CUDA-only paths: every launch configuration, the two-pass kernel for long rows, the
element-wise path for misaligned rows, CUDA graphs and a second device. Skipped without a GPU."""

import _ref
import pytest
import torch
from conftest import requires_cuda

pytestmark = requires_cuda
ops = torch.ops.ircore_vllm_c


def _randn(shape, dtype, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).cuda()


@pytest.fixture
def forced_config():
    yield ops._cuda_set_norm_config
    ops._cuda_set_norm_config(0, 0, 0)


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


def test_compiled_graph_calls_the_cuda_kernels():
    x = _randn((8, 4096), torch.bfloat16, 1)
    w = _randn((4096,), torch.bfloat16, 2)
    f = torch.compile(lambda x, w: ops.rms_norm(x, w, 1e-6, None) + 1, fullgraph=True)
    _ref.assert_close(f(x, w), _ref.rms_norm(x, w, 1e-6) + 1, torch.bfloat16)
