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

The batch dimension is the first dimension of the call's first floating tensor of two or more
dimensions (``x``; the RoPE ops' ``query``, or Hugging Face's ``(B, H, S, D)`` q). The row
arguments are the floating tensors of two or more dimensions with that many rows (``x``, a
residual, a gate, ``key``) and the integer tensors with that many rows (per-token ``positions``,
``offsets``); other tensors and scalars are per call. New rows for a floating argument come from
the op's ``make_inputs`` (or normal values); for an integer one, from the sample's own rows (they
index other arguments, such as a cos/sin cache, so only the sample's values are known valid).
Nothing here knows an op by name: an op declared tomorrow is checked the same way, from its
``sample_inputs`` and ``make_inputs``.
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
    if entry is None or entry.call == op.refuse_variant:  # bound methods: equal, never identical
        return None
    return entry


def _is_row(a: Any, rows: int) -> bool:
    if not isinstance(a, torch.Tensor) or a.dim() == 0 or a.shape[0] != rows:
        return False
    return a.dim() >= 2 if a.is_floating_point() else not a.is_complex()


def _row_indices(args: tuple[Any, ...]) -> tuple[int, ...]:
    floats = (a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() >= 2)
    first = next(floats, None)
    if first is None or first.shape[0] == 0:
        return ()
    return tuple(i for i, a in enumerate(args) if _is_row(a, first.shape[0]))


def call_key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What makes two samples the same check: row widths, and every other argument's value or
    tensor shape and dtype (samples that differ only in their rows' values or layout are one)."""
    rows = _row_indices(args)
    key: list[Any] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            key.append(("row", tuple(a.shape[1:]), a.dtype) if i in rows else ("t", tuple(a.shape), a.dtype))
        else:
            key.append(tuple(a) if isinstance(a, list) else a)  # a group shape or block size
    return tuple(key)


def _layout(t: torch.Tensor, strided: bool) -> torch.Tensor:
    """A copy of ``t``, contiguous or (floating, two or more dimensions) a view whose last
    dimension is padded: a copy, so an implementation that works in place changes no other call's
    rows."""
    if not strided or t.dim() < 2 or not t.is_floating_point():
        return t.clone(memory_format=torch.contiguous_format)
    wide = torch.zeros((*t.shape[:-1], t.shape[-1] + _PAD), dtype=t.dtype, device=t.device)
    view = wide[..., : t.shape[-1]]
    view.copy_(t)
    return view


def _outputs(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _draw(
    op: IrOp[..., Any], args: tuple[Any, ...], rows: tuple[int, ...], count: int, seed: int
) -> list[torch.Tensor]:
    """``count`` rows for each row argument (see the module docstring): floating ones from the
    op's ``make_inputs`` where it makes a tensor of the same row shape and dtype, else normal
    values; integer ones resampled from the sample's own rows."""
    made: list[torch.Tensor] = []
    first = args[next(i for i in rows if args[i].is_floating_point())]
    if op.make_inputs is not None:
        made_all = op.make_inputs((count, *first.shape[1:]), first.dtype, str(first.device), seed)
        made = [m for m in made_all if isinstance(m, torch.Tensor) and m.dim() >= 2 and m.shape[0] == count]
    drawn = []
    for i in rows:
        a = args[i]
        gen = torch.Generator(device=a.device).manual_seed(seed + i)
        if not a.is_floating_point():
            pick = a[torch.randint(0, a.shape[0], (count,), generator=gen, device=a.device)]
        else:
            pick = next((m for m in made if m.shape[1:] == a.shape[1:] and m.dtype == a.dtype), None)
            if pick is None:
                pick = torch.randn((count, *a.shape[1:]), generator=gen, device=a.device).to(a.dtype)
            else:
                made = [m for m in made if m is not pick]
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
        return "declined", "the call has no row arguments (a floating tensor of two or more dimensions)"
    dependent = op.batch_dependent(*args) if op.batch_dependent is not None else None
    if dependent:
        return "declined", f"the call depends on the whole batch by the op's definition ({dependent})"
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
