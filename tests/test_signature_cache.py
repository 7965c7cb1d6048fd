"""The eager path's per-signature cache: what a signature holds, when a choice is remembered,
and that nothing remembered outlives the priorities, providers or checks it was made under.

Needs the compiled helper (ircore/csrc/signature.cpp, built by `pip install --no-build-isolation`,
as the Makefile does); without it the pure-Python path runs and these tests skip.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import subprocess
import sys
import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import ircore
from ircore import _fastpath, _signature, dispatch
from ircore.errors import InvalidArgumentError, OpDeclarationError

from . import impls
from .impls import fused_inplace, rms_norm_a, rms_norm_b

pytestmark = pytest.mark.skipif(
    _signature.signature is None, reason=f"call-signature helper not loaded: {_signature.unavailable_reason}"
)
rms_norm = ircore.ops.rms_norm
SPEC = rms_norm.signature_spec


def sig(*args):
    return _signature.signature(SPEC, *args)


class Counting:
    """A supports_args that counts its calls and accepts fp32 only."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x, weight, epsilon, variance_size):
        self.calls += 1
        return x.dtype == torch.float32


@pytest.fixture(autouse=True)
def _clear_calls():
    impls.CALLS.clear()


# ---------------------------------------------------------------------- what a signature is
def test_signature_ignores_row_count_and_epsilon():
    w = torch.ones(64)
    assert sig(torch.randn(1, 64), w, 1e-6, None) == sig(torch.randn(300, 64), w, 1e-5, None)
    assert sig(torch.randn(2, 3, 64), w, 1e-6, None) != sig(torch.randn(6, 64), w, 1e-6, None)  # dims


@pytest.mark.parametrize(
    "other",
    [
        lambda x, w: (x.half(), w, 1e-6, None),  # dtype
        lambda x, w: (x, w.half(), 1e-6, None),  # weight dtype
        lambda x, w: (x, None, 1e-6, None),  # weight None
        lambda x, w: (x, w, 1e-6, 32),  # variance_size given
        lambda x, w: (x.t().contiguous().t(), w, 1e-6, None),  # last-dim stride != 1
        lambda x, w: (torch.randn(8, 128)[:, :64], w, 1e-6, None),  # rows strided: not contiguous
        lambda x, w: (torch.randn(8, 32), torch.ones(32), 1e-6, None),  # hidden size
        lambda x, w: (x, w, -1e-6, None),  # epsilon's sign (an op's check refuses negative ones)
        lambda x, w: (x, w, float("nan"), None),  # NaN counts as negative
        lambda x, w: (x.requires_grad_(), w, 1e-6, None),  # needs grad, grad mode on: native runs
    ],
)
def test_signature_tells_apart(other):
    x, w = torch.randn(8, 64), torch.ones(64)
    assert sig(x, w, 1e-6, None) != sig(*other(x, w))
    assert sig(x, w, 1e-6, 32) != sig(x, w, 1e-6, 16)


def test_signature_declines_what_needs_the_careful_path():
    x, w = torch.randn(4, 64), torch.ones(64)

    class Sub(torch.Tensor):
        pass

    assert sig(x.as_subclass(Sub), w, 1e-6, None) is None
    assert sig([1.0], w, 1e-6, None) is None
    assert sig(x.to_sparse(), w, 1e-6, None) is None  # sizes/strides are not plain: no C++ throw
    assert sig(torch.nested.as_nested_tensor([x, x[:2]]), w, 1e-6, None) is None
    assert sig(x, w, 1e-6, 2.5) is None
    for epsilon in ("1e-6", None, [1e-6], True, torch.tensor(1e-6)):  # not a real number
        assert sig(x, w, epsilon, None) is None
    assert sig(x, w, 0, None) == sig(x, w, 1e-6, None)  # an int is a real number
    with torch.no_grad():  # where grad mode is on, a Parameter (requires grad) is told apart
        assert sig(x, torch.nn.Parameter(w), 1e-6, None) == sig(x, w, 1e-6, None)  # Parameter is a tensor
    with FakeTensorMode() as mode:
        assert sig(mode.from_tensor(x), None, 1e-6, None) is None
    fused = ircore.ops.fused_add_rms_norm.signature_spec
    same = _signature.signature(fused, x, torch.randn(4, 64), w, 1e-6, None)
    assert same != _signature.signature(fused, x, torch.randn(1, 64), w, 1e-6, None)  # residual shape


def test_make_fx_and_fake_mode_still_record_the_op():
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = torch.randn(4, 64), torch.ones(64)
    rms_norm(x, w, 1e-6)  # remembered for this signature
    gm = make_fx(lambda x, w: rms_norm(x, w, 1e-6))(x, w)
    assert any(n.target is rms_norm.torch_op for n in gm.graph.nodes)
    gm = make_fx(lambda x, w: rms_norm(x, w, 1e-6), tracing_mode="fake")(x, w)
    assert any(n.target is rms_norm.torch_op for n in gm.graph.nodes)


# ---------------------------------------------------------------------- when a choice is remembered
@pytest.mark.usefixtures("miss_path")
def test_declared_predicate_is_asked_once_per_signature(x4096):
    pred = Counting()
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=pred, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b)
    x, w = x4096
    for _ in range(5):
        rms_norm(x, w, 1e-6)
    rms_norm(x[:3], w, 1e-6)  # fewer rows: same signature
    assert pred.calls == 1 and impls.CALLS == ["a"] * 6
    for _ in range(3):
        rms_norm(x.half(), w.half(), 1e-6)  # another signature: asked once, declines
    assert pred.calls == 2 and impls.CALLS[6:] == ["b"] * 3


@pytest.mark.usefixtures("miss_path")
def test_undeclared_predicate_is_asked_every_call(x4096):
    pred = Counting()
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=pred)
    x, w = x4096
    for _ in range(4):
        rms_norm(x, w, 1e-6)
    assert pred.calls == 4 and impls.CALLS == ["a"] * 4


@pytest.mark.usefixtures("miss_path")
def test_undeclared_predicate_ahead_stops_caching_behind_it(x4096):
    first, second = Counting(), Counting()
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=first)  # undeclared, declines fp16
    rms_norm.register_impl("prov_b", rms_norm_b, supports_args=second, cache_by_signature=True)
    x, w = x4096
    for _ in range(3):
        rms_norm(x.half(), w.half(), 1e-6)
    assert first.calls == 3 and second.calls == 3  # the choice depended on an undeclared answer


@pytest.mark.usefixtures("miss_path")
def test_priority_changes_forget_remembered_choices(x4096):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    x, w = x4096
    rms_norm(x, w, 1e-6)
    ircore.set_priority(rms_norm=["prov_b"])
    rms_norm(x, w, 1e-6)
    with ircore.priority(rms_norm=["prov_a"]):
        rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6)
        with ircore.priority(rms_norm=["native"]):
            rms_norm(x, w, 1e-6)  # native: records nothing
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a", "b", "a", "a", "b"]


@pytest.mark.usefixtures("miss_path")
def test_wildcard_changes_forget_remembered_choices(x4096):
    """A change of ``*`` is a priority change like an op's entry: the next call follows it, in and
    out of blocks, and the fingerprint compiled graphs guard on moves with it (and back)."""
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    x, w = x4096
    version = dispatch.STATE.version
    rms_norm(x, w, 1e-6)
    rms_norm(x, w, 1e-6)
    ircore.set_priority(**{"*": ["prov_b"]})
    assert dispatch.STATE.version != version
    rms_norm(x, w, 1e-6)
    rms_norm(x, w, 1e-6)
    ircore.configure(priority={"*": ["prov_a", "prov_b"]})
    rms_norm(x, w, 1e-6)
    with ircore.priority(**{"*": ["prov_b"]}):
        rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6)
        ircore.set_priority(**{"*": ["native"]})  # process-wide: the block's '*' still decides
        rms_norm(x, w, 1e-6)
        with ircore.priority(**{"*": ["native"]}):
            rms_norm(x, w, 1e-6)  # native: records nothing
        with ircore.priority(**{"*": ["prov_a"]}):
            rms_norm(x, w, 1e-6)
    rms_norm(x, w, 1e-6)  # native, set process-wide inside the block
    ircore.set_priority(**{"*": None})
    assert dispatch.STATE.version == version  # the same configuration as at first
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a", "a", "b", "b", "a", "b", "b", "b", "a", "a"]


@pytest.mark.usefixtures("miss_path")
def test_unregistering_forgets_remembered_choices(x4096):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = x4096
    rms_norm(x, w, 1e-6)
    rms_norm.unregister_impl("prov_a")
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a", "b"]


def test_scopes_in_threads_keep_their_own_choices(x4096):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    x, w = x4096
    seen: dict[str, set[str]] = {}
    barrier = threading.Barrier(2)

    def worker(name, provider):
        out = []
        with ircore.priority(rms_norm=[provider]):
            barrier.wait()
            for _ in range(50):
                before = len(impls.CALLS)
                rms_norm(x, w, 1e-6)
                out.append(impls.CALLS[before] if len(impls.CALLS) > before else "?")
        seen[name] = set(out) - {"?"}

    threads = [threading.Thread(target=worker, args=(n, p)) for n, p in (("t1", "prov_a"), ("t2", "prov_b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # CALLS is shared, so a slot may hold the other thread's call; what each thread ran is
    # checked exactly below, without threads
    assert seen["t1"] and seen["t2"]
    impls.CALLS.clear()
    with ircore.priority(rms_norm=["prov_b"]):
        rms_norm(x, w, 1e-6)
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b", "a"]


@pytest.mark.usefixtures("miss_path")
def test_a_scope_entered_again_reuses_its_remembered_choices(x4096):
    """Same contents, same outer scopes: the plans and choices of the first entry serve the next."""
    pred = Counting()
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=pred, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    ircore.set_priority(rms_norm=["prov_b"])
    x, w = x4096
    for _ in range(3):
        with ircore.priority(rms_norm=["prov_a"]):  # a new object each time, as a per-request block
            rms_norm(x, w, 1e-6)
            rms_norm(x, w, 1e-6)
    with ircore.priority({"rms_norm": ("prov_a",)}):  # the same contents, spelled differently
        rms_norm(x, w, 1e-6)
    assert pred.calls == 1 and impls.CALLS == ["a"] * 7
    with ircore.priority(rms_norm=["prov_a"], silu_and_mul=["native"]):  # new contents, same list
        rms_norm(x, w, 1e-6)
    assert pred.calls == 1  # the plan (and its remembered choices) is shared by list
    with ircore.priority(rms_norm=["prov_b"]):
        with ircore.priority(rms_norm=["prov_a"]):  # the merged contents decide, not the outer block
            rms_norm(x, w, 1e-6)
    assert pred.calls == 1
    rms_norm(x, w, 1e-6)
    assert impls.CALLS[-1] == "b"  # outside: the process-wide priority


@pytest.mark.usefixtures("miss_path")
def test_a_scope_entered_again_after_a_change_decides_again(x4096):
    pred = Counting()
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=pred, cache_by_signature=True)
    x, w = x4096
    with ircore.priority(rms_norm=["prov_a"]):
        rms_norm(x, w, 1e-6)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)  # a provider change
    with ircore.priority(rms_norm=["prov_a"]):
        rms_norm(x, w, 1e-6)
    assert pred.calls == 2
    with ircore.priority(rms_norm=["prov_b"]):
        rms_norm(x, w, 1e-6)
    rms_norm.unregister_impl("prov_b")
    with pytest.raises(ircore.PriorityError, match="unknown provider 'prov_b'"):
        with ircore.priority(rms_norm=["prov_b"]):  # entered before, now checked again
            pass
    assert impls.CALLS == ["a", "a", "b"]


def test_remembered_scopes_are_bounded(x4096, monkeypatch):
    monkeypatch.setattr(dispatch.STATE, "cache_limit", 2)
    monkeypatch.setattr(dispatch.STATE, "scopes", {})
    monkeypatch.setattr(dispatch.STATE, "blocks", {})
    monkeypatch.setattr(dispatch.STATE, "plans", {})
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    x, w = x4096
    for order in (["prov_a"], ["prov_b"], ["native"], ["prov_b", "prov_a"]) * 2:
        with ircore.priority(rms_norm=order):
            rms_norm(x, w, 1e-6)
        assert max(len(dispatch.STATE.scopes), len(dispatch.STATE.blocks), len(dispatch.STATE.plans)) <= 2
    assert impls.CALLS == ["a", "b", "b"] * 2


@pytest.mark.usefixtures("miss_path")
def test_bad_input_is_never_remembered():
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="argument 'weight' has shape"):
            rms_norm(torch.randn(4, 64), torch.ones(32), 1e-6)
        with pytest.raises(InvalidArgumentError, match="variance_size"):
            rms_norm(torch.randn(4, 64), None, 1e-6, 65)
    assert rms_norm.signature_cache == {}


@pytest.mark.usefixtures("miss_path")
def test_raising_predicate_is_not_remembered(x4096, caplog):
    def boom(x, weight, epsilon, variance_size):
        raise RuntimeError("probe failed")

    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=boom, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    x, w = x4096
    with caplog.at_level(logging.WARNING, logger="ircore"):
        rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b", "b"] and rms_norm.signature_cache == {}


@pytest.mark.usefixtures("miss_path")
def test_functional_call_of_inplace_impl_still_clones():
    fused = ircore.ops.fused_add_rms_norm
    fused.register_impl("prov_a", fused_inplace, inplace=True, cache_by_signature=True)
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.ones(64)
    x0, r0 = x.clone(), r.clone()
    for _ in range(3):
        out, _ = fused(x, r, w, 1e-6)
        assert torch.equal(x, x0) and torch.equal(r, r0)
    torch.testing.assert_close(out, fused.native(x0, r0, w, 1e-6)[0])
    assert impls.CALLS == ["inplace"] * 3


@pytest.mark.usefixtures("miss_path")
def test_debug_log_on_remembered_calls(x4096, caplog):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = x4096
    rms_norm(x, w, 1e-6)
    with caplog.at_level(logging.DEBUG, logger="ircore"):
        rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6)
    assert [r.getMessage() for r in caplog.records] == ["rms_norm: running prov_a"] * 2


@pytest.mark.usefixtures("miss_path")
def test_failure_in_remembered_impl_names_the_provider(x4096):
    def broken(
        x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> torch.Tensor:
        raise ValueError("kernel exploded")

    rms_norm.register_impl("prov_a", broken, cache_by_signature=True)
    x, w = x4096
    for _ in range(2):
        with pytest.raises(ValueError, match="kernel exploded") as info:
            rms_norm(x, w, 1e-6)
        assert any("provider 'prov_a'" in note for note in info.value.__notes__)


@pytest.mark.usefixtures("miss_path")
def test_cache_is_bounded(x4096, monkeypatch):
    monkeypatch.setattr(dispatch, "SIGNATURE_CACHE_LIMIT", 2)
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    for hidden in (8, 16, 32, 64, 128):
        rms_norm(torch.randn(2, hidden), None, 1e-6)
        assert 1 <= len(rms_norm.signature_cache) <= 2


# ---------------------------------------------------------------------- where a miss is decided
def _broken(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    raise ValueError("kernel exploded")


def _count_python_miss_path(monkeypatch, handler=dispatch.choose_and_cache):
    """Make rms_norm's eager call record what its Python miss path does (it computes the signature
    again, then calls choose_and_cache), and its fast call record what it hands to ``handler``
    (None: keep the fast call that register_op made)."""
    namespace = type(rms_norm).__call__.__globals__
    python_path, handled = [], []
    for name, what in (("_ir_signature", "signature"), ("_ir_choose_and_cache", "choose")):
        real = namespace[name]

        def counting(*args, real=real, what=what):
            python_path.append(what)
            return real(*args)

        monkeypatch.setitem(namespace, name, counting)

    def choose(op, key, args, plan):
        handled.append((op, key, args, plan))
        return handler(op, key, args, plan)

    if handler is not None:
        monkeypatch.setitem(namespace, "_ir_fast", _fastpath.make_fast_call(rms_norm, choose))
    return python_path, handled


def test_the_eager_call_leaves_misses_to_its_fast_call(x4096, monkeypatch):
    monkeypatch.setattr(dispatch.STATE, "scopes", {})
    monkeypatch.setattr(dispatch.STATE, "blocks", {})
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    python_path, _ = _count_python_miss_path(monkeypatch, None)
    x, w = x4096
    for _ in range(2):
        rms_norm(x, w, 1e-6)
        with ircore.priority(rms_norm=["prov_b"]):
            rms_norm(x, w, 1e-6)
            plan = dispatch.SCOPE.get().plans["rms_norm"]
    assert python_path == [] and impls.CALLS == ["a", "b"] * 2
    assert list(rms_norm.signature_cache) == list(plan[2]) == [sig(x, w, 1e-6, None)]
    assert rms_norm.signature_cache[sig(x, w, 1e-6, None)][0] == "prov_a" and plan[1][0][0] == "prov_b"


def test_miss_path_fixture_picks_the_path(x4096, monkeypatch, miss_path):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    python_path, _ = _count_python_miss_path(monkeypatch, None)
    rms_norm(*x4096, 1e-6)
    assert python_path == ([] if miss_path == "fast call" else ["signature", "choose"])


def test_the_fast_call_decides_a_miss_outside_scopes(x4096, monkeypatch):
    """Once per signature, with the signature it computed and the process-wide plan when that is
    current (else None: choose_and_cache looks it up); the Python path never runs."""
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    python_path, handled = _count_python_miss_path(monkeypatch)
    x, w = x4096
    for _ in range(3):
        rms_norm(x, w, 1e-6)
    half = (x.half(), w.half(), 1e-6)
    for _ in range(2):
        rms_norm(*half)
    assert python_path == [] and impls.CALLS == ["a"] * 5
    assert [(op, key) for op, key, _, _ in handled] == [(rms_norm, sig(x, w, 1e-6, None)), (rms_norm, sig(*half, None))]
    args = handled[0][2]
    assert args[0] is x and args[1] is w and args[2:] == (1e-6, None)
    assert handled[0][3] is None  # the first call after a change: op._plan was stale
    plan = handled[1][3]  # made by the first call: current, its table the signature cache
    assert plan is rms_norm._plan and plan[0] is dispatch.STATE.generation and plan[2] is rms_norm.signature_cache
    assert set(rms_norm.signature_cache) == {sig(x, w, 1e-6, None), sig(*half, None)}


def test_the_fast_call_decides_a_miss_in_a_scope(x4096, monkeypatch):
    """With the scope's plan, where the choice is remembered (not in the process-wide table)."""
    monkeypatch.setattr(dispatch.STATE, "scopes", {})  # a never-seen scope: its plan is made on entry
    monkeypatch.setattr(dispatch.STATE, "blocks", {})
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    python_path, handled = _count_python_miss_path(monkeypatch)
    x, w = x4096
    with ircore.priority(rms_norm=["prov_b"]):
        for _ in range(3):
            rms_norm(x, w, 1e-6)
        plan = dispatch.SCOPE.get().plans["rms_norm"]
    assert python_path == [] and impls.CALLS == ["b"] * 3
    assert [(op, key, p) for op, key, _, p in handled] == [(rms_norm, sig(x, w, 1e-6, None), plan)]
    assert plan[2] == {sig(x, w, 1e-6, None): plan[1][0]} and plan[1][0][0] == "prov_b"
    assert rms_norm.signature_cache == {}


def test_a_stale_scoped_plan_goes_to_the_python_path(x4096, monkeypatch):
    """The fast call leaves a scope whose plan predates a change to Python (which resolves it)."""
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = x4096
    block = ircore.priority(rms_norm=["prov_a"])
    with block:
        rms_norm(x, w, 1e-6)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)  # the plan is stale now
    python_path, handled = _count_python_miss_path(monkeypatch)
    with block:
        rms_norm(x, w, 1e-6)
    assert python_path == ["signature", "choose"] and handled == []


@pytest.mark.usefixtures("miss_path")
@pytest.mark.parametrize("change", ["set_priority", "bump_generation", "unregister"])
def test_a_change_inside_a_block_is_seen_by_its_next_call(x4096, change):
    """The scope stays current across the change, its plan does not: the next call decides again
    under a new plan (never with the old plan's entries or remembered choices)."""
    pred = Counting()
    rms_norm.register_impl("prov_a", rms_norm_a, supports_args=pred, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    x, w = x4096
    with ircore.priority(rms_norm=["prov_a", "prov_b"]):
        scope = dispatch.SCOPE.get()
        for _ in range(2):
            rms_norm(x, w, 1e-6)
        old = scope.plans["rms_norm"]
        assert pred.calls == 1 and old[2] == {sig(x, w, 1e-6, None): old[1][0]}
        if change == "set_priority":
            ircore.set_priority(silu_and_mul=["native"])  # another op: this op's list is the same
        elif change == "bump_generation":
            dispatch.STATE.bump()
        else:
            rms_norm.unregister_impl("prov_a")  # the old plan's remembered choice is gone
        for _ in range(2):
            rms_norm(x, w, 1e-6)
        new = scope.plans["rms_norm"]
        assert new is not old and new[0] is dispatch.STATE.generation
        assert dispatch.SCOPE.get() is scope
    if change == "unregister":
        assert impls.CALLS == ["a", "a", "b", "b"] and pred.calls == 1
    else:
        assert impls.CALLS == ["a"] * 4 and pred.calls == 2  # asked again once, then remembered
        assert new[2] == {sig(x, w, 1e-6, None): new[1][0]}
    ircore.set_priority(silu_and_mul=None)


def test_a_replaced_generation_says_it_is_stale():
    """The compiled code tells a current stamp from its flag (ircore::is_current_generation):
    only the generation in effect holds True."""
    old = dispatch.STATE.generation
    assert old == [True]
    dispatch.STATE.bump()
    assert old == [False] and dispatch.STATE.generation == [True] and dispatch.STATE.generation is not old


class _AttributeScope:
    """A scope as the fast call's protocol describes it, without __slots__."""

    def __init__(self, plans, priorities):
        self.plans, self.priorities, self.outer = plans, priorities, None


def test_the_fast_call_reads_a_scope_of_another_type(x4096, monkeypatch):
    """`plans` is read from the slot of the scope type it last saw, through getattr for any
    other type; alternating types decide the same as each alone."""
    monkeypatch.setattr(dispatch.STATE, "scopes", {})  # the block's scope: made on entry, its plan current
    monkeypatch.setattr(dispatch.STATE, "blocks", {})
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    rms_norm.register_impl("prov_b", rms_norm_b, cache_by_signature=True)
    python_path, handled = _count_python_miss_path(monkeypatch)
    x, w = x4096
    rms_norm(x, w, 1e-6)  # current process-wide plan: prov_a
    plan = dispatch._shared_plan(rms_norm, ("prov_b", "native"), dispatch.STATE.generation)
    other = _AttributeScope({"rms_norm": plan}, {"rms_norm": ("prov_b",)})
    unnamed = _AttributeScope({}, {})
    block = ircore.priority(rms_norm=["prov_b"])
    for _ in range(2):
        for scope in (other, unnamed):
            token = dispatch.SCOPE.set(scope)
            try:
                rms_norm(x, w, 1e-6)
            finally:
                dispatch.SCOPE.reset(token)
        with block:
            rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a"] + ["b", "a", "b"] * 2 and python_path == []
    # two misses: the process-wide one and the other scope's; the block's scope shares that plan
    assert [p for _, _, _, p in handled] == [None, plan] and block._seen[None][1].plans["rms_norm"] is plan
    assert plan[2] == {sig(x, w, 1e-6, None): plan[1][0]}


def test_a_miss_handler_error_passes_through_the_fast_call(x4096, monkeypatch):
    def refuse(op, key, args, plan):
        raise KeyError("from the handler")

    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    python_path, handled = _count_python_miss_path(monkeypatch, refuse)
    x, w = x4096
    with pytest.raises(KeyError, match="from the handler") as info:
        rms_norm(x, w, 1e-6)
    assert not getattr(info.value, "__notes__", None) and len(handled) == 1 and python_path == []


@pytest.mark.parametrize("scoped", [False, True], ids=["global", "scope"])
def test_bad_input_on_a_miss_raises_the_careful_paths_error(miss_path, scoped):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = torch.randn(4, 64), torch.ones(32)
    assert sig(x, w, 1e-6, None) is not None  # a signature, so the call is a miss, not declined
    with pytest.raises(InvalidArgumentError) as careful:
        rms_norm.check_args(x, w, 1e-6, None)
    block = ircore.priority(rms_norm=["prov_a"]) if scoped else contextlib.nullcontext()
    for _ in range(2):
        with block, pytest.raises(InvalidArgumentError) as info:
            rms_norm(x, w, 1e-6)
        assert str(info.value) == str(careful.value) and not getattr(info.value, "__notes__", None)
    assert impls.CALLS == [] and rms_norm.signature_cache == {}


@pytest.mark.parametrize("scoped", [False, True], ids=["global", "scope"])
def test_a_failing_implementation_gets_one_note_on_a_miss_and_a_hit(x4096, miss_path, scoped):
    rms_norm.register_impl("prov_a", _broken, cache_by_signature=True)
    x, w = x4096
    block = ircore.priority(rms_norm=["prov_a"]) if scoped else contextlib.nullcontext()
    for _ in range(2):  # the miss remembers prov_a before running it: the second call is a hit
        with block, pytest.raises(ValueError, match="kernel exploded") as info:
            rms_norm(x, w, 1e-6)
        assert len(info.value.__notes__) == 1 and "provider 'prov_a'" in info.value.__notes__[0]
    assert len(rms_norm.signature_cache) == (0 if scoped else 1)


@pytest.mark.parametrize("scoped", [False, True], ids=["global", "scope"])
def test_debug_log_on_a_miss(x4096, caplog, miss_path, scoped):
    rms_norm.register_impl("prov_a", rms_norm_a, cache_by_signature=True)
    x, w = x4096
    block = ircore.priority(rms_norm=["prov_a"]) if scoped else contextlib.nullcontext()
    with caplog.at_level(logging.DEBUG, logger="ircore"), block:
        rms_norm(x, w, 1e-6)
    assert [r.getMessage() for r in caplog.records] == ["rms_norm: running prov_a"]


def test_fast_call_holds_its_op_and_handler_for_the_gc():
    fast = _fastpath.make_fast_call(rms_norm)
    referents = gc.get_referents(fast)
    assert any(r is rms_norm for r in referents) and any(r is dispatch.choose_and_cache for r in referents)
    with pytest.raises(TypeError, match="choose must be callable or None"):
        _fastpath.make_fast_call(rms_norm, "not callable")


# ---------------------------------------------------------------------- declaration and loading
def test_op_with_unsupported_parameter_type_cannot_promise():
    def native(x: torch.Tensor, mode: str) -> torch.Tensor:
        return x.clone()

    with pytest.raises(OpDeclarationError, match=r"cache_by_signature=True needs every parameter"):
        ircore.register_op(native, name="op", cache_by_signature=True)


def test_build_for_another_torch_is_not_loaded(tmp_path, monkeypatch):
    meta = tmp_path / "_signature_build.json"
    meta.write_text('{"torch": "0.0.1"}')
    monkeypatch.setattr(_signature, "_META", meta)
    fn, reason = _signature._load()
    assert fn is None and reason == (
        f"built for torch 0.0.1, running {torch.__version__}: reinstall ircore to rebuild"
    )


@pytest.mark.slow
def test_without_the_helper_every_call_takes_the_careful_path():
    code = (
        "import torch, ircore\n"
        "from ircore import _signature\n"
        "calls = []\n"
        "def pred(x, weight, epsilon, variance_size):\n"
        "    calls.append(1)\n"
        "    return True\n"
        "def impl(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float,\n"
        "         variance_size: int | None = None) -> torch.Tensor:\n"
        "    return x * 2\n"
        "ircore.ops.rms_norm.register_impl('p', impl, supports_args=pred, cache_by_signature=True)\n"
        "x = torch.ones(2, 8)\n"
        "for _ in range(3):\n"
        "    assert torch.equal(ircore.ops.rms_norm(x, None, 1e-6), x * 2)\n"
        "for _ in range(2):  # priority blocks through the pure-Python twin\n"
        "    with ircore.priority(rms_norm=['native']):\n"
        "        assert not torch.equal(ircore.ops.rms_norm(x, None, 1e-6), x * 2)\n"
        "    assert ircore.get_priority('rms_norm') == ['p', 'native']\n"
        "print(_signature.signature, _signature.unavailable_reason, len(calls))\n"
    )
    env = {**os.environ, "IRCORE_NO_SIGNATURE": "1", "IRCORE_PROVIDERS": "none"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None disabled by IRCORE_NO_SIGNATURE 3"


def test_real_numbers_are_told_apart_by_sign_only():
    assert _signature.spec_for([float, float | None]) == b"fg"
    assert _signature.signature(b"fg", 1e-6, None) == _signature.signature(b"fg", 3, None) == b"\x10\xff"
    assert _signature.signature(b"fg", -1e-6, 2.0) == b"\x11\x10"
    assert _signature.signature(b"f", float("nan")) == b"\x11"
    assert _signature.signature(b"f", 2**63 - 1) == _signature.signature(b"f", 2**63 - 1) == b"\x10"
    assert _signature.signature(b"f", -(2**63)) == b"\x11"
    # an int beyond 64 bits is refused by the careful path (ircore._argtypes), so never cached
    for huge in (-(10**30), 2**63, 2**64, 10**400):
        assert _signature.signature(b"f", huge) is None
        assert _signature.signature(b"i", huge) is None
    for not_real in (None, "1", True, torch.tensor(1.0)):
        assert _signature.signature(b"f", not_real) is None
