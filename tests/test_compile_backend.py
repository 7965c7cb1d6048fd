"""``backend="ircore"`` end to end on the CPU: fusion counts, lowering choices, copies, recompiles.

Real Inductor compiles (a few seconds each on two cores): every test compiles one or two small
graphs, all share the Inductor cache directory set in conftest.py. Tests that count what the
passes did turn the FX graph cache off (a cache hit runs no pass).
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code

import ircore
from ircore.ops import fused_add_rms_norm, rms_norm
from ircore.testing import copied_buffers

from . import impls

H = 32


@pytest.fixture(autouse=True)
def fresh_compile_state():
    torch._dynamo.reset()
    ircore.compile.reset_report()
    impls.CALLS.clear()
    with inductor_config.patch(fx_graph_cache=False):
        yield
    torch._dynamo.reset()


def decoder(h, res, w, W, layers=2):
    """Hugging Face's layout: 3-D hidden states, the residual add written before each norm."""
    for _ in range(layers):
        res = res + h
        n = ircore.ops.rms_norm(res, w, 1e-6)
        h = torch.nn.functional.linear(n, W)
    return ircore.ops.rms_norm(res + h, w, 1e-5)


def _inputs(dtype=torch.float32, batch=2, tokens=3):
    torch.manual_seed(0)
    h = torch.randn(batch, tokens, H, dtype=dtype)
    res = torch.randn(batch, tokens, H, dtype=dtype)
    w = torch.randn(H, dtype=dtype) * 0.1 + 1
    W = (torch.randn(H, H) / H**0.5).to(dtype)
    return h, res, w, W


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.slow
def test_decoder_fuses_every_add_and_leaves_no_ircore_node(dynamic):
    args = _inputs()
    compiled = torch.compile(decoder, backend="ircore", dynamic=dynamic, fullgraph=True)
    torch.testing.assert_close(compiled(*args), decoder(*args), atol=1e-5, rtol=1e-5)
    report = ircore.compile.report()
    assert report.fusions["add_rms_norm"] == 3  # 2 layers + the final norm
    assert report.fusions["rms_norm_reshape"] == 2
    assert report.left == 0
    assert dict(report.lowered["fused_add_rms_norm"]) == {"native": 3}
    if dynamic:  # another number of tokens reuses the dynamic graph
        more = _inputs(tokens=5)
        torch.testing.assert_close(compiled(*more), decoder(*more), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_fusions_can_be_switched_off_per_compile():
    args = _inputs()
    compiled = ircore.compile(decoder, fusions={"add_rms_norm": False}, fullgraph=True)
    torch.testing.assert_close(compiled(*args), decoder(*args), atol=1e-5, rtol=1e-5)
    report = ircore.compile.report()
    assert report.fusions["add_rms_norm"] == 0
    assert dict(report.lowered) == {"rms_norm": {"native": 3}}


@pytest.mark.slow
def test_lowering_picks_what_explain_picks():
    rms_norm.register_impl("opaque", impls.rms_norm_opaque, supports_args=impls.only_fp32)

    def f(x, w):
        return ircore.ops.rms_norm(x, w, 1e-6) * 2

    for dtype, expected in ((torch.float32, "opaque"), (torch.bfloat16, "native")):
        torch._dynamo.reset()
        impls.CALLS.clear()
        x, w = torch.randn(4, H, dtype=dtype), torch.randn(H, dtype=dtype)
        assert ircore.explain("rms_norm", x, w, 1e-6).chosen == expected
        out = torch.compile(f, backend="ircore", fullgraph=True)(x, w)
        torch.testing.assert_close(out, f(x, w))
        assert list(ircore.compile.report().last_lowering.values()) == [expected]
        # the opaque kernel runs only where it was chosen (a rejection lowers to native)
        assert ("opaque" in impls.CALLS) == (expected == "opaque")


def test_leave_to_inductor_lowers_small_calls_to_native_and_large_ones_to_the_provider():
    rms_norm.register_impl("opaque", impls.rms_norm_opaque)
    ircore.set_priority(rms_norm=["opaque"])

    def f(x_small, x_large, w):
        return ircore.ops.rms_norm(x_small, w, 1e-6).sum() + ircore.ops.rms_norm(x_large, w, 1e-6).sum()

    small, large, w = torch.randn(2, H), torch.randn(64, H), torch.randn(H)
    expected = f(small, large, w)
    impls.CALLS.clear()
    compiled = ircore.compile(f, leave_to_inductor={"rms_norm": 2 * H}, fullgraph=True)
    torch.testing.assert_close(compiled(small, large, w), expected)
    # at most 2 * H elements: native (traced for Inductor), whatever the priority; above: opaque
    assert sorted(ircore.compile.report().last_lowering.values()) == ["native", "opaque"]
    assert impls.CALLS == ["opaque"]  # the large call only
    # dynamic shapes: no size is known, so nothing is left to Inductor (and nothing guarded on it)
    torch._dynamo.reset()
    dynamic = ircore.compile(f, leave_to_inductor={"rms_norm": 2 * H}, fullgraph=True, dynamic=True)
    torch.testing.assert_close(dynamic(small, large, w), expected)
    assert sorted(ircore.compile.report().last_lowering.values()) == ["opaque", "opaque"]


@pytest.mark.slow
def test_inplace_provider_copies_only_graph_inputs():
    fused_add_rms_norm.register_impl("opaque", impls.fused_inplace_opaque, inplace=True)
    ircore.set_priority(fused_add_rms_norm=["opaque"])
    args = _inputs()
    originals = [a.clone() for a in args]
    out, (code,) = run_and_get_code(torch.compile(lambda *a: decoder(*a, layers=3), backend="ircore"), *args)
    torch.testing.assert_close(out, decoder(*originals, layers=3), atol=1e-5, rtol=1e-5)
    for a, o in zip(args, originals):
        torch.testing.assert_close(a, o, atol=0, rtol=0)  # the functional call mutated no input
    assert dict(ircore.compile.report().lowered["fused_add_rms_norm"]) == {"opaque": 4}
    # each call is one node of the op the core built for the in-place implementation (its kernel
    # calls the provider's function, which calls its own op, at run time)
    assert code.count("torch.ops.ircore_opaque.fused_add_rms_norm.default(") == 4
    assert "ircore_test.fused_add_rms_norm_" not in code
    # The first layer writes into the graph inputs h and res: one copy of each (Inductor puts both
    # in one clone kernel). Later layers write into dead intermediates: no copies.
    assert copied_buffers(code) == 2, code


@pytest.mark.slow
def test_maybe_inplace_writes_into_donated_inputs_without_copies():
    fused_add_rms_norm.register_impl("opaque", impls.fused_inplace_opaque, inplace=True)
    ircore.set_priority(fused_add_rms_norm=["opaque"])

    def f(x, r, w):
        out, res = ircore.ops.fused_add_rms_norm.maybe_inplace(x * 2, r, w, 1e-6)
        return out + 1, res

    x, r, w = torch.randn(4, H), torch.randn(4, H), torch.randn(H)
    expected = fused_add_rms_norm(x * 2, r, w, 1e-6)
    (out, _), (code,) = run_and_get_code(torch.compile(f, backend="ircore", fullgraph=True), x, r, w)
    torch.testing.assert_close(out, expected[0] + 1)
    torch.testing.assert_close(r, expected[1])  # maybe_inplace's node writes the residual into r
    assert ircore.compile.report().left == 0
    assert copied_buffers(code) == 0, code


@pytest.mark.slow
def test_priority_change_recompiles_and_lowers_again():
    rms_norm.register_impl("opaque", impls.rms_norm_opaque)
    ircore.set_priority(rms_norm=["opaque"])
    counters.clear()
    f = torch.compile(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6) + 1, backend="ircore", fullgraph=True)
    x, w = torch.randn(4, H), torch.randn(H)
    f(x, w)
    f(x, w)
    assert impls.CALLS == ["opaque", "opaque"]
    assert counters["stats"]["unique_graphs"] == 1
    ircore.set_priority(rms_norm=["native"])
    impls.CALLS.clear()
    torch.testing.assert_close(f(x, w), rms_norm.native(x, w, 1e-6) + 1)
    assert impls.CALLS == []
    assert counters["stats"]["unique_graphs"] == 2
    assert list(ircore.compile.report().last_lowering.values()) == ["native"]
    ircore.set_priority(rms_norm=["opaque"])  # back: the graph compiled first serves again
    impls.CALLS.clear()
    f(x, w)
    assert impls.CALLS == ["opaque"]
    assert counters["stats"]["unique_graphs"] == 2


@pytest.mark.slow
def test_a_priority_scope_runs_the_graph_uncompiled(caplog):
    rms_norm.register_impl("opaque", impls.rms_norm_opaque)
    ircore.set_priority(rms_norm=["opaque"])
    f = torch.compile(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6) + 1, backend="ircore", fullgraph=True)
    x, w = torch.randn(4, H), torch.randn(H)
    f(x, w)
    impls.CALLS.clear()
    with caplog.at_level(logging.WARNING, logger="ircore"), ircore.priority(rms_norm=["native"]):
        torch.testing.assert_close(f(x, w), rms_norm.native(x, w, 1e-6) + 1)
    assert impls.CALLS == []  # the scope's choice, not the lowered kernel
    assert "runs uncompiled: an ircore.priority() scope changes an op of this graph" in caplog.text
    with ircore.priority(rms_norm=["opaque"]):  # a scope that changes nothing keeps the graph
        f(x, w)
    f(x, w)
    assert impls.CALLS == ["opaque", "opaque"]


@pytest.mark.slow
def test_a_wildcard_priority_reaches_compiled_graphs(caplog):
    """``*`` counts as naming the graph's ops: a block that sets it runs the graph uncompiled, a
    process-wide change recompiles."""
    rms_norm.register_impl("opaque", impls.rms_norm_opaque)
    ircore.set_priority(**{"*": ["opaque"]})
    f = torch.compile(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6) + 1, backend="ircore", fullgraph=True)
    x, w = torch.randn(4, H), torch.randn(H)
    f(x, w)
    assert impls.CALLS == ["opaque"]
    impls.CALLS.clear()
    with caplog.at_level(logging.WARNING, logger="ircore"), ircore.priority(**{"*": ["native"]}):
        torch.testing.assert_close(f(x, w), rms_norm.native(x, w, 1e-6) + 1)
    assert impls.CALLS == []
    assert "runs uncompiled: an ircore.priority() scope changes an op of this graph" in caplog.text
    ircore.set_priority(**{"*": ["native"]})
    torch.testing.assert_close(f(x, w), rms_norm.native(x, w, 1e-6) + 1)
    assert impls.CALLS == []
    assert list(ircore.compile.report().last_lowering.values()) == ["native"]


@pytest.mark.slow
def test_direct_torch_op_calls_never_keep_a_stale_choice(caplog):
    rms_norm.register_impl("opaque", impls.rms_norm_opaque)
    ircore.set_priority(rms_norm=["opaque"])
    # torch.ops.ircore.* directly: Dynamo has no guard on ircore's configuration here
    f = torch.compile(lambda x, w: torch.ops.ircore.rms_norm(x, w, 1e-6) + 1, backend="ircore")
    x, w = torch.randn(4, H), torch.randn(H)
    f(x, w)
    ircore.set_priority(rms_norm=["native"])
    impls.CALLS.clear()
    with caplog.at_level(logging.WARNING, logger="ircore"):
        torch.testing.assert_close(f(x, w), rms_norm.native(x, w, 1e-6) + 1)
    assert impls.CALLS == []
    assert "configuration changed after this graph was compiled" in caplog.text


class _CountingPass(torch._inductor.custom_graph_pass.CustomGraphPass):
    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, graph):
        self.seen += [str(n.target) for n in graph.nodes if n.op == "call_function"]

    def uuid(self):
        return "counting-pass"


@pytest.mark.parametrize("how", ["options", "inductor config"])
@pytest.mark.slow
def test_a_users_post_grad_pass_still_runs(how):
    user_pass = _CountingPass()
    f = lambda x, w: ircore.ops.rms_norm(x, w, 1e-6) * 2  # noqa: E731
    x, w = torch.randn(4, H), torch.randn(H)
    if how == "options":
        compiled = torch.compile(f, backend="ircore", options={"post_grad_custom_post_pass": user_pass})
        out = compiled(x, w)
    else:
        with inductor_config.patch(post_grad_custom_post_pass=user_pass):
            out = torch.compile(f, backend="ircore")(x, w)
    torch.testing.assert_close(out, f(x, w))
    assert "ircore.rms_norm.default" in user_pass.seen  # it ran first, on the ircore ops
    assert ircore.compile.report().left == 0  # and ircore's lowering still ran


@pytest.mark.slow
def test_mode_and_options_reach_inductor():
    x, w = torch.randn(4, H), torch.randn(H)
    f = lambda x, w: ircore.ops.rms_norm(x, w, 1e-6) * 2  # noqa: E731
    torch.testing.assert_close(torch.compile(f, backend="ircore", mode="reduce-overhead")(x, w), f(x, w))
    torch._dynamo.reset()
    with pytest.raises(Exception, match="no_such_inductor_option"):
        torch.compile(f, backend="ircore", options={"no_such_inductor_option": 1})(x, w)


def test_ircore_compile_refuses_another_backend_and_bad_fusions():
    with pytest.raises(TypeError, match="always uses the ircore backend"):
        ircore.compile(decoder, backend="inductor")
    with pytest.raises(ircore.ConfigError, match="unknown fusion 'add_norm'; fusions: qk_norm_rope, hf_qk_norm_rope, add_rms_norm"):
        ircore.compile(decoder, fusions=["add_norm"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CUDA graphs)")
@pytest.mark.slow
@pytest.mark.gpu
def test_reduce_overhead_with_cuda_graphs():
    args = [a.cuda() for a in _inputs(torch.bfloat16)]
    compiled = torch.compile(decoder, backend="ircore", mode="reduce-overhead", fullgraph=True)
    for _ in range(3):  # warm-up, record, replay
        out = compiled(*args)
    torch.testing.assert_close(out, decoder(*args), atol=2e-2, rtol=2e-2)
    assert ircore.compile.report().left == 0


@pytest.mark.slow
def test_a_call_needing_grad_is_traced_as_native():
    """As in eager calls: the torch op has no autograd formula, native does (and is differentiable)."""
    rms_norm.register_impl("opaque", impls.rms_norm_opaque)
    ircore.set_priority(rms_norm=["opaque"])
    x, w = torch.randn(4, H, requires_grad=True), torch.randn(H)
    torch.compile(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6).square().sum(), backend="ircore")(x, w).backward()
    expected = x.detach().clone().requires_grad_()
    rms_norm.native(expected, w, 1e-6).square().sum().backward()
    torch.testing.assert_close(x.grad, expected.grad)
    assert impls.CALLS == []


# ---------------------------------------------------------------------- donated buffers (issue 29)
def _opaque_inplace_first():
    fused_add_rms_norm.register_impl("opaque", impls.fused_inplace_opaque, inplace=True)
    ircore.set_priority(fused_add_rms_norm=["opaque"])


def test_a_read_of_a_donated_tensor_after_maybe_inplace_is_refused():
    def reuse(x, r, w):
        h = x * 2
        out, res = fused_add_rms_norm.maybe_inplace(h, r, w, 1e-6)
        return out + h, res

    x, r, w = torch.randn(4, H), torch.randn(4, H), torch.randn(H)
    with pytest.raises(Exception, match="DonatedInputError") as err:
        torch.compile(reuse, backend="ircore", fullgraph=True)(x, r, w)
    # Dynamo wraps what a backend raises (docs/compiling.md says so): the error is its inner_exception
    assert isinstance(err.value, torch._dynamo.exc.BackendCompilerFailed)
    assert isinstance(err.value.inner_exception, ircore.DonatedInputError)
    message = str(err.value)
    assert "ircore.ops.fused_add_rms_norm.maybe_inplace (node 'fused_add_rms_norm_maybe_inplace' at File" in message
    assert "donates its argument 'x' (h): it writes the results into it. The code then reads it (node 'add' at" in message
    assert "in reuse: return out + h" in message
    assert "Use the tensors maybe_inplace returns, or call the functional op" in message


@pytest.mark.slow
def test_a_chain_of_maybe_inplace_calls_on_one_buffer_copies_nothing():
    _opaque_inplace_first()

    def chain(x, r, w):
        out, res = fused_add_rms_norm.maybe_inplace(x * 2, r, w, 1e-6)
        out, res = fused_add_rms_norm.maybe_inplace(out, res, w, 1e-5)
        return out + 1, res

    x, r, w = torch.randn(4, H), torch.randn(4, H), torch.randn(H)
    first = fused_add_rms_norm(x * 2, r, w, 1e-6)
    expected = fused_add_rms_norm(*first, w, 1e-5)
    (out, res), (code,) = run_and_get_code(torch.compile(chain, backend="ircore", fullgraph=True), x, r, w)
    torch.testing.assert_close(out, expected[0] + 1)
    torch.testing.assert_close(res, expected[1])
    report = ircore.compile.report()
    assert report.donations == 2
    assert dict(report.lowered["fused_add_rms_norm"]) == {"opaque": 2}
    assert copied_buffers(code) == 0, code


def _clone_cases(x, r, w, W, case):
    h = torch.nn.functional.linear(x, W)  # an intermediate (extern mm): a copy of it is a copy kernel
    if case == "unread source":
        out, res = fused_add_rms_norm.maybe_inplace(h.clone(), r * 2, w, 1e-6)
        return out, res
    if case == "source read later":
        out, res = fused_add_rms_norm.maybe_inplace(h.clone(), r * 2, w, 1e-6)
        return out + h, res
    # the caller's own tensors: the kernel writes into copies of them
    out, res = fused_add_rms_norm.maybe_inplace(x.clone(), r.clone(), w, 1e-6)
    return out, res


@pytest.mark.parametrize(("case", "copies"), [("unread source", 0), ("source read later", 1), ("graph inputs", 2)])
@pytest.mark.slow
def test_clones_cost_a_copy_only_where_the_source_is_read_later_or_the_callers(case, copies):
    """The clone before an in-place call: gone where nothing reads its source afterwards, kept
    (a copy) where something does, or where the source is a graph input (x and r: two copies)."""
    _opaque_inplace_first()
    torch.manual_seed(0)
    x, r, w, W = torch.randn(4, H), torch.randn(4, H), torch.randn(H), torch.randn(H, H)
    originals = [t.clone() for t in (x, r, w, W)]
    expected = _clone_cases(*originals, case)
    compiled = torch.compile(lambda *a: _clone_cases(*a, case), backend="ircore", fullgraph=True)
    out, (code,) = run_and_get_code(compiled, x, r, w, W)
    torch.testing.assert_close(out, expected)
    for now, before in zip((x, r, w, W), originals):
        torch.testing.assert_close(now, before, atol=0, rtol=0)  # the caller's tensors are unchanged
    assert ircore.compile.report().lowered["fused_add_rms_norm"] == {"opaque": 1}
    assert copied_buffers(code) == copies, code


@pytest.mark.slow
def test_maybe_inplace_needing_grad_compiles_to_native_with_a_grad_fn():
    _opaque_inplace_first()
    x, r = torch.randn(4, H), torch.randn(4, H)
    w = torch.randn(H, requires_grad=True)
    f = lambda x, r, w: fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)  # noqa: E731
    eager = f(x.clone(), r.clone(), w)
    out = torch.compile(f, backend="ircore")(x.clone(), r.clone(), w)
    assert eager[0].grad_fn is not None and out[0].grad_fn is not None
    torch.testing.assert_close(out, eager)
    out[0].sum().backward()
    assert w.grad is not None
    assert impls.CALLS == []  # native, not the provider's kernel


_CPP_KERNEL = """
cpp_fused_fused_add_rms_norm_0 = async_compile.cpp_pybinding(['const float*', 'float*', 'float*'], r'''
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0, float* out_ptr1)
{
    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(192L); x0+=static_cast<int64_t>(8L))
    {
        auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0 + static_cast<int64_t>(x0), static_cast<int64_t>(8));
        tmp0.store(out_ptr0 + static_cast<int64_t>(x0));
        auto tmp1 = tmp0 * tmp0;
        tmp1.store(out_ptr1 + static_cast<int64_t>(x0));
    }
    for(int64_t x0=static_cast<int64_t>(192L); x0<static_cast<int64_t>(195L); x0+=static_cast<int64_t>(1L))
    {
        auto tmp0 = in_ptr0[static_cast<int64_t>(x0)];
        out_ptr0[static_cast<int64_t>(x0)] = tmp0;
    }
}
''')
"""
_TRITON_KERNEL = """
triton_poi_fused_clone_1 = async_compile.triton('triton_poi_fused_clone_1', '''
@triton.jit
def triton_poi_fused_clone_1(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask)
    tl.store(out_ptr0 + (x0), tmp0, xmask)
''', device_str='cuda')
"""


def test_copied_buffers_counts_each_unchanged_copy_once_wherever_inductor_put_it():
    # a copy inside the kernel named after the op (vector body and tail: one copy), not the
    # computed store next to it
    once = "\n        cpp_fused_fused_add_rms_norm_0(a, b, c)\n"
    assert copied_buffers(_CPP_KERNEL + once) == 1
    assert copied_buffers(_CPP_KERNEL) == 0  # defined, never called
    computed = _CPP_KERNEL.replace("tmp0.store(out_ptr0", "tmp1.store(out_ptr0") + once
    assert copied_buffers(computed) == 1  # the tail loop still copies
    assert copied_buffers(computed.replace("] = tmp0;", "] = tmp0 * tmp0;")) == 0
    assert copied_buffers(_TRITON_KERNEL + "\n        triton_poi_fused_clone_1.run(buf0, buf1, 6, stream=s)\n") == 1
    calls = "\n        cpp_fused_fused_add_rms_norm_0(a, b, c)\n        buf3.copy_(arg0_1)\n"
    assert copied_buffers(_CPP_KERNEL + _TRITON_KERNEL + calls) == 2  # the Triton kernel is not called
    twice = "\n        cpp_fused_fused_add_rms_norm_0(a, b, c)\n        cpp_fused_fused_add_rms_norm_0(d, e, f)\n"
    assert copied_buffers(_CPP_KERNEL + twice) == 2  # a kernel serving two layers copies twice
