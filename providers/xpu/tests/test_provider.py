"""The distribution, the platform check's reasons (the ``_C`` namespace clash among them), and
what the provider leaves alone.

Subprocess scenarios run in fresh interpreters with the vllm-xpu-kernels STAND-IN importable
(see conftest.py): on this machine xpu must stay ``unavailable`` without importing it; on a
simulated Intel GPU each situation the stand-ins model is accepted or reported.
"""

from pathlib import Path

import pytest
import torch
from conftest import XPU
from ircore_xpu import provider

from ircore.platform import Platform, current_platform
from tests.provider_env import installed_distribution

PROJECT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_installs_as_a_real_distribution(tmp_path):
    dist = installed_distribution(PROJECT, tmp_path)
    assert dist.metadata["Name"] == "ircore-provider-xpu"
    assert "ircore<0.2,>=0.1" in dist.requires
    assert [(ep.name, ep.value) for ep in dist.entry_points if ep.group == "ircore.providers"] == [
        ("xpu", "ircore_xpu.provider")
    ]
    assert dist.metadata["License-Expression"] == "Apache-2.0"  # an SPDX expression (setuptools>=77)
    assert "pip install ircore-provider-xpu" in dist.metadata.get_payload()  # the README


@pytest.mark.parametrize(
    "platform, found",
    [
        (Platform("cpu", "cpu", "x86_64", None, "2.11.0"), "CPU (x86_64)"),
        (Platform("cuda", "cuda", "NVIDIA H200", (9, 0), "2.11.0"), "CUDA sm_90 (NVIDIA H200)"),
        (Platform("rocm", "cuda", "MI300X", (9, 4), "2.11.0", 1, "gfx942"), "ROCm gfx942 (MI300X)"),
    ],
    ids=["cpu", "h200", "mi300x"],
)
def test_reason_names_what_is_needed_and_what_was_found(platform, found):
    assert provider.ircore_check_platform(platform) == (
        f"needs an Intel GPU (torch.xpu) and vllm-xpu-kernels (pip install vllm-xpu-kernels); found {found}"
    )


@pytest.mark.slow
@pytest.mark.gpu
def test_unavailable_here_without_importing_the_kernels(penv):
    """On this machine (CPU here, an H200 in the GPU run): unavailable, vllm_xpu_kernels never imported."""
    record, imported = penv.listed("xpu")
    assert record["state"] == "unavailable"
    assert record["reason"] == f"{provider.NEEDS}; found {current_platform().describe()}"
    assert "vllm_xpu_kernels._C" not in imported


@pytest.mark.slow
def test_active_on_an_intel_gpu(penv):
    result = penv.scenario("xpu", XPU)
    assert result["state"] == "active", result
    assert result["reason"] == (
        "implements rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, mul_and_silu, fatrelu_and_mul, "
        "swigluoai_and_mul, rotary_embedding, rotary_embedding_query_only, fused_qk_norm_rope, static_quant_fp8, "
        "dynamic_quant_fp8, dynamic_group_quant_fp8, rms_norm_static_fp8_quant, fused_add_rms_norm_static_fp8_quant, "
        "rms_norm_dynamic_quant_fp8, fused_add_rms_norm_dynamic_quant_fp8, rms_norm_group_quant_fp8, "
        "fused_add_rms_norm_group_quant_fp8, silu_and_mul_static_quant_fp8, silu_and_mul_group_quant_fp8, "
        "scaled_mm_fp8 on XPU "
        "(stand-in Intel(R) Data Center GPU Max 1550)"
    )


@pytest.mark.slow
def test_package_missing(penv, tmp_path):
    result = penv.scenario("xpu", XPU, env={"PYTHONPATH": str(tmp_path)})  # no stand-in
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "vllm-xpu-kernels (pip install vllm-xpu-kernels) is not installed: no module named 'vllm_xpu_kernels'",
    )


@pytest.mark.slow
def test_extension_that_cannot_load(penv, tmp_path):
    """What a CPU or mismatched machine gets from the real wheel: the loader error, as the reason."""
    package = tmp_path / "vllm_xpu_kernels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_C.py").write_text(
        "raise ImportError('libze_loader.so.1: cannot open shared object file: No such file or directory')\n"
    )
    result = penv.scenario("xpu", XPU, env={"PYTHONPATH": str(tmp_path)})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "import vllm_xpu_kernels._C failed: ImportError: libze_loader.so.1: cannot open shared object file: "
        "No such file or directory",
    )
    (package / "_C.py").write_text("raise ImportError('_C.abi3.so: undefined symbol: _ZN3c104impl3cow11cow_deleterEPv')\n")
    result = penv.scenario("xpu", XPU, env={"PYTHONPATH": str(tmp_path)})
    assert result["reason"].endswith(
        f"(each vllm-xpu-kernels release is built for one torch +xpu version; this is torch {torch.__version__})"
    )


@pytest.mark.slow
def test_vllm_own_C_loaded_first_is_reported_as_the_namespace_clash(penv):
    # a process that loaded vLLM's own CUDA/CPU extension (its stand-in) before ircore
    result = penv.scenario("xpu", XPU, prelude="import vllm._C\n")
    assert result["state"] == "unavailable"
    assert result["reason"].startswith(
        "torch.ops._C already belongs to another library, most likely vLLM's own extension (vllm._C), "
        "loaded before vllm_xpu_kernels._C: both register the torch namespace _C, which one library "
        "per process may own. On XPU load only vllm_xpu_kernels._C (vLLM's XPU platform never imports "
        "vllm._C); torch said: Only a single TORCH_LIBRARY can be used to register the namespace _C"
    )


@pytest.mark.slow
def test_op_without_an_xpu_kernel_is_reported(penv):
    result = penv.scenario("xpu", XPU, env={"IRCORE_STANDIN_XPU_VARIANT": "no-xpu-kernel"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "torch.ops._C.rms_norm has no XPU kernel: the _C namespace holds another library's ops "
        "(vLLM's own _C?), not vllm-xpu-kernels'",
    )


@pytest.mark.slow
def test_changed_call_form_is_reported_not_called(penv):
    result = penv.scenario("xpu", XPU, env={"IRCORE_STANDIN_XPU_VARIANT": "changed"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "torch.ops._C.rms_norm takes (input, result, weight, epsilon); this provider calls it as "
        "(result, input, weight, epsilon) (supported: vllm-xpu-kernels 0.1.x)",
    )


@pytest.mark.slow
def test_build_without_xpu_C_serves_the_rest(penv):
    """vllm_xpu_kernels._xpu_C is optional (XPU_SPECIFIC_KERNELS_ENABLED): without it the provider
    is active, and scaled_mm_fp8's predicate declines every call (test_standin_matmul.py)."""
    result = penv.scenario("xpu", XPU, env={"IRCORE_STANDIN_XPU_VARIANT": "no-xpu-c"})
    assert result["state"] == "active", result


@pytest.mark.slow
def test_changed_xpu_C_call_form_is_reported_not_called(penv):
    result = penv.scenario("xpu", XPU, env={"IRCORE_STANDIN_XPU_VARIANT": "xpu-c-changed"})
    assert (result["state"], result["reason"]) == (
        "unavailable",
        "torch.ops._xpu_C.fp8_gemm takes (A, B, A_scale_, B_scale_, out_dtype, bias_); this provider calls "
        "it as (A, B, out_dtype, A_scale_, B_scale_, bias_) (supported: vllm-xpu-kernels 0.1.x)",
    )


@pytest.mark.slow
def test_release_with_required_weight_passes_ones(penv):
    """Releases before ``Tensor? weight``: weight=None becomes ones, and every sample still conforms."""
    result = penv.scenario("xpu", XPU, env={"IRCORE_STANDIN_XPU_VARIANT": "required-weight"}, conformance=True)
    assert result["state"] == "active", result
    assert "rms_norm: " in result["conformance"] and "fused_add_rms_norm: " in result["conformance"]


@pytest.mark.slow
def test_other_providers_are_untouched(penv):
    """Enabled or not, every other provider's state, ranks, implementations and order are the same."""
    with_xpu, without = penv.others("xpu", XPU)
    assert with_xpu == without
    assert with_xpu[0]["triton"]["state"] == "active"  # someone else really is there to disturb
