"""Random inputs for tests, benchmarks and the conformance kit: varied, never all zeros."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def generator(seed: int, device: torch.device | str) -> torch.Generator:
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(seed)
    return gen


def randn(
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device | str,
    gen: torch.Generator,
    *,
    scale: float = 1.0,
    shift: float = 0.0,
) -> torch.Tensor:
    """Normal values drawn in fp32 (same numbers for every dtype), then cast."""
    t = torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32)
    return (t * scale + shift).to(dtype)


def strided_rows(
    rows: int,
    hidden: int,
    dtype: torch.dtype,
    device: torch.device | str,
    gen: torch.Generator,
    *,
    pad: int = 64,
) -> torch.Tensor:
    """A (rows, hidden) view whose row stride is ``hidden + pad``: non-contiguous, last dim dense."""
    wide = randn((rows, hidden + pad), dtype, device, gen)
    return wide[:, :hidden]
