"""Build and check the release artifacts: an sdist and a wheel for the core and every provider.

    python tools/release.py build [--out dist]   # build everything, then check it (what `make dist` runs)
    python tools/release.py check dist           # check artifacts already built

Projects: the repository root (``ircore``) and every ``providers/*/`` folder with a
``pyproject.toml``, found anew on each run. Each is built with ``python -m build`` (an sdist,
then the wheel from that sdist, so a file missing from the sdist breaks the wheel), without
build isolation but with ``IRCORE_NO_BUILD=1``: no ahead-of-time compiled part is built, so
every wheel is pure Python (``py3-none-any``) and works with any supported torch, CPU or GPU;
compiled parts come from their sources at install or first use (see docs/development.md, "Releases").

The check reads each wheel's metadata and fails, naming the artifact and the field, unless it
has a summary, a readme (long description with its content type), a license and its license
file, classifiers, ``Requires-Python``, a pure-Python tag and no compiled file; each provider
(a distribution with an ``ircore.providers`` entry point) must also pin the core range it
supports, ``Requires-Dist: ircore>=X,<Y``, and that range must hold the core built alongside it.
"""

from __future__ import annotations

import argparse
import email.parser
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
CORE = "ircore"
PROVIDER_GROUP = "ircore.providers"
COMPILED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib")
LOWER_OPS, UPPER_OPS = (">=", ">", "~=", "=="), ("<", "<=", "~=", "==")


def projects(repo: Path = REPO) -> list[Path]:
    """The core, then every provider folder (any ``providers/*/`` with a ``pyproject.toml``)."""
    return [repo, *sorted(p.parent for p in repo.glob("providers/*/pyproject.toml"))]


def build(out: Path, repo: Path = REPO) -> None:
    """An sdist and a wheel (built from the sdist) for every project, into ``out``.

    Building an sdist writes ``<name>.egg-info`` into the project folder; it is removed again,
    because a folder on ``sys.path`` (the repository root is, for tools run from it) would expose
    it as a second, soon stale, copy of the distribution's metadata and entry points.
    """
    out.mkdir(parents=True, exist_ok=True)
    before = {p for project in projects(repo) for p in project.glob("*.egg-info")}
    try:
        _build_all(out, repo)
    finally:
        for project in projects(repo):
            for leftover in set(project.glob("*.egg-info")) - before:
                shutil.rmtree(leftover, ignore_errors=True)


def _build_all(out: Path, repo: Path) -> None:
    env = {**os.environ, "IRCORE_NO_BUILD": "1"}
    for project in projects(repo):
        print(f"==> building {project.relative_to(repo) if project != repo else CORE}", flush=True)
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode:  # the build's own output only when it failed (it is long and noisy)
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit(f"building {project} failed (exit {proc.returncode}); its output is above")


# ---------------------------------------------------------------------- checking
@dataclass
class Wheel:
    """The parts of a built wheel the check reads."""

    path: Path
    metadata: email.message.Message
    names: list[str]
    entry_points: str = ""

    @property
    def name(self) -> str:
        return canonicalize_name(self.metadata["Name"] or self.path.name)

    @property
    def is_provider(self) -> bool:
        return f"[{PROVIDER_GROUP}]" in self.entry_points


def read_wheel(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        metadata = email.parser.Parser().parsestr(zf.read(f"{dist_info}/METADATA").decode())
        ep_name = f"{dist_info}/entry_points.txt"
        entry_points = zf.read(ep_name).decode() if ep_name in names else ""
    return Wheel(path, metadata, names, entry_points)


def _core_pin_problems(wheel: Wheel, core_version: Version | None) -> list[str]:
    pins = [Requirement(r) for r in wheel.metadata.get_all("Requires-Dist") or []]
    pins = [r for r in pins if canonicalize_name(r.name) == CORE]
    example = 'Requires-Dist: ircore>=0.1,<0.2 (dependencies = ["ircore>=0.1,<0.2"])'
    if not pins:
        return [f"no Requires-Dist on {CORE}: a provider pins the core range it supports, e.g. {example}"]
    spec = pins[0].specifier
    problems = []
    if not any(s.operator in LOWER_OPS for s in spec) or not any(s.operator in UPPER_OPS for s in spec):
        problems.append(f"Requires-Dist {pins[0]} needs both a lower and an upper bound, e.g. {example}")
    if core_version is not None and not spec.contains(core_version, prereleases=True):
        problems.append(
            f"Requires-Dist {pins[0]} excludes the core built alongside it ({CORE} {core_version})"
        )
    return problems


def wheel_problems(wheel: Wheel, core_version: Version | None) -> list[str]:
    """Everything wrong with one wheel's metadata and contents (empty when it is fine)."""
    md = wheel.metadata
    problems = []
    for key in ("Name", "Version", "Summary", "Requires-Python"):
        if not (md.get(key) or "").strip():
            problems.append(f"no {key}")
    if not md.get_payload().strip() or not md.get("Description-Content-Type"):
        problems.append(
            'no readme: set readme = "README.md" in [project] (long description and its content type)'
        )
    if not (md.get("License") or md.get("License-Expression")):
        problems.append("no license: set license in [project]")
    license_files = md.get_all("License-File") or []
    if not license_files:
        problems.append("no License-File: put a LICENSE file next to pyproject.toml")
    for lic in license_files:
        if not any(
            n.endswith(f".dist-info/licenses/{lic}") or n.endswith(f".dist-info/{lic}") for n in wheel.names
        ):
            problems.append(f"License-File {lic} is not in the wheel")
    classifiers = md.get_all("Classifier") or []
    if not classifiers:
        problems.append("no classifiers: set classifiers in [project]")
    elif "Programming Language :: Python :: 3" not in classifiers:
        problems.append("classifiers lack 'Programming Language :: Python :: 3'")
    if not wheel.path.name.endswith("-py3-none-any.whl"):
        problems.append(
            "not a pure-Python wheel (py3-none-any): release builds compile nothing (IRCORE_NO_BUILD=1)"
        )
    compiled = [n for n in wheel.names if n.endswith(COMPILED_SUFFIXES)]
    if compiled:
        problems.append(f"compiled files in the wheel: {compiled}")
    if wheel.is_provider:
        problems += _core_pin_problems(wheel, core_version)
    return [f"{wheel.path.name}: {p}" for p in problems]


def _sdist_names(path: Path) -> list[str]:
    with tarfile.open(path) as tf:
        return tf.getnames()


@dataclass
class CheckResult:
    wheels: list[Wheel] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def check(dist: Path, repo: Path = REPO) -> CheckResult:
    """Check every artifact in ``dist``: one sdist and one wheel per project, metadata as above."""
    result = CheckResult()
    result.wheels = [read_wheel(p) for p in sorted(dist.glob("*.whl"))]
    by_name = {w.name: w for w in result.wheels}
    core = by_name.get(CORE)
    core_version = Version(core.metadata["Version"]) if core is not None else None
    if core is None:
        result.problems.append(f"{dist}: no {CORE} wheel")
    sdists = sorted(dist.glob("*.tar.gz"))
    for project in projects(repo):
        expected = _project_name(project)
        if expected not in by_name:
            result.problems.append(f"{dist}: no wheel of {expected} ({project})")
        sdist = [s for s in sdists if canonicalize_name(s.name.rsplit("-", 1)[0]) == expected]
        if len(sdist) != 1:
            result.problems.append(
                f"{dist}: expected one sdist of {expected}, found {[s.name for s in sdist]}"
            )
        elif not any(n.endswith("/PKG-INFO") for n in _sdist_names(sdist[0])):
            result.problems.append(f"{sdist[0].name}: no PKG-INFO")
    for wheel in result.wheels:
        result.problems += wheel_problems(wheel, core_version)
        if wheel.name != CORE and wheel.name.startswith("ircore-provider-") and not wheel.is_provider:
            result.problems.append(f"{wheel.path.name}: no [{PROVIDER_GROUP}] entry point")
    return result


def _project_name(project: Path) -> str:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return canonicalize_name(tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/release.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser(
        "build", help="build sdists and wheels of the core and every provider, then check them"
    )
    p_build.add_argument("--out", type=Path, default=REPO / "dist")
    p_check = sub.add_parser("check", help="check the artifacts in a folder")
    p_check.add_argument("dist", type=Path)
    args = parser.parse_args(argv)
    dist = args.out if args.command == "build" else args.dist
    if args.command == "build":
        stale = sorted(dist.glob("*.whl")) + sorted(dist.glob("*.tar.gz"))
        if stale:
            print(
                f"{dist} already holds artifacts ({stale[0].name}, ...): remove them first", file=sys.stderr
            )
            return 2
        build(dist)
    result = check(dist)
    for problem in result.problems:
        print(f"release check: {problem}", file=sys.stderr)
    if result.problems:
        return 1
    for wheel in result.wheels:
        print(f"ok  {wheel.path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
