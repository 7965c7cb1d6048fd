"""Implementations used by core tests: exact native signatures, with recognisable behaviour."""

from __future__ import annotations

import torch

import ircore

CALLS: list[str] = []


def rms_norm_a(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    CALLS.append("a")
    # contiguous, as a kernel's output is (what the op compiled graphs hold for it declares)
    return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size).contiguous()


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


# ---------------------------------------------------------------------- opaque kernels (torch custom ops)
# Stand-ins for a provider's compiled kernels: graphs hold them as their own ops, as they would
# hold vllm_c's or triton's.
@torch.library.custom_op("ircore_test::rms_norm", mutates_args=())
def _rms_norm_kernel(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> torch.Tensor:
    CALLS.append("opaque")
    return ircore.ops.rms_norm.native(x, weight, epsilon, None)


@_rms_norm_kernel.register_fake
def _(x, weight, epsilon):
    return torch.empty_like(x)


@torch.library.custom_op("ircore_test::fused_add_rms_norm_", mutates_args=("x", "x_residual"))
def _fused_inplace_kernel(
    x: torch.Tensor, x_residual: torch.Tensor, weight: torch.Tensor | None, epsilon: float
) -> None:
    CALLS.append("opaque_inplace")
    out, residual = ircore.ops.fused_add_rms_norm.native(x, x_residual, weight, epsilon, None)
    x_residual.copy_(residual)
    x.copy_(out)


@_fused_inplace_kernel.register_fake
def _(x, x_residual, weight, epsilon):
    return None


def rms_norm_opaque(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    return torch.ops.ircore_test.rms_norm(x, weight, epsilon)


def no_variance_size(x, weight, epsilon, variance_size):
    return variance_size is None


def fused_inplace_opaque(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    torch.ops.ircore_test.fused_add_rms_norm_(x, x_residual, weight, epsilon)
    return x, x_residual


def fused_no_variance_size(x, x_residual, weight, epsilon, variance_size):
    return variance_size is None
