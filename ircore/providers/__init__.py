"""Providers: finding them, loading them, and the states they end in.

``hookspecs`` is the contract providers implement (re-exported, with everything else a provider
author needs, by :mod:`ircore.kit`); the rest is private machinery. :data:`HOST` is how dispatch
reaches it (``ircore._state.ProviderHost``): the manager behind it is imported on first use, so
``import ircore`` stays cheap (pluggy, tomllib, entry-point scans).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["HOST"]


class _Host:
    """The loader as dispatch sees it: load on first need; say what is installed and why not."""

    def ensure_loaded(self) -> None:
        from ircore.providers._manager import MANAGER

        # Later calls go straight to the manager (one object for the process: tests restore its
        # state in place): the import statement costs more than the check it guards.
        self.ensure_loaded = MANAGER.ensure_loaded  # type: ignore[method-assign]
        MANAGER.ensure_loaded()

    def discovered(self) -> frozenset[str]:
        from ircore.providers._discovery import discover

        return frozenset(candidate.name for candidate in discover())

    def status_of(self, name: str) -> str | None:
        manager = sys.modules.get("ircore.providers._manager")  # nothing loaded yet: nothing to say
        return None if manager is None else manager.MANAGER.status_of(name)

    def matmul_layer(self, attribute: str) -> tuple[str, Any] | tuple[None, str]:
        from ircore.providers._manager import MANAGER
        from ircore.providers._table import resolve

        MANAGER.ensure_loaded()
        for name, record in sorted(MANAGER.records.items()):
            module = sys.modules.get(record.module) if record.state.value == "active" else None
            ref = getattr(module, attribute, None)
            if ref is not None:
                return name, resolve(ref, name, "aten::mm", attribute)
        why = f"no active provider offers one (a provider module's {attribute}; the triton provider does)"
        return None, why


HOST = _Host()
