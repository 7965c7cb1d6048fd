"""Batch-invariant launches of the norm kernels: a configuration fixed per hidden size.

The default launch (kernels.py) tunes ``BLOCK_M`` (rows per program), the warps and a persistent
grid per row-count bucket: each changes how a row's sum of squares is split across threads, so a
row's bits depend on the batch. Here the configuration comes from the hidden size and dtype
alone: one row per program (``BLOCK_M = 1``), the warps the heuristic gives for one row, one
program per row, and for rows over ``MAX_ROW_BLOCK`` the chunked kernel's fixed chunk. Every row
is then reduced by the same code in the same order, whatever the batch. rms_norm_gated's default
launch tunes its warps per row-count bucket (norm_kernels.py): here it takes the heuristic's,
fixed by the group size and dtype. layer_norm (configured by hidden size only, one row per
program) and silu_and_mul (elementwise) are invariant as they are. The fused norm + quant ops'
default launch picks per row-count bucket between the whole row and a walk in chunks
(quant_kernels.norm_candidates), which sum a row's squares in another order: their variants
(impls.<op>_invariant) take the whole row in one program, the heuristic's launch
(quant_kernels.whole_row: fixed by the hidden size, group size and dtype).
"""

from __future__ import annotations

import functools

import torch
import triton

from . import kernels as _k
from . import norm_kernels as _nk


@functools.cache
def norm_config(n: int, elem_bytes: int) -> _k.NormConfig:
    """The launch of a norm over rows of ``n`` elements, whatever the row count."""
    return _k._norm_heuristic(n, 1, elem_bytes)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    n = x.shape[-1]
    return _k.rms_norm(x, weight, epsilon, variance_size, norm_config(n, x.element_size()))


def fused_add_rms_norm_(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> None:
    n = x.shape[-1]
    _k.fused_add_rms_norm_(x, x_residual, weight, epsilon, variance_size, norm_config(n, x.element_size()))


def rms_norm_gated(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> torch.Tensor:
    gs = x.shape[-1] if group_size is None else group_size
    cfg = _nk.gated_heuristic(triton.next_power_of_2(gs), x.element_size())
    return _nk.rms_norm_gated(x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized, cfg)
