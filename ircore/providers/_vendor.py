"""Helpers for providers that adapt a vendor's kernel library (AITER, vllm-xpu-kernels, Oink).

Such an adapter's platform check does the same three things in the same order: the hardware first
(from ``platform`` alone, so the vendor package is never imported where it cannot run), then
the import (caught whatever it raises: some vendor packages raise ``RuntimeError``, not
``ImportError``, on the wrong machine), then the call forms it was written against (a vendor
release that renamed or reordered a parameter is reported, not crashed into on the first call).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from ircore.errors import ImplRegistrationError

__all__ = [
    "call_form_problem",
    "import_vendor",
    "parameters_of",
    "register_device_kernel",
    "torch_op",
    "unit_weight",
]


def import_vendor(module: str, *, needs: str) -> ModuleType | str:
    """Import ``module``, or say in one line why it cannot be (the provider's reason).

    ``needs`` names what to install (``"AITER (pip install amd-aiter)"``). The module is looked
    up first, so a missing package is told apart from one that fails while importing.
    """
    top = module.split(".")[0]
    if importlib.util.find_spec(top) is None:
        return f"{needs} is not installed: no module named {top!r}"
    try:
        return importlib.import_module(module)
    except Exception as exc:  # vendor imports raise anything (RuntimeError without ROCm)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"import {module} failed: {type(exc).__name__}: {message}"


def parameters_of(target: Any) -> list[tuple[str, bool]] | None:
    """``[(name, has_default), ...]`` of a torch op (its schema) or a Python callable.

    None when they cannot be read (a ``(*args, **kwargs)`` wrapper, a C function without a
    signature).
    """
    overload = getattr(target, "default", None)
    schema = getattr(overload, "_schema", None)
    if schema is not None:
        return [(arg.name, arg.has_default_value()) for arg in schema.arguments]
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None
    return [(p.name, p.default is not p.empty) for p in params]


def call_form_problem(what: str, target: Any, expected: Sequence[str]) -> str | None:
    """None if ``target`` can be called positionally with exactly ``expected``, else why not.

    ``expected`` are the leading parameter names the adapter passes, in order; any further
    parameter must have a default (a release may add optional parameters at the end).
    """
    params = parameters_of(target)
    if params is None:
        return f"cannot read the parameters of {what}"
    names = [name for name, _ in params]
    required_extra = [name for name, has_default in params[len(expected) :] if not has_default]
    if names[: len(expected)] == list(expected) and not required_extra:
        return None
    return f"{what} takes ({', '.join(names)}); this provider calls it as ({', '.join(expected)})"


def torch_op(namespace: str, name: str) -> Callable[..., Any] | None:
    """``torch.ops.<namespace>.<name>`` if that op is defined, else None.

    ``hasattr(torch.ops, namespace)`` is always true (namespaces are created on access): only
    the op itself says whether a library registered it.
    """
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


def register_device_kernel(
    lib: torch.library.Library, op: str, fn: Callable[..., Any], device_type: str
) -> None:
    """Register ``fn`` as the kernel of ``<lib.ns>::<op>`` for one device type, and only that one.

    Safe on any build of torch: a kernel for a device this build lacks (``"xpu"`` on a CPU or
    CUDA build) registers without error and is simply never reached; calls on other devices keep
    their own kernels. Unlike ``Library.impl``, which replaces an existing kernel for the key with
    only a warning, a second registration raises :class:`ircore.ImplRegistrationError` naming
    where the first one was made.
    """
    qualname = f"{lib.ns}::{op}"
    try:
        key = torch._C._dispatch_key_for_device(device_type)
    except RuntimeError:
        raise ImplRegistrationError(
            f"cannot register a kernel of {qualname} for {device_type!r}: not a torch device type "
            "('cpu', 'cuda', 'xpu', ...)"
        ) from None
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key):
        raise ImplRegistrationError(
            f"{qualname} already has a {key} kernel ({_registered_at(qualname, key)}); "
            "a second registration would silently replace it"
        )
    lib.impl(op, fn, key)


def _registered_at(qualname: str, key: str) -> str:
    prefix = f"{key}: registered at "
    for line in torch._C._dispatch_dump(qualname).splitlines():
        if line.startswith(prefix):
            return "registered at " + line[len(prefix) :].split(" :: ")[0]
    return "registered elsewhere"


_UNIT_WEIGHTS: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def unit_weight(x: torch.Tensor) -> torch.Tensor:
    """A weight of ones for ``x``'s last dimension, dtype and device, made once and reused.

    For kernels whose weight is not optional, called with ``weight=None``. Do not write to it.
    Only weights for plain tensors outside tracing are kept: for a fake, traced or subclass
    tensor a fresh one is made each time (such a tensor must never outlive its trace).
    """
    if type(x) is not torch.Tensor or torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    key = (x.shape[-1], x.dtype, x.device)
    ones = _UNIT_WEIGHTS.get(key)
    if ones is None:
        ones = _UNIT_WEIGHTS[key] = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    return ones
