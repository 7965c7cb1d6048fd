"""vllm_c's batch-invariant norms: on CPU the default kernels (invariant as they are), on CUDA the
launches fixed per hidden size (csrc/cuda_norm_invariant.cu). The CUDA tests need a GPU (marked
gpu; `bash benchmarks/gpu_run.sh gpu-tests` runs them) and skip here."""

import _ref
import pytest
import torch
from conftest import requires_cuda
from ircore_vllm_c import impls, provider

import ircore
from ircore.testing import check_invariance

ops = torch.ops.ircore_vllm_c


def _randn(shape, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(device)


def _calls(op, x, dev):
    """``op``'s invariant and default call on rows ``x`` (weights and gates drawn per hidden)."""
    h = x.shape[-1]
    w = _randn((h,), x.dtype, 1, dev) * 0.1 + 1
    if op == "rms_norm":
        return lambda t: impls.rms_norm_invariant(t, w, 1e-6, None), lambda t: impls.rms_norm(
            t, w, 1e-6, None
        )
    if op == "layer_norm":
        b = _randn((h,), x.dtype, 2, dev)
        return lambda t: impls.layer_norm_invariant(t, w, b, 1e-5), lambda t: impls.layer_norm(t, w, b, 1e-5)
    if op == "rms_norm_gated":
        group = h // 2 if h % 2 == 0 else h

        def gated(fn):
            return lambda t: fn(t, torch.sigmoid(t) * 2, w, 1e-6, group, False, False)

        return gated(impls.rms_norm_gated_invariant), gated(impls.rms_norm_gated)

    def fused(fn):  # the residual is x reversed: a row argument like x, of x's layout
        def run(t):
            xs = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
            rs = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
            xs.copy_(t)
            rs.copy_(t.flip(-1))
            fn(xs, rs, w, 1e-6, None)
            return torch.cat([xs, rs], dim=-1)

        return run

    return fused(impls.fused_add_rms_norm_invariant), fused(impls.fused_add_rms_norm)


NORMS = list(provider.NORMS)


def test_norms_claim_invariance_through_their_variants():
    """Every norm is claimed on every device, through `<op>_invariant`."""
    ircore.dispatch.ensure_loaded()
    for name in NORMS:
        impl = getattr(ircore.ops, name).impls["vllm_c"]
        assert impl.batch_invariant is True and impl.invariant_fn is getattr(impls, f"{name}_invariant")


@pytest.mark.parametrize("op", NORMS)
def test_cpu_variant_is_the_default_kernel(op):
    """On CPU the invariant variant is the default kernel itself: the same bits."""
    x = _randn((5, 96), torch.bfloat16, 0)
    inv, default = _calls(op, x, "cpu")
    assert torch.equal(inv(x), default(x))


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("fused", [False, True])
def test_cuda_config_depends_on_hidden_size_only(fused, dtype):
    """The launch's (chunks per thread, threads per row, block): the default's bandwidth choice."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    for hidden in (1, 64, 1000, 4096, 8192, 16384, 65536):
        nv, tpr, block = ops._cuda_invariant_norm_config(hidden, dtype, fused)
        chunks = -(-hidden // vec)
        assert block % 32 == 0 and block <= 1024
        if nv == 0:  # the loop kernel: one row per block
            assert tpr == block and chunks > 4 * 512
        else:
            assert tpr * nv >= chunks and block % tpr == 0 and (nv == 1 or block <= 512)
            assert nv >= (1 if fused else 2)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_check_invariance(op, dtype):
    """The conformance kit's check of the claim on CUDA: 1, 3, 64, 1000 rows, the probe at the
    start, middle and end, contiguous and padded-stride batches, every distinct sample."""
    checked = check_invariance("vllm_c", device="cuda", dtypes=(dtype,), ops=(op,))
    assert checked[op] > 0


# Hidden sizes reaching each launch path: one chunk (tiny), sub-warp groups, a row not a multiple of
# the 16-byte chunk (element-wise loads), the common model widths, and past 4 x 512 chunks (bf16:
# the two-pass loop kernel).
HIDDEN = [8, 100, 1000, 4096, 5120, 8192, 20000]


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("op", NORMS)
@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", HIDDEN)
def test_cuda_row_alone_equals_row_in_any_batch(hidden, dtype, op):
    """A probe row alone against the same row at the start, middle and end of batches of 1, 3, 64
    and 1000 rows, contiguous and with a row stride of hidden + 1 (rows alternately 16-byte aligned
    and not: the vector and element-wise loads must give the same sums); within the op's
    tolerance of the default kernel."""
    rows = _randn((1001, hidden), dtype, hidden, "cuda")
    probe = rows[:1]
    inv, default = _calls(op, probe, "cuda")
    alone = inv(probe)
    _ref.assert_close(alone, default(probe), dtype)
    for size in (1, 3, 64, 1000):
        for pad in (0, 1):
            base = torch.zeros((size, hidden + pad), dtype=dtype, device="cuda")
            batch = base[:, :hidden]
            batch.copy_(rows[1 : size + 1])
            positions = sorted({0, size // 2, size - 1})
            for p in positions:
                batch[p] = probe[0]
            out = inv(batch)
            for p in positions:
                assert torch.equal(out[p : p + 1], alone), (op, hidden, dtype, size, pad, p)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("op", NORMS)
def test_cuda_graph_replay_equals_eager(op):
    """Eager and CUDA-graph replay give the same bits (nothing in the launch reads the batch)."""
    x = _randn((37, 4096), torch.bfloat16, 7, "cuda")
    inv, _ = _calls(op, x, "cuda")
    eager = inv(x)
    static_x = x.clone()
    inv(static_x)  # warm up (loads, allocator) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = inv(static_x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, eager)


@requires_cuda
@pytest.mark.gpu
def test_cuda_mode_runs_the_invariant_launch():
    """In batch-invariant mode, ircore's rms_norm on CUDA with vllm_c first gives the invariant
    launch's bits."""
    x = _randn((64, 4096), torch.bfloat16, 3, "cuda")
    w = _randn((4096,), torch.bfloat16, 4, "cuda")
    with ircore.priority(rms_norm=["vllm_c"]), ircore.batch_invariant():
        got = ircore.ops.rms_norm(x, w, 1e-6)
    assert torch.equal(got, ops.rms_norm_invariant(x, w, 1e-6, None))
