"""The batch-invariance check: does each output row keep its bits whatever the batch around it?

An implementation that claims batch invariance (``ImplSpec(batch_invariant=...)``, or native's
``register_op(batch_invariant=...)``) promises that a row's output depends, bit for bit, only on
that row and the call's other arguments: not on how many rows the batch has, where the row sits
in it, or what the other rows hold. :func:`invariance_problem` checks that for one op, one
implementation and one sample of the op: the sample gives the call's shape and its other
arguments (weights, epsilons, ``variance_size``...), the op's ``make_inputs`` the rows. A probe
row is computed alone (a batch of one), then placed at the start, the middle and the end of
batches of 1, 3, 64 and 1000 rows of other values, contiguous and with a padded row stride;
every copy must equal the alone result exactly (``torch.equal``, NaNs never expected).

The row arguments of a call are its 2-D tensors with the first tensor's row count (``x``, a
residual, a gate); 1-D tensors and scalars are per call. Nothing here knows an op by name: an op
declared tomorrow is checked the same way, from its ``sample_inputs`` and ``make_inputs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ircore import dispatch
from ircore.errors import CONTAINED
from ircore.op import IrOp

#: Batch sizes the check places the probe row in (the issue's matrix: 1, 3, 64, 1000).
BATCH_SIZES = (1, 3, 64, 1000)
#: The padding of a strided batch's rows (row stride = hidden + pad).
_PAD = 64


def claimed_entry(op: IrOp[..., Any], provider: str) -> dispatch.Entry | None:
    """What batch-invariant mode runs for ``provider`` (or ``native``), or None: no claim."""
    entry = op.invariant_entry(provider)
    if entry is None or entry.call is op.refuse_variant:
        return None
    return entry


def _row_indices(args: tuple[Any, ...]) -> tuple[int, ...]:
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is None or first.dim() != 2:
        return ()
    rows = first.shape[0]
    return tuple(
        i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() == 2 and a.shape[0] == rows
    )


def call_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What makes two samples the same check: row widths, and every other argument's value or
    tensor shape and dtype (samples that differ only in their rows' values or layout are one)."""
    rows = _row_indices(args)
    key: list[Any] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            key.append(("row", a.shape[1], a.dtype) if i in rows else ("t", tuple(a.shape), a.dtype))
        else:
            key.append(tuple(a) if isinstance(a, list) else a)  # a group shape or block size
    return tuple(key)


def _layout(t: torch.Tensor, strided: bool) -> torch.Tensor:
    """``t`` (2-D) as a contiguous tensor, or as a view with a padded row stride."""
    if not strided:
        return t.contiguous()
    wide = torch.zeros((t.shape[0], t.shape[1] + _PAD), dtype=t.dtype, device=t.device)
    view = wide[:, : t.shape[1]]
    view.copy_(t)
    return view


def _outputs(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _draw(
    op: IrOp[..., Any], args: tuple[Any, ...], rows: tuple[int, ...], count: int, seed: int
) -> list[torch.Tensor]:
    """``count`` rows for each row argument: from the op's ``make_inputs`` (its values' domain),
    else normal values."""
    made: tuple[Any, ...] = ()
    if op.make_inputs is not None:
        a = args[rows[0]]
        made = op.make_inputs((count, a.shape[1]), a.dtype, str(a.device), seed)
    candidates = [m for m in made if isinstance(m, torch.Tensor) and m.dim() == 2 and m.shape[0] == count]
    drawn = []
    for n, i in enumerate(rows):
        a = args[i]
        pick = candidates[n] if n < len(candidates) else None
        if pick is None or pick.shape[1] != a.shape[1] or pick.dtype != a.dtype:
            gen = torch.Generator(device=a.device).manual_seed(seed + i)
            pick = torch.randn((count, a.shape[1]), generator=gen, device=a.device).to(a.dtype)
        drawn.append(pick)
    return drawn


def _batches(
    drawn: list[torch.Tensor], sizes: Sequence[int]
) -> Iterator[tuple[int, tuple[int, ...], list[torch.Tensor]]]:
    """``(size, positions of the probe, row tensors)``: the probe row (row 0 of the draw) at the
    start, middle and end of batches of the other rows drawn."""
    for size in sizes:
        positions = tuple(sorted({0, size // 2, size - 1}))
        batch = []
        for t in drawn:
            b = t[1 : size + 1].clone()
            for p in positions:
                b[p] = t[0]
            batch.append(b)
        yield size, positions, batch


def invariance_problem(
    op: IrOp[..., Any],
    provider: str,
    args: tuple[Any, ...],
    *,
    sizes: Sequence[int] = BATCH_SIZES,
    seed: int = 0,
    fn: Callable[..., Any] | None = None,
) -> tuple[str, str | None]:
    """Check ``provider``'s claim on one sample: ``(status, problem)`` with status ``"passed"``,
    ``"failed"`` or ``"declined"`` (no claim, no row arguments, or its predicates refuse every
    layout), and the problem in words where it failed.

    ``fn``: check this function instead of what the mode runs for ``provider`` (for probing a
    kernel that claims nothing; tools/find_invariance.py).
    """
    rows = _row_indices(args)
    if not rows:
        return "declined", "the call has no 2-D row arguments"
    entry = claimed_entry(op, provider)
    if fn is None:
        if entry is None:
            return "declined", f"{provider} claims no batch invariance for {op.name}"
        run, accepts = entry.call, entry.supports_args
    else:
        run, accepts = fn, None
    checked = False
    drawn = _draw(op, args, rows, max(sizes) + 1, seed)
    for strided in (False, True):
        alone = list(args)
        probe_done = False
        reference: list[torch.Tensor] = []
        for size, positions, batch in _batches(drawn, sizes):
            if not probe_done:
                for i, t in zip(rows, batch):
                    alone[i] = _layout(t[positions[0] : positions[0] + 1], strided)
                call = tuple(alone)
                if accepts is not None and not accepts(*call):
                    break  # this layout is not claimed (or not supported): nothing to check
                reference = [o.clone() for o in _outputs(run(*call))]
                probe_done = True
            call_args = list(args)
            for i, t in zip(rows, batch):
                call_args[i] = _layout(t, strided)
            call = tuple(call_args)
            if accepts is not None and not accepts(*call):
                layout = "strided" if strided else "contiguous"
                return "failed", (
                    f"{provider}.{op.name}: its claim accepts the row alone but not a {layout} batch of "
                    f"{size} rows of the same call: in batch-invariant mode the two would run different "
                    "implementations (or fail); a claim must not depend on the number of rows"
                )
            try:
                outs = _outputs(run(*call))
            except CONTAINED as exc:
                return (
                    "failed",
                    f"{provider}.{op.name}: a batch of {size} rows raised {type(exc).__name__}: {exc}",
                )
            for k, (out, ref) in enumerate(zip(outs, reference)):
                if out.dim() == 0 or out.shape[0] != size:
                    continue  # not a per-row output
                for p in positions:
                    if not torch.equal(out[p : p + 1], ref):
                        diff = (out[p : p + 1].double() - ref.double()).abs().max().item()
                        layout = "strided" if strided else "contiguous"
                        return "failed", (
                            f"{provider}.{op.name} is not batch-invariant: output {k} of a row at position "
                            f"{p} of a {layout} batch of {size} rows (width {ref.shape[-1]}, "
                            f"{str(ref.dtype).replace('torch.', '')}) differs from the same row computed "
                            f"alone by up to {diff:.3g}; the reduction order must not depend on the "
                            "number of rows (fix the launch configuration per hidden size) or the claim "
                            "must go"
                        )
            checked = True
    return (
        ("passed", None) if checked else ("declined", f"{provider} claims invariance for none of these calls")
    )


def invariance_samples(
    op: IrOp[..., Any], dtype: torch.dtype, device: str, seed: int = 0
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The op's samples that make distinct invariance checks (see :func:`call_key`)."""
    if op.sample_inputs is None:
        return
    seen = set()
    for sample in op.sample_inputs(dtype, device, seed):
        if not _row_indices(sample.args):
            continue
        key = call_key(sample.args)
        if key in seen:
            continue
        seen.add(key)
        yield sample.label, sample.args


def check_invariance(
    provider: str,
    *,
    device: str = "cpu",
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.bfloat16),
    ops: Sequence[str] | None = None,
    sizes: Sequence[int] = BATCH_SIZES,
    max_samples: int | None = None,
) -> dict[str, int]:
    """Check every batch-invariance claim of ``provider`` (or ``native``): each op's distinct
    samples, each dtype. Raises ``AssertionError`` naming the first claim that does not hold;
    returns the number of samples checked per op."""
    from ircore.op import all_ops

    dispatch.ensure_loaded()
    checked: dict[str, int] = {}
    for name, op in sorted(all_ops().items()):
        if ops is not None and name not in ops:
            continue
        if provider != dispatch.NATIVE and provider not in op.impls:
            continue
        if claimed_entry(op, provider) is None:
            continue
        checked[name] = 0
        for dtype in dtypes:
            for n, (label, args) in enumerate(invariance_samples(op, dtype, device)):
                if max_samples is not None and n >= max_samples:
                    break
                status, problem = invariance_problem(op, provider, args, sizes=sizes)
                if status == "failed":
                    raise AssertionError(f"{problem} [{label}, {device}]")
                checked[name] += status == "passed"
    return checked
