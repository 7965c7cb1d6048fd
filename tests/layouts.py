"""Tensors with the layouts provider adapters must get right, for the providers' stand-in tests."""

from __future__ import annotations

import torch

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def randn(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """Normal values drawn in fp32, then cast (the same numbers for every dtype)."""
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


def weight(hidden: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """A norm weight near 1."""
    return (torch.randn(hidden) * 0.1 + 1.0).to(dtype)


def misaligned(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """A contiguous tensor whose data starts one element past a 16-byte boundary."""
    return randn(torch.Size(shape).numel() + 1, dtype=dtype)[1:].view(shape)


def qk_heads(tokens: int, heads: int, head_dim: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """The query heads of a fused QKV projection, as QK-norm sees them: rank 3, rows strided."""
    return randn(tokens, 3 * heads * head_dim, dtype=dtype)[:, : heads * head_dim].view(tokens, heads, head_dim)


def assert_dispatched(op_name: str, args: tuple, provider: str, accepted: bool, label: str = "") -> object:
    """Run ``op_name`` through ircore's dispatch: it must choose ``provider`` exactly when
    ``accepted``, match the op's fp64 reference, and leave its inputs as they were. Returns the output.
    """
    import ircore
    from ircore.testing import assert_close_to_reference

    op = ircore.get_op(op_name)
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    chosen = ircore.explain(op_name, *args).chosen
    assert (chosen == provider) is accepted, f"{label}: chose {chosen}"
    out = op(*args)
    assert_close_to_reference(op, out, before, label=label)
    for name, arg, old in zip(op.param_names, args, before):
        if isinstance(arg, torch.Tensor):
            assert torch.equal(arg, old), f"{label}: the functional call changed {name!r}"
    return out


def norm_block(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple:
    """A decoder block's norm path as compiled graphs hold it: rms_norm, the fused add, silu_and_mul."""
    import ircore

    y = ircore.ops.rms_norm(x, w, 1e-6)
    out, res = ircore.ops.fused_add_rms_norm(y, r, w, 1e-6)
    return ircore.ops.silu_and_mul(out), res
