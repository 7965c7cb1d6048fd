"""QK-norm + RoPE fusions: per-head RMSNorm of q and k, then RoPE, become ``fused_qk_norm_rope``.

Two forms of the chain are matched, as direct graph rewrites (see ``_fusion``'s docstring):

- ``qk_norm_rope`` (vLLM's, ``QKNormRoPEFusionPass``): ``q, k, v = qkv.split([Hq*D, Hk*D, Hv*D],
  -1)``; ``rms_norm(q.view(*, Hq, D), wq, eps)`` (viewed back to q's shape or not), the same for
  k with ``wk`` and the same eps; then ``rotary_embedding(positions, q', k', D, D, cache, neox)``
  (full rotary, standard format, no offsets, not inverse) -> ``fused_qk_norm_rope(qkv, Hq, Hk, Hv,
  D, eps, wq, wk, cache, neox, positions)``, whose q and k slices replace the rotary outputs.
  Any eps, both styles, any head geometry (vLLM registers eps 1e-5/1e-6 and D 64/128/256 only).
- ``hf_qk_norm_rope`` (Hugging Face's Qwen3 attention, with norms and ``apply_rotary_pos_emb``
  routed to ircore): ``rms_norm(q_proj(x).view(B, S, Hq, D), wq, eps).transpose(1, 2)``, the same
  for k, then ``rotary_pos_emb(q', k', cos, sin, 1)`` with cos/sin ``(B or 1, S, D)``. There is no
  packed qkv buffer (q_proj and k_proj are two matmuls), so the rewrite packs one:
  ``qk = cat(q_proj(x), k_proj(x))`` (``[B, S, (Hq+Hk)*D]``), a cos/sin cache with one row per
  token of cos/sin (``cat(cos[..., :D/2], sin[..., :D/2]).reshape(-1, D)``) and positions that
  index it (``b*S + s``, or ``s`` when cos/sin are shared by the batch); then
  ``fused_qk_norm_rope(qk, Hq, Hk, 0, D, eps, wq, wk, cache, True, positions)``, whose q and k
  slices, viewed as ``(B, S, H, D)`` and transposed, are HF's q and k layouts again. This reads
  only the first half of cos/sin, as ``rotary_pos_emb`` allows its implementations to (HF's
  rotary modules make both halves equal).

Nothing is fused where a normed value (the norm's output or its view back) has another user, where
q and k norms differ in eps, or where an argument is not what the fused op computes with. With
native implementations the fused graph's results equal the unfused graph's bit for bit (the
fused op's native composes the same ``rms_norm`` and ``rotary_embedding`` natives, and the HF
rotation ``x*cos + rotate_half(x)*sin`` rounds exactly as ``x1*cos - x2*sin``, ``x2*cos + x1*sin``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import is_concrete_int, statically_known_true

from ircore.compile._graph import call, full_args, shape_args, size_arg, value
from ircore.ops import fused_qk_norm_rope, rms_norm, rotary_embedding, rotary_pos_emb

_aten = torch.ops.aten
_RESHAPES = (_aten.reshape.default, _aten.view.default, _aten._unsafe_view.default)
_SPLITS = (_aten.split_with_sizes.default, _aten.split.Tensor)


def _only_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _tensor(node: Any) -> torch.Tensor | None:
    val = value(node)
    return val if isinstance(val, torch.Tensor) else None


def _getitems(node: Node) -> dict[int, Node] | None:
    """``{index: getitem node}`` if every user of a multi-output node is a getitem, else None."""
    items: dict[int, Node] = {}
    for user in node.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            return None
        if user.args[1] in items:
            return None  # two getitems of one output: keep it simple, leave it
        items[user.args[1]] = user
    return items


def _head_norm(node: Any, head_dim: int) -> tuple[Node, Node, Any, float, Node] | None:
    """``(norm, source, weight, eps, like)`` if ``node`` is ``rms_norm(source.view(*, H, D), weight,
    eps)`` (or that viewed back to ``source``'s shape) with every normed value used only on the way
    to the rotary op; ``source`` is the un-viewed tensor ``[*, H*D]``, ``like`` a node that stays
    in the graph with ``node``'s shape (``source`` or the per-head view)."""
    if not isinstance(node, Node):
        return None
    norm: Any = node
    if node.op == "call_function" and node.target in _RESHAPES:
        norm = node.args[0]
        if not isinstance(norm, Node) or _only_user(norm) is not node:
            return None
    if norm.op != "call_function" or norm.target is not rms_norm.torch_op or _only_user(norm) is None:
        return None
    x, weight, eps, variance_size = full_args(norm, rms_norm)
    if variance_size is not None or not isinstance(weight, Node) or not isinstance(eps, float):
        return None
    w, xv = _tensor(weight), _tensor(x)
    if (
        w is None
        or xv is None
        or w.dim() != 1
        or xv.dim() < 2
        or not statically_known_true(xv.shape[-1] == head_dim)
    ):
        return None
    if not (isinstance(x, Node) and x.op == "call_function" and x.target in _RESHAPES):
        return None
    source = x.args[0]
    sv = _tensor(source)
    if not isinstance(source, Node) or sv is None or sv.dim() != xv.dim() - 1:
        return None
    if not all(statically_known_true(a == b) for a, b in zip(sv.shape[:-1], xv.shape[:-2])):
        return None
    if not statically_known_true(sv.shape[-1] == xv.shape[-2] * head_dim):
        return None
    if norm is node:
        return norm, source, weight, eps, x
    back = _tensor(node)
    if (
        back is None
        or back.dim() != sv.dim()
        or not all(statically_known_true(a == b) for a, b in zip(back.shape, sv.shape))
    ):
        return None
    return norm, source, weight, eps, source


def _split_part(node: Any) -> tuple[Node, int] | None:
    """``(split node, index)`` if ``node`` is one output of a split of a tensor's last dimension."""
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    split: Any = node.args[0]
    if not (isinstance(split, Node) and split.op == "call_function" and split.target in _SPLITS):
        return None
    whole = _tensor(split.args[0])
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    if whole is None or not isinstance(dim, int) or dim not in (-1, whole.dim() - 1):
        return None
    return split, int(node.args[1])


def _split_sizes(split: Node) -> list[int] | None:
    """The part sizes of a split of the last dimension, all concrete ints."""
    sizes = [_tensor(part) for part in value(split)] if isinstance(value(split), (list, tuple)) else None
    if sizes is None or any(s is None for s in sizes):
        return None
    out = [s.shape[-1] for s in sizes if s is not None]
    return [int(s) for s in out] if all(is_concrete_int(s) for s in out) else None


def _replace_outputs(graph: Graph, node: Node, new: dict[Any, Node], chains: list[list[Any]]) -> None:
    """Point each getitem of ``node`` at its replacement; erase them, ``node``, and each chain's
    nodes (rotary input first, back to the per-head view) that nothing reads any more, so that the
    lowering does not lower (and the report count) norms that the fused op replaced."""
    for user in list(node.users):
        user.replace_all_uses_with(new[user.args[1]])
        graph.erase_node(user)
    graph.erase_node(node)
    for chain in chains:
        for dead in dict.fromkeys(chain):  # the rotary input may be the norm itself
            if isinstance(dead, Node) and not dead.users:
                graph.erase_node(dead)


def fuse_qk_norm_rope(graph: Graph) -> int:
    """vLLM's form: split(qkv) -> per-head rms_norm (q, k) -> rotary_embedding."""
    count = 0
    nodes: list[Any] = list(graph.nodes)
    for node in nodes:
        if node.op != "call_function" or node.target is not rotary_embedding.torch_op:
            continue
        (positions, query, key, head_size, rotary_dim, cache, neox, offsets, fmt, inverse, rdo) = full_args(
            node, rotary_embedding
        )
        if not (isinstance(head_size, int) and rotary_dim == head_size and isinstance(neox, bool)):
            continue
        if offsets is not None or fmt != "standard" or inverse is not False or rdo != 0:
            continue
        items = _getitems(node)
        q_norm, k_norm = _head_norm(query, head_size), _head_norm(key, head_size)
        if query is key or any(_only_user(x) is not node for x in (query, key)):
            continue  # a normed value with another user
        if items is None or q_norm is None or k_norm is None or q_norm[3] != k_norm[3]:
            continue
        q_part, k_part = _split_part(q_norm[1]), _split_part(k_norm[1])
        if q_part is None or k_part is None or q_part[0] is not k_part[0] or (q_part[1], k_part[1]) != (0, 1):
            continue
        split = q_part[0]
        sizes = _split_sizes(split)
        if sizes is None or len(sizes) not in (2, 3) or any(s % head_size for s in sizes):
            continue
        qkv = split.args[0]
        tokens = _tensor(qkv).shape[:-1].numel()  # type: ignore[union-attr]
        pos = _tensor(positions)
        if pos is None or not statically_known_true(pos.numel() == tokens):
            continue
        heads = [s // head_size for s in sizes] + [0] * (3 - len(sizes))
        eps = q_norm[3]
        fused = call(
            graph,
            fused_qk_norm_rope.torch_op,
            (qkv, *heads, head_size, eps, q_norm[2], k_norm[2], cache, neox, positions),
            node,
        )
        new = {}
        start = 0
        for index, (like, width) in enumerate(((q_norm[4], sizes[0]), (k_norm[4], sizes[1]))):
            part = call(graph, _aten.slice.Tensor, (fused, -1, start, start + width), node)
            new[index] = call(graph, _aten.reshape.default, (part, shape_args(graph, like, node)), node)
            start += width
        chains = [
            [rope_in, found[0], found[0].args[0]] for rope_in, found in ((query, q_norm), (key, k_norm))
        ]
        _replace_outputs(graph, node, new, chains)
        count += 1
    return count


def _transposed_head_norm(node: Any, head_dim: int) -> tuple[Node, Node, Any, float, Node] | None:
    """``_head_norm`` of the ``(B, S, H, D)`` norm that ``node`` transposes to ``(B, H, S, D)``."""
    if not isinstance(node, Node) or node.op != "call_function":
        return None
    args: Any = node.args
    if node.target is _aten.transpose.int:
        dims = sorted(d % 4 for d in args[1:3])
        if dims != [1, 2]:
            return None
    elif node.target is _aten.permute.default:
        if [d % 4 for d in args[1]] != [0, 2, 1, 3]:
            return None
    else:
        return None
    norm = node.args[0]
    if not isinstance(norm, Node) or _only_user(norm) is not node:
        return None
    found = _head_norm(norm, head_dim)
    nv = _tensor(norm)
    if found is None or nv is None or nv.dim() != 4 or found[0] is not norm:
        return None
    return found


def fuse_hf_qk_norm_rope(graph: Graph) -> int:
    """Hugging Face's form: rms_norm(q_proj(x).view(B,S,H,D)).transpose(1, 2), the same for k,
    then rotary_pos_emb(q, k, cos, sin, 1)."""
    count = 0
    nodes: list[Any] = list(graph.nodes)
    for node in nodes:
        if node.op != "call_function" or node.target is not rotary_pos_emb.torch_op:
            continue
        q, k, cos, sin, unsqueeze_dim = full_args(node, rotary_pos_emb)
        qv, cv, sv = _tensor(q), _tensor(cos), _tensor(sin)
        if unsqueeze_dim != 1 or qv is None or cv is None or sv is None or qv.dim() != 4 or cv.dim() != 3:
            continue
        head_dim = qv.shape[-1]
        if not is_concrete_int(head_dim) or head_dim % 2 or cv.dtype != qv.dtype or sv.dtype != qv.dtype:
            continue
        head_dim = int(head_dim)
        items = _getitems(node)
        q_norm, k_norm = _transposed_head_norm(q, head_dim), _transposed_head_norm(k, head_dim)
        if q is k or any(_only_user(x) is not node for x in (q, k)):
            continue  # a normed value with another user
        if items is None or q_norm is None or k_norm is None or q_norm[3] != k_norm[3]:
            continue
        pq, pk = _tensor(q_norm[1]), _tensor(k_norm[1])
        assert pq is not None and pk is not None
        batch, seq = pq.shape[0], pq.shape[1]
        if pq.dim() != 3 or pk.dim() != 3 or pq.dtype != pk.dtype or pq.device != pk.device:
            continue
        if not all(statically_known_true(a == b) for a, b in zip(pq.shape[:2], pk.shape[:2])):
            continue
        if not (is_concrete_int(pq.shape[-1]) and is_concrete_int(pk.shape[-1])):
            continue  # head counts are ints of the fused op's schema
        if not (statically_known_true(cv.shape[1] == seq) and statically_known_true(cv.shape[2] == head_dim)):
            continue
        if tuple(sv.shape) != tuple(cv.shape):
            continue
        if statically_known_true(cv.shape[0] == batch):
            shared = False
        elif statically_known_true(cv.shape[0] == 1):
            shared = True
        else:
            continue
        hq, hk = int(pq.shape[-1]) // head_dim, int(pk.shape[-1]) // head_dim
        half = head_dim // 2
        qk = call(graph, _aten.cat.default, ([q_norm[1], k_norm[1]], -1), node)
        cos_half = call(graph, _aten.slice.Tensor, (cos, -1, 0, half), node)
        sin_half = call(graph, _aten.slice.Tensor, (sin, -1, 0, half), node)
        rows = call(graph, _aten.cat.default, ([cos_half, sin_half], -1), node)
        cache = call(graph, _aten.reshape.default, (rows, [-1, head_dim]), node)
        seq_arg = size_arg(graph, q_norm[1], 1, node)
        if shared:  # every sequence of the batch reads rows 0..S-1
            steps = call(
                graph,
                _aten.arange.start_step,
                (0, seq_arg, 1),
                node,
                {"dtype": torch.int64, "device": qv.device},
            )
            positions = call(
                graph, _aten.expand.default, (steps, [size_arg(graph, q_norm[1], 0, node), seq_arg]), node
            )
        else:  # row b*S + s of the cache
            rows_arg = (
                call(graph, operator.mul, (size_arg(graph, q_norm[1], 0, node), seq_arg), node)
                if not (is_concrete_int(batch) and is_concrete_int(seq))
                else int(batch) * int(seq)
            )
            positions = call(
                graph,
                _aten.arange.start_step,
                (0, rows_arg, 1),
                node,
                {"dtype": torch.int64, "device": qv.device},
            )
        eps = q_norm[3]
        fused = call(
            graph,
            fused_qk_norm_rope.torch_op,
            (qk, hq, hk, 0, head_dim, eps, q_norm[2], k_norm[2], cache, True, positions),
            node,
        )
        new = {}
        start = 0
        for index, (like, width) in enumerate(((q_norm[4], hq * head_dim), (k_norm[4], hk * head_dim))):
            part = call(graph, _aten.slice.Tensor, (fused, -1, start, start + width), node)
            heads = call(graph, _aten.reshape.default, (part, shape_args(graph, like, node)), node)
            new[index] = call(graph, _aten.permute.default, (heads, [0, 2, 1, 3]), node)
            start += width
        chains = [[rope_in, found[0], found[0].args[0]] for rope_in, found in ((q, q_norm), (k, k_norm))]
        _replace_outputs(graph, node, new, chains)
        count += 1
    return count
