"""What happened to each discovered provider: a state and a one-line reason."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import pluggy

from ircore.errors import raised_at


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


# Frames in these are not where a provider's failure is: the loader's, pluggy's, importlib's.
_IGNORED_DIRS = tuple(
    os.path.dirname(p) + os.sep for p in (os.path.dirname(__file__), pluggy.__file__, importlib.__file__)
)


def describe_failure(exc: BaseException, during: str) -> str:
    """A failed provider's reason: the exception, its message's first line, where (the deepest
    frame outside ircore, pluggy and importlib: the provider's) and when."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    where = raised_at(exc.__traceback__, _IGNORED_DIRS) or "?"
    return f"{type(exc).__name__}: {message} (at {where}, {during})"


def records_by_name(
    candidates: Iterable[Any], records: dict[str, ProviderRecord]
) -> list[tuple[ProviderRecord, list[Any]]]:
    """Each distinct entry-point name's record (made on first sight, from its first candidate) with
    every candidate claiming that name, in name order."""
    by_name: dict[str, list[Any]] = {}
    for cand in candidates:
        by_name.setdefault(cand.name, []).append(cand)
    out = []
    for name in sorted(by_name):
        first = by_name[name][0]
        record = records.get(name)
        if record is None:
            record = records[name] = ProviderRecord(name, first.distribution, first.version, first.module)
        out.append((record, by_name[name]))
    return out
