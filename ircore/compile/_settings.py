"""Which fusions run (the ``fusions`` setting in its four sources, and a per-compile override), and
which small calls a compile leaves to Inductor (``leave_to_inductor``, per compile)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ircore import config, dispatch
from ircore.config import FUSIONS, normalize_fusions
from ircore.errors import ConfigError
from ircore.op import all_ops
from ircore.providers._manager import MANAGER


def effective_fusions(override: Any = None) -> dict[str, bool]:
    """Every fusion's switch: the override, then the highest configuration source naming it, then on."""
    dispatch.ensure_loaded()
    layers: list[dict[str, bool]] = []
    if override is not None:
        layers.append(normalize_fusions(override, "ircore.compile(fusions=...)"))
    layers += config.fusion_layers(MANAGER.settings)
    return {name: next((layer[name] for layer in layers if name in layer), True) for name in FUSIONS}


def normalize_leave_to_inductor(value: Any, where: str) -> dict[str, int]:
    """``{op name: element count}``, checked: known ops, counts that are ints >= 0."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping of op name -> element count, got {value!r}")
    dispatch.ensure_loaded()
    known = all_ops()
    out: dict[str, int] = {}
    for name, limit in value.items():
        if name not in known:
            raise ConfigError(f"{where}: unknown op {name!r}; ops: {', '.join(sorted(known))}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(
                f"{where}: {name!r} needs an element count (an int >= 0), got {limit!r}: "
                f"a call whose largest tensor has at most that many elements is left to Inductor"
            )
        out[name] = limit
    return out
