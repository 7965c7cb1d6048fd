"""``ircore check-dist``: check a built wheel or sdist's metadata before it is published.

One set of checks for this repository's release tool (``tools/release.py``, which adds its own
pure-Python rule) and for any provider author's own artifacts. Each problem names the artifact
and the field, and says what to write instead:

- every distribution: ``Name``, ``Version``, ``Summary``, ``Requires-Python``, a readme (long
  description and its content type), a license and its license file (present in the artifact),
  classifiers including ``Programming Language :: Python :: 3``;
- a provider (an entry point in the group ``ircore.providers``): each entry point's name is a
  valid provider name (``^[a-z][a-z0-9_]*$``, not reserved) and its value a module
  (``pkg.provider``, not ``pkg.provider:attr``); ``Requires-Dist: ircore`` with both a lower and
  an upper bound, so that a future core with another provider API never loads it. An op library
  (group ``ircore.ops``) needs a module value and the same bounded requirement;
- any other distribution (but the core itself) declares no entry point ircore reads: it would
  never be loaded.
"""

from __future__ import annotations

import argparse
import configparser
import email.message
import email.parser
import json
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ircore._version import __version__
from ircore.errors import IrcoreError
from ircore.providers._discovery import (
    ENTRY_POINT_GROUP,
    OPS_ENTRY_POINT_GROUP,
    name_problem,
    value_problem,
)
from ircore.tools.common import EXIT_OK, EXIT_PROBLEMS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "CORE",
    "OPS_GROUP",
    "PROVIDER_GROUP",
    "Artifact",
    "artifact_problems",
    "build_policy_problems",
    "core_requirement_problems",
    "entry_point_problems",
    "metadata_problems",
    "read_artifact",
    "read_sdist",
    "read_wheel",
    "unbounded_core_requirement",
]

CORE = "ircore"
PROVIDER_GROUP = ENTRY_POINT_GROUP
#: Out-of-tree op libraries: a module that declares ops, loaded before providers.
OPS_GROUP = OPS_ENTRY_POINT_GROUP
COMPILED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib")
LOWER_OPS, UPPER_OPS = (">=", ">", "~=", "=="), ("<", "<=", "~=", "==")


def example_pin(core_version: str = __version__) -> str:
    """The range a provider made for ``core_version`` pins: ``ircore>=0.1,<0.2`` for 0.1.x."""
    release = Version(core_version).release
    major, minor = release[0], release[1] if len(release) > 1 else 0
    return f"{CORE}>={major}.{minor},<{major}.{minor + 1}"


def _pin_example() -> str:
    pin = example_pin()
    return f'Requires-Dist: {pin} (dependencies = ["{pin}"])'


@dataclass
class Artifact:
    """The parts of a built wheel or sdist the checks read."""

    path: Path
    metadata: email.message.Message
    names: list[str]
    #: the ``entry_points.txt`` text (INI: ``[group]`` then ``name = value`` lines)
    entry_points: str = ""
    kind: str = "wheel"  # or "sdist"

    @property
    def name(self) -> str:
        return canonicalize_name(self.metadata["Name"] or self.path.name)

    @property
    def requires(self) -> list[str]:
        return list(self.metadata.get_all("Requires-Dist") or [])

    def group(self, group: str) -> dict[str, str]:
        """``{entry point name: value}`` of one entry-point group."""
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
        try:
            parser.read_string(self.entry_points)
        except configparser.Error:
            return {}
        return dict(parser[group]) if parser.has_section(group) else {}

    @property
    def is_provider(self) -> bool:
        return bool(self.group(PROVIDER_GROUP))


# ---------------------------------------------------------------------- reading
def _parse_metadata(text: str) -> email.message.Message:
    return email.parser.Parser().parsestr(text)


def read_wheel(path: Path) -> Artifact:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        dist_info = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), None)
        if dist_info is None:
            raise IrcoreError(f"{path}: not a wheel (no .dist-info folder)")
        metadata = _parse_metadata(zf.read(f"{dist_info}/METADATA").decode())
        ep_name = f"{dist_info}/entry_points.txt"
        entry_points = zf.read(ep_name).decode() if ep_name in names else ""
    return Artifact(path, metadata, names, entry_points, "wheel")


def _pyproject(text: str) -> dict[str, Any]:
    """The ``[project]`` table of a ``pyproject.toml`` (empty when it cannot be read)."""
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError:
        return {}
    return project if isinstance(project, dict) else {}


def _entry_points_from_pyproject(project: dict[str, Any]) -> str:
    """``[project.entry-points]`` of a ``pyproject.toml``, as ``entry_points.txt`` text."""
    groups = project.get("entry-points", {})
    lines = []
    for group, entries in groups.items():
        if isinstance(entries, dict):
            lines += [f"[{group}]", *(f"{name} = {value}" for name, value in entries.items()), ""]
    return "\n".join(lines)


def read_sdist(path: Path) -> Artifact:
    """An sdist's ``PKG-INFO``; entry points from its ``*.egg-info`` or its ``pyproject.toml``."""
    with tarfile.open(path) as tf:
        names = tf.getnames()

        def text(name: str) -> str:
            member = tf.extractfile(name)
            return member.read().decode() if member is not None else ""

        top = {n.split("/")[0] for n in names if n}
        root = next(iter(top)) if len(top) == 1 else ""
        pkg_info = f"{root}/PKG-INFO"
        if pkg_info not in names:
            raise IrcoreError(f"{path}: not an sdist (no {pkg_info or 'PKG-INFO'} at its top)")
        metadata = _parse_metadata(text(pkg_info))
        project = _pyproject(text(f"{root}/pyproject.toml")) if f"{root}/pyproject.toml" in names else {}
        egg = [n for n in names if n.count("/") == 2 and n.endswith(".egg-info/entry_points.txt")]
        entry_points = text(egg[0]) if egg else _entry_points_from_pyproject(project)
        dependencies = project.get("dependencies")
        if not metadata.get_all("Requires-Dist") and isinstance(dependencies, list):
            # PKG-INFO before metadata 2.2 may leave them out: the static list is what wheels get
            for requirement in dependencies:
                metadata["Requires-Dist"] = str(requirement)
    return Artifact(path, metadata, names, entry_points, "sdist")


def read_artifact(path: Path) -> Artifact:
    """A wheel (``.whl``) or an sdist (``.tar.gz``)."""
    try:
        if path.name.endswith(".whl"):
            return read_wheel(path)
        if path.name.endswith(".tar.gz"):
            return read_sdist(path)
    except (OSError, zipfile.BadZipFile, tarfile.TarError, KeyError, UnicodeDecodeError) as exc:
        raise IrcoreError(f"{path}: cannot read it ({type(exc).__name__}: {exc})") from None
    raise IrcoreError(f"{path}: not a wheel (.whl) or an sdist (.tar.gz)")


# ---------------------------------------------------------------------- checks
def _core_requirements(requires: Iterable[str]) -> list[Requirement]:
    found = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == CORE and (req.marker is None or req.marker.evaluate({"extra": ""})):
            found.append(req)
    return found


def _bounded(req: Requirement) -> bool:
    spec = req.specifier
    return any(s.operator in LOWER_OPS for s in spec) and any(s.operator in UPPER_OPS for s in spec)


def unbounded_core_requirement(requires: Iterable[str]) -> str | None:
    """What lets a future core load this provider: no ``ircore`` requirement, or one without an
    upper bound (``"requires ircore>=0.1 with no upper bound"``); None when the range is capped."""
    pins = _core_requirements(requires)
    if not pins:
        return f"declares no Requires-Dist on {CORE}"
    for req in pins:
        if not any(s.operator in UPPER_OPS for s in req.specifier):
            return f"requires {req} with no upper bound"
    return None


def core_requirement_problems(
    requires: Iterable[str],
    core_version: Version | None = None,
    core_label: str = "the core built alongside it",
) -> list[str]:
    """A provider's ``Requires-Dist: ircore``: present, bounded both ways, holding ``core_version``."""
    pins = _core_requirements(requires)
    if not pins:
        return [
            f"no Requires-Dist on {CORE}: a provider pins the core range it supports, e.g. {_pin_example()}"
        ]
    problems = []
    if not _bounded(pins[0]):
        problems.append(
            f"Requires-Dist {pins[0]} needs both a lower and an upper bound, e.g. {_pin_example()}"
        )
    if core_version is not None and not pins[0].specifier.contains(core_version, prereleases=True):
        problems.append(f"Requires-Dist {pins[0]} excludes {core_label} ({CORE} {core_version})")
    return problems


# each core metadata field every distribution needs -> the pyproject.toml key that writes it
_METADATA_FIELDS = {
    "Name": "name",
    "Version": "version",
    "Summary": 'description = "..."',
    "Requires-Python": 'requires-python = ">=3.10"',
}


def metadata_problems(artifact: Artifact) -> list[str]:
    """The metadata every published distribution needs."""
    md = artifact.metadata
    problems = []
    for key, pyproject_key in _METADATA_FIELDS.items():
        if not (md.get(key) or "").strip():
            problems.append(f"no {key}: set {pyproject_key} in [project]")
    payload = md.get_payload()
    readme = (payload if isinstance(payload, str) else "").strip() or (md.get("Description") or "").strip()
    if not readme or not md.get("Description-Content-Type"):
        problems.append(
            'no readme: set readme = "README.md" in [project] (long description and its content type)'
        )
    if not (md.get("License") or md.get("License-Expression")):
        problems.append("no license: set license in [project]")
    license_files = md.get_all("License-File") or []
    if not license_files:
        problems.append("no License-File: put a LICENSE file next to pyproject.toml")
    for lic in license_files:
        if artifact.kind == "wheel":
            present = any(
                n.endswith(f".dist-info/licenses/{lic}") or n.endswith(f".dist-info/{lic}")
                for n in artifact.names
            )
        else:
            present = any(n.split("/", 1)[-1] == lic for n in artifact.names)
        if not present:
            problems.append(f"License-File {lic} is not in the {artifact.kind}")
    classifiers = md.get_all("Classifier") or []
    if not classifiers:
        problems.append("no classifiers: set classifiers in [project]")
    elif "Programming Language :: Python :: 3" not in classifiers:
        problems.append("classifiers lack 'Programming Language :: Python :: 3'")
    return problems


def entry_point_problems(artifact: Artifact) -> list[str]:
    """The entry points ircore reads: valid names and module values; a provider must have one."""
    problems = []
    providers, ops = artifact.group(PROVIDER_GROUP), artifact.group(OPS_GROUP)
    for name, value in providers.items():
        problems += [
            f"[{PROVIDER_GROUP}] {name} = {value}: {p}"
            for p in (name_problem(name), value_problem(value))
            if p
        ]
    for name, value in ops.items():
        problem = value_problem(value, "op library")
        if problem:
            problems.append(f"[{OPS_GROUP}] {name} = {value}: {problem}")
    if not providers and not ops and artifact.name != CORE:
        where = "its sdist's pyproject.toml or egg-info" if artifact.kind == "sdist" else "entry_points.txt"
        problems.append(
            f"no entry point in the group {PROVIDER_GROUP!r} (read from {where}): ircore would never "
            f'find it; declare [project.entry-points."{PROVIDER_GROUP}"] <name> = "<package.module>"'
        )
    return problems


def build_policy_problems(artifact: Artifact) -> list[str]:
    """This repository's release rule: wheels are pure Python (compiled parts build at first use)."""
    problems = []
    if artifact.kind == "wheel" and not artifact.path.name.endswith("-py3-none-any.whl"):
        problems.append(
            "not a pure-Python wheel (py3-none-any): release builds compile nothing (IRCORE_NO_BUILD=1)"
        )
    compiled = [n for n in artifact.names if n.endswith(COMPILED_SUFFIXES)]
    if compiled:
        problems.append(f"compiled files in the {artifact.kind}: {compiled}")
    return problems


def artifact_problems(
    artifact: Artifact,
    core_version: Version | None = None,
    *,
    pure_python: bool = False,
    core_label: str = "the core built alongside it",
) -> list[str]:
    """Everything wrong with one artifact, each prefixed with its file name (empty when fine).

    ``core_version``: a provider's ``ircore`` range must hold it; ``pure_python``: also apply
    :func:`build_policy_problems`.
    """
    problems = metadata_problems(artifact)
    if pure_python:
        problems += build_policy_problems(artifact)
    problems += entry_point_problems(artifact)
    if artifact.group(PROVIDER_GROUP) or artifact.group(OPS_GROUP):
        problems += core_requirement_problems(artifact.requires, core_version, core_label)
    return [f"{artifact.path.name}: {p}" for p in problems]


# ---------------------------------------------------------------------- the command
@dataclass
class CheckReport:
    artifacts: list[Artifact] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)  # path -> its problems

    @property
    def ok(self) -> bool:
        return not any(self.problems.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "artifacts": [
                {
                    "path": str(a.path),
                    "kind": a.kind,
                    "name": a.name,
                    "version": a.metadata["Version"],
                    "providers": a.group(PROVIDER_GROUP),
                    "op_libraries": a.group(OPS_GROUP),
                    "problems": self.problems[str(a.path)],
                }
                for a in self.artifacts
            ],
        }


def _expand(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted([*path.glob("*.whl"), *path.glob("*.tar.gz")])
            if not inside:
                raise IrcoreError(f"{path}: no wheel (.whl) or sdist (.tar.gz) in this folder")
            found += inside
        elif path.exists():
            found.append(path)
        else:
            raise IrcoreError(f"{path}: no such file or folder")
    return found


def check_paths(paths: Iterable[Path]) -> CheckReport:
    """Read and check every artifact named (a folder stands for its wheels and sdists)."""
    report = CheckReport()
    for path in _expand(paths):
        artifact = read_artifact(path)
        report.artifacts.append(artifact)
        report.problems[str(artifact.path)] = artifact_problems(artifact)
    return report


def cmd_check_dist(args: argparse.Namespace) -> int:
    report = check_paths(args.paths)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return EXIT_OK if report.ok else EXIT_PROBLEMS
    for artifact in report.artifacts:
        problems = report.problems[str(artifact.path)]
        if not problems:
            print(f"ok  {artifact.path.name}")
        for problem in problems:
            print(f"problem: {problem}")
    bad = sum(1 for problems in report.problems.values() if problems)
    total = len(report.artifacts)
    if bad:
        print(f"{sum(map(len, report.problems.values()))} problem(s) in {bad} of {total} artifact(s)")
    else:
        print(f"all {total} artifact(s) pass")
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def add_parser(sub: Any) -> None:
    """Register ``ircore check-dist`` on the command's subparsers."""
    p = sub.add_parser(
        "check-dist",
        help="check a provider's wheel or sdist metadata before publishing it",
        description=(
            "Read each wheel or sdist (a folder: every one in it) and check its metadata: summary, "
            "readme, license and license file, classifiers, Requires-Python; for a provider, its "
            f"{PROVIDER_GROUP!r} entry points (a valid name, a module value) and a Requires-Dist on "
            "ircore with both bounds. Exit 0 when all pass, 1 on any problem, 2 on a path that is "
            "not a readable wheel or sdist."
        ),
    )
    p.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="a .whl, a .tar.gz or a folder of them"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_check_dist)
