"""Compile-time lowering: each ircore node becomes the implementation an eager call would run.

The choice is the eager rule itself (``dispatch.first_supported`` over the op's process-wide
plan) applied to the node's fake values, so ``ircore.explain`` on tensors with that metadata
gives the same answer. What is put in the node's place:

- ``native``: its function traced into aten ops, which Inductor fuses with its neighbours;
- a functional provider implementation: the opaque op the core built for it
  (``torch.ops.ircore_<provider>.<op>``, or the implementation itself when it is a torch op);
- an in-place implementation: its in-place op, traced under functionalization, so it appears as
  ``auto_functionalized``; Inductor's re-inplacing later lets it write into inputs that are dead
  afterwards and copies only where they are not.

``maybe_inplace`` nodes arrive wrapped in ``auto_functionalized`` (their schema mutates the
in-place arguments); they are first turned into the functional op on the same values, whose
results are the arguments' new values, and lowered like any other node.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from typing import Any

import torch
from torch.fx import Graph, Node

from ircore import _torch_ops, dispatch
from ircore.compile._graph import call, full_args, ircore_ops_by_target, value
from ircore.op import IrOp, all_ops

_log = logging.getLogger("ircore")
_AUTO_FUNCTIONALIZED = tuple(
    hop
    for hop in (
        getattr(torch.ops.higher_order, "auto_functionalized", None),
        getattr(torch.ops.higher_order, "auto_functionalized_v2", None),
    )
    if hop is not None
)


def functional_trace(fn: Any, args: Any) -> torch.fx.GraphModule:
    """Trace ``fn`` with Inductor's decompositions under functionalization (for in-place impls)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.functional_tensor import dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    with enable_python_dispatcher():
        gm = make_fx(dispatch_functionalize(fn), select_decomp_table(), tracing_mode="real")(*args)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


# ---------------------------------------------------------------------- maybe_inplace nodes
# What auto_functionalized_v2 records when a mutated argument is a view of its base, not the base.
_VIEW_INFO = ("alias", "size", "stride", "storage_offset", "slice_dim", "slice_start", "slice_end")


def _inplace_ops() -> dict[Any, IrOp]:
    return {op.torch_inplace_op: op for op in all_ops().values() if op.torch_inplace_op is not None}


def _mutated_bases(node: Node, op: IrOp) -> list[tuple[Node, int]] | None:
    """Per in-place argument: the tensor it is and where its new value is among the outputs.

    ``auto_functionalized`` (v1) passes the arguments by name and returns their new values in
    argument order after the op's outputs; v2 passes bases and says which base each argument is
    (``_<arg>_base_index``); an alias of its base (``_<arg>_alias``: the same size, strides and
    offset) is the base; an argument that is another view of a base (size/stride/slice entries) is
    left alone (the node then dispatches at run time, still correctly).
    """
    kwargs: Any = node.kwargs  # auto_functionalized's: argument names -> values, and its own entries
    if "_all_bases" not in kwargs:  # v1: new values in the schema's order of mutable arguments
        order = [name for name in op.param_names if name in op.inplace_args]
        return [(kwargs[name], 1 + order.index(name)) for name in op.inplace_args]
    bases = kwargs["_all_bases"]
    out = []
    for name in op.inplace_args:
        index = kwargs.get(f"_{name}_base_index")
        # an alias of its base (what maybe_inplace returns under Dynamo) is the base itself
        if index is None or any(f"_{name}_{info}" in kwargs for info in _VIEW_INFO[1:]):
            return None
        out.append((bases[index], 1 + index))
    if len({id(base) for base, _ in out}) != len(out):
        return None  # two in-place arguments share a base
    return out


def functionalize_maybe_inplace(graph: Graph) -> None:
    """``auto_functionalized(<op>.maybe_inplace, ...)`` -> ``<op>.default`` on the same values."""
    inplace_ops = _inplace_ops()
    if not inplace_ops:
        return
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _AUTO_FUNCTIONALIZED:
            continue
        op = inplace_ops.get(node.args[0] if node.args else None)
        if op is None:
            continue
        mutated = _mutated_bases(node, op)
        if mutated is None:
            continue
        args = []
        for i, name in enumerate(op.param_names):
            if name in op.inplace_args:
                args.append(mutated[op.inplace_args.index(name)][0])
            else:
                args.append(node.kwargs.get(name, op.defaults[i]))
        new = call(graph, op.torch_op, tuple(args), node)
        single = len(op.inplace_args) == 1
        for i, (_, position) in enumerate(mutated):
            replacement = new if single else call(graph, operator.getitem, (new, i), node)
            for user in list(node.users):
                if user.target is operator.getitem and user.args[1] == position:
                    user.replace_all_uses_with(replacement)
                    graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)


# ---------------------------------------------------------------------- lowering
def replacement(op: IrOp, entry: dispatch.Entry) -> tuple[Any, bool]:
    """(what to trace in place of an ircore node for ``entry``, whether to trace it functionalized).

    ``native`` is traced into aten ops; a provider's implementation becomes its traced form
    (``ircore._torch_ops.traced_form``): the op the core built for it (for its batch-invariant
    variant where the entry runs that), in place for an in-place one, traced under
    functionalization (``auto_functionalized``).
    """
    impl = op.impls.get(entry.provider)
    if impl is None:
        return entry.call, False
    # in batch-invariant mode an implementation may run its variant (Entry.fn is invariant_fn)
    return _torch_ops.traced_form_of(op, impl, entry.fn)


def known_at_most(vals: tuple[Any, ...], limit: int) -> bool:
    """Whether every tensor among a call's argument values is known to have at most ``limit``
    elements: a size that is symbolic (``dynamic=True``) is not, and nothing is guarded on it
    (the graph serves every size, so the priority's choice stands)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return all(statically_known_true(v.numel() <= limit) for v in vals if isinstance(v, torch.Tensor))


def lower(
    graph: Graph, leave_to_inductor: Mapping[str, int] | None = None
) -> tuple[dict[str, tuple[str, str]], int]:
    """Replace every ircore node; returns ``{node name: (op, provider)}`` and how many are left.

    Each node gets what the eager rule chooses for its fake values (``dispatch.first_supported``
    over the op's process-wide plan, or in batch-invariant mode its invariant plan:
    ``dispatch.lowering_plan``). A provider's op whose fake fails on them (it would fail the
    compile) is passed over with a WARNING naming it, and the walk goes on to the next
    implementation that accepts the call (``native`` at the latest).

    ``leave_to_inductor`` (op name -> element count): a node of such an op whose tensor
    arguments are known to have at most that many elements each gets ``native`` (the plan's own
    native entry), so that Inductor fuses it with its neighbours instead of launching a
    provider's kernel for it.

    Run :func:`functionalize_maybe_inplace` first: ``maybe_inplace`` nodes are lowered as the
    functional op they become.
    """
    from torch._inductor.pattern_matcher import CallFunctionVarArgs

    by_target = ircore_ops_by_target()
    pattern = CallFunctionVarArgs(list(by_target))
    chosen: dict[str, tuple[str, str]] = {}
    small = leave_to_inductor or {}
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in by_target:
            continue
        op = by_target[node.target]
        args = full_args(node, op)
        vals = tuple(value(a) for a in args)
        match: Any = pattern.match(node)  # a Match (a one-node pattern matches its own target)
        entries = dispatch.lowering_plan(op)
        limit = small.get(op.name)
        if limit is not None and known_at_most(vals, limit):
            entries = tuple(e for e in entries if e.provider == dispatch.NATIVE)
        while True:
            entry = dispatch.first_supported(op.name, entries, vals)[0]
            fn, functionalized = replacement(op, entry)
            try:
                match.replace_by_example(fn, args, trace_fn=functional_trace if functionalized else None)
                break
            except Exception as exc:
                if entry.provider == dispatch.NATIVE:
                    raise
                _log.warning(
                    "ircore lowering: provider %r's op for %s failed on %s's fake values (%s: %s); "
                    "lowering it to the next implementation instead (`ircore verify --provider %s` "
                    "checks its fake)",
                    entry.provider,
                    op.name,
                    node.name,
                    type(exc).__name__,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                    entry.provider,
                )
                entries = entries[entries.index(entry) + 1 :]
        chosen[node.name] = (op.name, entry.provider)
    left = leftover(graph)
    if left:
        _log.warning(
            "ircore lowering left %d ircore node(s) in the graph (%s); they dispatch at run time",
            len(left),
            ", ".join(sorted({str(t) for t in left})),
        )
    return chosen, len(left)


def leftover(graph: Graph) -> list[Any]:
    """Targets of nodes that still call an ircore op (directly or inside auto_functionalized)."""
    out = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target in _AUTO_FUNCTIONALIZED and node.args:
            target = node.args[0]
        namespace = getattr(target, "namespace", None)
        if namespace == "ircore":
            out.append(target)
    return out
