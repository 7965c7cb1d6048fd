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
