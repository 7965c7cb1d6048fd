"""The forwards ircore puts in place of a model's RMSNorm and gated-MLP forwards.

Shared by ``apply`` (bound on instances), ``apply_to_classes`` (set on classes) and the
``kernels`` layer (copied onto instances by ``kernels.kernelize``). Each carries a mark, so that
``undo`` and a second ``apply`` recognise it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ircore.ops import rms_norm, silu_and_mul

_MARK = "__ircore_patch__"
#: Attribute names of the merged gate/up projection (non-persistent buffers: not in state_dict).
GATE_UP_WEIGHT = "ircore_gate_up_weight"
GATE_UP_BIAS = "ircore_gate_up_bias"


def patch_of(forward: Any) -> str | None:
    """``"rms_norm"``/``"mlp"`` if ``forward`` (a function or bound method) is one of ours."""
    return getattr(getattr(forward, "__func__", forward), _MARK, None)


def norm_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """An RMSNorm forward calling ``ircore.ops.rms_norm``; ``original(self, x)`` where dtypes differ.

    The known forms give the values of ``rms_norm`` (within its tolerance) when the weight has
    the input's dtype. Otherwise the Llama form's output dtype follows the weight (fp32 weight,
    bf16 input: fp32 out) where ``rms_norm`` keeps the input's: the module's own forward runs.
    """

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype != hidden_states.dtype:
            return original(self, hidden_states)
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

    setattr(forward, _MARK, "rms_norm")
    return forward


def mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` as one matmul over the merged weights and ``silu_and_mul``."""
    gate_up = F.linear(x, getattr(self, GATE_UP_WEIGHT), getattr(self, GATE_UP_BIAS))
    return self.down_proj(silu_and_mul(gate_up))


setattr(mlp_forward, _MARK, "mlp")


def merge_gate_up(module: nn.Module) -> None:
    """One ``[gate; up]`` weight; gate's and up's parameters become views of it (no extra memory).

    The parameters stay the same objects with the same values, so ``state_dict`` and loading
    into them keep working; the merged tensors are non-persistent buffers, so ``.to()`` moves
    them with the model (each converted on its own: the views become copies, memory doubles).
    """
    gate: Any = module.gate_proj
    up: Any = module.up_proj
    with torch.no_grad():
        for param, buffer in (("weight", GATE_UP_WEIGHT), ("bias", GATE_UP_BIAS)):
            g, u = getattr(gate, param), getattr(up, param)
            if g is None:
                module.register_buffer(buffer, None, persistent=False)
                continue
            merged = torch.cat([g.detach(), u.detach()], dim=0)
            g.data, u.data = merged[: g.shape[0]], merged[g.shape[0] :]
            module.register_buffer(buffer, merged, persistent=False)


def split_gate_up(module: nn.Module) -> None:
    """Gate and up get their own storage again (as loaded), and the merged buffers go."""
    with torch.no_grad():
        layers: tuple[Any, ...] = (module.gate_proj, module.up_proj)
        for layer in layers:
            for param in (layer.weight, layer.bias):
                if param is not None:
                    param.data = param.data.clone()
    for buffer in (GATE_UP_WEIGHT, GATE_UP_BIAS):
        module._buffers.pop(buffer, None)
