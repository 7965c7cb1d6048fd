"""Which implementation runs: priority lists, scoped priorities, plans and ``explain``.

One rule serves eager calls, the compile-time lowering and introspection: walk the op's
effective priority list (``native`` always last) and take the first implementation whose
provider is usable and whose ``supports_args`` accepts the arguments.

The effective list comes from the highest source that names the op: a ``with ircore.priority``
scope, then ``ircore.set_priority``/``ircore.configure``, then ``IRCORE_PRIORITY``, then the config
file, then the providers' suggested ranks. A resolved list is cached on the op as a *plan*,
stamped with :attr:`DispatchState.generation`; anything that could change a plan replaces the
generation, so the eager path needs one identity check to know its plan is current (compiled code
reads the flag the stamp carries instead, without reading the state).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

from ircore import _ownership, _signature
from ircore.errors import PriorityError

if TYPE_CHECKING:
    from ircore.op import IrOp

__all__ = [
    "set_priority",
    "get_priority",
    "priority",
    "explain",
    "Explanation",
    "DEFAULT_RANK",
]

_log = logging.getLogger("ircore")
NATIVE = "native"
DEFAULT_RANK = 100

# An entry: (provider, functional callable, raw callable, supports_args or None, whether
# supports_args' answer may be cached per call signature).
Entry = tuple[str, Callable[..., Any], Callable[..., Any], Any, bool]
# A plan: (generation, entries, {call signature: the entry that runs it}).
Plan = tuple[list[bool] | None, tuple[Entry, ...], dict[bytes, Entry]]
# Distinct signatures remembered per plan before the cache starts over (a bound, not a tuning knob:
# an engine sees a few dozen).
SIGNATURE_CACHE_LIMIT = 4096


class _Scope:
    """The priorities in effect inside a ``with ircore.priority(...)`` block (merged with the
    enclosing blocks'), the scope to go back to on exit, and the plans resolved under it.

    One object per distinct (enclosing scope, contents) (see :class:`PriorityBlock`), so a block
    entered again finds its plans; those are shared with every scope that resolves an op to the
    same list (:func:`scoped_plan`). ``priorities`` and ``plans`` are dicts, and ``plans`` has
    an entry for exactly the ops ``priorities`` names (made on entry, replaced when stale): the
    fast call (ircore/csrc/fast_call.cpp) reads only ``plans``, from its slot, and takes a name
    missing there to mean "not named here".
    """

    __slots__ = ("outer", "plans", "priorities")

    def __init__(self, priorities: dict[str, tuple[str, ...]], outer: _Scope | None) -> None:
        self.priorities = priorities
        self.outer = outer
        self.plans: dict[str, Plan] = {}


SCOPE: ContextVar[_Scope | None] = ContextVar("ircore_priority_scope", default=None)


class PriorityLayer(NamedTuple):
    """Priority lists from one configuration source, e.g. ``IRCORE_PRIORITY``."""

    source: str
    priorities: Mapping[str, tuple[str, ...]]


class DispatchState:
    """Everything plans are computed from. Mutations go through functions that bump generation."""

    def __init__(self) -> None:
        # The token that plans (and everything remembered per configuration) are stamped with;
        # a change replaces it (bump_generation). A one-element list: [True] while it is the
        # current one, [False] once replaced, so compiled code (ircore/csrc) tells a stale plan
        # from its stamp alone, without reading this attribute. Python code compares identities.
        self.generation: list[bool] = [True]
        # An int fingerprint of everything compiled graphs depend on (see _fingerprint), updated
        # with the generation. Compiled code reads it under Dynamo, which guards on an int's
        # value (not on an object's identity): a change recompiles, a change back finds the
        # graph compiled before.
        self.version: int = 0
        self.lock = threading.RLock()
        self.api_priority: dict[str, tuple[str, ...]] = {}
        self.layers: list[PriorityLayer] = []  # env, then file; set by ircore.plugins.config
        self.ranks: dict[str, dict[str, int]] = {}  # op -> provider -> suggested rank
        self.blocked: dict[str, str] = {}  # provider -> why it must not run (config)
        # Called before any plan is resolved: discovers and loads providers (ircore.plugins).
        self.loader: Callable[[], None] | None = None
        # Names of providers known without loading them (discovered entry points).
        self.discovered: Callable[[], set[str]] | None = None
        # Why a known provider cannot run (its state and reason), or None.
        self.status_of: Callable[[str], str | None] = lambda name: None
        # Configuration outside this state that compiled graphs depend on (fusion switches).
        self.settings_fingerprint: Callable[[], object] = lambda: None
        # Told (op, provider, how) when an implementation is removed, so provider records say so.
        self.note_removed: Callable[[str, str, str], None] = lambda op, provider, how: None


STATE = DispatchState()


def bump_generation() -> None:
    """Invalidate every cached plan and every remembered per-signature choice."""
    from ircore.op import all_ops

    with STATE.lock:
        STATE.generation[0] = False  # what is stamped with it is stale from here on
        STATE.generation = [True]
        STATE.version = _fingerprint()
        for op in all_ops().values():
            op.signature_cache.clear()


def _fingerprint() -> int:
    """The priority sources, ranks, blocked providers, implementations and fusion switches, as an int.

    Equal configurations give equal values within a process, so a compiled function that went
    through priorities A, B and back to A reuses its graph for A instead of compiling a third.
    """
    from ircore.op import all_ops

    impls = tuple(
        (name, tuple((provider, id(impl)) for provider, impl in op.impls.items()))
        for name, op in sorted(all_ops().items())
    )
    return hash(
        (
            tuple(sorted(STATE.api_priority.items())),
            tuple((layer.source, tuple(sorted(layer.priorities.items()))) for layer in STATE.layers),
            tuple(sorted((op, tuple(sorted(ranks.items()))) for op, ranks in STATE.ranks.items())),
            tuple(sorted(STATE.blocked)),
            impls,
            STATE.settings_fingerprint(),
        )
    )


def ensure_loaded() -> None:
    """Discover and load providers as configuration allows (idempotent)."""
    loader = STATE.loader
    if loader is not None:
        loader()


_known: tuple[object, frozenset[str]] = (None, frozenset())


def known_providers() -> frozenset[str]:
    """Providers a priority list may name: those with implementations, and discovered ones.

    Remembered per generation: registrations and provider loading replace it.
    """
    global _known
    generation = STATE.generation
    if _known[0] is not generation:
        from ircore.op import all_ops

        names = {p for op in all_ops().values() for p in op.impls}
        if STATE.discovered is not None:
            names |= STATE.discovered()
        _known = (generation, frozenset(names))
    return _known[1]


# ---------------------------------------------------------------------- priority sources
_OPS: dict[str, IrOp] | None = None


def _op_registry() -> dict[str, IrOp]:
    """ircore.op's registry of declared ops, by name (not a copy: read only)."""
    global _OPS
    if _OPS is None:
        from ircore import op

        _OPS = op._OPS
    return _OPS


def validate_priority(
    priorities: Mapping[str, Sequence[str] | str | None], source: str
) -> dict[str, tuple[str, ...] | None]:
    """Check op and provider names of a priority mapping; raise naming ``source`` and the key."""
    ops = _op_registry()
    known = known_providers()
    out: dict[str, tuple[str, ...] | None] = {}
    for op_name, providers in priorities.items():
        if op_name not in ops:
            raise PriorityError(f"{source}: unknown op {op_name!r} in priority; known ops: {sorted(ops)}")
        if providers is None:
            out[op_name] = None
            continue
        if isinstance(providers, str):
            providers = [p.strip() for p in providers.split(",") if p.strip()]
        names: list[str] = []
        for provider in providers:
            if not isinstance(provider, str) or (provider not in known and provider != NATIVE):
                raise PriorityError(
                    f"{source}: unknown provider {provider!r} in the priority of {op_name!r}; "
                    f"known providers: {sorted(known | {NATIVE})}"
                )
            if provider not in names:
                names.append(provider)
        out[op_name] = tuple(names)
    return out


def set_priority(
    priorities: Mapping[str, Sequence[str] | None] | None = None, /, **ops: Sequence[str] | None
) -> None:
    """Set the process-wide priority list of ops: ``set_priority(rms_norm=["vllm_c", "triton"])``.

    ``None`` for an op removes the setting, so lower sources apply again. ``native`` is always
    appended. Raises :class:`~ircore.errors.PriorityError` for unknown ops or providers. A
    provider's own code (its import and hooks) may not call it.
    """
    _ownership.refuse_inside_provider("ircore.set_priority()")
    ensure_loaded()
    validated = validate_priority({**(priorities or {}), **ops}, "ircore.set_priority()")
    with STATE.lock:
        for op_name, names in validated.items():
            if names is None:
                STATE.api_priority.pop(op_name, None)
            else:
                STATE.api_priority[op_name] = names
        bump_generation()


# Remembered so that a block entered again costs a few dict lookups: blocks by request,
# scopes by (enclosing scope, contents), and plans by (op, list); each bounded like the signature
# cache, and each stamped with (or checked against) the generation it was resolved under.
SCOPE_LIMIT = 256
_blocks: dict[tuple[Any, ...], PriorityBlock] = {}
_scopes: dict[tuple[_Scope | None, tuple[Any, ...]], _Scope] = {}
_plans: dict[tuple[str, tuple[str, ...]], Plan] = {}


def _remember(table: dict[Any, Any], key: Any, value: Any) -> Any:
    if len(table) >= SCOPE_LIMIT:
        table.clear()
    table[key] = value
    return value


def priority(
    priorities: Mapping[str, Sequence[str] | None] | None = None, /, **ops: Sequence[str] | None
) -> PriorityBlock:
    """Within the block, in this thread or task only, use these priority lists:
    ``with ircore.priority(rms_norm=["triton", "vllm_c"]): ...``, or as a decorator.

    Built on :mod:`contextvars`: other threads and asyncio tasks keep their own priorities.
    Nested blocks merge, the inner one winning per op; ``None`` for an op removes an enclosing
    block's setting. Names are checked on entry (:class:`~ircore.errors.PriorityError`). A block
    whose priorities were seen before (inside the same enclosing blocks, with no priority,
    configuration or provider change since) reuses its plans and remembered choices, so a
    per-request block costs little more than a call under the process-wide priority.
    """
    request = {**priorities, **ops} if priorities else ops
    key = _request_key(request)
    if key is None:  # not hashable, so not a valid request: checked (and refused) on entry
        return PriorityBlock(request)
    block = _blocks.get(key)
    if block is None:
        normalized = {key[i]: key[i + 1] for i in range(0, len(key), 2)}  # no list the caller can change
        block = _remember(_blocks, key, PriorityBlock(normalized))
    return block


def _py_request_key(request: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """``(op, names, op, names, ...)`` with each list of names as a tuple, or None if that is not
    hashable; the twin of the compiled ``request_key`` (ircore/csrc/scope_block.cpp)."""
    key: tuple[Any, ...] = ()
    try:
        for op_name, names in request.items():
            key += (op_name, names if names is None or isinstance(names, (str, tuple)) else tuple(names))
        hash(key)
    except TypeError:
        return None
    return key


_request_key = _signature.request_key or _py_request_key


class _PyBlockBase:
    """Entering and leaving a block seen before, in Python: the twin of the compiled
    ``BlockBase`` (ircore/csrc/scope_block.cpp, ~0.25 us less per block), used without it."""

    _seen: dict[_Scope | None, tuple[object, _Scope]]

    def __init__(self, scope_var: ContextVar[_Scope | None], seen: dict[Any, Any]) -> None:
        pass  # the compiled base keeps these; here the module's SCOPE and the subclass's _seen serve

    def _resolve(self, outer: _Scope | None) -> _Scope:
        raise NotImplementedError

    def __enter__(self) -> None:
        outer = SCOPE.get()
        hit = self._seen.get(outer)
        SCOPE.set(hit[1] if hit is not None and hit[0] is STATE.generation else self._resolve(outer))

    def __exit__(self, *exc_info: object) -> None:
        scope = SCOPE.get()
        SCOPE.set(scope.outer if scope is not None else None)


_BlockBase: type = _signature.BlockBase or _PyBlockBase


class PriorityBlock(_BlockBase, contextlib.ContextDecorator):  # type: ignore[misc, valid-type]
    """What :func:`priority` returns: a context manager (and decorator) holding no per-entry
    state, so one object serves every entry, nested or in other threads and tasks. Leaving a
    block makes its enclosing block's priorities current again."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        self._request = request
        self._seen: dict[_Scope | None, tuple[object, _Scope]] = {}  # enclosing scope -> scope
        super().__init__(SCOPE, self._seen)

    def _recreate_cm(self) -> PriorityBlock:
        return self

    def _resolve(self, outer: _Scope | None) -> _Scope:
        ensure_loaded()
        generation = STATE.generation  # validation depends on the providers known now
        validated = validate_priority(self._request, "ircore.priority()")
        merged = dict(outer.priorities) if outer is not None else {}
        for op_name, names in validated.items():
            if names is None:
                merged.pop(op_name, None)
            else:
                merged[op_name] = names
        content = (outer, tuple(sorted(merged.items())))
        scope = _scopes.get(content)
        if scope is None:
            scope = _remember(_scopes, content, _Scope(merged, outer))
            # Resolve the plans of the ops this scope names now, once per distinct scope, so the
            # first call inside it costs what a signature miss costs outside any block.
            ops = _op_registry()
            for op_name, names in merged.items():
                scope.plans[op_name] = _shared_plan(ops[op_name], _with_native(names), generation)
        _remember(self._seen, outer, (generation, scope))
        return scope


def default_priority(op: IrOp) -> tuple[str, ...]:
    """Providers' suggested order for ``op``: by rank, then by registration order."""
    ranks = STATE.ranks.get(op.name, {})
    order = {p: i for i, p in enumerate(op.impls)}
    return tuple(sorted(op.impls, key=lambda p: (ranks.get(p, DEFAULT_RANK), order[p])))


def effective_priority(op: IrOp, scope: _Scope | None) -> tuple[tuple[str, ...], str]:
    """The list that decides ``op`` under ``scope`` (``native`` last) and the source it came from."""
    if scope is not None and op.name in scope.priorities:
        names, source = scope.priorities[op.name], "ircore.priority() scope"
    elif op.name in STATE.api_priority:
        names, source = STATE.api_priority[op.name], "ircore.set_priority()/configure()"
    else:
        for layer in STATE.layers:
            if op.name in layer.priorities:
                names, source = layer.priorities[op.name], layer.source
                break
        else:
            names, source = default_priority(op), "provider defaults"
    return _with_native(names), source


def _with_native(names: tuple[str, ...]) -> tuple[str, ...]:
    """A priority list as dispatch runs it: ``native`` last unless the list names it."""
    return names if NATIVE in names else (*names, NATIVE)


def get_priority(op_name: str) -> list[str]:
    """The effective priority list of ``op_name`` in this context, ``native`` last."""
    from ircore.op import get_op

    ensure_loaded()
    return list(effective_priority(get_op(op_name), SCOPE.get())[0])


# ---------------------------------------------------------------------- plans
def _entries(op: IrOp, names: Sequence[str]) -> tuple[Entry, ...]:
    entries: list[Entry] = []
    for name in names:
        if name == NATIVE:
            entries.append((NATIVE, op.native, op.native, None, True))
            break  # native runs everything: nothing after it is reached
        impl = op.impls.get(name)
        if impl is None or name in STATE.blocked:
            continue
        cacheable = impl.supports_args is None or impl.cache_by_signature
        entries.append((name, op.functional_call(impl), impl.fn, impl.supports_args, cacheable))
    return tuple(entries)


def refresh_plan(op: IrOp) -> Plan:
    """Resolve and cache ``op``'s plan outside any priority scope. Its table is
    ``op.signature_cache`` (cleared by :func:`bump_generation`, which any change that makes a
    new plan goes through), the one the fast call looks in outside scopes."""
    ensure_loaded()
    generation = STATE.generation
    plan = (generation, _entries(op, effective_priority(op, None)[0]), op.signature_cache)
    op._plan = plan
    return plan


def _shared_plan(op: IrOp, names: tuple[str, ...], generation: object) -> Plan:
    """The plan of ``op`` for the list ``names`` (``native`` last), one per (op, list) and
    generation, shared by every scope that resolves ``op`` to that list."""
    plan = _plans.get((op.name, names))
    if plan is None or plan[0] is not generation:
        plan = _remember(_plans, (op.name, names), (generation, _entries(op, names), {}))
    return plan


def scoped_plan(op: IrOp, scope: _Scope) -> Plan:
    """``op``'s plan under ``scope``, cached on the scope object and shared by every scope that
    resolves ``op`` to the same list (with the choices remembered under it). Only for an op the
    scope names: ``scope.plans`` holds those ops and no others (see :class:`_Scope`)."""
    plan = scope.plans.get(op.name)
    if plan is None or plan[0] is not STATE.generation:
        ensure_loaded()
        plan = _shared_plan(op, effective_priority(op, scope)[0], STATE.generation)
        scope.plans[op.name] = plan
    return plan


def process_plan(op: IrOp) -> Plan:
    """``op``'s plan outside any priority scope (what compiled graphs are lowered with)."""
    plan = op._plan
    if plan[0] is not STATE.generation:
        plan = refresh_plan(op)
    return plan


def current_plan(op: IrOp) -> Plan:
    scope = SCOPE.get()
    if scope is not None and op.name in scope.priorities:
        return scoped_plan(op, scope)
    return process_plan(op)


_warned_predicates: set[tuple[str, str]] = set()


def _predicate_raised(op_name: str, provider: str, exc: BaseException) -> None:
    key = (op_name, provider)
    if key not in _warned_predicates:
        _warned_predicates.add(key)
        _log.warning(
            "provider %r: supports_args of %s raised %s: %s; treating it as 'not supported'",
            provider,
            op_name,
            type(exc).__name__,
            exc,
        )


def first_supported(
    op_name: str, entries: tuple[Entry, ...], args: tuple[Any, ...], grad: bool = False
) -> tuple[Entry, bool]:
    """The first entry whose predicate accepts ``args``, and whether that choice may be cached.

    Cacheable means every predicate consulted (up to and including the chosen entry's) is declared
    ``cache_by_signature`` and none raised; a predicate that raises counts as "not supported".
    ``grad`` (the call must be differentiable, ``IrOp.wants_grad``) leaves only native, the one
    implementation with autograd; the signature says so, so that choice is cacheable.
    """
    if grad:
        return entries[-1], True
    cacheable = True
    for entry in entries:
        pred = entry[3]
        if pred is not None:
            cacheable = cacheable and entry[4]
            try:
                if not pred(*args):
                    continue
            except Exception as exc:
                _predicate_raised(op_name, entry[0], exc)
                cacheable = False
                continue
        return entry, cacheable
    raise AssertionError(f"ircore op {op_name!r}: plan has no native entry")


def call_first_supported(op_name: str, entries: tuple[Entry, ...], args: tuple[Any, ...]) -> Any:
    """Run the first entry whose predicate accepts ``args``, functionally (the careful eager path)."""
    return _run_entry(op_name, first_supported(op_name, entries, args)[0], args)


def choose_and_cache(op: IrOp, key: bytes, args: tuple[Any, ...], plan: Plan | None = None) -> Any:
    """An eager call whose signature ``key`` has no remembered choice: validate, choose, run.

    The choice is remembered for ``key`` when it cannot depend on more than the signature: the
    op's check and every ``supports_args`` consulted up to the chosen entry are declared
    ``cache_by_signature`` (and none raised). It goes to ``plan[2]``: outside priority scopes
    that is ``op.signature_cache``, which :func:`bump_generation` clears; inside a scope, the
    scope's plan's table, which is replaced when the generation changes. Either way a remembered
    choice never outlives the priorities and providers it was made under. ``plan``: the plan
    that decides the call, when the caller has it (the fast call, ircore/csrc/fast_call.cpp, and
    the eager call's scoped Python path, which have just looked it up), else looked up here.
    """
    if plan is None:
        plan = current_plan(op)
    op.check_args(*args)
    entry, cacheable = first_supported(op.name, plan[1], args, op.wants_grad(args))
    if cacheable:
        cache = plan[2]
        with STATE.lock:  # not after a bump_generation that this plan predates
            if plan[0] is STATE.generation:
                if len(cache) >= SIGNATURE_CACHE_LIMIT:
                    cache.clear()
                cache[key] = entry
    return _run_entry(op.name, entry, args)


def _run_entry(op_name: str, entry: Entry, args: tuple[Any, ...], which: int = 1) -> Any:
    """Call ``entry[which]``; say at DEBUG which ran, and in a failure's notes whose it was."""
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("%s: running %s", op_name, entry[0])
    try:
        return entry[which](*args)
    except Exception as exc:
        note_failure(op_name, entry[0], exc)
        raise


def note_failure(op_name: str, provider: str, exc: BaseException) -> None:
    """Say in the traceback which provider's implementation raised, and how to bypass it."""
    if provider != NATIVE:
        exc.add_note(
            f"raised in provider {provider!r}'s implementation of ircore op {op_name!r}; "
            f"to bypass it: ircore.set_priority({op_name}=[...]) or IRCORE_DISABLE={provider}"
        )


def run(op: IrOp, args: tuple[Any, ...], *, allow_inplace: bool) -> Any:
    """Validate and run ``op`` on real tensors (the torch kernel and ``maybe_inplace`` path).

    ``allow_inplace`` lets an in-place implementation write into the caller's tensors, unless
    one of them shares memory with another argument: then it runs on copies, as functional
    calls do (``IrOp.inputs_overlap``).
    """
    op.check_args(*args)
    entry = first_supported(op.name, current_plan(op)[1], args, op.wants_grad(args))[0]
    in_place = allow_inplace and entry[1] is not entry[2] and not op.inputs_overlap(args)
    return _run_entry(op.name, entry, args, 2 if in_place else 1)


# ---------------------------------------------------------------------- explain
# Records below are NamedTuples, not dataclasses: a dataclass costs ~0.7 ms of `import ircore`
# to create (its methods are generated with exec), a NamedTuple ~0.1 ms.
class Step(NamedTuple):
    """One provider considered for a call, and what became of it."""

    provider: str
    outcome: str  # "chosen", "skipped", "not reached", "not in priority"
    reason: str


class Explanation(NamedTuple):
    """The answer of :func:`explain`: which implementation runs for a call, and why."""

    op: str
    chosen: str
    priority: tuple[str, ...]
    source: str
    steps: tuple[Step, ...]

    def __str__(self) -> str:
        lines = [
            f"{self.op}: runs {self.chosen}",
            f"  priority: {', '.join(self.priority)}  (from {self.source})",
        ]
        lines += [f"  {s.provider:<12} {s.outcome:<15} {s.reason}" for s in self.steps]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "chosen": self.chosen,
            "priority": list(self.priority),
            "source": self.source,
            "steps": [s._asdict() for s in self.steps],
        }


_GRAD_REASON = "an argument requires grad and grad mode is on: only native has autograd"


def _predicate_verdict(pred: Any, args: tuple[Any, ...]) -> tuple[bool, str]:
    if pred is None:
        return True, "accepts every call (no supports_args)"
    try:
        ok = bool(pred(*args))
    except Exception as exc:
        return False, f"supports_args raised {type(exc).__name__}: {exc}"
    return ok, "supports_args accepted these arguments" if ok else ("supports_args rejected these arguments")


def explain(op: IrOp, args: tuple[Any, ...]) -> Explanation:
    """Walk ``op``'s priority for ``args`` exactly as a call would, recording every decision."""
    ensure_loaded()
    op.check_args(*args)
    names, source = effective_priority(op, SCOPE.get())
    grad = op.wants_grad(args)
    steps: list[Step] = []
    chosen: str | None = None
    for name in names:
        if chosen is not None:
            steps.append(Step(name, "not reached", f"{chosen} runs first"))
            continue
        if name == NATIVE:
            chosen = NATIVE
            steps.append(Step(NATIVE, "chosen", "the native reference runs every call"))
            continue
        impl = op.impls.get(name)
        if name in STATE.blocked:
            steps.append(Step(name, "skipped", STATE.blocked[name]))
        elif impl is None:
            why = op.removed.get(name) or STATE.status_of(name)
            steps.append(Step(name, "skipped", why or f"provider {name!r} does not implement {op.name}"))
        elif grad:
            steps.append(Step(name, "skipped", _GRAD_REASON))
        else:
            ok, why = _predicate_verdict(impl.supports_args, args)
            if ok:
                chosen = name
                steps.append(Step(name, "chosen", why))
            else:
                steps.append(Step(name, "skipped", why))
    for name in op.impls:
        if name not in names:
            steps.append(Step(name, "not in priority", f"not listed by {source}"))
    assert chosen is not None
    return Explanation(op.name, chosen, names, source, tuple(steps))
