"""ircore's post-grad pass: a user's pass, the fusions, lowering; and the cache key that covers them."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch._inductor import custom_graph_pass

from ircore import dispatch
from ircore._version import __version__
from ircore.compile import _fusion, _lowering, _report
from ircore.compile._settings import effective_fusions
from ircore.op import all_ops
from ircore.providers._manager import MANAGER

# 2.13 hands inference-aware passes ``is_inference``; 2.11 has no such base class.
_Base: Any = getattr(custom_graph_pass, "CustomInferenceAwareGraphPass", custom_graph_pass.CustomGraphPass)


@functools.cache
def _source_hash() -> str:
    """ircore's own code (the passes, and the ops and dispatch they lower by): a change to it must
    miss the FX graph cache, even without a new version."""
    files = sorted(Path(__file__).parents[1].rglob("*.py"))
    return custom_graph_pass.get_hash_for_files(tuple(str(f) for f in files)).hex()


def lowering_state() -> dict[str, Any]:
    """Everything the lowering's choices depend on, outside the graph itself.

    Whether batch-invariant mode is on (it changes the plans, and native's form). Per op, the
    providers its process-wide plan (or invariant plan) walks (priority after configuration, blocked and
    inactive providers left out), each with its distribution, version, state and a hash of its
    implementation's source; native ends every plan.
    """
    dispatch.ensure_loaded()
    ops = {}
    invariant = dispatch.batch_invariant_active()
    for name, op in sorted(all_ops().items()):
        plan = [entry.provider for entry in dispatch.lowering_plan(op)]
        ops[name] = [[p, op.impls[p].uuid() if p in op.impls else "native"] for p in plan]
    providers = {
        name: [r.distribution, r.version, r.state.value] for name, r in sorted(MANAGER.records.items())
    }
    return {
        "ircore": __version__,
        "torch": torch.__version__,
        "ops": ops,
        "providers": providers,
        "batch_invariant": invariant,
    }


class IrcorePostGradPass(_Base):
    """User passes -> fusions -> topological sort -> lowering -> dead-code elimination."""

    def __init__(
        self,
        fusions: Any = None,
        user_passes: Sequence[Any] = (),
        leave_to_inductor: Mapping[str, int] | None = None,
    ) -> None:
        self.fusions = fusions
        self.user_passes = tuple(user_passes)
        self.leave_to_inductor = dict(leave_to_inductor or {})
        #: whether the pass ran on a graph (it does not on one served from the FX graph cache)
        self.ran = False
        #: the :func:`lowering_state` the last cache key (:meth:`uuid`) was computed from
        self.key_state: dict[str, Any] | None = None

    def __call__(self, graph: torch.fx.Graph, is_inference: bool = True) -> None:
        self.ran = True
        for user_pass in self.user_passes:
            if isinstance(user_pass, _Base) and _Base is not custom_graph_pass.CustomGraphPass:
                user_pass(graph, is_inference=is_inference)
            else:
                user_pass(graph)
        start = time.perf_counter()
        switches = effective_fusions(self.fusions)
        _lowering.functionalize_maybe_inplace(graph)
        counts: Counter[str] = Counter()
        for name, fuse in _fusion.FUSION_PASSES.items():
            if switches[name]:
                counts[name] += fuse(graph)
        if counts.total():
            from torch._inductor.pattern_matcher import stable_topological_sort

            stable_topological_sort(graph)
        chosen, left = _lowering.lower(graph, self.leave_to_inductor)
        graph.eliminate_dead_code()
        _report.record_graph(counts, chosen, left, time.perf_counter() - start)

    def uuid(self) -> str | None:
        """Changes with anything that can change what this pass does (Inductor's cache key)."""
        users = []
        for user_pass in self.user_passes:
            user_uuid = user_pass.uuid() if hasattr(user_pass, "uuid") else None
            if user_uuid is None:
                return None  # as for the user's pass alone: no caching
            users.append(repr(user_uuid))
        self.key_state = lowering_state()
        key = {
            "source": _source_hash(),
            "fusions": effective_fusions(self.fusions),
            "lowering": self.key_state,
            "leave_to_inductor": self.leave_to_inductor,
            "user_passes": users,
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
