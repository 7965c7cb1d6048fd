"""A Llama-style decoder calling ircore ops, and its tensor + sequence parallel plan.

docs/tensor-parallel.md shows the parts between "README" markers verbatim (a test checks it);
tests/test_distributed.py runs the model on two processes against one.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

import ircore


# --- README (begin)
class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(hidden)), eps

    # residual by keyword: SequenceParallel prepares the first positional input only
    def forward(self, x, residual=None):
        if residual is None:
            return ircore.ops.rms_norm(x, self.weight, self.eps), x
        return ircore.ops.fused_add_rms_norm(x, residual, self.weight, self.eps)


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False)  # rows [gate; up]
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(ircore.ops.silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(hidden), RMSNorm(hidden)
        self.self_attn, self.mlp = Attention(hidden, heads), MLP(hidden, intermediate)

    def forward(self, x, residual=None):
        x, residual = self.input_layernorm(x, residual=residual)
        x, residual = self.post_attention_layernorm(self.self_attn(x), residual=residual)
        return self.mlp(x), residual
# --- README (end)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            nn.Linear(hidden, hidden, bias=False) for _ in range(4)
        )

    def forward(self, x):
        b, s, _ = x.shape
        heads = (b, s, -1, self.head_dim)  # -1: this rank's heads
        q, k, v = (p(x).view(heads).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, -1))


class Decoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, intermediate) for _ in range(layers))
        self.norm = RMSNorm(hidden)

    def forward(self, x):
        residual = None
        for layer in self.layers:
            x, residual = layer(x, residual)
        return self.norm(x, residual=residual)[0]


# --- README (begin)
def gate_up_by_rank(weight: torch.Tensor, ranks: int) -> torch.Tensor:
    """Reorder the rows [gate; up] as [gate_0; up_0; gate_1; up_1; ...], one pair per rank."""
    gate, up = weight.chunk(2)
    return torch.cat([torch.cat(pair) for pair in zip(gate.chunk(ranks), up.chunk(ranks))])


def tensor_parallel(model: Decoder, mesh) -> Decoder:
    """Megatron-style: heads and the MLP split over ranks, the norms on sequence shards (dim 1)."""
    with torch.no_grad():  # ColwiseParallel gives rank r row block r: [gate_r; up_r]
        for layer in model.layers:
            layer.mlp.gate_up_proj.weight.copy_(gate_up_by_rank(layer.mlp.gate_up_proj.weight, mesh.size()))
    gather_sequence = PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate())
    return parallelize_module(model, mesh, {
        "norm": SequenceParallel(),
        "layers.*.input_layernorm": SequenceParallel(),
        "layers.*.post_attention_layernorm": SequenceParallel(),
        "layers.*.self_attn": gather_sequence,
        "layers.*.self_attn.q_proj": ColwiseParallel(),
        "layers.*.self_attn.k_proj": ColwiseParallel(),
        "layers.*.self_attn.v_proj": ColwiseParallel(),
        "layers.*.self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "layers.*.mlp": gather_sequence,
        "layers.*.mlp.gate_up_proj": ColwiseParallel(),  # local output: silu_and_mul gets [gate_r, up_r]
        "layers.*.mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    })
# --- README (end)
