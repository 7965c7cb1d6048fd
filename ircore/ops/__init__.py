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
from ircore.ops._rope import fused_qk_norm_rope, rotary_embedding, rotary_embedding_query_only, rotary_pos_emb

__all__ = [
    "fatrelu_and_mul",
    "fused_add_rms_norm",
    "fused_qk_norm_rope",
    "gelu_and_mul",
    "layer_norm",
    "mul_and_silu",
    "rms_norm",
    "rms_norm_gated",
    "rotary_embedding",
    "rotary_embedding_query_only",
    "rotary_pos_emb",
    "silu_and_mul",
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
