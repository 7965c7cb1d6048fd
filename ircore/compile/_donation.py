"""Donated buffers: ``maybe_inplace`` calls in Dynamo's graph, and clones nothing needs.

- :func:`remove_dead_probes`: under Dynamo, ``op.maybe_inplace`` records the functional op to learn
  whether its results fit its in-place arguments (``IrOp._traced_maybe_inplace``); where they do,
  that node has no users. Removed before compiling.
- :func:`check_donations`: ``maybe_inplace(x, ...)`` donates ``x``: the node writes the results
  into it. A read of ``x`` after the node reads the results, not ``x`` (eagerly it reads either,
  depending on the implementation), so it is refused at compile time, naming the node. The call's
  results are separate nodes (``aten.alias`` of the written argument, made right after it), so
  their reads are told apart from reads of ``x``.
- :func:`eliminate_clones` (post-grad, after lowering): ``aten.clone(v)`` becomes ``v`` where no
  node reads ``v`` after the clone and ``v`` is not memory the caller owns (a graph input, a
  constant, or a view of one). The graph is functional there, so this changes no value; it lets
  Inductor's re-inplacing write into ``v`` itself instead of into a copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from ircore.compile._graph import full_args, ircore_ops_by_target
from ircore.errors import IrcoreError
from ircore.op import IrOp, all_ops


class DonatedInputError(IrcoreError, RuntimeError):
    """A tensor given to ``op.maybe_inplace`` is read after the call (compile time)."""


def _inplace_ops() -> dict[Any, IrOp]:
    return {op.torch_inplace_op: op for op in all_ops().values() if op.torch_inplace_op is not None}


def remove_dead_probes(gm: GraphModule) -> int:
    """Erase functional ircore nodes that nothing reads (they have no side effects)."""
    targets = ircore_ops_by_target()
    dead = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets and not n.users]
    for node in reversed(dead):
        gm.graph.erase_node(node)
    if dead:
        gm.recompile()
    return len(dead)


_IRCORE_DIR = str(Path(__file__).parents[1])


def _where(node: Node) -> str:
    """`` (file, line, function: code)`` of the innermost frame outside ircore that made ``node``."""
    lines = (node.meta.get("stack_trace") or "").splitlines()
    frames = [
        (line.strip(), lines[i + 1].strip() if i + 1 < len(lines) else "")
        for i, line in enumerate(lines)
        if line.strip().startswith("File ")
    ]
    outside = [frame for frame in frames if _IRCORE_DIR not in frame[0]]
    if not outside:
        return ""
    where, code = outside[-1]
    return f" at {where}: {code}" if code else f" at {where}"


def check_donations(gm: GraphModule) -> int:
    """Refuse reads of a tensor after ``maybe_inplace`` donated it; returns the calls checked."""
    inplace_ops = _inplace_ops()
    if not inplace_ops:
        return 0
    nodes = list(gm.graph.nodes)
    order = {node: i for i, node in enumerate(nodes)}
    checked = 0
    for node in nodes:
        op = inplace_ops.get(node.target) if node.op == "call_function" else None
        if op is None:
            continue
        checked += 1
        args = full_args(node, op)
        donated = {args[i]: op.param_names[i] for i in op.inplace_indices if isinstance(args[i], Node)}
        results = set()
        after = node.next
        while after.op == "call_function" and after.target is torch.ops.aten.alias.default:
            if after.args[0] not in donated:
                break
            results.add(after)
            after = after.next
        for arg, name in donated.items():
            for user in arg.users:
                if order[user] <= order[node] or user in results:
                    continue
                what = "returns it" if user.op == "output" else f"reads it (node {user.name!r}{_where(user)})"
                raise DonatedInputError(
                    f"ircore.ops.{op.name}.maybe_inplace (node {node.name!r}{_where(node)}) donates its "
                    f"argument {name!r} ({arg.name}): it writes the results into it. The code then {what}, "
                    "which would see the results, not the value it had. Use the tensors maybe_inplace "
                    f"returns, or call the functional op (ircore.ops.{op.name}(...)) where {name!r} is "
                    "needed afterwards"
                )
    return checked


_VIEW_OPS = {
    getattr(torch.ops.aten, name).default
    for name in ("view", "reshape", "alias", "expand", "permute", "t", "transpose", "squeeze", "unsqueeze")
    if hasattr(getattr(torch.ops.aten, name), "default")
}
_VIEW_OPS |= {
    torch.ops.aten.slice.Tensor,
    torch.ops.aten.select.int,
    torch.ops.aten.as_strided.default,
    torch.ops.aten.transpose.int,
    torch.ops.aten.squeeze.dim,
    torch.ops.aten.unsqueeze.default,
    torch.ops.aten.view.dtype,
}


def _owned_by_caller(node: Node) -> bool:
    """A graph input or constant, or a view of one (memory the caller still owns)."""
    while node.op == "call_function" and node.target in _VIEW_OPS and node.args:
        base = node.args[0]
        if not isinstance(base, Node):
            return False
        node = base
    return node.op in ("placeholder", "get_attr")


def _readers(node: Node) -> list[Node]:
    """Nodes reading ``node``'s memory: its users, and through views their users."""
    out, stack = [], list(node.users)
    while stack:
        user = stack.pop()
        out.append(user)
        if user.op == "call_function" and user.target in _VIEW_OPS:
            stack.extend(user.users)
    return out


def _same_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

    return a.dim() == b.dim() and bool(statically_known_true(sym_eq(tuple(a.stride()), tuple(b.stride()))))


def eliminate_clones(graph: Graph) -> int:
    """``clone(v)`` -> ``v`` where nothing reads ``v`` after the clone and the caller does not own
    ``v``; returns how many were removed."""
    clone = torch.ops.aten.clone.default
    order = {node: i for i, node in enumerate(graph.nodes)}
    removed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not clone or not isinstance(node.args[0], Node):
            continue
        source = node.args[0]
        if _owned_by_caller(source):
            continue
        val, src = node.meta.get("val"), source.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(src, torch.Tensor):
            continue
        if val.dtype != src.dtype or val.device != src.device or not _same_strides(val, src):
            continue  # the clone changes the layout someone relies on
        if any(order[reader] > order[node] for reader in _readers(source) if reader is not node):
            continue
        node.replace_all_uses_with(source)
        graph.erase_node(node)
        removed += 1
    return removed
