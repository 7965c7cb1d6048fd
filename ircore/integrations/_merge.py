"""The merged ``[gate; up]`` weight of a gated MLP, kept equal to the gate and up parameters.

:func:`merge` concatenates gate's and up's weights (and biases) into one tensor and points the
two parameters' data at its halves: they become views of it, so no second copy is kept, and a
write into a parameter in place (``load_state_dict``, ``param.copy_``, an init function) is a write
into the merged tensor. Anything that gives a parameter new storage (``.to()``, ``.cuda()``,
``param.data = ...``, ``load_state_dict(assign=True)``, an offload hook swapping the parameter)
breaks the views; :func:`current` sees it in O(1), by comparing the parameters' data pointers with
the merged tensor's, and merges again from the parameters as they are now. Where they can no
longer be merged (a hook on ``gate_proj``, weights on the meta device, ...), it says why, once, in
a warning, and the caller runs the module's own forward.

The merged tensors are non-persistent buffers (not in ``state_dict``); ``.to()`` converts them
with the model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

_log = logging.getLogger("ircore.integrations.transformers")

#: Attribute names of the merged gate/up projection (non-persistent buffers: not in state_dict).
GATE_UP_WEIGHT = "ircore_gate_up_weight"
GATE_UP_BIAS = "ircore_gate_up_bias"
_STATE = "_ircore_merge"


@dataclass
class _State:
    """Kept on the module (``module.__dict__``): where up's rows start, and what was said."""

    name: str
    up_offset: int = 0  # bytes from the merged weight's first element to up's
    bias_offset: int = 0
    warned: str | None = None


def _layer_problem(module: nn.Module, name: str) -> str | None:
    layer = module._modules.get(name)
    if not isinstance(layer, nn.Linear) or type(layer).forward is not nn.Linear.forward:
        return f"{name} is a {type(layer).__name__}, not an nn.Linear"
    if parametrize.is_parametrized(layer):
        return f"{name} is parametrized (torch.nn.utils.parametrize)"
    if "forward" in vars(layer):
        return f"{name}'s forward was replaced on the instance (an offload hook, another library)"
    if layer._forward_hooks or layer._forward_pre_hooks:
        return f"{name} has forward hooks"
    if layer.weight.is_meta:
        return f"{name}'s weight is on the meta device (not loaded, or offloaded)"
    return None


def merge_problem(module: nn.Module) -> str | None:
    """Why ``module.gate_proj`` and ``module.up_proj`` cannot be merged now, or None."""
    for name in ("gate_proj", "up_proj"):
        why = _layer_problem(module, name)
        if why is not None:
            return why
    gate: Any = module._modules["gate_proj"]
    up: Any = module._modules["up_proj"]
    if (gate.weight.shape, gate.weight.dtype, gate.weight.device) != (
        up.weight.shape,
        up.weight.dtype,
        up.weight.device,
    ) or (gate.bias is None) != (up.bias is None):
        return "gate_proj and up_proj differ in shape, dtype, device or bias"
    return None


def merge(module: nn.Module, name: str) -> None:
    """One ``[gate; up]`` weight (and bias); gate's and up's parameters become views of it.

    The parameters stay the same objects with the same values, so ``state_dict`` and loading into
    them keep working. Built outside inference mode (a merge made under
    ``torch.inference_mode()`` would turn the parameters into inference tensors, which no later
    forward with grad on could use).
    """
    gate: Any = module._modules["gate_proj"]
    up: Any = module._modules["up_proj"]
    state = module.__dict__.get(_STATE) or _State(name)
    with torch.no_grad(), torch.inference_mode(False):
        for param, buffer in (("weight", GATE_UP_WEIGHT), ("bias", GATE_UP_BIAS)):
            g, u = getattr(gate, param), getattr(up, param)
            if g is None:
                module.register_buffer(buffer, None, persistent=False)
                continue
            merged = torch.cat([g.detach(), u.detach()], dim=0)
            g.data, u.data = merged[: g.shape[0]], merged[g.shape[0] :]
            module.register_buffer(buffer, merged, persistent=False)
            offset = u.data_ptr() - merged.data_ptr()
            if param == "weight":
                state.up_offset = offset
            else:
                state.bias_offset = offset
    state.warned = None
    module.__dict__[_STATE] = state


def current(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The merged weight and bias, equal to gate's and up's now; None if they cannot be merged.

    The check is a few dictionary reads and data pointers (gate's and up's must still lie inside
    the merged tensor, where ``merge`` put them); a failed check merges again.
    """
    buffers: Any = module._buffers
    modules: Any = module._modules
    try:
        weight, bias = buffers[GATE_UP_WEIGHT], buffers[GATE_UP_BIAS]
        state: _State = module.__dict__[_STATE]
        gate, up = modules["gate_proj"]._parameters, modules["up_proj"]._parameters
        start = weight.data_ptr()  # None (dropped: no merge): AttributeError below
        if gate["weight"].data_ptr() == start and up["weight"].data_ptr() == start + state.up_offset:
            if bias is None:
                return weight, None
            start = bias.data_ptr()
            if gate["bias"].data_ptr() == start and up["bias"].data_ptr() == start + state.bias_offset:
                return weight, bias
    except (KeyError, AttributeError):  # a layer or parameter replaced by something else, or no merge
        pass
    return _merge_again(module)


def _merge_again(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    state: _State = module.__dict__[_STATE]
    why = merge_problem(module)
    if why is not None:
        if state.warned != why:
            _log.warning(
                "ircore: %s: gate/up no longer merged (%s): it runs %s.forward until they can be "
                "merged again",
                state.name,
                why,
                type(module).__name__,
            )
            state.warned = why
        for buffer in (GATE_UP_WEIGHT, GATE_UP_BIAS):  # free the stale copy
            module._buffers[buffer] = None
        return None
    merge(module, state.name)
    _log.debug("ircore: %s: gate_proj/up_proj have new storage: merged again", state.name)
    buffers: Any = module._buffers
    return buffers[GATE_UP_WEIGHT], buffers[GATE_UP_BIAS]


def split(module: nn.Module) -> None:
    """Gate and up get their own storage again (same values), and the merged buffers go."""
    with torch.no_grad(), torch.inference_mode(False):
        layers: tuple[Any, ...] = (module.gate_proj, module.up_proj)
        for layer in layers:
            for param in (layer.weight, layer.bias):
                if param is not None:
                    param.data = param.data.clone()
    for buffer in (GATE_UP_WEIGHT, GATE_UP_BIAS):
        module._buffers.pop(buffer, None)
    module.__dict__.pop(_STATE, None)
