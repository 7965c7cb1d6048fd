"""What a provider's code may change: its own registrations, through its own registrar.

ircore imports each provider and runs its hooks inside :func:`provider_code`. Every public way to
change dispatch (``IrOp.register_impl`` and ``unregister_impl``, ``Registrar.commit``,
``ircore.set_priority``, ``ircore.configure``) first calls :func:`refuse_inside_provider`: inside
a provider's code that records the attempt on the run, so the provider is rejected even if it
swallows the error, and raises :class:`~ircore.errors.ProviderIsolationError`. The run also
snapshots what the provider must leave alone (every op's implementations, the priority
settings), so a change made around the public API (``op.impls[...] = ...``) is found and undone
the same way.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from ircore.errors import ProviderIsolationError

_IRCORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_RULE = (
    "a provider registers only through the registrar its ircore_register hook receives, and "
    "changes neither other providers' registrations nor the configuration"
)


def caller_location() -> str:
    """``file:line`` of the innermost frame outside the ircore package: who called ircore."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_IRCORE_DIR):
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _dispatch_snapshot() -> tuple[Any, ...]:
    """Every op's implementations and every priority setting, as they are now."""
    # Imported here: op and dispatch import this module.
    from ircore import dispatch
    from ircore.op import all_ops

    state = dispatch.STATE
    return (
        {name: dict(op.impls) for name, op in all_ops().items()},
        dict(state.api_priority),
        [(layer.source, dict(layer.priorities)) for layer in state.layers],
        {name: dict(ranks) for name, ranks in state.ranks.items()},
        dict(state.blocked),
    )


# What each part of a snapshot is called in a rejected provider's reason.
_SNAPSHOT_PARTS = (
    "implementations of {ops}",
    "priority settings",
    "configured priorities",
    "providers' default ranks",
    "disabled providers",
)


def _restore(snapshot: tuple[Any, ...]) -> None:
    from ircore import dispatch
    from ircore.op import all_ops

    impls, api_priority, layers, ranks, blocked = snapshot
    for name, op in all_ops().items():
        op.impls.clear()
        op.impls.update(impls.get(name, {}))
    state = dispatch.STATE
    state.api_priority, state.ranks, state.blocked = dict(api_priority), dict(ranks), dict(blocked)
    state.layers = [dispatch.PriorityLayer(source, dict(priorities)) for source, priorities in layers]
    dispatch.bump_generation()


class ProviderRun:
    """One provider's import and hooks: where it is, and what it tried that it may not.

    A plain class: a dataclass would cost ~0.7 ms of ``import ircore`` to create.
    """

    def __init__(
        self, provider: str, during: str = "while being imported", before: tuple[Any, ...] = ()
    ) -> None:
        self.provider = provider
        self.during = during
        self.refused: list[str] = []
        self.before = before

    def __repr__(self) -> str:
        return f"ProviderRun(provider={self.provider!r}, during={self.during!r}, refused={self.refused!r})"

    def verdict(self) -> str | None:
        """Why the provider must be rejected (the first refused call, or what it changed), or None."""
        if self.refused:
            more = len(self.refused) - 1
            return self.refused[0] + (f" (and {more} more refused call(s))" if more else "")
        now = _dispatch_snapshot()
        if now == self.before:
            return None
        old_impls, new_impls = self.before[0], now[0]
        changed_ops = sorted(
            name for name in old_impls.keys() | new_impls.keys() if old_impls.get(name) != new_impls.get(name)
        )
        parts = [
            part.format(ops=", ".join(changed_ops))
            for part, old, new in zip(_SNAPSHOT_PARTS, self.before, now)
            if old != new
        ]
        return f"changed the {' and the '.join(parts)} directly, while ircore loaded it; {_RULE} (all undone)"

    def undo(self) -> None:
        """Put back everything the snapshot holds (a no-op when nothing changed)."""
        if _dispatch_snapshot() != self.before:
            _restore(self.before)


_RUNNING: ContextVar[ProviderRun | None] = ContextVar("ircore_provider_code", default=None)


def current() -> ProviderRun | None:
    """The provider whose import or hook is running in this context, if any."""
    return _RUNNING.get()


@contextlib.contextmanager
def provider_code(provider: str) -> Iterator[ProviderRun]:
    """Run a provider's import and hooks under the rules above; the caller judges ``run.verdict()``."""
    run = ProviderRun(provider, before=_dispatch_snapshot())
    token = _RUNNING.set(run)
    try:
        yield run
    finally:
        _RUNNING.reset(token)


def refuse_inside_provider(action: str) -> None:
    """Raise (and record) if a provider's code is running here: ``action`` is not its to take."""
    run = _RUNNING.get()
    if run is None:
        return
    message = f"called {action} (at {caller_location()}, {run.during}); {_RULE}"
    run.refused.append(message)
    raise ProviderIsolationError(f"provider {run.provider!r} {message}")
