"""What ircore's compile passes did: fusion matches and lowering choices, counted per process."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ircore import _traced


@dataclass
class CompileReport:
    """Counts since the process started (or the last :func:`reset_report`).

    ``fusions``: matches per fusion. ``lowered``: per op, how many nodes went to each provider.
    ``last_lowering``: ``{node name: provider}`` of the most recent graph. ``left``: ircore nodes
    the lowering could not replace (they dispatch at run time). ``graphs``: graphs the pass ran
    on. ``seconds``: time spent in the pass.

    A graph that the ``ircore`` backend got from Inductor's FX graph cache (a later process, or a
    compile after ``torch._dynamo.reset()``) runs no pass, so it adds nothing to the counts
    above; it adds one to ``cached``, and its plan to ``cached_plans``: per op the graph holds
    (and per op a switched-on fusion could have made of them), the providers the lowering walks,
    in order, ``native`` last -- the plan the cache key was computed from, so the plan the graph
    was lowered with. Which provider each node got is not known (that was decided in the
    process that compiled it, by the same rule as :func:`ircore.explain`).

    ``donations``: ``maybe_inplace`` calls the ``ircore`` backend checked for reads of a donated
    tensor after the call (every graph it compiles, cached ones included).

    ``traced``: with ``trace_implementations`` on (any backend, ``make_fx`` too), per op how many
    traced calls recorded each provider's implementation (``native``: its aten ops) in place of
    ``torch.ops.ircore.<op>``; once per trace, not per run.
    """

    graphs: int = 0
    fusions: Counter[str] = field(default_factory=Counter)
    lowered: dict[str, Counter[str]] = field(default_factory=dict)
    last_lowering: dict[str, str] = field(default_factory=dict)
    left: int = 0
    #: wall time spent in ircore's pass (fusions and lowering), in seconds
    seconds: float = 0.0
    #: graphs served from Inductor's FX graph cache (the pass did not run on them)
    cached: int = 0
    #: one ``{op: [provider, ..., "native"]}`` per cached graph, in the order they were served
    cached_plans: list[dict[str, list[str]]] = field(default_factory=list)
    #: maybe_inplace calls checked for a read of their donated arguments afterwards
    donations: int = 0
    #: with trace_implementations on: per op, how many traced calls recorded each implementation
    traced: dict[str, Counter[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "graphs": self.graphs,
            "fusions": dict(self.fusions),
            "lowered": {op: dict(c) for op, c in self.lowered.items()},
            "last_lowering": dict(self.last_lowering),
            "left": self.left,
            "seconds": self.seconds,
            "cached": self.cached,
            "cached_plans": [{op: list(p) for op, p in plan.items()} for plan in self.cached_plans],
            "donations": self.donations,
            "traced": {op: dict(c) for op, c in self.traced.items()},
        }


_lock = threading.Lock()
_REPORT = CompileReport()


def report() -> CompileReport:
    """A snapshot of what the passes did so far in this process."""
    with _lock:
        return CompileReport(
            _REPORT.graphs,
            Counter(_REPORT.fusions),
            {op: Counter(c) for op, c in _REPORT.lowered.items()},
            dict(_REPORT.last_lowering),
            _REPORT.left,
            _REPORT.seconds,
            _REPORT.cached,
            [{op: list(p) for op, p in plan.items()} for plan in _REPORT.cached_plans],
            _REPORT.donations,
            _traced.counts(),
        )


def reset_report() -> None:
    """Start counting from zero."""
    global _REPORT
    with _lock:
        _REPORT = CompileReport()
    _traced.reset()


def record_graph(
    fusions: Counter[str], lowering: dict[str, tuple[str, str]], left: int, seconds: float
) -> None:
    """Add one graph's results; ``lowering`` maps node name -> (op, provider)."""
    with _lock:
        _REPORT.graphs += 1
        _REPORT.seconds += seconds
        _REPORT.fusions.update(fusions)
        for op, provider in lowering.values():
            _REPORT.lowered.setdefault(op, Counter())[provider] += 1
        _REPORT.last_lowering = {node: provider for node, (_, provider) in lowering.items()}
        _REPORT.left += left


def record_cached(plan: dict[str, list[str]]) -> None:
    """Add one graph served from the FX graph cache, with the plan its cache key covered."""
    with _lock:
        _REPORT.cached += 1
        _REPORT.cached_plans.append({op: list(providers) for op, providers in plan.items()})


def record_donations(calls: int) -> None:
    """Add the ``maybe_inplace`` calls of one graph checked for reads after their donation."""
    with _lock:
        _REPORT.donations += calls
