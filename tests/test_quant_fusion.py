"""Norm + fp8 quant and activation + fp8 quant fusions (IR -> IR, before lowering).

The pass functions run on graphs traced by make_fx (cheap, every case); one real compile with the
ircore backend checks the counts, the lowering and the results on a graph shaped like an fp8
decoder layer (add + norm -> group quant -> block matmul -> silu_and_mul -> static quant).
"""

from __future__ import annotations

import operator

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore.compile._quant_fusion import fuse_activation_quant, fuse_norm_quant
from ircore.ops import (
    block_scaled_mm_fp8,
    dynamic_group_quant_fp8,
    dynamic_quant_fp8,
    fused_add_rms_norm,
    rms_norm,
    silu_and_mul,
    static_quant_fp8,
)
from ircore.ops._scaled_mm import quantize_blocks
from ircore.testing import compiled_code

E4M3 = torch.float8_e4m3fn
H = 256


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [
        n.target.__name__.split(".")[0]
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is not operator.getitem
    ]


def _fused(fn, *args, fuse=fuse_norm_quant):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    count = fuse(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm, count


def _same(gm, fn, args):
    got, want = gm(*args), fn(*args)
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        assert torch.equal(g.float(), w.float())  # the fused natives compose the unfused ones


@pytest.fixture
def xs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, H, generator=g)
    return x, torch.randn(5, H, generator=g), torch.rand(H, generator=g) + 0.5


@pytest.mark.parametrize("eps", [1e-6, 3e-4])  # any epsilon
def test_each_quant_kind_after_rms_norm_fuses(xs, eps):
    x, _, w = xs
    scale = torch.tensor([0.01])
    cases = {
        "rms_norm_static_fp8_quant": lambda x, w, s: static_quant_fp8(rms_norm(x, w, eps), s, E4M3),
        "rms_norm_dynamic_quant_fp8": lambda x, w, s: dynamic_quant_fp8(rms_norm(x, w, eps), True, E4M3),
        "rms_norm_group_quant_fp8": lambda x, w, s: dynamic_group_quant_fp8(
            rms_norm(x, w, eps), [1, 128], False, False, E4M3
        ),
    }
    for name, fn in cases.items():
        gm, count = _fused(fn, x, w, scale)
        assert count == 1 and name in _targets(gm) and "rms_norm" not in _targets(gm), name
        _same(gm, fn, (x, w, scale))


def test_the_fused_add_variants_keep_the_residual_for_its_other_readers(xs):
    x, r, w = xs

    def layer(x, r, w):
        out, res = fused_add_rms_norm(x, r, w, 1e-5)
        q, s = dynamic_group_quant_fp8(out, [1, 128], True, False, E4M3)
        return q, s, res * 2  # the residual stream goes on

    gm, count = _fused(layer, x, r, w)
    assert count == 1 and _targets(gm).count("fused_add_rms_norm_group_quant_fp8") == 1
    assert "fused_add_rms_norm" not in _targets(gm)
    _same(gm, layer, (x, r, w))

    def static_layer(x, r, w, scale):
        out, res = fused_add_rms_norm(x, r, w, 1e-5)
        return static_quant_fp8(out, scale, E4M3), res

    scale = torch.tensor([0.02])
    gm, count = _fused(static_layer, x, r, w, scale)
    assert count == 1 and "fused_add_rms_norm_static_fp8_quant" in _targets(gm)
    _same(gm, static_layer, (x, r, w, scale))


def test_no_fusion_where_the_unquantized_value_has_another_reader_or_variance_size(xs):
    x, r, w = xs

    scale = torch.tensor([0.01])

    def read_twice(x, w, s):
        y = rms_norm(x, w, 1e-6)
        return static_quant_fp8(y, s, E4M3), y + 1

    def partial(x, w, s):
        return static_quant_fp8(rms_norm(x, w, 1e-6, 128), s, E4M3)

    def out_read_twice(x, r, w):
        out, res = fused_add_rms_norm(x, r, w, 1e-5)
        return dynamic_quant_fp8(out, True, E4M3), out.sum(), res

    for fn, args in ((read_twice, (x, w, scale)), (partial, (x, w, scale)), (out_read_twice, (x, r, w))):
        assert _fused(fn, *args)[1] == 0, fn.__name__


def test_identical_quants_of_one_norm_output_fuse_once(xs):
    """A Hugging Face FP8 model quantizes the norm's output once per projection (q, k, v): one
    fused op serves them all. Different quant arguments are another reader: no fusion."""
    x, _, w = xs

    def three(x, w):
        n = rms_norm(x, w, 1e-6)
        outs = [dynamic_group_quant_fp8(n, [1, 128], False, False, E4M3) for _ in range(3)]
        return [t for q, s in outs for t in (q.float() * 2, s)]

    gm, count = _fused(three, x, w)
    assert count == 1 and _targets(gm).count("rms_norm_group_quant_fp8") == 1
    assert "dynamic_group_quant_fp8" not in _targets(gm)
    _same(gm, three, (x, w))

    def two_kinds(x, w):
        n = rms_norm(x, w, 1e-6)
        return dynamic_group_quant_fp8(n, [1, 128], False, False, E4M3), dynamic_quant_fp8(n, True, E4M3)

    assert _fused(two_kinds, x, w)[1] == 0


def test_silu_and_mul_then_static_or_group_quant_fuses_and_per_token_does_not(xs):
    x = torch.cat(xs[:2], dim=1)  # [gate | up]

    scale = torch.tensor([0.05])

    def static(x, s):
        return static_quant_fp8(silu_and_mul(x), s, E4M3)

    def group(x, s):
        return dynamic_group_quant_fp8(silu_and_mul(x), [1, 128], False, True, E4M3)

    def per_token(x, s):  # no fused op for it
        return dynamic_quant_fp8(silu_and_mul(x), True, E4M3)

    for fn, made in ((static, "silu_and_mul_static_quant_fp8"), (group, "silu_and_mul_group_quant_fp8")):
        gm, count = _fused(fn, x, scale, fuse=fuse_activation_quant)
        assert count == 1 and made in _targets(gm)
        _same(gm, fn, (x, scale))
    assert _fused(per_token, x, scale, fuse=fuse_activation_quant)[1] == 0


@pytest.mark.slow
def test_an_fp8_decoder_layer_compiles_with_every_fusion_counted():
    g = torch.Generator().manual_seed(0)
    h, res = torch.randn(2, 3, H, generator=g), torch.randn(2, 3, H, generator=g)
    w = torch.rand(H, generator=g) + 0.5
    up, up_s = quantize_blocks(torch.randn(2 * 384, H, generator=g) * 0.05)
    down, down_s = quantize_blocks(torch.randn(H, 384, generator=g) * 0.05)

    def layer(h, res, w):
        res = res + h
        n = rms_norm(res, w, 3e-5).reshape(-1, H)  # 3-D, flattened for the projection
        q, s = dynamic_group_quant_fp8(n, [1, 128], False, False, E4M3)
        gate_up = block_scaled_mm_fp8(q, up, s, up_s, [128, 128], torch.float32)
        q2, s2 = dynamic_group_quant_fp8(silu_and_mul(gate_up), [1, 128], False, False, E4M3)
        return block_scaled_mm_fp8(q2, down, s2, down_s, [128, 128], torch.float32), res

    ircore.compile.reset_report()
    (out, new_res), _ = compiled_code(layer, (h, res, w))
    want, want_res = layer(h, res, w)
    torch.testing.assert_close(new_res, want_res)
    torch.testing.assert_close(out, want, atol=2e-2, rtol=1.6e-2)
    report = ircore.compile.report()
    assert report.fusions["add_rms_norm"] == 1
    assert report.fusions["rms_norm_quant"] == 1
    assert report.fusions["silu_and_mul_quant"] == 1
    lowered = set(report.lowered)
    assert {"fused_add_rms_norm_group_quant_fp8", "silu_and_mul_group_quant_fp8"} <= lowered
    assert not lowered & {"rms_norm", "fused_add_rms_norm", "dynamic_group_quant_fp8", "silu_and_mul"}
