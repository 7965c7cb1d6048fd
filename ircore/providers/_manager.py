"""Loading providers: each one in its own guard, only when allowed and first needed.

For every discovered provider, in name order: a conflict, a bad name, an ``ircore`` requirement
that excludes this core, or configuration that disables it each settle its state *before* its
module is imported. Otherwise the module is imported and its hooks run (platform check, register
-- or its ``IRCORE_IMPLEMENTATIONS`` table is read --, default priority); an exception
(:data:`ircore.errors.CONTAINED`: also ``SystemExit`` and ``GeneratorExit``) makes it ``failed``,
any rejected implementation ``invalid``, and nothing of such a provider stays registered. Any
other ``BaseException`` (``KeyboardInterrupt``) propagates, with the provider ``failed`` and
nothing of it registered either.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pluggy

from ircore import _ownership, config
from ircore._state import STATE, PriorityLayer
from ircore._version import __version__
from ircore.config import Settings
from ircore.errors import CONTAINED, ImplRegistrationError, ProviderLoadError
from ircore.platform import current_platform
from ircore.providers import hookspecs
from ircore.providers._discovery import Candidate, discover, refusal
from ircore.providers._hooks import marked_hook_problem, unmarked_hooks
from ircore.providers._op_libraries import OpLibraries
from ircore.providers._records import (
    BROKEN_STATES,
    ProviderRecord,
    ProviderState,
    describe_failure,
    records_by_name,
)
from ircore.providers._registrar import Registrar
from ircore.providers._table import TABLE_ATTRIBUTE

_log = logging.getLogger("ircore")


class ProviderManager:
    """Discovers, loads and tracks every provider; one instance per process (:data:`MANAGER`)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.records: dict[str, ProviderRecord] = {}
        self.settings: Settings | None = None
        #: the op libraries (``ircore.ops`` entry points), loaded before any provider
        self.op_libraries = OpLibraries()
        # (STATE.config_version, STATE.ops_version) the states were decided for (None: on next use)
        self._loaded_for: tuple[int, int] | None = None
        self._ops_seen: int | None = None  # STATE.ops_version the providers were registered against
        self._registered: dict[str, tuple[str, ...]] = {}  # active provider -> the ops it registered

    # ------------------------------------------------------------------ discovery
    def candidates(self) -> tuple[Candidate, ...]:
        return discover()

    # ------------------------------------------------------------------ loading
    def ensure_loaded(self) -> None:
        """Bring every provider to the state configuration asks for; a no-op once current.

        Also a no-op inside a provider's own code (an op called from a hook runs with the
        providers loaded so far), so that one provider's hooks never run inside another's.
        """
        if self._loaded_for == (STATE.config_version, STATE.ops_version) or _ownership.current() is not None:
            return
        if not self._lock.acquire(blocking=False):
            run = _ownership.in_progress()
            if run is not None and run.started(threading.current_thread()):
                # A thread a provider's hook started, which the hook may be waiting for: it runs
                # with the providers loaded so far, as the hook's own calls do (no deadlock).
                return
            self._lock.acquire()
        try:
            if self._loaded_for == (STATE.config_version, STATE.ops_version):
                return
            config_version = STATE.config_version
            self._load()  # a ConfigError leaves us not current: every later use raises it again
            STATE.bump()
            self._enforce_strict()  # likewise: strict mode keeps refusing until fixed
            self._loaded_for = (config_version, STATE.ops_version)
        finally:
            self._lock.release()

    def _load(self) -> None:
        settings = config.resolve_settings()
        self.op_libraries.load()  # their ops exist before any provider registers, or config names them
        # Ops declared since the providers registered (a new op library, the user's register_op):
        # a provider rejected for naming an op that did not exist then is examined again.
        ops_changed = self._ops_seen != STATE.ops_version
        self._ops_seen = STATE.ops_version
        candidates = self.candidates()
        settings.check_names({c.name for c in candidates}, set(STATE.ops))
        self.settings = settings
        layers = [
            PriorityLayer(source.where("priority"), source.values["priority"])
            for source in settings.sources[1:]
            if "priority" in source.values
        ]
        fusions = tuple(tuple(sorted(layer.items())) for layer in config.fusion_layers(settings))
        STATE.set_configured(layers, fusions, settings.trace_implementations, settings.batch_invariant)
        late = _ownership.late_refusals()
        for record, cands in records_by_name(candidates, self.records):
            name = record.name
            if name in late:  # a configuration call of its code refused after loading: invalid
                if record.state is ProviderState.ACTIVE:
                    STATE.block(name, f"provider {name!r} is invalid: {late[name]}")
                if record.state is not ProviderState.INVALID:
                    self._settle(record, ProviderState.INVALID, late[name])
                continue
            enabled, why = settings.enabled(name)
            if not enabled:  # configuration decides first: a disabled provider is never examined
                self._disable(record, why)
                continue
            refused = refusal(name, cands, __version__)  # nothing imported for any of these
            if refused is not None:
                self._settle(record, *refused)
                continue
            if not record.imported or (ops_changed and record.state is ProviderState.INVALID):
                self._activate(record)
            elif name in self._registered and record.state is ProviderState.DISABLED:
                STATE.block(name, None)  # re-enabled: its implementations are still there
                record.state, record.reason = ProviderState.ACTIVE, self._implements(record)

    def _settle(self, record: ProviderRecord, state: ProviderState, reason: str) -> None:
        record.state, record.reason = state, reason
        if state is not ProviderState.ACTIVE:
            _log.info("provider %s: %s: %s", record.name, state.value, reason)

    def _disable(self, record: ProviderRecord, why: str) -> None:
        if record.state is ProviderState.ACTIVE:
            STATE.block(record.name, f"provider {record.name!r} is disabled: {why}")
            record.state, record.reason = ProviderState.DISABLED, why
        elif not record.imported:
            self._settle(record, ProviderState.DISABLED, why)

    def _activate(self, record: ProviderRecord) -> None:
        """Import the provider and run its hooks, inside one guard; commit only on full success.

        The guard (:mod:`ircore._ownership`) rejects a provider that tried to change anything
        but its own registrations, and undoes what it changed, whatever else happened.
        """
        record.imported = True
        with _ownership.provider_code(record.name) as run:
            try:
                outcome = self._run_hooks(record, run)
            except BaseException as exc:  # not contained (a KeyboardInterrupt): undo, say so, go on up
                run.undo()
                self._settle(
                    record,
                    ProviderState.FAILED,
                    f"interrupted by {type(exc).__name__} ({run.during}); nothing of it is registered, "
                    "and it stays failed in this process",
                )
                raise
        refused = run.verdict()
        if refused:
            run.undo()
            self._settle(record, ProviderState.INVALID, refused)
            return
        if isinstance(outcome[0], ProviderState):  # failed, invalid or unavailable, with a reason
            self._settle(record, *outcome)
            return
        registrar, ranks = outcome
        impostor = next((impl for impl in registrar.impls if impl.provider != record.name), None)
        if impostor is not None:  # its registrar's identity was forced (object.__setattr__)
            self._settle(
                record,
                ProviderState.INVALID,
                f"registered {impostor.op_name} under the name {impostor.provider!r} (its registrar's "
                f"provider was changed); {_ownership.rule_for_providers()}",
            )
            return
        registrar.commit()
        STATE.set_ranks(record.name, ranks)
        self._registered[record.name] = record.ops = registrar.op_names
        record.ranks = dict(ranks)
        self._settle(record, ProviderState.ACTIVE, self._implements(record))

    def _implements(self, record: ProviderRecord) -> str:
        """An active provider's reason: what it implements here, and what was removed since.

        Also brings ``record.ops`` and ``record.removed`` up to date with the ops' own records of
        ``unregister_impl`` (``IrOp.removed``).
        """
        registered = self._registered.get(record.name, ())
        removed = {
            op: how for op in registered if (how := STATE.ops[op].removed.get(record.name)) is not None
        }
        record.ops = tuple(op for op in registered if op not in removed)
        record.removed = removed
        text = f"implements {', '.join(record.ops) or 'nothing'} on {current_platform().describe()}"
        return "; ".join([text, *(f"{op} {how}" for op, how in removed.items())])

    def _run_hooks(
        self, record: ProviderRecord, run: _ownership.ProviderRun
    ) -> tuple[Registrar, dict[str, int]] | tuple[ProviderState, str]:
        """Import and run the hooks: the filled registrar and the ranks, or a state and its reason."""
        try:
            module = importlib.import_module(record.module)
        except CONTAINED as exc:
            return ProviderState.FAILED, describe_failure(exc, f"importing {record.module}")
        _ownership.note_provider_code(record.name, module)
        pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        pm.add_hookspecs(hookspecs)
        unmarked = self._warn_unmarked(record, pm, module)
        problem = marked_hook_problem(pm, module)
        if problem:
            return ProviderState.INVALID, problem
        try:
            pm.register(module, name=record.name)
            pm.check_pending()
        except pluggy.PluginValidationError as exc:  # pluggy's message spans lines: keep all of it
            return ProviderState.INVALID, f"{record.module}: " + "; ".join(str(exc).split("\n"))
        table = getattr(module, TABLE_ATTRIBUTE, None)
        has_hook = bool(pm.hook.ircore_register.get_hookimpls())
        problem = self._registration_problem(record.module, has_hook, table, unmarked)
        if problem:
            return ProviderState.INVALID, problem
        platform = current_platform()
        try:
            run.during = "in ircore_check_platform"
            reason = pm.hook.ircore_check_platform(platform=platform)
            if reason is not None:
                if not isinstance(reason, str):
                    return (
                        ProviderState.INVALID,
                        f"ircore_check_platform returned {reason!r}; expected None or a reason string",
                    )
                return ProviderState.UNAVAILABLE, reason
            registrar = Registrar(record.name)
            if table is None:
                run.during = "in ircore_register"
                pm.hook.ircore_register(registrar=registrar, platform=platform)
            else:
                run.during = f"in {TABLE_ATTRIBUTE}"
                registrar.register_table(table)
            run.during = "in ircore_default_priority"
            ranks = pm.hook.ircore_default_priority(platform=platform)
            ranks_from = "ircore_default_priority"
            if ranks is None:
                ranks, ranks_from = registrar.ranks, "the ranks of its ImplSpec rows"
        except ImplRegistrationError as exc:
            return ProviderState.INVALID, str(exc)
        except CONTAINED as exc:
            return ProviderState.FAILED, describe_failure(exc, run.during)
        problem = self._rank_problem(ranks, registrar.op_names)
        if problem:
            return ProviderState.INVALID, f"{ranks_from}: {problem}"
        return registrar, ranks

    @staticmethod
    def _warn_unmarked(record: ProviderRecord, pm: pluggy.PluginManager, module: Any) -> list[str]:
        """Log (WARNING) and keep on the record each hook-named function left unmarked."""
        warnings = unmarked_hooks(pm, module)
        record.warnings = tuple(warnings)
        for warning in warnings:
            _log.warning("provider %s: %s", record.name, warning)
        return warnings

    @staticmethod
    def _registration_problem(
        module: str, has_hook: bool, table: object, unmarked: Sequence[str] = ()
    ) -> str | None:
        """A provider registers through exactly one of: the ``ircore_register`` hook, the table."""
        if has_hook and table is not None:
            return (
                f"{module} has both an ircore_register hook and an {TABLE_ATTRIBUTE} table; "
                "keep one (the hook may call registrar.register_table)"
            )
        if not has_hook and table is None and any(f"{module}.ircore_register " in w for w in unmarked):
            return (
                f"{module}.ircore_register is not marked @ircore.hookimpl, so nothing registers; "
                "decorate it with @ircore.hookimpl"
            )
        if not has_hook and table is None:
            return (
                f"{module} implements no ircore_register hook and declares no {TABLE_ATTRIBUTE} table "
                "(mark a function with @ircore.hookimpl, or declare {op: ircore.ImplSpec(...)})"
            )
        return None

    @staticmethod
    def _rank_problem(ranks: object, registered: tuple[str, ...]) -> str | None:
        if not isinstance(ranks, dict):
            return f"returned {ranks!r}; expected a dict of op name -> int rank"
        for op_name, rank in ranks.items():
            if op_name not in registered:
                return f"ranks op {op_name!r}, which this provider did not register ({list(registered)})"
            if not isinstance(rank, int) or isinstance(rank, bool):
                return f"rank of {op_name!r} is {rank!r}; expected an int (lower runs first)"
        return None

    def problems(self) -> list[ProviderRecord]:
        """Providers that strict mode refuses and ``ircore doctor`` reports as problems.

        Broken ones (:data:`BROKEN_STATES`), and unavailable ones the ``providers`` allowlist
        names: a provider the user asked for by name that cannot run here. Other unavailable
        providers are normal (a GPU provider on a CPU machine).
        """
        settings = self.settings
        return [
            r
            for r in self.records.values()
            if r.state in BROKEN_STATES
            or (r.state is ProviderState.UNAVAILABLE and settings is not None and settings.named(r.name))
        ] + [r for r in self.op_libraries.records.values() if r.state in BROKEN_STATES]

    def _enforce_strict(self) -> None:
        if self.settings is None or not self.settings.strict:
            return
        bad = self.problems()
        if bad:
            lines = "\n".join(
                f"  {r.name} ({r.distribution} {r.version}): {r.state}: {r.reason}" for r in bad
            )
            raise ProviderLoadError(
                f"strict mode ({self.settings.strict_from}): {len(bad)} provider(s) broken, or named "
                f"in the configuration and unavailable:\n{lines}"
            )

    def reload(self) -> None:
        """Forget every provider and what it registered; the next use loads them all again.

        For :func:`ircore.testing.simulated_platform`: the platform checks, registrations and
        ranks are then decided again against the platform in effect.
        """
        with self._lock:
            for name in self.records:
                STATE.forget_provider(name)
            self.records.clear()
            self._registered.clear()
            self._loaded_for = None
        STATE.bump()

    # ------------------------------------------------------------------ introspection
    def status_of(self, name: str) -> str | None:
        record = self.records.get(name)
        if record is None or record.state is ProviderState.ACTIVE:
            return None
        return f"provider {name!r} is {record.state}: {record.reason}"

    def snapshot(self) -> tuple[Any, ...]:
        """What :meth:`restore` puts back: every record (copied), the settings, what was loaded."""
        with self._lock:
            records, libraries = (
                {
                    name: dataclasses.replace(r, ranks=dict(r.ranks), removed=dict(r.removed))
                    for name, r in table.items()
                }
                for table in (self.records, self.op_libraries.records)
            )
            return records, libraries, self.settings, self._loaded_for, self._ops_seen, dict(self._registered)

    def restore(self, snapshot: tuple[Any, ...]) -> None:
        with self._lock:
            records, libraries, self.settings, self._loaded_for, self._ops_seen, registered = snapshot
            self.records.clear()
            self.records.update(records)
            self.op_libraries.records.clear()
            self.op_libraries.records.update(libraries)
            self._registered.clear()
            self._registered.update(registered)

    def current_records(self) -> list[ProviderRecord]:
        """Every provider's record, by name, with what was removed since it registered."""
        with self._lock:
            for record in self.records.values():
                if record.state is ProviderState.ACTIVE:
                    record.reason = self._implements(record)
                elif record.name in self._registered:
                    self._implements(record)
            return [self.records[name] for name in sorted(self.records)]


MANAGER = ProviderManager()
