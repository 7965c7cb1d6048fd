"""What tracing recorded with ``trace_implementations`` on: per op, the implementations traced.

Kept here, at the bottom of the package, so that the ops (which record) and the compile report
(which reads, :func:`ircore.compile.report`) need not import each other. Under Dynamo the record
is made once per trace: :func:`record` is marked ``assume_constant_result`` (ircore._fastpath),
so Dynamo runs it for real while tracing, and never again when the compiled graph runs.
"""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_COUNTS: dict[str, Counter[str]] = {}


def record(op: str, provider: str) -> bool:
    """One traced call of ``op`` recorded as ``provider``'s implementation (or ``native``)."""
    with _lock:
        _COUNTS.setdefault(op, Counter())[provider] += 1
    return True


def counts() -> dict[str, Counter[str]]:
    with _lock:
        return {op: Counter(c) for op, c in _COUNTS.items()}


def reset() -> None:
    with _lock:
        _COUNTS.clear()
