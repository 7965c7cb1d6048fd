"""Graphs see ``torch.ops.ircore.*``: torch.compile (Dynamo + Inductor on CPU) and make_fx."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ircore

from . import impls
from .impls import rms_norm_a


def _block(x, r, w):
    h, res = ircore.ops.fused_add_rms_norm(x, r, w, 1e-6)
    return ircore.ops.silu_and_mul(torch.cat([h, h], dim=-1)) + ircore.ops.rms_norm(res, w, 1e-6)


def _inputs():
    torch.manual_seed(0)
    return torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)


def _targets(gm: torch.fx.GraphModule) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


def test_dynamo_graph_holds_ircore_ops():
    graphs: list[torch.fx.GraphModule] = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(_block, backend=record, fullgraph=True)
    args = _inputs()
    torch.testing.assert_close(compiled(*args), _block(*args))
    targets = _targets(graphs[0])
    for name in ("fused_add_rms_norm", "silu_and_mul", "rms_norm"):
        assert f"ircore.{name}.default" in targets


@pytest.mark.slow
def test_inductor_compiles_and_runs_on_cpu():
    torch._dynamo.reset()
    compiled = torch.compile(_block, fullgraph=True)
    args = _inputs()
    torch.testing.assert_close(compiled(*args), _block(*args))


@pytest.mark.slow
def test_compiled_graph_dispatches_at_run_time():
    impls.CALLS.clear()
    ircore.ops.rms_norm.register_impl("prov_a", rms_norm_a)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6) * 2, fullgraph=True)
    x, _, w = _inputs()
    torch.testing.assert_close(compiled(x, w), ircore.ops.rms_norm.native(x, w, 1e-6) * 2)
    assert "a" in impls.CALLS


def test_make_fx_records_ircore_ops():
    gm = make_fx(_block)(*_inputs())
    targets = _targets(gm)
    assert {
        "ircore.fused_add_rms_norm.default",
        "ircore.rms_norm.default",
        "ircore.silu_and_mul.default",
    } <= targets
    torch.testing.assert_close(gm(*_inputs()), _block(*_inputs()))


def test_make_fx_fake_mode_records_ircore_ops():
    gm = make_fx(_block, tracing_mode="fake")(*_inputs())
    assert "ircore.rms_norm.default" in _targets(gm)
