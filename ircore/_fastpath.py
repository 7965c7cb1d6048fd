"""The eager call of an op, generated with the op's exact signature.

Why generate: a generic ``__call__(self, *args, **kwargs)`` pays for packing, counting and
completing the argument tuple, and for unpacking it into the check, each predicate and the
implementation. A function with the native signature lets Python bind arguments (keywords and
defaults included) at C speed and passes them on by name. The same technique as ``dataclasses``
and ``attrs``; the template below is the whole of it.

What the generated function does, in order: under Dynamo, ``make_fx`` or any dispatch mode (and
for tensor subclasses) it calls ``torch.ops.ircore.<op>`` so the graph records the op; otherwise
it validates the arguments, takes the cached plan (see ``ircore.dispatch``), runs the first
implementation whose ``supports_args`` accepts the call, and says which at DEBUG.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ircore import dispatch

if TYPE_CHECKING:
    from ircore.op import IrOp

_TEMPLATE = """
def __call__(_ir_self, {params}):
    if _ir_is_compiling() or _ir_dispatch_stack_len() or type({first}) is not _ir_Tensor:
        return _ir_self.torch_op({args})
    _ir_self.check_args({args})
    _ir_scope = _ir_SCOPE.get()
    if _ir_scope is None or _ir_name not in _ir_scope.priorities:
        _ir_plan = _ir_self._plan
        if _ir_plan[0] is not _ir_STATE.generation:
            _ir_plan = _ir_refresh_plan(_ir_self)
    else:
        _ir_plan = _ir_scoped_plan(_ir_self, _ir_scope)
    try:
        for _ir_entry in _ir_plan[1]:
            _ir_pred = _ir_entry[3]
            if _ir_pred is None or _ir_pred({args}):
                break
    except Exception:  # a predicate raised: the careful path reports it and skips that one
        return _ir_call_first_supported(_ir_name, _ir_plan[1], ({args},), 1)
    if _ir_log_enabled(10):
        _ir_log.debug("%s: running %s", _ir_name, _ir_entry[0])
    try:
        return _ir_entry[1]({args})
    except Exception as _ir_exc:
        _ir_note_failure(_ir_name, _ir_entry[0], _ir_exc)
        raise
"""

_log = logging.getLogger("ircore")


def build_eager_call(op: IrOp) -> Callable[..., Any]:
    """``__call__`` for ``op``'s class: the native signature, the dispatch described above."""
    params = list(op.signature.parameters.values())
    names = [p.name for p in params]
    if any(name.startswith("_ir_") for name in names):  # cannot happen for declared ops
        raise ValueError(f"op {op.name!r}: parameter names may not start with '_ir_'")
    source = _TEMPLATE.format(
        params=", ".join(names), first=names[0], args=", ".join(names)
    )
    namespace: dict[str, Any] = {
        "_ir_is_compiling": torch.compiler.is_compiling,
        "_ir_dispatch_stack_len": torch._C._len_torch_dispatch_stack,
        "_ir_Tensor": torch.Tensor,
        "_ir_SCOPE": dispatch.SCOPE,
        "_ir_STATE": dispatch.STATE,
        "_ir_name": op.name,
        "_ir_refresh_plan": dispatch.refresh_plan,
        "_ir_scoped_plan": dispatch.scoped_plan,
        "_ir_call_first_supported": dispatch.call_first_supported,
        "_ir_note_failure": dispatch.note_failure,
        "_ir_log": _log,
        "_ir_log_enabled": _log.isEnabledFor,
    }
    code = compile(source, f"<ircore eager call of {op.name}>", "exec")
    exec(code, namespace)
    call = namespace["__call__"]
    defaults = tuple(p.default for p in params if p.default is not inspect.Parameter.empty)
    call.__defaults__ = defaults or None
    call.__qualname__ = f"IrOp[{op.name}].__call__"
    call.__doc__ = op.native.__doc__
    return call
