"""``op.maybe_inplace`` under every tracer: which node it records, and that it returns what the eager
call returns (issue 29, items 1-3). No Inductor compile here (Dynamo with a recording backend)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore.ops import fused_add_rms_norm

from . import impls

OVERLOAD = "maybe_inplace"


def _declare_ops():
    @ircore.register_op(inplace_args=("x",))
    def mm_op(x: Tensor, w: Tensor) -> Tensor:
        return x @ w

    @ircore.register_op(inplace_args=("x",))
    def scale_to_f32(x: Tensor, w: Tensor) -> Tensor:
        return (x * w).float()

    return mm_op, scale_to_f32


def _dynamo(fn, *args, fullgraph=True):
    graphs: list[torch.fx.GraphModule] = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, backend=record, fullgraph=fullgraph)(*args)
    torch._dynamo.reset()
    return out, [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]


def _make_fx(mode):
    def trace(fn, *args):  # (tracing with real tensors runs the calls: on copies)
        gm = make_fx(fn, tracing_mode=mode)(*[a.clone() if isinstance(a, Tensor) else a for a in args])
        return gm(*args), [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]

    return trace


TRACERS = {
    "make_fx real": _make_fx("real"),
    "make_fx fake": _make_fx("fake"),
    "make_fx symbolic": _make_fx("symbolic"),
    "dynamo": _dynamo,
}


@pytest.mark.parametrize("tracer", list(TRACERS))
def test_every_tracer_records_the_overload_for_results_that_fit(tracer):
    fused_add_rms_norm.register_impl("inplace", impls.fused_inplace, inplace=True)
    torch.manual_seed(0)
    x, r, w = torch.randn(4, 16), torch.randn(4, 16), torch.randn(16)
    expected = fused_add_rms_norm(x, r, w, 1e-6)
    (out, res), targets = TRACERS[tracer](
        lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6), x.clone(), r.clone(), w
    )
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(res, expected[1])
    assert "ircore.fused_add_rms_norm.maybe_inplace" in targets
    # Dynamo's graph also holds the functional node that told it the results fit; nothing uses
    # it (the ircore backend removes it, Inductor would drop it)
    assert targets.count("ircore.fused_add_rms_norm.default") == (1 if tracer == "dynamo" else 0)


@pytest.mark.parametrize("tracer", list(TRACERS))
@pytest.mark.parametrize("case", ["shape", "dtype"])
def test_results_that_do_not_fit_trace_as_the_functional_op(tracer, case):
    mm_op, scale_to_f32 = _declare_ops()
    if case == "shape":  # (2, 3) @ (3, 4) -> (2, 4): cannot be written into x
        op, x, w = mm_op, torch.randn(2, 3), torch.randn(3, 4)
    else:  # fp16 in, fp32 out
        op, x, w = scale_to_f32, torch.randn(2, 3, dtype=torch.float16), torch.randn(3, dtype=torch.float16)
    eager = op.maybe_inplace(x.clone(), w)
    out, targets = TRACERS[tracer](lambda x, w: op.maybe_inplace(x, w), x.clone(), w)
    assert (out.shape, out.dtype) == (eager.shape, eager.dtype)
    torch.testing.assert_close(out, eager)
    assert f"ircore.{op.name}.default" in targets
    assert f"ircore.{op.name}.maybe_inplace" not in targets


def test_symbolic_trace_knows_no_shapes_and_the_node_refuses_a_result_that_does_not_fit():
    mm_op, _ = _declare_ops()
    gm = torch.fx.symbolic_trace(lambda x, w: mm_op.maybe_inplace(x, w))
    assert [str(n.target) for n in gm.graph.nodes if n.op == "call_function"] == ["ircore.mm_op.maybe_inplace"]
    with pytest.raises(ircore.InvalidArgumentError) as err:
        gm(torch.randn(2, 3), torch.randn(3, 4))
    assert str(err.value).startswith(
        "torch.ops.ircore.mm_op.maybe_inplace: its result 0 ((2, 4) float32 on cpu) does not fit argument 'x' "
        "((2, 3) float32 on cpu) it would be written into; call the functional op (ircore.ops.mm_op(...))"
    )
    # a square w fits: the node writes into x
    x, w = torch.randn(2, 3), torch.randn(3, 3)
    expected = x @ w
    torch.testing.assert_close(gm(x, w), expected)
    torch.testing.assert_close(x, expected)


def test_the_overload_called_directly_refuses_a_result_that_does_not_fit_under_fake_tensors():
    _declare_ops()
    with pytest.raises(ircore.InvalidArgumentError, match="does not fit argument 'x'"):
        make_fx(lambda x, w: torch.ops.ircore.mm_op.maybe_inplace(x, w), tracing_mode="fake")(
            torch.randn(2, 3), torch.randn(3, 4)
        )


@pytest.mark.parametrize("tracer", list(TRACERS))
@pytest.mark.parametrize("grad", [True, False])
def test_a_call_that_needs_grad_traces_native(tracer, grad):
    fused_add_rms_norm.register_impl("inplace", impls.fused_inplace, inplace=True)
    ircore.set_priority(fused_add_rms_norm=["inplace"])
    torch.manual_seed(0)
    x, r = torch.randn(4, 16), torch.randn(4, 16)
    w = torch.randn(16, requires_grad=True)
    with torch.set_grad_enabled(grad):
        eager = fused_add_rms_norm.maybe_inplace(x.clone(), r.clone(), w, 1e-6)
        if tracer == "dynamo":  # one graph, grad or not (the argument check traces under Dynamo)
            (out, _), targets = _dynamo(
                lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6), x.clone(), r.clone(), w,
                fullgraph=True,
            )
            assert (out.grad_fn is not None) == (eager[0].grad_fn is not None) == grad
        else:
            (out, _), targets = TRACERS[tracer](
                lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6), x.clone(), r.clone(), w
            )
            torch.testing.assert_close(out, eager[0])
    recorded = [t for t in targets if t.startswith("ircore.")]
    assert recorded == ([] if grad else ["ircore.fused_add_rms_norm.maybe_inplace"]) or (
        tracer == "dynamo" and not grad and "ircore.fused_add_rms_norm.maybe_inplace" in recorded
    )
    torch.testing.assert_close(eager[0], fused_add_rms_norm(x, r, w, 1e-6)[0])


def test_fake_tensor_mode_records_the_overload_like_real_tensors():
    """Item 3: one rule for every tracer (fake tensors took the functional op before)."""
    args = torch.randn(4, 16), torch.randn(4, 16), torch.randn(16)
    graphs = {
        mode: [str(n.target) for n in make_fx(lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6),
                                              tracing_mode=mode)(*args).graph.nodes if n.op == "call_function"]
        for mode in ("real", "fake", "symbolic")
    }
    assert graphs["real"] == graphs["fake"] == ["ircore.fused_add_rms_norm.maybe_inplace"]
    assert "ircore.fused_add_rms_norm.maybe_inplace" in graphs["symbolic"]
