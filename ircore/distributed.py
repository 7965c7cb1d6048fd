"""ircore's ops on DTensor: sharding rules for tensor and sequence parallelism.

Every op of ``ircore.ops`` works row by row: a row is the last dimension, which the norms
normalise and ``silu_and_mul`` splits into its [gate, up] halves. So each rank can run an op on
its own shard whenever no row is split between ranks: ``x`` Replicate, or Shard(d) for any d but
the last, with the weight Replicate; the outputs then have x's placement. These rules are given
to DTensor through torch's public ``register_sharding``. DTensor brings any other input to the
allowed placement its cost model finds cheapest before the local call: ``x`` sharded on its last
dimension is all-gathered to Replicate (the result is Replicate), and so is one sharded on a
dimension shorter than the mesh (DTensor's own rule); a Partial ``x`` is reduced, a sharded
weight is all-gathered.

The local call is ``torch.ops.ircore.<op>`` on each rank's shard, which runs ircore's normal
dispatch: each rank runs its own best implementation (its providers, priorities and scopes).

``import ircore`` does not import this module: ``ircore._import_hook`` imports it and calls
:func:`register_sharding_rules` when ``torch.distributed.tensor`` is imported (the package every
DTensor comes from), or at ``import ircore`` if it already is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ircore.op import IrOp, get_op

__all__ = ["ROW_WISE_OPS", "register_sharding_rules"]

_log = logging.getLogger("ircore")

ROWS = "rows"  # holds whole rows: sharded like x, never on its last dimension
WHOLE = "whole"  # needed whole on every rank (Replicate)

#: For each op, the role of each tensor parameter (parameters not named are not tensors).
ROW_WISE_OPS: Mapping[str, Mapping[str, str]] = {
    "rms_norm": {"x": ROWS, "weight": WHOLE},
    "fused_add_rms_norm": {"x": ROWS, "x_residual": ROWS, "weight": WHOLE},
    "silu_and_mul": {"x": ROWS},
    "rms_norm_gated": {"x": ROWS, "gate": ROWS, "weight": WHOLE},
    "layer_norm": {"x": ROWS, "weight": WHOLE, "bias": WHOLE},
}

_lock = threading.Lock()
_registered = False


def _row_wise_shardings(
    op: IrOp, roles: Mapping[str, str], overload: Any
) -> Callable[..., list[tuple[list, list]]]:
    """The ``register_sharding`` function of one of ``op``'s overloads: placements keeping rows whole.

    ``maybe_inplace`` returns nothing (it writes into ``x`` and ``x_residual``, whose placements
    the strategy keeps), so its strategies list no outputs.
    """
    n_outputs = len(overload._schema.returns)

    def shardings(*args: Any, **kwargs: Any) -> list[tuple[list, list]]:
        from torch.distributed.tensor import Replicate, Shard

        # DTensor passes the arguments as the caller gave them; tensors arrive as DTensorSpecs.
        given = [*zip(op.param_names, args), *kwargs.items()]
        x = dict(given)["x"]
        _note_split_rows(op.name, given, roles, x.ndim)
        allowed = []
        for placement in [Replicate(), *(Shard(d) for d in range(x.ndim - 1))]:
            inputs = [_placement_of(roles.get(name), value, placement, Replicate()) for name, value in given]
            allowed.append(([placement] * n_outputs, inputs))
        return allowed

    if overload is op.torch_inplace_op:
        shardings = _in_place_only(op, roles, shardings)
    shardings.__qualname__ = f"ircore.distributed[{overload}]"
    return shardings


def _in_place_only(op: IrOp, roles: Mapping[str, str], shardings: Callable[..., Any]) -> Callable[..., Any]:
    """The ``maybe_inplace`` overload's rule: refuse what DTensor would have to redistribute.

    The overload writes into ``x`` and ``x_residual``; on a redistributed copy the write would be
    lost. ``op.maybe_inplace`` on DTensors takes the functional op; this guards direct calls of
    ``torch.ops.ircore.<op>.maybe_inplace``.
    """

    def checked(*args: Any, **kwargs: Any) -> list[tuple[list, list]]:
        from torch.distributed.tensor import Replicate, Shard

        given = [*zip(op.param_names, args), *kwargs.items()]
        rows = [(name, spec) for name, spec in given if roles.get(name) == ROWS]
        first = rows[0][1]
        for name, spec in rows:
            for mesh_dim, placement in enumerate(spec.placements):
                kept = isinstance(placement, Replicate) or (
                    isinstance(placement, Shard)
                    and placement.dim % spec.ndim != spec.ndim - 1
                    and spec.shape[placement.dim] >= spec.mesh.size(mesh_dim)
                )
                if not kept or spec.placements != first.placements:
                    from ircore.errors import InvalidArgumentError

                    raise InvalidArgumentError(
                        f"torch.ops.ircore.{op.name}.maybe_inplace on DTensor: argument {name!r} has "
                        f"placements {spec.placements} (shape {tuple(spec.shape)}), which DTensor would "
                        "redistribute before the local call, losing the in-place write; call "
                        f"ircore.ops.{op.name}.maybe_inplace(...) or the functional op instead"
                    )
        return shardings(*args, **kwargs)

    return checked


def _placement_of(role: str | None, value: object, rows: object, whole: object) -> object:
    """One input's placement in a strategy: None for what is not a tensor (weight=None, floats)."""
    if value is None or role is None:
        return None
    return rows if role == ROWS else whole


def _note_split_rows(
    op_name: str, given: Sequence[tuple[str, Any]], roles: Mapping[str, str], ndim: int
) -> None:
    """Say (at INFO) when DTensor will have to gather rows that arrive split between ranks."""
    for name, spec in given:
        if roles.get(name) != ROWS:
            continue
        for mesh_dim, placement in enumerate(spec.placements):
            if placement.is_shard() and placement.dim % ndim == ndim - 1:
                _log.info(
                    "ircore.ops.%s on DTensor: argument %r is sharded on its last dimension (mesh dim %d), "
                    "which the op needs whole; DTensor all-gathers it (Replicate) before the local call. "
                    "Shard another dimension to avoid the communication.",
                    op_name,
                    name,
                    mesh_dim,
                )


def register_sharding_rules() -> None:
    """Give DTensor the rules of every op in :data:`ROW_WISE_OPS` (once; later calls do nothing)."""
    global _registered
    from torch.distributed.tensor.experimental import register_sharding

    with _lock:
        if _registered:
            return
        for name, roles in ROW_WISE_OPS.items():
            op = get_op(name)
            for overload in (op.torch_op, op.torch_inplace_op):
                if overload is not None:
                    register_sharding(overload)(_row_wise_shardings(op, roles, overload))
        _registered = True
