"""Fusions: rewrite patterns of ircore ops in a post-grad graph before they are lowered.

Written as direct graph rewrites rather than ``register_replacement`` patterns: each fusion has
exact conditions (which add, which reshape), accepts any epsilon and operand order with one
rule, and counts what it did. ``stable_topological_sort`` runs afterwards (the fused node may
need an input defined after the first user of the sum it replaces).
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ircore.compile._graph import call, depends_on, full_args, same_shape, shape_args, size_arg, value
from ircore.compile._qk_norm_rope import fuse_hf_qk_norm_rope, fuse_qk_norm_rope
from ircore.compile._quant_fusion import fuse_activation_quant, fuse_norm_quant
from ircore.ops import fused_add_rms_norm, rms_norm

_aten = torch.ops.aten
_RESHAPES = (_aten.reshape.default, _aten.view.default, _aten._unsafe_view.default)


def _plain_add(node: object) -> tuple[Node, Node] | None:
    """``(a, b)`` if ``node`` is ``a + b`` of two distinct tensors of one dtype, shape and device.

    Anything else would change the result if fused: ``alpha != 1`` scales b, a dtype promotion
    (bf16 + fp32) gives an fp32 sum where the fused op keeps x's dtype, broadcasting gives a sum
    of another shape. The matcher must check these itself: Inductor's own pattern matcher
    ignores keyword arguments a pattern does not name.
    """
    if not (isinstance(node, Node) and node.op == "call_function" and node.target is _aten.add.Tensor):
        return None
    if len(node.args) != 2 or any(k != "alpha" for k in node.kwargs) or node.kwargs.get("alpha", 1) != 1:
        return None
    a, b = node.args
    if not (isinstance(a, Node) and isinstance(b, Node)) or a is b:
        return None
    va, vb, vs = value(a), value(b), value(node)
    if not all(isinstance(v, torch.Tensor) for v in (va, vb, vs)):
        return None
    if not (va.dtype == vb.dtype == vs.dtype and va.device == vb.device):
        return None
    if not (same_shape(va, vb) and same_shape(va, vs)):
        return None
    return a, b


def fuse_add_rms_norm(graph: Graph) -> int:
    """``s = a + b; y = rms_norm(s, w, eps)`` -> ``y, s = fused_add_rms_norm(a, b, w, eps)``."""
    target, fused = rms_norm.torch_op, fused_add_rms_norm.torch_op
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not target:
            continue
        x, weight, epsilon, variance_size = full_args(node, rms_norm)
        pair = _plain_add(x)
        if pair is None or depends_on((weight, epsilon, variance_size), x):
            continue
        args = (*pair, weight, epsilon) + (() if variance_size is None else (variance_size,))
        new = call(graph, fused, args, node)
        out = call(graph, operator.getitem, (new, 0), node)
        residual = call(graph, operator.getitem, (new, 1), node)
        node.replace_all_uses_with(out)
        x.replace_all_uses_with(residual)  # the sum's other users read the fused op's residual
        graph.erase_node(node)
        graph.erase_node(x)
        count += 1
    return count


def _flattens_last_dim(node: Node, hidden: int | torch.SymInt) -> bool:
    """``node`` reshapes its input to 2-D ``(rows, hidden)``."""
    if node.op != "call_function" or node.target not in _RESHAPES:
        return False
    val = value(node)
    return isinstance(val, torch.Tensor) and val.dim() == 2 and statically_known_true(val.shape[-1] == hidden)


def fuse_norm_reshape(graph: Graph) -> int:
    """``rms_norm(x).reshape(-1, H)`` -> ``rms_norm(x.reshape(-1, H))``; the same for the fused op.

    Applies when every user of the normalised output flattens it to 2-D; the fused op's residual
    is reshaped back for its users.
    """
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (rms_norm.torch_op, fused_add_rms_norm.torch_op):
            continue
        is_fused = node.target is fused_add_rms_norm.torch_op
        op = fused_add_rms_norm if is_fused else rms_norm
        args = full_args(node, op)
        x_val = value(args[0])
        if not isinstance(x_val, torch.Tensor) or x_val.dim() <= 2:
            continue
        hidden = x_val.shape[-1]
        if is_fused:
            items = {u: u.args[1] for u in node.users}
            if not all(u.target is operator.getitem for u in items):
                continue
            outs = [u for u, i in items.items() if i == 0]
            residuals = [u for u, i in items.items() if i == 1]
        else:
            outs, residuals = [node], []
        flattens = [u for o in outs for u in o.users]
        if not flattens or not all(_flattens_last_dim(u, hidden) for u in flattens):
            continue
        n_in = 2 if is_fused else 1
        last = size_arg(graph, args[0], x_val.dim() - 1, node)
        flat = [call(graph, _aten.reshape.default, (a, [-1, last]), node) for a in args[:n_in]]
        trailing = args[n_in:] if args[-1] is not None else args[n_in:-1]
        new = call(graph, node.target, (*flat, *trailing), node)
        new_out = call(graph, operator.getitem, (new, 0), node) if is_fused else new
        for user in flattens:
            user.replace_all_uses_with(new_out)
            graph.erase_node(user)
        if residuals:
            new_res = call(graph, operator.getitem, (new, 1), node)
            shape = shape_args(graph, args[0], node)
            back = call(graph, _aten.reshape.default, (new_res, shape), node)
            for r in residuals:
                r.replace_all_uses_with(back)
        for o in outs:
            if o is not node:
                graph.erase_node(o)
        for r in residuals:
            graph.erase_node(r)
        graph.erase_node(node)
        count += 1
    return count


#: name -> pass, in the order they run (the QK-norm + RoPE fusions first: the reshape fusion would
#: flatten a one-head norm out of their pattern; the add fusion before the reshape fusion: it makes
#: the fused nodes that the reshape fusion then flattens; the quant fusions last: they take the 2-D
#: norms it leaves).
FUSION_PASSES = {
    "qk_norm_rope": fuse_qk_norm_rope,
    "hf_qk_norm_rope": fuse_hf_qk_norm_rope,
    "add_rms_norm": fuse_add_rms_norm,
    "rms_norm_reshape": fuse_norm_reshape,
    "rms_norm_quant": fuse_norm_quant,
    "silu_and_mul_quant": fuse_activation_quant,
}

#: name -> {op the fusion rewrites: op it makes}: the ops a graph can hold after the fusions,
#: for the plan reported of a graph served from the FX graph cache (the pass did not run).
FUSION_MAKES: dict[str, dict[str, tuple[str, ...]]] = {
    "qk_norm_rope": {"rotary_embedding": ("fused_qk_norm_rope",)},
    "hf_qk_norm_rope": {"rotary_pos_emb": ("fused_qk_norm_rope",)},
    "add_rms_norm": {"rms_norm": ("fused_add_rms_norm",)},
    "rms_norm_reshape": {},
    "rms_norm_quant": {
        "static_quant_fp8": ("rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant"),
        "static_group_quant_fp8": ("rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant"),
        "dynamic_quant_fp8": ("rms_norm_dynamic_quant_fp8", "fused_add_rms_norm_dynamic_quant_fp8"),
        "dynamic_group_quant_fp8": ("rms_norm_group_quant_fp8", "fused_add_rms_norm_group_quant_fp8"),
    },
    "silu_and_mul_quant": {
        "static_quant_fp8": ("silu_and_mul_static_quant_fp8",),
        "static_group_quant_fp8": ("silu_and_mul_static_quant_fp8",),
        "dynamic_group_quant_fp8": ("silu_and_mul_group_quant_fp8",),
    },
}
