"""GPU-only checks: the autotuned launch path on real sizes, CUDA-graph capture and replay of
each op (eager calls, and the ops the core builds for compiled graphs), a first call made inside a
capture, and torch.compile (the ircore backend) calling the provider's ops.

(test_kernels.py also runs on the GPU when there is one, with the same fp64 references.)
"""

import pytest
import torch
from _ref import assert_close, assert_residual, rms_norm_ref, silu_and_mul_ref
from ircore_triton import impls, kernels

import ircore
from ircore.testing import assert_pdl_chain_matches, compiled_code

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU (torch.cuda)"),
    pytest.mark.gpu,
]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [(1, 4096), (16, 4096), (128, 8192), (1024, 4096), (8192, 8192), (3, 5120), (33, 40000)]
EPS = 1e-6


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def _weight(n: int, dtype: torch.dtype) -> torch.Tensor:
    return (1.0 + 0.5 * torch.randn(n, device="cuda")).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_rms_norm_tuned(size: tuple[int, int], dtype: torch.dtype) -> None:
    t, h = size
    x, w = _randn(t, h, dtype=dtype), _weight(h, dtype)
    assert_close(impls.rms_norm(x, w, EPS), rms_norm_ref(x, w, EPS), dtype)
    assert_close(impls.rms_norm(x, None, EPS, h // 2), rms_norm_ref(x, None, EPS, h // 2), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_fused_add_rms_norm_tuned(size: tuple[int, int], dtype: torch.dtype) -> None:
    t, h = size
    x, r, w = _randn(t, h, dtype=dtype), _randn(t, h, dtype=dtype), _weight(h, dtype)
    expected_res = x + r
    expected = rms_norm_ref(expected_res, w, EPS)
    out, res = impls.fused_add_rms_norm_functional(x, r, w, EPS)
    assert_residual(res, expected_res)
    assert_close(out, expected, dtype)
    out, res = impls.fused_add_rms_norm(x, r, w, EPS)
    assert out is x and res is r
    assert_residual(res, expected_res)
    assert_close(out, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("size", [(1, 14336), (16, 11008), (1024, 14336), (8192, 4096), (5, 1500)], ids=str)
def test_silu_and_mul_tuned(size: tuple[int, int], dtype: torch.dtype) -> None:
    t, d = size
    x = _randn(t, 2 * d, dtype=dtype)
    assert_close(impls.silu_and_mul(x), silu_and_mul_ref(x), dtype)


def _graph(fn):
    """Warm up ``fn`` on a side stream (compiles and tunes), then capture it in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def _replay_and_check(g_norm, g_silu, g_fused, inputs, outputs) -> None:
    """Replay the three captured graphs twice, with new inputs written into the captured buffers
    each time: the outputs match the references, the in-place op wrote into x and x_residual."""
    x, w, xs, xa, ra = inputs
    y, s = outputs
    t, h = x.shape
    dtype = x.dtype
    for _ in range(2):  # new inputs each time, written into the captured buffers
        x.copy_(_randn(t, h, dtype=dtype))
        xs.copy_(_randn(t, 2 * h, dtype=dtype))
        x0, r0 = _randn(t, h, dtype=dtype), _randn(t, h, dtype=dtype)
        xa.copy_(x0)
        ra.copy_(r0)
        g_norm.replay()
        g_silu.replay()
        g_fused.replay()
        torch.cuda.synchronize()
        assert_close(y, rms_norm_ref(x, w, EPS), dtype)
        assert_close(s, silu_and_mul_ref(xs), dtype)
        assert_residual(ra, x0 + r0)
        assert_close(xa, rms_norm_ref(x0 + r0, w, EPS), dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("t", [1, 128, 4096])
def test_cuda_graph_replay(t: int, dtype: torch.dtype) -> None:
    h = 4096
    x, r, w = _randn(t, h, dtype=dtype), _randn(t, h, dtype=dtype), _weight(h, dtype)
    xa, ra = x.clone(), r.clone()
    xs = _randn(t, 2 * h, dtype=dtype)

    g_norm, y = _graph(lambda: impls.rms_norm(x, w, EPS))
    g_silu, s = _graph(lambda: impls.silu_and_mul(xs))

    def fused():
        return impls.fused_add_rms_norm(xa, ra, w, EPS)

    fused()  # warm-up (tunes), then restore the inputs it overwrote
    g_fused = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_fused):
        fused()

    _replay_and_check(g_norm, g_silu, g_fused, (x, w, xs, xa, ra), (y, s))


def test_first_call_inside_capture() -> None:
    """A key never tuned before is launched with the heuristic config, and not cached."""
    saved = kernels.tuned_configs()
    kernels.clear_configs()
    try:
        x, w = _randn(64, 3072, dtype=torch.bfloat16), _weight(3072, torch.bfloat16)
        # Compile and load the heuristic kernel first: this tests the config choice under
        # capture, not Triton compiling inside a capture (warm up before capturing).
        kernels.rms_norm(x, w, EPS, config=kernels._norm_heuristic(3072, 64, 2))
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = impls.rms_norm(x, w, EPS)
        assert kernels.tuned_configs() == {}
        g.replay()
        torch.cuda.synchronize()
        assert_close(y, rms_norm_ref(x, w, EPS), torch.bfloat16)
        impls.rms_norm(x, w, EPS)  # outside capture: now it tunes
        assert len(kernels.tuned_configs()) == 1
    finally:
        kernels.clear_configs()
        kernels._CONFIGS.update(saved)


def test_tuning_leaves_rng_alone() -> None:
    saved = kernels.tuned_configs()
    kernels.clear_configs()
    try:
        x = _randn(100, 2560, dtype=torch.float16)
        state = torch.cuda.get_rng_state()
        impls.rms_norm(x, None, EPS)
        assert torch.equal(torch.cuda.get_rng_state(), state)
    finally:
        kernels.clear_configs()
        kernels._CONFIGS.update(saved)


def test_steady_state_does_not_retune() -> None:
    x = _randn(300, 4096, dtype=torch.bfloat16)
    impls.rms_norm(x, None, EPS)
    before = kernels.tuned_configs()
    impls.rms_norm(x[:200], None, EPS)  # same bucket
    assert kernels.tuned_configs() == before


@pytest.mark.usefixtures("triton_first")
def test_cuda_graph_of_the_provider_ops() -> None:
    """The ops compiled graphs hold for this provider (``torch.ops.ircore_triton.*``, built by the
    core) capture and replay like the eager calls: the in-place one writes into x and x_residual."""
    ops = torch.ops.ircore_triton
    dtype, t, h = torch.bfloat16, 128, 4096
    x, w, xs = _randn(t, h, dtype=dtype), _weight(h, dtype), _randn(t, 2 * h, dtype=dtype)
    xa, ra = _randn(t, h, dtype=dtype), _randn(t, h, dtype=dtype)

    g_norm, y = _graph(lambda: ops.rms_norm.default(x, w, EPS, None))
    g_silu, s = _graph(lambda: ops.silu_and_mul.default(xs))
    ops.fused_add_rms_norm.default(xa, ra, w, EPS, None)  # warm-up (tunes); the inputs are reset below
    g_fused = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_fused):
        ops.fused_add_rms_norm.default(xa, ra, w, EPS, None)

    _replay_and_check(g_norm, g_silu, g_fused, (x, w, xs, xa, ra), (y, s))


@pytest.mark.slow
@pytest.mark.usefixtures("triton_first")
def test_inductor_fullgraph() -> None:
    """``backend="ircore"``: each ircore call becomes one node of the provider's op, and
    ``maybe_inplace``'s results land in the caller's tensors."""
    def f(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out, res = ircore.ops.fused_add_rms_norm.maybe_inplace(x, r, w, EPS)
        y = ircore.ops.rms_norm(res, w, EPS) + out
        return ircore.ops.silu_and_mul(torch.cat([y, y], dim=-1))

    dtype = torch.bfloat16
    x, r, w = _randn(8, 4096, dtype=dtype), _randn(8, 4096, dtype=dtype), _weight(4096, dtype)
    expected = f(x.clone(), r.clone(), w)
    x2, r2 = x.clone(), r.clone()
    got, code = compiled_code(f, (x2, r2, w))
    torch._dynamo.reset()
    torch.testing.assert_close(got, expected, atol=3e-2, rtol=3e-2)
    assert torch.equal(r2, x + r)
    for name in ("fused_add_rms_norm", "rms_norm", "silu_and_mul"):
        assert code.count(f"torch.ops.ircore_triton.{name}.default(") == 1, name
    assert "torch.ops.ircore." not in code  # every ircore node lowered


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensor_on_another_gpu() -> None:
    """Triton launches on the current device; the launchers switch to the tensor's device."""
    dtype = torch.bfloat16
    x = torch.randn(64, 4096, device="cuda:1").to(dtype)
    r = torch.randn(64, 4096, device="cuda:1").to(dtype)
    w = (1 + 0.5 * torch.randn(4096, device="cuda:1")).to(dtype)
    with torch.cuda.device(0):
        y = impls.rms_norm(x, w, EPS)
        s = impls.silu_and_mul(x)
        expected_res = x + r
        out, res = impls.fused_add_rms_norm(x.clone(), r, w, EPS)
    assert y.device == x.device
    assert_close(y, rms_norm_ref(x, w, EPS), dtype)
    assert_close(s, silu_and_mul_ref(x), dtype)
    assert_residual(res, expected_res)
    assert_close(out, rms_norm_ref(expected_res, w, EPS), dtype)


def _dependent_chain(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, steps: int = 40) -> list[torch.Tensor]:
    """Each call reads what the previous one wrote, so a kernel that touched memory before its
    predecessor finished would change the result."""
    h = x.shape[1]
    for _ in range(steps):
        y = impls.rms_norm(x, w, EPS)
        impls.fused_add_rms_norm(y, r, w, EPS)
        x[:, : h // 2].copy_(impls.silu_and_mul(y))
        impls.fused_add_rms_norm(x, y, w, EPS)
    return [x, r]


@pytest.mark.parametrize("t", [1, 16, 1024])
def test_pdl_dependent_calls_match_plain_launches(t: int) -> None:
    """With programmatic dependent launch (sm_90+) every program waits for the previous kernel
    before touching memory: a chain of dependent calls gives bit for bit what plain launches give,
    eagerly and replayed from a CUDA graph."""
    dev = torch.device("cuda", torch.cuda.current_device())
    assert kernels.pdl_enabled(dev) == (torch.cuda.get_device_capability()[0] >= 9)
    w = _weight(4096, torch.bfloat16)
    inputs = (_randn(t, 4096, dtype=torch.bfloat16), _randn(t, 4096, dtype=torch.bfloat16))
    assert_pdl_chain_matches(lambda x, r: _dependent_chain(x, r, w), inputs, kernels.set_pdl)
