"""Declarative providers: a table of implementations that the registrar reads.

A provider module may declare its implementations as data instead of writing an
``ircore_register`` hook::

    IRCORE_IMPLEMENTATIONS = {
        "rms_norm": ircore.ImplSpec(
            "ircore_myprov.impls:rms_norm",
            supports_args="ircore_myprov.impls:rms_norm_supports",
            cache_by_signature=True,
            rank=10,
        ),
    }

Functions may be given directly or as ``"module:attribute"`` strings, which are imported only
when the provider is registered (after its platform check said yes), so the entry-point module
stays cheap to import and never pulls in a kernel library on the wrong machine. A hook-based
provider can hand the same kind of table to :meth:`Registrar.register_table`. When a module
follows the naming convention ``<op>`` / ``<op>_supports``, :func:`impl_table` writes the rows.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ircore.errors import ImplRegistrationError

__all__ = ["TABLE_ATTRIBUTE", "ImplSpec", "impl_table", "resolve"]

#: The module attribute the core reads when a provider implements no ``ircore_register`` hook.
TABLE_ATTRIBUTE = "IRCORE_IMPLEMENTATIONS"


@dataclass(frozen=True)
class ImplSpec:
    """One row of a provider's table: what ``registrar.register(op, ...)`` would be given.

    ``fn`` (the kernel: a function with the op's signature, or a torch op of its schema),
    ``supports_args`` and ``fake`` are callables or ``"module:attribute"`` references resolved at
    registration. ``cache_by_signature``: whether the predicate's answer may be remembered per
    call signature (None: yes when the predicate is made by ``kit.supports``, else no). ``rank``
    is the provider's suggested rank for the op (lower runs first; the
    ``ircore_default_priority`` hook, when the provider implements it, answers instead).
    ``fake`` says what the kernel returns, for compiled graphs, where it differs from the op's
    own fake with contiguous outputs.
    ``batch_invariant`` is the claim that each output row, bit for bit, depends only on the same
    input row, whatever the batch around it (its size, the row's position, the layout of the
    others): ``True``, ``False`` (the default: batch-invariant mode never runs it), or a predicate
    over the call (the op's parameters, like ``supports_args``; a reference string too) for "only
    for these arguments". The conformance kit checks every claim (docs/writing-a-provider.md).
    ``invariant_fn``: where ``fn``'s launch configuration depends on the number of rows, the
    variant with a configuration fixed per hidden size (same signature and in-place contract),
    which batch-invariant mode runs instead of ``fn``; the claim is then about it.
    """

    fn: Callable[..., Any] | str
    supports_args: Callable[..., bool] | str | None = None
    inplace: bool = False
    cache_by_signature: bool | None = None
    rank: int | None = None
    fake: Callable[..., Any] | str | None = None
    batch_invariant: bool | Callable[..., bool] | str = False
    invariant_fn: Callable[..., Any] | str | None = None


def impl_table(
    module: str,
    ops: Iterable[str],
    *,
    inplace: Collection[str] = (),
    cache_by_signature: bool | None = None,
    rank: int | Mapping[str, int] | None = None,
    fakes: Collection[str] = (),
    batch_invariant: bool | Collection[str] | Mapping[str, bool | Callable[..., bool] | str] = (),
    invariant_fns: Collection[str] = (),
) -> dict[str, ImplSpec]:
    """Rows for ``ops`` implemented in ``module`` as ``<op>`` with the predicate ``<op>_supports``.

    ``inplace`` names the ops whose function works in place; ``rank`` is one rank for every op
    or a rank per op; ``fakes`` names the ops whose kernel returns another layout than the op's
    own fake says, given as ``<op>_fake`` (see :class:`ImplSpec`). ``batch_invariant``: True for
    every op, the names of the ops whose implementation claims invariance for every call, or a
    claim per op (True, or a predicate: see :class:`ImplSpec`). A missing function or predicate is
    reported when the table is registered. ``invariant_fns`` names the ops with an invariant
    variant, given as ``<op>_invariant`` (see :class:`ImplSpec`).
    """
    ops = tuple(ops)
    claims: Mapping[str, bool | Callable[..., bool] | str]
    if isinstance(batch_invariant, bool):
        claims = dict.fromkeys(ops, batch_invariant)
    elif isinstance(batch_invariant, Mapping):
        claims = batch_invariant
    else:
        claims = dict.fromkeys(batch_invariant, True)
    ranks = rank if isinstance(rank, Mapping) else dict.fromkeys(ops, rank)
    return {
        op: ImplSpec(
            f"{module}:{op}",
            f"{module}:{op}_supports",
            inplace=op in inplace,
            cache_by_signature=cache_by_signature,
            rank=ranks.get(op),
            fake=f"{module}:{op}_fake" if op in fakes else None,
            batch_invariant=claims.get(op, False),
            invariant_fn=f"{module}:{op}_invariant" if op in invariant_fns else None,
        )
        for op in ops
    }


def resolve(ref: Any, provider: str, op: str, field: str) -> Any:
    """The object ``ref`` names (``"pkg.module:attr.sub"``), or ``ref`` itself if not a string.

    A malformed reference or a missing attribute is the provider's registration error; an
    exception raised while importing the module propagates (the provider is then ``failed``).
    """
    if not isinstance(ref, str):
        return ref
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise ImplRegistrationError(
            f"provider {provider!r}, op {op!r}: {field} {ref!r} is not a 'module:attribute' reference"
        )
    try:
        target: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # the reference's own module (or a package above it) is missing: a typo, or a package
        # not installed; a module that exists but fails to import propagates (``failed``)
        if exc.name is None or not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise
        raise ImplRegistrationError(
            f"provider {provider!r}, op {op!r}: {field} {ref!r} names module {module_name!r}, "
            f"which cannot be imported: no module named {exc.name!r}{_nearest_module(exc.name)}"
        ) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            close = difflib.get_close_matches(part, [n for n in dir(target) if not n.startswith("__")], n=1)
            raise ImplRegistrationError(
                f"provider {provider!r}, op {op!r}: {field} {ref!r} names nothing: "
                f"{target!r} has no attribute {part!r}"
                + (f"; did you mean {close[0]!r}?" if close else "")
            ) from None
    return target


def _nearest_module(missing: str) -> str:
    """``"; did you mean 'pkg.kernels'?"`` for a missing ``pkg.kernel`` whose package exists, or ``""``."""
    parent, _, name = missing.rpartition(".")
    if not parent:  # a top-level package not installed: no guess among everything installed
        return ""
    try:
        path = importlib.import_module(parent).__path__
    except Exception:
        return ""
    close = difflib.get_close_matches(name, [m.name for m in pkgutil.iter_modules(path)], n=1)
    return f"; did you mean {parent + '.' + close[0]!r}?" if close else ""
