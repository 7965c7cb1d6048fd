"""The matmul layer of ``ircore.batch_invariant(matmul=True)``: a persistent Triton matmul with
a fixed tile order for ``aten::mm``, ``addmm`` and ``bmm`` on CUDA.

Why: cuBLAS chooses its kernel, and with it a split-K strategy (how each output element's sum
over K is divided and recombined), by the problem's shape, M included, so a token's logits
change with the batch it is in. Here the tile sizes, the K loop and the group order are fixed
per dtype (never by M, N or K): each output element is the sum over K in ``BLOCK_K`` steps, in
order, each step one ``tl.dot`` of fixed shape, whatever the other rows are. It is the approach of
vLLM's batch-invariant mode (Thinking Machines' ``batch_invariant_ops``); it costs speed against
cuBLAS (benchmarks/batch_invariant_gpu.py measures how much), which is why it is opt-in.

``LAYER.install()`` registers the three kernels for the CUDA dispatch key of ``aten`` (process-wide;
ircore installs it while a ``matmul=True`` block is open, ``ircore/_matmul_layer.py``) and returns
the function that removes them. ``matmul`` is callable directly (the tests run it in Triton's
interpreter on tiny shapes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .kernels import cdiv

__all__ = ["LAYER", "MatmulConfig", "MatmulLayer", "config_for", "matmul"]


@dataclass(frozen=True)
class MatmulConfig:
    """Tiles of ``block_m x block_n``, K in steps of ``block_k``; ``group_m`` tile rows per group."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


# Fixed per dtype (vLLM's batch-invariant matmul uses these for 16-bit and fp32 inputs).
_CONFIGS = {
    torch.bfloat16: MatmulConfig(128, 128, 64, 8, 8, 3),
    torch.float16: MatmulConfig(128, 128, 64, 8, 8, 3),
    torch.float32: MatmulConfig(128, 128, 32, 8, 8, 3),
}


def config_for(dtype: torch.dtype) -> MatmulConfig:
    """The configuration for ``dtype``: never depends on the problem's shape."""
    config = _CONFIGS.get(dtype)
    if config is None:
        raise TypeError(
            f"ircore_triton batch-invariant matmul: dtype {dtype} is not supported (float32, float16, "
            "bfloat16); leave ircore.batch_invariant(matmul=True) for this computation"
        )
    return config


@triton.jit
def _matmul_persistent_kernel(
    A, B, C, BIAS, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    """Each program walks tiles ``pid, pid + NUM_PROGRAMS, ...``; a tile sums K in order."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_group = GROUP_M * num_pid_n
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS):
        group = tile // per_group
        first_m = group * GROUP_M
        group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % per_group) % group_rows
        pid_n = (tile % per_group) // group_rows
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(0, k_tiles):
            rk = ki * BLOCK_K + tl.arange(0, BLOCK_K)
            a = tl.load(
                A + rm[:, None] * stride_am + rk[None, :] * stride_ak,
                mask=(rm[:, None] < M) & (rk[None, :] < K),
                other=0.0,
            )
            b = tl.load(
                B + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                mask=(rk[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            if IEEE:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        if HAS_BIAS:
            bias = tl.load(BIAS + rn, mask=rn < N, other=0.0)
            acc = acc + bias.to(tl.float32)[None, :]
        tl.store(
            C + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
            acc.to(C.dtype.element_ty),
            mask=(rm[:, None] < M) & (rn[None, :] < N),
        )


def _programs(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 4  # Triton's interpreter (tests): any fixed number walks the same tiles


def matmul(
    a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, config: MatmulConfig | None = None
) -> torch.Tensor:
    """``a @ b (+ bias)`` for 2-D ``a`` (M x K) and ``b`` (K x N), in the fixed tile order."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(
            f"ircore_triton batch-invariant matmul: expected (M, K) @ (K, N), got {tuple(a.shape)} @ "
            f"{tuple(b.shape)}"
        )
    if a.dtype != b.dtype:
        raise TypeError(f"ircore_triton batch-invariant matmul: dtypes differ ({a.dtype} @ {b.dtype})")
    cfg = config or config_for(a.dtype)
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if k == 0:
        c.zero_()
        return c if bias is None else c.add_(bias)
    programs = _programs(a.device)
    tiles = cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n)
    grid = (min(programs, tiles),)
    _matmul_persistent_kernel[grid](
        a, b, c, bias if bias is not None else c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        NUM_PROGRAMS=programs, HAS_BIAS=bias is not None, IEEE=a.dtype == torch.float32,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return c


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return matmul(a, b)


def _addmm(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1
) -> torch.Tensor:
    if beta == 1 and alpha == 1 and bias.dim() == 1 and bias.shape[0] == b.shape[1]:
        return matmul(a, b, bias.contiguous())
    # elementwise around the fixed-order product: still the same bits per row
    return alpha * matmul(a, b) + beta * bias


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(
            f"ircore_triton batch-invariant bmm: expected (B, M, K) @ (B, K, N), got {tuple(a.shape)} @ "
            f"{tuple(b.shape)}"
        )
    out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device)
    for i in range(a.shape[0]):
        out[i] = matmul(a[i], b[i])
    return out


class MatmulLayer:
    """What the core's matmul layer asks of a provider: ``install()`` -> the uninstall function."""

    def install(self) -> Callable[[], None]:
        library = torch.library.Library("aten", "IMPL")
        library.impl("mm", _mm, "CUDA")
        library.impl("addmm", _addmm, "CUDA")
        library.impl("bmm", _bmm, "CUDA")
        return library._destroy


LAYER = MatmulLayer()
