"""Recognising a module's forward by the shape of its source, not by its class name.

A model library's RMSNorm classes have many names but few forms; whether a forward may be
replaced by ``ircore.ops.rms_norm`` depends on what the forward computes. The source of the
forward is parsed and compared with the known forms below after the docstring is dropped and
local names (parameters, variables) are renamed in order of first use, so ``hidden_states`` and
``x`` match alike while attribute names (``self.variance_epsilon``) and the calls made must be
exactly the same.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from typing import Any

# What the RMSNorm forms share: normalise in fp32. They differ in how they apply the weight.
_NORMALIZE = """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
"""

#: RMSNorm forwards that compute ``rms_norm(x, self.weight, self.variance_epsilon)`` within the
#: op's tolerance when weight and input share a dtype (transformers 5.23: 142 of 142 classes
#: decorated ``use_kernel_forward_from_hub("RMSNorm")``). Name -> source.
NORM_FORMS: dict[str, str] = {
    # Llama, Qwen2/3, Mistral and most others: rounds to the input dtype, then multiplies by weight
    "llama": _NORMALIZE + "    return self.weight * hidden_states.to(input_dtype)\n",
    # OLMo and others: multiplies, then rounds once (ircore's own semantics)
    "weight_then_round": _NORMALIZE + "    return (self.weight * hidden_states).to(input_dtype)\n",
    # Nemotron-H: the same with the weight cast to fp32 first
    "fp32_weight_then_round": _NORMALIZE
    + "    return (self.weight.to(torch.float32) * hidden_states).to(input_dtype)\n",
}

#: Gated RMSNorm forwards ``forward(self, hidden_states, gate)`` that ``ircore.ops.rms_norm_gated``
#: computes bit for bit (native) with a weight and a gate of the input's dtype. Name -> source; the
#: arguments each takes are in ``_forwards.gated_norm_forward``.
GATED_NORM_FORMS: dict[str, str] = {
    # Mamba2, Bamba, Zamba2, Nemotron-H, Granite-MoE-Hybrid: gate, then norm in groups
    "mamba2": """
def forward(self, hidden_states, gate=None):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    if gate is not None:
        hidden_states = hidden_states * nn.functional.silu(gate.to(torch.float32))
    *prefix_dims, last_dim = hidden_states.shape
    group_count = last_dim // self.group_size
    hidden_states_group = hidden_states.view(*prefix_dims, group_count, self.group_size)
    variance = hidden_states_group.pow(2).mean(-1, keepdim=True)
    hidden_states_group = hidden_states_group * torch.rsqrt(variance + self.variance_epsilon)
    hidden_states = hidden_states_group.view(*prefix_dims, group_count * self.group_size)
    return self.weight * hidden_states.to(input_dtype)
""",
    # Qwen3-Next, Qwen3.5, OLMo-Hybrid: norm, weight, then gate
    "qwen3_next": """
def forward(self, hidden_states, gate):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    hidden_states = self.weight * hidden_states.to(input_dtype)
    hidden_states = hidden_states * ACT2FN[self.activation](gate.to(torch.float32))

    return hidden_states.to(input_dtype)
""",
    # Falcon-H1: n_groups, norm_before_gate either way, fp32 throughout
    "falcon_h1": """
def forward(self, hidden_states, gate=None):
    input_dtype = hidden_states.dtype
    input_ndim = hidden_states.ndim

    if not self.norm_before_gate and gate is not None:
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))

    if len(hidden_states.shape) == 3:
        batch_size, seq_len, dim = hidden_states.shape
    else:
        batch_size, dim = hidden_states.shape
        seq_len = 1
    hidden_states = hidden_states.to(torch.float32)

    hidden_states = hidden_states.view(batch_size, seq_len, self.n_groups, int(dim // self.n_groups))
    variance = hidden_states.pow(2).mean(-1, keepdim=True)

    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

    hidden_states = self.weight.view(self.n_groups, int(dim // self.n_groups)) * hidden_states
    hidden_states = hidden_states.view(batch_size, seq_len, dim)

    if input_ndim == 2:
        hidden_states = hidden_states.squeeze(1)

    if self.norm_before_gate and gate is not None:
        hidden_states = hidden_states * F.silu(gate.to(torch.float32))
    return hidden_states.to(input_dtype)
""",
}

#: Gated MLPs whose activation may become ``silu_and_mul`` over one merged gate/up projection.
MLP_FORMS: dict[str, str] = {
    "gate_up_down": """
def forward(self, x):
    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
    return down_proj
""",
    "gate_up_down_inline": """
def forward(self, x):
    return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
""",
    # Llama 4: the activation is ``activation_fn``
    "llama4": """
def forward(self, x):
    down_proj = self.activation_fn(self.gate_proj(x)) * self.up_proj(x)
    return self.down_proj(down_proj)
""",
}

#: The attribute holding each MLP form's activation module.
MLP_ACTIVATION: dict[str, str] = {
    "gate_up_down": "act_fn",
    "gate_up_down_inline": "act_fn",
    "llama4": "activation_fn",
}

#: MLPs with one fused ``gate_up_proj`` projection whose output is ``[gate | up]`` (gate first):
#: ``down(up * act(gate))`` is ``down(silu_and_mul(gate_up_proj(x)))`` for a SiLU activation, with
#: no merge (transformers 5.23: phi3, glm, glm4, glm4v, glm_image, glm_ocr, dia, esmfold2, ...).
FUSED_MLP_FORMS: dict[str, str] = {
    "gate_up_proj": """
def forward(self, hidden_states):
    up_states = self.gate_up_proj(hidden_states)
    gate, up_states = up_states.chunk(2, dim=-1)
    up_states = up_states * self.activation_fn(gate)
    return self.down_proj(up_states)
""",
}

#: The attribute holding each fused MLP form's activation.
FUSED_MLP_ACTIVATION: dict[str, str] = {"gate_up_proj": "activation_fn"}

#: MoE experts held in 3-D parameters, by the eager forward of their class (the one
#: ``use_experts_implementation`` wraps): each applies ``act(gate) * up`` to one matmul's
#: ``[gate | up]`` output (gate first), which is ``silu_and_mul`` of it for a SiLU activation.
EXPERTS_FORMS: dict[str, str] = {
    # Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, OLMoE, ... (54 classes): gate_up_proj (E, 2I, H)
    "linear_loop": """
def forward(self, hidden_states, top_k_index, top_k_weights):
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = torch.nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
        expert_mask = expert_mask.permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()

    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        current_state = hidden_states[token_idx]
        gate, up = nn.functional.linear(current_state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
        current_hidden_states = self.act_fn(gate) * up
        current_hidden_states = nn.functional.linear(current_hidden_states, self.down_proj[expert_idx])
        current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))

    return final_hidden_states
""",
    # Aria: transposed weights, gate_up_proj (E, H, 2I)
    "matmul_loop": """
def forward(self, hidden_states, top_k_index, top_k_weights):
    final_hidden_states = torch.zeros_like(hidden_states)
    with torch.no_grad():
        expert_mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1)
        expert_mask = expert_mask.permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()

    for expert_idx in expert_hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(expert_mask[expert_idx])
        current_state = hidden_states[token_idx]
        gate, up = (current_state @ self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
        current_hidden_states = self.act_fn(gate) * up
        current_hidden_states = current_hidden_states @ self.down_proj[expert_idx]
        current_hidden_states = current_hidden_states * top_k_weights[token_idx, top_k_pos, None]
        final_hidden_states.index_add_(0, token_idx, current_hidden_states.to(final_hidden_states.dtype))

    return final_hidden_states
""",
    # Llama 4: every expert over its slice of the (already routed) tokens, gate_up_proj (E, H, 2I)
    "llama4_bmm": """
def forward(self, hidden_states):
    hidden_states = hidden_states.view(self.gate_up_proj.shape[0], -1, self.hidden_size)
    gate_up = torch.bmm(hidden_states, self.gate_up_proj)
    gate, up = gate_up.chunk(2, dim=-1)  # not supported for DTensors
    next_states = torch.bmm((up * self.act_fn(gate)), self.down_proj)
    next_states = next_states.view(-1, self.hidden_size)
    return next_states
""",
}

#: ``_apply_gate`` methods (what transformers' grouped_mm / batched_mm / deepgemm experts
#: implementations call between their two matmuls) that compute ``act(gate) * up`` over
#: ``[gate | up]``: transformers' default (``integrations.moe._default_apply_gate``).
GATE_FORMS: dict[str, str] = {
    "chunk": """
def _apply_gate(self, gate_up_out):
    gate, up = gate_up_out.chunk(2, dim=-1)
    return self.act_fn(gate) * up
""",
}

#: Activation modules that compute SiLU (``transformers.activations.SiLUActivation``, ``nn.SiLU``).
SILU_FORMS: dict[str, str] = {
    "silu": """
def forward(self, input):
    return nn.functional.silu(input)
""",
    "silu_F": """
def forward(self, input):
    return F.silu(input)
""",
}


#: Hugging Face's ``apply_rotary_pos_emb`` (the modeling module's function that attention
#: forwards call by name) that ``ircore.ops.rotary_pos_emb`` computes bit for bit (native), given
#: the module's ``rotate_half`` of the form below (transformers 5.23: 116 modeling modules).
ROPE_FORMS: dict[str, str] = {
    "llama": """
def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
""",
}

#: ``rotate_half`` as the standard ``apply_rotary_pos_emb`` needs it: ``cat(-x2, x1)`` (neox pairs).
ROTATE_HALF_FORMS: dict[str, str] = {
    "llama": """
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)
""",
}

#: GELU activation modules whose forward calls the function they hold in ``self.act``
#: (transformers' ``GELUTanh``, Gemma's ``gelu_pytorch_tanh``: ``partial(F.gelu,
#: approximate="tanh")``; ``GELUActivation``: ``F.gelu``); ``_forwards.gelu_approximate`` reads
#: which GELU that function is.
GELU_FORMS: dict[str, str] = {
    "self_act": """
def forward(self, input):
    return self.act(input)
""",
}


class _Canonical(ast.NodeTransformer):
    """Renames parameters and local variables to ``v0, v1, ...`` in order of first appearance."""

    def __init__(self, local_names: set[str]) -> None:
        self.local_names = local_names
        self.names: dict[str, str] = {}

    def _rename(self, name: str) -> str:
        if name not in self.local_names:
            return name  # a global (torch, nn, F) keeps its name
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self._rename(node.arg)
        node.annotation = None
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self._rename(node.id)
        return node


def fingerprint(source: str) -> str | None:
    """A canonical dump of the one function in ``source``; None if it is not one function."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    func = tree.body[0]
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    func.body = body or [ast.Pass()]
    func.decorator_list, func.returns, func.name = [], None, "forward"
    all_args = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
    local_names = {a.arg for a in all_args}
    local_names |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local_names.discard("self")
    return ast.dump(_Canonical(local_names).visit(func), annotate_fields=False, include_attributes=False)


_KNOWN = {
    kind: {fingerprint(src): name for name, src in forms.items()}
    for kind, forms in (
        ("norm", NORM_FORMS),
        ("gated_norm", GATED_NORM_FORMS),
        ("mlp", MLP_FORMS),
        ("silu", SILU_FORMS),
        ("fused_mlp", FUSED_MLP_FORMS),
        ("experts", EXPERTS_FORMS),
        ("gate", GATE_FORMS),
        ("rope", ROPE_FORMS),
        ("rotate_half", ROTATE_HALF_FORMS),
        ("gelu", GELU_FORMS),
    )
}


@functools.cache
def _form_of_function(function: Any, kind: str) -> str | None:
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):  # built in, or defined where no source is kept
        return None
    return _KNOWN[kind].get(fingerprint(source))


def function_form(function: Any, kind: str) -> str | None:
    """The name of the known ``kind`` form of a plain function (``"rope"``, ``"rotate_half"``)."""
    try:
        return _form_of_function(function, kind)
    except TypeError:  # not hashable: not a function we know
        return None


def form_of(cls: type, kind: str, method: str = "forward") -> str | None:
    """The name of the known ``kind`` form of ``cls.forward`` (or of another ``method``).

    ``kind``: ``"norm"``, ``"gated_norm"``, ``"mlp"``, ``"silu"``, ``"fused_mlp"``, ``"experts"``,
    ``"gate"`` (an experts class's ``_apply_gate``). A forward wrapped with ``functools.wraps`` (transformers'
    ``use_experts_implementation``) is recognised by the function it wraps.
    """
    forward = getattr(cls, method, None)
    function = getattr(forward, "__func__", forward)
    return None if function is None else _form_of_function(function, kind)
