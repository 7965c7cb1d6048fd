"""The AITER stand-in (tests/standins/aiter, a STAND-IN, not AMD's package) installed for these tests.

In-process tests run under ``ircore.testing.simulated_platform`` as a ROCm gfx942 machine whose
tensors are CPU tensors; scenarios that need a fresh interpreter (another AITER release, the
real platform, a missing or broken AITER) run through :class:`ProviderEnv`.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo's tests.provider_env

from tests.provider_env import ProviderEnv, simulated_active, standin_env

STANDINS = Path(__file__).resolve().parent / "standins"
GFX942 = {"kind": "rocm", "gcn_arch": "gfx942:sramecc+:xnack-", "device_name": "stand-in MI300X"}


@pytest.fixture(scope="session")
def penv(tmp_path_factory) -> ProviderEnv:
    return standin_env(STANDINS, tmp_path_factory.mktemp("aiter"), "aiter")


@pytest.fixture(scope="module")
def rocm(penv):
    """ircore and its providers as on a ROCm gfx942 machine, AITER being the stand-in."""
    with simulated_active("aiter", **GFX942) as platform:
        yield platform
