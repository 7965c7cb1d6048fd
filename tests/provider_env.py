"""Run ircore in a fresh interpreter that sees the fixture providers as installed distributions.

The fixtures under ``tests/fixtures`` are installed once per session with pip into a temporary
target directory; each scenario runs in a subprocess with that directory on ``PYTHONPATH``, so
discovery goes through real ``importlib.metadata`` and every provider is imported (or not)
exactly as in a user's process. That subprocess is forked from a server that has imported torch
and nothing else (``_Zygote``: torch's import is most of a scenario's CPU time) where the
scenario's environment differs from the server's only in ``IRCORE_*`` variables; ircore, the
providers and the configuration are read in the child, for the first time.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
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


# The fork server (see ``_Zygote``): an interpreter that has imported torch and nothing of ircore
# forks one child per scenario. The child takes the scenario's environment, working directory and
# arguments, then runs ``-c CODE`` or ``-m MODULE`` as that interpreter would: ircore, the
# providers and their entry points are imported in the child, for the first time.
ZYGOTE = r"""
import atexit, builtins, importlib, io, json, os, runpy, signal, sys, threading, types
import torch  # noqa: F401  (what every scenario imports first: ~2 s of CPU each, paid once here)
chan_in, chan_out = sys.stdin.buffer, sys.stdout.buffer

def _child(req):
    os.chdir(req["cwd"])
    importlib.invalidate_caches()  # directory listings and distribution metadata: read afresh
    os.environ.clear()
    os.environ.update(req["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False))
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), errors="backslashreplace")
    args = req["args"]
    code = 0
    try:
        if args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        else:  # -m MODULE
            sys.argv = [args[1], *args[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:  # printed as the interpreter prints it, without this frame
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = -signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    if code == -signal.SIGINT:  # as the interpreter does for an uncaught KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)

if threading.active_count() != 1:  # forking is safe only with no other thread
    sys.exit(3)
chan_out.write(b"READY\n")
chan_out.flush()
for line in iter(chan_in.readline, b""):
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        _child(req)
    chan_out.write(json.dumps({"pid": pid}).encode() + b"\n")
    chan_out.flush()
    _, status = os.waitpid(pid, 0)
    chan_out.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    chan_out.flush()
"""


# What may differ between scenarios served by one fork server: ircore's configuration, and the
# name of the test that pytest sets in the environment (neither is read by torch's import).
_PER_SCENARIO = ("IRCORE_", "PYTEST_CURRENT_TEST")


class _Zygote:
    """One fork server per :class:`ProviderEnv` environment: a scenario whose environment differs
    from that environment's only in ``_PER_SCENARIO`` variables runs in a child forked from an
    interpreter that has imported torch, and nothing else of the scenario's. What the scenarios
    test (which distributions are found, what ircore and each provider import, load and report,
    configuration read from the environment and the working directory) happens in the child as
    in a fresh interpreter; only torch's import (most of a scenario's CPU time) is shared.
    ``PROVIDER_ENV_NO_FORK=1`` runs every scenario in a fresh interpreter instead."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE], env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._buf = b""
        atexit.register(self.close)
        if self._line(300) != b"READY":
            self.close()

    def _line(self, timeout: float) -> bytes | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], timeout)
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def serves(self, env: dict[str, str]) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        keys = set(env) | set(self.env)
        return all(k.startswith(_PER_SCENARIO) or env.get(k) == self.env.get(k) for k in keys)

    def run(self, args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, str]:
        assert self.proc is not None and self.proc.stdin is not None
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            req = {"args": args, "env": env, "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
            self.proc.stdin.write(json.dumps(req).encode() + b"\n")
            self.proc.stdin.flush()
            started = self._line(30)
            assert started is not None, "the fork server stopped"
            pid = json.loads(started)["pid"]
            done = self._line(timeout)
            if done is None:  # as subprocess.run's timeout: kill the scenario, then fail
                os.kill(pid, signal.SIGKILL)
                self._line(30)
                raise subprocess.TimeoutExpired(args, timeout)
            code = json.loads(done)["status"]
            read = lambda p: p.read_bytes().decode(errors="replace") if p.exists() else ""  # noqa: E731
            return code, read(out), read(err)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
    """pip-install ``projects`` into ``target``, each built from a copy of its sources.

    pip builds a local project in its folder (``build/``, ``*.egg-info``), and ``make test`` runs
    two lanes at once (the core's release tests build sdists in the providers' folders; the
    loader tests and the others install the same fixture projects): a copy per install keeps the
    builds apart (and the source tree clean)."""
    sources = Path(tempfile.mkdtemp(prefix="ircore-pip-src-"))
    copies = []
    for project in projects:
        copy = sources / project.name
        shutil.copytree(project, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        copies.append(copy)
    try:
        _run_pip(target, copies)
    finally:
        shutil.rmtree(sources, ignore_errors=True)


def _run_pip(target: Path, projects: list[Path]) -> None:
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
        full_env = self.env(env)
        zygote = self._zygote() if args[:1] == ["-c"] or args[:2] == ["-m", "ircore"] else None
        if zygote is not None and zygote.serves(full_env):
            code, stdout, stderr = zygote.run(args, full_env, cwd or self.tmp, timeout=300)
        else:
            proc = subprocess.run(
                [sys.executable, *args],
                env=full_env,
                cwd=cwd or self.tmp,
                capture_output=True,
                text=True,
                timeout=300,
            )
            code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
        imported = log.read_text().split() if log.exists() else []
        return Run(code, stdout, stderr, imported)

    def _zygote(self) -> _Zygote | None:
        """This environment's fork server (see :class:`_Zygote`), started on first use."""
        if os.environ.get("PROVIDER_ENV_NO_FORK") == "1" or not hasattr(os, "fork"):
            return None
        zygote = getattr(self, "_fork_server", None)
        if zygote is None:
            zygote = self._fork_server = _Zygote(self.env(), self.tmp)
        return zygote

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
