"""ircore: tensor ops declared by their semantics, dispatched to the best installed kernel.

Importing ircore imports no provider, touches no GPU and compiles nothing.
"""

from ircore import ops
from ircore.dispatch import Explanation, get_priority, priority, set_priority
from ircore.errors import (
    ConfigError,
    ImplRegistrationError,
    InvalidArgumentError,
    IrcoreError,
    OpDeclarationError,
    PriorityError,
    ProviderIsolationError,
    ProviderLoadError,
)
from ircore.op import Impl, IrOp, Sample, Tolerance, all_ops, get_op, register_op

__version__ = "0.1.0"

from ircore import _import_hook
from ircore import dispatch as _dispatch
from ircore import plugins as _plugins

_dispatch.STATE.loader = _plugins.ensure_loaded
_dispatch.STATE.discovered = _plugins.discovered_names
_dispatch.STATE.status_of = _plugins.provider_status
_dispatch.STATE.settings_fingerprint = _plugins.settings_fingerprint
_dispatch.STATE.note_removed = _plugins.note_removed

# DTensor sharding rules: registered when torch.distributed.tensor is imported (never by us).
_import_hook.call_after_import(
    "torch.distributed.tensor",
    "ircore.distributed:register_sharding_rules",
    "ircore ops called with a DTensor will fail with DTensor's 'no sharding strategy' error",
)

__all__ = [
    "API_VERSION",
    "ConfigError",
    "Explanation",
    "Impl",
    "ImplRegistrationError",
    "ImplSpec",
    "InvalidArgumentError",
    "IrOp",
    "IrcoreError",
    "OpDeclarationError",
    "Platform",
    "PriorityError",
    "ProviderIsolationError",
    "ProviderLoadError",
    "Sample",
    "Tolerance",
    "__version__",
    "all_ops",
    "compile",
    "configure",
    "current_platform",
    "explain",
    "get_op",
    "get_priority",
    "hookimpl",
    "hookspec",
    "impl_table",
    "ops",
    "priority",
    "register_op",
    "set_priority",
]


# Imported on first use, so that ``import ircore`` stays cheap (pluggy, tomllib, the platform probe).
_LAZY = {
    "API_VERSION": "ircore.plugins.hookspecs",
    "hookimpl": "ircore.plugins.hookspecs",
    "hookspec": "ircore.plugins.hookspecs",
    "configure": "ircore.plugins.config",
    "ImplSpec": "ircore.plugins.table",
    "impl_table": "ircore.plugins.table",
    "Platform": "ircore.platform",
    "current_platform": "ircore.platform",
}


def __getattr__(name: str) -> object:
    import importlib

    if name == "compile":  # a callable module: ircore.compile(model), ircore.compile.report()
        return importlib.import_module("ircore.compile")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ircore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | {"compile"})


def explain(op: "str | IrOp", *args: object, **kwargs: object) -> Explanation:
    """Which implementation a call of ``op`` with these arguments runs, and why not the others."""
    target = get_op(op) if isinstance(op, str) else op
    return target.explain(*args, **kwargs)
