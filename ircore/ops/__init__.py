"""The op library: each op is declared by its native semantics (see the op's docstring).

``ircore.ops.rms_norm(x, weight, eps)`` runs the best implementation available for the call. Ops
that installed distributions declare (op libraries, the ``ircore.ops`` entry point group) are
``ircore.ops.<name>`` too, loaded on first use.
"""

from typing import Any

from ircore.ops._activation import (
    fatrelu_and_mul,
    gelu_and_mul,
    mul_and_silu,
    silu_and_mul,
    swigluoai_and_mul,
)
from ircore.ops._gated_norm import rms_norm_gated
from ircore.ops._layer_norm import layer_norm
from ircore.ops._norm import fused_add_rms_norm, rms_norm
from ircore.ops._norm_quant import (
    fused_add_rms_norm_dynamic_quant_fp8,
    fused_add_rms_norm_group_quant_fp8,
    fused_add_rms_norm_static_fp8_quant,
    rms_norm_dynamic_quant_fp8,
    rms_norm_group_quant_fp8,
    rms_norm_static_fp8_quant,
    silu_and_mul_group_quant_fp8,
    silu_and_mul_static_quant_fp8,
)
from ircore.ops._quant import (
    dynamic_group_quant_fp8,
    dynamic_quant_fp8,
    static_group_quant_fp8,
    static_quant_fp8,
)
from ircore.ops._rope_embedding import rotary_embedding, rotary_embedding_query_only
from ircore.ops._rope_hf import rotary_pos_emb
from ircore.ops._rope_qk_norm import fused_qk_norm_rope
from ircore.ops._scaled_mm import block_scaled_mm_fp8, scaled_mm_fp8

__all__ = [
    "block_scaled_mm_fp8",
    "dynamic_group_quant_fp8",
    "dynamic_quant_fp8",
    "fatrelu_and_mul",
    "fused_add_rms_norm",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "fused_add_rms_norm_static_fp8_quant",
    "fused_qk_norm_rope",
    "gelu_and_mul",
    "layer_norm",
    "mul_and_silu",
    "rms_norm",
    "rms_norm_dynamic_quant_fp8",
    "rms_norm_gated",
    "rms_norm_group_quant_fp8",
    "rms_norm_static_fp8_quant",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_pos_emb",
    "scaled_mm_fp8",
    "silu_and_mul",
    "silu_and_mul_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
    "static_group_quant_fp8",
    "static_quant_fp8",
    "swigluoai_and_mul",
]


def __getattr__(name: str) -> Any:
    """An op declared elsewhere (an op library, or ``ircore.register_op``), by its name."""
    from ircore._state import STATE

    if name.startswith("__"):  # not an op: a module attribute Python itself looks for
        raise AttributeError(f"module 'ircore.ops' has no attribute {name!r}")
    if name not in STATE.ops:
        STATE.providers.ensure_loaded()  # op libraries declare theirs when loaded
    if name in STATE.ops:
        return STATE.ops[name]
    raise AttributeError(f"ircore.ops has no op {name!r}; known ops: {sorted(STATE.ops)}")
