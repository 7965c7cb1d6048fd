"""The vllm-xpu-kernels stand-in (tests/standins/vllm_xpu_kernels, a STAND-IN, not Intel's package)
and a stand-in of vLLM's own ``vllm._C`` installed for these tests.

In-process tests run under ``ircore.testing.simulated_platform`` as an Intel GPU machine whose
tensors are CPU tensors; the stand-in then owns the torch namespace ``_C`` for this whole process.
Scenarios that need a fresh interpreter (the namespace clash, other releases, the real
platform) run through :class:`ProviderEnv`.
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
XPU = {"kind": "xpu", "device_name": "stand-in Intel(R) Data Center GPU Max 1550"}


class CheckoutEnv(ProviderEnv):
    """Scenarios that import this checkout's ircore and ircore_xpu, even where PYTHONPATH is
    replaced: not the copies an editable install of another checkout (git worktrees) points at."""

    def env(self, extra: dict[str, str | None] | None = None) -> dict[str, str]:
        env = super().env(extra)
        paths = [*filter(None, env.get("PYTHONPATH", "").split(os.pathsep)), str(REPO), str(PROJECT)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env


@pytest.fixture(scope="session")
def penv(tmp_path_factory) -> ProviderEnv:
    env = standin_env(STANDINS, tmp_path_factory.mktemp("xpu"), "xpu")
    return CheckoutEnv(env.site, env.tmp, enabled=("xpu",))


@pytest.fixture(scope="module")
def xpu(penv):
    """ircore and its providers as on an Intel GPU machine, vllm-xpu-kernels being the stand-in."""
    with simulated_active("xpu", **XPU) as platform:
        yield platform
