"""The provider kit: everything a provider author imports, in one module.

A provider is kernels, predicates and one table row per op::

    import ircore.kit as kit

    IRCORE_IMPLEMENTATIONS = kit.impl_table("ircore_myprov.impls", ["rms_norm"], rank=50)

    @kit.hookimpl
    def ircore_check_platform(platform: kit.Platform) -> str | None:
        return None if platform.kind == "cuda" else f"needs an NVIDIA GPU; found {platform.describe()}"

What is here: the hook marker and the contract's version (:mod:`ircore.providers.hookspecs`);
the table (:class:`ImplSpec`, :func:`impl_table`) and the :class:`Registrar` for hook-based
registration; :class:`Platform`; predicates from ready-made pieces that read only the call
signature (:func:`supports` with :func:`device`, :func:`dtype`, :func:`same_dtype`,
:func:`contiguous`, :func:`unit_stride`, :func:`ndim`, :func:`last_dim`, :func:`is_none`,
:func:`not_none`, :func:`value`); the helpers for adapting a vendor's kernel library
(:func:`import_vendor`, :func:`call_form_problem`, :func:`torch_op`,
:func:`register_device_kernel`, :func:`unit_weight`); the first-use C++/CUDA build
(:func:`build_extension`, :class:`BuildError`, :func:`cache_root`, :func:`sources_digest`,
:func:`resolve_cuda_home`, :func:`cuda_arch_flags`, :func:`device_capabilities`); and the stand-in
test harness (:func:`simulated_platform`, :func:`simulated_active`, :func:`install_standins`,
imported on first use). docs/writing-a-provider.md is the guide.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ircore._build import (
    BuildError,
    build_extension,
    cache_root,
    cuda_arch_flags,
    device_capabilities,
    resolve_cuda_home,
    sources_digest,
)
from ircore.platform import Platform, current_platform
from ircore.providers._predicates import (
    Piece,
    contiguous,
    device,
    dtype,
    is_none,
    last_dim,
    ndim,
    not_none,
    same_dtype,
    supports,
    unit_stride,
    value,
)
from ircore.providers._records import ProviderState
from ircore.providers._registrar import Registrar
from ircore.providers._table import ImplSpec, impl_table
from ircore.providers._vendor import (
    call_form_problem,
    import_vendor,
    parameters_of,
    register_device_kernel,
    torch_op,
    unit_weight,
)
from ircore.providers.hookspecs import API_VERSION, hookimpl, hookspec

__all__ = [
    "API_VERSION",
    "BuildError",
    "ImplSpec",
    "Piece",
    "Platform",
    "ProviderState",
    "Registrar",
    "build_extension",
    "cache_root",
    "call_form_problem",
    "contiguous",
    "cuda_arch_flags",
    "current_platform",
    "device",
    "device_capabilities",
    "dtype",
    "hookimpl",
    "hookspec",
    "impl_table",
    "import_vendor",
    "install_standins",
    "is_none",
    "last_dim",
    "ndim",
    "not_none",
    "parameters_of",
    "register_device_kernel",
    "resolve_cuda_home",
    "same_dtype",
    "simulated_active",
    "simulated_platform",
    "sources_digest",
    "supports",
    "torch_op",
    "unit_stride",
    "unit_weight",
    "value",
]


def simulated_platform(
    platform: Platform | None = None, /, **fields: Any
) -> AbstractContextManager[Platform]:
    """Run ircore and every provider as if on another platform: :func:`ircore.testing.simulated_platform`."""
    from ircore import testing  # the testing package, on first use

    return testing.simulated_platform(platform, **fields)


def simulated_active(
    provider: str, platform: Platform | None = None, /, **fields: Any
) -> AbstractContextManager[Platform]:
    """As :func:`simulated_platform`, with ``provider`` loaded and active (``ircore.testing``)."""
    from ircore import testing

    return testing.simulated_active(provider, platform, **fields)


def install_standins(folder: str | Path, target: str | Path) -> Path:
    """Install a folder of stand-in vendor packages: :func:`ircore.testing.install_standins`."""
    from ircore import testing

    return testing.install_standins(folder, target)
