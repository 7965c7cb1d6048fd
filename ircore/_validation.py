"""Checks of what users and providers hand to ircore: native functions, implementations, predicates.

Each check raises one error that names the op, the provider where there is one, ``file:line`` of
the offending function, what is wrong and what is expected, so the mistake can be fixed from the
message alone.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ircore import _signature
from ircore.errors import ImplRegistrationError, OpDeclarationError

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")  # matched with fullmatch: "$" alone allows a final "\n"
RESERVED_PROVIDER_NAMES = frozenset({"native", "unfused"})
_NAME_RULE = "lower-case ASCII letters, digits and underscores, starting with a letter"


def name_problem(name: object, what: str) -> str | None:
    """Why ``name`` cannot be an op's or a provider's name (``what``: "op name", "provider
    name"), saying what is wrong and what names may be; None if it can."""
    if isinstance(name, str) and NAME_PATTERN.fullmatch(name):
        return None
    example = "'my_op'" if what.startswith("op") else "'my_kernels'"
    rule = f"must match {NAME_PATTERN.pattern}: {_NAME_RULE}, e.g. {example}"
    if not isinstance(name, str):
        return f"{what} {name!r} is of type {type(name).__name__}, not a str; a name {rule}"
    odd = sorted({c for c in name if c.isspace() or not c.isprintable()})
    if odd:
        body = name
        while body and body[-1] in odd:
            body = body[:-1]
        place = "ends with" if not any(c in odd for c in body) else "contains"
        chars = ", ".join(repr(c) for c in odd)
        return f"{what} {name!r} {place} whitespace or a control character ({chars}); a name {rule}"
    return f"{what} {name!r} {rule}"


def source_of(obj: object) -> str:
    """``file:line`` of a function, for messages that must say where something is."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(target, "__code__", None)
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno}"
    overload_name = getattr(target, "_name", None)
    if isinstance(target, torch._ops.OpOverload) and overload_name:
        return f"torch.ops.{overload_name.replace('::', '.')}"
    return getattr(target, "__module__", None) or repr(target)


def file_digest(obj: object) -> str:
    """sha256 of the file that defines ``obj`` (its ``file:line`` if the file cannot be read)."""
    try:
        path = inspect.getsourcefile(inspect.unwrap(obj))  # type: ignore[arg-type]
    except TypeError:
        path = None
    if not path:
        return source_of(obj)
    try:
        stat = os.stat(path)
    except OSError:
        return source_of(obj)
    return _digest_cached(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _digest_cached(path: str, mtime_ns: int, size: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def infer_schema(fn: Callable[..., Any], mutates_args: Sequence[str] = ()) -> str:
    return torch.library.infer_schema(fn, mutates_args=tuple(mutates_args))


def as_torch_op(fn: object) -> torch._ops.OpOverload | None:
    """``fn`` as a torch op overload, if it is one (a packet means its default overload)."""
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return getattr(fn, "default", None)
    return fn if isinstance(fn, torch._ops.OpOverload) else None


def _schema_shape(schema: torch._C.FunctionSchema) -> tuple[Any, ...]:
    """What a positional caller depends on: each argument's type, mutability, default and
    keyword-only-ness, and the return types; not the names."""
    args = tuple(
        (
            str(a.type),
            bool(a.alias_info is not None and a.alias_info.is_write),
            repr(a.default_value) if a.has_default_value() else None,
            a.kwarg_only,
        )
        for a in schema.arguments
    )
    return args, tuple(str(r.type) for r in schema.returns)


def torch_op_schema_problem(fn: torch._ops.OpOverload, expected: str) -> str | None:
    """Why the torch op ``fn`` cannot serve where the schema ``expected`` (``(args) -> returns``)
    is wanted, or None. Argument names may differ: ircore passes every argument by position."""
    wanted = torch._C.parse_schema(f"ircore::_{expected}")
    if _schema_shape(fn._schema) == _schema_shape(wanted):
        return None
    got = str(fn._schema).split("(", 1)[1]
    return (
        f"its schema ({got} differs from the schema it must have, {expected} (argument types, "
        "mutability, defaults and returns must match; names may differ)"
    )


def _same_default(a: object, b: object) -> bool:
    """Defaults are the same object, or equal values of one type (``1`` is not ``True``)."""
    return a is b or (type(a) is type(b) and a == b)


# ---------------------------------------------------------------------- native functions
def check_native(
    name: str | None,
    native: Callable[..., Any],
    inplace_args: Sequence[str],
    declared: Mapping[str, Any],
    any_layout_args: Sequence[str] = (),
) -> str:
    """Validate a native function for ``register_op``; return the op's name."""
    if not callable(native):
        raise OpDeclarationError(f"register_op needs a function, got {native!r}")
    op_name = getattr(native, "__name__", "") if name is None else name
    where = source_of(native)
    problem = name_problem(op_name, "op name")
    if problem is not None:
        raise OpDeclarationError(f"{problem} ({where})")
    if op_name in declared:
        raise OpDeclarationError(
            f"op {op_name!r} ({where}) is already declared by {source_of(declared[op_name].native)}"
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
        infer_schema(native)
    except Exception as exc:
        raise OpDeclarationError(
            f"op {op_name!r} ({where}): cannot infer a torch schema from its annotations: {exc}"
        ) from None
    hints = typing.get_type_hints(native)
    tensors = [p for p in params if hints.get(p) in (torch.Tensor, torch.Tensor | None)]
    for arg in any_layout_args:
        if arg not in tensors:
            raise OpDeclarationError(
                f"op {op_name!r} ({where}): any_layout_args names {arg!r}, which is not a tensor "
                f"parameter (tensor parameters: {tensors})"
            )
    return op_name


#: How ircore calls each callback of ``register_op`` (beyond the op's own parameters).
CALLBACK_CALLS = {
    "sample_inputs": ("dtype", "device", "seed"),
    "make_inputs": ("shape", "dtype", "device"),
    "quantized_outputs": ("args", "outputs"),
}


def check_callbacks(op_name: str, native: Callable[..., Any], callbacks: Mapping[str, Any]) -> None:
    """Each ``register_op`` callback can be called as ircore calls it: ``check_args``,
    ``reference`` and ``fake`` with the op's arguments, positionally; ``sample_inputs(dtype,
    device, seed)``; ``make_inputs(shape, dtype, device)``; ``quantized_outputs(args, outputs)``.
    Refused now, not at its first use."""
    params = tuple(inspect.signature(native).parameters)
    for role, callback in callbacks.items():
        if callback is None:
            continue
        where = f"op {op_name!r} ({source_of(native)}): {role}"
        if not callable(callback):
            raise OpDeclarationError(f"{where} is {callback!r}, not a function")
        call = CALLBACK_CALLS.get(role, params)
        try:
            inspect.signature(callback).bind(*call)
        except TypeError as exc:
            takes = f"({', '.join(inspect.signature(callback).parameters)})"
            raise OpDeclarationError(
                f"{where} ({source_of(callback)}) takes {takes} but ircore calls it as "
                f"{role}({', '.join(call)}): {exc}"
            ) from None
        except ValueError:  # a builtin without a readable signature: called as it is
            continue


def signature_spec(op_name: str, native: Callable[..., Any], param_names: Sequence[str]) -> bytes:
    """The per-parameter kinds ``ircore._signature`` reads; refuses parameter types it cannot."""
    hints = typing.get_type_hints(native)
    annotations = [hints.get(name) for name in param_names]
    spec = _signature.spec_for(annotations)
    if spec is None:
        raise OpDeclarationError(
            f"op {op_name!r} ({source_of(native)}): cache_by_signature=True needs every parameter to be "
            f"a Tensor, an int, a bool or a float (each optional or not); got {annotations}"
        )
    return spec


# ---------------------------------------------------------------------- implementations
def reject(op: str, provider: str, fn: object, why: str) -> ImplRegistrationError:
    """The error refusing ``provider``'s implementation ``fn`` of ``op``: located by ``fn``'s
    ``file:line`` where it has one (a value that is no function has none to give)."""
    where = f" ({source_of(fn)})" if callable(fn) else ""
    return ImplRegistrationError(
        f"cannot register the implementation of op {op!r} by provider {provider!r}{where}: {why}"
    )


def check_provider_name(op: str, provider: object, fn: object) -> str:
    problem = name_problem(provider, "provider name")
    if problem is not None or not isinstance(provider, str):
        raise reject(op, str(provider), fn, str(problem))
    if provider in RESERVED_PROVIDER_NAMES:
        raise reject(
            op, provider, fn, f"{provider!r} is reserved (reserved names: {sorted(RESERVED_PROVIDER_NAMES)})"
        )
    return provider


def check_predicate(
    op: str, provider: str, fn: object, supports_args: object, native_signature: inspect.Signature
) -> None:
    """``supports_args`` takes exactly the op's parameters, positionally, with native defaults."""
    if not callable(supports_args):
        raise reject(op, provider, fn, f"supports_args {supports_args!r} is not callable")
    try:
        params = inspect.signature(supports_args).parameters
    except (TypeError, ValueError) as exc:
        raise reject(op, provider, fn, f"cannot read supports_args' signature: {exc}") from None
    where = source_of(supports_args)
    native_params = native_signature.parameters
    if tuple(params) != tuple(native_params):
        raise reject(
            op,
            provider,
            fn,
            f"supports_args ({where}) takes ({', '.join(params)}) but must take the op's parameters "
            f"({', '.join(native_params)})",
        )
    # ircore passes every argument positionally, so a keyword-only parameter would fail every
    # call; a default must be the native one (or none), as the call it describes is the same.
    for param in params.values():
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            why = f"has {param.kind.description} parameter {param.name!r}; every parameter must be positional"
            raise reject(op, provider, fn, f"supports_args ({where}) {why}")
        native_default = native_params[param.name].default
        if param.default is not param.empty and not _same_default(param.default, native_default):
            wanted = (
                "no default" if native_default is param.empty else f"the native default {native_default!r}"
            )
            why = f"gives {param.name!r} the default {param.default!r}; expected {wanted} (or none)"
            raise reject(op, provider, fn, f"supports_args ({where}) {why}")
