"""Write per-op priorities into an ``ircore.toml`` that the normal config loading reads.

An existing file is read with the same parser as at load time (so a broken one is reported,
not overwritten); its other settings and the priorities of other ops are kept, the named ops'
priorities replaced. Comments are not kept: the file is written anew, with a header saying
where its priorities came from.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ircore.config import KNOWN_KEYS, read_file
from ircore.errors import ConfigError


def check_writable(path: Path) -> None:
    """Fail before measuring, not after: the file must be an ircore.toml-style file we may write."""
    if path.name == "pyproject.toml":
        raise ConfigError(
            f"{path}: ircore bench does not rewrite pyproject.toml; write an ircore.toml instead "
            "(it takes precedence over [tool.ircore])"
        )
    if path.exists():
        read_file(path)  # a broken file: its error now, with file and key
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{path}: not writable")
    elif not path.parent.is_dir():
        raise ConfigError(f"{path}: directory {path.parent} does not exist")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for these names and words
    return "[" + ", ".join(json.dumps(v) for v in value) + "]"


_TABLES = ("priority", "fusions")  # keys whose parsed value is a mapping, written as a TOML table


def render(values: Mapping[str, Any], note: str = "") -> str:
    """TOML text for parsed config values (every key of :data:`~ircore.config.KNOWN_KEYS`), which
    the normal config loading reads back as the same values."""
    lines = [f"# {line}" for line in textwrap.wrap(note, 96)]
    plain = [key for key in KNOWN_KEYS if key in values and key not in _TABLES]
    lines += [f"{key} = {_toml_value(values[key])}" for key in plain]
    # each fusion switched by name (a list would name the ones to run and switch the rest off)
    fusions = values.get("fusions") or {}
    if fusions:
        lines += ["", "[fusions]"]
        lines += [f"{name} = {_toml_value(bool(on))}" for name, on in sorted(fusions.items())]
    priority = values.get("priority") or {}
    if priority:
        lines += ["", "[priority]"]
        # op names are bare TOML keys; '*' (every op) must be quoted
        lines += [
            f"{op if op.isidentifier() else json.dumps(op)} = {_toml_value(names)}"
            for op, names in sorted(priority.items())
        ]
    return "\n".join(lines) + "\n"


def write_priority(path: Path, priority: Mapping[str, Sequence[str]], note: str = "") -> None:
    """Set ``priority`` for the given ops in the file at ``path`` (created if missing)."""
    check_writable(path)
    values: dict[str, Any] = dict(read_file(path).values) if path.exists() else {}
    values["priority"] = {
        **values.get("priority", {}),
        **{op: tuple(names) for op, names in priority.items()},
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(values, note), encoding="utf-8")
    tmp.replace(path)  # readers never see a half-written file
