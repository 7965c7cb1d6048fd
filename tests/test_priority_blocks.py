"""``with ircore.priority(...)`` blocks: what entering one again reuses, and that the compiled
enter/exit (ircore/csrc/scope_block.cpp) and its pure-Python twin behave the same."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

import ircore
from ircore import _signature, dispatch

from . import impls
from .impls import rms_norm_a, rms_norm_b

rms_norm = ircore.ops.rms_norm
needs_helper = pytest.mark.skipif(
    _signature.BlockBase is None, reason=f"call-signature helper not loaded: {_signature.unavailable_reason}"
)


@pytest.fixture(params=["compiled", "python"])
def blocks(request, monkeypatch):
    """Run the test with the compiled block base, and again with the pure-Python twin."""
    if request.param == "compiled":
        if _signature.BlockBase is None:
            pytest.skip(f"call-signature helper not loaded: {_signature.unavailable_reason}")
    else:
        monkeypatch.setattr(dispatch.PriorityBlock, "__enter__", dispatch._PyBlockBase.__enter__)
        monkeypatch.setattr(dispatch.PriorityBlock, "__exit__", dispatch._PyBlockBase.__exit__)
        monkeypatch.setattr(dispatch, "_request_key", dispatch._py_request_key)
    monkeypatch.setattr(dispatch.STATE, "blocks", {})  # blocks made under the other variant
    impls.CALLS.clear()
    return request.param


@pytest.fixture
def two_providers():
    rms_norm.register_impl("prov_a", rms_norm_a)
    rms_norm.register_impl("prov_b", rms_norm_b)


def test_a_block_entered_again_finds_the_same_scope(blocks, two_providers):
    scopes = []
    for _ in range(3):
        with ircore.priority(rms_norm=["prov_b"]):  # written inline: a lookup, not a new object
            scopes.append(dispatch.SCOPE.get())
    with ircore.priority({"rms_norm": ("prov_b",)}):
        scopes.append(dispatch.SCOPE.get())
    assert all(scope is scopes[0] for scope in scopes)
    assert ircore.priority(rms_norm=["prov_b"]) is ircore.priority(rms_norm=("prov_b",))
    assert dispatch.SCOPE.get() is None
    ircore.set_priority(rms_norm=["prov_a"])  # a change: the next entry resolves again
    with ircore.priority(rms_norm=["prov_b"]):
        assert dispatch.SCOPE.get() is scopes[0]  # same contents and enclosing scope: same object
        assert dispatch.SCOPE.get().plans.get("rms_norm", (None,))[0] is not dispatch.STATE.generation


def test_a_new_scope_resolves_its_plans_on_entry(blocks, two_providers, monkeypatch):
    """The plans of the ops a never-seen block names are made when it is entered, so its first
    call finds them (a signature miss, as outside any block) and makes none."""
    monkeypatch.setattr(dispatch.STATE, "scopes", {})  # never seen: also not by the other variant
    x, w = torch.randn(2, 64), torch.ones(64)
    with ircore.priority(rms_norm=["prov_b"], silu_and_mul=["native"]):
        scope = dispatch.SCOPE.get()
        assert set(scope.plans) == {"rms_norm", "silu_and_mul"}
        plan = scope.plans["rms_norm"]
        assert plan[0] is dispatch.STATE.generation
        assert [entry[0] for entry in plan[1]] == ["prov_b", "native"]
        assert plan[2] == {}
        rms_norm(x, w, 1e-6)
        # the choice, remembered under the call's signature; without the signature helper
        # (IRCORE_NO_SIGNATURE=1) there is no signature and every call takes the careful path
        remembered = 1 if _signature.signature is not None else 0
        assert scope.plans["rms_norm"] is plan and len(plan[2]) == remembered
    assert impls.CALLS == ["b"]


def test_a_scope_has_a_plan_for_exactly_the_ops_it_names(blocks, two_providers, monkeypatch):
    """The fast call takes an op missing from ``scope.plans`` to be one the scope does not name
    (ircore/csrc/fast_call.cpp): nesting and removing a setting keep the two in step."""
    monkeypatch.setattr(dispatch.STATE, "scopes", {})
    x, w = torch.randn(2, 64), torch.ones(64)

    def named():
        scope = dispatch.SCOPE.get()
        assert set(scope.plans) == set(scope.priorities)
        return set(scope.plans)

    with ircore.priority(rms_norm=["prov_b"], silu_and_mul=["native"]):
        assert named() == {"rms_norm", "silu_and_mul"}
        with ircore.priority(rms_norm=None):
            assert named() == {"silu_and_mul"}
            rms_norm(x, w, 1e-6)  # not named: the process-wide priority
            ircore.set_priority(rms_norm=["prov_b"])  # a change: plans are made again when used
            rms_norm(x, w, 1e-6)
            assert named() == {"silu_and_mul"}
            with ircore.priority(rms_norm=["prov_a"]):
                rms_norm(x, w, 1e-6)
                assert named() == {"rms_norm", "silu_and_mul"}
        rms_norm(x, w, 1e-6)
        assert named() == {"rms_norm", "silu_and_mul"}
    ircore.set_priority(rms_norm=None)
    assert impls.CALLS == ["a", "b", "a", "b"]


def test_a_wildcard_scope_has_a_plan_for_every_op(blocks, two_providers, monkeypatch):
    """``*`` names every op, so the scope holds a plan for each (the fast call looks only at
    ``plans``): none of its calls may take a choice the process-wide plan remembered."""
    monkeypatch.setattr(dispatch.STATE, "scopes", {})
    x, w = torch.randn(2, 64), torch.ones(64)
    rms_norm(x, w, 1e-6)  # remembered process-wide: prov_a
    scopes = []
    for _ in range(2):
        with ircore.priority(**{"*": ["prov_b"], "silu_and_mul": ["native"]}):
            scope = dispatch.SCOPE.get()
            scopes.append(scope)
            assert set(scope.plans) == set(scope.priorities) == set(ircore.all_ops())
            assert [entry[0] for entry in scope.plans["rms_norm"][1]] == ["prov_b", "native"]
            assert [entry[0] for entry in scope.plans["silu_and_mul"][1]] == ["native"]
            assert [entry[0] for entry in scope.plans["fused_add_rms_norm"][1]] == ["native"]  # skipped
            rms_norm(x, w, 1e-6)
            with ircore.priority(rms_norm=["prov_a"]):  # nested: its op entry, the outer '*' for the rest
                inner = dispatch.SCOPE.get()
                assert set(inner.plans) == set(ircore.all_ops())
                assert inner.priorities["fused_add_rms_norm"] == ("prov_b", "native")
                rms_norm(x, w, 1e-6)
    assert scopes[0] is scopes[1]  # entered again: the same scope
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["a", "b", "a", "b", "a", "a"]


def test_nested_blocks_and_the_same_block_inside_itself(blocks, two_providers):
    x, w = torch.randn(2, 64), torch.ones(64)
    outer = ircore.priority(rms_norm=["prov_b"])
    with outer:
        with ircore.priority(rms_norm=None):  # removes the enclosing block's setting
            assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]
            with outer:
                rms_norm(x, w, 1e-6)
                assert ircore.get_priority("rms_norm") == ["prov_b", "native"]
            assert ircore.get_priority("rms_norm") == ["prov_a", "prov_b", "native"]
            rms_norm(x, w, 1e-6)
        rms_norm(x, w, 1e-6)
    rms_norm(x, w, 1e-6)
    assert impls.CALLS == ["b", "a", "b", "a"]
    assert dispatch.SCOPE.get() is None


def test_an_exception_leaves_the_block(blocks, two_providers):
    with pytest.raises(KeyError):
        with ircore.priority(rms_norm=["prov_b"]):
            raise KeyError("inside")
    assert dispatch.SCOPE.get() is None and ircore.get_priority("rms_norm")[0] == "prov_a"


def test_one_decorated_function_in_threads_and_tasks(blocks, two_providers):
    @ircore.priority(rms_norm=["prov_b"])
    def inside():
        return ircore.get_priority("rms_norm")[0]

    results: list[str] = []
    barrier = threading.Barrier(4)

    def worker():
        barrier.wait()
        results.extend(inside() for _ in range(200))
        results.append(ircore.get_priority("rms_norm")[0])  # after: the thread's own priority

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("prov_b") == 800 and results.count("prov_a") == 4

    async def task(order):
        with ircore.priority(rms_norm=order):
            await asyncio.sleep(0)
            return ircore.get_priority("rms_norm")[0]

    async def both():
        return await asyncio.gather(task(["prov_a"]), task(["prov_b"]), task(["native"]))

    assert asyncio.run(both()) == ["prov_a", "prov_b", "native"]


def test_bad_requests_are_refused_on_every_entry(blocks, two_providers):
    for request in ({"rms_norm": ["nope"]}, {"rms_norm": [["prov_a"]]}, {"group_norm": ["prov_a"]}):
        block = ircore.priority(request)
        for _ in range(2):
            with pytest.raises(ircore.PriorityError, match=r"ircore.priority\(\): unknown"):
                with block:
                    pass
    assert dispatch.SCOPE.get() is None


def test_a_provider_list_the_caller_changes_later_does_not_change_the_block(blocks, two_providers):
    names = ["prov_b"]
    block = ircore.priority(rms_norm=names)
    names[0] = "prov_a"
    with block:
        assert ircore.get_priority("rms_norm") == ["prov_b", "native"]


@needs_helper
def test_request_key_twins_agree():
    cases = [
        lambda: {"rms_norm": ["a", "b"]},
        lambda: {"rms_norm": ("a",), "silu_and_mul": None},
        lambda: {"rms_norm": "a,b"},
        lambda: {"rms_norm": iter(["a"])},
        dict,
    ]
    for case in cases:
        assert _signature.request_key(case()) == dispatch._py_request_key(case()), case()
    assert _signature.request_key({"rms_norm": iter(["a"])}) == ("rms_norm", ("a",))
    for unhashable in ({"rms_norm": [["a"]]}, {"rms_norm": 3}, {"rms_norm": [{"a": 1}]}):
        assert _signature.request_key(unhashable) is None
        assert dispatch._py_request_key(unhashable) is None
    with pytest.raises(TypeError, match="request_key"):
        _signature.request_key(["rms_norm"])


@needs_helper
def test_block_base_without_its_init_raises_instead_of_crashing():
    class Broken(_signature.BlockBase):
        def __init__(self):
            pass  # forgets BlockBase.__init__

    with pytest.raises(RuntimeError, match=r"was not initialised \(BlockBase.__init__ not called\)"):
        with Broken():
            pass


def test_a_stale_build_of_the_helper_is_not_loaded(monkeypatch):
    import importlib
    import types

    stale = types.ModuleType("ircore._signature_ext")
    stale.signature = lambda *a: None  # built from the sources before the fast call existed
    if not _signature._META.exists():
        pytest.skip("the helper is not built here")
    monkeypatch.delenv("IRCORE_NO_SIGNATURE", raising=False)
    monkeypatch.setattr(importlib, "import_module", lambda name: stale)
    module, reason = _signature._load()
    assert module is None
    assert reason == "ircore._signature_ext lacks FastCall, BlockBase, request_key: reinstall ircore to rebuild it"
