"""The ``ircore`` backend: Inductor with ircore's pass, and a guard on what it was lowered for.

Dynamo recompiles a function that calls ``ircore.ops.*`` after any priority, configuration or
provider change (it guards on ``STATE.version``, :mod:`ircore._state`). Two cases it cannot see are handled
here, at run time, by running the graph uncompiled (its ircore ops then dispatch eagerly, by the
rule in force): a ``with ircore.priority(...)`` scope that changes an op of the graph (a context
variable, which Dynamo cannot guard on), a graph lowered inside an ``ircore.batch_invariant()``
block that runs outside one or the other way round (the same), and a graph that calls
``torch.ops.ircore.*`` directly and was compiled before a change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ircore import dispatch
from ircore._state import SCOPE, STATE
from ircore.compile import _report
from ircore.compile._settings import effective_fusions
from ircore.op import get_op

_log = logging.getLogger("ircore")


def _ircore_ops_in(gm: Any) -> list[str]:
    """Names of the ircore ops a Dynamo graph calls (as overloads or as packets)."""
    names = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        packet = getattr(node.target, "overloadpacket", node.target)
        qualified = getattr(packet, "_qualified_op_name", "")
        if qualified.startswith("ircore::"):
            names.add(qualified.split("::", 1)[1])
    return sorted(names)


def _user_passes(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _cache_hits() -> int:
    """Graphs Inductor has served from its FX graph cache so far in this process.

    Inductor counts each hit (``fxgraph_cache_hit``, torch 2.11 to 2.13), also those loaded
    through AOTAutograd's cache (``autograd_cache_hit``); a compile whose count grew while
    ircore's pass did not run was served from the cache.
    """
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"])


def _cached_plan(post_grad: Any, ops: list[str]) -> dict[str, list[str]]:
    """Per op of the graph (and op its fusions could make), the providers its cache key names."""
    from ircore.compile._fusion import FUSION_MAKES
    from ircore.compile._passes import lowering_state

    state = post_grad.key_state or lowering_state()  # the key's own, else the same state now
    switches = effective_fusions(post_grad.fusions)
    names = set(ops)
    for fusion, makes in FUSION_MAKES.items():
        if switches.get(fusion):
            names |= {one for source, made in makes.items() if source in ops for one in made}
    plans: dict[str, list[list[str]]] = state["ops"]
    return {name: [provider for provider, _ in plans[name]] for name in sorted(names) if name in plans}


def compile_graph(
    gm: Any,
    example_inputs: Sequence[Any],
    *,
    mode: str | None,
    options: Mapping[str, Any] | None,
    fusions: Any,
    leave_to_inductor: Mapping[str, int] | None = None,
) -> Callable[..., Any]:
    """``compile_fx`` with ircore's post-grad pass in ``post_grad_custom_post_pass``."""
    import torch._inductor.config as inductor_config
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    from ircore.compile._donation import check_donations, remove_dead_probes
    from ircore.compile._passes import IrcorePostGradPass

    dispatch.ensure_loaded()
    remove_dead_probes(gm)
    _report.record_donations(check_donations(gm))
    patches = dict(list_mode_options(mode)) if mode else {}
    patches.update(options or {})
    user = patches.pop("post_grad_custom_post_pass", inductor_config.post_grad_custom_post_pass)
    post_grad = patches["post_grad_custom_post_pass"] = IrcorePostGradPass(
        fusions, _user_passes(user), leave_to_inductor
    )
    ops = _ircore_ops_in(gm)
    version = STATE.version
    lists = {name: dispatch.effective_priority(get_op(name), None)[0] for name in ops}
    invariant = dispatch.batch_invariant_active()
    hits = _cache_hits()
    compiled: Callable[..., Any] = compile_fx(gm, example_inputs, config_patches=patches)  # type: ignore[assignment]
    if not post_grad.ran and _cache_hits() > hits:
        _report.record_cached(_cached_plan(post_grad, ops))
    if not ops:
        return compiled
    return _guarded(compiled, gm, version, lists, invariant)


def _guarded(
    compiled: Any, gm: Any, version: int, lists: dict[str, tuple[str, ...]], invariant: bool = False
) -> Callable[..., Any]:
    """``compiled``, or ``gm`` run eagerly when the lowering no longer matches the rule in force."""
    state, scope_var = STATE, SCOPE
    warned: set[str] = set()

    def stale() -> bool:
        scope = scope_var.get()
        if state.version != version:
            why = "ircore's configuration changed after this graph was compiled (call torch._dynamo.reset())"
        elif dispatch.batch_invariant_active(scope) != invariant:
            why = (
                "it was lowered in batch-invariant mode and runs outside it"
                if invariant
                else "it was lowered outside batch-invariant mode and runs inside an "
                "ircore.batch_invariant() block"
            )
        elif scope is not None and any(
            dispatch.names_op(scope, name) and dispatch.effective_priority(get_op(name), scope)[0] != names
            for name, names in lists.items()
        ):
            why = "an ircore.priority() scope changes an op of this graph"
        else:
            return False
        if why not in warned:
            warned.add(why)
            _log.warning("compiled graph with ircore ops %s runs uncompiled: %s", sorted(lists), why)
        return True

    def run(*args: Any) -> Any:
        if (state.version != version or scope_var.get() is not None or invariant) and stale():
            return gm(*args)
        return compiled(*args)

    return run
