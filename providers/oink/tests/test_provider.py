"""The distribution, the platform check's reasons, and what the provider leaves alone.

Subprocess scenarios run in fresh interpreters with the KernelAgent-Oink STAND-IN importable
(see conftest.py): on this machine oink must stay ``unavailable`` without importing it (on the
H200: with the sm_90 reason); on a simulated sm_100 each situation the stand-in models is
accepted or reported.
"""

from pathlib import Path

import pytest
from conftest import SM100
from ircore_oink import provider

from ircore.platform import Platform, current_platform
from tests.provider_env import installed_distribution

PROJECT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_installs_as_a_real_distribution(tmp_path):
    dist = installed_distribution(PROJECT, tmp_path)
    assert dist.metadata["Name"] == "ircore-provider-oink"
    assert "ircore<0.2,>=0.1" in dist.requires
    assert [(ep.name, ep.value) for ep in dist.entry_points if ep.group == "ircore.providers"] == [
        ("oink", "ircore_oink.provider")
    ]
    assert dist.metadata["License-Expression"] == "Apache-2.0"  # an SPDX expression (setuptools>=77)
    assert "pip install ./KernelAgent/oink" in dist.metadata.get_payload()  # the README


@pytest.mark.parametrize(
    "platform, found",
    [
        (Platform("cuda", "cuda", "NVIDIA H200", (9, 0), "2.11.0"), "CUDA sm_90 (NVIDIA H200)"),
        (Platform("cuda", "cuda", "NVIDIA GeForce RTX 5090", (12, 0), "2.11.0"), "CUDA sm_120 (NVIDIA GeForce RTX 5090)"),
        (Platform("cpu", "cpu", "x86_64", None, "2.11.0"), "CPU (x86_64)"),
        (Platform("rocm", "cuda", "MI355X", (9, 5), "2.11.0", 1, "gfx950"), "ROCm gfx950 (MI355X)"),
    ],
    ids=["h200", "consumer-blackwell", "cpu", "rocm"],
)
def test_reason_names_what_is_needed_and_what_was_found(platform, found):
    assert provider.ircore_check_platform(platform) == (
        f"needs an NVIDIA Blackwell GPU (compute capability 10.x) and kernelagent-oink; found {found}"
    )


@pytest.mark.slow
@pytest.mark.gpu
def test_unavailable_here_without_importing_oink(penv):
    """On this machine (CPU here; the H200 gives 'found CUDA sm_90 (NVIDIA H200)'): never imported."""
    record, imported = penv.listed("oink")
    assert record["state"] == "unavailable"
    assert record["reason"] == f"{provider.NEEDS}; found {current_platform().describe()}"
    assert "kernelagent_oink" not in imported


@pytest.mark.slow
def test_active_on_sm100_and_sm103(penv):
    for capability in ((10, 0), (10, 3)):
        result = penv.scenario("oink", {**SM100, "capability": capability})
        assert result["state"] == "active", result
        major, minor = capability
        assert result["reason"] == (
            f"implements rms_norm, fused_add_rms_norm on CUDA sm_{major}{minor} (stand-in NVIDIA B200)"
        )


@pytest.mark.slow
def test_oink_missing(penv, tmp_path):
    result = penv.scenario("oink", SM100, env={"PYTHONPATH": str(tmp_path)})  # no stand-in
    assert (result["state"], result["reason"]) == (
        "unavailable",
        f"{provider.INSTALL} is not installed: no module named 'kernelagent_oink'",
    )


@pytest.mark.slow
def test_register_that_registers_nothing_is_reported(penv):
    """Oink without cutlass registers no op; torch.ops.oink exists anyway, so the ops are checked."""
    result = penv.scenario("oink", SM100, env={"IRCORE_STANDIN_OINK_VARIANT": "no-cutlass"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "kernelagent_oink.register() registered no torch.ops.oink.rmsnorm (it needs cutlass from "
        "nvidia-cutlass-dsl and cuda.bindings from cuda-python; see the kernelagent_oink logger)",
    )


@pytest.mark.slow
def test_changed_call_form_is_reported_not_called(penv):
    result = penv.scenario("oink", SM100, env={"IRCORE_STANDIN_OINK_VARIANT": "changed"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "torch.ops.oink.rmsnorm takes (x, eps, weight); this provider calls it as (x, weight, eps) "
        "(supported: kernelagent-oink 0.1)",
    )


@pytest.mark.slow
def test_other_providers_are_untouched(penv):
    """Enabled or not, every other provider's state, ranks, implementations and order are the same."""
    with_oink, without = penv.others("oink", SM100)
    assert with_oink == without
    assert with_oink[0]["triton"]["state"] == "active"  # someone else really is there to disturb
