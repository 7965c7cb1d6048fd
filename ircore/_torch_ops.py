"""The torch side of ops and implementations: the ops that graphs hold.

- ``torch.ops.ircore.<name>`` and its ``maybe_inplace`` overload, for each op (:func:`define`):
  graphs (``torch.compile``, ``make_fx``), tensor subclasses (DTensor) and torch's own dispatcher
  see an op through these.
- ``torch.ops.ircore_<provider>.<name>``, for each provider implementation (:func:`impl_op`):
  what the compile-time lowering puts in a graph in place of the ircore op, an opaque op whose
  kernel calls the implementation on real tensors and whose fake is the op's. Built by the core
  from the op's schema, so a provider writes only its kernel; an implementation that is itself a
  torch op is used as it is (given the op's fake if it has none). Defined when the
  implementation is attached (eager calls never use it; a graph from Inductor's cache does).

Each is defined in a ``torch.library.Library`` fragment of its own, so that an op whose
declaration was undone (``ircore.testing.isolated()``, a rolled-back provider), or an
implementation replaced by another, can be defined again under the same name: the stale
definition is destroyed first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch.utils._pytree import tree_map

from ircore import dispatch
from ircore.errors import InvalidArgumentError

NAMESPACE = "ircore"

# op name -> the library fragment that defines torch.ops.ircore.<name>
_LIBRARIES: dict[str, torch.library.Library] = {}
# (provider, op name) -> (the implementation, the fragment the core defined for it or None, the op)
_IMPL_OPS: dict[tuple[str, str], tuple[Any, torch.library.Library | None, Any]] = {}
_lock = threading.RLock()


class DefinedOp(dispatch.OpLike, Protocol):
    """What the torch op is made from (:class:`ircore.IrOp`)."""

    native: Callable[..., Any]
    schema: str
    param_names: tuple[str, ...]
    inplace_args: tuple[str, ...]
    inplace_indices: tuple[int, ...]
    fake: Callable[..., Any] | None
    torch_inplace_op: Any
    quantized_outputs: Any  # None, or (for ops with fp8 outputs) which outputs are fp8

    def functional_call(self, impl: Any) -> Callable[..., Any]: ...

    def bind_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]: ...


def op_fake(op: DefinedOp) -> Callable[..., Any]:
    """The op's fake: the one declared (``register_op(fake=...)``), else native on fake tensors."""
    if op.fake is not None:
        return op.fake
    native, check, arity = op.native, op.check_args, len(op.param_names)

    def fake(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != arity:
            args = op.bind_args(args, kwargs)
        check(*args)
        return native(*args)

    fake.__qualname__ = f"ircore.{op.name}[fake]"
    return fake


def fake_outputs(op: DefinedOp, args: tuple[Any, ...]) -> Any:
    """What a call of ``op`` on ``args`` returns, as fake tensors, computed outside any tracer.

    For ``maybe_inplace`` under ``make_fx`` or a dispatch mode: whether its results fit its
    in-place arguments decides which node is recorded. Fake arguments are evaluated in their own
    fake mode (symbolic shapes stay symbolic), real ones in a fresh one; no node is recorded.
    """
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        mode = next((a.fake_mode for a in args if isinstance(a, FakeTensor)), None) or FakeTensorMode()
        with mode:
            fakes = tuple(
                mode.from_tensor(a) if isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) else a
                for a in args
            )
            return op_fake(op)(*fakes)


def define(op: DefinedOp) -> tuple[Any, Any]:
    """Define ``torch.ops.ircore.<name>`` (and ``.maybe_inplace`` where the op has one).

    Returns both overloads (the second None where the op has none). The kernel, for every
    device, runs the eager dispatch; the fake is :func:`op_fake`.
    """
    undefine(op.name)  # a stale definition: its op's declaration was undone
    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    lib.define(op.name + op.schema)
    arity = len(op.param_names)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != arity:
            args = op.bind_args(args, kwargs)
        return dispatch.run(op, args, allow_inplace=False)

    kernel.__qualname__ = f"ircore.{op.name}[kernel]"
    lib.impl(op.name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{op.name}", op_fake(op), lib=lib)
    _LIBRARIES[op.name] = lib
    packet = getattr(getattr(torch.ops, NAMESPACE), op.name)
    return packet.default, _define_maybe_inplace(op, lib, packet)


def undefine(name: str) -> None:
    """Remove ``torch.ops.ircore.<name>`` (an op whose declaration was undone), if it is defined."""
    lib = _LIBRARIES.pop(name, None)
    if lib is not None:
        lib._destroy()


def inplace_schema(op: DefinedOp) -> str | None:
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


def refuse_unfit(op: DefinedOp, args: tuple[Any, ...], outs: Any) -> None:
    """The ``maybe_inplace`` node writes output i into in-place argument i: refuse an output of
    another shape, dtype or device (``op.maybe_inplace`` records the functional op for such calls;
    only a graph that calls the node directly, or ``torch.fx.symbolic_trace``, which knows no
    shapes, gets here)."""
    unfit = first_unfit(op, args, outs)
    if unfit is not None:
        i, out = unfit
        raise InvalidArgumentError(
            f"torch.ops.ircore.{op.name}.maybe_inplace: its result {i} ({_describe(out)}) does not fit "
            f"argument {op.param_names[i]!r} ({_describe(args[i])}) it would be written into; call the "
            f"functional op (ircore.ops.{op.name}(...)), or trace with make_fx or torch.compile, where "
            f"ircore.ops.{op.name}.maybe_inplace records the functional op for such calls"
        )


def first_unfit(op: DefinedOp, args: tuple[Any, ...], outs: Any) -> tuple[int, Any] | None:
    """``(i, output)`` for the first output of another shape, dtype or device than in-place
    argument ``i``, which it would be written into; None when all fit. Plain comparisons, so
    Dynamo traces it (and guards on what it compares)."""
    for i, out in zip(op.inplace_indices, outs if len(op.inplace_indices) > 1 else (outs,)):
        arg = args[i]
        if out.shape != arg.shape or out.dtype != arg.dtype or out.device != arg.device:
            return i, out
    return None


def _describe(t: Any) -> str:
    return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')} on {t.device}"


def _define_maybe_inplace(op: DefinedOp, lib: torch.library.Library, packet: Any) -> Any:
    """``torch.ops.ircore.<name>.maybe_inplace``: a graph node for ``op.maybe_inplace``.

    Its kernel runs the op allowing in-place implementations and copies any output that is not
    already its argument into it, so the node always leaves the results in the in-place
    arguments, whichever implementation ran. Graphs can hold it honestly (the schema declares
    the mutation); the compile-time lowering turns it back into the functional op on the
    arguments' values, and Inductor writes the results into the donated inputs.
    """
    schema = inplace_schema(op)
    if schema is None:
        return None
    lib.define(f"{op.name}.maybe_inplace{schema}")
    indices, check, arity = op.inplace_indices, op.check_args, len(op.param_names)

    def kernel(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != arity:
            args = op.bind_args(args, kwargs)
        outs = dispatch.run(op, args, allow_inplace=True)
        refuse_unfit(op, args, outs)
        for i, out in zip(indices, outs if len(indices) > 1 else (outs,)):
            if out is not args[i]:
                args[i].copy_(out)

    def fake(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != arity:
            args = op.bind_args(args, kwargs)
        check(*args)
        refuse_unfit(op, args, op_fake(op)(*args))

    kernel.__qualname__ = f"ircore.{op.name}.maybe_inplace[kernel]"
    lib.impl(f"{op.name}.maybe_inplace", kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{op.name}.maybe_inplace", fake, lib=lib)
    return packet.maybe_inplace


# ---------------------------------------------------------------------- implementations
#: the suffix of the op the core builds for an implementation's batch-invariant variant
VARIANT_SUFFIX = "_batch_invariant"


def impl_op(op: DefinedOp, impl: Any, variant: bool = False) -> Any:
    """The op compiled graphs hold for ``impl`` (an ``ircore.Impl`` of ``op``), defined once;
    ``variant``: for its batch-invariant variant (``impl.invariant_fn``), which the lowering
    puts in graphs compiled in batch-invariant mode (``ircore_<provider>::<op>_batch_invariant``).

    An implementation that is a torch op is its own (given :func:`op_fake` if it has no fake);
    for a Python function the core defines ``torch.ops.ircore_<provider>.<op>`` with the op's
    schema, or its in-place schema for an in-place implementation (the kernel writes the results
    into the in-place arguments, as ``maybe_inplace`` does), a kernel for every device that calls
    the implementation, and a fake: ``impl.fake``, else the op's with contiguous outputs (what
    kernels return) but for layouts of the op's contract (:func:`contract_layout`: column-major
    group scales); ``ircore verify`` checks that the real outputs agree.
    """
    key = (impl.provider, op.name + (VARIANT_SUFFIX if variant else ""))
    with _lock:
        cached = _IMPL_OPS.get(key)
        if cached is not None and cached[0] is impl:
            return cached[2]
        if cached is not None and cached[1] is not None:
            cached[1]._destroy()  # an earlier implementation of this provider's: replaced
        lib, overload = _define_impl_op(op, _variant_of(impl) if variant else impl, key[1])
        _IMPL_OPS[key] = (impl, lib, overload)
        return overload


def _variant_of(impl: Any) -> Any:
    """``impl`` with its batch-invariant variant as the function (same schema and in-place
    contract: ``register_impl`` checked it)."""
    import dataclasses

    if impl.invariant_fn is None:
        raise ValueError(f"{impl.provider}'s {impl.op_name} has no invariant_fn")
    return dataclasses.replace(impl, fn=impl.invariant_fn, kernel=None, invariant_fn=None)


def built_impl_op(op: DefinedOp, impl: Any, variant: bool = False) -> Any:
    """:func:`impl_op`, read without the lock when it is built (attach_impls builds it at
    registration): what code traced by Dynamo, which cannot trace a lock, calls."""
    cached = _IMPL_OPS.get((impl.provider, op.name + (VARIANT_SUFFIX if variant else "")))
    if cached is not None and cached[0] is impl:
        return cached[2]
    return impl_op(op, impl, variant)


def traced_form_of(op: DefinedOp, impl: Any, runs: Any) -> tuple[Any, bool]:
    """:func:`traced_form` for a plan's entry of ``impl`` whose ``Entry.fn`` is ``runs``: its
    batch-invariant variant where that is the implementation's ``invariant_fn``."""
    return traced_form(op, impl, impl.invariant_fn is not None and runs is impl.invariant_fn)


def traced_form(op: DefinedOp, impl: Any, variant: bool = False) -> tuple[Any, bool]:
    """(what a graph records for ``impl`` of ``op``, whether it writes its in-place arguments);
    ``variant``: for its batch-invariant variant.

    The op the core built for the implementation (:func:`impl_op`): one opaque node, whose
    kernel runs the implementation at run time; for an in-place one, its in-place op followed
    by its in-place arguments. The lowering (``ircore.compile``) traces it in place of an ircore
    node; with ``trace_implementations`` on, tracing records it straight away.
    """
    target = built_impl_op(op, impl, variant)
    # the op has an in-place schema exactly when it has a maybe_inplace overload (define_inplace);
    # read, not inferred again: Dynamo cannot trace infer_schema
    if not (impl.inplace and op.torch_inplace_op is not None):
        return target, False
    indices = op.inplace_indices

    def in_place(*args: Any) -> Any:
        target(*args)
        outs = tuple(args[i] for i in indices)
        return outs if len(outs) > 1 else outs[0]

    return in_place, True


def impl_op_name(provider: str, op_name: str) -> str:
    """``ircore_<provider>::<op>``: where the core defines a Python implementation's op."""
    return f"{NAMESPACE}_{provider}::{op_name}"


def impl_op_taken(provider: str, op_name: str) -> str | None:
    """Where a Python implementation's op would go, if something other than ircore defined it
    there (the provider's own library of that namespace), else None."""
    qualname = impl_op_name(provider, op_name)
    with _lock:
        ours = _IMPL_OPS.get((provider, op_name))
        if ours is not None and ours[1] is not None:
            return None
        return qualname if torch._C._jit_get_schemas_for_operator(qualname) else None


def _define_impl_op(op: DefinedOp, impl: Any, name: str) -> tuple[torch.library.Library | None, Any]:
    if isinstance(impl.fn, torch._ops.OpOverload):
        return _give_fake(op, impl), impl.fn
    namespace, name = impl_op_name(impl.provider, name).split("::")
    lib = torch.library.Library(namespace, "FRAGMENT")
    schema = inplace_schema(op) if impl.inplace else None
    if schema is not None:
        lib.define(name + schema)
        kernel, fake = _writing_kernel(op, impl.run), _checking_fake(op)
    else:  # functional (an in-place implementation of an op without an in-place schema: on clones)
        lib.define(name + op.schema)
        kernel, fake = op.functional_call(impl), impl.fake or _kernel_layout(op, op_fake(op))
    lib.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{namespace}::{name}", fake, lib=lib)
    return lib, getattr(getattr(torch.ops, namespace), name).default


def _give_fake(op: DefinedOp, impl: Any) -> torch.library.Library | None:
    """A torch op given as an implementation gets the op's fake, unless it has a fake of its own."""
    qualname = impl.fn._name
    if torch._library.simple_registry.singleton.find(qualname).fake_impl.kernel is not None or any(
        torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)
        for key in ("Meta", "CompositeImplicitAutograd", "CompositeExplicitAutograd")
    ):
        return None
    lib = torch.library.Library(qualname.split("::")[0], "FRAGMENT")
    fake = impl.fake or (_checking_fake(op) if impl.inplace else _kernel_layout(op, op_fake(op)))
    torch.library.register_fake(qualname, fake, lib=lib)
    return lib


def _writing_kernel(op: DefinedOp, run: Callable[..., Any]) -> Callable[..., None]:
    """A kernel for an in-place schema: runs the implementation, leaves its results in the
    in-place arguments (copying any output that is not already its argument)."""
    indices, arity = op.inplace_indices, len(op.param_names)

    def kernel(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != arity:  # the dispatcher leaves trailing defaults out
            args = op.bind_args(args, kwargs)
        outs = run(*args)
        for i, out in zip(indices, outs if len(indices) > 1 else (outs,)):
            if out is not args[i]:
                args[i].copy_(out)

    return kernel


def _checking_fake(op: DefinedOp) -> Callable[..., None]:
    check, arity = op.check_args, len(op.param_names)

    def fake(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != arity:
            args = op.bind_args(args, kwargs)
        check(*args)

    return fake


def _kernel_layout(op: DefinedOp, fake: Callable[..., Any]) -> Callable[..., Any]:
    """``fake`` with each output tensor a fresh contiguous one (what kernels return), except an
    output whose layout is part of the op's contract (:func:`contract_layout`), kept as it is."""
    keeps = op.quantized_outputs is not None

    def fresh(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if keeps and contract_layout(t):
            return t.new_empty_strided(t.shape, t.stride())
        return t.new_empty(t.shape)

    def kernel_layout_fake(*args: Any, **kwargs: Any) -> Any:
        return tree_map(fresh, fake(*args, **kwargs))

    return kernel_layout_fake


def contract_layout(native_out: torch.Tensor) -> bool:
    """Whether an output of an op with fp8 outputs (``quantized_outputs``), as native returns it,
    has a layout of the op's contract: a non-fp8 output that is not contiguous (column-major
    group scales, with their TMA-aligned stride), which its readers (cuBLASLt, DeepGEMM) depend
    on. Kernels must return it so; the fp8 values' own layout is free (kernels: contiguous)."""
    return native_out.element_size() != 1 and native_out.numel() > 1 and not native_out.is_contiguous()


def same_strides(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Strides ``a`` and ``b`` of a tensor of ``shape`` address the same elements: equal in every
    dimension longer than 1 (a dimension of 1 is never stepped; Inductor's stride asserts skip it),
    or any strides where the tensor has no elements (none is addressed; the asserts skip those too)."""
    return 0 in shape or all(n <= 1 or x == y for n, x, y in zip(shape, a, b))
