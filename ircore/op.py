"""Declaring ops and their implementations.

An op is declared once, by its native PyTorch function (``register_op``); that function *is* the
op's semantics. The op becomes ``torch.ops.ircore.<name>`` in the core's one ``Library`` so that
graphs can hold it, and a Python callable (:class:`IrOp`) whose eager call skips the torch
dispatcher. Providers attach implementations with :meth:`IrOp.register_impl`; which one runs is
decided in :mod:`ircore.dispatch`.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from ircore import _ownership
from ircore import dispatch as _dispatch
from ircore._argtypes import tensor_parameters, type_checker
from ircore._fastpath import build_eager_call, providers_loaded
from ircore.errors import ImplRegistrationError, OpDeclarationError

__all__ = [
    "IrOp",
    "Impl",
    "Sample",
    "Tolerance",
    "register_op",
    "get_op",
    "all_ops",
    "NAME_PATTERN",
    "RESERVED_PROVIDER_NAMES",
    "DEFAULT_TOLERANCES",
]

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED_PROVIDER_NAMES = frozenset({"native", "unfused"})
LIBRARY_NAMESPACE = "ircore"

_LIBRARY = torch.library.Library(LIBRARY_NAMESPACE, "FRAGMENT")
_OPS: dict[str, IrOp] = {}

# Bound once: the torch-op fallback checks of every call.
_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_Proxy = torch.fx.Proxy
_is_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_grad_enabled = torch.is_grad_enabled
_is_alias_of = torch._C._is_alias_of  # same storage (conservative: also disjoint parts of one)


class Tolerance(NamedTuple):
    """How far an implementation may be from the fp64 reference: ``|a-b| <= atol + rtol*|b|``."""

    atol: float
    rtol: float


# For ops declared without tolerances (and dtypes they leave out): torch.testing.assert_close's
# defaults for each dtype.
DEFAULT_TOLERANCES = {
    torch.float64: Tolerance(atol=1e-7, rtol=1e-7),
    torch.float32: Tolerance(atol=1e-5, rtol=1.3e-6),
    torch.float16: Tolerance(atol=1e-5, rtol=1e-3),
    torch.bfloat16: Tolerance(atol=1e-5, rtol=1.6e-2),
}


class Sample(NamedTuple):
    """One set of arguments for an op, with a label that says what it exercises."""

    args: tuple[Any, ...]
    label: str


@dataclass(frozen=True, eq=False)
class Impl:
    """One provider's implementation of one op."""

    op_name: str
    provider: str
    fn: Callable[..., Any]
    supports_args: Callable[..., bool] | None
    inplace: bool
    source: str
    # supports_args' answer depends only on the call signature (see ircore._signature)
    cache_by_signature: bool = False

    @property
    def name(self) -> str:
        return self.provider

    def uuid(self) -> str:
        """A hash of the source files of ``fn`` and ``supports_args``: changes when their code does.

        Part of the compile cache key, so an upgraded provider misses Inductor's FX graph cache.
        """
        parts = [self.provider, self.op_name, getattr(self.fn, "__qualname__", repr(self.fn))]
        parts += [_file_digest(f) for f in (self.fn, self.supports_args) if f is not None]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def _file_digest(obj: object) -> str:
    """sha256 of the file that defines ``obj`` (its ``file:line`` if the file cannot be read)."""
    try:
        path = inspect.getsourcefile(inspect.unwrap(obj))  # type: ignore[arg-type]
    except TypeError:
        path = None
    if not path:
        return _source_of(obj)
    try:
        stat = os.stat(path)
    except OSError:
        return _source_of(obj)
    return _digest_cached(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _digest_cached(path: str, mtime_ns: int, size: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _source_of(obj: object) -> str:
    """``file:line`` of a function, for messages that must say where something is."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(target, "__code__", None)
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno}"
    return getattr(target, "__module__", None) or repr(target)


def _same_default(a: object, b: object) -> bool:
    """Defaults are the same object, or equal values of one type (``1`` is not ``True``)."""
    return a is b or (type(a) is type(b) and a == b)


def _infer_schema(fn: Callable[..., Any]) -> str:
    return torch.library.infer_schema(fn, mutates_args=())


def _reject(op: str, provider: str, fn: object, why: str) -> ImplRegistrationError:
    return ImplRegistrationError(
        f"cannot register the implementation of op {op!r} by provider {provider!r} ({_source_of(fn)}): {why}"
    )


def _no_checks(*args: Any) -> None:
    """The argument check of an op declared without one."""


@dataclass(eq=False)
class IrOp:
    """An op: its native semantics, its torch custom op, and its implementations.

    Calling the object runs the op: outside tracing it validates the arguments and calls the
    first implementation the priority list allows and whose ``supports_args`` accepts them;
    under ``torch.compile``, ``make_fx`` or any dispatch mode it calls ``torch.ops.ircore.<name>``
    instead, so the graph records the op.
    """

    name: str
    native: Callable[..., Any]
    inplace_args: tuple[str, ...] = ()
    check_args: Callable[..., None] = _no_checks
    tolerances: dict[torch.dtype, Tolerance] = field(default_factory=dict)
    sample_inputs: Callable[..., Iterator[Sample]] | None = None
    make_inputs: Callable[..., tuple[Any, ...]] | None = None
    reference: Callable[..., Any] | None = None
    doc: str = ""
    # check_args' verdict depends only on the call signature (see ircore._signature)
    cache_by_signature: bool = False

    def __post_init__(self) -> None:
        self.signature = inspect.signature(self.native)
        self.param_names = tuple(self.signature.parameters)
        self._arity = len(self.param_names)
        params = self.signature.parameters.values()
        self._required = sum(p.default is p.empty for p in params)
        self._defaults = tuple(p.default for p in params)
        self._inplace_indices = tuple(self.param_names.index(a) for a in self.inplace_args)
        self.schema = _infer_schema(self.native)
        #: Raises InvalidArgumentError for an argument of the wrong type (see ircore._argtypes).
        self.check_types = type_checker(self.name, self.native, self.param_names)
        self._tensor_indices = tensor_parameters(self.native, self.param_names)
        # (written, other) tensor parameters that must not share memory for an in-place call
        self._overlap_pairs = tuple(
            (i, j)
            for i in self._inplace_indices
            for j in self._tensor_indices
            if j != i and not (j in self._inplace_indices and j < i)
        )
        self.impls: dict[str, Impl] = {}
        # provider -> how its implementation was removed (unregister_impl), for list/explain/doctor
        self.removed: dict[str, str] = {}
        self.signature_spec = _signature_spec(self) if self.cache_by_signature else None
        # call signature -> the plan entry that runs it, outside priority scopes; cleared by
        # dispatch.bump_generation (see ircore._fastpath)
        self.signature_cache: dict[bytes, _dispatch.Entry] = {}
        # (generation, entries, signature cache): see ircore.dispatch (refresh_plan)
        self._plan: _dispatch.Plan = (None, (), self.signature_cache)
        self.__doc__ = self.doc or self.native.__doc__
        self.torch_op: Any = None
        # torch.ops.ircore.<name>.maybe_inplace: writes the outputs into ``inplace_args`` (see
        # _define_maybe_inplace); None where the op's outputs do not map onto them one to one.
        self.torch_inplace_op: Any = None

    # ------------------------------------------------------------------ calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the op. ``register_op`` replaces this with a faster one of the native signature."""
        args = self._complete(args, kwargs)
        if _is_compiling() or _dispatch_stack_len() or type(args[0]) is not _Tensor:
            return self.call_torch_op(*args)
        return _dispatch.run(self, args, allow_inplace=False)

    def maybe_inplace(self, *args: Any, **kwargs: Any) -> Any:
        """Run the op, allowing an in-place implementation to overwrite ``inplace_args``.

        For callers that no longer need those inputs: it saves the clone that the functional
        call makes before an in-place implementation. Use only the returned tensors. When a
        tensor it could overwrite shares memory with another argument (``f(x, x, ...)``), an
        in-place implementation runs on copies, as in the functional call, so results are right.

        Under ``torch.compile``, ``make_fx``, ``torch.fx.symbolic_trace`` or a dispatch mode the
        graph records one ``torch.ops.ircore.<name>.maybe_inplace`` node, which writes the
        results into the in-place arguments and returns them; the compiler may then let an
        in-place kernel write straight into those (donated) tensors. Tensor subclasses (DTensor)
        take the functional op: a subclass may run the kernel on redistributed copies, where an
        in-place write would be lost.
        """
        args = self._complete(args, kwargs)
        first = args[0]
        if _is_compiling() or _dispatch_stack_len() or type(first) is not _Tensor:
            if _is_dynamo_compiling() and providers_loaded() and _dispatch.STATE.version < 0:
                pass  # never true; read so that Dynamo guards on the version (see _fastpath)
            if self.torch_inplace_op is None or (type(first) is not _Tensor and isinstance(first, _Tensor)):
                return self.call_torch_op(*args)
            self.check_types(*args)
            self.torch_inplace_op(*args)
            outs = tuple(args[i] for i in self._inplace_indices)
            return outs if len(outs) > 1 else outs[0]
        return _dispatch.run(self, args, allow_inplace=True)

    def call_torch_op(self, *args: Any) -> Any:
        """Call ``torch.ops.ircore.<name>`` (tracing, tensor subclasses): argument types first.

        torch's own argument parser would otherwise reject a wrong type with its own message. A
        call that needs grad runs (and is traced as) native, as in eager calls: the torch op has
        no autograd formula.
        """
        self.check_types(*args)
        if type(args[0]) is not _Proxy and self.wants_grad(args):
            self.check_args(*args)
            return self.native(*args)
        return self.torch_op(*args)

    def wants_grad(self, args: tuple[Any, ...]) -> bool:
        """Whether this call must be differentiable: grad mode is on and a tensor requires grad.

        Such calls run ``native`` (the one implementation with autograd), whatever the priority.
        """
        if not _grad_enabled():
            return False
        for i in self._tensor_indices:
            arg = args[i]
            if arg is not None and arg.requires_grad:
                return True
        return False

    def inputs_overlap(self, args: tuple[Any, ...]) -> bool:
        """Whether a tensor an in-place implementation may write shares memory with another argument."""
        for i, j in self._overlap_pairs:
            if args[j] is not None and _is_alias_of(args[i], args[j]):
                return True
        return False

    def _complete(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Bind keyword and default arguments into one positional tuple."""
        if not kwargs and self._required <= len(args) < self._arity:
            return args + self._defaults[len(args) :]
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"ircore.ops.{self.name}{self.signature}: {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    # ------------------------------------------------------------------ implementations
    def register_impl(
        self,
        provider: str,
        fn: Callable[..., Any],
        supports_args: Callable[..., bool] | None = None,
        inplace: bool = False,
        *,
        cache_by_signature: bool = False,
    ) -> Impl:
        """Attach ``provider``'s implementation ``fn``; validate everything first.

        ``fn`` must have exactly the native signature (checked through the torch schema it
        implies); ``supports_args`` takes the same parameters and returns whether ``fn``
        handles that call; ``inplace=True`` says ``fn`` may overwrite the op's
        ``inplace_args`` (allowed only where the op declares some). ``cache_by_signature=True``
        promises that ``supports_args`` answers from the call's signature alone (devices, dtypes,
        dimensions, last-dimension size and layout, int arguments: see :mod:`ircore._signature`),
        so its answer may be cached per signature: a cheaper eager call.

        An installed provider's name is that provider's alone: it registers through the registrar
        its hook receives, and a provider's own code (its import and hooks) may not call this.
        """
        _ownership.refuse_inside_provider(f"ircore.ops.{self.name}.register_impl({provider!r}, ...)")
        _dispatch.ensure_loaded()  # waits while providers load: their check would take it for theirs
        discovered = _dispatch.STATE.discovered
        if isinstance(provider, str) and discovered is not None and provider in discovered():
            raise _reject(
                self.name,
                provider,
                fn,
                f"{provider!r} is the name of an installed provider; only that provider registers "
                "under it, through its registrar. Register under a name of your own",
            )
        impl = self.validate_impl(provider, fn, supports_args, inplace, cache_by_signature=cache_by_signature)
        self.impls[provider] = impl
        self.removed.pop(provider, None)
        _dispatch.bump_generation()
        return impl

    def validate_impl(
        self,
        provider: str,
        fn: Callable[..., Any],
        supports_args: Callable[..., bool] | None = None,
        inplace: bool = False,
        *,
        cache_by_signature: bool = False,
    ) -> Impl:
        """Check an implementation without registering it; returns the :class:`Impl`."""
        if not isinstance(provider, str) or not NAME_PATTERN.match(provider):
            raise _reject(
                self.name,
                str(provider),
                fn,
                f"provider name {provider!r} must match {NAME_PATTERN.pattern}",
            )
        if provider in RESERVED_PROVIDER_NAMES:
            raise _reject(
                self.name,
                provider,
                fn,
                f"{provider!r} is reserved (reserved names: {sorted(RESERVED_PROVIDER_NAMES)})",
            )
        if provider in self.impls:
            raise _reject(
                self.name,
                provider,
                fn,
                f"provider {provider!r} already registered an implementation of {self.name!r} "
                f"({self.impls[provider].source})",
            )
        if not callable(fn):
            raise _reject(self.name, provider, fn, f"{fn!r} is not callable")
        try:
            schema = _infer_schema(fn)
        except Exception as exc:
            raise _reject(
                self.name,
                provider,
                fn,
                f"cannot infer its schema ({exc}); annotate it exactly like the native "
                f"function: {self.name}{self.signature}",
            ) from None
        if schema != self.schema:
            raise _reject(
                self.name,
                provider,
                fn,
                f"its schema {schema} differs from the native schema {self.schema}",
            )
        if supports_args is not None:
            if not callable(supports_args):
                raise _reject(self.name, provider, fn, f"supports_args {supports_args!r} is not callable")
            try:
                pred_params = tuple(inspect.signature(supports_args).parameters)
            except (TypeError, ValueError) as exc:
                raise _reject(
                    self.name, provider, fn, f"cannot read supports_args' signature: {exc}"
                ) from None
            if pred_params != self.param_names:
                raise _reject(
                    self.name,
                    provider,
                    fn,
                    f"supports_args ({_source_of(supports_args)}) takes "
                    f"({', '.join(pred_params)}) but must take the op's parameters "
                    f"({', '.join(self.param_names)})",
                )
            problem = self._predicate_parameter_problem(supports_args)
            if problem:
                where = _source_of(supports_args)
                raise _reject(self.name, provider, fn, f"supports_args ({where}) {problem}")
        if inplace and not self.inplace_args:
            raise _reject(
                self.name,
                provider,
                fn,
                f"op {self.name!r} does not allow in-place implementations (it declares no inplace_args)",
            )
        return Impl(
            op_name=self.name,
            provider=provider,
            fn=fn,
            supports_args=supports_args,
            inplace=bool(inplace),
            source=_source_of(fn),
            cache_by_signature=bool(cache_by_signature),
        )

    def _predicate_parameter_problem(self, supports_args: Callable[..., bool]) -> str | None:
        """What is wrong with a predicate's parameters beyond their names, or None.

        ircore passes every argument positionally, so a keyword-only parameter would fail every
        call; a default must be the native one (or none), as the call it describes is the same.
        """
        native_params = self.signature.parameters
        for param in inspect.signature(supports_args).parameters.values():
            if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                kind = param.kind.description
                return f"has {kind} parameter {param.name!r}; every parameter must be positional"
            native_default = native_params[param.name].default
            if param.default is not param.empty and not _same_default(param.default, native_default):
                wanted = f"the native default {native_default!r}"
                if native_default is param.empty:
                    wanted = "no default"
                return f"gives {param.name!r} the default {param.default!r}; expected {wanted} (or none)"
        return None

    def unregister_impl(self, provider: str) -> None:
        """Remove ``provider``'s implementation; ``ircore list``, ``explain`` and ``doctor`` say so.

        A provider's own code (its import and hooks) may not call this.
        """
        _ownership.refuse_inside_provider(f"ircore.ops.{self.name}.unregister_impl({provider!r})")
        _dispatch.ensure_loaded()
        if self.impls.pop(provider, None) is not None:
            how = f"removed by ircore.ops.{self.name}.unregister_impl() at {_ownership.caller_location()}"
            self.removed[provider] = how
            _dispatch.STATE.note_removed(self.name, provider, how)
            _dispatch.bump_generation()

    def functional_call(self, impl: Impl) -> Callable[..., Any]:
        """What dispatch calls for ``impl`` from a functional caller: clones inputs it may mutate."""
        if not impl.inplace:
            return impl.fn
        fn = impl.fn
        indices = self._inplace_indices

        def call_on_clones(*args: Any) -> Any:
            cloned = list(args)
            for i in indices:
                cloned[i] = cloned[i].clone()
            return fn(*cloned)

        call_on_clones.__qualname__ = f"{impl.provider}.{self.name}[on clones]"
        return call_on_clones

    # ------------------------------------------------------------------ introspection
    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        try:
            return self.tolerances[dtype]
        except KeyError:
            raise KeyError(f"op {self.name!r} has no tolerance for {dtype}") from None

    def explain(self, *args: Any, **kwargs: Any) -> _dispatch.Explanation:
        """Which implementation a call with these arguments runs, and why the others don't."""
        return _dispatch.explain(self, self._complete(args, kwargs))

    def __repr__(self) -> str:
        return f"<ircore op {self.name}{self.signature} impls={list(self.impls)}>"


def _signature_spec(op: IrOp) -> bytes:
    """The per-parameter kinds ``ircore._signature`` reads; refuses parameter types it cannot."""
    from ircore._signature import spec_for

    hints = typing.get_type_hints(op.native)
    annotations = [hints.get(name) for name in op.param_names]
    spec = spec_for(annotations)
    if spec is None:
        raise OpDeclarationError(
            f"op {op.name!r} ({_source_of(op.native)}): cache_by_signature=True needs every parameter to be "
            f"a Tensor, an int, a bool or a float (each optional or not); got {annotations}"
        )
    return spec


def _check_native(name: str | None, native: Callable[..., Any], inplace_args: Sequence[str]) -> str:
    """Validate a native function for ``register_op``; return the op's name."""
    if not callable(native):
        raise OpDeclarationError(f"register_op needs a function, got {native!r}")
    op_name = getattr(native, "__name__", "") if name is None else name
    where = _source_of(native)
    if not isinstance(op_name, str) or not NAME_PATTERN.match(op_name):
        raise OpDeclarationError(f"op name {op_name!r} ({where}) must match {NAME_PATTERN.pattern}")
    if op_name in _OPS:
        raise OpDeclarationError(
            f"op {op_name!r} ({where}) is already declared by {_source_of(_OPS[op_name].native)}"
        )
    params = inspect.signature(native).parameters
    for param in params.values():
        if param.kind is param.KEYWORD_ONLY:
            raise OpDeclarationError(
                f"op {op_name!r} ({where}): parameter {param.name!r} is keyword-only; ops take "
                "positional-or-keyword parameters only, so every call can be positional"
            )
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise OpDeclarationError(
                f"op {op_name!r} ({where}): *args/**kwargs parameter {param.name!r} is not "
                "allowed; declare every parameter"
            )
    if not params:
        raise OpDeclarationError(f"op {op_name!r} ({where}) takes no arguments")
    for arg in inplace_args:
        if arg not in params:
            raise OpDeclarationError(
                f"op {op_name!r} ({where}): inplace_args names {arg!r}, which is not a "
                f"parameter (parameters: {list(params)})"
            )
    try:
        _infer_schema(native)
    except Exception as exc:
        raise OpDeclarationError(
            f"op {op_name!r} ({where}): cannot infer a torch schema from its annotations: {exc}"
        ) from None
    return op_name


def _define_torch_op(op: IrOp, fake: Callable[..., Any] | None) -> None:
    """Make ``torch.ops.ircore.<name>``: one kernel for every device, and a fake."""
    _LIBRARY.define(op.name + op.schema)
    qualname = f"{LIBRARY_NAMESPACE}::{op.name}"

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != op._arity:
            args = op._complete(args, kwargs)
        return _dispatch.run(op, args, allow_inplace=False)

    kernel.__qualname__ = f"ircore.{op.name}[kernel]"
    _LIBRARY.impl(op.name, kernel, "CompositeExplicitAutograd")

    native, check = op.native, op.check_args
    if fake is None:

        def fake(*args: Any, **kwargs: Any) -> Any:
            if kwargs or len(args) != op._arity:
                args = op._complete(args, kwargs)
            check(*args)
            return native(*args)

    torch.library.register_fake(qualname, fake, lib=_LIBRARY)
    op.torch_op = getattr(getattr(torch.ops, LIBRARY_NAMESPACE), op.name).default
    _define_maybe_inplace(op)


def _inplace_schema(op: IrOp) -> str | None:
    """``op``'s schema with ``inplace_args`` mutable and no returns, if the outputs map onto them.

    The overload's contract is "output i is written into inplace_args[i]", so it exists only for
    ops that return exactly one tensor per in-place argument (``fused_add_rms_norm``: ``out`` into
    ``x``, ``residual`` into ``x_residual``).
    """
    if not op.inplace_args:
        return None
    schema = torch.library.infer_schema(op.native, mutates_args=op.inplace_args)
    params, _, returns = schema.rpartition(" -> ")
    n = len(op.inplace_args)
    wanted = "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"{params} -> ()" if returns == wanted else None


def _define_maybe_inplace(op: IrOp) -> None:
    """Make ``torch.ops.ircore.<name>.maybe_inplace``: a graph node for ``op.maybe_inplace``.

    Its kernel runs the op allowing in-place implementations and copies any output that is not
    already its argument into it, so the node always leaves the results in the in-place
    arguments, whichever implementation ran. Graphs can hold it honestly (the schema declares
    the mutation); the compile-time lowering turns it back into the functional op on the
    arguments' values, and Inductor writes the results into the donated inputs.
    """
    schema = _inplace_schema(op)
    if schema is None:
        return
    _LIBRARY.define(f"{op.name}.maybe_inplace{schema}")
    indices, check = op._inplace_indices, op.check_args

    def kernel(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != op._arity:
            args = op._complete(args, kwargs)
        outs = _dispatch.run(op, args, allow_inplace=True)
        for i, out in zip(indices, outs if len(indices) > 1 else (outs,)):
            if out is not args[i]:
                args[i].copy_(out)

    def fake(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != op._arity:
            args = op._complete(args, kwargs)
        check(*args)

    kernel.__qualname__ = f"ircore.{op.name}.maybe_inplace[kernel]"
    _LIBRARY.impl(f"{op.name}.maybe_inplace", kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{LIBRARY_NAMESPACE}::{op.name}.maybe_inplace", fake, lib=_LIBRARY)
    op.torch_inplace_op = getattr(getattr(torch.ops, LIBRARY_NAMESPACE), op.name).maybe_inplace


def register_op(
    native: Callable[..., Any] | None = None,
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
    """

    def declare(fn: Callable[..., Any]) -> IrOp:
        op_name = _check_native(name, fn, inplace_args)
        op = IrOp(
            name=op_name,
            native=fn,
            inplace_args=tuple(inplace_args),
            check_args=check_args or _no_checks,
            tolerances={**DEFAULT_TOLERANCES, **(tolerances or {})},
            sample_inputs=sample_inputs,
            make_inputs=make_inputs,
            reference=reference,
            cache_by_signature=bool(cache_by_signature),
        )
        _define_torch_op(op, fake)
        # A class per op, whose __call__ has the native signature: see ircore._fastpath.
        op.__class__ = type(f"IrOp[{op_name}]", (IrOp,), {"__call__": build_eager_call(op)})
        _OPS[op_name] = op
        _dispatch.bump_generation()
        return op

    if native is not None:
        return declare(native)
    return declare


def get_op(name: str) -> IrOp:
    """The op called ``name``; the error lists the ops there are."""
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"no ircore op named {name!r}; known ops: {sorted(_OPS)}") from None


def all_ops() -> dict[str, IrOp]:
    """Every declared op, by name (a copy)."""
    return dict(_OPS)
