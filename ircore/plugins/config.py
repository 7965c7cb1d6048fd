"""Configuration from the Python API (more sources arrive with the plugin system)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ircore.dispatch import set_priority


def configure(*, priority: Mapping[str, Sequence[str] | None] | None = None) -> None:
    """Set configuration from Python; it outranks the environment and config files."""
    if priority is not None:
        set_priority(priority)
