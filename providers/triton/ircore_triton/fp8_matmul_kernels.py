"""Triton kernels for the fp8 matmuls: ``block_scaled_mm_fp8`` and ``scaled_mm_fp8``.

Tiles of ``a`` and ``b`` are multiplied in fp8 by ``tl.dot`` (fp32 accumulation on sm_89+; the
interpreter emulates it), so no shape restriction of cuBLASLt applies: any M (decode's M = 1),
any K (including K / 128 not a multiple of 4, where ``torch._scaled_mm``'s blockwise path is
silently wrong), any strides. Block scales: each K tile is one activation group (``BLOCK_K ==
block_k``), so the tile's partial product is scaled once per row (``scale_a``) and per column
(``scale_b`` of the column's weight tile) before it is added, as DeepSeek-V3's and vLLM's
``w8a8_block_fp8_matmul`` do. Per-tensor / per-row / per-column scales multiply the finished fp32
sum. The launch config is a heuristic by M (no autotuning yet; the GPU figures will say).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .kernels import _device_ctx, _off_current_device

__all__ = ["block_scaled_mm_fp8", "scaled_mm_fp8"]


def _block_m(m: int) -> int:
    return 16 if m <= 16 else 32 if m <= 32 else 64


@triton.jit
def _block_scaled_mm_kernel(
    A, B, SA, SB, C, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_sam, stride_sak, stride_sbn, stride_sbk,
    stride_cm, stride_cn,
    GROUP_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """``C[m, n] = sum over K tiles g of (A[m, g] . B[n, g]) * SA[m, g] * SB[n // GROUP_N, g]``."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(0, tl.cdiv(K, BLOCK_K)):
        k = g * BLOCK_K + offs_k
        mask_k = k < K
        a_mask = mask_m[:, None] & mask_k[None, :]
        b_mask = mask_n[None, :] & mask_k[:, None]
        a = tl.load(A + offs_m[:, None] * stride_am + k[None, :] * stride_ak, mask=a_mask, other=0.0)
        b = tl.load(B + offs_n[None, :] * stride_bn + k[:, None] * stride_bk, mask=b_mask, other=0.0)
        sa = tl.load(SA + offs_m * stride_sam + g * stride_sak, mask=mask_m, other=0.0)
        sb = tl.load(SB + (offs_n // GROUP_N) * stride_sbn + g * stride_sbk, mask=mask_n, other=0.0)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
    c = acc.to(C.dtype.element_ty)
    c_mask = mask_m[:, None] & mask_n[None, :]
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c, mask=c_mask)


@triton.jit
def _scaled_mm_kernel(
    A, B, SA, SB, BIAS, C, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_sa, stride_sb, stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """``C = (A @ B) * SA[m] * SB[n] (+ BIAS[n])``; a per-tensor scale has stride 0."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        mask_k = k < K
        a_mask = mask_m[:, None] & mask_k[None, :]
        b_mask = mask_k[:, None] & mask_n[None, :]
        a = tl.load(A + offs_m[:, None] * stride_am + k[None, :] * stride_ak, mask=a_mask, other=0.0)
        b = tl.load(B + k[:, None] * stride_bk + offs_n[None, :] * stride_bn, mask=b_mask, other=0.0)
        acc += tl.dot(a, b)
    sa = tl.load(SA + offs_m * stride_sa, mask=mask_m, other=0.0)
    sb = tl.load(SB + offs_n * stride_sb, mask=mask_n, other=0.0)
    acc = acc * sa[:, None] * sb[None, :]
    if HAS_BIAS:
        acc += tl.load(BIAS + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    c = acc.to(C.dtype.element_ty)
    c_mask = mask_m[:, None] & mask_n[None, :]
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c, mask=c_mask)


def block_scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Launch the block-scaled kernel (the predicate has checked ``block_size[1]``)."""
    (m, k), n = a.shape, b.shape[0]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    block_m, block_n = _block_m(m), 64
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    args = (
        a, b, scale_a, scale_b, c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), scale_a.stride(0), scale_a.stride(1),
        scale_b.stride(0), scale_b.stride(1), c.stride(0), c.stride(1),
    )  # fmt: skip
    meta = {"GROUP_N": block_size[0], "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_size[1]}
    if _off_current_device(a):
        with _device_ctx(a):
            _block_scaled_mm_kernel[grid](*args, **meta)
    else:
        _block_scaled_mm_kernel[grid](*args, **meta)
    return c


def scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch the per-tensor / per-row / per-column kernel."""
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    block_m, block_n, block_k = _block_m(m), 64, 64
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    stride_sa = 0 if scale_a.numel() == 1 else scale_a.stride(0)
    stride_sb = 0 if scale_b.numel() == 1 else scale_b.stride(-1)
    args = (
        a, b, scale_a, scale_b, c if bias is None else bias, c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), stride_sa, stride_sb, c.stride(0), c.stride(1),
    )  # fmt: skip
    meta = {"HAS_BIAS": bias is not None, "BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k}
    if _off_current_device(a):
        with _device_ctx(a):
            _scaled_mm_kernel[grid](*args, **meta)
    else:
        _scaled_mm_kernel[grid](*args, **meta)
    return c
