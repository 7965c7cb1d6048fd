"""Compare an implementation's output with the op's fp64 reference, within the op's tolerance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ircore.op import IrOp


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flatten(item)]


@dataclass(frozen=True)
class Comparison:
    """How far an output is from the reference, in units of the tolerance.

    ``worst`` is the largest ``|out - ref| / (atol + rtol * |ref|)`` over every element of every
    output: at most 1 passes. ``problem`` says what is wrong (None when the output passes).
    """

    worst: float
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def _error_ratio(got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """Per element ``|got - ref| / (atol + rtol*|ref|)``; 0 where equal (infinities included), inf
    where exactly one of the two is NaN."""
    allowed = atol + rtol * ref.abs()
    ratio = (got - ref).abs() / allowed
    ratio = torch.where(got == ref, torch.zeros_like(ratio), ratio)
    got_nan, ref_nan = got.isnan(), ref.isnan()
    ratio = torch.where(got_nan & ref_nan, torch.zeros_like(ratio), ratio)
    return torch.where(got_nan ^ ref_nan, torch.full_like(ratio, float("inf")), ratio)


def first_float_tensor(args: tuple[Any, ...]) -> torch.Tensor:
    """The activation whose dtype sets the tolerance: the first floating-point tensor argument
    (an op may take integer tensors first, as the rotary ops' ``positions``); else the first tensor."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return next((t for t in tensors if t.is_floating_point()), tensors[0])


def compare_to_reference(
    op: IrOp, out: Any, args: tuple[Any, ...], *, label: str = "", where: str | None = None
) -> Comparison:
    """Measure ``out`` against ``op.reference(*args)``; never raises for a wrong output.

    Each output must have the native output's dtype and shape, hold no NaN where the reference
    has none, and satisfy ``|out - ref| <= atol + rtol * |ref|`` with the op's tolerance for the
    dtype of the first floating-point tensor argument. A problem starts with ``where`` (default:
    the op, ``label`` and the dtype).
    """
    if op.reference is None:
        raise ValueError(f"op {op.name!r} has no fp64 reference")
    x = first_float_tensor(args)
    tol = op.tolerance(x.dtype)
    expected_meta = _flatten(op.native(*args))
    refs = _flatten(op.reference(*args))
    outs = _flatten(out)
    where = f"ircore op {op.name} [{label}] {x.dtype}" if where is None else where
    if len(outs) != len(refs):
        return Comparison(float("inf"), f"{where}: {len(outs)} outputs, expected {len(refs)}")
    worst, problem = 0.0, None
    for i, (got, ref, meta) in enumerate(zip(outs, refs, expected_meta)):
        if got.dtype != meta.dtype:
            return Comparison(float("inf"), f"{where}: output {i} dtype {got.dtype} != {meta.dtype}")
        if got.shape != meta.shape:
            return Comparison(
                float("inf"), f"{where}: output {i} shape {tuple(got.shape)} != {tuple(meta.shape)}"
            )
        g, r = got.detach().double().cpu(), ref.detach().double().cpu()
        if not g.numel():
            continue
        ratio = _error_ratio(g, r, tol.atol, tol.rtol)
        at = int(ratio.argmax())
        output_worst = float(ratio.flatten()[at])
        worst = max(worst, output_worst)
        if output_worst > 1.0 and problem is None:
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(at), ratio.shape))
            bad = int((ratio > 1.0).sum())
            problem = (
                f"{where}: output {i}: {bad} of {ratio.numel()} elements outside the tolerance "
                f"(atol={tol.atol:g}, rtol={tol.rtol:g}); worst at index {index}: got "
                f"{float(g[index]):.6g}, expected {float(r[index]):.6g} "
                f"({output_worst:.3g}x the tolerance)"
            )
    return Comparison(worst, problem)


def assert_close_to_reference(op: IrOp, out: Any, args: tuple[Any, ...], *, label: str = "") -> None:
    """Raise ``AssertionError`` naming op, sample, output index and dtype if ``out`` is off.

    The check is :func:`compare_to_reference`'s.
    """
    comparison = compare_to_reference(op, out, args, label=label)
    if comparison.problem is not None:
        raise AssertionError(comparison.problem)
