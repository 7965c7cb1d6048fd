"""Small FX helpers the fusion and lowering passes share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.fx import Graph, Node

from ircore.op import IrOp, all_ops


def ircore_ops_by_target() -> dict[Any, IrOp]:
    """Every ircore op's default overload -> its op."""
    return {op.torch_op: op for op in all_ops().values() if op.torch_op is not None}


def full_args(node: Node, op: IrOp) -> list[Any]:
    """The node's arguments in parameter order, defaults filled in.

    Post-grad graphs drop trailing default arguments and may pass some by keyword; the passes
    want every argument, positionally, as the eager call binds them.
    """
    out = []
    for i, name in enumerate(op.param_names):
        if i < len(node.args):
            out.append(node.args[i])
        elif name in node.kwargs:
            out.append(node.kwargs[name])
        else:
            out.append(op.defaults[i])
    return out


def value(arg: Any) -> Any:
    """The fake value a node stands for (or the constant itself)."""
    return arg.meta.get("val") if isinstance(arg, Node) else arg


def call(
    graph: Graph,
    target: Callable[..., Any],
    args: tuple[Any, ...],
    like: Node,
    kwargs: dict[str, Any] | None = None,
) -> Node:
    """Insert ``target(*args, **kwargs)`` before ``like``, with its fake value and ``like``'s stack trace."""
    kwargs = kwargs or {}
    with graph.inserting_before(like):
        node = graph.call_function(target, args, kwargs)
    vals, kwvals = torch.fx.map_arg(args, value), torch.fx.map_arg(kwargs, value)
    leaves = torch.utils._pytree.tree_leaves((vals, kwvals, value(like)))  # like's: for arange & co.
    fake_mode = torch._guards.detect_fake_mode([v for v in leaves if isinstance(v, torch.Tensor)])
    if fake_mode is not None:
        with fake_mode:
            node.meta["val"] = target(*vals, **kwvals)
    else:  # e.g. operator.getitem on a value that is already fake
        node.meta["val"] = target(*vals, **kwvals)
    if "stack_trace" in like.meta:
        node.meta["stack_trace"] = like.meta["stack_trace"]
    return node


def depends_on(args: Iterable[Any], target: Node) -> bool:
    """Whether any node among ``args`` is computed from ``target`` (moving it would make a cycle)."""
    seen: set[Node] = set()
    stack = [a for a in args if isinstance(a, Node)]
    while stack:
        node = stack.pop()
        if node is target:
            return True
        if node in seen or node.op in ("placeholder", "get_attr"):
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return False


def same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Shapes equal for every value the symbols may take (adds no guard)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return a.dim() == b.dim() and all(statically_known_true(x == y) for x, y in zip(a.shape, b.shape))


def size_arg(graph: Graph, node: Node, dim: int, like: Node) -> Any:
    """``node``'s size at ``dim`` as a reshape argument: an int, or a ``sym_size`` node if symbolic."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    size = value(node).shape[dim]
    if is_concrete_int(size):
        return int(size)
    return call(graph, torch.ops.aten.sym_size.int, (node, dim), like)


def shape_args(graph: Graph, node: Node, like: Node) -> list[Any]:
    """``node``'s shape as reshape arguments."""
    return [size_arg(graph, node, dim, like) for dim in range(value(node).dim())]
