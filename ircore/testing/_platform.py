"""Run providers as if on another platform: how an adapter is tested without its hardware.

A provider for hardware the test machine lacks (ROCm, an Intel GPU, Blackwell) is tested on the
CPU against a stand-in of its vendor library. Its platform check, its registration and its
ranks must then see the platform it was written for, while its predicates see CPU tensors:
``simulated_platform(kind="rocm", gcn_arch="gfx942")`` gives exactly that, through the same
``ircore.current_platform()`` that the core and the providers ask.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ircore import platform as _platform
from ircore.platform import Platform


def _reload_providers() -> None:
    from ircore.providers._manager import MANAGER

    MANAGER.reload()


@contextmanager
def simulated_platform(platform: Platform | None = None, /, **fields: Any) -> Iterator[Platform]:
    """Within the block, ircore and every provider run as if on ``platform``.

    Give a :class:`ircore.Platform`, or its fields as keywords: ``kind`` is required,
    ``device_type`` defaults to ``"cpu"`` (stand-ins compute on the CPU), ``device_name`` to
    ``"simulated"``, ``torch_version`` to the running torch; ``capability`` and ``gcn_arch`` as
    the provider under test reads them (``capability=(10, 0)``, ``gcn_arch="gfx942:sramecc+:xnack-"``).

    On entry and on exit every provider is forgotten and loaded again on next use, so platform
    checks, registrations and default ranks are decided against the platform in effect. The
    setting is process-wide (not per thread); blocks nest. Yields the simulated platform.

    Example::

        with ircore.testing.simulated_platform(kind="cuda", capability=(10, 0)):
            report = ircore.testing.check_provider("oink")
    """
    if platform is None:
        if "kind" not in fields:
            raise TypeError(
                "simulated_platform() needs a Platform or at least kind=... ('cuda', 'rocm', 'xpu', 'cpu')"
            )
        defaults = {
            "device_type": "cpu",
            "device_name": "simulated",
            "capability": None,
            "torch_version": torch.__version__,
            "device_count": 1,
        }
        platform = Platform(**{**defaults, **fields})
    elif fields:
        raise TypeError("simulated_platform() takes a Platform or keyword fields, not both")
    previous = _platform._simulated
    _platform.set_simulated_platform(platform)
    _reload_providers()
    try:
        yield platform
    finally:
        _platform.set_simulated_platform(previous)
        _reload_providers()
