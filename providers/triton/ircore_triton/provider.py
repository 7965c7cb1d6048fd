"""The module named by this distribution's ``ircore.providers`` entry point.

Importing it stays light: triton and the kernels load only when ircore registers the
implementations declared in :data:`IRCORE_IMPLEMENTATIONS` (after :func:`ircore_check_platform`
passed), so a machine without a GPU or without triton sees the provider ``unavailable`` with a
reason instead of an import failure.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import ircore

if TYPE_CHECKING:
    from ircore.platform import Platform

_GPU_KINDS = ("cuda", "rocm", "xpu")
_MIN_TRITON = (3, 4)  # the range declared in the "triton" extra; tested on 3.6
OPS = (
    "rms_norm",
    "fused_add_rms_norm",
    "silu_and_mul",
    "rms_norm_gated",
    "layer_norm",
    "gelu_and_mul",
    "mul_and_silu",
    "fatrelu_and_mul",
    "swigluoai_and_mul",
)
# The position ops (rope_kernels.py): in place, predicates that read strides (not cached).
ROPE_OPS = ("rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb", "fused_qk_norm_rope")

# Rank 20 everywhere: behind vllm_c (rank 10) on NVIDIA GPUs and CPUs, first elsewhere.
# H200, 2026-12-02 run 3 (benchmarks/README.md, "Earlier runs": section 3; bf16+fp16, 24 shapes
# per op), vllm_c's time over triton's, geometric mean. Eager calls (do_bench, launch included):
# 0.81 rms_norm, 0.81 fused_add_rms_norm, 0.49 silu_and_mul -- Triton's Python launch costs
# 5-27 us. Kernel time (CUDA-graph replay): 0.99-1.01 at T >= 1024; at T <= 128 triton is
# 0.1-0.3 us faster (1.08, 1.10, 1.02). vllm_c's norms were 1.17-1.66x slower before its
# kernels kept two to four loads in flight per thread; run 2 put triton first for the norms on
# that measurement.
DEFAULT_RANK = 20

# fused_add_rms_norm works in place (the core clones if needed). cache_by_signature: the
# predicates read only devices, dtypes and last-dimension layout (see impls.py), facts of the
# call signature, so ircore may ask once per signature.
# The fp8 matmuls take a dtype argument and their predicates read block_size: no signature cache.
MATMUL_OPS = ("scaled_mm_fp8", "block_scaled_mm_fp8")

# The fp8 quant ops and the fused norm/act + quant ops (quant_kernels.py): each row's scale and
# values come from that row alone (one program per row, or, for the static and plain group forms,
# chunks of it tuned per row bucket that give the whole row's bits): batch-invariant as they are.
# The fused norm + quant ops (NORM_QUANT_OPS) walk wide rows in chunks where the autotune picks it
# per row bucket, their sum of squares in another order than the whole row's: batch-invariant
# through variants with the whole row fixed per hidden size (invariant_kernels.py). The calls that
# depend on the batch by definition (per-tensor dynamic scales) are refused by the ops. The
# predicates read the fp8_dtype and group_shape arguments: no signature cache.
QUANT_OPS = (
    "static_quant_fp8",
    "static_group_quant_fp8",
    "dynamic_quant_fp8",
    "dynamic_group_quant_fp8",
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_group_quant_fp8",
)
NORM_QUANT_OPS = tuple(op for op in QUANT_OPS if "rms_norm" in op)

# Batch invariance: the norms and silu_and_mul; rms_norm, fused_add_rms_norm, rms_norm_gated and
# the fused norm + quant ops through their invariant variants (a launch fixed per hidden size,
# invariant_kernels.py), whose default launch is tuned per row-count bucket; the position ops as
# they are; the fp8 matmuls through variants with one launch config for every M. The matmul layer
# of ircore.batch_invariant(matmul=True): matmul_layer.py.
IRCORE_IMPLEMENTATIONS = {
    **ircore.impl_table(
        "ircore_triton.impls",
        OPS,
        inplace=("fused_add_rms_norm",),
        cache_by_signature=True,
        rank=DEFAULT_RANK,
        batch_invariant=True,
        invariant_fns=("rms_norm", "fused_add_rms_norm", "rms_norm_gated"),
    ),
    **ircore.impl_table(
        "ircore_triton.impls",
        ROPE_OPS,
        inplace=ROPE_OPS,
        cache_by_signature=False,
        rank=DEFAULT_RANK,
        batch_invariant=True,  # one program per token (and head): no row reads another
    ),
    **ircore.impl_table(
        "ircore_triton.impls",
        MATMUL_OPS,
        rank=DEFAULT_RANK,
        batch_invariant=True,  # through <op>_invariant: one launch config for every M, no split of K
        invariant_fns=MATMUL_OPS,
    ),
    **ircore.impl_table(
        "ircore_triton.impls",
        QUANT_OPS,
        cache_by_signature=False,
        rank=DEFAULT_RANK,
        batch_invariant=True,  # per row; the norm forms through <op>_invariant (the whole row)
        invariant_fns=NORM_QUANT_OPS,
    ),
}
IRCORE_MATMUL_LAYER = "ircore_triton.matmul_layer:LAYER"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for p in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@ircore.hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None where triton imports and the platform is a CUDA, ROCm or XPU GPU, else why not.

    Under Triton's CPU interpreter (``TRITON_INTERPRET=1``, for tests: ``ircore verify`` and the
    conformance tests on a machine without a GPU) the CPU counts as a Triton device.
    """
    if platform.kind not in _GPU_KINDS and not _interpreting():
        return f"no GPU: Triton kernels need a CUDA, ROCm or XPU device; found {platform.describe()}"
    try:
        import triton
    except ImportError as e:
        return f"needs the triton package: {e}"
    version = getattr(triton, "__version__", "0")
    if _version_tuple(version) < _MIN_TRITON:
        return f"needs triton>={'.'.join(map(str, _MIN_TRITON))}; found triton {version}"
    return None
