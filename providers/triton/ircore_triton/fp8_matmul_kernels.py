"""Triton kernels for the fp8 matmuls: ``block_scaled_mm_fp8`` and ``scaled_mm_fp8``.

Tiles of ``a`` and ``b`` are multiplied in fp8 by ``tl.dot`` (fp32 accumulation on sm_89+; the
interpreter emulates it), so no shape restriction of cuBLASLt applies: any M (decode's M = 1),
any K (including K / 128 not a multiple of 4, where ``torch._scaled_mm``'s blockwise path is
silently wrong), any strides. Block scales: each K tile is one activation group (``BLOCK_K ==
block_k``), so the tile's partial product is scaled once per row (``scale_a``) and per column
(``scale_b`` of the column's weight tile) before it is added, as DeepSeek-V3's and vLLM's
``w8a8_block_fp8_matmul`` do. Per-tensor / per-row / per-column scales multiply the finished fp32
sum.

Launch configs. ``block_scaled_mm_fp8`` is tuned per (N, K, block, out dtype, M bucket) on its
first call, as the norms are (``kernels._pick``: CUDA-graph replay of the candidates, the winner
cached; never while a graph is captured nor under the interpreter, where the heuristic runs).
The candidates include a split of K across programs for small M: at M = 1 one 16 x 64 tile per
program gives N / 64 programs (64 for the H200's 132 SMs at N = 4096), and the weight was read
at 33-89% of the bandwidth bound (2026-12-05, benchmarks/README.md 3d). A split writes fp32
partial sums that a fixed-order sum adds (deterministic bits, no atomics). Larger tiles and
more warps are candidates for large M, where the 64-wide tiles ran at 2-2.5x cuBLASLt's time.
``scaled_mm_fp8`` keeps its heuristic by M.

Batch-invariant mode (``INVARIANT_BLOCK``, ``scaled_mm_fp8(..., invariant=True)``): one launch
config for every M (no split of K, tiles of 64 x 64), so each output element is the same dot
products of the same K tiles in the same order whatever the rows around it; the cost at small M
is the tuned config's advantage (not measured yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl

from . import kernels as _k
from .kernels import _device_ctx, _off_current_device, cdiv

__all__ = ["INVARIANT_BLOCK", "BlockMatmulConfig", "block_scaled_mm_fp8", "scaled_mm_fp8"]


def _block_m(m: int) -> int:
    return 16 if m <= 16 else 32 if m <= 32 else 64


@dataclass(frozen=True)
class BlockMatmulConfig:
    """Launch config of ``block_scaled_mm_fp8``: ``block_m x block_n`` output tiles, K split
    across ``split_k`` programs (each takes every ``split_k``-th K tile)."""

    block_m: int
    block_n: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3


#: The one config of the batch-invariant mode (never by M; no split of K).
INVARIANT_BLOCK = BlockMatmulConfig(64, 64)
#: scaled_mm_fp8's tile rows in the mode (its heuristic picks them by M).
_INVARIANT_BLOCK_M = 64


def _block_heuristic(m: int) -> BlockMatmulConfig:
    """The config before tuning (and under the interpreter, or while a graph is captured)."""
    return BlockMatmulConfig(_block_m(m), 64)


def _block_candidates(m: int, n: int, k_tiles: int) -> list[BlockMatmulConfig]:
    """Tuning candidates, the heuristic first (ties go to the earlier one)."""
    out = [_block_heuristic(m)]
    if m <= 16:
        for block_n in (32, 64, 128):
            for split in (1, 2, 4, 8):
                if split <= max(1, k_tiles // 4) and triton.cdiv(n, block_n) * split <= 4096:
                    out.append(BlockMatmulConfig(16, block_n, split))
    elif m <= 128:
        for block_m in (16, 32, 64):
            for block_n in (64, 128):
                for split in (1, 2):
                    if split <= max(1, k_tiles // 4):
                        out.append(BlockMatmulConfig(block_m, block_n, split))
    else:
        for block_m, block_n, warps in ((64, 128, 4), (128, 128, 8), (128, 64, 4), (64, 64, 4)):
            for stages in (3, 4):
                out.append(BlockMatmulConfig(block_m, block_n, 1, warps, stages))
    return list(dict.fromkeys(out))


@triton.jit
def _block_scaled_mm_kernel(
    A, B, SA, SB, C, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_sam, stride_sak, stride_sbn, stride_sbk,
    stride_cm, stride_cn, stride_cs,
    GROUP_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
):  # fmt: skip
    """``C[m, n] = sum over K tiles g of (A[m, g] . B[n, g]) * SA[m, g] * SB[n // GROUP_N, g]``.

    With ``SPLIT_K > 1`` program ``(i, j, s)`` sums the tiles ``g = s, s + SPLIT_K, ...`` into
    the fp32 partial ``C[s]`` (``stride_cs`` apart); the caller adds the partials."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(pid_k, tl.cdiv(K, BLOCK_K), SPLIT_K):
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
    c_ptrs = C + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=c_mask)


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


def _launch_block(
    cfg: BlockMatmulConfig,
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """One launch of the block-scaled kernel: ``[M, N]`` of ``out_dtype``; with a split of K the
    kernel writes fp32 partials ``[split, M, N]``, summed in a fixed order and rounded once.

    Host cost per call is what an eager decode pays (benchmarks/fp8_host_cpu.py): the split path
    allocates only the partials (the sum's result, cast, is the output: one torch op fewer than
    summing into a separate output), and the grid is plain integer maths (``cdiv``)."""
    (m, k), n = a.shape, b.shape[0]
    split = cfg.split_k
    if split == 1:
        out = torch.empty((m, n), dtype=out_dtype, device=a.device)
        stride_cs = 0
    else:
        out = torch.empty((split, m, n), dtype=torch.float32, device=a.device)
        stride_cs = m * n
    _block_scaled_mm_kernel.run(
        a, b, scale_a, scale_b, out, m, n, k,
        *a.stride(), *b.stride(), *scale_a.stride(), *scale_b.stride(), n, 1, stride_cs,
        GROUP_N=block_size[0], BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=block_size[1],
        SPLIT_K=split, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        grid=(cdiv(m, cfg.block_m), cdiv(n, cfg.block_n), split), warmup=False,
    )  # fmt: skip
    return out if split == 1 else out.sum(dim=0).to(out_dtype)


def _block_config(
    a: torch.Tensor, b: torch.Tensor, scale_b: torch.Tensor, block_size: list[int], out_dtype: torch.dtype
) -> BlockMatmulConfig:
    """The cached config of this call's key; tuned on the key's first call where tuning runs."""
    (m, k), n = a.shape, b.shape[0]
    bucket = _k._bucket(m)
    key = ("block_scaled_mm_fp8", n, k, tuple(block_size), out_dtype, bucket)
    cfg = _k._CONFIGS.get(key)
    if isinstance(cfg, BlockMatmulConfig):
        return cfg

    def tune() -> BlockMatmulConfig:
        t_rows = _k._BUCKET_ROWS[bucket] if bucket < len(_k._BUCKET_ROWS) else 8192
        k_tiles = triton.cdiv(k, block_size[1])
        # the weight itself (only read), scratch activations of the bucket's size (values do not matter)
        at = torch.zeros((t_rows, k), dtype=a.dtype, device=a.device)
        sat = torch.ones((k_tiles, t_rows), dtype=torch.float32, device=a.device).t()

        def make(cfg: BlockMatmulConfig) -> Callable[[], torch.Tensor]:
            return lambda: _launch_block(cfg, at, b, sat, scale_b, block_size, out_dtype)

        return _k._pick(key, _block_candidates(t_rows, n, k_tiles), make, a.device)

    return _k._untuned(lambda: _block_heuristic(m), tune, a.device)  # type: ignore[return-value]


def block_scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
    config: BlockMatmulConfig | None = None,
) -> torch.Tensor:
    """Launch the block-scaled kernel (the predicate has checked ``block_size[1]``); ``config``
    pins a launch config (tests, sweeps), else the tuned one of the call's key."""
    (m, k), n = a.shape, b.shape[0]
    if m == 0 or n == 0 or k == 0:
        return torch.zeros((m, n), dtype=out_dtype, device=a.device)
    if _off_current_device(a):
        with _device_ctx(a):
            cfg = config or _block_config(a, b, scale_b, block_size, out_dtype)
            return _launch_block(cfg, a, b, scale_a, scale_b, block_size, out_dtype)
    cfg = config or _block_config(a, b, scale_b, block_size, out_dtype)
    return _launch_block(cfg, a, b, scale_a, scale_b, block_size, out_dtype)


def scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
    invariant: bool = False,
) -> torch.Tensor:
    """Launch the per-tensor / per-row / per-column kernel; ``invariant``: with tiles fixed for
    every M (batch-invariant mode)."""
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    block_m, block_n, block_k = _INVARIANT_BLOCK_M if invariant else _block_m(m), 64, 64
    grid = (cdiv(m, block_m), cdiv(n, block_n))
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
