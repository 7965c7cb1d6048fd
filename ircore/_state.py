"""The one owner of ircore's mutable state: the op table, the priority sources, the caches.

Everything a dispatch decision is computed from lives in :data:`STATE`, and every change to it
goes through a method here that replaces the *generation*: the token that plans, remembered
per-signature choices and remembered priority blocks are stamped with. A stamp that is not the
current generation is stale, so one identity check (or, from compiled code, one flag) tells the
eager path that what it remembered still holds.

The provider loader sits above this module. Dispatch reaches it through one small interface,
:class:`ProviderHost`, that the loader installs (``ircore/__init__.py``); it writes back through
the methods of :class:`State` (``add_impls``, ``forget_provider``, ``block`` ...), never into
the attributes directly.

Tests and tools get a scratch copy of all of it with ``ircore.testing.isolated()``, which
restores the contents of these objects in place: a module that holds a reference to the op
table or to :data:`STATE` never sees a stale copy.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

from ircore.errors import UnknownOpError

__all__ = ["STATE", "SCOPE", "State", "ProviderHost", "PriorityLayer", "Scope", "Snapshot"]


class ProviderHost(Protocol):
    """What dispatch asks of the provider loader: load, and say what is known without loading."""

    def ensure_loaded(self) -> None:
        """Discover and load ops and providers as configuration allows (idempotent)."""

    def discovered(self) -> frozenset[str]:
        """Names of every installed provider, whatever its state (for priority validation)."""

    def status_of(self, name: str) -> str | None:
        """Why a known provider cannot run (its state and reason), or None."""

    def matmul_layer(self, attribute: str) -> tuple[str, Any] | tuple[None, str]:
        """The first active provider whose entry-point module names an object in ``attribute``, as
        ``(provider, object)``; else ``(None, why)`` (batch-invariant mode's matmul layer)."""


class _NoProviders:
    """The host before the loader is attached: nothing to load, no provider known."""

    def ensure_loaded(self) -> None:
        pass

    def discovered(self) -> frozenset[str]:
        return frozenset()

    def status_of(self, name: str) -> str | None:
        return None

    def matmul_layer(self, attribute: str) -> tuple[str, Any] | tuple[None, str]:
        return None, "no provider loader is attached"


class PriorityLayer(NamedTuple):
    """Priority lists from one configuration source, e.g. ``IRCORE_PRIORITY``."""

    source: str
    priorities: Mapping[str, tuple[str, ...]]


class Scope:
    """The priorities in effect inside a ``with ircore.priority(...)`` block (merged with the
    enclosing blocks'), the scope to go back to on exit, and the plans resolved under it.

    ``plans`` has an entry for exactly the ops ``priorities`` names: the fast call
    (ircore/csrc/fast_call.cpp) reads only ``plans``, from its slot, and takes a name missing
    there to mean "not named here, the process-wide plan decides".

    ``invariant``: inside ``with ircore.batch_invariant()`` (or a block nested in one). Such a
    scope names every op (its ``priorities`` hold each op's list, its ``plans`` each op's
    invariant plan), so that the fast call and the eager call, which look only at ``plans`` and
    ``priorities``, never take a remembered choice of the process-wide plan there. So does a
    scope whose ``named`` has the key ``"*"`` (a block's list for every op). ``named`` is what
    ``priority`` blocks named (the rest of ``priorities`` only repeats the lower sources, or
    spells out ``*`` per op), and ``matmul`` whether the block asked for the matmul layer.
    """

    __slots__ = ("invariant", "matmul", "named", "outer", "plans", "priorities")

    def __init__(
        self,
        priorities: dict[str, tuple[str, ...]],
        outer: Scope | None,
        invariant: bool = False,
        named: dict[str, tuple[str, ...]] | None = None,
        matmul: bool = False,
    ) -> None:
        self.priorities = priorities
        self.outer = outer
        self.plans: dict[str, Any] = {}
        self.invariant = invariant
        self.named = priorities if named is None else named
        self.matmul = matmul


#: The priority scope of this thread or asyncio task (``with ircore.priority(...)``), or None.
SCOPE: ContextVar[Scope | None] = ContextVar("ircore_priority_scope", default=None)


#: What an op is from its declaration (:class:`ircore.IrOp`): fixed once declared, and compared by
#: the guard around provider code (``ircore._ownership``) by identity.
DECLARED_ATTRIBUTES = (
    "name", "native", "inplace_args", "check_args", "tolerances", "sample_inputs", "make_inputs",
    "reference", "cache_by_signature", "signature", "param_names", "defaults", "schema",
    "check_types", "tensor_indices", "inplace_indices", "signature_spec", "impls", "removed",
    "signature_cache", "fake", "torch_op", "torch_inplace_op", "any_layout_args", "check_annotations",
    "check_declared", "quick_test", "_overlap_pairs", "_required", "quantized_outputs", "batch_invariant",
)  # fmt: skip


class Identities(tuple):
    """A tuple whose equality is its items' identity (a replaced function, or dict, differs)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, tuple) and len(self) == len(other) and all(a is b for a, b in zip(self, other))
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


def _declared(op: Any) -> Identities:
    return Identities(op.__dict__.get(name) for name in DECLARED_ATTRIBUTES)


def _fields(impl: Any) -> Identities:
    """An implementation's fields, names and values in turn (``object.__setattr__`` gets past its
    frozen dataclass)."""
    return Identities(part for item in vars(impl).items() for part in item)


class Snapshot(NamedTuple):
    """The contents of :data:`STATE` at one moment (see :meth:`State.snapshot`)."""

    ops: dict[str, Any]
    impls: dict[str, dict[str, Any]]
    removed: dict[str, dict[str, str]]
    api_priority: dict[str, tuple[str, ...]]
    layers: list[PriorityLayer]
    ranks: dict[str, dict[str, int]]
    blocked: dict[str, str]
    fusions: object
    config_api: dict[str, Any]
    #: op -> its declared attributes (:data:`DECLARED_ATTRIBUTES`), as they were
    declared: dict[str, Identities]
    #: op -> provider -> that implementation's fields, as they were
    impl_fields: dict[str, dict[str, Identities]]
    #: the configured batch-invariant mode
    batch_invariant: bool = False

    def settings(self) -> tuple[Any, ...]:
        """What a provider's code must leave alone, for the guard to compare (ircore._ownership)."""
        return (
            sorted(self.ops),
            {
                op: {p: (impl, self.impl_fields[op][p]) for p, impl in impls.items()}
                for op, impls in self.impls.items()
            },
            self.api_priority,
            [(layer.source, dict(layer.priorities)) for layer in self.layers],
            self.ranks,
            self.blocked,
            self.declared,
        )


class State:
    """Everything dispatch decisions are computed from, and what is remembered from them."""

    def __init__(self) -> None:
        #: Every declared op by name. Never replaced, only changed in place.
        self.ops: dict[str, Any] = {}
        #: Counts ops declared (or undone): the loader looks at providers again when it moves.
        self.ops_version = 0
        # The stamp of everything remembered per configuration. A one-element list, [True]
        # while current and [False] once replaced, so compiled code (ircore/csrc) tells a
        # stale stamp from the stamp alone; Python compares identities.
        self.generation: list[bool] = [True]
        # An int fingerprint of everything compiled graphs depend on (see fingerprint()), kept
        # with the generation: Dynamo guards on an int's value, so a change recompiles and a
        # change back finds the graph compiled before.
        self.version = 0
        self.lock = threading.RLock()
        self.api_priority: dict[str, tuple[str, ...]] = {}
        self.layers: list[PriorityLayer] = []  # env, then file (ircore.config)
        self.ranks: dict[str, dict[str, int]] = {}  # op -> provider -> suggested rank
        self.blocked: dict[str, str] = {}  # provider -> why configuration stops it
        #: The configured fusion switches (ircore.config): compiled graphs depend on them.
        self.fusions: object = None
        #: Tracing records the chosen implementation (``trace_implementations``: configured, or
        #: inside ``ircore.tracing_implementations()`` blocks, counted in ``trace_blocks``).
        self.tracing_implementations = False
        self.trace_configured = False
        self.trace_blocks = 0
        #: Batch-invariant mode from the configuration (key ``batch_invariant``): every plan keeps
        #: only implementations that claim invariance (ircore.dispatch); scoped blocks add theirs.
        self.batch_invariant = False
        #: What ``ircore.configure`` set, parsed (ircore.config); the highest configuration source.
        self.config_api: dict[str, Any] = {}
        #: Counts changes to it: the loader re-decides provider states when this moves.
        self.config_version = 0
        self.providers: ProviderHost = _NoProviders()
        # Remembered so that a priority block entered again costs a few lookups (ircore.dispatch).
        self.blocks: dict[tuple[Any, ...], Any] = {}
        self.scopes: dict[tuple[Any, ...], Scope] = {}
        self.plans: dict[tuple[str, tuple[str, ...], bool], Any] = {}
        self.known: tuple[object, frozenset[str]] = (None, frozenset())
        # Distinct entries each of those caches holds before it starts over (a bound, not a
        # tuning knob: an engine sees a few dozen).
        self.cache_limit = 256
        self.warned_predicates: set[tuple[str, str]] = set()

    # ------------------------------------------------------------------ the generation
    def bump(self) -> None:
        """Make every plan, remembered choice and remembered block stale."""
        with self.lock:
            self.generation[0] = False
            self.generation = [True]
            self.version = self.fingerprint()
            for op in self.ops.values():
                op.signature_cache.clear()

    def fingerprint(self) -> int:
        """Priorities, ranks, blocked providers, implementations and fusion switches, as an int.

        Equal configurations give equal values within a process, so a compiled function that went
        through priorities A, B and back to A reuses its graph for A instead of compiling a third.
        """
        impls = tuple(
            (name, tuple((provider, id(impl)) for provider, impl in op.impls.items()))
            for name, op in sorted(self.ops.items())
        )
        return hash(
            (
                tuple(sorted(self.api_priority.items())),
                tuple((layer.source, tuple(sorted(layer.priorities.items()))) for layer in self.layers),
                tuple(sorted((op, tuple(sorted(r.items()))) for op, r in self.ranks.items())),
                tuple(sorted(self.blocked)),
                impls,
                self.fusions,
                self.tracing_implementations,
                self.batch_invariant,
            )
        )

    # ------------------------------------------------------------------ the op table
    def op(self, name: str) -> Any:
        """The op called ``name``; :class:`~ircore.errors.UnknownOpError` lists the ops there are."""
        try:
            return self.ops[name]
        except KeyError:
            raise UnknownOpError(f"no ircore op named {name!r}; known ops: {sorted(self.ops)}") from None

    def add_op(self, op: Any) -> None:
        with self.lock:
            self.ops[op.name] = op
            self.ops_version += 1
            self.bump()

    def known_providers(self) -> frozenset[str]:
        """Providers a priority list may name: those with implementations, and installed ones."""
        generation = self.generation
        if self.known[0] is not generation:
            names = {p for op in self.ops.values() for p in op.impls}
            self.known = (generation, frozenset(names | self.providers.discovered()))
        return self.known[1]

    # ------------------------------------------------------------------ what the loader writes
    def add_impls(self, impls: Iterable[Any]) -> None:
        """Attach validated implementations (each names its op and provider)."""
        with self.lock:
            for impl in impls:
                op = self.ops[impl.op_name]
                op.impls[impl.provider] = impl
                op.removed.pop(impl.provider, None)
            self.bump()

    def remove_impl(self, op_name: str, provider: str, how: str) -> bool:
        """Remove one implementation, remembering ``how`` for ``list``/``explain``/``doctor``."""
        with self.lock:
            op = self.op(op_name)
            if op.impls.pop(provider, None) is None:
                return False
            op.removed[provider] = how
            self.bump()
            return True

    def forget_provider(self, provider: str) -> None:
        """Drop everything ``provider`` registered or was told (to load it again from scratch)."""
        with self.lock:
            for op in self.ops.values():
                op.impls.pop(provider, None)
            for ranks in self.ranks.values():
                ranks.pop(provider, None)
            self.blocked.pop(provider, None)
            self.bump()

    def set_ranks(self, provider: str, ranks: Mapping[str, int]) -> None:
        with self.lock:
            for op_name, rank in ranks.items():
                self.ranks.setdefault(op_name, {})[provider] = rank
            self.bump()

    def block(self, provider: str, why: str | None) -> None:
        """Stop ``provider``'s implementations from running (``why``), or let them again (None)."""
        with self.lock:
            if why is None:
                self.blocked.pop(provider, None)
            else:
                self.blocked[provider] = why
            self.bump()

    def set_configured(
        self, layers: list[PriorityLayer], fusions: object, trace: bool = False, batch_invariant: bool = False
    ) -> None:
        """The priority layers, fusion switches, ``trace_implementations`` and ``batch_invariant``
        configured."""
        with self.lock:
            self.layers = layers
            self.fusions = fusions
            self.trace_configured = trace
            self.batch_invariant = batch_invariant
            self.tracing_implementations = trace or self.trace_blocks > 0
            self.bump()

    def enter_trace_block(self, delta: int) -> None:
        """A ``tracing_implementations()`` block entered (+1) or left (-1): process-wide."""
        with self.lock:
            self.trace_blocks += delta
            self.tracing_implementations = self.trace_configured or self.trace_blocks > 0
            self.bump()

    def config_changed(self) -> None:
        """The configuration API changed something: the loader decides states again on next use."""
        with self.lock:
            self.config_version += 1
            self.bump()

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> Snapshot:
        """Copies of the op table, every op's implementations and every priority setting."""
        with self.lock:
            return Snapshot(
                dict(self.ops),
                {name: dict(op.impls) for name, op in self.ops.items()},
                {name: dict(op.removed) for name, op in self.ops.items()},
                dict(self.api_priority),
                list(self.layers),
                {name: dict(ranks) for name, ranks in self.ranks.items()},
                dict(self.blocked),
                self.fusions,
                {key: _copy(value) for key, value in self.config_api.items()},
                {name: _declared(op) for name, op in self.ops.items()},
                {name: {p: _fields(impl) for p, impl in op.impls.items()} for name, op in self.ops.items()},
                self.batch_invariant,
            )

    def restore(self, snapshot: Snapshot) -> None:
        """Put back what :meth:`snapshot` copied, in place, and make everything remembered stale."""
        with self.lock:
            if self.ops.keys() != snapshot.ops.keys():
                self.ops_version += 1
            self.ops.clear()
            self.ops.update(snapshot.ops)
            for name, op in self.ops.items():
                declared = snapshot.declared.get(name)
                if declared is not None and _declared(op) != declared:
                    op.__dict__.update(zip(DECLARED_ATTRIBUTES, declared))
                for provider, fields in snapshot.impl_fields.get(name, {}).items():
                    impl = snapshot.impls[name][provider]
                    if _fields(impl) != fields:
                        vars(impl).clear()
                        vars(impl).update(zip(fields[::2], fields[1::2]))
                op._entries.clear()  # made from fields that may have been changed
                op.impls.clear()
                op.impls.update(snapshot.impls.get(name, {}))
                op.removed.clear()
                op.removed.update(snapshot.removed.get(name, {}))
            self.api_priority = dict(snapshot.api_priority)
            self.layers = list(snapshot.layers)
            self.ranks = {name: dict(ranks) for name, ranks in snapshot.ranks.items()}
            self.blocked = dict(snapshot.blocked)
            self.fusions = snapshot.fusions
            self.batch_invariant = snapshot.batch_invariant
            if self.config_api != snapshot.config_api:
                self.config_api.clear()
                self.config_api.update(snapshot.config_api)
                self.config_version += 1
            self.warned_predicates.clear()
            self.bump()

    def remember(self, table: dict[Any, Any], key: Any, value: Any) -> Any:
        """``table[key] = value`` in a cache of at most ``cache_limit`` entries."""
        if len(table) >= self.cache_limit:
            table.clear()
        table[key] = value
        return value


def _copy(value: Any) -> Any:
    """A copy of a configuration value deep enough that changing the original leaves it alone."""
    return dict(value) if isinstance(value, dict) else value


STATE = State()
