"""Priority dispatch: order, native last, global and scoped settings, threads, tasks, explain."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import torch

import ircore
from ircore import config
from ircore.errors import PriorityError

from . import impls
from .impls import fused_inplace, only_fp32, rms_norm_a, rms_norm_b

rms_norm = ircore.ops.rms_norm


@pytest.fixture(autouse=True)
def _clear_calls():
    impls.CALLS.clear()


def _register_ab():
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=only_fp32)
    rms_norm.register_impl("prov_b", rms_norm_b)


def test_native_only_by_default(x4096):
    x, w = x4096
    assert ircore.get_priority("rms_norm") == ["native"]
    torch.testing.assert_close(rms_norm(x, w, 1e-6), rms_norm.native(x, w, 1e-6))


def test_registration_order_is_the_default_and_native_is_last(x4096):
    _register_ab()
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]
    x, w = x4096
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a"]


def test_supports_args_falls_through(x4096):
    _register_ab()
    x, w = x4096
    rms_norm(x.half(), w.half(), 1e-6)
    assert impls.CALLS == ["b"]


def test_provider_ranks_decide_default_order():
    _register_ab()
    ircore.dispatch.STATE.ranks["rms_norm"] = {"prov_b": 5, "prov_a": 50}
    ircore.dispatch.STATE.bump()
    assert ircore.get_priority("rms_norm") == ["prov_b", "prov_a", "native"]


def test_set_priority_global(x4096):
    _register_ab()
    ircore.set_priority(rms_norm=["prov_b"])
    assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
    x, w = x4096
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b"]
    ircore.set_priority(rms_norm=None)
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]


def test_configure_priority(x4096):
    _register_ab()
    ircore.configure(priority={"rms_norm": ["native"]})
    x, w = x4096
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == []


def test_native_in_the_middle_ends_the_list():
    _register_ab()
    ircore.set_priority(rms_norm=["prov_b", "native", "prov_a"])
    x = torch.randn(2, 8)
    rms_norm(x, None, 1e-6)
    assert impls.CALLS == ["b"]
    ex = ircore.explain("rms_norm", x.half(), None, 1e-6)
    assert ex.chosen == "prov_b"


def test_unknown_op_or_provider_in_priority():
    _register_ab()
    with pytest.raises(PriorityError, match=r"ircore.set_priority\(\): unknown op 'group_norm'.*known ops"):
        ircore.set_priority(group_norm=["prov_a"])
    with pytest.raises(
        PriorityError,
        match=r"unknown provider 'nope' in the priority of 'rms_norm'; known providers: \[[^\]]*'native', [^\]]*'prov_a', 'prov_b'[^\]]*\]",
    ):
        ircore.set_priority(rms_norm=["nope"])
    with pytest.raises(PriorityError, match=r"ircore.priority\(\): unknown provider"):
        with ircore.priority(rms_norm=["nope"]):
            pass


def test_scoped_priority_nests_and_restores(x4096):
    _register_ab()
    x, w = x4096
    with ircore.priority(rms_norm=["prov_b"]):
        assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
        with ircore.priority(rms_norm=["native"]):
            rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6)
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b", "a"]


def test_scoped_priority_outranks_global():
    _register_ab()
    ircore.set_priority(rms_norm=["prov_a"])
    with ircore.priority(rms_norm=["prov_b"]):
        assert ircore.explain("rms_norm", torch.randn(1, 8), None, 1e-6).chosen == "prov_b"
        assert "scope" in ircore.explain("rms_norm", torch.randn(1, 8), None, 1e-6).source


def test_scoped_priority_is_per_thread():
    _register_ab()
    barrier = threading.Barrier(2)
    seen: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def worker(name: str, order: list[str]) -> None:
        try:
            with ircore.priority(rms_norm=order):
                barrier.wait()
                runs = []
                for _ in range(200):
                    runs.append(ircore.explain("rms_norm", torch.randn(2, 8), None, 1e-6).chosen)
                    rms_norm(torch.randn(2, 8), None, 1e-6)
                barrier.wait()
                seen[name] = runs
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=("t1", ["prov_a"])),
        threading.Thread(target=worker, args=("t2", ["prov_b"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert set(seen["t1"]) == {"prov_a"} and set(seen["t2"]) == {"prov_b"}
    assert impls.CALLS.count("a") == 200 and impls.CALLS.count("b") == 200
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]


def test_scoped_priority_is_per_asyncio_task():
    _register_ab()

    async def task(order: list[str]) -> set[str]:
        with ircore.priority(rms_norm=order):
            chosen = set()
            for _ in range(20):
                await asyncio.sleep(0)
                chosen.add(ircore.explain("rms_norm", torch.randn(2, 8), None, 1e-6).chosen)
            return chosen

    async def main():
        return await asyncio.gather(task(["prov_a"]), task(["prov_b"]), task(["native"]))

    assert asyncio.run(main()) == [{"prov_a"}, {"prov_b"}, {"native"}]


def test_explain_reports_every_decision():
    _register_ab()
    ex = ircore.explain("rms_norm", torch.randn(2, 8).half(), None, 1e-6)
    assert ex.chosen == "prov_b"
    assert [(s.provider, s.outcome) for s in ex.steps] == [
        ("prov_a", "skipped"),
        ("prov_b", "chosen"),
        ("native", "not reached"),
    ]
    assert "rejected" in ex.steps[0].reason
    assert ex.source == "provider defaults"
    text = str(ex)
    assert text.startswith("rms_norm: runs prov_b") and "prov_a" in text
    assert ex.to_dict()["chosen"] == "prov_b"


def test_explain_lists_providers_outside_the_priority():
    _register_ab()
    ircore.set_priority(rms_norm=["prov_b"])
    ex = ircore.explain("rms_norm", torch.randn(2, 8), None, 1e-6)
    assert ("prov_a", "not in priority") in [(s.provider, s.outcome) for s in ex.steps]


def test_explain_and_call_agree_on_every_sample():
    _register_ab()
    for dtype in (torch.float32, torch.bfloat16):
        for sample in rms_norm.sample_inputs(dtype, "cpu"):
            impls.CALLS.clear()
            chosen = ircore.explain(rms_norm, *sample.args).chosen
            rms_norm(*sample.args)
            assert impls.CALLS == [{"prov_a": "a", "prov_b": "b"}[chosen]], sample.label


def test_predicate_that_raises_is_skipped_with_a_warning(caplog):
    def broken(x, weight, epsilon, variance_size):
        raise RuntimeError("predicate bug")

    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=broken)
    x = torch.randn(2, 8)
    with caplog.at_level(logging.WARNING, logger="ircore"):
        out = rms_norm(x, None, 1e-6)
    torch.testing.assert_close(out, rms_norm.native(x, None, 1e-6))
    assert impls.CALLS == []
    assert "supports_args of rms_norm raised RuntimeError: predicate bug" in caplog.text
    line = broken.__code__.co_firstlineno + 1
    assert f"(at {__file__}:{line}); treating it as 'not supported'" in caplog.text  # where, and what to do
    assert "must return False for arguments its kernel does not take" in caplog.text
    ex = ircore.explain("rms_norm", x, None, 1e-6)
    assert ex.chosen == "native" and "raised RuntimeError" in ex.steps[0].reason


def test_failing_implementation_names_its_provider():
    def boom(
        x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> torch.Tensor:
        raise RuntimeError("kernel exploded")

    rms_norm.register_impl("prov_boom", boom)
    with pytest.raises(RuntimeError, match="kernel exploded") as info:
        rms_norm(torch.randn(2, 8), None, 1e-6)
    assert any("provider 'prov_boom'" in n and "IRCORE_DISABLE=prov_boom" for n in info.value.__notes__)


def test_debug_log_says_which_implementation_ran(caplog):
    _register_ab()
    with caplog.at_level(logging.DEBUG, logger="ircore"):
        rms_norm(torch.randn(2, 8), None, 1e-6)
        rms_norm(torch.randn(2, 8).half(), None, 1e-6)
    assert "rms_norm: running prov_a" in caplog.text
    assert "rms_norm: running prov_b" in caplog.text


def test_keyword_and_default_arguments(x4096):
    _register_ab()
    x, w = x4096
    a = rms_norm(x, w, 1e-6)
    b = rms_norm(x=x, weight=w, epsilon=1e-6, variance_size=None)
    c = rms_norm(x, w, epsilon=1e-6)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)
    with pytest.raises(TypeError, match=r"IrOp\[rms_norm\].*missing 1 required positional argument: 'epsilon'"):
        rms_norm(x, w)


# ---------------------------------------------------------------------- in-place safety
def test_functional_call_never_mutates_inputs():
    fused = ircore.ops.fused_add_rms_norm
    fused.register_impl("inpl", fused_inplace, inplace=True)
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    x0, r0 = x.clone(), r.clone()
    out, res = fused(x, r, w, 1e-6)
    assert impls.CALLS == ["inplace"]
    assert torch.equal(x, x0) and torch.equal(r, r0)
    ref_out, ref_res = fused.native(x0, r0, w, 1e-6)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(res, ref_res)
    # the same holds through the torch op (the path compiled graphs take)
    out2, _ = torch.ops.ircore.fused_add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(x, x0) and torch.equal(r, r0)
    torch.testing.assert_close(out2, ref_out)


def test_maybe_inplace_lets_inplace_impls_write_inputs():
    fused = ircore.ops.fused_add_rms_norm
    fused.register_impl("inpl", fused_inplace, inplace=True)
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    ref_out, ref_res = fused.native(x, r, w, 1e-6)
    out, res = fused.maybe_inplace(x, r, w, 1e-6)
    assert out.data_ptr() == x.data_ptr() and res.data_ptr() == r.data_ptr()
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(res, ref_res)


def test_maybe_inplace_with_functional_impl_leaves_inputs():
    fused = ircore.ops.fused_add_rms_norm
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    x0 = x.clone()
    _out, _ = fused.maybe_inplace(x, r, w, 1e-6)
    assert torch.equal(x, x0)


@pytest.mark.parametrize(
    "alias",
    [
        lambda x, r, w: (x, x, w),  # the residual is x itself
        lambda x, r, w: (x, x.view(-1).view(4, 64), w),  # a view of it
        lambda x, r, w: (x, r, x[0]),  # the weight is a row of x
    ],
    ids=["same tensor", "view", "weight inside x"],
)
def test_maybe_inplace_with_overlapping_inputs_is_right(alias):
    fused = ircore.ops.fused_add_rms_norm
    fused.register_impl("inpl", fused_inplace, inplace=True)
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    args = alias(x, r, w)
    before = [a.clone() for a in args]
    ref_out, ref_res = fused.native(*before, 1e-6)
    out, res = fused.maybe_inplace(*args, 1e-6)
    assert impls.CALLS == ["inplace"]  # the in-place kernel ran, on copies
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(res, ref_res)
    for arg, old in zip(args, before):
        assert torch.equal(arg, old)


# ---------------------------------------------------------------------- autograd
def _eager_call(cached: bool, monkeypatch):
    """The op's eager call with the signature cache, or as built without the compiled helper."""
    if cached:
        return rms_norm
    from ircore import _fastpath, _signature

    monkeypatch.setattr(_signature, "signature", None)
    pure = _fastpath.build_eager_call(rms_norm)
    return lambda *args: pure(rms_norm, *args)


@pytest.mark.parametrize("needs_grad", ["x", "weight"])
@pytest.mark.parametrize("cached", [True, False], ids=["signature cache", "pure Python"])
def test_a_call_that_needs_grad_runs_native_and_is_differentiable(needs_grad, cached, monkeypatch):
    call = _eager_call(cached, monkeypatch)
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = torch.randn(4, 64), torch.randn(64)
    call(x, w, 1e-6)  # an inference call first: prov_a, remembered for its signature
    assert impls.CALLS == ["a"]
    leaf = (x if needs_grad == "x" else w).requires_grad_()
    call(x, w, 1e-6).square().sum().backward()
    assert impls.CALLS == ["a"]  # not prov_a: it has no autograd
    expected = leaf.detach().clone().requires_grad_()
    args = (expected, w) if needs_grad == "x" else (x.detach(), expected)
    rms_norm.native(*args, 1e-6).square().sum().backward()
    torch.testing.assert_close(leaf.grad, expected.grad)
    ex = ircore.explain(rms_norm, x, w, 1e-6)
    assert ex.chosen == "native"
    assert ex.steps[0].reason == "an argument requires grad and grad mode is on: only native has autograd"
    with torch.no_grad():  # grad mode off: the providers' kernels again
        call(x, w, 1e-6)
        assert ircore.explain(rms_norm, x, w, 1e-6).chosen == "prov_a"
    assert impls.CALLS == ["a", "a"]


def test_priority_as_a_decorator_and_entered_twice(x4096):
    rms_norm.register_impl("prov_a", rms_norm_a)
    rms_norm.register_impl("prov_b", rms_norm_b)
    x, w = x4096

    @ircore.priority(rms_norm=["prov_b"])
    def decorated():
        rms_norm(x, w, 1e-6)
        return ircore.get_priority("rms_norm")

    assert decorated() == decorated() == ["prov_b", "native"]
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b", "b", "a"]
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]
    block = ircore.priority(rms_norm=["prov_b"])
    with block:
        with ircore.priority(rms_norm=["native"]):
            with block:  # the same object inside itself: each exit restores what its entry found
                assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
            assert ircore.get_priority("rms_norm") == ["native"]
        assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]


def test_priority_block_with_an_unhashable_or_wrong_request_is_checked_on_entry():
    rms_norm.register_impl("prov_a", rms_norm_a)
    block = ircore.priority(rms_norm=[["prov_a"]])  # a list inside the list: no cache key
    for _ in range(2):
        with pytest.raises(ircore.PriorityError, match="unknown provider"):
            with block:
                pass
    with pytest.raises(ircore.PriorityError, match="unknown op 'group_norm'"):
        with ircore.priority(group_norm=["prov_a"]):
            pass
    assert ircore.get_priority("rms_norm") == ["prov_a", "native"]


# ---------------------------------------------------------------------- the '*' key (every op)
fused_add_rms_norm = ircore.ops.fused_add_rms_norm


@pytest.fixture
def reread_config():
    """The environment and config file read again now and after the test (what a fresh process
    reads), and ``configure``'s settings forgotten."""
    config.reset_api_settings()
    yield
    config.reset_api_settings()


def _explain(op=rms_norm):
    x = torch.randn(2, 8)
    if op is rms_norm:
        return ircore.explain(op, x, None, 1e-6)
    return ircore.explain(op, x, torch.randn(2, 8), None, 1e-6)


def test_wildcard_in_set_priority_names_every_op_and_an_op_entry_beats_it(x4096):
    _register_ab()
    ircore.set_priority(**{"*": ["prov_b"]})
    assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
    assert ircore.get_priority("silu_and_mul") == ["prov_b", "native"]  # prov_b lacks it: skipped
    x, w = x4096
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b"]
    assert _explain().source == "ircore.set_priority()/configure() *"
    ircore.set_priority({"*": ["native"], "rms_norm": ["prov_b", "prov_a"]})  # the mapping form
    assert ircore.get_priority("rms_norm") == ["prov_b", "prov_a", "native"]
    assert ircore.get_priority("silu_and_mul") == ["native"]
    assert _explain().source == "ircore.set_priority()/configure()"
    ircore.set_priority(rms_norm=None)  # the op's own entry gone: the same source's '*' decides
    assert ircore.get_priority("rms_norm") == ["native"]
    ircore.set_priority(**{"*": None})  # gone too: the lower sources decide again
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]
    assert _explain().source == "provider defaults"


def test_wildcard_in_configure(x4096):
    _register_ab()
    ircore.configure(priority={"*": ["prov_b", "prov_a"], "silu_and_mul": ["native"]})
    assert ircore.get_priority("rms_norm") == ["prov_b", "prov_a", "native"]
    assert ircore.get_priority("fused_add_rms_norm") == ["prov_b", "prov_a", "native"]
    x, w = x4096
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b"]


def test_a_wildcard_provider_lacking_the_op_is_skipped_for_it():
    rms_norm.register_impl("prov_a", rms_norm_a)  # prov_a has rms_norm only
    fused_add_rms_norm.register_impl("prov_b", fused_inplace)  # prov_b has fused_add_rms_norm only
    ircore.set_priority(**{"*": ["prov_a", "prov_b"]})
    ex = _explain(fused_add_rms_norm)
    assert ex.chosen == "prov_b" and ex.source == "ircore.set_priority()/configure() *"
    assert [(s.provider, s.outcome) for s in ex.steps] == [
        ("prov_a", "skipped"),
        ("prov_b", "chosen"),
        ("native", "not reached"),
    ]
    assert ex.steps[0].reason == "provider 'prov_a' does not implement fused_add_rms_norm"
    assert _explain().chosen == "prov_a"
    # every op gets the list, also those no provider in it implements: native runs them
    ex = ircore.explain("silu_and_mul", torch.randn(2, 8))
    assert ex.chosen == "native" and ex.priority == ("prov_a", "prov_b", "native")
    text = str(ex)
    assert "(from ircore.set_priority()/configure() *)" in text
    assert "provider 'prov_b' does not implement silu_and_mul" in text


def test_unknown_provider_in_the_wildcard_names_the_source():
    _register_ab()
    message = r"unknown provider 'nope' in the priority of '\*'; known providers: \[[^\]]*'prov_a'"
    with pytest.raises(PriorityError, match=r"ircore.set_priority\(\): " + message):
        ircore.set_priority(**{"*": ["prov_a", "nope"]})
    with pytest.raises(PriorityError, match=r"ircore.priority\(\): " + message):
        with ircore.priority(**{"*": ["nope"]}):
            pass
    assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]  # nothing was set


def test_wildcard_scope_beats_a_process_wide_op_entry_and_its_own_op_entry_beats_it(x4096):
    _register_ab()
    ircore.set_priority(rms_norm=["prov_a"])
    with ircore.priority(**{"*": ["prov_b"]}):  # a higher source's '*' beats a lower op entry
        assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
        assert _explain().source == "ircore.priority() scope *"
        with ircore.priority(rms_norm=["native"]):  # the inner block's op entry
            assert ircore.get_priority("rms_norm") == ["native"]
            assert ircore.get_priority("fused_add_rms_norm") == ["prov_b", "native"]
    with ircore.priority(**{"*": ["native"], "rms_norm": ["prov_b"]}):  # one block: op entry wins
        assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
        assert ircore.get_priority("fused_add_rms_norm") == ["native"]
        x, w = x4096
        rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b"]
    assert ircore.get_priority("rms_norm") == ["prov_a", "native"]


def test_an_inner_blocks_wildcard_replaces_what_enclosing_blocks_set(x4096):
    _register_ab()
    x, w = x4096
    with ircore.priority(rms_norm=["prov_b"], silu_and_mul=["native"]):
        with ircore.priority(**{"*": ["prov_a"]}):  # the inner block names every op
            assert ircore.get_priority("rms_norm") == ["prov_a", "native"]
            assert ircore.get_priority("silu_and_mul") == ["prov_a", "native"]
            rms_norm(x, w, 1e-6)
            with ircore.priority(**{"*": None}):  # removes the enclosing '*' (only it)
                assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]
                rms_norm(x, w, 1e-6)
        assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
        rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a", "a", "b"]


def test_a_higher_sources_wildcard_beats_the_environments_op_entry(reread_config, monkeypatch, x4096):
    """IRCORE_PRIORITY names an op, configure() names every op: the higher source decides."""
    _register_ab()
    monkeypatch.setenv("IRCORE_PRIORITY", "rms_norm=native")
    config.reset_api_settings()  # read the environment again
    assert ircore.get_priority("rms_norm") == ["native"]
    assert _explain().source == "IRCORE_PRIORITY"
    ircore.configure(priority={"*": ["prov_b"]})
    assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
    assert _explain().source == "ircore.set_priority()/configure() *"


def test_wildcard_from_the_environment(reread_config, monkeypatch):
    """In-process core tests have no installed provider to name in the environment (the
    installed-fixture scenarios are in test_plugins.py): ``*=native`` against registered ones."""
    _register_ab()
    monkeypatch.setenv("IRCORE_PRIORITY", "*=native")
    config.reset_api_settings()
    assert ircore.get_priority("rms_norm") == ["native"]
    ex = _explain()
    assert ex.chosen == "native" and ex.source == "IRCORE_PRIORITY *"
    assert ("prov_a", "not in priority", "not listed by IRCORE_PRIORITY *") in ex.steps
    ircore.set_priority(rms_norm=["prov_b"])  # a higher source's op entry beats the env's '*'
    assert _explain().chosen == "prov_b"
    assert ircore.get_priority("silu_and_mul") == ["native"]


def test_wildcard_from_a_config_file(reread_config, monkeypatch, tmp_path):
    _register_ab()
    (tmp_path / "ircore.toml").write_text('[priority]\n"*" = ["native"]\n')
    assert config.read_file(tmp_path / "ircore.toml").values["priority"] == {"*": ("native",)}
    monkeypatch.chdir(tmp_path)
    config.reset_api_settings()
    ex = _explain()
    assert ex.chosen == "native" and ex.source == f"{tmp_path / 'ircore.toml'}: priority *"
    assert ircore.get_priority("silu_and_mul") == ["native"]
    ircore.configure(priority={"rms_norm": ["prov_b"]})  # a higher source's op entry
    assert _explain().chosen == "prov_b"
    assert ircore.get_priority("fused_add_rms_norm") == ["native"]


def test_wildcard_parsing_and_name_checks():
    assert config.read_environment({"IRCORE_PRIORITY": "*=triton,vllm_c;rms_norm=vllm_c"}).values[
        "priority"
    ] == {"*": ("triton", "vllm_c"), "rms_norm": ("vllm_c",)}
    source = config.ConfigSource("environment", {"priority": {"*": ("good",)}})
    config.Settings(sources=[source]).check_names({"good"}, {"rms_norm"})  # not refused as an op
    source.values["priority"]["*"] = ("good", "nope")
    with pytest.raises(
        ircore.ConfigError,
        match=r"^IRCORE_PRIORITY: unknown provider 'nope' for every op \('\*'\); known providers: "
        r"\['good', 'native'\]$",
    ):
        config.Settings(sources=[source]).check_names({"good"}, {"rms_norm"})
