"""The distribution, the platform check's reasons, and what the provider leaves alone.

Subprocess scenarios run in fresh interpreters with the AITER STAND-IN importable (see
conftest.py): on this machine aiter must stay ``unavailable`` without importing it; on a
simulated ROCm gfx942 each AITER release the stand-in models is accepted or reported.
"""

from pathlib import Path

import pytest
from conftest import GFX942
from ircore_aiter import provider

from ircore.platform import Platform, current_platform
from tests.provider_env import installed_distribution

PROJECT = Path(__file__).resolve().parents[1]


def _platform(kind, name, capability=None, gcn_arch=None, device_type="cuda"):
    return Platform(kind, device_type, name, capability, "2.11.0", 1, gcn_arch)


@pytest.mark.slow
def test_installs_as_a_real_distribution(tmp_path):
    dist = installed_distribution(PROJECT, tmp_path)
    assert dist.metadata["Name"] == "ircore-provider-aiter"
    assert "ircore<0.2,>=0.1" in dist.requires
    assert [(ep.name, ep.value) for ep in dist.entry_points if ep.group == "ircore.providers"] == [
        ("aiter", "ircore_aiter.provider")
    ]
    assert dist.metadata["License-Expression"] == "Apache-2.0"  # an SPDX expression (setuptools>=77)
    assert "Operating System :: POSIX :: Linux" in dist.metadata.get_all("Classifier")
    assert "pip install ircore-provider-aiter" in dist.metadata.get_payload()  # the README


@pytest.mark.parametrize(
    "platform, found",
    [
        (_platform("cpu", "x86_64", device_type="cpu"), "CPU (x86_64)"),
        (_platform("cuda", "NVIDIA H200", (9, 0)), "CUDA sm_90 (NVIDIA H200)"),
        (_platform("rocm", "AMD Instinct MI250X", (9, 0), "gfx90a:sramecc+:xnack-"), "ROCm gfx90a:sramecc+:xnack- (AMD Instinct MI250X)"),
        (_platform("rocm", "Radeon RX 7900 XTX", (11, 0), "gfx1100"), "ROCm gfx1100 (Radeon RX 7900 XTX)"),
        (_platform("xpu", "Intel(R) Data Center GPU Max 1550", device_type="xpu"), "XPU (Intel(R) Data Center GPU Max 1550)"),
    ],
    ids=["cpu", "h200", "gfx90a", "rdna3", "xpu"],
)
def test_reason_names_what_is_needed_and_what_was_found(platform, found):
    assert provider.ircore_check_platform(platform) == (
        "needs an AMD Instinct GPU with ROCm (CDNA3/CDNA4: gfx942, gfx950) and AITER "
        f"(pip install amd-aiter); found {found}"
    )


@pytest.mark.slow
@pytest.mark.gpu
def test_unavailable_here_without_importing_aiter(penv):
    """On this machine (CPU here, an H200 in the GPU run): unavailable, aiter never imported."""
    record, imported = penv.listed("aiter")
    assert record["state"] == "unavailable"
    assert record["reason"] == f"{provider.NEEDS}; found {current_platform().describe()}"
    assert "aiter" not in imported


@pytest.mark.slow
def test_active_on_gfx942_and_gfx950(penv):
    for arch in ("gfx942:sramecc+:xnack-", "gfx950"):
        result = penv.scenario("aiter", {**GFX942, "gcn_arch": arch})
        assert result["state"] == "active", result
        assert result["reason"].startswith(
            "implements rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding, "
            "rotary_embedding_query_only, static_quant_fp8, dynamic_quant_fp8, rms_norm_static_fp8_quant, "
            "fused_add_rms_norm_static_fp8_quant, silu_and_mul_static_quant_fp8, scaled_mm_fp8, "
            "block_scaled_mm_fp8 on ROCm"
        )
        assert "aiter" in result["imported"]


@pytest.mark.slow
def test_aiter_missing(penv, tmp_path):
    result = penv.scenario("aiter", GFX942, env={"PYTHONPATH": str(tmp_path)})  # no stand-in
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "AITER (pip install amd-aiter) is not installed: no module named 'aiter'",
    )


@pytest.mark.slow
def test_aiter_import_raising_runtime_error(penv, tmp_path):
    """AITER raises RuntimeError, not ImportError, where ROCm is missing: a reason, not a crash."""
    broken = tmp_path / "aiter"
    broken.mkdir()
    (broken / "__init__.py").write_text('raise RuntimeError("ROCm version file not found")\n')
    result = penv.scenario("aiter", GFX942, env={"PYTHONPATH": f"{tmp_path}"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "import aiter failed: RuntimeError: ROCm version file not found",
    )


@pytest.mark.slow
def test_newer_release_with_added_parameters_works(penv):
    """AITER's head after 0.1.7 added gemma_norm (7th) and limit: the six-positional call still fits."""
    result = penv.scenario("aiter", GFX942, env={"IRCORE_STANDIN_AITER_FORM": "head"}, conformance=True)
    assert result["state"] == "active", result
    assert "rms_norm: " in result["conformance"] and "silu_and_mul: " in result["conformance"]


@pytest.mark.slow
def test_changed_call_form_is_reported_not_called(penv):
    result = penv.scenario("aiter", GFX942, env={"IRCORE_STANDIN_AITER_FORM": "changed"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "aiter.rmsnorm2d_fwd_with_add takes (out, input, residual_in, residual_out, epsilon, weight); "
        "this provider calls it as (out, input, residual_in, residual_out, weight, epsilon) "
        "(supported: amd-aiter 0.1.7 to 0.1.20)",
    )


@pytest.mark.slow
def test_other_providers_are_untouched(penv):
    """Enabled or not, every other provider's state, ranks, implementations and order are the same."""
    with_aiter, without = penv.others("aiter", GFX942)
    assert with_aiter == without
    assert with_aiter[0]["triton"]["state"] == "active"  # someone else really is there to disturb
