"""Compare an implementation's output with the op's fp64 reference, within the op's tolerance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ircore.op import IrOp, Quantized

#: fp8 dtypes whose outputs are compared in ulps (dequantised) when the op says how
FP8_DTYPES = frozenset(
    d
    for d in (
        getattr(torch, n, None)
        for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
    )
    if d
)


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


def _error_ratio(
    got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, *, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """Per element ``|got - ref| / (atol + rtol*|ref|)`` (or ``/ allowed``); 0 where equal
    (infinities included), inf where exactly one of the two is NaN."""
    if allowed is None:
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


def fp8_ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` (an fp8 dtype) at each of ``values`` (fp64): the gap between the two
    fp8 numbers around it (subnormal spacing below the smallest normal)."""
    info = torch.finfo(dtype)
    mantissa_bits = round(-torch.log2(torch.tensor(info.eps)).item())
    exponent = torch.floor(torch.log2(values.abs().clamp(min=info.smallest_normal)))
    return torch.exp2(exponent - mantissa_bits)


def _fp8_ratio(
    got: Quantized, ref: Quantized, dtype: torch.dtype, rtol: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per element ``|q*s - r*s_ref| / (ulp(r)*s_ref + rtol*|r*s_ref|)`` (0 where equal, inf where
    one side only is NaN), with the two dequantised tensors: one fp8 ulp of the reference's
    unrounded value (the rounding, or a flip to the other neighbour), plus the scale's tolerance."""
    r = ref.values.detach().double().cpu()
    s_ref = ref.scale.detach().double().cpu().expand_as(r)
    q = got.values.detach().double().cpu()
    s_got = got.scale.detach().double().cpu().expand_as(q)
    g, e = q * s_got, r * s_ref
    allowed = fp8_ulp(r, dtype) * s_ref.abs() + rtol * e.abs()
    return _error_ratio(g, e, 0.0, 0.0, allowed=allowed), g, e


def _fp8_problem(
    op: IrOp, i: int, outs: list[Any], refs: list[Any], args: tuple[Any, ...], rtol: float
) -> tuple[float, str | None] | None:
    """Output ``i`` compared dequantised (``op.quantized_outputs``), or None if it is not one."""
    if op.quantized_outputs is None or outs[i].dtype not in FP8_DTYPES:
        return None
    got = op.quantized_outputs(args, tuple(outs)).get(i)
    ref = op.quantized_outputs(args, tuple(refs)).get(i)
    if got is None or ref is None:
        return None
    if got.values.shape != ref.values.shape:
        return (
            float("inf"),
            f"output {i}: the part compared has shape {tuple(got.values.shape)}, "
            f"expected {tuple(ref.values.shape)}",
        )
    if not got.values.numel():
        return 0.0, None
    over = got.values.detach().double().cpu().abs() > got.limit
    if bool(over.any()):
        first = tuple(int(j) for j in over.nonzero()[0])
        return float("inf"), (
            f"output {i} ({outs[i].dtype}): {int(over.sum())} of {over.numel()} elements beyond "
            f"±{got.limit:g}, the op's clamp; first at index {first}: "
            f"{float(got.values[first].double()):g} (clamp to the op's maximum, not finfo.max, "
            "before casting)"
        )
    ratio, g, e = _fp8_ratio(got, ref, outs[i].dtype, rtol)
    at = int(ratio.argmax())
    worst = float(ratio.flatten()[at])
    if worst <= 1.0:
        return worst, None
    index = tuple(int(j) for j in torch.unravel_index(torch.tensor(at), ratio.shape))
    bad = int((ratio > 1.0).sum())
    return worst, (
        f"output {i} ({outs[i].dtype}, dequantised): {bad} of {ratio.numel()} elements more than one fp8 "
        f"ulp (plus rtol={rtol:g} for the scale) from the reference; worst at index {index}: got "
        f"{float(g[index]):.6g} ({float(got.values[index].double()):.6g} x scale), expected "
        f"{float(e[index]):.6g} ({float(ref.values[index].double()):.6g} x scale) "
        f"({worst:.3g}x the tolerance)"
    )


def compare_to_reference(
    op: IrOp, out: Any, args: tuple[Any, ...], *, label: str = "", where: str | None = None
) -> Comparison:
    """Measure ``out`` against ``op.reference(*args)``; never raises for a wrong output.

    Each output must have the native output's dtype and shape, hold no NaN where the reference
    has none, and satisfy ``|out - ref| <= atol + rtol * |ref|`` with the op's tolerance for the
    dtype of the first floating-point tensor argument. A problem starts with ``where`` (default:
    the op, ``label`` and the dtype).

    An fp8 output of an op that declares ``quantized_outputs`` is compared dequantised, as vLLM's
    tests compare quantised results: only the elements that op says count (padding rows never),
    ``|q*scale - r*scale_ref| <= ulp(r)*scale_ref + rtol*|r*scale_ref|``, where ``r`` is the
    reference's unrounded value in fp8 units and ``ulp(r)`` the fp8 spacing there: the rounding
    itself, or one flip to the other neighbour (``x*(1/s)`` against ``x/s``, a scale one fp32
    ulp apart); a value beyond the op's clamp (``Quantized.limit``) fails. Its scale outputs
    (fp32) are compared as any output, with the op's tolerance.
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
        fp8 = _fp8_problem(op, i, outs, refs, args, tol.rtol)
        if fp8 is not None:
            worst = max(worst, fp8[0])
            if fp8[1] is not None and problem is None:
                problem = f"{where}: {fp8[1]}"
            continue
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
