"""Ready-made predicate pieces: ``supports_args`` from facts of the call signature only.

A predicate built from these pieces reads only what ircore's call signature holds (each tensor's
device type, dtype, number of dimensions, last-dimension size, contiguity, unit last stride;
which optional arguments are None; the values of int and bool arguments), so its answer may be
remembered per signature: an implementation whose predicate is made by :func:`supports` is
registered with ``cache_by_signature=True`` unless its row says otherwise::

    rms_norm_supports = kit.supports(
        "rms_norm",
        kit.device("x", "cuda", "xpu"),
        kit.dtype("x", torch.float16, torch.bfloat16),
        kit.unit_stride("x"),
        kit.same_dtype("weight", "x"),   # an optional tensor: None passes every piece on it
        kit.is_none("variance_size"),
    )

:func:`supports` writes one function with the op's exact parameters whose body is the pieces
joined by ``and``: as cheap as the hand-written expression (it runs on every eager call of a
signature not seen before).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ircore._fastpath import compile_script
from ircore._state import STATE
from ircore.errors import ImplRegistrationError

__all__ = [
    "Piece",
    "contiguous",
    "device",
    "dtype",
    "is_none",
    "last_dim",
    "ndim",
    "not_none",
    "same_dtype",
    "supports",
    "unit_stride",
    "value",
]

#: Set on a predicate :func:`supports` made: it reads only the call signature.
SIGNATURE_ONLY = "__ircore_signature_only__"


class Piece(NamedTuple):
    """One condition on one parameter: ``template`` is a Python expression with ``{p}`` for the
    parameter (``{o}`` for a second one); ``values`` are the constants it refers to."""

    param: str
    template: str
    kind: str  # "tensor" or "scalar": what the parameter must be
    what: str  # for messages
    values: tuple[Any, ...] = ()
    other: str | None = None


def device(param: str, *types: str) -> Piece:
    """The tensor is on one of these device types (``"cuda"``, ``"xpu"``, ``"cpu"``)."""
    return Piece(param, "{p}.device.type in {v0}", "tensor", f"device({param!r}, ...)", (frozenset(types),))


def dtype(param: str, *dtypes: torch.dtype) -> Piece:
    """The tensor's dtype is one of these."""
    return Piece(param, "{p}.dtype in {v0}", "tensor", f"dtype({param!r}, ...)", (frozenset(dtypes),))


def same_dtype(param: str, other: str) -> Piece:
    """The tensor has the dtype of another tensor parameter."""
    return Piece(param, "{p}.dtype is {o}.dtype", "tensor", f"same_dtype({param!r}, {other!r})", (), other)


def contiguous(param: str) -> Piece:
    """The tensor is contiguous."""
    return Piece(param, "{p}.is_contiguous()", "tensor", f"contiguous({param!r})")


def unit_stride(param: str) -> Piece:
    """The tensor's last dimension has stride 1 (rows may have any stride)."""
    return Piece(param, "{p}.stride(-1) == 1", "tensor", f"unit_stride({param!r})")


def ndim(param: str, *allowed: int) -> Piece:
    """The tensor has one of these numbers of dimensions."""
    return Piece(param, "{p}.dim() in {v0}", "tensor", f"ndim({param!r}, ...)", (frozenset(allowed),))


def last_dim(
    param: str, *, min: int | None = None, max: int | None = None, multiple_of: int | None = None
) -> Piece:
    """The tensor's last dimension is within ``[min, max]`` and a multiple of ``multiple_of``."""
    terms = []
    if min is not None:
        terms.append(f"{{p}}.shape[-1] >= {int(min)}")
    if max is not None:
        terms.append(f"{{p}}.shape[-1] <= {int(max)}")
    if multiple_of is not None:
        terms.append(f"{{p}}.shape[-1] % {int(multiple_of)} == 0")
    return Piece(param, " and ".join(terms) or "True", "tensor", f"last_dim({param!r}, ...)")


def is_none(param: str) -> Piece:
    """The (optional) argument is None."""
    return Piece(param, "{p} is None", "optional", f"is_none({param!r})")


def not_none(param: str) -> Piece:
    """The (optional) argument is given."""
    return Piece(param, "{p} is not None", "optional", f"not_none({param!r})")


def value(param: str, *allowed: int | bool) -> Piece:
    """The int or bool argument is one of these values (None, for an optional one, passes)."""
    return Piece(param, "{p} in {v0}", "scalar", f"value({param!r}, ...)", (frozenset(allowed),))


# What each kind of piece may be applied to: the parameter's annotation.
_TENSOR = (torch.Tensor, torch.Tensor | None)
_SCALAR = (int, bool, int | None, bool | None)
_OPTIONAL = (torch.Tensor | None, int | None, bool | None, float | None)


def supports(op: str | Any, *pieces: Piece) -> Callable[..., bool]:
    """A ``supports_args`` for ``op`` (an op or its name): true when every piece holds.

    The function takes exactly the op's parameters (with the native defaults), as ircore
    requires, reads only the call signature (see the module docstring) and says so
    (implementations registered with it default to ``cache_by_signature=True``). A piece on an
    optional tensor passes when the argument is None, except :func:`is_none`/:func:`not_none`.
    """
    target = STATE.op(op) if isinstance(op, str) else op
    hints = typing.get_type_hints(target.native)
    params = list(target.signature.parameters.values())
    names = [p.name for p in params]
    terms: list[str] = []
    constants: dict[str, Any] = {}
    for i, piece in enumerate(pieces):
        for name in (piece.param, piece.other):
            if name is not None and name not in names:
                raise ImplRegistrationError(
                    f"kit.{piece.what} for op {target.name!r}: the op has no parameter {name!r} "
                    f"(parameters: {', '.join(names)})"
                )
        hint = hints.get(piece.param)
        optional = hint in _OPTIONAL
        wanted = {"tensor": _TENSOR, "scalar": _SCALAR, "optional": None}[piece.kind]
        if (wanted is not None and hint not in wanted) or (piece.kind == "optional" and not optional):
            kind = {"tensor": "a tensor", "scalar": "an int or a bool", "optional": "optional"}[piece.kind]
            raise ImplRegistrationError(
                f"kit.{piece.what} for op {target.name!r}: parameter {piece.param!r} is {hint}, "
                f"not {kind}"
            )
        mapping = {"p": piece.param, "o": piece.other or ""}
        for j, constant in enumerate(piece.values):
            constants[f"_ir_c{i}_{j}"] = constant
            mapping[f"v{j}"] = f"_ir_c{i}_{j}"
        term = f"({piece.template.format(**mapping)})"
        # None passes a piece on an optional argument (the piece reads what is not there)
        unset = [n for n in (piece.param, piece.other) if n is not None and hints.get(n) in _OPTIONAL]
        if piece.kind != "optional" and unset:
            term = "(" + " or ".join(f"{n} is None" for n in unset) + f" or {term})"
        terms.append(term)
    args = ", ".join(
        p.name if p.default is p.empty else f"{p.name}=_ir_default{k}" for k, p in enumerate(params)
    )
    constants.update({f"_ir_default{k}": p.default for k, p in enumerate(params) if p.default is not p.empty})
    source = f"def supports_args({args}):\n    return {' and '.join(terms) or 'True'}\n"
    fn: Callable[..., bool] = compile_script(source, constants, f"<ircore predicate of {target.name}>")[
        "supports_args"
    ]
    fn.__qualname__ = f"kit.supports[{target.name}]"
    fn.__doc__ = "; ".join(piece.what for piece in pieces) or "every call"
    setattr(fn, SIGNATURE_ONLY, True)
    return fn
