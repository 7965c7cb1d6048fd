"""Run ircore in a fresh interpreter that sees the fixture providers as installed distributions.

The fixtures under ``tests/fixtures`` are installed once per session with pip into a temporary
target directory; each scenario runs in a subprocess with that directory on ``PYTHONPATH``, so
discovery goes through real ``importlib.metadata`` and every provider is imported (or not)
exactly as in a user's process.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Providers for the tools' tests (verify, the pytest plugin), kept out of the plugin scenarios' site.
TOOL_FIXTURES = Path(__file__).resolve().parent / "fixtures_tools"

PROBE = r"""
import json, sys, torch, ircore
from ircore.providers._manager import MANAGER
result = {"error": None}
try:
    x = torch.randn(2, 8)
    ircore.ops.rms_norm(x, None, 1e-6)
    result["chosen"] = ircore.explain("rms_norm", x, None, 1e-6).chosen
    result["priority"] = ircore.get_priority("rms_norm")
except Exception as exc:
    result["error"] = f"{type(exc).__name__}: {exc}"
result["providers"] = {n: r.to_dict() for n, r in MANAGER.records.items()}
result["impls"] = {n: list(op.impls) for n, op in ircore.all_ops().items()}
result["explain_source"] = None if result["error"] else ircore.explain("rms_norm", x, None, 1e-6).source
print("PROBE" + json.dumps(result))
"""


# One provider's state in a fresh interpreter, on the real or a simulated platform; with
# conformance=True an active provider also runs ircore.testing.check_provider.
SCENARIO = r"""
import contextlib, json, sys, torch, ircore, ircore.testing
from ircore.providers._manager import MANAGER
provider, platform, conformance = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
if platform and "capability" in platform:
    platform["capability"] = tuple(platform["capability"])
with ircore.testing.simulated_platform(**platform) if platform else contextlib.nullcontext():
    MANAGER.ensure_loaded()
    record = MANAGER.records[provider]
    out = {"state": record.state.value, "reason": record.reason}
    if conformance and record.state.value == "active":
        out["conformance"] = str(ircore.testing.check_provider(provider))
print("SCENARIO" + json.dumps(out))
"""


# What every provider but one sees: their records, their implementations and the priority lists
# without that one; equal with and without it installed when it leaves the others alone.
OTHERS = r"""
import contextlib, json, sys, ircore, ircore.testing
from ircore.providers._manager import MANAGER
provider, platform = sys.argv[1], json.loads(sys.argv[2])
if platform and "capability" in platform:
    platform["capability"] = tuple(platform["capability"])
with ircore.testing.simulated_platform(**platform) if platform else contextlib.nullcontext():
    MANAGER.ensure_loaded()
    records = {n: r.to_dict() for n, r in MANAGER.records.items() if n != provider}
    impls = {n: {p: i.fn.__qualname__ for p, i in op.impls.items() if p != provider}
             for n, op in ircore.all_ops().items()}
    order = {n: [p for p in ircore.get_priority(n) if p != provider] for n in ircore.all_ops()}
print("OTHERS" + json.dumps([records, impls, order]))
"""


def install_fixtures(target: Path, projects: Iterable[str | Path] | Path | None = None) -> None:
    """Install fixture distributions into ``target``.

    ``projects``: names of tests/fixtures folders and project paths; or one folder whose
    projects are all installed (default: tests/fixtures).
    """
    if projects is None or isinstance(projects, Path):
        folder = FIXTURES if projects is None else projects
        projects = sorted(p for p in folder.iterdir() if (p / "pyproject.toml").is_file())
    _pip_install(target, [FIXTURES / p if isinstance(p, str) else p for p in projects])


def installed_distribution(project: Path, target: Path) -> metadata.Distribution:
    """Install the distribution at ``project`` into ``target`` with pip; its installed metadata."""
    _pip_install(target, [project])
    return next(metadata.distributions(path=[str(target)]))


def _pip_install(target: Path, projects: list[Path]) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *map(str, projects),
        ],
        check=True,
    )


def _real_providers() -> list[str]:
    """Providers installed in this environment (the repo's own): disabled in every scenario."""
    return sorted({ep.name for ep in metadata.entry_points(group="ircore.providers")})


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    imported: list[str]

    @property
    def probe(self) -> dict:
        line = next(line for line in self.stdout.splitlines() if line.startswith("PROBE"))
        return json.loads(line[len("PROBE") :])

    def state(self, name: str) -> tuple[str, str]:
        record = self.probe["providers"][name]
        return record["state"], record["reason"]


class ProviderEnv:
    """Subprocess runner over one installed fixture site.

    The repo's own providers installed in this environment are disabled in every scenario,
    except those named in ``enabled`` (a provider's own tests enable that provider).
    """

    def __init__(self, site: Path, tmp: Path, enabled: tuple[str, ...] = ()) -> None:
        self.site = site
        self.tmp = tmp
        self.real = [name for name in _real_providers() if name not in enabled]

    def env(self, extra: dict[str, str | None] | None = None) -> dict[str, str]:
        """The subprocess environment; a value of None in ``extra`` removes that variable."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("IRCORE_")}
        # the site and this checkout first; then whatever the caller had (a worktree's providers)
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([str(self.site), str(REPO), *inherited])
        env["IRCORE_FIXTURE_IMPORT_LOG"] = str(self.tmp / "imports.log")
        if self.real:
            env["IRCORE_DISABLE"] = ",".join(self.real)
        for key, value in (extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(self, args: list[str], env: dict[str, str | None] | None = None, cwd: Path | None = None) -> Run:
        log = self.tmp / "imports.log"
        log.unlink(missing_ok=True)
        proc = subprocess.run(
            [sys.executable, *args],
            env=self.env(env),
            cwd=cwd or self.tmp,
            capture_output=True,
            text=True,
            timeout=300,
        )
        imported = log.read_text().split() if log.exists() else []
        return Run(proc.returncode, proc.stdout, proc.stderr, imported)

    def probe(
        self, env: dict[str, str | None] | None = None, cwd: Path | None = None, prelude: str = ""
    ) -> Run:
        run = self.run(["-c", prelude + PROBE], env, cwd)
        assert "PROBE" in run.stdout, run.stderr
        return run

    def scenario(
        self,
        provider: str,
        platform: dict | None = None,
        env: dict[str, str | None] | None = None,
        conformance: bool = False,
        prelude: str = "",
    ) -> dict:
        """``provider``'s state and reason in a fresh interpreter (see :data:`SCENARIO`)."""
        args = ["-c", prelude + SCENARIO, provider, json.dumps(platform or {}), "1" if conformance else "0"]
        run = self.run(args, env)
        assert "SCENARIO" in run.stdout, run.stderr
        result = json.loads(run.stdout.split("SCENARIO", 1)[1])
        result["imported"] = run.imported
        return result

    def others(self, provider: str, platform: dict | None = None) -> tuple[list, list]:
        """What the other providers look like with ``provider`` enabled, and with it disabled."""
        views = []
        for disable in (None, provider):  # None: every installed provider enabled
            run = self.run(["-c", OTHERS, provider, json.dumps(platform or {})], {"IRCORE_DISABLE": disable})
            assert "OTHERS" in run.stdout, run.stderr
            views.append(json.loads(run.stdout.split("OTHERS", 1)[1]))
        return views[0], views[1]

    def listed(self, provider: str) -> tuple[dict, list[str]]:
        """``provider``'s entry in ``ircore list --json`` on this machine, and the import log."""
        run = self.cli("list", "--json")
        assert run.returncode == 0, run.stderr
        record = next(p for p in json.loads(run.stdout)["providers"] if p["name"] == provider)
        return record, run.imported

    def cli(self, *argv: str, env: dict[str, str | None] | None = None, cwd: Path | None = None) -> Run:
        return self.run(["-m", "ircore", *argv], env, cwd)


def standin_env(standins: Path, tmp: Path, provider: str) -> ProviderEnv:
    """A provider's stand-in vendor packages, installed as real distributions under ``tmp``.

    They become importable in this process too (for in-process tests under
    ``ircore.testing.simulated_platform``); subprocess scenarios see them through PYTHONPATH,
    with ``provider`` enabled.
    """
    from ircore.testing import install_standins

    return ProviderEnv(install_standins(standins, tmp / "site"), tmp, enabled=(provider,))


def simulated_active(provider: str, **platform: object) -> contextlib.AbstractContextManager[object]:
    """This process as on ``platform`` (simulated), with ``provider`` loaded and ``active``."""
    from ircore.testing import simulated_active as active

    return active(provider, **platform)
