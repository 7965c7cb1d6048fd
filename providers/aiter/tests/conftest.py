"""The AITER stand-in (tests/standins/aiter, a STAND-IN, not AMD's package) installed for these tests.

In-process tests run under ``ircore.testing.simulated_platform`` as a ROCm gfx942 machine whose
tensors are CPU tensors; scenarios that need a fresh interpreter (another AITER release, the
real platform, a missing or broken AITER) run through :class:`ProviderEnv`.
"""

import os
import sys
import tempfile
from pathlib import Path

# The core suite's Inductor cache (tests/conftest.py), shared by every suite of a run and their
# subprocesses: what one compiled (and Inductor's C++ toolchain checks) the others reuse; no pool
# of compile workers to start for graphs this small (CI has 2 cores).
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"ircore-tests-inductor-{os.getuid()}")
)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo's tests.provider_env

from tests.provider_env import REPO, ProviderEnv, simulated_active, standin_env

PROJECT = Path(__file__).resolve().parents[1]
STANDINS = PROJECT / "tests" / "standins"
GFX942 = {"kind": "rocm", "gcn_arch": "gfx942:sramecc+:xnack-", "device_name": "stand-in MI300X"}
GFX950 = {"kind": "rocm", "gcn_arch": "gfx950", "device_name": "stand-in MI355X"}


class CheckoutEnv(ProviderEnv):
    """Scenarios that import this checkout's ircore and ircore_aiter, even where PYTHONPATH is
    replaced: not the copies an editable install of another checkout (git worktrees) points at."""

    def env(self, extra: dict[str, str | None] | None = None) -> dict[str, str]:
        env = super().env(extra)
        paths = [*filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), str(REPO), str(PROJECT)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env


@pytest.fixture(scope="session")
def penv(tmp_path_factory) -> ProviderEnv:
    env = standin_env(STANDINS, tmp_path_factory.mktemp("aiter"), "aiter")
    return CheckoutEnv(env.site, env.tmp, enabled=("aiter",))


@pytest.fixture(scope="module")
def rocm(penv):
    """ircore and its providers as on a ROCm gfx942 machine, AITER being the stand-in."""
    with simulated_active("aiter", **GFX942) as platform:
        yield platform


@pytest.fixture
def gfx942(rocm):
    """The AITER stand-in on the module's simulated gfx942 (AITER's fp8 there: e4m3fnuz)."""
    import aiter as standin

    assert standin.__doc__.startswith("STAND-IN for AMD's AITER")
    assert os.environ.get("GPU_ARCHS", "gfx942") == "gfx942"
    return standin


@pytest.fixture
def gfx950(penv, monkeypatch):
    """The AITER stand-in on a simulated gfx950 (AITER's fp8 there: e4m3fn), for one test:
    entering it costs a provider load, so tests put their gfx950 cases under one."""
    monkeypatch.setenv("GPU_ARCHS", "gfx950")  # what the stand-in's dtypes.fp8 follows, as AITER's
    with simulated_active("aiter", **GFX950):
        import aiter as standin

        yield standin
