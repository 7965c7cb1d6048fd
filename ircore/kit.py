"""The provider kit: everything a provider author imports, in one module.

A provider is kernels, predicates and one table row per op::

    import ircore.kit as kit

    IRCORE_IMPLEMENTATIONS = kit.impl_table("ircore_myprov.impls", ["rms_norm"], rank=50)

    @kit.hookimpl
    def ircore_check_platform(platform: kit.Platform) -> str | None:
        return None if platform.kind == "cuda" else f"needs an NVIDIA GPU; found {platform.describe()}"

What is here: the hook marker and the contract's version (:mod:`ircore.providers.hookspecs`),
the table (:class:`ImplSpec`, :func:`impl_table`) and the :class:`Registrar` for hook-based
registration, :class:`Platform`, the helpers for adapting a vendor's kernel library
(:func:`import_vendor`, :func:`call_form_problem`, :func:`torch_op`,
:func:`register_device_kernel`, :func:`unit_weight`), and the stand-in test harness
(:func:`simulated_platform`, imported on first use). docs/writing-a-provider.md is the guide.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from ircore.platform import Platform, current_platform
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
    "ImplSpec",
    "Platform",
    "ProviderState",
    "Registrar",
    "call_form_problem",
    "current_platform",
    "hookimpl",
    "hookspec",
    "impl_table",
    "import_vendor",
    "parameters_of",
    "register_device_kernel",
    "simulated_platform",
    "torch_op",
    "unit_weight",
]


def simulated_platform(
    platform: Platform | None = None, /, **fields: Any
) -> AbstractContextManager[Platform]:
    """Run ircore and every provider as if on another platform: :func:`ircore.testing.simulated_platform`."""
    from ircore.testing import simulated_platform as simulate  # the testing package, on first use

    return simulate(platform, **fields)
