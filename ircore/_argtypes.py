"""The argument types an op's annotations promise, checked from the annotations alone.

Every op gets this check from its native signature: a list, an ndarray or None where a tensor is
declared, a string where a float is, a float where an int is, each raise the one error bad input
gets (:func:`bad_argument`), before any implementation sees the call. It runs where the op's own
checks cannot be relied on to look at every argument: in their careful branch, and on the path
that hands a call to ``torch.ops.ircore.*`` (tracing, tensor subclasses, a first argument that is
not a tensor), where torch's own argument parser would otherwise answer first.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import torch

from ircore.errors import InvalidArgumentError

_Proxy = torch.fx.Proxy
# Symbolic numbers stand in for ints and floats under torch.compile and make_fx.
_INTS = (int, torch.SymInt)
_REALS = (int, float, torch.SymInt, torch.SymFloat)


def bad_argument(op: str, arg: str, problem: str) -> NoReturn:
    """Raise the one error every bad input gets: op, argument, what is wrong, what is wanted."""
    raise InvalidArgumentError(f"ircore.ops.{op}: argument {arg!r} {problem}")


def _is_int(value: object) -> bool:
    return isinstance(value, _INTS) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, _REALS) and not isinstance(value, bool)


# annotation -> (what the message asks for, the test); ``X | None`` and ``Optional[X]`` are equal.
_KINDS: dict[Any, tuple[str, Callable[[object], bool]]] = {
    torch.Tensor: ("a torch.Tensor", lambda v: isinstance(v, torch.Tensor)),
    torch.Tensor | None: ("a torch.Tensor or None", lambda v: v is None or isinstance(v, torch.Tensor)),
    int: ("an int", _is_int),
    int | None: ("an int or None", lambda v: v is None or _is_int(v)),
    float: ("a real number (a float or an int)", _is_real),
    float | None: ("a real number or None", lambda v: v is None or _is_real(v)),
    bool: ("a bool", lambda v: isinstance(v, bool)),
}


def describe(value: object) -> str:
    """How a message names a wrong value: short scalars by value, anything else by type."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"str {value[:40]!r}"
    if isinstance(value, torch.Tensor):  # also fake and other subclasses: one message for all
        return "torch.Tensor"
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def tensor_parameters(native: Callable[..., Any], names: Sequence[str]) -> tuple[int, ...]:
    """Indices of the parameters annotated ``Tensor`` or ``Tensor | None``."""
    hints = typing.get_type_hints(native)
    return tuple(i for i, name in enumerate(names) if hints.get(name) in (torch.Tensor, torch.Tensor | None))


def type_checker(op: str, native: Callable[..., Any], names: Sequence[str]) -> Callable[..., None]:
    """``check_types(*args)`` for ``native``'s annotated parameters; others are not checked."""
    hints = typing.get_type_hints(native)
    checks = [(i, name, *_KINDS[hints[name]]) for i, name in enumerate(names) if hints.get(name) in _KINDS]

    def check_types(*args: object) -> None:
        for i, name, wanted, ok in checks:
            # under torch.fx.symbolic_trace a Proxy stands in for a value of any type
            if i < len(args) and not ok(args[i]) and not isinstance(args[i], _Proxy):
                bad_argument(op, name, f"must be {wanted}, got {describe(args[i])}")

    return check_types
