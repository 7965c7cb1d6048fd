"""The forwards ircore puts in place of a model's RMSNorm, gated-MLP and MoE experts forwards.

Shared by ``apply`` (bound on instances), ``apply_to_classes`` (set on classes) and the
``kernels`` layer (copied onto instances by ``kernels.kernelize``). Each carries a mark, so that
``undo`` and a second ``apply`` recognise it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from ircore.integrations._forms import form_of
from ircore.integrations._merge import current
from ircore.ops import gelu_and_mul, layer_norm, rms_norm, rms_norm_gated, rotary_pos_emb, silu_and_mul
from ircore.ops._checks import FLOAT_DTYPES

_MARK = "__ircore_patch__"
#: ``on_own_forward(module, x, why)``: told each time a patched norm runs its own forward.
OwnForward = Callable[[Any, torch.Tensor, str], None]


def patch_of(forward: Any) -> str | None:
    """``"rms_norm"``/``"layer_norm"``/``"rms_norm_gated"``/``"mlp"``/``"fused_mlp"``/``"experts"``
    /``"fp8_linear"`` if ``forward`` (a function or bound method) is one of ours."""
    return getattr(getattr(forward, "__func__", forward), _MARK, None)


def norm_forward(
    original: Callable[..., Any], on_own_forward: OwnForward | None = None
) -> Callable[..., Any]:
    """An RMSNorm forward calling ``ircore.ops.rms_norm``; ``original(self, x)`` where dtypes differ
    or x has a dtype ircore's ops do not take (fp64).

    The known forms give the values of ``rms_norm`` (within its tolerance) when the weight has
    the input's dtype. Otherwise the Llama form's output dtype follows the weight (fp32 weight,
    bf16 input: fp32 out) where ``rms_norm`` keeps the input's: the module's own forward runs,
    and ``on_own_forward(self, x, why)`` is told (``apply`` records it in its summary).
    """

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        why = _dtype_mismatch(hidden_states, weight=self.weight)
        if why is not None:  # an fp64 model, or weights kept in fp32: what stock computes
            if on_own_forward is not None:
                on_own_forward(self, hidden_states, why)
            return original(self, hidden_states)
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

    setattr(forward, _MARK, "rms_norm")
    return forward


def _dtype_mismatch(x: torch.Tensor, **tensors: torch.Tensor | None) -> str | None:
    """Why the op cannot stand for the module on ``x`` by dtype, or None."""
    if x.dtype not in FLOAT_DTYPES:
        return f"input {x.dtype} (ircore's ops take float32, float16, bfloat16)"
    for name, tensor in tensors.items():
        if tensor is not None and tensor.dtype is not x.dtype:
            return f"input {x.dtype}, {name} {tensor.dtype}"
    return None


def layer_norm_forward(
    original: Callable[..., Any], on_own_forward: OwnForward | None = None
) -> Callable[..., Any]:
    """An ``nn.LayerNorm`` forward calling ``ircore.ops.layer_norm(x, weight, bias, eps)``.

    ``original(self, x)`` runs where the op would refuse the call or differ from the module:
    a weight or bias of another dtype than x's (torch then computes in the weight's), x of a
    dtype ircore's ops do not take, a last dimension that is not ``normalized_shape`` (torch's
    own error then); ``on_own_forward`` is told of a dtype difference.
    """

    def forward(self: Any, input: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        why = _dtype_mismatch(input, weight=weight, bias=bias)
        if why is not None:
            if on_own_forward is not None:
                on_own_forward(self, input, why)
            return original(self, input)
        if input.dim() == 0 or input.shape[-1] != self.normalized_shape[0]:
            return original(self, input)
        return layer_norm(input, weight, bias, self.eps)

    setattr(forward, _MARK, "layer_norm")
    return forward


_NO_GATE: Any = object()


def gated_norm_forward(
    original: Callable[..., Any], form: str, on_own_forward: OwnForward | None = None
) -> Callable[..., Any]:
    """A gated RMSNorm forward (``_forms.GATED_NORM_FORMS``) calling ``ircore.ops.rms_norm_gated``.

    With the arguments that give the module's values bit for bit (native): ``"mamba2"``
    ``(x, gate, w, eps, self.group_size, False, True)``, ``"qwen3_next"`` ``(x, gate, w, eps, None,
    True, True)``, ``"falcon_h1"`` ``(x, gate, w, eps, hidden // self.n_groups,
    self.norm_before_gate, False)``. ``original`` runs, with the arguments as given, where the op
    would refuse the call or differ from the module: no gate (Mamba2's and Falcon-H1's forwards
    allow ``gate=None``), a weight or gate of another dtype than x's, a gate of another shape,
    groups that do not divide the last dimension, a Qwen3-Next activation other than SiLU, ...;
    ``on_own_forward`` is told of a missing gate and of a dtype difference.
    """

    def forward(self: Any, hidden_states: torch.Tensor, gate: Any = _NO_GATE) -> torch.Tensor:
        if gate is _NO_GATE:
            if form == "qwen3_next":  # the gate is not optional there: the class's own error
                return original(self, hidden_states)
            gate = None  # Mamba2's and Falcon-H1's default
        weight = self.weight
        why = (
            "called without a gate"
            if gate is None
            else _dtype_mismatch(hidden_states, weight=weight, gate=gate)
        )
        if why is not None:
            if on_own_forward is not None:
                on_own_forward(self, hidden_states, why)
            return original(self, hidden_states, gate)
        hidden = hidden_states.shape[-1] if hidden_states.dim() else 0
        if gate.shape != hidden_states.shape or weight.shape != (hidden,):
            return original(self, hidden_states, gate)
        eps = self.variance_epsilon
        if form == "mamba2":
            group_size = self.group_size
            if not (isinstance(group_size, int) and 0 < group_size and hidden % group_size == 0):
                return original(self, hidden_states, gate)
            return rms_norm_gated(hidden_states, gate, weight, eps, group_size, False, True)
        if form == "qwen3_next":
            if self.activation != "silu":
                return original(self, hidden_states, gate)
            return rms_norm_gated(hidden_states, gate, weight, eps, None, True, True)
        n_groups = self.n_groups  # falcon_h1
        if hidden_states.dim() not in (2, 3) or not (isinstance(n_groups, int) and 0 < n_groups):
            return original(self, hidden_states, gate)
        if hidden % n_groups:
            return original(self, hidden_states, gate)
        return rms_norm_gated(
            hidden_states, gate, weight, eps, hidden // n_groups, bool(self.norm_before_gate), False
        )

    setattr(forward, _MARK, "rms_norm_gated")
    return forward


def _gate_up_needs_grad(module: Any) -> bool:
    gate, up = module._modules["gate_proj"], module._modules["up_proj"]
    params = (gate.weight, gate.bias, up.weight, up.bias)
    return any(p is not None and p.requires_grad for p in params)


def gelu_mlp_forward(approximate: str) -> Callable[..., Any]:
    """:func:`mlp_forward` for a GELU-gated MLP (Gemma's ``gelu_pytorch_tanh``: ``approximate``
    ``"tanh"``): ``gelu_and_mul(x, approximate)`` in place of ``silu_and_mul``, the rest alike."""

    def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        if x.dtype not in FLOAT_DTYPES:
            return type(self).forward(self, x)
        if torch.compiler.is_compiling():
            gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
            return self.down_proj(gelu_and_mul(gate_up, approximate))
        if torch.is_grad_enabled() and _gate_up_needs_grad(self):
            return type(self).forward(self, x)
        merged = current(self)
        if merged is None:
            return type(self).forward(self, x)
        return self.down_proj(gelu_and_mul(F.linear(x, merged[0], merged[1]), approximate))

    setattr(forward, _MARK, "mlp")
    return forward


def gelu_approximate(act: Any) -> str | None:
    """``"none"``/``"tanh"`` if ``act`` computes ``F.gelu`` with that approximation (``nn.GELU``,
    transformers' ``GELUActivation``/``GELUTanh`` holding ``F.gelu`` or ``partial(F.gelu,
    approximate="tanh")``), else None (the Python-formula variants round differently)."""
    if isinstance(act, nn.GELU):
        return act.approximate if act.approximate in ("none", "tanh") else None
    if not isinstance(act, nn.Module) or form_of(type(act), "gelu") is None:
        return None
    fn = vars(act).get("act", getattr(act, "act", None))
    if fn is F.gelu:
        return "none"
    if isinstance(fn, functools.partial) and fn.func is F.gelu and not fn.args:
        approximate = fn.keywords.get("approximate", "none") if set(fn.keywords) <= {"approximate"} else None
        return approximate if approximate in ("none", "tanh") else None
    return None


def rope_function(original: Callable[..., Any]) -> Callable[..., Any]:
    """A modeling module's ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)`` (of the
    standard form, ``_forms.ROPE_FORMS``) calling ``ircore.ops.rotary_pos_emb``.

    ``original`` runs where the op would refuse the call or autograd needs the graph through it:
    q, k, cos, sin not all of one float dtype (fp64, cos/sin kept in fp32), shapes the op does not
    take (cos/sin that do not broadcast to q and k at ``unsqueeze_dim``, an odd head size), or
    grad mode on with q or k requiring grad (a training step runs stock).
    """
    from ircore.ops._rope_hf import _broadcasts_to

    def apply_rotary_pos_emb(
        q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = q.dtype
        if (
            dtype not in FLOAT_DTYPES
            or k.dtype is not dtype
            or cos.dtype is not dtype
            or sin.dtype is not dtype
            or not isinstance(unsqueeze_dim, int)
            or (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad))
        ):
            return original(q, k, cos, sin, unsqueeze_dim)
        head = q.shape[-1] if q.dim() else 0
        if (
            not head
            or head % 2
            or sin.shape != cos.shape
            or not -cos.dim() - 1 <= unsqueeze_dim <= cos.dim()
            or cos.shape[-1] != head
            or k.shape[-1] != head
        ):
            return original(q, k, cos, sin, unsqueeze_dim)
        wide = cos.unsqueeze(unsqueeze_dim).shape
        if not (_broadcasts_to(wide, q.shape) and _broadcasts_to(wide, k.shape)):
            return original(q, k, cos, sin, unsqueeze_dim)
        return rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)

    apply_rotary_pos_emb.__ircore_original__ = original  # type: ignore[attr-defined]
    setattr(apply_rotary_pos_emb, _MARK, "rope")
    return apply_rotary_pos_emb


def mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` as one matmul over the merged weights and ``silu_and_mul``.

    Always with gate's and up's weights as they are now (``_merge.current``). The module's own
    forward runs where autograd needs gate's and up's gradients (grad mode on, a parameter that
    requires grad), and where they can no longer be merged. Under ``torch.compile`` the traced
    graph has no merged weight (a graph could not check that it is current): gate and up run as
    two matmuls into one ``[gate | up]`` tensor, then ``silu_and_mul``.
    """
    if x.dtype not in FLOAT_DTYPES:  # an fp64 model: ircore's ops take fp32/fp16/bf16
        return type(self).forward(self, x)
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


# ---------------------------------------------------------------------- fused gate_up_proj, experts
@functools.cache
def _silu_class(cls: Any) -> bool:
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        return False
    return issubclass(cls, nn.SiLU) or form_of(cls, "silu") is not None


# Traced as its value (a module's activation class is fixed). It takes the class, not the module:
# torch 2.11's Dynamo cannot pass a module to such a function (it raised "UnspecializedNNModuleVariable
# (SiLUActivation) is not a constant" compiling the routed MoE experts on the H100); a class it can.
@torch.compiler.assume_constant_result
def _is_silu_module_class(cls: Any) -> bool:
    return _silu_class(cls)


def is_silu(act: Any) -> bool:
    """``act`` computes SiLU: ``nn.SiLU``, transformers' ``SiLUActivation``, or ``F.silu`` itself."""
    return act is F.silu or _is_silu_module_class(type(act))


def fused_mlp_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    """``down(silu_and_mul(gate_up_proj(x)))`` for a fused MLP (``[gate | up]``: gate first).

    The same modules are called as by the class's forward (so hooks on them, quantized
    projections, ... all work); only ``up * act(gate)`` becomes ``silu_and_mul``. Where the
    activation is not SiLU (a class patched by ``apply_to_classes`` whose config names another),
    ``original(self, x)`` runs.
    """

    def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
        if not is_silu(self.activation_fn) or hidden_states.dtype not in FLOAT_DTYPES:
            return original(self, hidden_states)
        return self.down_proj(silu_and_mul(self.gate_up_proj(hidden_states)))

    setattr(forward, _MARK, "fused_mlp")
    return forward


def experts_gate(original: Callable[..., Any]) -> Callable[..., Any]:
    """An experts ``_apply_gate``: ``silu_and_mul`` of the ``[gate | up]`` matmul output.

    transformers' grouped_mm, batched_mm and deepgemm experts implementations call it between
    their two matmuls; ``original`` runs where the activation is not SiLU.
    """

    def _apply_gate(self: Any, gate_up: torch.Tensor) -> torch.Tensor:
        if not is_silu(self.act_fn) or gate_up.dtype not in FLOAT_DTYPES:
            return original(self, gate_up)
        return silu_and_mul(gate_up)

    setattr(_apply_gate, _MARK, "experts")
    return _apply_gate


def _dispatches(forward: Any, module: Any) -> bool:
    """``forward`` is transformers' ``use_experts_implementation`` wrapper, set to another
    implementation than its eager forward (grouped_mm, batched_mm, ...: they call ``_apply_gate``)."""
    if getattr(forward, "__wrapped__", None) is None:
        return False
    return getattr(getattr(module, "config", None), "_experts_implementation", None) not in (None, "eager")


def _routed_loop(
    self: Any,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    transposed: bool,
) -> torch.Tensor:
    """transformers' eager experts loop (``EXPERTS_FORMS`` "linear_loop"/"matmul_loop") with
    ``silu_and_mul`` in place of ``act_fn(gate) * up``; the same ops otherwise, in the same order."""
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = F.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        current_state = hidden_states[token_idx]
        if transposed:
            out = silu_and_mul(current_state @ self.gate_up_proj[expert_idx]) @ self.down_proj[expert_idx]
        else:
            gated = silu_and_mul(F.linear(current_state, self.gate_up_proj[expert_idx]))
            out = F.linear(gated, self.down_proj[expert_idx])
        out = out * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, out.to(final_hidden_states.dtype))
    return final_hidden_states


def experts_forward(original: Callable[..., Any], form: str) -> Callable[..., Any]:
    """A forward for MoE experts of the known ``form`` (``_forms.EXPERTS_FORMS``).

    ``original`` is the class's forward. Where it dispatches to another experts implementation
    (``config._experts_implementation``: grouped_mm, transformers' default, batched_mm, ...), it
    runs, and calls the instance's ``_apply_gate`` (:func:`experts_gate`); the eager forward runs
    the same loop as transformers' with ``silu_and_mul``. Where the activation is not SiLU,
    ``original`` runs.
    """
    if form == "llama4_bmm":

        def forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
            if not is_silu(self.act_fn) or hidden_states.dtype not in FLOAT_DTYPES:
                return original(self, hidden_states)
            hidden_states = hidden_states.view(self.gate_up_proj.shape[0], -1, self.hidden_size)
            gate_up = torch.bmm(hidden_states, self.gate_up_proj)
            next_states = torch.bmm(silu_and_mul(gate_up), self.down_proj)
            return next_states.view(-1, self.hidden_size)

    else:
        transposed = form == "matmul_loop"

        def forward(  # type: ignore[misc]
            self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
        ) -> torch.Tensor:
            own = not is_silu(self.act_fn) or hidden_states.dtype not in FLOAT_DTYPES
            if own or _dispatches(original, self):
                return original(self, hidden_states, top_k_index, top_k_weights)
            return _routed_loop(self, hidden_states, top_k_index, top_k_weights, transposed)

    setattr(forward, _MARK, "experts")
    return forward
