"""What happened to each discovered provider: a state and a one-line reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class ProviderState(str, Enum):
    ACTIVE = "active"
    DISABLED = "disabled"
    INCOMPATIBLE = "incompatible"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"
    INVALID = "invalid"
    CONFLICT = "conflict"

    def __str__(self) -> str:
        return self.value


# States that are a fault of the provider or its packaging: strict mode refuses them and
# ``ircore doctor`` exits 1 on them (``unavailable`` only where the configuration names it).
BROKEN_STATES = frozenset(
    {ProviderState.FAILED, ProviderState.INVALID, ProviderState.CONFLICT, ProviderState.INCOMPATIBLE}
)


@dataclass
class ProviderRecord:
    """One discovered provider: where it comes from, its state and why."""

    name: str
    distribution: str
    version: str
    module: str
    state: ProviderState = ProviderState.DISABLED
    reason: str = ""
    ops: tuple[str, ...] = ()
    imported: bool = False
    ranks: dict[str, int] = field(default_factory=dict)
    # op -> how its implementation was removed after registration (``IrOp.unregister_impl``)
    removed: dict[str, str] = field(default_factory=dict)
    # what does not stop it loading but is probably a mistake (a hook function left unmarked)
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = self.state.value
        out["ops"] = list(self.ops)
        out["warnings"] = list(self.warnings)
        return out
