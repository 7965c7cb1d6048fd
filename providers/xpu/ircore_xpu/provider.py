"""The module named by this distribution's ``ircore.providers`` entry point.

Cheap to import and safe anywhere: ``vllm_xpu_kernels._C`` (which needs a torch +xpu build and
Intel's Level Zero loader) and ``vllm_xpu_kernels._xpu_C`` (its oneDNN GEMMs) are imported only
by :func:`ircore_check_platform` on an XPU platform.
The implementations in :mod:`ircore_xpu.impls` are loaded by ircore after that check passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

import ircore
from ircore.kit import call_form_problem, import_vendor, torch_op

if TYPE_CHECKING:
    from ircore.platform import Platform

NEEDS = "needs an Intel GPU (torch.xpu) and vllm-xpu-kernels (pip install vllm-xpu-kernels)"
SUPPORTED = "supported: vllm-xpu-kernels 0.1.x"

#: ``torch.ops._C.<op>`` parameters this adapter passes, positionally (vllm-xpu-kernels 0.1.16:
#: ``rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon)``, the in-place
#: ``fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, float epsilon)``,
#: ``silu_and_mul(Tensor! result, Tensor input)``; earlier releases take a non-optional weight).
CALL_FORMS = {
    "rms_norm": ("result", "input", "weight", "epsilon"),
    "fused_add_rms_norm": ("input", "residual", "weight", "epsilon"),
    "silu_and_mul": ("result", "input"),
    "rotary_embedding": ("positions", "query", "key", "head_size", "cos_sin_cache", "is_neox"),
}

#: The gated activations' kernels and fused_qk_norm_rope, checked where the release has them
#: (each op's predicate declines every call where it does not; see impls.py).
OPTIONAL_CALL_FORMS = {
    "mul_and_silu": ("out", "input"),
    "gelu_and_mul": ("out", "input"),
    "gelu_tanh_and_mul": ("out", "input"),
    "fatrelu_and_mul": ("out", "input", "threshold"),
    "swigluoai_and_mul": ("out", "input", "alpha", "limit"),
    "fused_qk_norm_rope": (
        "qkv", "num_heads_q", "num_heads_k", "num_heads_v", "head_dim", "eps", "q_weight", "k_weight",
        "cos_sin_cache", "is_neox", "position_ids",
    ),
    "static_scaled_fp8_quant": ("result", "input", "scale"),
    "dynamic_per_token_scaled_fp8_quant": ("result", "input", "scale", "scale_ub"),
    "per_token_group_fp8_quant": (
        "input", "output_q", "output_s", "group_size", "eps", "fp8_min", "fp8_max", "scale_ue8m0"
    ),
    # the fused norm/activation + quant kernels (0.1.10 to 4543b58: unchanged)
    "rms_norm_static_fp8_quant": ("result", "input", "weight", "scale", "epsilon"),
    "fused_add_rms_norm_static_fp8_quant": (
        "result", "input", "residual", "weight", "scale", "epsilon"
    ),
    "rms_norm_dynamic_per_token_quant": (
        "result", "input", "weight", "scale", "epsilon", "scale_ub", "residual"
    ),
    "rms_norm_per_block_quant": (
        "result", "input", "weight", "scale", "epsilon", "scale_ub", "residual", "group_size",
        "is_scale_transposed",
    ),
    "silu_and_mul_quant": ("result", "input", "scale"),
    "silu_and_mul_per_block_quant": (
        "out", "input", "scales", "group_size", "scale_ub", "is_scale_transposed"
    ),
}

#: ``torch.ops._xpu_C.<op>`` (the extension ``vllm_xpu_kernels._xpu_C``, optional: a build
#: without it, or a release without the op, still serves everything else; scaled_mm.py).
XPU_C_CALL_FORMS = {
    "fp8_gemm": ("A", "B", "out_dtype", "A_scale_", "B_scale_", "bias_"),
}

NORM_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
ACT_OPS = ("gelu_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul")
#: Both rotary ops call ``torch.ops._C.rotary_embedding`` (in place; key=None for query-only);
#: fused_qk_norm_rope ``torch.ops._C.fused_qk_norm_rope`` (in place, optional per release).
ROPE_OPS = ("rotary_embedding", "rotary_embedding_query_only", "fused_qk_norm_rope")
#: fp8 quant through vllm-xpu-kernels' _C quant kernels, optional per release (see impls.py).
QUANT_OPS = ("static_quant_fp8", "dynamic_quant_fp8", "dynamic_group_quant_fp8")
#: Fused norm/activation + fp8 quant through the fused kernels, optional per release (impls.py).
FUSED_QUANT_OPS = (
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_group_quant_fp8",
)
#: The fp8 matmul through _xpu_C.fp8_gemm (oneDNN), optional per build and release (scaled_mm.py).
MATMUL_OPS = ("scaled_mm_fp8",)
OPS = NORM_OPS + ACT_OPS + ROPE_OPS + QUANT_OPS + FUSED_QUANT_OPS + MATMUL_OPS
#: Ahead of triton (20) on Intel GPUs: hand-written SYCL kernels (scaled_mm_fp8: oneDNN's GEMM).
#: Not measured by ircore.
DEFAULT_RANK = 10

# cache_by_signature: the predicates read devices, dtypes, dims, contiguity and unit last
# stride, facts of the call signature (see impls.py). fused_add_rms_norm works in place.
# The rotary predicates read strides other than the last and sizes other than the last (where
# positions put the tokens, where heads are): not signature facts, so no cache_by_signature.
_ROWS = {
    **ircore.impl_table(
        "ircore_xpu.impls",
        (*NORM_OPS, "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul"),
        inplace=("fused_add_rms_norm",),
        cache_by_signature=True,
        rank=DEFAULT_RANK,
    ),
    # gelu_and_mul's predicate reads ``approximate``, a str the signature cache cannot key on
    **ircore.impl_table("ircore_xpu.impls", ("gelu_and_mul",), cache_by_signature=False, rank=DEFAULT_RANK),
    **ircore.impl_table(
        "ircore_xpu.impls", ROPE_OPS, inplace=ROPE_OPS, cache_by_signature=False, rank=DEFAULT_RANK
    ),
    # The quant predicates read dtypes, dims, contiguity, the last dim and stride, the scale's
    # numel and group_shape (a list the signature cache cannot key on: not cached).
    # dynamic_group_quant_fp8's column-major scales: a fake that says so.
    **ircore.impl_table(
        "ircore_xpu.impls",
        QUANT_OPS,
        cache_by_signature=False,
        rank=DEFAULT_RANK,
        fakes=("dynamic_group_quant_fp8",),
    ),
    # The fused predicates read what the quant ones read, plus the weight's dtype and contiguity;
    # fp8_dtype and group_shape are not signature facts: not cached. The group ops' fakes give
    # column-major scales their strides.
    **ircore.impl_table(
        "ircore_xpu.impls",
        FUSED_QUANT_OPS,
        cache_by_signature=False,
        rank=DEFAULT_RANK,
        fakes=tuple(op for op in FUSED_QUANT_OPS if "group_quant" in op),
    ),
    # The matmul predicate reads strides other than the last and out_dtype, a dtype value: not
    # signature facts. No batch-invariance claim (oneDNN picks its kernels per shape).
    **ircore.impl_table("ircore_xpu.scaled_mm", MATMUL_OPS, cache_by_signature=False, rank=DEFAULT_RANK),
}
IRCORE_IMPLEMENTATIONS = {op: _ROWS[op] for op in OPS}  # in OPS's order (ircore list names them so)

_NAMESPACE_CLASH = (
    "torch.ops._C already belongs to another library, most likely vLLM's own extension (vllm._C), "
    "loaded before vllm_xpu_kernels._C: both register the torch namespace _C, which one library "
    "per process may own. On XPU load only vllm_xpu_kernels._C (vLLM's XPU platform never imports "
    "vllm._C); torch said: "
)


@ircore.hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None on XPU with vllm_xpu_kernels._C loaded and an XPU kernel of each op, else why not."""
    if platform.kind != "xpu":
        return f"{NEEDS}; found {platform.describe()}"
    loaded = import_vendor("vllm_xpu_kernels._C", needs="vllm-xpu-kernels (pip install vllm-xpu-kernels)")
    if isinstance(loaded, str):
        if "Only a single TORCH_LIBRARY" in loaded:
            return _NAMESPACE_CLASH + loaded.split(": ", 2)[-1]
        if "undefined symbol" in loaded:
            return (
                f"{loaded} (each vllm-xpu-kernels release is built for one torch +xpu version; "
                f"this is torch {torch.__version__})"
            )
        return loaded
    for name, expected in CALL_FORMS.items():
        op = torch_op("_C", name)
        if op is None:
            return f"vllm_xpu_kernels._C defines no torch.ops._C.{name} ({SUPPORTED})"
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"_C::{name}", "XPU"):
            return (
                f"torch.ops._C.{name} has no XPU kernel: the _C namespace holds another library's "
                "ops (vLLM's own _C?), not vllm-xpu-kernels'"
            )
        problem = call_form_problem(f"torch.ops._C.{name}", op, expected)
        if problem:
            return f"{problem} ({SUPPORTED})"
    problem = _optional_forms_problem("_C", OPTIONAL_CALL_FORMS)
    # Optional: a build without _xpu_C (XPU_SPECIFIC_KERNELS_ENABLED off) serves everything else,
    # and scaled_mm_fp8's predicate declines every call (scaled_mm.py).
    if problem is None:
        xpu_c = import_vendor("vllm_xpu_kernels._xpu_C", needs="vllm-xpu-kernels")
        if not isinstance(xpu_c, str):
            problem = _optional_forms_problem("_xpu_C", XPU_C_CALL_FORMS)
    return problem


def _optional_forms_problem(namespace: str, forms: dict[str, tuple[str, ...]]) -> str | None:
    """Why an op of ``forms`` that ``torch.ops.<namespace>`` defines has another call form than
    the adapters pass, or None: one the release does not define is no problem (its predicate
    declines)."""
    for name, expected in forms.items():
        op = torch_op(namespace, name)
        problem = op is not None and call_form_problem(f"torch.ops.{namespace}.{name}", op, expected)
        if problem:
            return f"{problem} ({SUPPORTED})"
    return None
