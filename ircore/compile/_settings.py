"""Which fusions run: the ``fusions`` setting in its four sources, and a per-compile override."""

from __future__ import annotations

from typing import Any

from ircore import config, dispatch
from ircore.config import FUSIONS, normalize_fusions
from ircore.providers._manager import MANAGER


def effective_fusions(override: Any = None) -> dict[str, bool]:
    """Every fusion's switch: the override, then the highest configuration source naming it, then on."""
    dispatch.ensure_loaded()
    layers: list[dict[str, bool]] = []
    if override is not None:
        layers.append(normalize_fusions(override, "ircore.compile(fusions=...)"))
    layers += config.fusion_layers(MANAGER.settings)
    return {name: next((layer[name] for layer in layers if name in layer), True) for name in FUSIONS}
