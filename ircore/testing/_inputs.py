"""Inputs for a kernel's own tests, at sizes the ops' sample inputs do not cover."""

from __future__ import annotations

import torch

_FP32_MAX = torch.finfo(torch.float32).max


def beyond_fp32_rows(hidden: int, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """Five rows of width ``hidden`` for the norms' fp32-overflow rule (a row whose fp32 sum of
    squares overflows comes out 0), by magnitude: elements past sqrt(fp32 max); a sum of squares
    past fp32 max from elements within it; large with a sum that fits (a quarter of the limit at
    most); ordinary; ordinary with one infinite element. Magnitudes in [0.5, 1) x the row's
    scale, random signs, the same for the same ``hidden``. Compare with the op's ``reference``
    (``equal_nan``: the infinite element's row is NaN there)."""
    gen = torch.Generator().manual_seed(hidden)
    limit = (_FP32_MAX / hidden) ** 0.5
    scale = torch.tensor([[1e20], [2.5 * limit], [0.5 * limit], [1.0], [1.0]], dtype=torch.float64)
    magnitude = torch.rand((5, hidden), generator=gen, dtype=torch.float64) * 0.5 + 0.5
    sign = torch.where(torch.rand((5, hidden), generator=gen) < 0.5, -1.0, 1.0).double()
    x = magnitude * sign * scale
    x[4, hidden // 2] = float("inf")
    return x.to(dtype).to(device)


def fp8_edge_rows(
    hidden: int, dtype: torch.dtype, device: str | torch.device, *, group: int = 128
) -> torch.Tensor:
    """Six rows of width ``hidden`` for an fp8 quant kernel's own tests (any width, any group
    size): ordinary values; all zeros (the scale floor, never NaN); the first ``group`` elements
    zero (an all-zero group); values far past 448 (x1e3); ordinary with +inf and -inf (a static
    scale clamps them to ±fp8_max); tiny values (1e-6 x, fp8 subnormals). Normal values x2,
    the same for the same ``hidden``. Compare with the op's ``reference`` through
    ``ircore.testing.compare_to_reference`` (dequantised, within one fp8 ulp)."""
    gen = torch.Generator().manual_seed(hidden + 8)
    x = torch.randn((6, hidden), generator=gen, dtype=torch.float64) * 2.0
    x[1] = 0.0
    x[2, : min(group, hidden)] = 0.0
    x[3] *= 1e3
    x[4, 0], x[4, hidden - 1] = float("inf"), float("-inf")
    x[5] *= 1e-6
    return x.to(dtype).to(device)
