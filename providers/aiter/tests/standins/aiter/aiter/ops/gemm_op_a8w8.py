"""STAND-IN for ``aiter.ops.gemm_op_a8w8`` (re-exported as ``aiter.gemm_a8w8`` and
``aiter.gemm_a8w8_blockscale``), modelling AITER's fp8 GEMMs as read at e4048607a5 (2026-08-22;
the same parameters at the tags v0.1.7.post2 to v0.1.20.post1). Each public function is a
``(*args, **kwargs)`` wrapper around a torch op ``aiter::<name>`` (``torch_compile_guard``), and
the kernels compute on the CPU but address memory as AITER's CK kernels do:

- ``gemm_a8w8_blockscale(XQ, WQ, x_scale, w_scale, dtype=bf16, isBpreshuffled=False)``
  (``aiter/ops/gemm_op_a8w8.py:804-872``; CK ``csrc/ck_gemm_a8w8_blockscale/``): the Python
  ``assert dtype in [bf16, fp16]``, a fresh ``Y = empty(M, N, dtype)``; ``M = XQ.size(0)``,
  ``N = WQ.size(0)``, ``K = XQ.size(1)``; rows of ``XQ`` and ``WQ`` at their ``stride(-2)`` with a
  unit last stride assumed, unchecked (``include/gemm_a8w8_blockscale_common.cuh:130-136``);
  ``XQ`` and ``WQ`` checked for one dtype only (``gemm_a8w8_blockscale.cu:90``), their bytes
  read as ``ck::f8_t``, the arch's fp8 (e4m3fnuz on gfx942, e4m3fn on gfx950), whatever the
  tensors' torch dtype; float32 scales read from their data pointers as the row-major
  ``[ceil(M/1), ceil(K/128)]`` and ``[ceil(N/128), ceil(K/128)]`` (CK's ab_scale grid
  descriptors; every instance is ``ScaleBlockM/N/K = 1, 128, 128``); each 128-wide K group's fp32
  partial product scaled by its two scales, summed in fp32, rounded once; CK's
  ``IsSupportedArgument`` (``K`` a multiple of the 16-element A/B vector loads, ``N`` of the
  8-element C stores) refused with "This GEMM is not supported!"; rows read in 16-byte vectors,
  so each must start 16-byte aligned (as elsewhere in this stand-in; conservative);
- ``gemm_a8w8(XQ, WQ, x_scale, w_scale, bias=None, dtype=bf16, splitK=None)``
  (``gemm_op_a8w8.py:568-589``, ``646-679``; CK ``csrc/ck_gemm_a8w8/``): ``XQ`` of the arch's fp8
  (``TORCH_CHECK(XQ.dtype() == torch_fp8 ...)``, ``gemm_a8w8.cu:147-149``) and ``WQ`` alike;
  ``XQ`` and ``WQ`` read as contiguous ``[M, K]`` / ``[N, K]`` from their data pointers
  (``StrideA = StrideB = K``, ``include/gemm_a8w8_common.cuh:217-218``, whatever their strides);
  ``w_scale`` read as N and ``x_scale`` as M contiguous floats (D tensors with stride 0,
  ``:235-244``), ``bias`` as N contiguous elements of Y's dtype; ``c * w_scale[n] * x_scale[m]
  (+ bias[n])`` in fp32, rounded once; fp16/bf16 outputs only ("Unsupported scales/output
  dtype!"); the same vector-load checks.

A launch with no rows fails (an empty grid), as elsewhere in this stand-in.
"""

import torch
from torch import Tensor

from aiter import CALLS, _arch_fp8, _guard

_HALF = (torch.float16, torch.bfloat16)
_SCALE_BLOCK = 128  # ScaleBlockN = ScaleBlockK in every CK blockscale instance
_K_VECTOR = 16  # AK1 / BK1 of the CK instances: K elements per vector load
_N_VECTOR = 8  # CDEShuffleBlockTransferScalarPerVectors: N elements per C store


def _launch(name: str, m: int) -> None:
    if m == 0:
        raise RuntimeError(f"stand-in aiter.{name}: launch with an empty grid (HIP: invalid configuration)")
    CALLS[name] += 1


def _supported(m: int, n: int, k: int) -> None:
    """CK's ``IsSupportedArgument``: K whole vectors for A and B, N whole vectors for C."""
    if k % _K_VECTOR or n % _N_VECTOR:
        raise RuntimeError(f"stand-in aiter: This GEMM is not supported! (M={m}, N={n}, K={k})")


def _as_arch_fp8(t: Tensor, rows: int, cols: int, row_stride: int) -> Tensor:
    """The ``(rows, cols)`` fp8 elements a CK kernel reads from ``t``'s data pointer, rows at
    ``row_stride`` in 16-byte vectors (each row aligned), decoded as ``ck::f8_t`` (the arch's fp8):
    the tensor's dtype is not looked at."""
    if t.data_ptr() % 16 or (rows > 1 and row_stride % 16):
        raise RuntimeError("stand-in aiter: misaligned 16-byte vector access")
    raw = t.view(torch.uint8).as_strided((rows, cols), (row_stride, 1))
    return raw.view(_arch_fp8()).float()


def _floats(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``shape`` float32 values from ``t``'s data pointer, row-major (its strides not read)."""
    strides = tuple(int(torch.Size(shape)[i + 1 :].numel()) for i in range(len(shape)))
    return t.as_strided(shape, strides)


def _blockscale_kernel(
    XQ: Tensor,
    WQ: Tensor,
    x_scale: Tensor,
    w_scale: Tensor,
    dtype: torch.dtype = torch.bfloat16,
    isBpreshuffled: bool = False,
) -> Tensor:
    assert dtype in _HALF, f"Output dtype={dtype} is currently not supported in gemm_a8w8"
    if isBpreshuffled:
        raise NotImplementedError("stand-in: the preshuffled-B (asm) path is not modelled")
    m, n, k = XQ.size(0), WQ.size(0), XQ.size(1)
    y = torch.empty(m, n, dtype=dtype, device=XQ.device)
    if XQ.dtype != WQ.dtype:
        raise RuntimeError("stand-in aiter: Weights and activations should have the same dtype!")
    if x_scale.dtype != w_scale.dtype:
        raise RuntimeError("stand-in aiter: Scales should have the same dtype!")
    if x_scale.dtype != torch.float32:
        raise RuntimeError("stand-in aiter: Unsupported scales/output dtype!")
    _supported(m, n, k)
    _launch("gemm_a8w8_blockscale", m)
    a = _as_arch_fp8(XQ, m, k, XQ.stride(-2))
    b = _as_arch_fp8(WQ, n, k, WQ.stride(-2))
    groups = -(-k // _SCALE_BLOCK)
    sa = _floats(x_scale, (m, groups))
    sb = _floats(w_scale, (-(-n // _SCALE_BLOCK), groups))
    sb_rows = sb[torch.arange(n) // _SCALE_BLOCK]  # [N, groups]
    acc = torch.zeros(m, n, dtype=torch.float32)
    for g in range(groups):
        cols = slice(g * _SCALE_BLOCK, (g + 1) * _SCALE_BLOCK)
        acc += (a[:, cols] @ b[:, cols].t()) * sa[:, g : g + 1] * sb_rows[:, g]
    y.copy_(acc.to(dtype))
    return y


def _gemm_a8w8_kernel(
    XQ: Tensor,
    WQ: Tensor,
    x_scale: Tensor,
    w_scale: Tensor,
    bias: Tensor | None = None,
    dtype: torch.dtype = torch.bfloat16,
    splitK: int | None = None,
) -> Tensor:
    m, n, k = XQ.size(0), WQ.size(0), XQ.size(1)
    y = torch.empty(m, n, dtype=dtype, device=XQ.device)
    if XQ.dtype not in (torch.int8, _arch_fp8()) or XQ.dtype != WQ.dtype:
        raise RuntimeError("stand-in aiter: Weights and activations should both be int8/fp8!")
    if XQ.dtype == torch.int8:
        raise NotImplementedError("stand-in: the int8 GEMM is not modelled")
    if x_scale.dtype != w_scale.dtype:
        raise RuntimeError("stand-in aiter: Scales should have the same dtype!")
    if bias is not None and bias.dtype != y.dtype:
        raise RuntimeError("stand-in aiter: Out amd bias should have the same dtype!")
    if x_scale.dtype != torch.float32 or dtype not in _HALF:
        raise RuntimeError("stand-in aiter: Unsupported scales/output dtype!")
    _supported(m, n, k)
    _launch("gemm_a8w8", m)
    a = _as_arch_fp8(XQ, m, k, k)  # StrideA = K
    b = _as_arch_fp8(WQ, n, k, k)  # StrideB = K
    out = (a @ b.t()) * _floats(w_scale, (n,)) * _floats(x_scale, (m, 1))
    if bias is not None:
        out = out + _floats(bias, (n,)).float()
    y.copy_(out.to(dtype))
    return y


def gemm_a8w8_blockscale(
    XQ: Tensor,
    WQ: Tensor,
    x_scale: Tensor,
    w_scale: Tensor,
    dtype: torch.dtype = torch.bfloat16,
    isBpreshuffled: bool = False,
) -> Tensor: ...


def gemm_a8w8(
    XQ: Tensor,
    WQ: Tensor,
    x_scale: Tensor,
    w_scale: Tensor,
    bias: Tensor | None = None,
    dtype: torch.dtype = torch.bfloat16,
    splitK: int | None = None,
) -> Tensor: ...


gemm_a8w8_blockscale = _guard(gemm_a8w8_blockscale, _blockscale_kernel)
gemm_a8w8 = _guard(gemm_a8w8, _gemm_a8w8_kernel)
