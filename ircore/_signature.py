"""The compiled call-signature helper, if this installation has a usable build of it.

``signature(spec, *args)`` (ircore/csrc/signature.cpp) describes a call in a few bytes: per tensor
its dtype, device, number of dimensions, last-dimension size, contiguity, unit last-dimension
stride, whether it has the first tensor's shape and whether it requires grad while grad mode is
on; the values of int and bool arguments; whether optional arguments are None; of floats only
whether they are >= 0. It returns None when the call must take the careful path: a torch
dispatch mode is active (``make_fx``, fake tensors), a tensor is a subclass (other than
``nn.Parameter``), or an argument has an unexpected type (a list where a tensor is declared, a
string or a bool where a float is, a float where an int is): so a cached call never has one.

The eager path caches "which implementation runs" per signature when the op and every provider
consulted declare that their checks depend on nothing else (``cache_by_signature=True``).

The helper is built at install time against one torch version (setup.py); it is loaded only when
that version is the running one, so a torch upgrade degrades to the pure-Python path instead of
crashing. ``IRCORE_NO_SIGNATURE=1`` disables it (for comparing both paths, or debugging).
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

_META = Path(__file__).with_name("_signature_build.json")

signature: Callable[..., bytes | None] | None = None
#: ``FastCall(spec, cache, scope_var, name, log_cache, note_failure, miss, op, choose)``: an op's eager
#: call when its signature's choice is remembered (ircore/csrc/fast_call.cpp); None with ``signature``.
FastCall: Callable[..., Callable[..., Any]] | None = None
#: ``BlockBase``: the C ``__enter__``/``__exit__`` of ``ircore.priority`` blocks
#: (ircore/csrc/scope_block.cpp); None with ``signature`` (ircore.dispatch has a Python twin).
BlockBase: type | None = None
#: ``request_key(request)``: the hashable form of an ``ircore.priority`` request, or None.
request_key: Callable[[dict[str, Any]], tuple[Any, ...] | None] | None = None
#: Why ``signature`` is None ("" when it is loaded); shown by ``ircore doctor``.
unavailable_reason = ""


def _load() -> tuple[Any, str]:
    if os.environ.get("IRCORE_NO_SIGNATURE", "") not in ("", "0"):
        return None, "disabled by IRCORE_NO_SIGNATURE"
    try:
        built_for = json.loads(_META.read_text())["torch"]
    except FileNotFoundError:
        return None, "not built (install with `pip install --no-build-isolation` and a C++ compiler)"
    except (OSError, ValueError, KeyError) as exc:
        return None, f"unreadable {_META.name}: {exc}"
    if built_for != torch.__version__:
        return None, f"built for torch {built_for}, running {torch.__version__}: reinstall ircore to rebuild"
    try:
        module = importlib.import_module("ircore._signature_ext")
    except Exception as exc:  # a broken build must not break ircore
        return None, f"cannot load ircore._signature_ext: {type(exc).__name__}: {exc}"
    missing = [
        name for name in ("signature", "FastCall", "BlockBase", "request_key") if not hasattr(module, name)
    ]
    if missing:  # a build of older sources left in place
        return None, f"ircore._signature_ext lacks {', '.join(missing)}: reinstall ircore to rebuild it"
    return module, ""


_module, unavailable_reason = _load()
if _module is not None:
    signature, FastCall, BlockBase, request_key = (
        _module.signature,
        _module.FastCall,
        _module.BlockBase,
        _module.request_key,
    )


def spec_for(annotations: list[Any]) -> bytes | None:
    """The ``spec`` argument for parameters with these annotations; None if one has no kind."""
    kinds = {
        torch.Tensor: b"T",
        torch.Tensor | None: b"t",
        int: b"i",
        int | None: b"j",
        bool: b"b",
        float: b"f",
        float | None: b"g",
    }
    out = b""
    for ann in annotations:
        kind = kinds.get(ann)
        if kind is None:
            return None
        out += kind
    return out
