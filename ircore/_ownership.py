"""What a provider's code may change: its own registrations, through its own registrar.

ircore imports each provider and runs its hooks inside :func:`provider_code`. Every public way to
change dispatch (``IrOp.register_impl`` and ``unregister_impl``, ``Registrar.commit``,
``ircore.set_priority``, ``ircore.configure``) first calls :func:`refuse_inside_provider`: inside
a provider's code that records the attempt on the run, so the provider is rejected even if it
swallows the error, and raises :class:`~ircore.errors.ProviderIsolationError`. The run also
snapshots what the provider must leave alone (the op table, every op's implementations, the
priority settings: ``ircore._state.Snapshot``, with every implementation's fields and every
op's declared attributes) and the functions dispatch runs through (:func:`core_bindings`), so a
change made around the public API (``op.impls[...] = ...``, ``object.__setattr__`` on an
``Impl``, a replaced ``ircore.dispatch`` function) is found and undone the same way; so is a
priority scope (``with ircore.priority``) entered and never left.

Provider code outlives its hooks: its kernels run in the user's calls, and threads its hooks
started keep running. The configuration calls therefore also refuse a caller whose code lies in
a provider's module (:func:`note_provider_code`) and a thread started while a provider's code
ran (:func:`thread_owner`); such a refusal after loading makes the provider ``invalid`` on the
next use (:func:`late_refusals`).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from types import FrameType, ModuleType
from typing import Any

from ircore._state import SCOPE, STATE, Snapshot
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


def _caller_frame() -> FrameType | None:
    """The innermost frame outside the ircore package: who called ircore."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_IRCORE_DIR):
        frame = frame.f_back
    return frame


def caller_location() -> str:
    """``file:line`` of the innermost frame outside the ircore package: who called ircore."""
    frame = _caller_frame()
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


# ---------------------------------------------------------------------- the functions dispatch runs through
def _core_modules() -> list[ModuleType]:
    names = ("ircore.dispatch", "ircore._fastpath", "ircore.op", "ircore._state", "ircore._ownership")
    return [sys.modules[name] for name in names if name in sys.modules]


def core_bindings() -> dict[tuple[Any, str], Any]:
    """``(owner, name) -> object`` for every function and class of the modules calls go through,
    the methods of ``IrOp`` and each op's generated ``__call__``: what no provider may replace."""
    # each op's class and its bases (IrOp), from the ops themselves: no import of ircore.op here
    classes = {
        cls for op in STATE.ops.values() for cls in type(op).__mro__ if cls.__module__.startswith("ircore")
    }
    owners: list[Any] = [*_core_modules(), *sorted(classes, key=lambda cls: cls.__qualname__)]
    bindings = {}
    for owner in owners:
        for name, value in list(vars(owner).items()):
            if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                bindings[(owner, name)] = value
    return bindings


def _replaced(before: dict[tuple[Any, str], Any]) -> list[str]:
    now = core_bindings()
    return sorted(
        f"{getattr(owner, '__name__', owner)}.{name}"
        for (owner, name), value in before.items()
        if now.get((owner, name)) is not value
    )


def _put_back(before: dict[tuple[Any, str], Any]) -> None:
    for (owner, name), value in before.items():
        if vars(owner).get(name) is not value:
            setattr(owner, name, value)


# What each part of ``Snapshot.settings()`` is called in a rejected provider's reason.
_SNAPSHOT_PARTS = (
    "declared ops ({ops}: declare ops through an `ircore.ops` entry point, not from a provider)",
    "implementations of {ops}",
    "priority settings",
    "configured priorities",
    "providers' default ranks",
    "disabled providers",
    "declared attributes of {ops} (an op is what its declaration made it)",
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
        #: the priority scope in force when the run began (a scope its code left open is a leak)
        self.scope = SCOPE.get()
        #: the threads there were when it began: any other thread was started by its code
        self.threads_before = frozenset(threading.enumerate())
        self.bindings = core_bindings()

    def __repr__(self) -> str:
        return f"ProviderRun(provider={self.provider!r}, during={self.during!r}, refused={self.refused!r})"

    def verdict(self) -> str | None:
        """Why the provider must be rejected (the first refused call, or what it changed), or None."""
        if self.refused:
            more = len(self.refused) - 1
            return self.refused[0] + (f" (and {more} more refused call(s))" if more else "")
        replaced = _replaced(self.bindings)
        if replaced:
            return f"replaced {', '.join(replaced)}, while ircore loaded it; {self.rule} (all undone)"
        if SCOPE.get() is not self.scope:
            return (
                "entered a priority scope (with ircore.priority(...)) and did not leave it before its "
                f"code returned, which would set the user's priorities; {self.rule} (undone)"
            )
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
        ops, impls, *rest, declared = settings
        return (
            [n for n in ops if n in known],
            {n: i for n, i in impls.items() if n in known},
            *rest,
            {n: d for n, d in declared.items() if n in known},
        )

    def declared(self) -> list[str]:
        """The ops declared since the run began."""
        return sorted(set(STATE.ops) - set(self.before.ops))

    def undo(self) -> None:
        """Put back everything the snapshot holds, the functions calls go through and the
        priority scope (a no-op when nothing changed)."""
        _put_back(self.bindings)
        if SCOPE.get() is not self.scope:
            SCOPE.set(self.scope)
        if STATE.snapshot().settings() != self.before.settings():
            STATE.restore(self.before)

    def started(self, thread: threading.Thread) -> bool:
        """Whether ``thread`` was started while this run's code ran (so by that code)."""
        return thread not in self.threads_before


def _changed_names(old: object, new: object) -> str:
    """The op names two parts of a snapshot differ in (a table by op name, or a list of names)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return ", ".join(sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k)))
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(n, str) for n in old + new):
        return ", ".join(sorted(set(old) ^ set(new)))
    return ""


_RUNNING: ContextVar[ProviderRun | None] = ContextVar("ircore_provider_code", default=None)
#: the run in progress, whatever the context (threads start with an empty one): see thread_owner
_IN_PROGRESS: list[ProviderRun] = []
#: thread -> the provider whose code started it (kept while the thread lives)
_THREAD_OWNERS: weakref.WeakKeyDictionary[threading.Thread, str] = weakref.WeakKeyDictionary()
#: file, or package directory + os.sep -> the provider whose entry point names it
_PROVIDER_CODE: dict[str, str] = {}
#: provider -> the first configuration call refused after its hooks returned (see late_refusals)
_LATE: dict[str, str] = {}


def current() -> ProviderRun | None:
    """The provider whose import or hook is running in this context, if any."""
    return _RUNNING.get()


def in_progress() -> ProviderRun | None:
    """The provider (or op library) whose code ircore is running now, in any thread."""
    return _IN_PROGRESS[-1] if _IN_PROGRESS else None


@contextlib.contextmanager
def provider_code(provider: str, declares_ops: bool = False) -> Iterator[ProviderRun]:
    """Run a provider's (or, ``declares_ops``, an op library's) code under the rules above; the
    caller judges ``run.verdict()``. Threads its code started are remembered as its own."""
    run = ProviderRun(provider, declares_ops=declares_ops)
    token = _RUNNING.set(run)
    _IN_PROGRESS.append(run)
    try:
        yield run
    finally:
        _IN_PROGRESS.remove(run)
        _RUNNING.reset(token)
        for thread in threading.enumerate():
            if run.started(thread):
                _THREAD_OWNERS.setdefault(thread, provider)


def note_provider_code(provider: str, module: ModuleType) -> None:
    """Remember where ``provider``'s code lives: its entry point's module, or all of its package."""
    path = getattr(module, "__file__", None)
    if not path:
        return
    path = os.path.abspath(path)
    if os.path.basename(path) == "__init__.py":
        path = os.path.dirname(path) + os.sep
    _PROVIDER_CODE[path] = provider


def thread_owner(thread: threading.Thread | None = None) -> str | None:
    """The provider whose code started ``thread`` (default: this one), if a provider's did."""
    thread = threading.current_thread() if thread is None else thread
    owner = _THREAD_OWNERS.get(thread)
    if owner is None and (run := in_progress()) is not None and run.started(thread):
        owner = run.provider
    return owner


def _code_owner(frame: FrameType | None) -> str | None:
    """The provider whose module ``frame``'s code is in, if any."""
    if frame is None or not _PROVIDER_CODE:
        return None
    filename = os.path.abspath(frame.f_code.co_filename)
    for path, provider in _PROVIDER_CODE.items():
        if filename == path or (path.endswith(os.sep) and filename.startswith(path)):
            return provider
    return None


def rule_for_providers() -> str:
    """The rule a provider's reason quotes when it broke it."""
    return _RULE


def late_refusals() -> dict[str, str]:
    """Provider -> the first configuration call refused outside its hooks (made invalid for it)."""
    return dict(_LATE)


def refuse_inside_provider(action: str, verb: str = "called") -> None:
    """Raise (and record) if a provider's code is running here: ``action`` is not its to take."""
    run = _RUNNING.get()
    if run is None:
        return
    message = f"{verb} {action} (at {caller_location()}, {run.during}); {run.rule}"
    run.refused.append(message)
    raise ProviderIsolationError(f"{run.kind} {run.provider!r} {message}")


def refuse_provider_code(action: str) -> None:
    """Like :func:`refuse_inside_provider`, and also after loading: a configuration call from a
    provider's module (a kernel, a callback) or from a thread its code started is refused, and the
    provider becomes ``invalid`` on the next use (the user's calls are never refused)."""
    refuse_inside_provider(action)
    frame = _caller_frame()
    owner, how = _code_owner(frame), "from its code"
    if owner is None:
        owner, how = (
            thread_owner(),
            f"from thread {threading.current_thread().name!r}, which its code started",
        )
    if owner is None:
        return
    where = "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"
    message = f"called {action} (at {where}, {how}); {_RULE}"
    run = in_progress()
    if run is not None and run.provider == owner:  # its hooks still run: rejected with them
        run.refused.append(message)
        raise ProviderIsolationError(f"provider {owner!r} {message}")
    with STATE.lock:
        if owner not in _LATE:
            _LATE[owner] = message
            STATE.config_changed()  # the loader makes it invalid on next use
    raise ProviderIsolationError(f"provider {owner!r} {message}")


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
