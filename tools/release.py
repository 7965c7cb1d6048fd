"""Build and check the release artifacts: an sdist and a wheel for the core and every provider.

    python tools/release.py build [--out dist]   # build everything, then check it (what `make dist` runs)
    python tools/release.py check dist           # check artifacts already built

Projects: the repository root (``ircore``) and every ``providers/*/`` folder with a
``pyproject.toml``, found anew on each run. Each is built with ``python -m build`` (an sdist,
then the wheel from that sdist, so a file missing from the sdist breaks the wheel), without
build isolation but with ``IRCORE_NO_BUILD=1``: no ahead-of-time compiled part is built, so
every wheel is pure Python (``py3-none-any``) and works with any supported torch, CPU or GPU;
compiled parts come from their sources at install or first use (see docs/development.md, "Releases").

The check reads each wheel's and sdist's metadata and fails, naming the artifact and the field,
unless it has a summary, a readme (long description with its content type), a license and its
license file, classifiers, ``Requires-Python``; each provider (a distribution with an
``ircore.providers`` entry point: a valid name, a module value) must also pin the core range it
supports, ``Requires-Dist: ircore>=X,<Y``, and that range must hold the core built alongside it.
These are :mod:`ircore.tools.distcheck`'s checks, which ``ircore check-dist`` runs on anyone's
artifacts; this tool adds its own rule: a pure-Python wheel tag and no compiled file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
try:
    from ircore.errors import IrcoreError
    from ircore.tools import distcheck
except ImportError:  # not installed: the checkout's own (imports, builds nothing)
    sys.path.insert(0, str(REPO))
    from ircore.errors import IrcoreError
    from ircore.tools import distcheck

CORE = distcheck.CORE


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
# The metadata checks are ircore's own (``ircore check-dist`` runs them on anyone's artifacts);
# this tool adds the pure-Python rule and checks each provider's range against the core built here.
Wheel = distcheck.Artifact
read_wheel = distcheck.read_wheel


def wheel_problems(wheel: Wheel, core_version: Version | None) -> list[str]:
    """Everything wrong with one wheel's metadata and contents (empty when it is fine)."""
    return distcheck.artifact_problems(wheel, core_version, pure_python=True)


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
        else:
            try:
                artifact = distcheck.read_sdist(sdist[0])
            except IrcoreError as exc:
                result.problems.append(str(exc))
            else:
                result.problems += distcheck.artifact_problems(artifact, core_version, pure_python=True)
    for wheel in result.wheels:
        result.problems += wheel_problems(wheel, core_version)
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
