"""Declaring ops and their implementations.

An op is declared once, by its native PyTorch function (:func:`register_op`); that function *is*
the op's semantics. The op becomes ``torch.ops.ircore.<name>`` so that graphs can hold it
(:mod:`ircore._torch_ops`), and a Python callable (:class:`IrOp`) whose eager call skips the
torch dispatcher (:mod:`ircore._fastpath`). Providers attach implementations
(:class:`Impl`) through their registrar, users with :meth:`IrOp.register_impl`; which one runs
is decided in :mod:`ircore.dispatch`.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, ParamSpec, TypeVar, overload

import torch

from ircore import _ownership, _torch_ops, _traced, _validation, dispatch
from ircore._argtypes import argument_checker, tensor_parameters, type_checker
from ircore._fastpath import build_eager_call, providers_loaded
from ircore._state import DECLARED_ATTRIBUTES, STATE
from ircore._validation import NAME_PATTERN, RESERVED_PROVIDER_NAMES, reject, source_of
from ircore.dispatch import Entry, Plan
from ircore.errors import NoToleranceError, OpDeclarationError

__all__ = [
    "DEFAULT_TOLERANCES",
    "NAME_PATTERN",
    "RESERVED_PROVIDER_NAMES",
    "Impl",
    "IrOp",
    "Quantized",
    "Sample",
    "Tolerance",
    "all_ops",
    "explain",
    "get_op",
    "register_op",
]

P = ParamSpec("P")
R = TypeVar("R")

# Bound once: the checks of every traced or subclass call.
_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_Proxy = torch.fx.Proxy
_is_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_is_wrapper_subclass = torch.utils._python_dispatch.is_traceable_wrapper_subclass
_alias = torch.ops.aten.alias.default
_grad_enabled = torch.is_grad_enabled
_is_alias_of = torch._C._is_alias_of  # type: ignore[attr-defined]  # same storage (conservative: also disjoint parts of one)
# 0: no element of the tensor shares memory with another; 1: some do (stride 0); 2: cannot tell
_internal_overlap = torch._debug_has_internal_overlap
_NO_OVERLAP = 0


class Tolerance(NamedTuple):
    """How far an implementation may be from the fp64 reference: ``|a-b| <= atol + rtol*|b|``."""

    atol: float
    rtol: float


#: For ops declared without tolerances (and dtypes they leave out): torch.testing.assert_close's
#: defaults for each dtype.
DEFAULT_TOLERANCES = {
    torch.float64: Tolerance(atol=1e-7, rtol=1e-7),
    torch.float32: Tolerance(atol=1e-5, rtol=1.3e-6),
    torch.float16: Tolerance(atol=1e-5, rtol=1e-3),
    torch.bfloat16: Tolerance(atol=1e-5, rtol=1.6e-2),
}


class Quantized(NamedTuple):
    """One fp8 output as the conformance kit compares it (see ``register_op(quantized_outputs=)``).

    ``values``: the output's elements that count (padding rows left out), fp8 from an
    implementation, fp64 and unrounded from the reference; ``scale`` broadcasts to ``values``:
    the dequantised output is ``values * scale``; ``limit``: the largest magnitude ``values`` may
    hold (the op's clamp, 448 for e4m3fn, 224 for vLLM's e4m3fnuz): one fp8 ulp beyond it fails.
    """

    values: torch.Tensor
    scale: torch.Tensor
    limit: float = float("inf")


class Sample(NamedTuple):
    """One set of arguments for an op, with a label that says what it exercises."""

    args: tuple[Any, ...]
    label: str


@dataclass(frozen=True, eq=False)
class Impl:
    """One provider's implementation of one op."""

    op_name: str
    provider: str
    #: the function (or torch op) as registered
    fn: Callable[..., Any]
    supports_args: Callable[..., bool] | None
    #: ``fn`` writes its results into the op's ``inplace_args``
    inplace: bool
    source: str
    #: supports_args' answer depends only on the call signature (see ircore._signature)
    cache_by_signature: bool = False
    #: what runs: ``fn``, or for an in-place torch op that returns nothing, ``fn`` and then its
    #: in-place arguments (the op's outputs); None: ``fn``
    kernel: Callable[..., Any] | None = None
    #: the fake of the op that graphs hold for it (None: the op's own, see ircore._torch_ops.impl_op)
    fake: Callable[..., Any] | None = None
    #: the claim that each output row depends only on the same input row, bit for bit, whatever
    #: the batch around it: True, False, or a predicate over the call (the op's parameters)
    #: saying for which calls it holds (batch-invariant mode runs only what claims it)
    batch_invariant: bool | Callable[..., bool] = False
    #: the provider's batch-invariant variant of ``fn`` (same signature and in-place contract, a
    #: launch configuration fixed per hidden size), run instead of ``fn`` in the mode; None: ``fn``
    invariant_fn: Callable[..., Any] | None = None

    @property
    def run(self) -> Callable[..., Any]:
        """What dispatch calls for this implementation (``kernel``, else ``fn``)."""
        return self.fn if self.kernel is None else self.kernel

    def uuid(self) -> str:
        """A hash of the source files of ``fn`` and ``supports_args``: changes when their code does.

        Part of the compile cache key, so an upgraded provider misses Inductor's FX graph cache.
        """
        parts = [self.provider, self.op_name, getattr(self.fn, "__qualname__", repr(self.fn))]
        parts += [_validation.file_digest(f) for f in (self.fn, self.supports_args) if f is not None]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


_DECLARED = frozenset(DECLARED_ATTRIBUTES)


def _no_checks(*args: Any) -> None:
    """The argument check of an op declared without one."""


class IrOp(Generic[P, R]):
    """An op: its native semantics, its torch custom op, and its implementations.

    Calling it runs the op: outside tracing it validates the arguments and calls the first
    implementation the priority list allows and whose ``supports_args`` accepts them; under
    ``torch.compile``, ``make_fx`` or any dispatch mode it calls ``torch.ops.ircore.<name>``
    instead, so the graph records the op. Made by :func:`register_op` only.
    """

    #: set once declared: the declared attributes are then fixed (see __setattr__)
    _sealed = False

    if TYPE_CHECKING:

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def __init__(
        self,
        name: str,
        native: Callable[P, R],
        *,
        inplace_args: tuple[str, ...],
        check_args: Callable[..., None],
        any_layout_args: tuple[str, ...] = (),
        tolerances: dict[torch.dtype, Tolerance],
        sample_inputs: Callable[..., Iterator[Sample]] | None,
        make_inputs: Callable[..., tuple[Any, ...]] | None,
        reference: Callable[..., Any] | None,
        cache_by_signature: bool,
        quantized_outputs: Callable[[tuple[Any, ...], tuple[Any, ...]], dict[int, Quantized]] | None = None,
        batch_invariant: bool | str | Callable[..., Any] = False,
        batch_dependent: Callable[..., str | None] | None = None,
    ) -> None:
        self.name = name
        #: whether native is batch-invariant: True; a function with the native signature that
        #: computes the op with a fixed-order reduction, run instead of native in the mode; False,
        #: or a str saying why none can be (native then refuses calls in the mode)
        self.batch_invariant = batch_invariant
        #: ``(*args) -> why or None``: the calls whose semantics depend on the whole batch (a
        #: per-tensor dynamic quantization): refused in the mode whatever any implementation claims
        self.batch_dependent = batch_dependent
        self.native = native
        self.inplace_args = inplace_args
        self.any_layout_args = any_layout_args
        self.tolerances = tolerances
        self.sample_inputs = sample_inputs
        self.make_inputs = make_inputs
        #: the op in fp64, unrounded (what the conformance kit compares against); takes the op's
        #: arguments as the op does (keywords, defaults)
        self.reference = None if reference is None else self._completing(reference)
        self.cache_by_signature = cache_by_signature
        #: ``(args, outputs) -> {output index: Quantized}`` for ops with fp8 outputs: how the kit
        #: dequantises them (ircore.testing compares those in fp8 ulps, the others as usual)
        self.quantized_outputs = quantized_outputs
        self.__doc__ = native.__doc__
        self.signature = inspect.signature(native)
        self.param_names = tuple(self.signature.parameters)
        #: each parameter's default (``inspect.Parameter.empty`` where it has none)
        self.defaults = tuple(p.default for p in self.signature.parameters.values())
        self._required = sum(d is inspect.Parameter.empty for d in self.defaults)
        self.schema = _validation.infer_schema(native)
        #: Raises InvalidArgumentError for an argument of the wrong type (see ircore._argtypes).
        self.check_types = type_checker(name, native, self.param_names)
        #: the op's own check, as declared
        self.check_declared = check_args
        #: ``check_args`` raises InvalidArgumentError for bad input, before any implementation
        #: runs: what the annotations rule out (types, layouts, 64-bit ints:
        #: ``check_annotations``), then ``check_declared``
        self.check_args, self.check_annotations, self.quick_test = argument_checker(
            name, native, self.param_names, check_args, any_layout_args, self.check_types
        )
        self.tensor_indices = tensor_parameters(native, self.param_names)
        self.inplace_indices = tuple(self.param_names.index(a) for a in inplace_args)
        # (written, other) tensor parameters that must not share memory for an in-place call
        self._overlap_pairs = tuple(
            (i, j)
            for i in self.inplace_indices
            for j in self.tensor_indices
            if j != i and not (j in self.inplace_indices and j < i)
        )
        self.impls: dict[str, Impl] = {}
        #: provider -> how its implementation was removed (unregister_impl), for list/explain/doctor
        self.removed: dict[str, str] = {}
        self.signature_spec = (
            _validation.signature_spec(name, native, self.param_names) if cache_by_signature else None
        )
        #: call signature -> the plan entry that runs it, outside priority scopes (ircore._fastpath)
        self.signature_cache: dict[bytes, Entry] = {}
        #: the process-wide plan (dispatch.plan_for); never current before its first call
        self._plan = Plan(None, (), self.signature_cache)
        #: what a traced call chooses from under Dynamo, outside and in batch-invariant mode
        #: (made by ``_fastpath.providers_loaded``)
        self.traced_entries: tuple[tuple[Entry, ...], tuple[Entry, ...]] = ((), ())
        # provider -> (its implementation, the plan entry made for it): see entry()
        self._entries: dict[str, tuple[Impl | None, Entry]] = {}
        #: the fake implementation declared with the op (None: native on fake tensors)
        self.fake: Callable[..., Any] | None = None
        self.torch_op: Any = None
        #: torch.ops.ircore.<name>.maybe_inplace, where the outputs map onto ``inplace_args``
        self.torch_inplace_op: Any = None

    def _completing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, called with the op's arguments bound as a call of the op binds them."""

        def completed(*args: Any, **kwargs: Any) -> Any:
            return fn(*self.bind_args(args, kwargs))

        completed.__wrapped__ = fn  # type: ignore[attr-defined]
        completed.__doc__ = fn.__doc__
        return completed

    # ------------------------------------------------------------------ calls
    def bind_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """All arguments positionally, defaults filled in (the native signature binds them)."""
        if not kwargs and self._required <= len(args) <= len(self.defaults):
            return args + self.defaults[len(args) :]
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"ircore.ops.{self.name}{self.signature}: {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def maybe_inplace(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the op, allowing an in-place implementation to overwrite ``inplace_args``.

        For callers that no longer need those inputs: it saves the clone that the functional
        call makes before an in-place implementation. Use only the returned tensors. When a
        tensor it could overwrite shares memory with another argument (``f(x, x, ...)``) or with
        itself (an expanded tensor, whose elements share memory), an in-place implementation
        runs on copies, as in the functional call, so results are right.

        Under ``torch.compile``, ``make_fx`` (any tracing mode), ``torch.fx.symbolic_trace`` or a
        dispatch mode the graph records one ``torch.ops.ircore.<name>.maybe_inplace`` node, which
        writes the results into the in-place arguments; the compiler may then let an in-place
        kernel write straight into those (donated) tensors. The traced call is the functional op
        instead, as the eager call is, where that node cannot hold the call: a result of another
        shape, dtype or device than its in-place argument (the eager call returns it as a new
        tensor), a call that needs grad (``native``, as in eager calls), tensor subclasses
        (DTensor: a subclass may run the kernel on redistributed copies, where an in-place write
        would be lost). ``symbolic_trace`` has no shapes: it always records the node, which
        refuses such a result when it runs.
        """
        full = self.bind_args(args, kwargs)
        first = full[0]
        if _is_compiling() or _dispatch_stack_len() or type(first) is not _Tensor:
            if _is_dynamo_compiling() and providers_loaded() and STATE.version < 0:
                pass  # never true; read so that Dynamo guards on the version (see _fastpath)
            return self._traced_maybe_inplace(full)  # type: ignore[no-any-return]
        return dispatch.run(self, full, allow_inplace=True)  # type: ignore[no-any-return]

    def _traced_maybe_inplace(self, full: tuple[Any, ...]) -> Any:
        """``maybe_inplace`` under tracing: the rule in :meth:`maybe_inplace`'s docstring."""
        first = full[0]
        proxy = type(first) is _Proxy
        self.check_annotations(*full)  # before anything reads a tensor's attributes
        traces = _configured_to_trace_implementations() and self._traces_implementation(first)
        if traces and not self.wants_grad(full):
            return self.traced_call(full, donated=True)
        if (
            self.torch_inplace_op is None
            or _wrapper_subclass(first)
            or (not proxy and self.wants_grad(full))
        ):
            return self.call_torch_op(*full)
        dynamo = _is_dynamo_compiling()
        if dynamo:
            # Dynamo runs no code of ours outside the trace: the functional node's fake values say
            # whether the results fit. Where they do the node is dead; the ircore backend removes
            # it (Inductor and AOTAutograd drop dead nodes too).
            probe = self.torch_op(*full)
            if _torch_ops.first_unfit(self, full, probe) is not None:
                return probe
        elif not proxy and not _outputs_fit(self, full, _torch_ops.fake_outputs(self, full)):
            return self.torch_op(*full)
        self.torch_inplace_op(*full)
        outs = tuple(full[i] for i in self.inplace_indices)
        if dynamo:  # the results as nodes of their own, so that a later read of x is told apart
            outs = tuple(_alias(out) for out in outs)
        return outs if len(outs) > 1 else outs[0]

    def call_torch_op(self, *args: Any) -> Any:
        """Call ``torch.ops.ircore.<name>`` (tracing, tensor subclasses): the checks of what the
        annotations rule out first (types, layouts, 64-bit ints).

        torch's own argument parser would otherwise reject a wrong type with its own message. A
        call that needs grad runs (and is traced as) native, as in eager calls: the torch op has
        no autograd formula.
        """
        self.check_annotations(*args)
        if type(args[0]) is not _Proxy and self.wants_grad(args):
            self.check_args(*args)
            native: Callable[..., Any] = self.native
            return native(*args)
        if _configured_to_trace_implementations() and self._traces_implementation(args[0]):
            return self.traced_call(args)
        return self.torch_op(*args)

    @staticmethod
    def _traces_implementation(first: Any) -> bool:
        """With ``trace_implementations`` on: a traced call with values (not symbolic_trace's
        proxies; not a tensor subclass such as DTensor, whose sharding rules need the ircore op)."""
        return type(first) is not _Proxy and not _wrapper_subclass(first)

    def traced_call(self, args: tuple[Any, ...], donated: bool = False) -> Any:
        """What tracing records with ``trace_implementations`` on: the implementation an eager call
        with these (fake) arguments would run, in place of ``torch.ops.ircore.<name>``.

        The choice is the eager rule over the process-wide plan (``dispatch.first_supported``, as
        the ``ircore`` backend's lowering makes it), or in batch-invariant mode over the invariant
        plan (``dispatch.lowering_plan``: native's fixed-order form, an implementation's
        ``invariant_fn`` as the op built for it, a refusal raised at trace time): a provider's
        implementation is recorded as the op the core built for it (``ircore._torch_ops.traced_form``:
        its own torch op, or one opaque op whose kernel calls it), ``native`` as the ops it is made
        of. An in-place implementation writes copies of the in-place arguments, or, ``donated``
        (``maybe_inplace``), the arguments themselves. Under Dynamo the predicates are traced, so
        the graph is guarded on what they read. Counted in ``ircore.compile.report().traced``.
        """
        self.check_args(*args)
        # Under Dynamo the entries were made for real (_fastpath.providers_loaded): read as they
        # are, so that the graph is not guarded on the generation (which every change replaces)
        if not _is_dynamo_compiling():
            entries = dispatch.lowering_plan(self)
        else:  # Dynamo cannot read the block (a context variable) but guards on what is read here
            entries = self.traced_entries[STATE.batch_invariant or len(dispatch.open_invariant_blocks) > 0]
        entry = dispatch.first_supported(self.name, entries, args)[0]
        _traced.record(self.name, entry.provider)
        impl = self.impls.get(entry.provider)
        if impl is None:  # native, its fixed-order form, or the mode's refusal
            return entry.call(*args)
        fn, in_place = _torch_ops.traced_form_of(self, impl, entry.fn)
        if in_place and not donated:
            indices = self.inplace_indices
            args = tuple(a.clone() if i in indices else a for i, a in enumerate(args))
        return fn(*args)

    def wants_grad(self, args: tuple[Any, ...]) -> bool:
        """Whether this call must be differentiable: grad mode is on and a tensor requires grad.

        Such calls run ``native`` (the one implementation with autograd), whatever the priority.
        """
        if not _grad_enabled():
            return False
        for i in self.tensor_indices:
            arg = args[i]
            if arg is not None and arg.requires_grad:
                return True
        return False

    def inputs_overlap(self, args: tuple[Any, ...]) -> bool:
        """Whether a tensor an in-place implementation may write cannot be written in place: it
        shares memory with another argument, or its own elements share memory (an expanded,
        stride-0 tensor: writing it is undefined), or torch cannot tell that they don't."""
        for i, j in self._overlap_pairs:
            if args[j] is not None and _is_alias_of(args[i], args[j]):
                return True
        for i in self.inplace_indices:
            if _internal_overlap(args[i]) != _NO_OVERLAP:
                return True
        return False

    def entry(self, provider: str) -> Entry:
        """How a plan holds ``provider``'s implementation (or native): see :class:`ircore.dispatch.Entry`.

        Made once per implementation (plans are resolved again after every change, and a
        never-seen priority block resolves its own: a named tuple costs ~0.5 us to make).
        """
        impl = self.impls.get(provider)
        made = self._entries.get(provider)
        if made is not None and made[0] is impl:
            return made[1]
        if impl is None:  # native
            entry = Entry(dispatch.NATIVE, self.native, self.native, None, True)
        else:
            cacheable = impl.supports_args is None or impl.cache_by_signature
            entry = Entry(provider, self.functional_call(impl), impl.run, impl.supports_args, cacheable)
        self._entries[provider] = (impl, entry)
        return entry

    def invariant_entry(self, provider: str) -> Entry | None:
        """How a batch-invariant plan holds ``provider``'s implementation (or native), or None
        where the implementation claims no invariance.

        A claim of True keeps the plain entry; a predicate claim joins ``supports_args`` (the
        entry accepts a call only where both do). Native is the op's invariant function where it
        declares one, else native itself where it declares it invariant, else an entry that
        refuses the call (:meth:`refuse_variant`). Calls the op declares batch-dependent
        (``register_op(batch_dependent=...)``) are declined by every implementation and refused
        by native, whatever the claims.
        """
        impl = self.impls.get(provider)
        if impl is None and provider != dispatch.NATIVE:  # the provider does not implement this op
            return None
        key = provider + "\0invariant"
        made = self._entries.get(key)
        if made is not None and made[0] is impl:
            return made[1]
        entry = self._claimed_entry(provider, impl)
        if entry is not None and self.batch_dependent is not None and entry.call != self.refuse_variant:
            entry = self._declining_dependent(entry)
        self._entries[key] = (impl, entry)  # type: ignore[assignment]
        return entry

    def _claimed_entry(self, provider: str, impl: Impl | None) -> Entry | None:
        """:meth:`invariant_entry` from the claims alone."""
        if impl is None:  # native
            claim: Any = self.batch_invariant
            if claim is True:
                return self.entry(dispatch.NATIVE)
            if callable(claim):
                return Entry(dispatch.NATIVE, claim, claim, None, True)
            return Entry(dispatch.NATIVE, self.refuse_variant, self.refuse_variant, None, True)
        if impl.batch_invariant is True and impl.invariant_fn is None:
            return self.entry(provider)
        if impl.batch_invariant is not True and not callable(impl.batch_invariant):
            return None
        base = self.entry(provider)
        if impl.invariant_fn is not None:
            variant = impl.invariant_fn
            call = self._on_clones(provider, variant) if impl.inplace else variant
            base = Entry(provider, call, variant, base.supports_args, base.cacheable)
        if impl.batch_invariant is True:
            return base
        supports, claim = impl.supports_args, impl.batch_invariant

        def claimed(*args: Any) -> bool:
            return (supports is None or bool(supports(*args))) and bool(claim(*args))

        claimed.__qualname__ = f"{provider}.{self.name}[supported and claimed batch-invariant]"
        signature_only = bool(getattr(claim, "__ircore_signature_only__", False))
        return Entry(provider, base.call, base.fn, claimed, base.cacheable and signature_only)

    def _declining_dependent(self, entry: Entry) -> Entry:
        """``entry``, but never for a call the op declares batch-dependent: a provider's declines
        it (its predicate says no), native's refuses it with the op's reason. ``batch_dependent``
        reads the call's signature only, so a provider's entry stays as cacheable as it was."""
        dependent = self.batch_dependent
        assert dependent is not None
        if entry.provider == dispatch.NATIVE:  # native's entries call what they run (fn is call)
            run = entry.call

            def native_or_refuse(*args: Any) -> Any:
                return self.refuse_variant(*args) if dependent(*args) else run(*args)

            native_or_refuse.__qualname__ = f"native.{self.name}[refusing batch-dependent calls]"
            return Entry(entry.provider, native_or_refuse, native_or_refuse, None, True)
        supports = entry.supports_args

        def independent(*args: Any) -> bool:
            return not dependent(*args) and (supports is None or bool(supports(*args)))

        independent.__qualname__ = f"{entry.provider}.{self.name}[not a batch-dependent call]"
        return Entry(entry.provider, entry.call, entry.fn, independent, entry.cacheable)

    def invariance_of(self, provider: str, args: tuple[Any, ...] | None = None) -> str:
        """Whether ``provider``'s implementation (or native) qualifies in batch-invariant mode,
        in words (for ``explain``, ``list`` and the refusal); ``args``: for this call."""
        if args is not None and self.batch_dependent is not None:
            why = self.batch_dependent(*args)
            if why:
                return f"this call depends on the whole batch ({why})"
        if provider == dispatch.NATIVE:
            claim: Any = self.batch_invariant
            if claim is True:
                return "native is batch-invariant"
            if callable(claim):
                return f"native runs its batch-invariant form ({getattr(claim, '__name__', claim)})"
            why = f": {claim}" if isinstance(claim, str) and claim else ""
            return f"native is not batch-invariant{why}"
        impl = self.impls.get(provider)
        if impl is None:
            return f"provider {provider!r} does not implement {self.name}"
        if impl.batch_invariant is True:
            return "claims batch invariance"
        if not callable(impl.batch_invariant):
            return "claims no batch invariance"
        if args is None:
            return "claims batch invariance for some calls (a predicate)"
        try:
            held = bool(impl.batch_invariant(*args))
        except Exception as exc:
            return f"its batch_invariant claim raised {type(exc).__name__}: {exc}"
        return "its claim holds for this call" if held else "its batch_invariant claim rejects this call"

    def refuses_in_mode(self, args: tuple[Any, ...]) -> bool:
        """Whether native's entry in batch-invariant mode (:meth:`invariant_entry`) refuses this
        call: the entry is :meth:`refuse_variant` (native claims no invariance), or it refuses the
        calls the op declares batch-dependent and this is one."""
        entry = self.invariant_entry(dispatch.NATIVE)
        if entry is not None and entry.call == self.refuse_variant:
            return True
        return bool(self.batch_dependent is not None and self.batch_dependent(*args))

    def refuse_variant(self, *args: Any) -> Any:
        """What batch-invariant mode runs where no implementation qualifies: an error, never a
        batch-variant result."""
        from ircore.errors import BatchInvariantError

        shown = ", ".join(
            f"{name}={_describe_arg(value)}" for name, value in zip(self.param_names, args)
        )
        why_dependent = self.batch_dependent(*args) if self.batch_dependent is not None else None
        if why_dependent:
            raise BatchInvariantError(
                f"ircore op {self.name!r}: batch-invariant mode is on (ircore.batch_invariant() or the "
                f"batch_invariant setting) and this call ({shown}) depends on the whole batch by the "
                f"op's definition: {why_dependent}. No implementation can make it batch-invariant: "
                "change the call as said, or run it outside the mode"
            )
        names = dispatch.effective_priority(self, dispatch.SCOPE.get())[0]
        whys = [f"{p}: {self.invariance_of(p, args)}" for p in names if p != dispatch.NATIVE]
        # implementations the priority leaves out: one that qualifies is the likely fix
        whys += [
            f"{p}: {self.invariance_of(p, args)}, but not in the op's priority list {list(names)}"
            for p in sorted(self.impls)
            if p not in names and p != dispatch.NATIVE
        ]
        raise BatchInvariantError(
            f"ircore op {self.name!r}: batch-invariant mode is on (ircore.batch_invariant() or the "
            f"batch_invariant setting) and no implementation claims batch invariance for this call "
            f"({shown}). {self.invariance_of(dispatch.NATIVE)}"
            + (f"; {'; '.join(whys)}" if whys else "; no provider implements it")
            + ". Needed: a provider implementation whose ImplSpec declares batch_invariant (True, or "
            "a predicate accepting these arguments), installed and in the op's priority list; or "
            "run this call outside the mode"
        )

    def functional_call(self, impl: Impl) -> Callable[..., Any]:
        """What dispatch calls for ``impl`` from a functional caller: clones inputs it may mutate."""
        fn = impl.run
        if not impl.inplace:
            return fn
        return self._on_clones(impl.provider, fn)

    def _on_clones(self, provider: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` (in place) called on clones of the op's ``inplace_args``."""
        indices = self.inplace_indices

        def call_on_clones(*args: Any) -> Any:
            cloned = list(args)
            for i in indices:
                cloned[i] = cloned[i].clone()
            return fn(*cloned)

        call_on_clones.__qualname__ = f"{provider}.{self.name}[on clones]"
        return call_on_clones

    # ------------------------------------------------------------------ implementations
    def register_impl(
        self,
        provider: str,
        fn: Callable[..., Any],
        supports_args: Callable[..., bool] | None = None,
        inplace: bool = False,
        *,
        cache_by_signature: bool | None = None,
        fake: Callable[..., Any] | None = None,
        batch_invariant: bool | Callable[..., bool] = False,
        invariant_fn: Callable[..., Any] | None = None,
    ) -> Impl:
        """Attach ``provider``'s implementation ``fn``; validate everything first.

        ``fn`` must have exactly the native signature (checked through the torch schema it
        implies); ``supports_args`` takes the same parameters and returns whether ``fn``
        handles that call; ``inplace=True`` says ``fn`` may overwrite the op's
        ``inplace_args`` (allowed only where the op declares some). ``cache_by_signature=True``
        promises that ``supports_args`` answers from the call's signature alone (devices, dtypes,
        dimensions, last-dimension size and layout, int arguments: see :mod:`ircore._signature`),
        so its answer may be cached per signature: a cheaper eager call (None: true when
        ``supports_args`` is made by ``ircore.kit.supports``, which reads nothing else).

        An installed provider's name is that provider's alone: it registers through the registrar
        its hook receives, and a provider's own code (its import and hooks) may not call this.
        """
        _ownership.refuse_provider_code(f"ircore.ops.{self.name}.register_impl({provider!r}, ...)")
        dispatch.ensure_loaded()  # waits while providers load: their check would take it for theirs
        if isinstance(provider, str) and provider in STATE.providers.discovered():
            raise reject(
                self.name,
                provider,
                fn,
                f"{provider!r} is the name of an installed provider; only that provider registers "
                "under it, through its registrar. Register under a name of your own",
            )
        impl = self.validate_impl(
            provider,
            fn,
            supports_args,
            inplace,
            cache_by_signature=cache_by_signature,
            fake=fake,
            batch_invariant=batch_invariant,
            invariant_fn=invariant_fn,
        )
        attach_impls([impl])
        return impl

    def validate_impl(
        self,
        provider: str,
        fn: Callable[..., Any],
        supports_args: Callable[..., bool] | None = None,
        inplace: bool = False,
        *,
        cache_by_signature: bool | None = None,
        fake: Callable[..., Any] | None = None,
        batch_invariant: bool | Callable[..., bool] = False,
        invariant_fn: Callable[..., Any] | None = None,
    ) -> Impl:
        """Check an implementation without registering it; returns the :class:`Impl`.

        ``fn`` must have the native function's schema (parameter names, annotations, defaults),
        or be a torch op (``torch.ops.ns.name.default``) of the op's schema (names may differ),
        or of its in-place schema for an in-place implementation (``Tensor(a!)`` for each of the
        ``inplace_args``, returning nothing); ``supports_args`` takes the op's parameters,
        positionally; ``inplace`` only where the op declares ``inplace_args``; and the provider
        must not have implemented the op already. ``fake`` replaces the op's own fake in the op
        compiled graphs hold for this implementation (see ``ircore._torch_ops.impl_op``).
        """
        provider = _validation.check_provider_name(self.name, provider, fn)
        if provider in self.impls:
            raise reject(
                self.name,
                provider,
                fn,
                f"provider {provider!r} already registered an implementation of {self.name!r} "
                f"({self.impls[provider].source})",
            )
        if not callable(fn):
            why = (
                f"fn {fn!r} (of type {type(fn).__name__}) is not callable; pass the function, or the torch "
                f"op, that computes {self.name}"
            )
            raise reject(self.name, provider, fn, why)
        if inplace and not self.inplace_args:
            raise reject(
                self.name,
                provider,
                fn,
                f"op {self.name!r} does not allow in-place implementations (it declares no inplace_args)",
            )
        torch_op = _validation.as_torch_op(fn)
        kernel = None
        if torch_op is not None:
            fn, kernel = torch_op, self._torch_op_kernel(provider, torch_op, inplace)
        else:
            self._check_python_fn(provider, fn)
            taken = _torch_ops.impl_op_taken(provider, self.name)
            if taken is not None:
                why = (
                    f"torch.ops.{taken.replace('::', '.')} is already defined, and that is where ircore "
                    "defines the op compiled graphs hold for this implementation; give that torch op "
                    "itself as the implementation (its schema must be the op's), or name it differently"
                )
                raise reject(self.name, provider, fn, why)
        if supports_args is not None:
            _validation.check_predicate(self.name, provider, fn, supports_args, self.signature)
        if fake is not None and not callable(fake):
            raise reject(self.name, provider, fn, f"fake {fake!r} is not callable")
        if not isinstance(batch_invariant, bool):
            if not callable(batch_invariant):
                why = (
                    f"batch_invariant {batch_invariant!r} is neither a bool nor a predicate over the "
                    f"call; give True, False, or a function taking the op's parameters"
                )
                raise reject(self.name, provider, fn, why)
            _validation.check_predicate(
                self.name, provider, fn, batch_invariant, self.signature, "batch_invariant"
            )
        if invariant_fn is not None:
            if batch_invariant is False:
                why = (
                    "invariant_fn is given but batch_invariant is False: declare the claim its "
                    "variant keeps (True, or a predicate)"
                )
                raise reject(self.name, provider, fn, why)
            if not callable(invariant_fn):
                raise reject(self.name, provider, fn, f"invariant_fn {invariant_fn!r} is not callable")
            self._check_python_fn(provider, invariant_fn)
        if cache_by_signature is None:  # a predicate of ready-made pieces reads only the signature
            cache_by_signature = bool(getattr(supports_args, "__ircore_signature_only__", False))
        return Impl(
            op_name=self.name,
            provider=provider,
            fn=fn,
            supports_args=supports_args,
            inplace=bool(inplace),
            source=source_of(fn),
            cache_by_signature=bool(cache_by_signature),
            kernel=kernel,
            fake=fake,
            batch_invariant=batch_invariant,
            invariant_fn=invariant_fn,
        )

    def _check_python_fn(self, provider: str, fn: Callable[..., Any]) -> None:
        """A Python ``fn`` has the native schema: the same parameters, annotations and defaults."""
        try:
            schema = _validation.infer_schema(fn)
        except Exception as exc:
            raise reject(
                self.name,
                provider,
                fn,
                f"cannot infer its schema ({exc}); annotate it exactly like the native "
                f"function: {self.name}{self.signature}",
            ) from None
        if schema != self.schema:
            why = f"its schema {schema} differs from the native schema {self.schema}"
            raise reject(self.name, provider, fn, why)

    def _torch_op_kernel(
        self, provider: str, torch_op: torch._ops.OpOverload, inplace: bool
    ) -> Callable[..., Any] | None:
        """Check a torch op given as ``fn``; for an in-place one, what runs it and returns the outputs."""
        if not inplace:
            problem = _validation.torch_op_schema_problem(torch_op, self.schema)
            if problem:
                raise reject(self.name, provider, torch_op, problem)
            return None
        schema = _torch_ops.inplace_schema(self)
        if schema is None:
            why = (
                f"op {self.name!r} does not return one tensor per in-place argument "
                f"({', '.join(self.inplace_args)}), so no in-place torch op can stand for it; give a "
                "Python function that returns the outputs"
            )
            raise reject(self.name, provider, torch_op, why)
        problem = _validation.torch_op_schema_problem(torch_op, schema)
        if problem:
            raise reject(self.name, provider, torch_op, f"in place: {problem}")
        indices = self.inplace_indices

        def kernel(*args: Any) -> Any:
            torch_op(*args)
            outs = tuple(args[i] for i in indices)
            return outs if len(outs) > 1 else outs[0]

        kernel.__qualname__ = f"{provider}.{self.name}[{torch_op._name}, in place]"
        return kernel

    def unregister_impl(self, provider: str) -> None:
        """Remove ``provider``'s implementation; ``ircore list``, ``explain`` and ``doctor`` say so.

        A provider's own code (its import and hooks) may not call this.
        """
        _ownership.refuse_provider_code(f"ircore.ops.{self.name}.unregister_impl({provider!r})")
        dispatch.ensure_loaded()
        how = f"removed by ircore.ops.{self.name}.unregister_impl() at {_ownership.caller_location()}"
        STATE.remove_impl(self.name, provider, how)

    # ------------------------------------------------------------------ introspection
    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        """The op's tolerance for ``dtype``; :class:`~ircore.errors.NoToleranceError` names the known ones."""
        try:
            return self.tolerances[dtype]
        except KeyError:
            known = ", ".join(str(d).replace("torch.", "") for d in self.tolerances)
            raise NoToleranceError(
                f"op {self.name!r} has no tolerance for {dtype}; it has: {known}"
            ) from None

    def explain(self, *args: P.args, **kwargs: P.kwargs) -> dispatch.Explanation:
        """Which implementation a call with these arguments runs, and why the others don't; and
        what tracing such a call records (``traced``)."""
        explanation = dispatch.explain(self, self.bind_args(args, kwargs))
        return explanation._replace(traced=self._traced_as(explanation.chosen))

    def _traced_as(self, chosen: str | None) -> str:
        if chosen is None:
            return "nothing: the call raises"
        if not STATE.tracing_implementations:
            return f"torch.ops.ircore.{self.name} (trace_implementations is off)"
        impl = self.impls.get(chosen)
        invariant = dispatch.batch_invariant_active()
        if impl is None:
            if invariant and callable(self.batch_invariant):
                return "the ops of native's fixed-order form (trace_implementations is on)"
            return "native's own ops (trace_implementations is on)"
        variant = invariant and impl.invariant_fn is not None
        target = _torch_ops.built_impl_op(self, impl, variant)
        what = f"{chosen}'s batch-invariant variant" if variant else f"{chosen}'s op"
        return f"torch.ops.{target} ({what}; trace_implementations is on)"

    def __repr__(self) -> str:
        return f"<ircore op {self.name}{self.signature} impls={list(self.impls)}>"

    def __setattr__(self, name: str, value: Any) -> None:
        """What the declaration made the op (``native``, ``check_args``, ...) is fixed: dispatch,
        compiled graphs and every provider's conformance rely on it."""
        if name in _DECLARED and self.__dict__.get("_sealed"):
            _ownership.refuse_inside_provider(f"ircore.ops.{self.name}.{name} = ...", verb="set")
            raise AttributeError(
                f"ircore.ops.{self.name}.{name} is fixed when the op is declared; declare another op "
                "(ircore.register_op) for other semantics, or register an implementation for other kernels"
            )
        object.__setattr__(self, name, value)


def _wrapper_subclass(first: Any) -> bool:
    """A tensor subclass with dispatch rules of its own (DTensor): it takes the functional op."""
    return type(first) is not _Tensor and _is_wrapper_subclass(first)


def _outputs_fit(op: IrOp[..., Any], args: tuple[Any, ...], outs: Any) -> bool:
    """Whether each output has the shape, dtype and device of its in-place argument (shapes
    equal for every value their symbols may take)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

    outs = outs if len(op.inplace_indices) > 1 else (outs,)
    if not isinstance(outs, (tuple, list)) or len(outs) != len(op.inplace_indices):
        return False
    for i, out in zip(op.inplace_indices, outs):
        arg = args[i]
        if not isinstance(out, _Tensor) or not isinstance(arg, _Tensor):
            return False
        if out.dtype != arg.dtype or out.device != arg.device or out.dim() != arg.dim():
            return False
        if not statically_known_true(sym_eq(tuple(out.shape), tuple(arg.shape))):
            return False
    return True


@overload
def register_op(native: Callable[P, R], /) -> IrOp[P, R]: ...


@overload
def register_op(
    *,
    name: str | None = None,
    inplace_args: Sequence[str] = (),
    check_args: Callable[..., None] | None = None,
    tolerances: dict[torch.dtype, Tolerance] | None = None,
    sample_inputs: Callable[..., Iterator[Sample]] | None = None,
    make_inputs: Callable[..., tuple[Any, ...]] | None = None,
    reference: Callable[..., Any] | None = None,
    fake: Callable[..., Any] | None = None,
    cache_by_signature: bool = False,
    any_layout_args: Sequence[str] = (),
    quantized_outputs: Callable[[tuple[Any, ...], tuple[Any, ...]], dict[int, Quantized]] | None = None,
    batch_invariant: bool | str | Callable[..., Any] = False,
    batch_dependent: Callable[..., str | None] | None = None,
) -> Callable[[Callable[P, R]], IrOp[P, R]]: ...


def register_op(
    native: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    inplace_args: Sequence[str] = (),
    check_args: Callable[..., None] | None = None,
    tolerances: dict[torch.dtype, Tolerance] | None = None,
    sample_inputs: Callable[..., Iterator[Sample]] | None = None,
    make_inputs: Callable[..., tuple[Any, ...]] | None = None,
    reference: Callable[..., Any] | None = None,
    fake: Callable[..., Any] | None = None,
    cache_by_signature: bool = False,
    any_layout_args: Sequence[str] = (),
    quantized_outputs: Callable[[tuple[Any, ...], tuple[Any, ...]], dict[int, Quantized]] | None = None,
    batch_invariant: bool | str | Callable[..., Any] = False,
    batch_dependent: Callable[..., str | None] | None = None,
) -> Any:
    """Declare an op from its native function; usable as ``@register_op`` or ``@register_op(...)``.

    ``inplace_args`` names the tensor arguments that an in-place implementation may overwrite
    (none: in-place implementations are refused). ``tolerances`` (per dtype) extend
    :data:`DEFAULT_TOLERANCES`. ``check_args`` raises
    :class:`~ircore.errors.InvalidArgumentError` for bad input before any implementation runs.
    ``fake`` overrides the fake implementation (default: native on fake tensors).
    ``cache_by_signature=True`` promises that ``check_args`` passes or fails by the call's
    signature alone (see :mod:`ircore._signature`); with providers that promise the same of their
    ``supports_args``, eager calls then validate and choose once per signature.
    Before ``check_args``, every call is checked against the annotations: each argument of its
    declared type, tensors dense and strided (not sparse, nested or MKL-DNN: except the tensor
    parameters named in ``any_layout_args``, which ``check_args`` then judges), ints (also an
    int given for a float) within 64 bits.
    ``quantized_outputs(args, outputs)`` (ops with fp8 outputs) says, for each fp8 output, which
    of its elements count and the scale each was divided by (:class:`Quantized`): the conformance
    kit compares those dequantised, allowing one fp8 ulp (see ``ircore.testing.compare_to_reference``).
    ``batch_invariant`` says what native does in batch-invariant mode (``ircore.batch_invariant``):
    ``True`` if native is invariant as it is (elementwise ops, or a reduction whose order does not
    depend on the rows around it), a function with the native signature that computes the op
    with a fixed-order reduction (run instead of native in the mode), or ``False`` or a str
    saying why the op cannot be invariant (native then refuses calls in the mode with that
    reason). ``batch_dependent(*args) -> str | None`` (the op's arguments, positionally) names
    the calls whose *semantics* depend on the whole batch, with the reason and what to change
    (a per-tensor dynamic quantization: its scale is the whole tensor's maximum): in the mode
    every implementation declines them and native refuses them with that reason, whatever
    the claims say, so providers claim the op as a whole. It must read only the call's
    signature (scalar values, None-ness, dtypes, shapes): its answer is remembered per signature.
    The returned :class:`IrOp` is typed like ``native`` for callers.
    """

    def declare(fn: Callable[P, R]) -> IrOp[P, R]:
        _ownership.refuse_op_declaration(str(name or getattr(fn, "__name__", "?")))
        op_name = _validation.check_native(name, fn, inplace_args, STATE.ops, any_layout_args)
        callbacks = {"check_args": check_args, "sample_inputs": sample_inputs, "make_inputs": make_inputs}
        invariant_fn = batch_invariant if callable(batch_invariant) else None
        if not isinstance(batch_invariant, (bool, str)) and invariant_fn is None:
            raise OpDeclarationError(
                f"op {op_name!r}: batch_invariant {batch_invariant!r} is neither True/False, a str "
                "saying why the op cannot be batch-invariant, nor a function with the native signature"
            )
        _validation.check_callbacks(
            op_name,
            fn,
            {
                **callbacks,
                "reference": reference,
                "fake": fake,
                "quantized_outputs": quantized_outputs,
                "batch_invariant": invariant_fn,
                "batch_dependent": batch_dependent,
            },
        )
        # A class per op, whose __call__ (made below, from the op) has the native signature.
        cls: type[IrOp[P, R]] = type(f"IrOp[{op_name}]", (IrOp,), {})
        op = cls(
            op_name,
            fn,
            inplace_args=tuple(inplace_args),
            check_args=check_args or _no_checks,
            tolerances={**DEFAULT_TOLERANCES, **(tolerances or {})},
            sample_inputs=sample_inputs,
            make_inputs=make_inputs,
            reference=reference,
            cache_by_signature=bool(cache_by_signature),
            any_layout_args=tuple(any_layout_args),
            quantized_outputs=quantized_outputs,
            batch_invariant=batch_invariant,
            batch_dependent=batch_dependent,
        )
        op.fake = fake
        op.torch_op, op.torch_inplace_op = _torch_ops.define(op)
        cls.__call__ = build_eager_call(op)  # type: ignore[method-assign]
        op._sealed = True
        STATE.add_op(op)
        return op

    if native is not None:
        return declare(native)
    return declare


def _configured_to_trace_implementations() -> bool:
    """``trace_implementations``, with the configuration applied first: a trace may be the
    process's first ircore call (the loader applies the environment and the file)."""
    if not _is_dynamo_compiling():  # under Dynamo the eager call has loaded (providers_loaded)
        dispatch.ensure_loaded()
    return STATE.tracing_implementations


def _describe_arg(value: Any) -> str:
    """A tensor as ``float32[3, 4096] cpu (strides (4096, 1))``, anything else by value."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"{dtype}{list(value.shape)} {value.device} (strides {tuple(value.stride())})"
    return repr(value)


def attach_impls(impls: Sequence[Impl]) -> None:
    """Attach validated implementations to their ops, with the op each needs in compiled graphs
    (``ircore._torch_ops.impl_op``: defined now, so a graph from Inductor's cache finds it)."""
    STATE.add_impls(impls)
    for impl in impls:
        _torch_ops.impl_op(STATE.ops[impl.op_name], impl)


def get_op(name: str) -> IrOp[..., Any]:
    """The op called ``name``; :class:`~ircore.errors.UnknownOpError` lists the ops there are.

    An op not declared yet may come from an op library (an ``ircore.ops`` entry point): those are
    loaded first, then asked again.
    """
    if name not in STATE.ops:
        dispatch.ensure_loaded()
    return STATE.op(name)  # type: ignore[no-any-return]


def explain(op: str | IrOp[..., Any], *args: Any, **kwargs: Any) -> dispatch.Explanation:
    """Which implementation a call of ``op`` (an op or its name) with these arguments runs, and
    why not the others: the walk the call would make, step by step."""
    target = get_op(op) if isinstance(op, str) else op
    return target.explain(*args, **kwargs)


def all_ops() -> dict[str, IrOp[..., Any]]:
    """Every declared op, by name (a copy)."""
    return dict(STATE.ops)
