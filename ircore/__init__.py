"""ircore: tensor ops declared by their semantics, dispatched to the best installed kernel.

Importing ircore imports no provider, touches no GPU and compiles nothing.
"""

from typing import TYPE_CHECKING, Any

from ircore import _import_hook, _state, providers

# Dispatch reaches the provider loader through this one interface (ircore._state.ProviderHost).
_state.STATE.providers = providers.HOST

from ircore import ops  # noqa: E402 - declares the op library, with the loader attached
from ircore._version import __version__  # noqa: E402
from ircore.dispatch import (  # noqa: E402
    Explanation,
    batch_invariant,
    get_priority,
    priority,
    set_priority,
    tracing_implementations,
)
from ircore.errors import (  # noqa: E402
    BatchInvariantError,
    ConfigError,
    DonatedInputError,
    ImplRegistrationError,
    InvalidArgumentError,
    IrcoreError,
    NoToleranceError,
    OpDeclarationError,
    PriorityError,
    ProviderError,
    ProviderIsolationError,
    ProviderLoadError,
    UnknownOpError,
)
from ircore.op import Impl, IrOp, Sample, Tolerance, all_ops, explain, get_op, register_op  # noqa: E402

# DTensor sharding rules: registered when torch.distributed.tensor is imported (never by us).
_import_hook.call_after_import(
    "torch.distributed.tensor",
    "ircore.distributed:register_sharding_rules",
    "ircore ops called with a DTensor will fail with DTensor's 'no sharding strategy' error",
)

__all__ = [
    "API_VERSION",
    "BatchInvariantError",
    "ConfigError",
    "DonatedInputError",
    "Explanation",
    "Impl",
    "ImplRegistrationError",
    "ImplSpec",
    "InvalidArgumentError",
    "IrOp",
    "IrcoreError",
    "NoToleranceError",
    "OpDeclarationError",
    "Platform",
    "PriorityError",
    "ProviderError",
    "ProviderIsolationError",
    "ProviderLoadError",
    "Sample",
    "Tolerance",
    "UnknownOpError",
    "__version__",
    "all_ops",
    "batch_invariant",
    "compile",
    "configure",
    "current_platform",
    "explain",
    "get_op",
    "get_priority",
    "hookimpl",
    "hookspec",
    "impl_table",
    "kit",
    "ops",
    "priority",
    "register_op",
    "set_priority",
    "tracing_implementations",
    "testing",
]


# Imported on first use, so that ``import ircore`` stays cheap (pluggy, tomllib, the platform probe).
_LAZY = {
    "API_VERSION": "ircore.providers.hookspecs",
    "hookimpl": "ircore.providers.hookspecs",
    "hookspec": "ircore.providers.hookspecs",
    "configure": "ircore.config",
    "ImplSpec": "ircore.providers._table",
    "impl_table": "ircore.providers._table",
    "Platform": "ircore.platform",
    "current_platform": "ircore.platform",
}
if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from ircore import compile, kit, testing
    from ircore.config import configure
    from ircore.platform import Platform, current_platform
    from ircore.providers._table import ImplSpec, impl_table
    from ircore.providers.hookspecs import API_VERSION, hookimpl, hookspec

# Subpackages reachable as attributes without importing them first (``ircore.testing.isolated``).
_SUBMODULES = ("compile", "config", "kit", "testing")


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SUBMODULES:  # ircore.compile is a callable module: ircore.compile(model)
        return importlib.import_module(f"ircore.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ircore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))

