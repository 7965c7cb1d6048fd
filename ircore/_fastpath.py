"""The eager call of an op, generated with the op's exact signature.

Why generate: a generic ``__call__(self, *args, **kwargs)`` pays for packing, counting and
completing the argument tuple, and for unpacking it into the check, each predicate and the
implementation. A function with the native signature lets Python bind arguments (keywords and
defaults included) at C speed and passes them on by name. The same technique as ``dataclasses``
and ``attrs``; the template below is the whole of it.

What the generated function does, in order: under Dynamo, ``make_fx`` or any dispatch mode (and
for tensor subclasses, or a first argument that is no tensor) it checks the argument types and
calls ``torch.ops.ircore.<op>`` so the graph records the op; otherwise it validates the
arguments, takes the cached plan (``dispatch.plan_for``), runs the first implementation whose
``supports_args`` accepts the call (the walk of ``dispatch.first_supported``, inlined here because
a call of it would cost ~0.4 us on this path; native when grad mode is on and an argument
requires grad: ``IrOp.wants_grad``), and says which at DEBUG.

Under Dynamo the function also reads ``STATE.version`` (:mod:`ircore._state`), an int fingerprint
of every priority, configuration and provider setting: Dynamo guards on the int's value, so a
function compiled before a change recompiles (and is lowered again) on its next call, and one
compiled for a configuration that comes back is reused. Providers are loaded first (at trace
time, through ``assume_constant_result``), or loading them on the first run would change the
version and cost a second compile.

Signature cache: for ops declared ``cache_by_signature`` (and when the compiled helper of
``ircore._signature`` is loaded) a block in front of that looks the call's signature up in
``op.signature_cache`` (or in the plan of the priority scope that names the op) and calls the
remembered implementation directly: no Python-level argument check and no predicate, which is
most of the cost above (benchmarks/README.md). The hit is one C call (``FastCall``,
ircore/csrc/fast_call.cpp), and so is the start of a miss: having computed the signature and
found the table, the fast call calls ``dispatch.choose_and_cache`` (which validates, chooses,
remembers the choice and runs it) with the plan that decides the call, instead of returning for
Python to find both again. Anything it leaves to Python (DEBUG logging on a remembered call, a
stale scoped plan, a fast call built without a miss handler) runs the same steps in Python,
and a call the helper declines (dispatch modes, subclasses, signature None) goes on to the
path above.
"""

from __future__ import annotations

import inspect
import linecache
import logging
from collections.abc import Callable
from typing import Any, Protocol

import torch

from ircore import _import_hook, _signature, _traced, dispatch
from ircore._argtypes import QuickTest
from ircore._state import SCOPE, STATE
from ircore.errors import CONTAINED


class EagerOp(dispatch.OpLike, Protocol):
    """What the eager call is generated from (:class:`ircore.IrOp`)."""

    quick_test: QuickTest

    native: Callable[..., Any]
    signature: inspect.Signature
    signature_spec: bytes | None
    tensor_indices: tuple[int, ...]


# Under Dynamo the first test is constant-folded to True, so Dynamo never traces the C helper.
_SIGNATURE_BLOCK = """
    if not _ir_is_dynamo_compiling():
        _ir_result = _ir_fast({args})
        if _ir_result is not _ir_MISS:
            return _ir_result
        _ir_key = _ir_signature(_ir_spec, {args})
        if _ir_key is not None:
            _ir_scope = _ir_SCOPE.get()
            if _ir_scope is not None and _ir_name in _ir_scope.priorities:
                _ir_plan = _ir_plan_for(_ir_self, _ir_scope)
                _ir_entry = _ir_plan[2].get(_ir_key)
                if _ir_entry is None:
                    return _ir_choose_and_cache(_ir_self, _ir_key, ({args},), _ir_plan)
            else:
                _ir_entry = _ir_cache_get(_ir_key)
                if _ir_entry is None:
                    return _ir_choose_and_cache(_ir_self, _ir_key, ({args},))
            if _ir_log_enabled(10):
                _ir_log.debug("%s: running %s", _ir_name, _ir_entry[0])
            try:
                return _ir_entry[1]({args})
            except BaseException as _ir_exc:
                _ir_failure = _ir_note_failure(_ir_name, _ir_entry[0], _ir_exc)
                if _ir_failure is not None:
                    raise _ir_failure from _ir_exc
                raise
"""

_TEMPLATE = """
def __call__(_ir_self, {params}):{signature_block}
    if _ir_is_compiling() or _ir_dispatch_stack_len() or type({first}) is not _ir_Tensor:
        if _ir_is_dynamo_compiling() and _ir_providers_loaded() and _ir_STATE.version < 0:
            pass  # never true; read so that Dynamo guards on the version (see the docstring)
        return _ir_self.call_torch_op({args})
    # check_args, inlined: the annotations' quick test (ircore._argtypes.QuickTest), the careful
    # checks only where it fails, then the op's own check
    try:
        _ir_ok = {quick_test}
    except Exception:
        _ir_ok = False
    if not _ir_ok:
        _ir_self.check_annotations({args})
    _ir_self.check_declared({args})
    _ir_scope = _ir_SCOPE.get()
    if _ir_scope is None or _ir_name not in _ir_scope.priorities:
        _ir_plan = _ir_self._plan
        if _ir_plan[0] is not _ir_STATE.generation:
            _ir_plan = _ir_plan_for(_ir_self, None)
    else:
        _ir_plan = _ir_plan_for(_ir_self, _ir_scope)
    # dispatch.first_supported's walk, inlined (a call of it costs ~0.4 us here); a predicate that
    # raises goes to it, which reports it and skips that entry. A differentiable call gets native.
    if _ir_grad_enabled() and ({requires_grad}):
        _ir_entry = _ir_plan[1][-1]
    else:
        try:
            for _ir_entry in _ir_plan[1]:
                _ir_pred = _ir_entry[3]
                if _ir_pred is None or _ir_pred({args}):
                    break
        except _ir_CONTAINED:
            _ir_entry = _ir_first(_ir_name, _ir_plan[1], ({args},))[0]
    if _ir_log_enabled(10):
        _ir_log.debug("%s: running %s", _ir_name, _ir_entry[0])
    try:
        return _ir_entry[1]({args})
    except BaseException as _ir_exc:
        _ir_failure = _ir_note_failure(_ir_name, _ir_entry[0], _ir_exc)
        if _ir_failure is not None:
            raise _ir_failure from _ir_exc
        raise
"""

_log = logging.getLogger("ircore")
# logging.Logger caches isEnabledFor answers in ``_cache`` (cleared in place on level changes).
# Where it says False, isEnabledFor would too; anything else (not yet cached, True, a Python
# without that dict) asks isEnabledFor: the fast call leaves such calls to the Python path.
_log_cache = getattr(_log, "_cache", None) if isinstance(getattr(_log, "_cache", None), dict) else None
# What the fast call returns when the Python path must decide (never an implementation's result).
_MISS = object()
# Cheaper than is_compiling (one call, no is_scripting), and folded to True by Dynamo.
_is_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


def providers_loaded() -> bool:
    """Load providers now, while Dynamo traces (it runs this for real and keeps the result); and
    give every op the entries a traced call chooses from (``trace_implementations``): those of
    its process-wide plan and of its batch-invariant plan (``IrOp.traced_entries``), so that the
    traced call reads them without taking a lock."""
    dispatch.ensure_loaded()
    if STATE.tracing_implementations:
        for op in list(STATE.ops.values()):
            op.traced_entries = (dispatch.plan_for(op, None).entries, dispatch.invariant_plan(op).entries)
    return True


def mark_providers_loaded_constant() -> None:
    """``assume_constant_result`` on :func:`providers_loaded` (it marks the function in place).

    Applied when ``torch._dynamo`` is imported, which precedes any tracing: the decorator
    imports Dynamo, and with it sympy and ``torch.distributed.tensor``, which at ``import
    ircore`` would cost about a second.
    """
    torch.compiler.assume_constant_result(providers_loaded)
    torch.compiler.assume_constant_result(_traced.record)  # counted once per trace, not per run


_import_hook.call_after_import(
    "torch._dynamo",
    "ircore._fastpath:mark_providers_loaded_constant",
    "a function compiled before providers are loaded may compile twice",
)


def make_fast_call(
    op: EagerOp, choose: Callable[..., Any] | None = dispatch.choose_and_cache
) -> Callable[..., Any]:
    """``op``'s ``FastCall`` (ircore/csrc/fast_call.cpp), which the eager call tries first.

    ``choose`` is what it calls on a signature miss; None makes it return ``_MISS`` instead, so
    the eager call's Python path handles the miss (as when the helper declines): tests build one
    to exercise that fallback. Needs the helper (``_signature.FastCall``) and a signature spec.
    """
    assert _signature.FastCall is not None and op.signature_spec is not None
    return _signature.FastCall(
        op.signature_spec,
        op.signature_cache,
        SCOPE,
        op.name,
        _log_cache,
        dispatch.note_failure,
        _MISS,
        op,
        choose,
    )


def make_call_script(op: EagerOp) -> tuple[str, dict[str, Any]]:
    """The source of ``op``'s eager ``__call__`` and the globals it runs with."""
    params = list(op.signature.parameters.values())
    names = [p.name for p in params]
    if any(name.startswith("_ir_") for name in names):  # cannot happen for declared ops
        raise ValueError(f"op {op.name!r}: parameter names may not start with '_ir_'")
    args = ", ".join(names)
    use_signature = op.signature_spec is not None and None not in (_signature.signature, _signature.FastCall)
    # IrOp.wants_grad, inlined: checked arguments, so each is a tensor or None
    requires_grad = " or ".join(
        f"({names[i]} is not None and {names[i]}.requires_grad)" for i in op.tensor_indices
    )
    source = _TEMPLATE.format(
        params=args,
        first=names[0],
        args=args,
        requires_grad=requires_grad or "False",
        quick_test=op.quick_test.source,
        signature_block=_SIGNATURE_BLOCK.format(args=args).rstrip("\n") if use_signature else "",
    )
    namespace: dict[str, Any] = {
        **op.quick_test.namespace,
        "_ir_fast": make_fast_call(op) if use_signature else None,
        "_ir_MISS": _MISS,
        "_ir_is_compiling": torch.compiler.is_compiling,
        "_ir_is_dynamo_compiling": _is_dynamo_compiling,
        "_ir_providers_loaded": providers_loaded,
        "_ir_signature": _signature.signature,
        "_ir_spec": op.signature_spec,
        "_ir_choose_and_cache": dispatch.choose_and_cache,
        "_ir_cache_get": op.signature_cache.get,
        "_ir_dispatch_stack_len": torch._C._len_torch_dispatch_stack,
        "_ir_Tensor": torch.Tensor,
        "_ir_SCOPE": SCOPE,
        "_ir_STATE": STATE,
        "_ir_name": op.name,
        "_ir_plan_for": dispatch.plan_for,
        "_ir_first": dispatch.first_supported,
        "_ir_note_failure": dispatch.note_failure,
        "_ir_CONTAINED": CONTAINED,
        "_ir_log": _log,
        "_ir_log_enabled": _log.isEnabledFor,
        "_ir_grad_enabled": torch.is_grad_enabled,
    }
    return source, namespace


def compile_script(source: str, namespace: dict[str, Any], filename: str) -> dict[str, Any]:
    """Run ``source`` in ``namespace``, with its lines in :mod:`linecache` under ``filename``.

    So tracebacks and pdb show the generated lines. A name already taken by other source (an op
    declared again after its first declaration was undone) gets a numbered suffix.
    """
    lines = source.splitlines(True)
    base, count = filename, 1
    while True:
        cached = linecache.cache.setdefault(filename, (len(source), None, lines, filename))
        if len(cached) == 4 and cached[2] == lines:
            break
        filename = f"{base[:-1]}-{count}>"
        count += 1
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def build_eager_call(op: EagerOp) -> Callable[..., Any]:
    """``__call__`` for ``op``'s class: the native signature, the dispatch described above."""
    source, namespace = make_call_script(op)
    call: Callable[..., Any] = compile_script(source, namespace, f"<ircore eager call of {op.name}>")[
        "__call__"
    ]
    defaults = tuple(
        p.default for p in op.signature.parameters.values() if p.default is not inspect.Parameter.empty
    )
    call.__defaults__ = defaults or None
    call.__qualname__ = f"IrOp[{op.name}].__call__"
    call.__doc__ = op.native.__doc__
    return call
