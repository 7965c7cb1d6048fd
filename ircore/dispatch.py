"""Which implementation runs: priority lists, scoped priorities, plans, the walk and ``explain``.

One rule serves eager calls, the compile-time lowering and introspection: walk the op's
effective priority list (``native`` always last) and take the first implementation whose
provider is usable and whose ``supports_args`` accepts the arguments. :func:`first_supported`
is that walk: a signature miss, :func:`run`, :func:`explain` and the lowering go through it; the
generated eager call's Python path inlines the same loop (a call of it would cost ~0.4 us there)
and hands it any call whose predicate raises.

The effective list comes from the highest source that names the op: a ``with ircore.priority``
scope, then ``ircore.set_priority``/``ircore.configure``, then ``IRCORE_PRIORITY``, then the config
file, then the providers' suggested ranks. A source's ``*`` entry (:data:`WILDCARD`) names every
op: the op's own entry in that source beats it, and it beats every lower source. A resolved list
is a :class:`Plan`, stamped with the state's generation (:mod:`ircore._state`); anything that
could change a plan replaces the generation, so the eager path needs one identity check to know
its plan is current.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

from ircore import _ownership, _signature
from ircore._state import SCOPE, STATE, PriorityLayer, Scope
from ircore.errors import CONTAINED, PriorityError, ProviderError, raised_at

__all__ = [
    "DEFAULT_RANK",
    "NATIVE",
    "WILDCARD",
    "Entry",
    "Explanation",
    "Plan",
    "PriorityBlock",
    "BatchInvariantBlock",
    "Step",
    "batch_invariant",
    "batch_invariant_active",
    "explain",
    "first_supported",
    "get_priority",
    "plan_for",
    "priority",
    "set_priority",
]

# Re-exported for tests and tools that inspect the state a decision was made from.
__all__ += ["SCOPE", "STATE", "PriorityLayer", "Scope"]

_log = logging.getLogger("ircore")
NATIVE = "native"
#: The priority key that names every op (``IRCORE_PRIORITY="*=triton,vllm_c;rms_norm=vllm_c"``),
#: so a deployment says "this order everywhere" once instead of once per op. Within one source an
#: op's own entry beats it; across sources it counts as naming every op, so the highest source
#: that names the op, either way, decides. A provider in it that lacks an op is skipped for that
#: op, as in any list.
WILDCARD = "*"
DEFAULT_RANK = 100
# Distinct signatures remembered per plan before the cache starts over (a bound, not a tuning knob:
# an engine sees a few dozen).
SIGNATURE_CACHE_LIMIT = 4096


class Entry(NamedTuple):
    """One implementation as a plan holds it (ircore/csrc/fast_call.cpp reads it by position)."""

    #: the provider's name, or ``native``
    provider: str
    #: what a functional call runs: for an in-place implementation, one that works on clones
    call: Callable[..., Any]
    #: the implementation as registered (it may write its in-place arguments)
    fn: Callable[..., Any]
    #: which calls it takes, or None for all
    supports_args: Callable[..., bool] | None
    #: whether its predicate's answer may be remembered per call signature
    cacheable: bool


class Plan(NamedTuple):
    """An op's entries for one priority list, stamped with the generation they were resolved in."""

    generation: list[bool] | None
    entries: tuple[Entry, ...]
    #: call signature -> the entry that runs it (see ircore._signature)
    signatures: dict[bytes, Entry]


# Plans are made per op and scope after every change: tuple.__new__(Plan, ...) skips the named
# tuple's Python-level __new__.
_tuple_new = tuple.__new__


class OpLike(Protocol):
    """What dispatch reads of an op (:class:`ircore.IrOp`)."""

    _plan: Plan

    @property
    def name(self) -> str: ...

    @property
    def impls(self) -> Mapping[str, Any]: ...

    @property
    def removed(self) -> Mapping[str, str]: ...

    @property
    def check_args(self) -> Callable[..., None]: ...

    @property
    def check_declared(self) -> Callable[..., None]: ...

    @property
    def signature_cache(self) -> dict[bytes, Entry]: ...

    def entry(self, provider: str) -> Entry: ...

    def invariant_entry(self, provider: str) -> Entry | None: ...

    def invariance_of(self, provider: str, args: tuple[Any, ...] | None = None) -> str: ...

    def refuses_in_mode(self, args: tuple[Any, ...]) -> bool: ...

    def wants_grad(self, args: tuple[Any, ...]) -> bool: ...

    def inputs_overlap(self, args: tuple[Any, ...]) -> bool: ...


def ensure_loaded() -> None:
    """Discover and load ops and providers as configuration allows (idempotent)."""
    STATE.providers.ensure_loaded()


# ---------------------------------------------------------------------- priority sources
def validate_priority(
    priorities: Mapping[str, Sequence[str] | str | None], source: str
) -> dict[str, tuple[str, ...] | None]:
    """Check op and provider names of a priority mapping; raise naming ``source`` and the key."""
    ops = STATE.ops
    known = STATE.known_providers()
    out: dict[str, tuple[str, ...] | None] = {}
    for op_name, providers in priorities.items():
        if op_name not in ops and op_name != WILDCARD:
            raise PriorityError(
                f"{source}: unknown op {op_name!r} in priority; known ops: {sorted(ops)} "
                f"(or {WILDCARD!r} for every op)"
            )
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

    The key ``"*"`` sets the list of every op this source does not name itself:
    ``set_priority({"*": ["triton", "vllm_c"], "rms_norm": ["vllm_c"]})`` (or
    ``set_priority(**{"*": [...]})``). ``None`` for an op (or ``"*"``) removes the setting, so
    lower sources apply again. ``native`` is always appended. Raises
    :class:`~ircore.errors.PriorityError` for unknown ops or providers. A provider's own code (its
    import and hooks) may not call it.
    """
    _ownership.refuse_provider_code("ircore.set_priority()")
    ensure_loaded()
    validated = validate_priority({**(priorities or {}), **ops}, "ircore.set_priority()")
    with STATE.lock:
        for op_name, names in validated.items():
            if names is None:
                STATE.api_priority.pop(op_name, None)
            else:
                STATE.api_priority[op_name] = names
        STATE.bump()


def default_priority(op: OpLike) -> tuple[str, ...]:
    """Providers' suggested order for ``op``: by rank, then by registration order."""
    ranks = STATE.ranks.get(op.name, {})
    order = {p: i for i, p in enumerate(op.impls)}
    return tuple(sorted(op.impls, key=lambda p: (ranks.get(p, DEFAULT_RANK), order[p])))


def _named_in(priorities: Mapping[str, tuple[str, ...]], op_name: str) -> tuple[tuple[str, ...], str] | None:
    """The list one source gives ``op_name``: its own entry, else the source's ``*`` entry (with
    ``" *"`` to add to the source's name), else None (the source does not name it)."""
    names = priorities.get(op_name)
    if names is not None:
        return names, ""
    names = priorities.get(WILDCARD)
    return None if names is None else (names, f" {WILDCARD}")


def names_op(scope: Scope, op_name: str) -> bool:
    """Whether ``scope``'s ``priority`` blocks name ``op_name``, by its own entry or by ``*``."""
    return op_name in scope.named or WILDCARD in scope.named


def effective_priority(op: OpLike, scope: Scope | None) -> tuple[tuple[str, ...], str]:
    """The list that decides ``op`` under ``scope`` (``native`` last) and the source it came from
    (``IRCORE_PRIORITY``, or ``IRCORE_PRIORITY *`` where the source's ``*`` entry decided)."""
    found = _named_in(scope.named, op.name) if scope is not None else None
    if found is not None:
        names, source = found[0], "ircore.priority() scope" + found[1]
    elif (found := _named_in(STATE.api_priority, op.name)) is not None:
        names, source = found[0], "ircore.set_priority()/configure()" + found[1]
    else:
        for layer in STATE.layers:
            found = _named_in(layer.priorities, op.name)
            if found is not None:
                names, source = found[0], layer.source + found[1]
                break
        else:
            names, source = default_priority(op), "provider defaults"
    return _with_native(names), source


def _with_native(names: tuple[str, ...]) -> tuple[str, ...]:
    """A priority list as dispatch runs it: ``native`` last unless the list names it."""
    return names if NATIVE in names else (*names, NATIVE)


def get_priority(op_name: str) -> list[str]:
    """The effective priority list of ``op_name`` in this context, ``native`` last."""
    ensure_loaded()
    return list(effective_priority(STATE.op(op_name), SCOPE.get())[0])


# ---------------------------------------------------------------------- tracing implementations
@contextlib.contextmanager
def tracing_implementations() -> Iterator[None]:
    """Within the block, tracing (``torch.compile`` with any backend, ``make_fx``) records the
    implementation each call would run instead of ``torch.ops.ircore.<op>``, as the configuration
    key ``trace_implementations`` does (``IrOp.traced_call``).

    Process-wide, not per thread: compiled functions guard on ircore's configuration
    fingerprint, which includes it, so a function compiled inside the block recompiles outside
    it (and finds that graph again inside the next one). For debugging and for compiling.
    """
    _ownership.refuse_provider_code("ircore.tracing_implementations()")
    STATE.enter_trace_block(+1)
    try:
        yield
    finally:
        STATE.enter_trace_block(-1)


# ---------------------------------------------------------------------- priority blocks
def priority(
    priorities: Mapping[str, Sequence[str] | None] | None = None, /, **ops: Sequence[str] | None
) -> PriorityBlock:
    """Within the block, in this thread or task only, use these priority lists:
    ``with ircore.priority(rms_norm=["triton", "vllm_c"]): ...``, or as a decorator.

    Built on :mod:`contextvars`: other threads and asyncio tasks keep their own priorities.
    Nested blocks merge, the inner one winning per op; ``None`` for an op removes an enclosing
    block's setting. ``"*"`` names every op (``ircore.priority(**{"*": ["triton"]})``): the
    block's own op entries beat it, and it replaces whatever enclosing blocks set, as an inner
    block's entry for an op does. Names are checked on entry (:class:`~ircore.errors.PriorityError`). A block
    whose priorities were seen before (inside the same enclosing blocks, with no priority,
    configuration or provider change since) reuses its plans and remembered choices, so a
    per-request block costs little more than a call under the process-wide priority.
    """
    request = {**priorities, **ops} if priorities else ops
    key = _request_key(request)
    if key is None:  # not hashable, so not a valid request: checked (and refused) on entry
        return PriorityBlock(request)
    block: PriorityBlock | None = STATE.blocks.get(key)
    if block is None:
        normalized = {key[i]: key[i + 1] for i in range(0, len(key), 2)}  # no list the caller can change
        block = STATE.remember(STATE.blocks, key, PriorityBlock(normalized))
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

    _seen: dict[Scope | None, tuple[object, Scope]]

    def __init__(self, scope_var: ContextVar[Scope | None], seen: dict[Any, Any]) -> None:
        pass  # the compiled base keeps these; here SCOPE and the subclass's _seen serve

    def _resolve(self, outer: Scope | None) -> Scope:
        raise NotImplementedError

    def __enter__(self) -> None:
        outer = SCOPE.get()
        hit = self._seen.get(outer)
        SCOPE.set(hit[1] if hit is not None and hit[0] is STATE.generation else self._resolve(outer))

    def __exit__(self, *exc_info: object) -> None:
        scope = SCOPE.get()
        SCOPE.set(scope.outer if scope is not None else None)


_BlockBase: type = _signature.BlockBase or _PyBlockBase


class PriorityBlock(_BlockBase, contextlib.ContextDecorator):  # type: ignore[misc]
    """What :func:`priority` returns: a context manager (and decorator) holding no per-entry
    state, so one object serves every entry, nested or in other threads and tasks. Leaving a
    block makes its enclosing block's priorities current again."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        self._request = request
        self._seen: dict[Scope | None, tuple[object, Scope]] = {}  # enclosing scope -> scope
        super().__init__(SCOPE, self._seen)

    def _recreate_cm(self) -> PriorityBlock:
        return self

    def _resolve(self, outer: Scope | None) -> Scope:
        ensure_loaded()
        generation = STATE.generation  # validation depends on the providers known now
        validated = validate_priority(self._request, "ircore.priority()")
        merged = dict(outer.named) if outer is not None else {}
        if validated.get(WILDCARD) is not None:
            merged.clear()  # this block names every op: the inner block wins per op
        for op_name, names in validated.items():
            if names is None:
                merged.pop(op_name, None)
            else:
                merged[op_name] = names
        scope = _scope(merged, outer, outer is not None and outer.invariant, generation)
        STATE.remember(self._seen, outer, (generation, scope))
        return scope


def _scope(
    named: dict[str, tuple[str, ...]], outer: Scope | None, invariant: bool, generation: list[bool]
) -> Scope:
    """The scope of a block (one per distinct content), with the plans of the ops it names
    resolved now, once per distinct scope, so the first call inside it costs what a signature
    miss costs outside any block. A batch-invariant scope, and one whose blocks set ``*``, names
    every op (see Scope): the eager calls look only at ``priorities`` and ``plans``."""
    matmul = invariant and outer is not None and outer.matmul
    every_op = invariant or WILDCARD in named
    content = (outer, tuple(sorted(named.items())), (invariant, STATE.ops_version) if every_op else None)
    scope: Scope | None = STATE.scopes.get(content)
    if scope is not None:
        return scope
    if not every_op:
        scope = STATE.remember(STATE.scopes, content, Scope(named, outer))
        for op_name, names in named.items():
            scope.plans[op_name] = _shared_plan(STATE.ops[op_name], _with_native(names), generation)
        return scope
    scope = STATE.remember(STATE.scopes, content, Scope({}, outer, invariant, named, matmul))
    for op_name, op in STATE.ops.items():
        names = effective_priority(op, scope)[0]
        scope.priorities[op_name] = names
        scope.plans[op_name] = _shared_plan(op, names, generation, invariant)
    return scope


# ---------------------------------------------------------------------- batch-invariant blocks
def batch_invariant_active(scope: Scope | None = None) -> bool:
    """Whether batch-invariant mode decides calls here: configured (key ``batch_invariant``) or
    inside a ``with ircore.batch_invariant()`` block of this thread or task."""
    ensure_loaded()  # the configuration is applied by the loader
    if STATE.batch_invariant:
        return True
    scope = SCOPE.get() if scope is None else scope
    return scope is not None and scope.invariant


def batch_invariant(*, matmul: bool = False) -> BatchInvariantBlock:
    """Within the block, in this thread or task only, run only implementations that claim batch
    invariance for the call: each output row then has the same bits whatever the batch around it
    (its size, the row's position). Like :func:`priority`, built on :mod:`contextvars`, usable as
    a decorator, and cheap to enter again; ``priority`` blocks inside it stay invariant.

    An op with no qualifying implementation for a call raises
    :class:`~ircore.errors.BatchInvariantError` naming the op, the call and what would qualify,
    never a batch-variant result. ``matmul=True`` also routes ``aten::mm``, ``addmm`` and ``bmm``
    on CUDA (and ``linear`` through them) to a provider's fixed-tile-order persistent matmul
    (the triton provider's), process-wide while any such block is open (docs/batch-invariance.md).
    The configuration key ``batch_invariant`` (``IRCORE_BATCH_INVARIANT=1``) turns the mode on
    for the whole process instead.
    """
    return _MATMUL_BLOCK if matmul else _BLOCK


#: One element per ``ircore.batch_invariant()`` block open, in all threads (list appends and
#: pops are atomic: no lock): a value Dynamo can guard on (the block itself is a context
#: variable, which it cannot). A call Dynamo traces with ``trace_implementations`` takes the
#: invariant plan while any is open (IrOp.traced_call), so a function traced inside a block
#: recompiles outside it and the other way round; a thread outside any block while another thread
#: is inside one gets the invariant kernels (slower, never wrong).
open_invariant_blocks: list[None] = []
_open_block, _close_block = open_invariant_blocks.append, open_invariant_blocks.pop
_base_enter: Callable[[Any], None] = getattr(_BlockBase, "__enter__")  # noqa: B009 (a C type's slot)
_base_exit: Callable[..., None] = getattr(_BlockBase, "__exit__")  # noqa: B009


class BatchInvariantBlock(_BlockBase, contextlib.ContextDecorator):  # type: ignore[misc]
    """What :func:`batch_invariant` returns: a context manager (and decorator) holding no
    per-entry state, like :class:`PriorityBlock`."""

    def __init__(self, matmul: bool = False) -> None:
        self._matmul = matmul
        self._seen: dict[Scope | None, tuple[object, Scope]] = {}
        super().__init__(SCOPE, self._seen)

    def _recreate_cm(self) -> BatchInvariantBlock:
        return self

    def __enter__(self) -> None:
        _base_enter(self)
        _open_block(None)

    def __exit__(self, *exc_info: object) -> None:
        try:
            _base_exit(self, *exc_info)
        finally:
            _close_block()

    def _resolve(self, outer: Scope | None) -> Scope:
        _ownership.refuse_provider_code("ircore.batch_invariant()")
        ensure_loaded()
        generation = STATE.generation
        named = dict(outer.named) if outer is not None else {}
        scope = _scope(named, outer, True, generation)
        if self._matmul and not scope.matmul:
            content = (scope, "matmul")
            found: Scope | None = STATE.scopes.get(content)
            if found is None:
                found = Scope(scope.priorities, outer, True, named, True)
                found.plans = scope.plans
                STATE.remember(STATE.scopes, content, found)
            scope = found
        STATE.remember(self._seen, outer, (generation, scope))
        return scope


class _MatmulBlock(BatchInvariantBlock):
    """``batch_invariant(matmul=True)``: the block, and the matmul layer held while it is open."""

    def __enter__(self) -> None:
        from ircore import _matmul_layer

        _matmul_layer.hold(+1)
        try:
            super().__enter__()
        except BaseException:
            _matmul_layer.hold(-1)
            raise

    def __exit__(self, *exc_info: object) -> None:
        from ircore import _matmul_layer

        try:
            super().__exit__(*exc_info)
        finally:
            _matmul_layer.hold(-1)


_BLOCK = BatchInvariantBlock()
_MATMUL_BLOCK = _MatmulBlock(matmul=True)


# ---------------------------------------------------------------------- plans
def _entries(op: OpLike, names: Sequence[str], invariant: bool = False) -> tuple[Entry, ...]:
    """The entries of a plan; ``invariant``: only implementations that claim batch invariance,
    with native's invariant form (or its refusal) last (``IrOp.invariant_entry``)."""
    if invariant or STATE.batch_invariant:
        return _invariant_entries(op, names)
    entries: list[Entry] = []
    for name in names:
        if name == NATIVE:
            entries.append(op.entry(NATIVE))
            break  # native runs everything: nothing after it is reached
        if name in op.impls and name not in STATE.blocked:
            entries.append(op.entry(name))
    return tuple(entries)


def _invariant_entries(op: OpLike, names: Sequence[str]) -> tuple[Entry, ...]:
    entries: list[Entry] = []
    for name in names:
        if name == NATIVE:
            native = op.invariant_entry(NATIVE)
            assert native is not None
            entries.append(native)
            break
        if name in op.impls and name not in STATE.blocked:
            entry = op.invariant_entry(name)
            if entry is not None:
                entries.append(entry)
    return tuple(entries)


def _shared_plan(op: OpLike, names: tuple[str, ...], generation: list[bool], invariant: bool = False) -> Plan:
    """The plan of ``op`` for the list ``names`` (``native`` last), one per (op, list, mode) and
    generation, shared by every scope that resolves ``op`` to that list."""
    invariant = invariant or STATE.batch_invariant
    key = (op.name, names, invariant)
    plan: Plan | None = STATE.plans.get(key)
    if plan is None or plan[0] is not generation:  # by position: a named field costs more
        entries = _entries(op, names, invariant)
        plan = STATE.remember(STATE.plans, key, _tuple_new(Plan, (generation, entries, {})))
    return plan


def plan_for(op: OpLike, scope: Scope | None) -> Plan:
    """``op``'s current plan under ``scope``, resolved again if it is stale.

    Under a scope that names the op: the scope's plan (shared by every scope that resolves the op
    to the same list). Otherwise the process-wide plan, ``op._plan``, whose table of remembered
    choices is ``op.signature_cache`` (what the fast call looks in outside scopes); compiled
    graphs are lowered with it.
    """
    if scope is not None and op.name in scope.priorities:
        plan: Plan | None = scope.plans.get(op.name)
        if plan is None or plan[0] is not STATE.generation:
            ensure_loaded()
            plan = _shared_plan(op, effective_priority(op, scope)[0], STATE.generation, scope.invariant)
            scope.plans[op.name] = plan
        return plan
    plan = op._plan
    if plan[0] is not STATE.generation:
        ensure_loaded()
        generation = STATE.generation
        plan = _tuple_new(
            Plan, (generation, _entries(op, effective_priority(op, None)[0]), op.signature_cache)
        )
        op._plan = plan
    return plan


def lowering_plan(op: OpLike) -> tuple[Entry, ...]:
    """The entries the compile-time lowering walks for ``op``: the process-wide plan, or in
    batch-invariant mode (configured, or a block around the compile) the invariant plan.

    In the mode an implementation that runs an invariant variant (``ImplSpec.invariant_fn``) is
    lowered to the op ircore builds for that variant (``ircore._torch_ops.impl_op``).
    """
    if not batch_invariant_active():
        return plan_for(op, None).entries
    return invariant_plan(op).entries


def invariant_plan(op: OpLike) -> Plan:
    """``op``'s batch-invariant plan for the process-wide priority (what compiled graphs use in
    the mode)."""
    ensure_loaded()
    return _shared_plan(op, effective_priority(op, None)[0], STATE.generation, True)


# ---------------------------------------------------------------------- the walk
#: ``on_step(entry, accepted, why)``: told each entry the walk considers (see :func:`explain`).
StepObserver = Callable[[Entry, bool, str], None]
_GRAD_REASON = "an argument requires grad and grad mode is on: only native has autograd"


_IRCORE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _raised_at(exc: BaseException) -> str:
    """``file:line`` of the predicate's line that raised (or called what raised): the deepest
    frame outside ircore and torch, else the deepest frame."""
    import torch  # loaded: a predicate ran on tensors

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    tb = exc.__traceback__
    return raised_at(tb, (_IRCORE_DIR, torch_dir)) or raised_at(tb) or "?"


def _predicate_raised(op_name: str, provider: str, exc: BaseException) -> None:
    key = (op_name, provider)
    if key not in STATE.warned_predicates:
        STATE.warned_predicates.add(key)
        _log.warning(
            "provider %r: supports_args of %s raised %s: %s (at %s); treating it as 'not supported' "
            "(logged once): a predicate must return False for arguments its kernel does not take, "
            "never raise",
            provider,
            op_name,
            type(exc).__name__,
            exc,
            _raised_at(exc),
        )


def first_supported(
    op_name: str,
    entries: tuple[Entry, ...],
    args: tuple[Any, ...],
    grad: bool = False,
    on_step: StepObserver | None = None,
) -> tuple[Entry, bool]:
    """The first entry whose predicate accepts ``args``, and whether that choice may be cached.

    Cacheable means every predicate consulted (up to and including the chosen entry's) is declared
    ``cache_by_signature`` and none raised; a predicate that raises counts as "not supported".
    ``grad`` (the call must be differentiable, ``IrOp.wants_grad``) leaves only native, the one
    implementation with autograd; the signature says so, so that choice is cacheable.
    ``on_step`` is told every entry considered, with its verdict and why.
    """
    if grad:
        if on_step is not None:
            for entry in entries[:-1]:
                on_step(entry, False, _GRAD_REASON)
            on_step(entries[-1], True, "the native reference runs every call")
        return entries[-1], True
    cacheable = True
    for entry in entries:
        pred = entry.supports_args
        if pred is None:
            if on_step is not None:
                native = entry.provider == NATIVE
                on_step(
                    entry,
                    True,
                    "the native reference runs every call"
                    if native
                    else "accepts every call (no supports_args)",
                )
            return entry, cacheable
        cacheable = cacheable and entry.cacheable
        try:
            accepted = pred(*args)
        except CONTAINED as exc:
            _predicate_raised(op_name, entry.provider, exc)
            if on_step is not None:
                on_step(entry, False, f"supports_args raised {type(exc).__name__}: {exc}")
            cacheable = False
            continue
        if on_step is not None:
            on_step(
                entry,
                bool(accepted),
                f"supports_args {'accepted' if accepted else 'rejected'} these arguments",
            )
        if accepted:
            return entry, cacheable
    raise AssertionError(f"ircore op {op_name!r}: plan has no native entry")


def choose_and_cache(op: OpLike, key: bytes, args: tuple[Any, ...], plan: Plan | None = None) -> Any:
    """An eager call whose signature ``key`` has no remembered choice: validate, choose, run.

    The choice is remembered for ``key`` when it cannot depend on more than the signature: the
    op's check and every ``supports_args`` consulted up to the chosen entry are declared
    ``cache_by_signature`` (and none raised). It goes to ``plan.signatures``: outside priority
    scopes that is ``op.signature_cache``, which a new generation clears; inside a scope, the
    scope's plan's table, which is replaced when the generation changes. Either way a remembered
    choice never outlives the priorities and providers it was made under. ``plan``: the plan
    that decides the call, when the caller has it (the fast call, ircore/csrc/fast_call.cpp, and
    the eager call's scoped path, which have just looked it up), else looked up here.
    """
    if plan is None:
        plan = plan_for(op, SCOPE.get())
    # The signature helper described the call (``key``), which it does only for arguments the
    # annotations allow (ircore._argtypes): the op's own check is what is left.
    op.check_declared(*args)
    entry, cacheable = first_supported(op.name, plan.entries, args, op.wants_grad(args))
    if cacheable:
        cache = plan.signatures
        with STATE.lock:  # not after a new generation that this plan predates
            if plan.generation is STATE.generation:
                if len(cache) >= SIGNATURE_CACHE_LIMIT:
                    cache.clear()
                cache[key] = entry
    return run_entry(op.name, entry.provider, entry.call, args)


def run_entry(op_name: str, provider: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Call ``fn``; say at DEBUG which provider ran, and in a failure's notes whose it was."""
    if _log.isEnabledFor(logging.DEBUG):
        _log.debug("%s: running %s", op_name, provider)
    try:
        return fn(*args)
    except BaseException as exc:
        failure = note_failure(op_name, provider, exc)
        if failure is not None:
            raise failure from exc
        raise


def note_failure(op_name: str, provider: str, exc: BaseException) -> ProviderError | None:
    """Say in the traceback which provider's implementation raised, and how to bypass it.

    A ``SystemExit`` or ``GeneratorExit`` from a kernel is not the user's to get: the error to
    raise instead (a :class:`~ircore.errors.ProviderError`, the original as its cause) is returned.
    Any other exception is kept (None).
    """
    bypass = f"to bypass it: ircore.set_priority({op_name}=[...]) or IRCORE_DISABLE={provider}"
    if isinstance(exc, (SystemExit, GeneratorExit)):
        return ProviderError(
            f"the implementation of ircore op {op_name!r} by provider {provider!r} raised "
            f"{type(exc).__name__}({', '.join(map(repr, exc.args))}), which ircore does not let end the "
            f"caller's program; {bypass}"
        )
    add_note = getattr(exc, "add_note", None)  # Python 3.11+
    if provider != NATIVE and add_note is not None and isinstance(exc, Exception):
        add_note(f"raised in provider {provider!r}'s implementation of ircore op {op_name!r}; {bypass}")
    return None


def run(op: OpLike, args: tuple[Any, ...], *, allow_inplace: bool) -> Any:
    """Validate and run ``op`` on real tensors (the torch kernel and ``maybe_inplace`` path).

    ``allow_inplace`` lets an in-place implementation write into the caller's tensors, unless
    one of them shares memory with another argument: then it runs on copies, as functional
    calls do (``IrOp.inputs_overlap``).
    """
    op.check_args(*args)
    entry = first_supported(op.name, plan_for(op, SCOPE.get()).entries, args, op.wants_grad(args))[0]
    in_place = allow_inplace and entry.call is not entry.fn and not op.inputs_overlap(args)
    return run_entry(op.name, entry.provider, entry.fn if in_place else entry.call, args)


# ---------------------------------------------------------------------- explain
# Records below are NamedTuples, not dataclasses: a dataclass costs ~0.7 ms of `import ircore`
# to create (its methods are generated with exec), a NamedTuple ~0.1 ms.
class Step(NamedTuple):
    """One provider considered for a call, and what became of it."""

    provider: str
    outcome: str  # "chosen", "skipped", "not reached", "not in priority", "refuses"
    reason: str


class Explanation(NamedTuple):
    """The answer of :func:`explain`: which implementation runs for a call, and why."""

    op: str
    #: the implementation that runs; None where nothing runs: the call raises (``raises``)
    chosen: str | None
    priority: tuple[str, ...]
    source: str
    steps: tuple[Step, ...]
    #: what tracing such a call records: torch.ops.ircore.<op>, or with trace_implementations on
    #: the chosen implementation's op (see IrOp.traced_call)
    traced: str = ""
    #: the error the call raises instead of running (batch-invariant mode with nothing that
    #: qualifies: ``BatchInvariantError``), else ""
    raises: str = ""

    def __str__(self) -> str:
        lines = [
            f"{self.op}: " + (f"raises {self.raises}" if self.raises else f"runs {self.chosen}"),
            f"  priority: {', '.join(self.priority)}  (from {self.source})",
        ]
        lines += [f"  {s.provider:<12} {s.outcome:<15} {s.reason}" for s in self.steps]
        if STATE.tracing_implementations and self.traced:
            lines.append(f"  traced as: {self.traced}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "chosen": self.chosen,
            "priority": list(self.priority),
            "source": self.source,
            "steps": [s._asdict() for s in self.steps],
            "traced": self.traced,
            "raises": self.raises,
        }


def _why_not_in_plan(op: OpLike, name: str, invariant: bool = False) -> str:
    """Why a provider the priority names has no entry in the plan."""
    if name in STATE.blocked:
        return STATE.blocked[name]
    if invariant and name in op.impls:
        return f"batch-invariant mode: {op.invariance_of(name)}"
    why = op.removed.get(name) or STATE.providers.status_of(name)
    return why or f"provider {name!r} does not implement {op.name}"


def explain(op: OpLike, args: tuple[Any, ...]) -> Explanation:
    """The walk a call with ``args`` makes (:func:`first_supported` on the op's current plan),
    with every decision recorded, and every provider the plan leaves out, with why."""
    ensure_loaded()
    op.check_args(*args)
    scope = SCOPE.get()
    names, source = effective_priority(op, scope)
    verdicts: dict[str, tuple[bool, str]] = {}

    def on_step(entry: Entry, accepted: bool, why: str) -> None:
        verdicts[entry.provider] = (accepted, why)

    plan = plan_for(op, scope)
    entry = first_supported(op.name, plan.entries, args, op.wants_grad(args), on_step)[0]
    chosen: str | None = entry.provider
    invariant = batch_invariant_active(scope)
    raises = ""
    if invariant:
        source += "; batch-invariant mode on"
        if chosen == NATIVE and op.refuses_in_mode(args):  # the walk ends at native's refusal
            raises = "BatchInvariantError (batch-invariant mode: no implementation qualifies for this call)"
    steps: list[Step] = []
    reached = False
    for name in names:
        if reached:
            steps.append(Step(name, "not reached", f"{chosen} runs first"))
        elif name in verdicts:
            accepted, why = verdicts[name]
            if invariant:
                why += f" (batch-invariant mode: {op.invariance_of(name, args)})"
            outcome = "chosen" if accepted else "skipped"
            if accepted and raises:
                outcome, why = "refuses", f"raises BatchInvariantError ({op.invariance_of(name, args)})"
            steps.append(Step(name, outcome, why))
            reached = accepted
        else:
            steps.append(Step(name, "skipped", _why_not_in_plan(op, name, invariant)))
    steps += [
        Step(name, "not in priority", f"not listed by {source}") for name in op.impls if name not in names
    ]
    if raises:
        chosen = None
    return Explanation(op.name, chosen, names, source, tuple(steps), raises=raises)
