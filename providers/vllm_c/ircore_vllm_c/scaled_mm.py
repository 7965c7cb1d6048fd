"""The fp8 matmuls through ``torch._scaled_mm`` (cuBLASLt), with predicates that take only what it
computes right.

``torch._scaled_mm`` refuses many calls with an error, but for blockwise scales it returns a
silently wrong result when ``K / 128`` is not a multiple of 4 (measured on the H200, torch 2.11:
relative errors 0.38-0.62 at K/128 = 5, 9, 22, 23; 0.002 at 4, 8, 20). The predicates encode every
requirement measured there (``/shared/notes/ops-wave2.md`` section 5.3), and decline everything
not measured, so such a call goes to the next provider (triton, native) instead:

- CUDA, the fp8 type e4m3fn (e4m3fnuz raises an internal assert on CUDA);
- ``a`` row-major ``[M, K]``; K and N multiples of 16;
- ``scaled_mm_fp8``: ``b`` column-major (``w.t()`` of a row-major weight); per-tensor scales on
  sm_89+; per-row / per-column scales (either one expanded from a per-tensor scale) and a bias
  (bf16, with a bf16 output) on sm_90+;
- ``block_scaled_mm_fp8``: sm_90, ``block_size == [128, 128]``, a bf16 output, ``M % 4 == 0``
  (cuBLAS refuses M = 1, 2, 17; M = 0 goes elsewhere too), ``K % 128 == 0`` and
  ``(K / 128) % 4 == 0`` (the silent case), ``N % 128 == 0``, ``b`` the row-major weight
  ``[N, K]``; the scales are laid out as cuBLAS needs
  (``scale_a`` column-major, ``scale_b`` transposed) by the implementation, a copy of the scales
  only.

On the CPU both ops run this provider's own kernel (``csrc/cpu_fp8_mm.cpp``) for every call the
core accepts. ``block_scaled_mm_fp8`` directly: both fp8 dtypes, any ``block_size`` (ragged last
groups and blocks; a ``block_k`` that is not a multiple of 8 is padded with zeros to one per
group, which costs up to 8x the work at ``block_k`` < 8, but is still right), any M (0 included),
row- or column-major ``scale_a``, every ``out_dtype``, any layout of ``a`` and ``b`` (a contiguous
copy where they are not). It widens fp8 to fp32 exactly and sums each output in one fixed order
whatever the batch, so it claims batch invariance on the CPU
(:func:`block_scaled_mm_fp8_batch_invariant`); the CUDA path (cuBLAS, which picks its split by
M) claims none. ``scaled_mm_fp8`` runs the same kernel as
one K group (``block_size = [1, K]``: the per-row ``scale_a`` and per-column ``scale_b``, either
one per tensor, as the group's scales), on ``b.t()`` (the weight ``[N, K]``: a copy of the weight
where ``b`` is not column-major), the bias added to the fp32 result before the one rounding, as
the native does. It claims no batch invariance (provider.py says why).
"""

import torch

from ircore.ops._scaled_mm import row_and_column_scales

from . import kernels

__all__ = [
    "block_scaled_mm_fp8",
    "block_scaled_mm_fp8_batch_invariant",
    "block_scaled_mm_fp8_supports",
    "block_shape_ok",
    "scaled_mm_fp8",
    "scaled_mm_fp8_supports",
    "scaled_shape_ok",
]

_E4M3 = torch.float8_e4m3fn
_BF16 = torch.bfloat16
_CAPABILITY = torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)
# The CPU kernel (loaded before ircore imports this module: provider.py's platform check).
_cpu_block_scaled_mm = torch.ops.ircore_vllm_c.block_scaled_mm_fp8_cpu.default


def _scalar(scale: torch.Tensor) -> bool:
    return scale.numel() == 1


def scaled_shape_ok(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None,
    capability: tuple[int, int],
) -> bool:
    """The device-independent part of :func:`scaled_mm_fp8_supports`, on a GPU of ``capability``."""
    k, n = b.shape
    per_tensor = _scalar(scale_a) and _scalar(scale_b) and bias is None
    return (
        a.dtype is _E4M3
        and a.shape[0] > 0
        and k % 16 == 0
        and n % 16 == 0
        and a.is_contiguous()
        and b.stride(0) == 1
        and b.stride(1) == k
        and (
            (per_tensor and capability >= (8, 9))
            or (capability >= (9, 0) and (bias is None or (bias.dtype is _BF16 and out_dtype is _BF16)))
        )
    )


def scaled_mm_fp8_supports(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> bool:
    """Every CPU call where the CPU kernels are loaded; on CUDA, what cuBLAS computes right (see
    the module docstring)."""
    return (a.is_cpu and kernels.CPU_LOADED) or (
        a.is_cuda and scaled_shape_ok(a, b, scale_a, scale_b, out_dtype, bias, _CAPABILITY)
    )


def _cpu_scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """The blockwise CPU kernel with one K group: scales [M, 1] and [N, 1] (expanded, no copy)."""
    (m, k), n = a.shape, b.shape[1]
    if k == 0:
        out = torch.zeros(m, n, dtype=torch.float32)
    else:
        sa = scale_a.reshape(-1, 1).expand(m, 1)
        sb = scale_b.reshape(-1, 1).expand(n, 1)
        out = _cpu_block_scaled_mm(a, b.t(), sa, sb, [1, k], torch.float32)
    if bias is not None:
        out += bias.float()
    return out.to(out_dtype)


def scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch._scaled_mm``: per-tensor scales as they are, otherwise both scales per row/column;
    on the CPU, this provider's kernel."""
    if a.is_cpu:
        return _cpu_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
    m, n = a.shape[0], b.shape[1]
    if _scalar(scale_a) and _scalar(scale_b) and bias is None:
        return torch._scaled_mm(a, b, scale_a.reshape(1), scale_b.reshape(1), out_dtype=out_dtype)
    sa, sb = row_and_column_scales(scale_a, scale_b, m, n)
    return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype)


def block_shape_ok(
    a: torch.Tensor,
    b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
    capability: tuple[int, int],
) -> bool:
    """The device-independent part of :func:`block_scaled_mm_fp8_supports` (the core has checked
    the scales' shapes against a, b and block_size)."""
    m, k = a.shape
    n = b.shape[0]
    return (
        capability[0] == 9
        and m > 0
        and m % 4 == 0  # first: eager decode's M = 1 is refused before the costlier tests (~1.3 -> 0.4 us)
        and a.dtype is _E4M3
        and out_dtype is _BF16
        and list(block_size) == [128, 128]
        and k % 128 == 0
        and (k // 128) % 4 == 0
        and n % 128 == 0
        and a.is_contiguous()
        and b.is_contiguous()
    )


def block_scaled_mm_fp8_supports(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> bool:
    """Every CPU call where the CPU kernels are loaded; on CUDA, what cuBLAS computes right (see
    the module docstring)."""
    return (a.is_cpu and kernels.CPU_LOADED) or (
        a.is_cuda and block_shape_ok(a, b, block_size, out_dtype, _CAPABILITY)
    )


def block_scaled_mm_fp8_batch_invariant(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> bool:
    """The batch-invariance claim: CPU calls only (each output's sum has one order whatever M;
    cuBLAS on CUDA picks its split by M)."""
    return a.is_cpu


def block_scaled_mm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    block_size: list[int],
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """``torch._scaled_mm`` with 1x128 / 128x128 block scales (cuBLASLt on sm_90): ``scale_a``
    ``[M, K/128]`` column-major, ``scale_b`` as ``[K/128, N/128]`` with strides ``(1, K/128)``;
    on the CPU, this provider's kernel."""
    if a.is_cpu:
        return _cpu_block_scaled_mm(a, b, scale_a, scale_b, block_size, out_dtype)
    sa = scale_a if scale_a.stride() == (1, a.shape[0]) else scale_a.t().contiguous().t()
    sb = scale_b.contiguous().t()
    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=out_dtype)
