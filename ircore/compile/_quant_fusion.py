"""Norm + fp8 quant and activation + fp8 quant fusions: IR -> IR, before lowering.

vLLM matches these with patterns registered for epsilon 1e-5 / 1e-6 only and rewrites them to its
own ``_C`` kernels. Here each quant op whose input is ``rms_norm``'s output, ``fused_add_rms_norm``'s
normalised output or ``silu_and_mul``'s output, read by nothing else, becomes the fused IR op of
the pair (any epsilon, any shape the ops take); lowering then picks any provider's kernel for it.
The fused ops' natives compose the unfused natives, so the rewrite changes no result of native.
"""

from __future__ import annotations

import operator
from typing import Any

from torch.fx import Graph, Node

from ircore.compile._graph import call, full_args
from ircore.op import IrOp
from ircore.ops import _norm_quant as fused
from ircore.ops import _quant as quant
from ircore.ops import fused_add_rms_norm, rms_norm, silu_and_mul

_STATIC = (quant.static_quant_fp8, quant.static_group_quant_fp8)


def _table() -> dict[tuple[IrOp, IrOp], IrOp]:
    """(producer, quant op) -> the fused op; made when the pass runs (the ops exist by then)."""
    table: dict[tuple[IrOp, IrOp], IrOp] = {}
    for static in _STATIC:  # one body under two names (vLLM's): both fuse to the static op
        table[(rms_norm, static)] = fused.rms_norm_static_fp8_quant
        table[(fused_add_rms_norm, static)] = fused.fused_add_rms_norm_static_fp8_quant
        table[(silu_and_mul, static)] = fused.silu_and_mul_static_quant_fp8
    table[(rms_norm, quant.dynamic_quant_fp8)] = fused.rms_norm_dynamic_quant_fp8
    table[(fused_add_rms_norm, quant.dynamic_quant_fp8)] = fused.fused_add_rms_norm_dynamic_quant_fp8
    table[(rms_norm, quant.dynamic_group_quant_fp8)] = fused.rms_norm_group_quant_fp8
    table[(fused_add_rms_norm, quant.dynamic_group_quant_fp8)] = fused.fused_add_rms_norm_group_quant_fp8
    table[(silu_and_mul, quant.dynamic_group_quant_fp8)] = fused.silu_and_mul_group_quant_fp8
    return table


def _producer(src: Any, ops: tuple[IrOp, ...]) -> tuple[IrOp, Node, Node | None] | None:
    """``(op, its node, the getitem taking its output 0 or None)`` if ``src`` is the output of one
    of ``ops`` (the fused add's normalised output: item 0); else None."""
    if not isinstance(src, Node):
        return None
    by_target = {op.torch_op: op for op in ops}
    if src.op == "call_function" and src.target in by_target:
        return by_target[src.target], src, None
    if src.op == "call_function" and src.target is operator.getitem and src.args[1] == 0:
        parent = src.args[0]
        if isinstance(parent, Node) and parent.target is fused_add_rms_norm.torch_op:
            return fused_add_rms_norm, parent, src
    return None


def _readers(src: Node, node: Node, quant_op: IrOp, quant_args: list[Any]) -> list[Node] | None:
    """Every node reading ``src``, if all are this same quant call (the same arguments): one
    quantization, however many projections read it (a Hugging Face FP8 model quantizes the
    norm's output once per q/k/v or gate/up linear). None if anything else reads it."""
    readers = list(src.users)
    for reader in readers:
        if reader.target is not node.target or full_args(reader, quant_op)[1:] != quant_args[1:]:
            return None
    return readers


def _fuse(graph: Graph, producers: tuple[IrOp, ...]) -> int:
    table = _table()
    quants = {q.torch_op: q for (p, q) in table if p in producers}
    count = 0
    erased: set[Node] = set()
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in quants:
            continue
        quant_op = quants[node.target]
        quant_args = full_args(node, quant_op)
        if node in erased:  # with an earlier reader of the same value
            continue
        found = _producer(quant_args[0], producers)
        if found is None or (found[0], quant_op) not in table:
            continue
        readers = _readers(quant_args[0], node, quant_op, quant_args)
        if readers is None:
            continue
        op, source, item = found
        args = full_args(source, op)
        if op is not silu_and_mul and args[-1] is not None:  # variance_size: the fused ops have none
            continue
        kept = args[:-1] if op is not silu_and_mul else args
        first = min(readers, key=_position(graph))
        new = call(graph, table[(op, quant_op)].torch_op, (*kept, *quant_args[1:]), first)
        if item is None:
            for reader in readers:
                reader.replace_all_uses_with(new)
                graph.erase_node(reader)
            erased.update(readers)
            graph.erase_node(source)
            count += 1
            continue
        # the fused add: the quant's outputs come first (one tensor, or a tuple read by getitem),
        # the residual last
        static = quant_op in _STATIC
        last = 1 if static else 2
        residual = call(graph, operator.getitem, (new, last), first)
        for user in [u for u in source.users if u is not item]:
            if user.target is not operator.getitem or user.args[1] != 1:
                raise AssertionError(f"unexpected user {user.format_node()} of {source.format_node()}")
            user.replace_all_uses_with(residual)
            graph.erase_node(user)
        out = call(graph, operator.getitem, (new, 0), first) if static else new
        for reader in readers:
            reader.replace_all_uses_with(out)
            graph.erase_node(reader)
        erased.update(readers)
        graph.erase_node(item)
        graph.erase_node(source)
        count += 1
    return count


def _position(graph: Graph) -> Any:
    order = {n: i for i, n in enumerate(graph.nodes)}
    return order.__getitem__


def fuse_norm_quant(graph: Graph) -> int:
    """``rms_norm`` / ``fused_add_rms_norm`` then an fp8 quant -> the fused norm + quant op."""
    return _fuse(graph, (rms_norm, fused_add_rms_norm))


def fuse_activation_quant(graph: Graph) -> int:
    """``silu_and_mul`` then a static or group fp8 quant -> the fused activation + quant op."""
    return _fuse(graph, (silu_and_mul,))
