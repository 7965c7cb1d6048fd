"""Implementations used by core tests: exact native signatures, with recognisable behaviour."""

from __future__ import annotations

import torch

import ircore

CALLS: list[str] = []


def rms_norm_a(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    CALLS.append("a")
    return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size)


def rms_norm_b(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    CALLS.append("b")
    return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size)


def only_fp32(x, weight, epsilon, variance_size):
    return x.dtype == torch.float32


def fused_inplace(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like vLLM's kernel: output into x, residual into x_residual."""
    CALLS.append("inplace")
    out, residual = ircore.ops.fused_add_rms_norm.native(x, x_residual, weight, epsilon, variance_size)
    x_residual.copy_(residual)
    x.copy_(out)
    return x, x_residual
