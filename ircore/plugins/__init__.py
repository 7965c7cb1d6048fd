"""Providers: the contract (hookspecs), discovery, loading, states and configuration.

The loading machinery is imported on first need, so ``import ircore`` stays cheap.
"""

from __future__ import annotations

_ensure_loaded = None  # MANAGER.ensure_loaded, once the manager is imported


def ensure_loaded() -> None:
    """Discover and load providers as configuration allows (idempotent; called by dispatch)."""
    global _ensure_loaded
    if _ensure_loaded is None:
        from ircore.plugins.manager import MANAGER

        _ensure_loaded = MANAGER.ensure_loaded
    _ensure_loaded()


def discovered_names() -> set[str]:
    """Names of every discovered provider, whatever its state (for priority validation)."""
    from ircore.plugins.discovery import discover

    return {candidate.name for candidate in discover()}


def provider_status(name: str) -> str | None:
    """Why a known provider cannot run, or None if it is active or unknown."""
    import sys

    manager = sys.modules.get("ircore.plugins.manager")  # nothing loaded yet: nothing to say
    return None if manager is None else manager.MANAGER.status_of(name)


def settings_fingerprint() -> object:
    """The configured fusion switches, per source (compiled graphs depend on them); loads nothing."""
    import sys

    config = sys.modules.get("ircore.plugins.config")
    if config is None:
        return None
    manager = sys.modules.get("ircore.plugins.manager")
    settings = manager.MANAGER.settings if manager is not None else None
    sources = settings.sources if settings is not None else [config._API]
    return tuple(tuple(sorted(source.values.get("fusions", {}).items())) for source in sources)


def note_removed(op_name: str, provider: str, how: str) -> None:
    """An implementation was removed (``IrOp.unregister_impl``): the provider's record says so."""
    import sys

    manager = sys.modules.get("ircore.plugins.manager")  # nothing loaded yet: no record to update
    if manager is not None:
        manager.MANAGER.note_removed(op_name, provider, how)
