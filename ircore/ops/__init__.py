"""The op library: each op is declared by its native semantics (see the op's docstring).

``ircore.ops.rms_norm(x, weight, eps)`` runs the best implementation available for the call.
"""

from ircore.ops._activation import silu_and_mul
from ircore.ops._norm import fused_add_rms_norm, rms_norm

__all__ = ["rms_norm", "fused_add_rms_norm", "silu_and_mul"]
