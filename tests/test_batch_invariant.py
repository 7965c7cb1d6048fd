"""Batch-invariant mode: the configuration key and the scoped block, the claim (ImplSpec field),
the refusal, the generic invariance check and its catching a false claim, compile."""

import contextlib
import io
import json
import threading

import pytest
import torch

import ircore
from ircore import cli, dispatch
from ircore.config import read_environment
from ircore.errors import BatchInvariantError, ImplRegistrationError, OpDeclarationError
from ircore.testing import assert_close_to_reference, check_invariance, invariance_problem
from ircore.testing._invariance import BATCH_SIZES, claimed_entry, invariance_samples

OPS = ("fused_add_rms_norm", "layer_norm", "rms_norm", "rms_norm_gated", "silu_and_mul")
ROPE_OPS = ("rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb")
#: every other op whose native takes part in the mode (gated activations, quant ops, fused forms)
OTHER_NATIVE_CLAIMS = sorted(
    name
    for name, op in ircore.all_ops().items()
    if name not in OPS + ROPE_OPS and claimed_entry(op, "native") is not None
)


def _rms(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size)


def _variant_rms(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    """Batch-variant on purpose: a row's result moves with the row count (as a launch heuristic
    keyed on it would)."""
    out = _rms(x, weight, epsilon, variance_size)
    return out + (x.shape[0] > 2) * 1e-3


def _args(rows: int = 4, hidden: int = 64):
    gen = torch.Generator().manual_seed(rows)
    return torch.randn(rows, hidden, generator=gen), torch.randn(hidden, generator=gen), 1e-6


# ---------------------------------------------------------------------- native claims
@pytest.mark.parametrize("op_name", OPS)
def test_native_invariant_form_is_invariant_and_close_to_native(op_name):
    """Every op's native form in the mode keeps a row's bits in batches of 1, 3, 64 and 1000 rows
    (start, middle, end; contiguous and strided), and stays within the op's tolerance of native."""
    op = ircore.get_op(op_name)
    assert check_invariance("native", ops=[op_name], max_samples=2)[op_name] >= 2
    entry = op.invariant_entry("native")
    for dtype in (torch.float32, torch.bfloat16):
        for sample in list(op.sample_inputs(dtype, "cpu", 0))[:4]:
            got, want = entry.call(*sample.args), op.native(*sample.args)
            for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want))):
                tol = op.tolerance(dtype)
                torch.testing.assert_close(g.float(), w.float(), atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize("op_name", ROPE_OPS)
def test_rope_natives_claim_invariance_and_the_check_batches_positions(op_name):
    """The position ops' natives claim invariance (elementwise per token); the check finds their
    row arguments (q, k and the integer per-token positions, resampled from the sample's own: they
    index the cos/sin cache), and catches a RoPE whose rows move with the batch size."""
    op = ircore.get_op(op_name)
    assert op.invariant_entry("native").call is op.native
    assert check_invariance("native", ops=[op_name], max_samples=3)[op_name] >= 3

    def variant(*args):
        out = op.native(*args)
        outs = out if isinstance(out, tuple) else (out,)
        bumped = tuple(o * (1 + 1e-2 * (o.shape[0] > 1)) for o in outs)
        return bumped if isinstance(out, tuple) else bumped[0]

    label, args = next(iter(invariance_samples(op, torch.float32, "cpu")))
    status, problem = invariance_problem(op, "native", args, fn=variant)
    assert status == "failed" and "is not batch-invariant" in problem, (label, problem)


@pytest.mark.parametrize("op_name", OTHER_NATIVE_CLAIMS)
def test_every_other_native_claim_holds(op_name):
    """The other natives that claim invariance (elementwise ops as they are, the fused norm + quant
    ops through the norm's fixed-order form) keep a row's bits, and the mode's form stays within
    the op's tolerance of the reference (fp8 outputs within one fp8 ulp, as the kit compares)."""
    op = ircore.get_op(op_name)
    assert check_invariance("native", ops=[op_name], max_samples=2)[op_name] >= 1
    entry = op.invariant_entry("native")
    for dtype in (torch.float32, torch.bfloat16):
        for sample in list(op.sample_inputs(dtype, "cpu", 0))[:2]:
            if op.batch_dependent is None or not op.batch_dependent(*sample.args):
                assert_close_to_reference(op, entry.call(*sample.args), sample.args, label=sample.label)


def test_batch_dependent_calls_are_refused_whatever_the_claims(miss_path):
    """A provider claiming invariance for a whole op still never runs the calls the op declares
    batch-dependent (dynamic_quant_fp8 per tensor): the mode raises with the op's reason; per token
    the provider runs; outside the mode nothing changes."""
    op = ircore.ops.dynamic_quant_fp8
    ran = []

    def quant(
        x: torch.Tensor,
        per_token: bool,
        fp8_dtype: torch.dtype,
        scale_ub: torch.Tensor | None = None,
        num_token_padding: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ran.append(per_token)
        return op.native(x, per_token, fp8_dtype, scale_ub, num_token_padding)

    op.register_impl("anyrows", quant, batch_invariant=True)
    x = torch.randn(3, 64)
    fn = torch.float8_e4m3fn
    with ircore.priority(dynamic_quant_fp8=["anyrows"]):
        op(x, False, fn)
        assert ran == [False]
        with ircore.batch_invariant():
            op(x, True, fn)
            assert ran == [False, True]
            for _ in range(2):  # remembered per signature, and still raises
                with pytest.raises(BatchInvariantError) as info:
                    op(x, False, fn)
                message = str(info.value)
                assert "'dynamic_quant_fp8'" in message and "per_token=False" in message, message
                assert "depends on the whole batch" in message and "per_token=True" in message, message
            explained = ircore.explain(op, x, False, fn)
            assert "this call depends on the whole batch" in str(explained), explained
            # explain agrees with the call: nothing runs, it raises (it said "runs native")
            assert explained.chosen is None and explained.raises.startswith("BatchInvariantError"), explained
            assert str(explained).startswith("dynamic_quant_fp8: raises BatchInvariantError")
            assert [s.outcome for s in explained.steps] == ["skipped", "refuses"], explained
            assert ircore.explain(op, x, True, fn).chosen == "anyrows"
    assert ran == [False, True]
    assert op.invariance_of("anyrows", (x, False, fn)).startswith("this call depends on the whole batch")
    assert op.invariance_of("anyrows", (x, True, fn)) == "claims batch invariance"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["list", "--json"]) == 0
    listed = {o["op"]: o for o in json.loads(out.getvalue())["ops"]}
    assert listed["dynamic_quant_fp8"]["batch_dependent_calls"] is True
    assert listed["rms_norm"]["batch_dependent_calls"] is False


def test_torch_reduction_split_is_what_native_form_avoids():
    """Why native needs its fixed-order form: torch's CPU mean over a 65536-wide row alone and in
    a batch of 3 differ once torch splits the reduction across 8 threads (the fixed form does not)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(8)
    try:
        op = ircore.ops.rms_norm
        fixed = op.invariant_entry("native").call
        differed = False
        for seed in range(4):
            gen = torch.Generator().manual_seed(seed)
            x, w = torch.randn(3, 65536, generator=gen), torch.randn(65536, generator=gen)
            assert torch.equal(fixed(x[:1], w, 1e-6), fixed(x, w, 1e-6)[:1])
            differed = differed or not torch.equal(op.native(x[:1], w, 1e-6), op.native(x, w, 1e-6)[:1])
        if not differed:
            pytest.skip("this torch build does not split the reduction here")
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------- the mode and the claim
def _register(claim, fn=_rms, provider="myprov", **kw):
    return ircore.ops.rms_norm.register_impl(provider, fn, batch_invariant=claim, **kw)


def test_mode_runs_only_claimed_implementations_and_off_changes_nothing():
    _register(False)
    x, w, eps = _args()
    plain = dispatch.plan_for(ircore.ops.rms_norm, None)
    assert ircore.explain("rms_norm", x, w, eps).chosen == "myprov"
    with ircore.batch_invariant():
        explained = ircore.explain("rms_norm", x, w, eps)
        assert explained.chosen == "native"
        assert "batch-invariant mode on" in explained.source
        assert "claims no batch invariance" in str(explained)
        assert torch.equal(
            ircore.ops.rms_norm(x, w, eps), ircore.ops.rms_norm.invariant_entry("native").call(x, w, eps)
        )
    # outside the block: the same plan object, the same choice
    assert dispatch.plan_for(ircore.ops.rms_norm, None) is plain
    assert ircore.explain("rms_norm", x, w, eps).chosen == "myprov"


def test_claim_true_and_predicate_claim():
    _register(lambda x, weight, epsilon, variance_size=None: x.shape[-1] == 64)
    with ircore.batch_invariant():
        assert ircore.explain("rms_norm", *_args(hidden=64)).chosen == "myprov"
        other = ircore.explain("rms_norm", *_args(hidden=32))
        assert other.chosen == "native" and "claim rejects this call" in str(other)


def test_scope_is_per_thread_and_nests_with_priority():
    _register(False)
    _register(True, provider="other")
    x, w, eps = _args()
    seen = {}

    def outside():
        seen["thread"] = ircore.explain("rms_norm", x, w, eps).chosen

    with ircore.priority(rms_norm=["myprov", "other"]):
        with ircore.batch_invariant():
            thread = threading.Thread(target=outside)
            thread.start()
            thread.join()
            assert ircore.explain("rms_norm", x, w, eps).chosen == "other"
            with ircore.priority(rms_norm=["myprov"]):  # still invariant inside
                assert ircore.explain("rms_norm", x, w, eps).chosen == "native"
            assert ircore.explain("rms_norm", x, w, eps).chosen == "other"
        assert ircore.explain("rms_norm", x, w, eps).chosen == "myprov"
    assert seen["thread"] == "myprov"


def test_configured_mode_from_configure_and_environment(tmp_path):
    _register(False)
    x, w, eps = _args()
    ircore.configure(batch_invariant=True)
    assert dispatch.batch_invariant_active()
    assert ircore.explain("rms_norm", x, w, eps).chosen == "native"
    ircore.configure(batch_invariant=False)
    assert ircore.explain("rms_norm", x, w, eps).chosen == "myprov"
    assert read_environment({"IRCORE_BATCH_INVARIANT": "1"}).values["batch_invariant"] is True
    with pytest.raises(ircore.ConfigError, match="IRCORE_BATCH_INVARIANT"):
        read_environment({"IRCORE_BATCH_INVARIANT": "maybe"})


def test_no_qualifying_implementation_raises_naming_op_call_and_need(miss_path):
    @ircore.register_op(batch_invariant="its scale is the whole tensor's maximum")
    def ircore_test_quant(x: torch.Tensor) -> torch.Tensor:
        return x / x.abs().max()

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x / x.abs().max()

    ircore_test_quant.register_impl("myprov", scaled)
    x = torch.randn(3, 8)
    ircore_test_quant(x)
    with ircore.batch_invariant():
        for _ in range(2):  # the refusal is remembered per signature, and still raises
            with pytest.raises(BatchInvariantError) as info:
                ircore_test_quant(x)
            message = str(info.value)
            assert "ircore_test_quant" in message and "float32[3, 8]" in message
            assert "its scale is the whole tensor's maximum" in message
            assert (
                "myprov: claims no batch invariance" in message
                and "ImplSpec declares batch_invariant" in message
            )


def test_the_refusal_names_a_qualifying_implementation_the_priority_leaves_out(miss_path):
    """A provider that claims invariance but is not in the op's priority list is the likely fix:
    the error says so (it said 'no provider implements it'); native's own reason is given."""

    @ircore.register_op(batch_invariant="a reason of native's")
    def ircore_test_left_out(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def doubled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    ircore_test_left_out.register_impl("steady", doubled, batch_invariant=True)
    x = torch.randn(3, 8)
    with ircore.batch_invariant(), ircore.priority(ircore_test_left_out=["native"]):
        with pytest.raises(BatchInvariantError) as info:
            ircore_test_left_out(x)
        explained = ircore.explain(ircore_test_left_out, x)
        assert explained.chosen is None and explained.to_dict()["raises"].startswith("BatchInvariantError")
        assert ("steady", "not in priority") in [(s.provider, s.outcome) for s in explained.steps]
    message = str(info.value)
    assert "native is not batch-invariant: a reason of native's" in message
    assert "steady: claims batch invariance, but not in the op's priority list ['native']" in message
    assert "no provider implements it" not in message


def test_eager_keywords_maybe_inplace_are_invariant():
    """fused_add_rms_norm (in place) through an invariant native form: keywords, maybe_inplace."""
    op = ircore.ops.fused_add_rms_norm
    gen = torch.Generator().manual_seed(1)
    x, r, w = torch.randn(64, 256, generator=gen), torch.randn(64, 256, generator=gen), torch.randn(256)
    with ircore.batch_invariant():
        alone = op(x[31:32].clone(), r[31:32].clone(), w, 1e-6)
        batch = op(x=x.clone(), x_residual=r.clone(), weight=w, epsilon=1e-6)
        inplace = op.maybe_inplace(x.clone(), r.clone(), w, 1e-6)
    for a, b, c in zip(alone, batch, inplace):
        assert torch.equal(a, b[31:32]) and torch.equal(a, c[31:32])


# ---------------------------------------------------------------------- the check and false claims
def test_false_claim_is_caught_and_true_claim_passes():
    op = ircore.ops.rms_norm
    _register(True, fn=_variant_rms, provider="liar")
    args = next(iter(op.sample_inputs(torch.float32, "cpu", 0))).args
    status, problem = invariance_problem(op, "liar", args)
    assert status == "failed"
    assert "liar.rms_norm is not batch-invariant" in problem and "batch of 3 rows" in problem
    with pytest.raises(AssertionError, match=r"liar\.rms_norm is not batch-invariant"):
        ircore.testing.check_provider("liar", dtypes=(torch.float32,), seeds=(0,))
    _register(True, provider="honest")
    assert invariance_problem(op, "honest", args, sizes=BATCH_SIZES)[0] == "passed"


def test_claim_that_depends_on_row_count_is_caught():
    _register(lambda x, weight, epsilon, variance_size=None: x.shape[0] < 50, provider="rows")
    args = next(iter(ircore.ops.rms_norm.sample_inputs(torch.float32, "cpu", 0))).args
    status, problem = invariance_problem(ircore.ops.rms_norm, "rows", args)
    assert status == "failed" and "must not depend on the number of rows" in problem


def test_bad_claims_are_registration_errors():
    with pytest.raises(ImplRegistrationError, match="batch_invariant 'yes' is neither"):
        _register("yes")
    with pytest.raises(ImplRegistrationError, match=r"batch_invariant \(.*\) takes \(x\)"):
        _register(lambda x: True)
    with pytest.raises(ImplRegistrationError, match="invariant_fn is given but batch_invariant is False"):
        _register(False, invariant_fn=_rms)

    def ircore_test_badclaim(x: torch.Tensor) -> torch.Tensor:
        return x

    with pytest.raises(OpDeclarationError, match="batch_invariant 3 is neither"):
        ircore.register_op(batch_invariant=3)(ircore_test_badclaim)


def test_invariant_fn_runs_in_the_mode_only():
    calls = []

    def variant(
        x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> torch.Tensor:
        calls.append(x.shape[0])
        return _rms(x, weight, epsilon, variance_size)

    _register(True, fn=_variant_rms, invariant_fn=variant)
    x, w, eps = _args()
    ircore.ops.rms_norm(x, w, eps)
    assert calls == []
    with ircore.batch_invariant():
        ircore.ops.rms_norm(x, w, eps)
    assert calls == [4]


def test_lowering_in_the_mode_runs_the_variant_through_its_own_op():
    """A graph lowered in the mode holds the op the core built for the implementation's variant
    (``ircore_<provider>::<op>_batch_invariant``), which runs ``invariant_fn``; outside the mode,
    the default kernel's op."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ircore.compile._lowering import lower

    calls = []

    def variant(
        x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> torch.Tensor:
        calls.append(x.shape[0])
        return _rms(x, weight, epsilon, variance_size)

    _register(True, fn=_variant_rms, invariant_fn=variant)
    x, w, _ = _args()

    def f(x, w):
        return ircore.ops.rms_norm(x, w, 1e-6)

    def targets(gm):
        return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}

    outside = make_fx(f, tracing_mode="fake")(x, w)
    assert set(lower(outside.graph)[0].values()) == {("rms_norm", "myprov")}
    assert "ircore_myprov.rms_norm.default" in targets(outside)
    with ircore.batch_invariant():
        inside = make_fx(f, tracing_mode="fake")(x, w)
        chosen, left = lower(inside.graph)
    assert set(chosen.values()) == {("rms_norm", "myprov")} and left == 0
    assert "ircore_myprov.rms_norm_batch_invariant.default" in targets(inside), targets(inside)
    inside.recompile()
    got = inside(x, w)
    assert calls == [x.shape[0]] and torch.equal(got, _rms(x, w, 1e-6))


def test_matmul_layer_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("a GPU machine: the layer may install (tested in the triton provider)")
    with pytest.raises(BatchInvariantError, match="matmul layer runs on CUDA only"):
        with ircore.batch_invariant(matmul=True):
            pass
    assert not dispatch.batch_invariant_active()


# ---------------------------------------------------------------------- compile
@pytest.mark.slow
def test_compiled_in_the_mode_is_invariant_and_keyed_by_it(caplog):
    from ircore.compile._passes import lowering_state

    def f(x, r, w):
        return ircore.ops.rms_norm(x + r, w, 1e-6)

    gen = torch.Generator().manual_seed(2)
    x, r, w = torch.randn(64, 128, generator=gen), torch.randn(64, 128, generator=gen), torch.randn(128)
    assert lowering_state()["batch_invariant"] is False
    torch._dynamo.reset()
    with ircore.batch_invariant():
        assert lowering_state()["batch_invariant"] is True
        compiled = torch.compile(f, backend="ircore", dynamic=True)
        batch = compiled(x, r, w)
        alone = compiled(x[63:].clone(), r[63:].clone(), w)
        assert torch.equal(batch[63:], alone)
    with caplog.at_level("WARNING", logger="ircore"):
        compiled(x, r, w)  # outside the mode: not the invariant lowering
    assert "lowered in batch-invariant mode and runs outside it" in caplog.text
    torch._dynamo.reset()


def test_verify_reports_a_false_claim():
    from ircore.tools.verify import invariance_results

    _register(True, fn=_variant_rms, provider="liar")
    _register(True, provider="honest")
    kw = {"ops": ["rms_norm"], "devices": ["cpu"], "dtypes": [torch.float32]}
    (liar,) = invariance_results(["liar"], **kw)
    (honest,) = invariance_results(["honest"], **kw)
    assert liar.status == "failed" and "liar.rms_norm is not batch-invariant" in liar.message
    assert honest.status == "passed" and honest.case.label.startswith("batch invariance")


def test_lowering_walks_the_invariant_plan_and_the_guard_knows_the_mode():
    """The lowering (no Inductor: the pass on a make_fx graph) picks what the mode allows, and a
    graph lowered in the mode runs uncompiled outside it (and the other way round)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ircore._state import STATE
    from ircore.compile._backend import _guarded
    from ircore.compile._lowering import lower

    _register(False)
    x, w, _ = _args()

    def f(x, w):
        return ircore.ops.rms_norm(x, w, 1e-6)

    chosen, _ = lower(make_fx(f, tracing_mode="fake")(x, w).graph)
    assert set(chosen.values()) == {("rms_norm", "myprov")}
    with ircore.batch_invariant():
        gm = make_fx(f, tracing_mode="fake")(x, w)
        chosen, left = lower(gm.graph)
        assert set(chosen.values()) == {("rms_norm", "native")} and left == 0
        targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
        assert not any("mean" in t for t in targets), targets  # the fixed-order form, not torch's mean
    dispatch.ensure_loaded()
    lists = {"rms_norm": dispatch.effective_priority(ircore.ops.rms_norm, None)[0]}
    lowered_inside = _guarded(lambda: "compiled", lambda: "eager", STATE.version, lists, True)
    lowered_outside = _guarded(lambda: "compiled", lambda: "eager", STATE.version, lists, False)
    assert (lowered_inside(), lowered_outside()) == ("eager", "compiled")
    with ircore.batch_invariant():
        assert (lowered_inside(), lowered_outside()) == ("compiled", "eager")
