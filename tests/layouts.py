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


def rope_cache(rows: int, rotary_dim: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """A cos/sin cache ``[rows, rotary_dim]`` as vLLM builds it (fp32 maths, then cast)."""
    inv_freq = 10000.0 ** -(torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    freqs = torch.outer(torch.arange(rows, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def rope_args(
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    *,
    positions: torch.Tensor | None = None,
    rotary_dim: int | None = None,
    cache: torch.Tensor | None = None,
    cache_dtype: torch.dtype | None = None,
    neox: bool = True,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> tuple:
    """``rotary_embedding``'s arguments (``rotary_embedding_query_only``'s for ``key=None``):
    positions of query's first dimension unless given, within a 97-row cache."""
    rows = 97
    rd = rotary_dim or head_size
    positions = torch.randint(0, rows - 8, (query.shape[0],)) if positions is None else positions
    cache = rope_cache(rows, rd, cache_dtype or query.dtype) if cache is None else cache
    rest = (head_size, rd, cache, neox, offsets, cos_sin_format, inverse, rope_dim_offset)
    return (positions, query, *rest) if key is None else (positions, query, key, *rest)
