"""The forwards ircore puts in place of a model's RMSNorm and gated-MLP forwards.

Shared by ``apply`` (bound on instances), ``apply_to_classes`` (set on classes) and the
``kernels`` layer (copied onto instances by ``kernels.kernelize``). Each carries a mark, so that
``undo`` and a second ``apply`` recognise it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from ircore.integrations._merge import current
from ircore.ops import rms_norm, silu_and_mul

_MARK = "__ircore_patch__"


def patch_of(forward: Any) -> str | None:
    """``"rms_norm"``/``"mlp"`` if ``forward`` (a function or bound method) is one of ours."""
    return getattr(getattr(forward, "__func__", forward), _MARK, None)


def norm_forward(
    original: Callable[..., Any], on_own_forward: Callable[[Any, torch.Tensor], None] | None = None
) -> Callable[..., Any]:
    """An RMSNorm forward calling ``ircore.ops.rms_norm``; ``original(self, x)`` where dtypes differ.

    The known forms give the values of ``rms_norm`` (within its tolerance) when the weight has
    the input's dtype. Otherwise the Llama form's output dtype follows the weight (fp32 weight,
    bf16 input: fp32 out) where ``rms_norm`` keeps the input's: the module's own forward runs,
    and ``on_own_forward(self, x)`` is told (``apply`` records it in its summary).
    """

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype != hidden_states.dtype:
            if on_own_forward is not None:
                on_own_forward(self, hidden_states)
            return original(self, hidden_states)
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

    setattr(forward, _MARK, "rms_norm")
    return forward


def _gate_up_needs_grad(module: Any) -> bool:
    gate, up = module._modules["gate_proj"], module._modules["up_proj"]
    params = (gate.weight, gate.bias, up.weight, up.bias)
    return any(p is not None and p.requires_grad for p in params)


def mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` as one matmul over the merged weights and ``silu_and_mul``.

    Always with gate's and up's weights as they are now (``_merge.current``). The module's own
    forward runs where autograd needs gate's and up's gradients (grad mode on, a parameter that
    requires grad), and where they can no longer be merged. Under ``torch.compile`` the traced
    graph has no merged weight (a graph could not check that it is current): gate and up run as
    two matmuls into one ``[gate | up]`` tensor, then ``silu_and_mul``.
    """
    if torch.compiler.is_compiling():
        gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
        return self.down_proj(silu_and_mul(gate_up))
    if torch.is_grad_enabled() and _gate_up_needs_grad(self):
        return type(self).forward(self, x)
    merged = current(self)
    if merged is None:
        return type(self).forward(self, x)
    return self.down_proj(silu_and_mul(F.linear(x, merged[0], merged[1])))


setattr(mlp_forward, _MARK, "mlp")
