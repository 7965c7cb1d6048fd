"""The module named by this distribution's ``ircore.providers`` entry point.

Importing it is cheap and safe: the kernels are loaded (and built on first use) inside
:func:`ircore_check_platform`, which turns any failure into the one-line reason ircore shows
for an ``unavailable`` provider; the implementations are declared as data in
:data:`IRCORE_IMPLEMENTATIONS`, whose ``impls`` module is imported only after that check passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ircore

if TYPE_CHECKING:
    from ircore.platform import Platform

_KINDS = ("cpu", "cuda")
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
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_pos_emb",
    "fused_qk_norm_rope",
)
# In place: the kernels write their outputs into these ops' in-place arguments.
INPLACE = (
    "fused_add_rms_norm",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_pos_emb",
    "fused_qk_norm_rope",
)
# Hand-written kernels ahead of generic ones (triton: 20) on CPU and CUDA, the only platforms
# where this provider is available. The INPLACE ops work in place (the core clones if needed).
# cache_by_signature: the predicates read only devices, dtypes, dims, shapes and ints (see
# impls.py), facts of the call signature, so ircore may ask once per signature.
DEFAULT_RANK = 10

# The fp8 matmuls call torch._scaled_mm (cuBLASLt) on CUDA, behind predicates that decline every
# call it computes wrong or was not measured on (scaled_mm.py); their predicates read values of
# the call (block_size) beyond its signature, and the ops take a dtype: no signature cache. On CUDA
# they claim no batch invariance (cuBLAS picks its split by M). Both also have a CPU kernel
# (csrc/cpu_fp8_mm.cpp; scaled_mm_fp8 as one K group) for every CPU call, whose sums have one
# order whatever the batch: block_scaled_mm_fp8 claims it on the CPU only, by a predicate.
# scaled_mm_fp8 claims nothing: the conformance kit could not check it (its first sample has
# M = 1, where scale_b [1, N] reads as a row argument and the kit's batches of it are invalid).
MATMUL_OPS = ("scaled_mm_fp8", "block_scaled_mm_fp8")
#: The matmuls with a CPU kernel.
CPU_MATMUL_OPS = MATMUL_OPS

# Batch invariance: the activations are elementwise and the position ops computed per token (and
# fused_qk_norm_rope's norm per head of a token), on every device; the norms through their
# invariant variants (impls.py: the default kernels on CPU, the launches fixed per hidden size of
# csrc/cuda_norm_invariant.cu on CUDA, whose default launches depend on the row count).
NORMS = ("rms_norm", "fused_add_rms_norm", "rms_norm_gated", "layer_norm")
BATCH_INVARIANT = dict.fromkeys(OPS, True)

# FP8 quantisation and the fused norm/activation + quant ops: CPU and CUDA kernels (impls.py says
# what they take). Their predicates read fp8_dtype, a dtype value: no signature cache. Batch
# invariance: every CUDA kernel is one block per row whose threads depend on the row length only,
# every CPU kernel computes each row in one thread; the per-tensor dynamic forms (per_token=False)
# are claimed not (impls.py).
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
# Rank 30 for them: behind triton's (20) where both serve (NVIDIA GPUs), alone on the CPU (triton
# is unavailable there). Measured (benchmarks/README.md, 3e; H100, 2026-12-05, CUDA-graph replay,
# bf16, T = 1..32768, H = 4096 / 14336): these CUDA kernels slower than triton's at all 144 rows,
# geomean 1.98x (1.01-6.1x), 30-94% of copy bandwidth at T >= 8192 where triton's reach 54-102%.
# An eager call's lower launch cost (the reason the other ops rank vllm_c first) buys back at most
# the few us of the small rows; at T >= 1024 the kernel alone is 1.04-2.5x triton's.
QUANT_RANK = 30
IRCORE_IMPLEMENTATIONS = {
    **ircore.impl_table(
        "ircore_vllm_c.impls",
        OPS,
        inplace=INPLACE,
        cache_by_signature=True,
        rank=DEFAULT_RANK,
        batch_invariant=BATCH_INVARIANT,
        invariant_fns=NORMS,
    ),
    **ircore.impl_table(
        "ircore_vllm_c.scaled_mm",
        MATMUL_OPS,
        rank=DEFAULT_RANK,
        batch_invariant={
            "block_scaled_mm_fp8": "ircore_vllm_c.scaled_mm:block_scaled_mm_fp8_batch_invariant"
        },
    ),
    **ircore.impl_table(
        "ircore_vllm_c.impls",
        QUANT_OPS,
        cache_by_signature=False,
        rank=QUANT_RANK,
        # CUDA: one block per row, its threads fixed by the row length; CPU: one thread per row;
        # each row's reductions are its own (per-tensor dynamic calls depend on the batch by
        # definition: the ops refuse them)
        batch_invariant=True,
    ),
}


@ircore.hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None on a CPU or NVIDIA GPU platform where the kernels load; otherwise why not."""
    if platform.kind not in _KINDS:
        return f"needs an NVIDIA GPU or a CPU; found {platform.describe()}"
    from . import kernels

    return kernels.load_kernels(cuda=platform.kind == "cuda")
