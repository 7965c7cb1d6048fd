"""The fusion passes on traced graphs: what they rewrite, what they must leave alone, numerics.

Graphs come from ``make_fx`` (fake and symbolic tracing), which records the same aten and ircore
nodes a post-grad graph holds; the passes run on them directly, without Inductor (fast). The
backend tests (test_compile_backend.py) run the same passes inside real compiles.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore.compile._fusion import fuse_add_rms_norm, fuse_norm_reshape

rms = torch.ops.ircore.rms_norm
fused = torch.ops.ircore.fused_add_rms_norm
RMS, FUSED = "ircore.rms_norm.default", "ircore.fused_add_rms_norm.default"
ADD = "aten.add.Tensor"


def _targets(gm: torch.fx.GraphModule) -> Counter[str]:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def _fuse(fn, args, mode="fake", passes=(fuse_add_rms_norm,)):
    """Trace ``fn``, run the passes, check the graph and its numerics; returns (gm, counts)."""
    gm = make_fx(fn, tracing_mode=mode)(*args)
    counts = [p(gm.graph) for p in passes]
    stable_topological_sort(gm.graph)
    gm.graph.lint()
    gm.recompile()
    expected, got = fn(*args), gm(*args)
    for e, g in zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(got)):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    return gm, counts


def _inputs(shape=(6, 32), dtype=torch.float32):
    torch.manual_seed(0)
    return torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype), torch.randn(shape[-1], dtype=dtype)


def two_orders(x, r, w):
    s1 = r + x  # residual first (Hugging Face's order)
    h1 = rms(s1, w, 1e-6)
    s2 = h1 + s1  # branch first, another epsilon
    return rms(s2, w, 1e-5), s2


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_add_rms_norm_fuses_both_orders_and_any_epsilon(mode):
    gm, (count,) = _fuse(two_orders, _inputs(), mode)
    assert count == 2
    targets = _targets(gm)
    assert targets[FUSED] == 2 and targets[RMS] == 0 and targets[ADD] == 0
    epsilons = sorted(n.args[3] for n in gm.graph.nodes if str(n.target) == FUSED)
    assert epsilons == [1e-6, 1e-5]


def test_the_sum_may_have_other_users():
    def fn(x, r, w):
        s = x + r
        return rms(s, w, 1e-6), s * 2

    gm, (count,) = _fuse(fn, _inputs())
    assert count == 1 and _targets(gm)[ADD] == 0


def test_weight_defined_after_another_user_of_the_sum():
    def fn(x, r, w):
        s = x + r
        y = s * 3  # a user of the sum before the norm
        w2 = w * 2  # the norm's weight is computed after that user
        return rms(s, w2, 1e-6), y

    _, (count,) = _fuse(fn, _inputs())
    assert count == 1


def test_two_norms_of_one_sum_fuse_once():
    def fn(x, r, w):
        s = x + r
        return rms(s, w, 1e-6), rms(s, w * 2, 1e-6)

    gm, (count,) = _fuse(fn, _inputs())
    assert count == 1 and _targets(gm)[RMS] == 1


def test_weight_none_and_variance_size_fuse():
    def fn(x, r, w):
        a = rms(x + r, None, 1e-6)
        return rms(a + r, w, 1e-6, 8)

    gm, (count,) = _fuse(fn, _inputs())
    assert count == 2
    sizes = sorted(len(n.args) for n in gm.graph.nodes if str(n.target) == FUSED)
    assert sizes == [4, 5]  # variance_size passed on where given


@pytest.mark.parametrize(
    "case",
    ["alpha", "promotes dtype", "broadcasts a row", "broadcasts a bias", "same tensor twice", "weight from sum"],
)
def test_adds_that_would_change_the_result_are_not_fused(case):
    x, r, w = _inputs()

    def fn(x, r, w):
        if case == "alpha":
            s = torch.add(x, r, alpha=2)
        elif case == "promotes dtype":
            s = x.to(torch.bfloat16) + r  # bf16 + fp32 -> fp32
        elif case == "broadcasts a row":
            s = x + r[:1]
        elif case == "broadcasts a bias":
            s = x + w
        elif case == "same tensor twice":
            s = x + x
        else:
            s = x + r
            return rms(s, s.mean(0), 1e-6)  # fusing would make a cycle
        return rms(s, w, 1e-6)

    gm, (count,) = _fuse(fn, (x, r, w))
    assert count == 0 and _targets(gm)[FUSED] == 0


@pytest.mark.parametrize("mode", ["fake", "symbolic"])
def test_norm_then_flatten_becomes_flatten_then_norm(mode):
    x3, r3, w = _inputs((2, 3, 32))
    W = torch.randn(32, 8)

    def fn(x, r, w, W):
        a = rms(x, w, 1e-6).reshape(-1, 32) @ W
        out, res = fused(x, r, w, 1e-6)
        return a, out.reshape(-1, 32) @ W, res

    gm, (count,) = _fuse(fn, (x3, r3, w, W), mode, passes=(fuse_norm_reshape,))
    assert count == 2
    for node in gm.graph.nodes:
        if str(node.target) in (RMS, FUSED):
            assert node.args[0].meta["val"].dim() == 2  # the norms now see 2-D inputs


def test_flatten_fusion_needs_every_user_to_flatten_the_last_dim():
    x3, r3, w = _inputs((2, 3, 32))

    def fn(x, r, w):
        h = rms(x, w, 1e-6)
        g = rms(r, w, 1e-6)
        return h.reshape(-1, 32), h.sum(), g.reshape(2, -1)

    _, (count,) = _fuse(fn, (x3, r3, w), passes=(fuse_norm_reshape,))
    assert count == 0


def test_a_decoder_block_fuses_add_then_flattens():
    """Hugging Face's layout: 3-D hidden states, the add written before each norm."""
    x3, r3, w = _inputs((2, 3, 32))
    W = torch.randn(32, 32) / 6

    def block(h, res, w, W):
        for _ in range(2):
            res = res + h
            n = rms(res, w, 1e-6)
            h = (n.reshape(-1, 32) @ W).reshape(2, 3, 32)
        return rms(res + h, w, 1e-6)

    _, counts = _fuse(block, (x3, r3, w, W), passes=(fuse_add_rms_norm, fuse_norm_reshape))
    assert counts == [3, 2]  # the final norm has no flatten after it


def test_compile_fusion_names_are_the_documented_ones():
    assert set(ircore.compile.FUSIONS) == {
        "qk_norm_rope",
        "hf_qk_norm_rope",
        "add_rms_norm",
        "rms_norm_reshape",
        "rms_norm_quant",
        "silu_and_mul_quant",
    }
    from ircore.compile._fusion import FUSION_PASSES

    assert list(FUSION_PASSES) == list(ircore.compile.FUSIONS)
