"""Compare an implementation's output with the op's fp64 reference, within the op's tolerance."""

from __future__ import annotations

from typing import Any

import torch

from ircore.op import IrOp


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flatten(item)]


def assert_close_to_reference(op: IrOp, out: Any, args: tuple[Any, ...], *, label: str = "") -> None:
    """Raise ``AssertionError`` naming op, sample, output index and dtype if ``out`` is off.

    Each output must have the native output's dtype and shape, hold no NaN where the reference
    has none, and satisfy ``|out - ref| <= atol + rtol * |ref|`` with the op's tolerance for
    the input dtype.
    """
    if op.reference is None:
        raise ValueError(f"op {op.name!r} has no fp64 reference")
    x = next(a for a in args if isinstance(a, torch.Tensor))
    tol = op.tolerance(x.dtype)
    expected_meta = _flatten(op.native(*args))
    refs = _flatten(op.reference(*args))
    outs = _flatten(out)
    where = f"ircore op {op.name} [{label}] {x.dtype}"
    assert len(outs) == len(refs), f"{where}: {len(outs)} outputs, expected {len(refs)}"
    for i, (got, ref, meta) in enumerate(zip(outs, refs, expected_meta)):
        assert got.dtype == meta.dtype, f"{where}: output {i} dtype {got.dtype} != {meta.dtype}"
        assert got.shape == meta.shape, f"{where}: output {i} shape {tuple(got.shape)} != {tuple(meta.shape)}"
        g, r = got.detach().double().cpu(), ref.detach().double().cpu()
        torch.testing.assert_close(
            g,
            r,
            atol=tol.atol,
            rtol=tol.rtol,
            equal_nan=True,
            msg=lambda m, i=i: f"{where}: output {i}: {m}",
        )
