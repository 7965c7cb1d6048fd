"""The fp8 matmuls through AITER's CK GEMMs, with predicates that take only what they compute right.

Read at AITER e4048607a5 (2026-08-22); ``gemm_a8w8_blockscale`` and ``gemm_a8w8`` have the same
parameters at every tag from v0.1.7.post2 to v0.1.20.post1. Both are optional per release
(provider.py checks their call forms where they exist; without one, its predicate declines).

- ``block_scaled_mm_fp8`` -> ``aiter.gemm_a8w8_blockscale(XQ, WQ, x_scale, w_scale, dtype)``
  (``aiter/ops/gemm_op_a8w8.py:804-872``): on gfx942/gfx950 the CK kernels of
  ``csrc/ck_gemm_a8w8_blockscale`` (or their CK-tile variant, chosen by AITER's tuned table).
  ``XQ [M, K]`` and ``WQ [N, K]`` (the op's ``a`` and ``b`` as they are) are read from their data
  pointers with rows at ``stride(-2)`` and a unit last stride assumed
  (``include/gemm_a8w8_blockscale_common.cuh:130-136``), as ``ck::f8_t``: the arch's fp8
  (e4m3fnuz on gfx942, e4m3fn on gfx950), **not checked** against the tensors' dtype (only
  ``XQ.dtype() == WQ.dtype()``, ``gemm_a8w8_blockscale.cu:90``): e4m3fn bytes on gfx942 would be
  decoded as e4m3fnuz, every value halved, silently. The scales are float32, read from their
  data pointers as the row-major ``[M, K/128]`` and ``[N/128, K/128]`` (CK's ab_scale grid
  descriptors, as AITER's own test passes them: ``op_tests/test_gemm_a8w8_blockscale.py:98-116``);
  every compiled instance has scale blocks 1 x 128 x 128 (``gemm_a8w8_blockscale_instance.py:
  81-110``). CK's ``IsSupportedArgument`` refuses (an error, "This GEMM is not supported!") a K
  that is not a whole number of the 16-element A/B vector loads or an N not a whole number of the
  8-element C stores. Outputs bf16 or fp16 (``gemm_op_a8w8.py:813-816`` asserts). M, N and K are
  padded to the tiles (``MNKPadding``, ``gen_instances.py:94-171``).
- ``scaled_mm_fp8`` -> ``aiter.gemm_a8w8(XQ, WQ, x_scale, w_scale, None, dtype)``
  (``gemm_op_a8w8.py:568-589``; CK ``csrc/ck_gemm_a8w8``): ``XQ`` must be the arch's fp8
  (``TORCH_CHECK``, ``gemm_a8w8.cu:147-149``); ``XQ [M, K]`` and ``WQ [N, K]`` are read as
  contiguous (``StrideA = StrideB = K``, unchecked: ``include/gemm_a8w8_common.cuh:217-218``), so
  ``a`` must be contiguous and ``b`` the transpose of a contiguous weight (``b.t()`` is passed);
  ``w_scale`` is read as N and ``x_scale`` as M contiguous floats (D tensors of stride 0,
  ``:235-244``), so per-tensor scales are expanded to them (a copy of M + N floats);
  ``c * w_scale[n] * x_scale[m]`` in fp32, rounded once (``:76-84``); outputs bf16 or fp16
  ("Unsupported scales/output dtype!", ``gemm_a8w8.cu:186-205``); the same K and N vector checks.
  A bias is declined: the kernel would add one in fp32 (``MultiplyMultiplyAdd``, ``:94-102``),
  but AITER's own test never runs the fp8 kernel with a bias ("CK fp8 kernel set bias=None",
  ``op_tests/test_gemm_a8w8.py:164-168``), so nothing vouches for it.

Declined by rule, not because the source shows a wrong result: a K that is not a multiple of 128
for ``block_scaled_mm_fp8`` (a ragged last scale group; AITER's tests and tuned shapes all have
whole groups, and its reference reshapes K into groups of 128: ``test_gemm_a8w8_blockscale.py:
39-41``), and row strides that are not a multiple of 16 elements (the 16-byte vector loads).
Inputs not 16-byte aligned are copied first. Empty inputs (M = 0) never reach a kernel.
"""

import aiter
import torch
from torch import Tensor

from ircore.ops._scaled_mm import row_and_column_scales
from ircore_aiter.impls import _DEVICE, _aligned, _arch_fp8

__all__ = [
    "block_scaled_mm_fp8",
    "block_scaled_mm_fp8_supports",
    "scaled_mm_fp8",
    "scaled_mm_fp8_supports",
]

#: None where this AITER lacks the entry point (its predicate then declines every call).
_BLOCKSCALE = getattr(aiter, "gemm_a8w8_blockscale", None)
_ROWWISE = getattr(aiter, "gemm_a8w8", None)

_OUT_DTYPES = (torch.bfloat16, torch.float16)
_SCALE_BLOCK = [128, 128]  # the only [block_n, block_k] compiled into AITER's blockscale GEMMs
_K_VECTOR = 16  # fp8 elements per A/B vector load of the CK instances
_N_VECTOR = 8  # output elements per C store of the CK instances


def _gemm_ok(kernel: object, a: Tensor, n: int, k: int, out_dtype: torch.dtype) -> bool:
    """What both GEMMs need: this release has the kernel; ``a`` on the platform's device in the
    arch's fp8 (the op's check makes ``b`` match); a bf16/fp16 output; K and N whole vectors."""
    return (
        kernel is not None
        and a.device.type == _DEVICE
        and a.dtype is _arch_fp8()
        and out_dtype in _OUT_DTYPES
        and k > 0
        and k % _K_VECTOR == 0
        and n % _N_VECTOR == 0
    )


def _empty(a: Tensor, n: int, out_dtype: torch.dtype) -> Tensor:
    return torch.empty((0, n), dtype=out_dtype, device=a.device)


# ---------------------------------------------------------------------- block_scaled_mm_fp8
def _rows16(t: Tensor) -> bool:
    """Rows at ``stride(0)``, unit last stride, every row starting on a 16-byte boundary."""
    return t.stride(1) == 1 and t.stride(0) % _K_VECTOR == 0


def block_scaled_mm_fp8_supports(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> bool:
    """:func:`_gemm_ok`; ``block_size == [128, 128]``; K a multiple of 128; ``a`` and ``b`` with
    16-element row strides and a unit last stride. Scales of any strides (made row-major)."""
    k = a.shape[1]
    return (
        _gemm_ok(_BLOCKSCALE, a, b.shape[0], k, out_dtype)
        and list(block_size) == _SCALE_BLOCK
        and k % _SCALE_BLOCK[1] == 0
        and _rows16(a)
        and _rows16(b)
    )


def block_scaled_mm_fp8(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> Tensor:
    """``aiter.gemm_a8w8_blockscale(a, b, scale_a, scale_b, out_dtype)``, the scales row-major
    (a copy only where they are not, e.g. the column-major ``scale_a`` of DeepGEMM-style quant)."""
    if not a.shape[0]:
        return _empty(a, b.shape[0], out_dtype)
    return _BLOCKSCALE(_aligned(a), _aligned(b), scale_a.contiguous(), scale_b.contiguous(), out_dtype)  # type: ignore[misc, no-any-return]


# ---------------------------------------------------------------------- scaled_mm_fp8
def scaled_mm_fp8_supports(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype,
    bias: Tensor | None = None,
) -> bool:
    """:func:`_gemm_ok`; no bias; ``a`` contiguous and ``b`` column-major (``w.t()`` of a
    contiguous weight): the kernel reads both with a row stride of K. Any scale layout the op
    takes (per tensor, per row / column)."""
    k, n = b.shape
    return (
        _gemm_ok(_ROWWISE, a, n, k, out_dtype)
        and bias is None
        and a.is_contiguous()
        and b.t().is_contiguous()
    )


def scaled_mm_fp8(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype,
    bias: Tensor | None = None,
) -> Tensor:
    """``aiter.gemm_a8w8(a, b.t(), sa, sb, None, out_dtype)``: ``sa`` M and ``sb`` N contiguous
    floats (a per-tensor scale expanded, a copy of M + N floats at most)."""
    m, n = a.shape[0], b.shape[1]
    if not m:
        return _empty(a, n, out_dtype)
    sa, sb = row_and_column_scales(scale_a, scale_b, m, n)
    return _ROWWISE(_aligned(a), _aligned(b.t()), sa, sb, None, out_dtype)  # type: ignore[misc, no-any-return]
