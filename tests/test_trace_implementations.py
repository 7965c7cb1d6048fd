"""``trace_implementations``: tracing records the implementation a call would run, not the ircore op.

make_fx (real, fake), symbolic_trace (no values: the ircore op), Dynamo with a recording backend
(one graph, and a recompile when the switch changes), in-place implementations (copies for a
functional call, none for maybe_inplace), grad (native), the configuration key, explain and the
compile report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore._state import STATE
from ircore.errors import BatchInvariantError

from . import impls

rms_norm, fused_add_rms_norm = ircore.ops.rms_norm, ircore.ops.fused_add_rms_norm
H = 64


def _inputs():
    torch.manual_seed(0)
    return torch.randn(4, H), torch.randn(4, H), torch.randn(H)


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _norm(x, w):
    return rms_norm(x, w, 1e-6) * 2


def _mine_first():
    rms_norm.register_impl("mine", impls.rms_norm_a, supports_args=impls.only_fp32)
    ircore.set_priority(rms_norm=["mine"])


def test_make_fx_records_the_chosen_implementation_with_values_and_the_ircore_op_without():
    _mine_first()
    x, _, w = _inputs()
    assert _targets(make_fx(_norm)(x, w))[0] == "ircore.rms_norm.default"  # off
    with ircore.tracing_implementations():
        for mode in ("real", "fake"):
            assert _targets(make_fx(_norm, tracing_mode=mode)(x, w))[0] == "ircore_mine.rms_norm.default", mode
        # the predicate declines bf16: native's own ops, no ircore node at all
        bf16 = make_fx(_norm)(x.bfloat16(), w.bfloat16())
        assert not [t for t in _targets(bf16) if t.startswith("ircore")]
        # symbolic_trace has no values to choose with: the ircore op
        symbolic = torch.fx.symbolic_trace(_norm)
        assert any("rms_norm" in str(n.target) for n in symbolic.graph.nodes)
    assert STATE.tracing_implementations is False


def test_an_in_place_implementation_writes_copies_unless_the_call_donates():
    fused_add_rms_norm.register_impl("inplace", impls.fused_inplace, inplace=True)
    ircore.set_priority(fused_add_rms_norm=["inplace"])
    x, r, w = _inputs()
    with ircore.tracing_implementations():
        functional = make_fx(lambda x, r, w: fused_add_rms_norm(x, r, w, 1e-6))(x, r, w)
        donated = make_fx(lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6))(x, r, w)
    assert _targets(functional).count("aten.clone.default") == 2
    assert "ircore_inplace.fused_add_rms_norm.default" in _targets(functional)
    assert "aten.clone.default" not in _targets(donated)
    xc, rc = x.clone(), r.clone()
    out = functional(xc, rc, w)
    torch.testing.assert_close(xc, x, atol=0, rtol=0)  # the caller's inputs are left alone
    torch.testing.assert_close(out[0], fused_add_rms_norm.native(x, r, w, 1e-6)[0])


def test_a_call_that_needs_grad_traces_native():
    _mine_first()
    x, _, w = _inputs()
    w.requires_grad_(True)
    with ircore.tracing_implementations():
        targets = _targets(make_fx(_norm)(x, w))
    assert not [t for t in targets if t.startswith("ircore")]


def test_dynamo_records_the_implementation_and_recompiles_when_the_switch_changes():
    _mine_first()
    graphs: list[list[str]] = []

    def record(gm, example_inputs):
        graphs.append(_targets(gm))
        return gm.forward

    torch._dynamo.reset()
    ircore.compile.reset_report()
    compiled = torch.compile(_norm, backend=record, fullgraph=True)
    x, _, w = _inputs()
    with ircore.tracing_implementations():
        torch.testing.assert_close(compiled(x, w), _norm(x, w))
    torch.testing.assert_close(compiled(x, w), _norm(x, w))
    with ircore.tracing_implementations():
        compiled(x, w)  # the graph compiled inside the first block is found again
    assert len(graphs) == 2
    assert "ircore_mine.rms_norm.default" in graphs[0] and "ircore.rms_norm.default" not in graphs[0]
    assert "ircore.rms_norm.default" in graphs[1]
    assert {op: dict(c) for op, c in ircore.compile.report().traced.items()} == {"rms_norm": {"mine": 1}}


def test_the_configuration_key_and_explain_say_what_is_traced():
    _mine_first()
    x, _, w = _inputs()
    off = ircore.explain("rms_norm", x, w, 1e-6)
    assert off.traced == "torch.ops.ircore.rms_norm (trace_implementations is off)"
    assert "traced as" not in str(off)
    version = STATE.version
    ircore.configure(trace_implementations=True)
    on = ircore.explain("rms_norm", x, w, 1e-6)
    assert STATE.version != version  # compiled graphs guard on it
    assert on.to_dict()["traced"] == "torch.ops.ircore_mine.rms_norm.default (mine's op; trace_implementations is on)"
    assert "  traced as: torch.ops.ircore_mine.rms_norm.default" in str(on)
    assert ircore.explain("rms_norm", x.bfloat16(), w.bfloat16(), 1e-6).traced == (
        "native's own ops (trace_implementations is on)"
    )
    assert _targets(make_fx(_norm)(x, w))[0] == "ircore_mine.rms_norm.default"


def _fixed(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    """A batch-invariant variant (native's fixed-order form)."""
    return rms_norm.invariant_entry("native").call(x, weight, epsilon, variance_size).contiguous()


def test_batch_invariant_mode_traces_what_the_mode_runs():
    """In the mode, tracing records the invariant plan: an implementation's invariant_fn as the op
    ircore builds for it, native's fixed-order form, and a refusal raised at trace time (never the
    default kernels a graph would then run in the mode)."""
    rms_norm.register_impl("mine", impls.rms_norm_a, batch_invariant=True, invariant_fn=_fixed)
    ircore.set_priority(rms_norm=["mine"])
    x, _, w = _inputs()
    with ircore.tracing_implementations():
        assert _targets(make_fx(_norm)(x, w))[0] == "ircore_mine.rms_norm.default"
        with ircore.batch_invariant():
            variant = make_fx(_norm)(x, w)
            explained = ircore.explain("rms_norm", x, w, 1e-6).traced
            with ircore.priority(rms_norm=["native"]):
                native_form = _targets(make_fx(_norm)(x, w))
            with pytest.raises(BatchInvariantError, match="per_token=False"):
                make_fx(lambda x: ircore.ops.dynamic_quant_fp8(x, False, torch.float8_e4m3fn))(x)
    assert _targets(variant)[0] == "ircore_mine.rms_norm_batch_invariant.default"
    graphs: list[list[str]] = []

    def record(gm, example_inputs):
        graphs.append(_targets(gm))
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(_norm, backend=record, fullgraph=True)
    with ircore.tracing_implementations():
        with ircore.batch_invariant():  # Dynamo: the block is read for real at trace time
            compiled(x, w)
        compiled(x, w)  # outside the block: traced again (it guards on the open blocks' count)
        with ircore.batch_invariant():
            compiled(x, w)  # the first graph, found again
    assert len(graphs) == 2, graphs
    assert "ircore_mine.rms_norm_batch_invariant.default" in graphs[0]
    assert "ircore_mine.rms_norm.default" in graphs[1]
    assert explained.startswith("torch.ops.ircore_mine.rms_norm_batch_invariant.default (mine's batch-invariant")
    assert torch.equal(variant(x, w), _fixed(x, w, 1e-6) * 2)
    # the trace ignores priority blocks (the process-wide priority, as compiled graphs), so
    # native only through the configuration: its fixed-order form has no mean kernel
    ircore.set_priority(rms_norm=["native"])
    with ircore.tracing_implementations():
        default = _targets(make_fx(_norm)(x, w))
        with ircore.batch_invariant():
            fixed = _targets(make_fx(_norm)(x, w))
    assert native_form[0] == "ircore_mine.rms_norm_batch_invariant.default"
    assert "aten.mean.dim" in default and "aten.mean.dim" not in fixed


_FIRST_CALL_IS_A_TRACE = """
import json, torch, ircore
from ircore import cli
from torch.fx.experimental.proxy_tensor import make_fx
x, w = torch.randn(4, 64), torch.randn(64)
g = make_fx(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6), tracing_mode="fake")(x, w)
print(json.dumps([str(n.target) for n in g.graph.nodes if n.op == "call_function"]))
cli.main(["doctor", "--json"])
"""


def test_the_environment_variable_is_read_and_doctor_says_so():
    """Read even where a trace is the process's first ircore call (the loader applies the
    environment): native's own ops, no ircore node; doctor reports it."""
    env = {**os.environ, "IRCORE_TRACE_IMPLEMENTATIONS": "1", "IRCORE_PROVIDERS": "none"}
    run = subprocess.run([sys.executable, "-c", _FIRST_CALL_IS_A_TRACE], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    targets, doctor = run.stdout.split("\n", 1)
    assert "aten.rsqrt.default" in json.loads(targets) and "ircore" not in targets, targets
    assert json.loads(doctor)["trace_implementations"] is True
