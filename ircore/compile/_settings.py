"""Which fusions run: the ``fusions`` setting in its four sources, and a per-compile override."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ircore.errors import ConfigError

_ON = {"1", "on", "true", "yes"}
_OFF = {"0", "off", "false", "no"}


def fusion_names() -> tuple[str, ...]:
    from ircore.compile import FUSIONS

    return tuple(FUSIONS)


def normalize_fusions(value: Any, where: str) -> dict[str, bool]:
    """One fusion setting as ``{name: on}``; the names it does not mention are absent.

    Accepted: ``"all"``/``"none"``; a mapping name -> bool (``{"add_rms_norm": False}``); a
    string ``"add_rms_norm=off,rms_norm_reshape=on"``; a list of names to run (the others off).
    """
    names = fusion_names()
    if isinstance(value, str) and value.strip() in ("all", "none"):
        return dict.fromkeys(names, value.strip() == "all")
    if isinstance(value, str) and "=" in value:
        parsed: dict[str, Any] = {}
        for part in value.split(","):
            name, sep, switch = part.partition("=")
            if not sep or switch.strip().lower() not in _ON | _OFF:
                raise ConfigError(
                    f"{where}: cannot read {part.strip()!r}; expected NAME=on|off entries separated "
                    f"by ',', e.g. 'add_rms_norm=off'; fusions: {', '.join(names)}"
                )
            parsed[name.strip()] = switch.strip().lower() in _ON
        value = parsed
    if isinstance(value, Mapping):
        out: dict[str, bool] = {}
        for name, on in value.items():
            _check_name(name, where, names)
            if not isinstance(on, bool):
                raise ConfigError(f"{where}: fusion {name!r} must be true or false, got {on!r}")
            out[name] = on
        return out
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        for name in value:
            _check_name(name, where, names)
        return {name: name in value for name in names}
    raise ConfigError(
        f"{where}: expected 'all', 'none', a list of fusion names or a table of name = true/false, "
        f"got {value!r}; fusions: {', '.join(names)}"
    )


def _check_name(name: Any, where: str, names: tuple[str, ...]) -> None:
    if name not in names:
        raise ConfigError(f"{where}: unknown fusion {name!r}; fusions: {', '.join(names)}")


def effective_fusions(override: Any = None) -> dict[str, bool]:
    """Every fusion's switch: the override, then the highest configuration source naming it, then on."""
    from ircore import dispatch
    from ircore.plugins.manager import MANAGER

    dispatch.ensure_loaded()
    layers: list[dict[str, bool]] = []
    if override is not None:
        layers.append(normalize_fusions(override, "ircore.compile(fusions=...)"))
    settings = MANAGER.settings
    if settings is not None:
        layers += [s.values["fusions"] for s in settings.sources if "fusions" in s.values]
    out = {}
    for name in fusion_names():
        out[name] = next((layer[name] for layer in layers if name in layer), True)
    return out
