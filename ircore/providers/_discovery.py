"""Finding providers and op libraries from installed distribution metadata, importing none of them."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

from ircore._validation import NAME_PATTERN, RESERVED_PROVIDER_NAMES
from ircore.providers._records import ProviderState

ENTRY_POINT_GROUP = "ircore.providers"
#: Distributions that declare ops of their own name a module here (loaded before providers).
OPS_ENTRY_POINT_GROUP = "ircore.ops"
_MODULE_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class Candidate:
    """An entry point (``ircore.providers`` or ``ircore.ops``) and the distribution declaring it."""

    name: str
    module: str
    distribution: str
    version: str
    requires: tuple[str, ...]


@functools.lru_cache(maxsize=4)
def discover(group: str = ENTRY_POINT_GROUP) -> tuple[Candidate, ...]:
    """Every entry point of ``group`` (providers by default) in every installed distribution.

    Reads metadata only; cached for the life of the process (``discover.cache_clear()`` rescans).
    """
    found: list[Candidate] = []
    for ep in metadata.entry_points(group=group):
        # One read of the METADATA file per distribution: its `version` and `requires` properties
        # would each parse it again (~0.1 ms a time, more than the entry-point scan for 10).
        meta = ep.dist.metadata if ep.dist is not None else None
        found.append(
            Candidate(
                name=ep.name,
                module=ep.value,
                distribution=meta["Name"] if meta is not None else "?",
                version=meta["Version"] if meta is not None else "?",
                requires=tuple(meta.get_all("Requires-Dist") or ()) if meta is not None else (),
            )
        )
    return tuple(found)


def incompatibility(candidate: Candidate, core_version: str) -> str | None:
    """Why the candidate's ``Requires-Dist: ircore ...`` excludes this core, or None if it doesn't."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    for line in candidate.requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "ircore":
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if not req.specifier.contains(Version(core_version), prereleases=True):
            return (
                f"{candidate.distribution} {candidate.version} requires ircore{req.specifier} "
                f"but ircore {core_version} is running; install a {candidate.distribution} "
                f"release made for ircore {core_version}"
            )
    return None


def name_problem(name: str, kind: str = "provider") -> str | None:
    """Why an entry point's name cannot be a provider's (or an op library's) name, or None."""
    if not NAME_PATTERN.fullmatch(name):
        return f"entry point name {name!r} is not a valid {kind} name (must match {NAME_PATTERN.pattern})"
    if name in RESERVED_PROVIDER_NAMES:
        return f"entry point name {name!r} is reserved (reserved: {sorted(RESERVED_PROVIDER_NAMES)})"
    return None


def refusal(
    name: str, candidates: Sequence[Candidate], core_version: str, kind: str = "provider"
) -> tuple[ProviderState, str] | None:
    """Why the entry points named ``name`` must not be imported, as a state and a reason, or None:
    two distributions claim the name, the name is not valid, the distribution's ``ircore``
    requirement excludes this core, or the value is not a module. Read from metadata alone."""
    if len(candidates) > 1:
        dists = " and ".join(f"{c.distribution} {c.version}" for c in candidates)
        return ProviderState.CONFLICT, f"{kind} name {name!r} is claimed by {dists}; uninstall one of them"
    problem = name_problem(name, kind)
    if problem:
        return ProviderState.INVALID, problem
    excluded = incompatibility(candidates[0], core_version)
    if excluded:
        return ProviderState.INCOMPATIBLE, excluded
    bad_value = value_problem(candidates[0].module, kind)
    if bad_value:
        return ProviderState.INVALID, bad_value
    return None


#: what ircore does with the module an entry point names, by the kind of distribution
_WHAT_IMPORT_DOES = {
    "provider": "reads its hooks or its IRCORE_IMPLEMENTATIONS table",
    "op library": "lets its import declare the ops (ircore.register_op)",
}


def value_problem(value: str, kind: str = "provider") -> str | None:
    """Why an entry point's value cannot name a provider's (or an op library's) module, or None.

    The value is the module ircore imports (and, for a provider, reads hooks or a table from):
    ``pkg.provider``, never ``pkg.provider:attr`` (an attribute would be ignored).
    """
    module, sep, attr = value.partition(":")
    module, attr = module.strip(), attr.strip()
    if sep:
        # nothing of the distribution is imported here, so whether ``attr`` is a submodule is not
        # known: both readings are offered, the submodule first (the usual slip: pkg:provider)
        write = repr(module)
        if attr.isidentifier():
            write = f"{f'{module}.{attr}'!r} if {attr!r} is a module of {module!r}, else {write}"
        return (
            f"entry point value {value!r} must be a module, not a module:attribute reference: write "
            f"{write} (pkg.provider, not pkg.provider:attr); ircore imports that module and "
            f"{_WHAT_IMPORT_DOES[kind]}"
        )
    if not _MODULE_PATH.match(module):
        return (
            f"entry point value {value!r} is not a module name (expected a dotted module path, "
            "e.g. pkg.provider)"
        )
    return None
