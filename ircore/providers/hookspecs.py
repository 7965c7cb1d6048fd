"""The provider contract, API version 1: the three hooks a provider module implements.

A provider is a distribution with an entry point in the group ``ircore.providers``; the entry
point's name is the provider's name and its value is a module holding functions marked with
:data:`hookimpl`. Every hook is optional except ``ircore_register``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ircore.platform import Platform
    from ircore.providers._registrar import Registrar

PROJECT_NAME = "ircore"
API_VERSION = 1

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def ircore_check_platform(platform: Platform) -> str | None:
    """Say whether this provider can run on ``platform``.

    Return ``None`` when it can, or a one-line reason when it cannot, naming what it needs and
    what it found (``"needs ROCm and the aiter package; found CUDA sm_90 (NVIDIA H200)"``).
    The provider is then ``unavailable`` and its ``ircore_register`` is never called.
    Without this hook a provider is taken to run everywhere.
    """


@hookspec
def ircore_register(registrar: Registrar, platform: Platform) -> None:
    """Register implementations with ``registrar.register(op, fn, supports_args=None, inplace=False)``.

    ``fn`` must have exactly the native function's signature; ``supports_args`` (same
    parameters, returns bool) says which calls ``fn`` handles, anything else falls through to the
    next provider. It runs on every eager call, and only on arguments that passed the op's own
    check (dtype, shapes, devices), so it tests just what the kernel adds. Registration is
    all-or-nothing: if any one is rejected, none is kept. A provider registers only through
    ``registrar``: its import and hooks may not call ``register_impl``, ``unregister_impl``,
    ``ircore.set_priority`` or ``ircore.configure`` (``ircore.ProviderIsolationError``; the
    provider is then ``invalid``).
    """


@hookspec(firstresult=True)
def ircore_default_priority(platform: Platform) -> dict[str, int] | None:
    """Suggest a rank per op on ``platform``: lower runs first (0 is the most preferred).

    Ops left out get rank 100. The user's explicit priority lists always override this.
    """
