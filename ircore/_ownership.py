"""What a provider's code may change: its own registrations, through its own registrar.

ircore imports each provider and runs its hooks inside :func:`provider_code`. Every public way to
change dispatch (``IrOp.register_impl`` and ``unregister_impl``, ``Registrar.commit``,
``ircore.set_priority``, ``ircore.configure``) first calls :func:`refuse_inside_provider`: inside
a provider's code that records the attempt on the run, so the provider is rejected even if it
swallows the error, and raises :class:`~ircore.errors.ProviderIsolationError`. The run also
snapshots what the provider must leave alone (the op table, every op's implementations, the
priority settings: ``ircore._state.Snapshot``), so a change made around the public API
(``op.impls[...] = ...``) is found and undone the same way.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from types import FrameType

from ircore._state import STATE, Snapshot
from ircore.errors import ProviderIsolationError

_IRCORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_RULE = (
    "a provider registers only through the registrar its ircore_register hook receives, and "
    "changes neither other providers' registrations nor the configuration"
)
_OP_LIBRARY_RULE = (
    "an op library declares ops (ircore.register_op) and changes neither implementations nor the "
    "configuration"
)


def caller_location() -> str:
    """``file:line`` of the innermost frame outside the ircore package: who called ircore."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_IRCORE_DIR):
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


# What each part of ``Snapshot.settings()`` is called in a rejected provider's reason.
_SNAPSHOT_PARTS = (
    "declared ops ({ops}: declare ops through an `ircore.ops` entry point, not from a provider)",
    "implementations of {ops}",
    "priority settings",
    "configured priorities",
    "providers' default ranks",
    "disabled providers",
)


class ProviderRun:
    """One provider's (or op library's) import and hooks: where it is, what it tried that it may not.

    An op library (an ``ircore.ops`` entry point) may declare ops; a provider may not. A plain
    class: a dataclass would cost ~0.7 ms of ``import ircore`` to create.
    """

    def __init__(
        self,
        provider: str,
        during: str = "while being imported",
        before: Snapshot | None = None,
        declares_ops: bool = False,
    ) -> None:
        self.provider = provider
        self.during = during
        self.refused: list[str] = []
        self.before = STATE.snapshot() if before is None else before
        self.declares_ops = declares_ops
        self.kind = "op library" if declares_ops else "provider"
        self.rule = _OP_LIBRARY_RULE if declares_ops else _RULE

    def __repr__(self) -> str:
        return f"ProviderRun(provider={self.provider!r}, during={self.during!r}, refused={self.refused!r})"

    def verdict(self) -> str | None:
        """Why the provider must be rejected (the first refused call, or what it changed), or None."""
        if self.refused:
            more = len(self.refused) - 1
            return self.refused[0] + (f" (and {more} more refused call(s))" if more else "")
        before, now = self._settings(self.before), self._settings(STATE.snapshot())
        if now == before:
            return None
        parts = [
            part.format(ops=_changed_names(old, new))
            for part, old, new in zip(_SNAPSHOT_PARTS, before, now)
            if old != new
        ]
        changed = " and the ".join(parts)
        return f"changed the {changed} directly, while ircore loaded it; {self.rule} (all undone)"

    def _settings(self, snapshot: Snapshot) -> tuple[object, ...]:
        """What this run must leave alone: for an op library, all but the ops it declares."""
        settings = snapshot.settings()
        if not self.declares_ops:
            return settings
        known = set(self.before.ops)
        ops, impls, *rest = settings
        return ([n for n in ops if n in known], {n: i for n, i in impls.items() if n in known}, *rest)

    def declared(self) -> list[str]:
        """The ops declared since the run began."""
        return sorted(set(STATE.ops) - set(self.before.ops))

    def undo(self) -> None:
        """Put back everything the snapshot holds (a no-op when nothing changed)."""
        if STATE.snapshot().settings() != self.before.settings():
            STATE.restore(self.before)


def _changed_names(old: object, new: object) -> str:
    """The op names two parts of a snapshot differ in (a table by op name, or a list of names)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return ", ".join(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(n, str) for n in old + new):
        return ", ".join(sorted(set(old) ^ set(new)))
    return ""


_RUNNING: ContextVar[ProviderRun | None] = ContextVar("ircore_provider_code", default=None)


def current() -> ProviderRun | None:
    """The provider whose import or hook is running in this context, if any."""
    return _RUNNING.get()


@contextlib.contextmanager
def provider_code(provider: str, declares_ops: bool = False) -> Iterator[ProviderRun]:
    """Run a provider's (or, ``declares_ops``, an op library's) code under the rules above; the
    caller judges ``run.verdict()``."""
    run = ProviderRun(provider, declares_ops=declares_ops)
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
    message = f"called {action} (at {caller_location()}, {run.during}); {run.rule}"
    run.refused.append(message)
    raise ProviderIsolationError(f"{run.kind} {run.provider!r} {message}")


def refuse_op_declaration(name: str) -> None:
    """``register_op`` inside a provider's code: refused (an op library's is what it is for)."""
    run = _RUNNING.get()
    if run is None or run.declares_ops:
        return
    message = (
        f"called ircore.register_op() for {name!r} (at {caller_location()}, {run.during}); a provider "
        "implements ops, it does not declare them: declare ops in a module named by an `ircore.ops` "
        "entry point of your distribution (loaded before every provider), and implement them here"
    )
    run.refused.append(message)
    raise ProviderIsolationError(f"provider {run.provider!r} {message}")
