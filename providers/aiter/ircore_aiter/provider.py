"""The module named by this distribution's ``ircore.providers`` entry point.

Cheap to import and safe anywhere: ``aiter`` is imported only by :func:`ircore_check_platform`,
and only on a ROCm platform with a GPU AITER supports (its import raises ``RuntimeError``, not
``ImportError``, on machines without ROCm). The implementations in :mod:`ircore_aiter.impls`
are loaded by ircore after that check passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ircore
from ircore.kit import call_form_problem, import_vendor, torch_op

if TYPE_CHECKING:
    from ircore.platform import Platform

#: Instinct architectures AITER's norm and activation kernels are built and tuned for: CDNA3
#: (MI300X/MI325X) and CDNA4 (MI350X/MI355X). vLLM keeps gfx90a (CDNA2) off AITER's rmsnorm
#: ("AITER not built for gfx90a, rmsnorm -> SEGV"); RDNA GPUs are not Instinct parts.
SUPPORTED_ARCHS = ("gfx942", "gfx950")
NEEDS = (
    "needs an AMD Instinct GPU with ROCm (CDNA3/CDNA4: gfx942, gfx950) and AITER (pip install amd-aiter)"
)

#: The call forms this adapter uses: the leading parameters it passes, positionally. They hold
#: for amd-aiter 0.1.7 through 0.1.20 (HEAD of 2026-08 added ``gemma_norm`` as the 7th parameter
#: of rmsnorm2d_fwd_with_add and ``limit`` to silu_and_mul, both with defaults, so exactly these
#: parameters are passed and nothing by keyword).
CALL_FORMS = {
    "rms_norm": ("input", "weight", "epsilon"),
    "rmsnorm2d_fwd_with_add": ("out", "input", "residual_in", "residual_out", "weight", "epsilon"),
    "silu_and_mul": ("out", "input"),
    "rope_cached_positions_2c_fwd_inplace": (
        "input_x", "input_y", "cos", "sin", "positions", "rotate_style", "reuse_freqs_front_part",
        "nope_first",
    ),
    "rope_cached_positions_fwd_inplace": (
        "input", "cos", "sin", "positions", "rotate_style", "reuse_freqs_front_part", "nope_first"
    ),
}
#: Checked where the release has it (the quant ops' predicates decline every call where it does
#: not): read at AITER's head of 2026, not verified in the 0.1.7 wheel.
#: The fp8 GEMMs: read at AITER's head and at every tag from v0.1.7.post2 to v0.1.20.post1 with
#: these parameters (scaled_mm.py); optional all the same, as the quant kernel.
OPTIONAL_CALL_FORMS = {
    "static_per_tensor_quant": ("out", "input", "scale"),
    "gemm_a8w8_blockscale": ("XQ", "WQ", "x_scale", "w_scale", "dtype"),
    "gemm_a8w8": ("XQ", "WQ", "x_scale", "w_scale", "bias", "dtype"),
}

NORM_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
#: In place through AITER's HIP sbhd RoPE kernels (see impls.py).
ROPE_OPS = ("rotary_embedding", "rotary_embedding_query_only")
#: fp8 quant through the HIP static_per_tensor_quant kernel (see impls.py: which calls and
#: fp8 dtypes, and why AITER's dynamic kernels are not used).
QUANT_OPS = ("static_quant_fp8", "dynamic_quant_fp8")
#: Fused norm/activation + static fp8 quant through AITER's Triton wrappers (see impls.py: e4m3fn
#: on gfx950 only; why AITER's dynamic and group fused kernels are not used).
FUSED_QUANT_OPS = (
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "silu_and_mul_static_quant_fp8",
)
#: The fp8 matmuls through AITER's CK GEMMs (see scaled_mm.py: the arch's fp8, bf16/fp16 outputs,
#: 128 x 128 blocks, the layouts the kernels read).
MATMUL_OPS = ("scaled_mm_fp8", "block_scaled_mm_fp8")
OPS = NORM_OPS + ROPE_OPS + QUANT_OPS + FUSED_QUANT_OPS + MATMUL_OPS
#: Ahead of vllm_c (10) and triton (20) on the GPUs this provider runs on. The norms first (vLLM
#: puts AITER's rmsnorm first on ROCm under CUDA graphs); silu_and_mul after the norms' rank
#: but still ahead of triton. Not measured by ircore (no ROCm machine).
#: The rotary ops as silu_and_mul: ahead of triton, behind nothing measured. The quant ops too
#: (one HIP kernel pass, plus a torch reduction for per-tensor dynamic; not measured). The fp8
#: matmuls too: ahead of triton's (20); not measured.
RANKS = {
    "rms_norm": 5,
    "fused_add_rms_norm": 5,
    "silu_and_mul": 15,
    "rotary_embedding": 15,
    "rotary_embedding_query_only": 15,
    "static_quant_fp8": 15,
    "dynamic_quant_fp8": 15,
    "rms_norm_static_fp8_quant": 15,
    "fused_add_rms_norm_static_fp8_quant": 15,
    "silu_and_mul_static_quant_fp8": 15,
    "scaled_mm_fp8": 15,
    "block_scaled_mm_fp8": 15,
}

# cache_by_signature: the predicates read devices, dtypes, dims, contiguity, unit last stride
# and the last dimension's size: facts of the call signature (see impls.py).
# The rotary predicates read how many token dimensions there are and every stride: not signature
# facts, so no cache_by_signature for them.
IRCORE_IMPLEMENTATIONS = {
    **ircore.impl_table("ircore_aiter.impls", NORM_OPS, cache_by_signature=True, rank=RANKS),
    **ircore.impl_table(
        "ircore_aiter.impls", ROPE_OPS, inplace=ROPE_OPS, cache_by_signature=False, rank=RANKS
    ),
    # The quant predicates read dtypes, contiguity, the last dim, the scale's numel and the
    # platform's arch, and the fp8_dtype argument, which a call signature does not hold (the
    # signature helper knows tensors, ints, floats and bools): not cached by signature.
    **ircore.impl_table("ircore_aiter.impls", QUANT_OPS, cache_by_signature=False, rank=RANKS),
    # The fused predicates read the same facts plus the weight's and residual's contiguity.
    **ircore.impl_table("ircore_aiter.impls", FUSED_QUANT_OPS, cache_by_signature=False, rank=RANKS),
    # The matmul predicates read block_size's values and out_dtype, a dtype value: not signature
    # facts. No batch-invariance claim (CK's split-K and tiles are chosen per shape, M included).
    **ircore.impl_table("ircore_aiter.scaled_mm", MATMUL_OPS, cache_by_signature=False, rank=RANKS),
}


def _arch(platform: Platform) -> str:
    return (platform.gcn_arch or "").split(":")[0]


@ircore.hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None on ROCm gfx942/gfx950 with an importable AITER of a supported call form, else why not."""
    if platform.kind != "rocm" or _arch(platform) not in SUPPORTED_ARCHS:
        return f"{NEEDS}; found {platform.describe()}"
    aiter = import_vendor("aiter", needs="AITER (pip install amd-aiter)")
    if isinstance(aiter, str):
        return aiter
    for name, expected in CALL_FORMS.items():
        fn = getattr(aiter, name, None)
        if fn is None:
            return f"this AITER has no aiter.{name} (supported: amd-aiter 0.1.7 to 0.1.20)"
        # the public functions are (*args, **kwargs) wrappers; the torch op keeps the parameters
        problem = call_form_problem(f"aiter.{name}", torch_op("aiter", name) or fn, expected)
        if problem:
            return f"{problem} (supported: amd-aiter 0.1.7 to 0.1.20)"
    for name, expected in OPTIONAL_CALL_FORMS.items():
        fn = getattr(aiter, name, None)
        op = torch_op("aiter", name) or fn
        problem = fn is not None and call_form_problem(f"aiter.{name}", op, expected)
        if problem:
            return f"{problem} (supported: amd-aiter 0.1.7 to 0.1.20)"
    return None
