"""The QK-norm + RoPE fusions on traced graphs: what they rewrite, what they leave, bit for bit.

Graphs come from ``make_fx`` (fake tracing: the aten and ircore nodes a post-grad graph holds);
the passes run on them without Inductor. Core tests run with no provider, so every op is
``native`` and the fused graph must give the unfused graph's results exactly. A tiny Qwen3 under
``backend="ircore"`` is in test_transformers.py.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore.compile._fusion import FUSION_PASSES
from ircore.compile._qk_norm_rope import fuse_hf_qk_norm_rope, fuse_qk_norm_rope
from ircore.ops import rms_norm, rotary_embedding, rotary_pos_emb
from ircore.ops._rope_inputs import _hf_cos_sin, _rope_cache

FUSED = "ircore.fused_qk_norm_rope.default"


def _targets(gm: torch.fx.GraphModule) -> Counter[str]:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def _fuse(fn, args, fuse):
    """Trace ``fn`` (fake), run ``fuse``, check the graph and that it computes ``fn`` bit for bit."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    count = fuse(gm.graph)
    stable_topological_sort(gm.graph)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    expected, got = fn(*args), gm(*args)
    for e, g in zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(got)):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert torch.equal(g, e), (g - e).abs().max()
    return gm, count


# ---------------------------------------------------------------------- vLLM's form
def _vllm_args(tokens, heads, d, dtype=torch.float32):
    torch.manual_seed(0)
    qkv = torch.randn(*tokens, sum(heads) * d, dtype=dtype) * 2
    wq, wk = (torch.randn(d, dtype=dtype) * 0.1 + 1 for _ in range(2))
    positions = torch.randint(0, 97, tokens)
    return qkv, positions, wq, wk, _rope_cache(97, d, "cpu").to(dtype)


def _vllm(heads, d, eps=(1e-6, 1e-6), neox=True, view_back=True, rope=None, extra=False):
    """split(qkv) -> per-head rms_norm -> (view back) -> rotary_embedding, as vLLM's Qwen3 does."""
    hq, hk = heads[0], heads[1]

    def fn(qkv, positions, wq, wk, cache):
        q, k, *v = qkv.split([h * d for h in heads], dim=-1)
        qn = rms_norm(q.reshape(*q.shape[:-1], hq, d), wq, eps[0])
        kn = rms_norm(k.reshape(*k.shape[:-1], hk, d), wk, eps[1])
        if view_back:
            qn, kn = qn.reshape(q.shape), kn.reshape(k.shape)
        args = tuple(cache if isinstance(a, str) and a.startswith("cache") else a for a in rope or ()) or (
            d,
            d,
            cache,
            neox,
        )
        q2, k2 = rotary_embedding(positions, qn, kn, *args)
        return (q2, k2, *v) + ((qn * 2,) if extra else ())

    return fn


@pytest.mark.parametrize(
    "tokens, heads, d, eps, neox, view_back, dtype",
    [
        ((5,), (4, 2, 2), 16, 1e-6, True, True, torch.float32),  # vLLM's layout, GQA
        ((2, 3), (2, 1, 1), 48, 3e-5, False, False, torch.bfloat16),  # D 48, eps 3e-5, gptj, [B,S], 3-D rope
        ((4,), (3, 3), 8, 1e-5, True, True, torch.float16),  # no v (a q/k buffer), MHA
    ],
    ids=["gqa-neox-fp32", "d48-gptj-bf16", "qk-only-fp16"],
)
def test_vllm_form_fuses_any_eps_style_and_geometry(tokens, heads, d, eps, neox, view_back, dtype):
    fn = _vllm(heads, d, (eps, eps), neox, view_back)
    with ircore.priority(rms_norm=["native"], rotary_embedding=["native"], fused_qk_norm_rope=["native"]):
        gm, count = _fuse(fn, _vllm_args(tokens, heads, d, dtype), fuse_qk_norm_rope)
    assert count == 1
    targets = _targets(gm)
    assert targets[FUSED] == 1 and targets["ircore.rms_norm.default"] == 0
    assert targets["ircore.rotary_embedding.default"] == 0
    (node,) = (n for n in gm.graph.nodes if str(n.target) == FUSED)
    assert node.args[1:6] == (*heads, *(0,) * (3 - len(heads)), d, eps) and node.args[9] is neox


def test_two_attention_geometries_in_one_graph_fuse_each():
    a, b = _vllm((4, 2, 2), 16), _vllm((2, 2, 2), 32, (1e-5, 1e-5), neox=False)
    args_a, args_b = _vllm_args((3,), (4, 2, 2), 16), _vllm_args((3,), (2, 2, 2), 32)

    def fn(*args):
        return a(*args[:5]) + b(*args[5:])

    gm, count = _fuse(fn, (*args_a, *args_b), fuse_qk_norm_rope)
    assert count == 2 and _targets(gm)[FUSED] == 2


NOT_FUSED = {
    # a normed value with another user: fusing would compute the norm twice
    "normed q used elsewhere": dict(extra=True),
    "q and k norms of different eps": dict(eps=(1e-6, 1e-5)),
    "partial rotary (rotary_dim < head_size)": dict(rope=(16, 8, "cache8", True)),
    "inverse rotation": dict(rope=(16, 16, "cache", True, None, "standard", True)),
    "rope_dim_offset": dict(rope=(16, 8, "cache8", True, None, "standard", False, 8)),
}


@pytest.mark.parametrize("case", NOT_FUSED)
def test_vllm_form_leaves_what_the_fused_op_does_not_compute(case):
    options = dict(NOT_FUSED[case])
    rope = options.pop("rope", None)
    args = _vllm_args((5,), (4, 2, 2), 16)
    if rope is not None and rope[2] == "cache8":  # rotary_dim 8: a cache of 8 columns
        args = (*args[:4], _rope_cache(97, 8, "cpu"))
    fn = _vllm((4, 2, 2), 16, rope=rope, **options)
    gm, count = _fuse(fn, args, fuse_qk_norm_rope)
    assert count == 0 and _targets(gm)[FUSED] == 0


def test_q_and_k_from_other_tensors_are_not_fused():
    """The fused op reads one packed buffer: q and k norms of two separate tensors stay."""

    def fn(q, k, positions, wq, wk, cache):
        qn = rms_norm(q.reshape(5, 4, 16), wq, 1e-6).reshape(q.shape)
        kn = rms_norm(k.reshape(5, 2, 16), wk, 1e-6).reshape(k.shape)
        return rotary_embedding(positions, qn, kn, 16, 16, cache, True)

    qkv, positions, wq, wk, cache = _vllm_args((5,), (4, 2, 2), 16)
    _, count = _fuse(
        fn, (qkv[:, :64].clone(), qkv[:, 64:96].clone(), positions, wq, wk, cache), fuse_qk_norm_rope
    )
    assert count == 0


# ---------------------------------------------------------------------- Hugging Face's form
def _hf(heads, d, batch, seq, eps=(1e-6, 1e-6), extra=False, unsqueeze_dim=1):
    """Qwen3's attention: q_norm/k_norm on (B, S, H, D) views, transposed, then the HF rotation."""

    def fn(q_proj, k_proj, wq, wk, cos, sin):
        q = rms_norm(q_proj.view(batch, seq, heads[0], d), wq, eps[0])
        k = rms_norm(k_proj.view(batch, seq, heads[1], d), wk, eps[1])
        if unsqueeze_dim == 1:
            q, k = q.transpose(1, 2), k.transpose(1, 2)
        out = rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
        return out + ((q + 1,) if extra else ())

    return fn


def _hf_args(heads, d, batch, seq, cos_batch, dtype=torch.float32):
    torch.manual_seed(0)
    q_proj = torch.randn(batch, seq, heads[0] * d, dtype=dtype)
    k_proj = torch.randn(batch, seq, heads[1] * d, dtype=dtype)
    wq, wk = (torch.randn(d, dtype=dtype) * 0.1 + 1 for _ in range(2))
    ids = torch.arange(seq)[None, :] + 7 * torch.arange(cos_batch)[:, None]
    return (q_proj, k_proj, wq, wk, *_hf_cos_sin(ids, d, dtype, scaling=0.9))


@pytest.mark.parametrize(
    "cos_batch, dtype",
    [(2, torch.bfloat16), (1, torch.float32)],
    ids=["cos-per-sequence-bf16", "cos-shared-fp32"],
)
def test_hf_form_fuses_over_a_packed_q_k_buffer(cos_batch, dtype):
    heads, d, batch, seq = (4, 2), 16, 2, 3
    with ircore.priority(rms_norm=["native"], rotary_pos_emb=["native"], fused_qk_norm_rope=["native"]):
        gm, count = _fuse(
            _hf(heads, d, batch, seq), _hf_args(heads, d, batch, seq, cos_batch, dtype), fuse_hf_qk_norm_rope
        )
    assert count == 1
    targets = _targets(gm)
    assert targets[FUSED] == 1 and targets["ircore.rotary_pos_emb.default"] == 0
    assert targets["ircore.rms_norm.default"] == 0
    (node,) = (n for n in gm.graph.nodes if str(n.target) == FUSED)
    assert node.args[1:6] == (4, 2, 0, 16, 1e-6) and node.args[9] is True


@pytest.mark.parametrize(
    "options",
    [dict(extra=True), dict(eps=(1e-6, 1e-5)), dict(unsqueeze_dim=2)],
    ids=["normed q used elsewhere", "different eps", "(B,S,H,D) with unsqueeze_dim=2"],
)
def test_hf_form_leaves_what_the_fused_op_does_not_compute(options):
    heads, d, batch, seq = (4, 2), 16, 2, 3
    args = _hf_args(heads, d, batch, seq, 2)
    gm, count = _fuse(_hf(heads, d, batch, seq, **options), args, fuse_hf_qk_norm_rope)
    assert count == 0 and _targets(gm)[FUSED] == 0


def test_fusion_names_and_order():
    """Named in the fusions switch (ircore.compile.FUSIONS), run before the reshape fusion, which
    would flatten a one-head norm out of the pattern."""
    names = list(FUSION_PASSES)
    assert names == list(ircore.compile.FUSIONS)
    assert names.index("qk_norm_rope") < names.index("rms_norm_reshape")
    assert names.index("hf_qk_norm_rope") < names.index("rms_norm_reshape")


def test_the_switch_turns_the_fusion_off_and_the_report_counts_it():
    fn, args = _vllm((4, 2, 2), 16), _vllm_args((5,), (4, 2, 2), 16)
    for switch, fused in (({"qk_norm_rope": False}, 0), (None, 1)):
        ircore.compile.reset_report()
        gm = make_fx(fn, tracing_mode="fake")(*args)
        ircore.compile.post_grad_pass(fusions=switch)(gm.graph)
        assert ircore.compile.report().fusions["qk_norm_rope"] == fused
        assert dict(ircore.compile.report().lowered).get("fused_qk_norm_rope", {}) == (
            {"native": 1} if fused else {}
        )


HEAD_DIM = 16


@pytest.mark.slow
def test_hf_form_fuses_with_dynamic_batch_and_sequence():
    """Under Dynamo with dynamic=True (AOT-traced aten graphs, no Inductor: a few seconds): batch
    and sequence are symbols, heads static (the projections' weights); cos/sin per sequence (the
    batch's symbol) or shared (batch 1, specialised) each fuse, bit for bit at other sizes too."""
    from torch._dynamo.backends.common import aot_autograd

    counts = []

    def fw(gm, example_inputs):
        counts.append(fuse_hf_qk_norm_rope(gm.graph))
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return gm.forward

    d = HEAD_DIM  # a global: Dynamo makes a closure's int a symbol under dynamic=True (HF: self.head_dim, static)
    torch.manual_seed(0)
    lin_q, lin_k = torch.nn.Linear(32, 4 * d), torch.nn.Linear(32, 2 * d)
    wq, wk = torch.randn(d) * 0.1 + 1, torch.randn(d) * 0.1 + 1

    def attention(x, cos, sin):
        b, s = x.shape[:2]
        q = rms_norm(lin_q(x).view(b, s, -1, HEAD_DIM), wq, 1e-6).transpose(1, 2)
        k = rms_norm(lin_k(x).view(b, s, -1, HEAD_DIM), wk, 1e-6).transpose(1, 2)
        return rotary_pos_emb(q, k, cos, sin)

    torch._dynamo.reset()
    compiled = torch.compile(attention, backend=aot_autograd(fw_compiler=fw), dynamic=True, fullgraph=True)
    try:
        for batch, seq, cos_batch in ((2, 3, 2), (2, 4, 1), (3, 5, 3), (3, 2, 1)):
            ids = torch.arange(seq)[None, :] + 7 * torch.arange(cos_batch)[:, None]
            args = (torch.randn(batch, seq, 32), *_hf_cos_sin(ids, d, torch.float32))
            with torch.no_grad():
                for e, g in zip(attention(*args), compiled(*args)):
                    assert torch.equal(g, e)
    finally:
        torch._dynamo.reset()
    assert counts == [1, 1]  # one graph per cos/sin batch kind, reused at the other sizes
