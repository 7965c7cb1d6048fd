"""The CUDA source compiles (nvcc, sm_90) even on a machine without a GPU or CUDA torch, and
every kernel is safe under programmatic dependent launch (its PTX waits before touching memory);
the fp8 quant kernels run on the host under tools/emulate_cuda_quant.py."""

import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import emulate_cuda_quant
from check_cuda_compile import compile_cuda_object
from ircore_vllm_c import kernels

from ircore.testing import pdl_problems

pytestmark = pytest.mark.slow  # nvcc builds for sm_90 (no GPU needed: CI runs it)


@pytest.mark.skipif(kernels.resolve_cuda_home() is None, reason="no CUDA toolkit (nvcc) on this machine")
def test_cuda_source_compiles_for_sm90(tmp_path):
    ok, log = compile_cuda_object(tmp_path, archs=("9.0",), keep_ptx=True)
    assert ok, log[-4000:]
    assert (tmp_path / "cuda_ops.o").stat().st_size > 0
    ptx = (tmp_path / "cuda_ops.ptx").read_text()
    assert ptx.count(".entry") > 100  # every kernel variant, checked below
    assert pdl_problems(ptx) == {}
    # per (dtype, cache dtype) pair (5): rope_kernel x (vector, scalar) x (cache, HF), and
    # fused_qk_norm_rope's lane-group kernel x (vector, element-wise) and its warp kernel
    rope = (tmp_path / "cuda_rope.ptx").read_text()
    assert rope.count(".entry") == 35 and pdl_problems(rope) == {}
    assert rope.count(".entry _ZN13ircore_vllm_c9cuda_rope11rope_kernel") == 20
    assert rope.count(".entry _ZN13ircore_vllm_c9cuda_rope25qk_norm_rope_group_kernel") == 10
    quant = (tmp_path / "cuda_quant.ptx").read_text()  # 4 sources x 3 dtypes
    assert quant.count(".entry") == 12 and pdl_problems(quant) == {}
    # the batch-invariant norms: 3 dtypes x (3 NV + loop) x 2 (fused), 3 x 4 gated, 3 layer_norm
    inv = (tmp_path / "cuda_norm_invariant.ptx").read_text()
    assert inv.count(".entry") == 39 and pdl_problems(inv) == {}


@pytest.mark.skipif(
    kernels.resolve_cuda_home() is None or shutil.which("g++") is None,
    reason="no CUDA toolkit headers or no g++ on this machine",
)
def test_quant_kernels_emulated_on_the_host(tmp_path):
    """cuda_quant.cu run on the host (tools/emulate_cuda_quant.py quick: one case per path, ~5 s):
    the teams' and lanes' indexing, ragged ends, the resident and two-pass paths, the shared
    memory of the fused sources and the scale addresses, bit for bit against the reference (the
    only check of the kernels' addressing on a machine without a GPU)."""
    rc, log = emulate_cuda_quant.run(quick=True, out=tmp_path)
    assert rc == 0, log[-4000:]
    ran = re.search(r"(\d+) of (\d+) cases failed", log)
    assert ran is not None and ran[1] == "0" and int(ran[2]) >= 50, log[-4000:]
