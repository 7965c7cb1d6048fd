"""Donated buffers: ``maybe_inplace`` calls in Dynamo's graph, and clones nothing needs.

- :func:`remove_dead_probes`: under Dynamo, ``op.maybe_inplace`` records the functional op to learn
  whether its results fit its in-place arguments (``IrOp._traced_maybe_inplace``); where they do,
  that node has no users. Removed before compiling.
- :func:`check_donations`: ``maybe_inplace(x, ...)`` donates ``x``: the node writes the results
  into it. A read of ``x`` after the node reads the results, not ``x`` (eagerly it reads either,
  depending on the implementation), so it is refused at compile time, naming the node. The call's
  results are separate nodes (``aten.alias`` of the written argument, made right after it), so
  their reads are told apart from reads of ``x``.

Clones need no pass of ircore's: the lowering inserts none (in-place kernels are functionalized),
and Inductor drops every clone of the functional graph (``remove_noop_ops``, before ircore's
pass) and copies again only where its re-inplacing must: where the source is read later, or is
a graph input the caller still owns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.fx import GraphModule, Node

from ircore.compile._graph import full_args, ircore_ops_by_target
from ircore.errors import DonatedInputError
from ircore.op import IrOp, all_ops


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
