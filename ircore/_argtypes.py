"""The argument types an op's annotations promise, checked from the annotations alone.

Every op gets this check from its native signature: a list, an ndarray or None where a tensor is
declared, a string where a float is, a float where an int is, each raise the one error bad input
gets (:func:`bad_argument`), before any implementation sees the call. It runs where the op's own
checks cannot be relied on to look at every argument: in their careful branch, and on the path
that hands a call to ``torch.ops.ircore.*`` (tracing, tensor subclasses, a first argument that is
not a tensor), where torch's own argument parser would otherwise answer first.
"""

from __future__ import annotations

import linecache
import typing
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import torch

from ircore import _signature
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
    str: ("a str", lambda v: isinstance(v, str)),
    torch.dtype: ("a torch.dtype", lambda v: isinstance(v, torch.dtype)),
    list[int]: ("a list of ints", lambda v: isinstance(v, (list, tuple)) and all(map(_is_int, v))),
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


# ---------------------------------------------------------------------- what a schema type holds
#: An ``int`` in a torch schema is 64-bit; a ``float`` is a double, which an implementation may
#: receive through a 64-bit integer when the caller gives an int (native's Python arithmetic
#: does). So an int argument, for an ``int`` or a ``float`` parameter, must fit in 64 bits.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INT_RANGE = "[-2**63, 2**63 - 1]"
_STRIDED = torch.strided


def _int_text(value: int) -> str:
    """An int for a message: its digits when short, else its size (``str()`` of a huge int is
    slow, and refused past 4300 digits)."""
    if value.bit_length() <= 128:
        return repr(value)
    digits = int(value.bit_length() * 0.30103) + 1
    return f"{'-' if value < 0 else ''}an int of about {digits} digits"


def _out_of_range(value: object) -> bool:
    """An int (not a bool, not a SymInt) outside 64 bits."""
    return isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX


def _layout_problem(t: torch.Tensor) -> str | None:
    """Why ``t`` is not a plain strided (dense) tensor, with what to do, or None."""
    if t.is_nested:
        return (
            "is a nested tensor; expected a dense (strided) tensor: pad it "
            "(torch.nested.to_padded_tensor) or pass its components one at a time"
        )
    layout = t.layout
    if layout is _STRIDED:
        return None
    kind = "sparse " if t.is_sparse or "sparse" in str(layout) else ""
    return f"is a {kind}tensor of layout {layout}; expected a dense (strided) tensor: pass .to_dense()"


def value_checker(
    op: str, native: Callable[..., Any], names: Sequence[str], any_layout: Sequence[str] = ()
) -> Callable[..., None]:
    """``check_values(*args)``: what a parameter's annotation promises beyond its type.

    A ``Tensor`` parameter (unless named in ``any_layout``) takes a dense, strided tensor: not a
    sparse, nested or MKL-DNN one, which implementations would each fail on differently. An
    ``int`` or ``float`` parameter given an int takes one that fits in 64 bits (the schema's
    ``int``; what a ``float`` parameter's implementations convert an int through), and so does
    each element of a ``list[int]`` (the schema's ``int[]``). Run after the type check: a wrong
    type is that check's error.
    """
    hints = typing.get_type_hints(native)
    tensors = [
        (i, name)
        for i, name in enumerate(names)
        if hints.get(name) in (torch.Tensor, torch.Tensor | None) and name not in any_layout
    ]
    numbers = [(i, name, hints[name]) for i, name in enumerate(names) if hints.get(name) in _NUMBERS]
    int_lists = [(i, name) for i, name in enumerate(names) if hints.get(name) == list[int]]

    def check_values(*args: object) -> None:
        for i, name in tensors:
            arg = args[i]
            if isinstance(arg, torch.Tensor) and not isinstance(arg, _Proxy):
                problem = _layout_problem(arg)
                if problem is not None:
                    bad_argument(op, name, problem)
        for i, name, kind in numbers:
            arg = args[i]
            if _out_of_range(arg):
                assert isinstance(arg, int)
                if kind in (int, int | None):
                    why = "expected an int that fits in 64 bits (the schema's int)"
                else:
                    why = "an int given for a float parameter must fit in 64 bits; pass a float instead"
                    if arg.bit_length() <= 1024:
                        why += f" ({float(arg)!r})"
                bad_argument(op, name, f"is {_int_text(arg)}, outside {_INT_RANGE}: {why}")
        for i, name in int_lists:
            values: Sequence[object] = args[i]  # type: ignore[assignment]  # a list or tuple: checked
            for j, value in enumerate(values):
                if _out_of_range(value):
                    assert isinstance(value, int)
                    bad_argument(
                        op,
                        name,
                        f"has element {j} = {_int_text(value)}, outside {_INT_RANGE}: expected ints that "
                        "fit in 64 bits (the schema's int[])",
                    )

    return check_values


_NUMBERS = (int, int | None, float, float | None)

# How the generated check tests each annotation on the common valid call, in one expression
# (``{a}`` is the parameter), when the compiled signature helper is not loaded (with it, one call
# of it answers for every parameter, in ~0.1 us: ircore._signature): cheaper tests than the
# careful ones, true only for valid arguments; anything else goes to the careful checks, which
# raise the precise error (or let an unusual valid call through).
_FAST_TESTS: dict[Any, str] = {
    torch.Tensor: (
        "({a}.__class__ is _ir_T or {a}.__class__ is _ir_P) and {a}.layout is _ir_S and not {a}.is_nested"
    ),
    torch.Tensor | None: (
        "{a} is None or (({a}.__class__ is _ir_T or {a}.__class__ is _ir_P) and {a}.layout is _ir_S "
        "and not {a}.is_nested)"
    ),
    int: "{a}.__class__ is int and _ir_MIN <= {a} <= _ir_MAX",
    int | None: "{a} is None or ({a}.__class__ is int and _ir_MIN <= {a} <= _ir_MAX)",
    float: "{a}.__class__ is float",
    float | None: "{a} is None or {a}.__class__ is float",
    bool: "{a} is True or {a} is False",
    str: "{a}.__class__ is str",
    torch.dtype: "{a}.__class__ is _ir_D",
    list[int]: (
        "({a}.__class__ is list or {a}.__class__ is tuple) "
        "and all(_v.__class__ is int and _ir_MIN <= _v <= _ir_MAX for _v in {a})"
    ),
}
_ANY_LAYOUT_TESTS: dict[Any, str] = {
    torch.Tensor: "{a}.__class__ is _ir_T or {a}.__class__ is _ir_P",
    torch.Tensor | None: "{a} is None or {a}.__class__ is _ir_T or {a}.__class__ is _ir_P",
}

_CHECK_TEMPLATE = """
def check_args({params}):
    try:
        _ir_ok = {fast}
    except Exception:  # an attribute a wrong type lacks (or raises on): the careful checks say which
        _ir_ok = False
    if not _ir_ok:
        _ir_check_types({params})
        _ir_check_values({params})
    return _ir_op_check({params})
"""


# Cheaper than is_compiling (one call, no is_scripting), and folded to True by Dynamo.
_is_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


class QuickTest(NamedTuple):
    """An expression of the op's parameters that is true for a call the annotations allow (it may
    raise, or be false, for calls they allow too: the careful checks then decide), and the globals
    it reads. The eager call inlines it (ircore._fastpath), saving a call of ``check_args``."""

    source: str
    namespace: dict[str, Any]


def argument_checker(
    op: str,
    native: Callable[..., Any],
    names: Sequence[str],
    op_check: Callable[..., None],
    any_layout: Sequence[str] = (),
    check_types: Callable[..., None] | None = None,
) -> tuple[Callable[..., None], Callable[..., None], QuickTest]:
    """``(check_args, check_annotations, quick_test)`` for an op: the check every call of it runs first.

    ``check_annotations(*args)`` raises :class:`InvalidArgumentError` for anything the op's
    annotations rule out (:func:`type_checker`, :func:`value_checker`); ``check_args`` runs it,
    then the op's own check (``op_check``), so every op, declared with a check or not, refuses
    what its annotations rule out before any implementation sees it. ``check_args`` is generated
    with the op's parameters (as the eager call is, :mod:`ircore._fastpath`): the common valid
    call costs one expression and a call of ``op_check``. ``check_types``: the op's
    :func:`type_checker`, if made already.
    """
    hints = typing.get_type_hints(native)
    if check_types is None:
        check_types = type_checker(op, native, names)
    check_values = value_checker(op, native, names, any_layout)

    def check_annotations(*args: object) -> None:
        check_types(*args)
        check_values(*args)

    params = ", ".join(names)
    # The helper's signature is None for anything the careful checks might refuse (and more:
    # dispatch modes, subclasses, tensors of any_layout_args that are not strided).
    spec = _signature.spec_for([hints.get(name) for name in names]) if _signature.signature else None
    if spec is not None:
        # Under Dynamo (the test folds to True) the annotations were checked by the caller
        # (IrOp.call_torch_op, maybe_inplace), and the C helper could not be traced.
        fast = f"_ir_is_dynamo_compiling() or _ir_signature(_ir_arg_spec, {params}) is not None"
    else:
        tests = []
        for name in names:
            any_layout_tensor = name in any_layout and hints.get(name) in _ANY_LAYOUT_TESTS
            table = _ANY_LAYOUT_TESTS if any_layout_tensor else _FAST_TESTS
            if hints.get(name) in table:
                tests.append(table[hints[name]].format(a=name))
        fast = " and ".join(f"({t})" for t in tests) or "True"
    source = _CHECK_TEMPLATE.format(params=params, fast=fast)
    quick = QuickTest(
        fast,
        {
            "_ir_signature": _signature.signature,
            "_ir_is_dynamo_compiling": _is_dynamo_compiling,
            "_ir_arg_spec": spec,
            "_ir_T": torch.Tensor,
            "_ir_P": torch.nn.Parameter,
            "_ir_S": _STRIDED,
            "_ir_D": torch.dtype,
            "_ir_MIN": INT64_MIN,
            "_ir_MAX": INT64_MAX,
        },
    )
    namespace: dict[str, Any] = {
        **quick.namespace,
        "_ir_op_check": op_check,
        "_ir_check_types": check_types,
        "_ir_check_values": check_values,
    }
    filename = f"<ircore argument check of {op}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    check_args: Callable[..., None] = namespace["check_args"]
    check_args.__qualname__ = f"ircore.ops.{op}.check_args"
    check_args.__doc__ = getattr(op_check, "__doc__", None)
    check_args.__wrapped__ = op_check  # type: ignore[attr-defined]
    return check_args, check_annotations, quick
