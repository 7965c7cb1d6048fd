"""The KernelAgent-Oink stand-in (tests/standins/kernelagent_oink, a STAND-IN, not Meta's
package) installed for these tests.

In-process tests run under ``ircore.testing.simulated_platform`` as a Blackwell (sm_100) machine
whose tensors are CPU tensors; scenarios that need a fresh interpreter (the real platform, a
missing Oink, Oink without cutlass, another release) run through :class:`ProviderEnv`.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo's tests.provider_env

from tests.provider_env import ProviderEnv, simulated_active, standin_env

STANDINS = Path(__file__).resolve().parent / "standins"
SM100 = {"kind": "cuda", "capability": (10, 0), "device_name": "stand-in NVIDIA B200"}


@pytest.fixture(scope="session")
def penv(tmp_path_factory) -> ProviderEnv:
    return standin_env(STANDINS, tmp_path_factory.mktemp("oink"), "oink")


@pytest.fixture(scope="module")
def blackwell(penv):
    """ircore and its providers as on a B200, KernelAgent-Oink being the stand-in."""
    with simulated_active("oink", **SM100) as platform:
        yield platform
