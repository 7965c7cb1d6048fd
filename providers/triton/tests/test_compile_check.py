"""Compile the autotune's bf16 configs for sm_90 with Triton's real backend, on any machine.

The interpreter tests never compile the kernels; this catches compile failures, register
spills (stack frame included) and a global access before the PDL wait in the configs the H200 will try
(tools/compile_check.py --quick, about 5 s).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # ptxas builds in fresh interpreters (no GPU needed: CI runs them)

TOOL = Path(__file__).resolve().parents[1] / "tools" / "compile_check.py"


def _has_cuda_backend() -> bool:
    import importlib.util

    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        return False
    ptxas = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
    return ptxas.exists()


@pytest.mark.skipif(not _has_cuda_backend(), reason="this triton has no CUDA backend with ptxas")
def test_compile_sm90_quick() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(TOOL), "--quick", "--arch", "90"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 failed, spilling or unordered" in proc.stdout
    assert " ok\n" in proc.stdout  # the PDL column was checked, not skipped
    assert "silu_and_mul_group_quant_fp8 g128 block 512 bf16" in proc.stdout  # the quant row-split candidates
    assert "fused_add_rms_norm_group_quant_fp8 g128 chunk 2048 bf16" in proc.stdout  # the norm forms' chunks
    # the norm forms' persistent launch and rstd pre-pass + split (their layouts checked against the whole row's)
    assert "fused_add_rms_norm_group_quant_fp8 g128 persist 1 bf16" in proc.stdout
    assert "fused_add_rms_norm_group_quant_fp8 g128 rstd pre-pass bf16" in proc.stdout
    assert "fused_add_rms_norm_group_quant_fp8 g128 rstd-split block 512 bf16" in proc.stdout


@pytest.mark.skipif(not _has_cuda_backend(), reason="this triton has no CUDA backend with ptxas")
def test_compile_check_sees_spills() -> None:
    """The spill column is not blind: a row of 8192 bf16 on four warps squeezed into 32 registers
    per thread (ptxas maxnreg) spills to the stack, and the tool reports it; unsqueezed it does not.
    """
    script = f"""
import sys, torch
sys.path.insert(0, {str(TOOL.parent)!r})
import compile_check as cc
src = cc.norm_source(8192, torch.bfloat16, False, 90, 1, 8192)
print(cc._compile(src, 90, 4)["spill"], cc._compile(src, 90, 4, maxnreg=32)["spill"])
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    natural, squeezed = map(int, proc.stdout.split())
    assert natural == 0
    assert squeezed > 0


@pytest.mark.skipif(not _has_cuda_backend(), reason="this triton has no CUDA backend with ptxas")
def test_compile_check_sees_reduction_layouts() -> None:
    """The layout guard of the persistent and rstd pre-pass launches is not blind: the persistent
    loop on the whole row's warps lays out its reductions as the whole row (what the same bits
    rest on), on twice the warps it does not; the pre-pass's sum of squares is the whole row's."""
    script = f"""
import sys, torch
sys.path.insert(0, {str(TOOL.parent)!r})
import compile_check as cc
from ircore_triton import quant_kernels as Q
from ircore_triton.kernels import QuantConfig
v = [v for v in cc.QUANT_VARIANTS if v[0] == "fused_add_rms_norm_group_quant_fp8 g128"][0]
h = Q.heuristic(8192, 128, 2)
def red(cfg=None, prepass=False):
    _, src, w = cc.quant_source(v, 8192, torch.bfloat16, 90, cfg, prepass)
    return cc._compile(src, 90, w)["reduce"]
whole = red()
print(red(QuantConfig(h.block, h.num_warps, 1)) == whole, red(QuantConfig(h.block, 2 * h.num_warps, 1)) == whole,
      red(prepass=True)[:2] == whole[:2], len(whole))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "False", "True", "4"]  # the sum of squares (2), the group amax (2)
