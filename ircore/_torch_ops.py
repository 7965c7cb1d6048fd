"""The torch side of an op: ``torch.ops.ircore.<name>`` and its ``maybe_inplace`` overload.

Graphs (``torch.compile``, ``make_fx``), tensor subclasses (DTensor) and torch's own dispatcher
see an op through these. Each op is defined in a ``torch.library.Library`` fragment of its own,
so that an op whose declaration was undone (``ircore.testing.isolated()``, a provider rolled
back) can be declared again under the same name: the stale definition is destroyed first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from ircore import dispatch

NAMESPACE = "ircore"

# op name -> the library fragment that defines torch.ops.ircore.<name>
_LIBRARIES: dict[str, torch.library.Library] = {}


class DefinedOp(dispatch.OpLike, Protocol):
    """What the torch op is made from (:class:`ircore.IrOp`)."""

    native: Callable[..., Any]
    schema: str
    param_names: tuple[str, ...]
    inplace_args: tuple[str, ...]
    inplace_indices: tuple[int, ...]

    def bind_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]: ...


def define(op: DefinedOp, fake: Callable[..., Any] | None) -> tuple[Any, Any]:
    """Define ``torch.ops.ircore.<name>`` (and ``.maybe_inplace`` where the op has one).

    Returns both overloads (the second None where the op has none). The kernel, for every
    device, runs the eager dispatch; the fake is ``fake`` or native on fake tensors.
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
    native, check = op.native, op.check_args
    if fake is None:

        def fake(*args: Any, **kwargs: Any) -> Any:
            if kwargs or len(args) != arity:
                args = op.bind_args(args, kwargs)
            check(*args)
            return native(*args)

    torch.library.register_fake(f"{NAMESPACE}::{op.name}", fake, lib=lib)
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
        for i, out in zip(indices, outs if len(indices) > 1 else (outs,)):
            if out is not args[i]:
                args[i].copy_(out)

    def fake(*args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != arity:
            args = op.bind_args(args, kwargs)
        check(*args)

    kernel.__qualname__ = f"ircore.{op.name}.maybe_inplace[kernel]"
    lib.impl(f"{op.name}.maybe_inplace", kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{op.name}.maybe_inplace", fake, lib=lib)
    return packet.maybe_inplace
