"""GPU-only checks of the position kernels (rope_kernels.py): real head geometries and token
counts against the ops' fp64 references, in place on the caller's buffers, CUDA-graph capture and
replay with new positions, the provider's registered implementation chosen by eager dispatch, and
a tensor on a second GPU. (test_rope_kernels.py and the conformance kit also run on the GPU when
there is one.)
"""

import pytest
import torch
from ircore_triton import impls

import ircore
from ircore.testing import assert_close_to_reference

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU (torch.cuda)"),
    pytest.mark.gpu,
]

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (query heads, kv heads, head_dim): Llama-3-8B / Qwen3-8B, Llama-3-70B, a 64-wide and a 256-wide head
GEOMETRY = [(32, 8, 128), (64, 8, 128), (16, 4, 64), (8, 1, 256)]
TOKENS = [1, 7, 4096]


def _cache(rows: int, rotary_dim: int, dtype: torch.dtype) -> torch.Tensor:
    inv = 10000.0 ** -(torch.arange(0, rotary_dim, 2, device="cuda", dtype=torch.float32) / rotary_dim)
    f = torch.outer(torch.arange(rows, device="cuda", dtype=torch.float32), inv)
    return torch.cat((f.cos(), f.sin()), dim=-1).to(dtype)


def _rotary_args(t: int, geometry: tuple[int, int, int], dtype: torch.dtype, neox: bool) -> tuple:
    """q, k views of one qkv buffer (vLLM's layout), positions anywhere in an 8192-row cache."""
    hq, hk, d = geometry
    qkv = torch.randn(t, (hq + 2 * hk) * d, device="cuda").to(dtype)
    q, k = qkv[:, : hq * d], qkv[:, hq * d : (hq + hk) * d]
    pos = torch.randint(0, 8192, (t,), device="cuda")
    return (pos, q, k, d, d, _cache(8192, d, dtype), neox, None, "standard", False, 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("geometry", GEOMETRY, ids=lambda g: "x".join(map(str, g)))
@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding_real_sizes(neox: bool, t: int, geometry: tuple, dtype: torch.dtype) -> None:
    args = _rotary_args(t, geometry, dtype, neox)
    q0, k0 = args[1].clone(), args[2].clone()
    assert impls.rotary_embedding_supports(*args)
    out = impls.rotary_embedding(*args)
    assert out[0] is args[1] and out[1] is args[2]
    assert_close_to_reference(ircore.ops.rotary_embedding, out, (args[0], q0, k0, *args[3:]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("geometry", GEOMETRY, ids=lambda g: "x".join(map(str, g)))
@pytest.mark.parametrize("t", TOKENS)
def test_rotary_pos_emb_hf_views_real_sizes(t: int, geometry: tuple, dtype: torch.dtype) -> None:
    hq, hk, d = geometry
    b = 2
    q = torch.randn(b, t, hq * d, device="cuda").to(dtype).view(b, t, hq, d).transpose(1, 2)
    k = torch.randn(b, t, hk * d, device="cuda").to(dtype).view(b, t, hk, d).transpose(1, 2)
    inv = 10000.0 ** -(torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d)
    f = (torch.arange(b * t, device="cuda").view(b, t).float()[..., None] * inv).repeat(1, 1, 2)
    cos, sin = f.cos().to(dtype), f.sin().to(dtype)
    q0, k0 = q.clone(), k.clone()
    assert impls.rotary_pos_emb_supports(q, k, cos, sin, 1)
    out = impls.rotary_pos_emb(q, k, cos, sin, 1)
    assert out[0] is q and out[1] is k
    assert_close_to_reference(ircore.ops.rotary_pos_emb, out, (q0, k0, cos, sin, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("geometry", GEOMETRY, ids=lambda g: "x".join(map(str, g)))
@pytest.mark.parametrize("t", TOKENS)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_fused_qk_norm_rope_real_sizes(neox: bool, t: int, geometry: tuple, dtype: torch.dtype) -> None:
    hq, hk, d = geometry
    qkv = (2 * torch.randn(t, (hq + 2 * hk) * d, device="cuda")).to(dtype)
    wq = (1 + 0.1 * torch.randn(d, device="cuda")).to(dtype)
    wk = (1 + 0.1 * torch.randn(d, device="cuda")).to(dtype)
    pos = torch.randint(0, 8192, (t,), device="cuda")
    args = (qkv, hq, hk, hk, d, 1e-6, wq, wk, _cache(8192, d, torch.float32), neox, pos)
    qkv0 = qkv.clone()
    assert impls.fused_qk_norm_rope_supports(*args)
    assert impls.fused_qk_norm_rope(*args) is qkv
    assert_close_to_reference(ircore.ops.fused_qk_norm_rope, qkv, (qkv0, *args[1:]))
    assert torch.equal(qkv[:, (hq + hk) * d :], qkv0[:, (hq + hk) * d :])


def test_cuda_graph_replay_reads_new_positions() -> None:
    """Captured once, replayed with other positions written into the captured buffer."""
    args = _rotary_args(16, (32, 8, 128), torch.bfloat16, True)
    pos, q, k = args[0], args[1], args[2]
    q_in, k_in = q.clone(), k.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        impls.rotary_embedding(*args)  # compiles the kernel outside the capture
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        impls.rotary_embedding(*args)
    for new in (torch.arange(16, device="cuda"), torch.randint(0, 8192, (16,), device="cuda")):
        pos.copy_(new)
        q.copy_(q_in)
        k.copy_(k_in)
        g.replay()
        torch.cuda.synchronize()
        assert_close_to_reference(ircore.ops.rotary_embedding, (q, k), (new, q_in, k_in, *args[3:]))


def test_eager_dispatch_runs_the_triton_kernel() -> None:
    """With triton first, ircore's eager call of each position op runs this provider's kernel."""
    ircore.get_priority("rotary_embedding")  # loads the installed providers
    names = ("rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb", "fused_qk_norm_rope")
    for name in names:
        impl = ircore.get_op(name).impls.get("triton")
        assert impl is not None, f"triton has no {name}: {ircore.providers.HOST.status_of('triton')}"
        assert impl.fn is getattr(impls, name)
    args = _rotary_args(5, (32, 8, 128), torch.bfloat16, True)
    with ircore.testing.isolated():
        ircore.set_priority({name: ["triton"] for name in names})
        assert ircore.explain("rotary_embedding", *args).chosen == "triton"
        out = ircore.ops.rotary_embedding(*args)
    assert_close_to_reference(ircore.ops.rotary_embedding, out, args)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensor_on_another_gpu() -> None:
    with torch.cuda.device(1):
        args = _rotary_args(7, (32, 8, 128), torch.bfloat16, False)
    q0, k0 = args[1].clone(), args[2].clone()
    out = impls.rotary_embedding(*args)
    assert_close_to_reference(ircore.ops.rotary_embedding, out, (args[0], q0, k0, *args[3:]))
