"""``scaled_mm_fp8`` through vllm-xpu-kernels' oneDNN W8A8 GEMM ``torch.ops._xpu_C.fp8_gemm``.

Read in vllm-project/vllm-xpu-kernels at every release tag from v0.1.0 to v0.1.13.2 and main
4543b58 (2026-08-21): ``fp8_gemm(Tensor A, Tensor B, ScalarType? out_dtype, Tensor? A_scale_,
Tensor? B_scale_, Tensor? bias_) -> Tensor`` (``csrc/xpu/torch_bindings.cpp``, the same schema
throughout) in the extension ``vllm_xpu_kernels._xpu_C`` (built when CMake's
``XPU_SPECIFIC_KERNELS_ENABLED``, on by default), optional here: the platform check loads it
where it exists, and where it does not (or lacks ``fp8_gemm``) the predicate declines every call.

What the source shows, and what the adapter does about it:

- **Scale routing** (``csrc/xpu/onednn/fp8_gemm_w8a8.h``, the ``f_attr`` lambda): every release
  routes by element count (``numel() == 1``: per tensor, mask 0; else per token, mask
  ``(1 << 0) + (1 << 1)`` with groups ``{1, K}``, and per channel, mask ``1 << 1``): v0.1.0
  ``fp8_gemm_w8a8.h:73-103``, unchanged in meaning through v0.1.13 / main ``:89-133``. Only
  c3385f6 (the merge of #55, 2025-11-07) routed by rank (a 1-D scale per tensor, any other per
  token / per channel, ``:72-94``), replaced three days later by 4a3f6b4 (#63, "use numel rather
  than dim"), before v0.1.0 (2026-01-23). From v0.1.9 a block path exists: at v0.1.9 when both
  scales are 2-D with ``A_scale.size(1) != 1`` and ``B_scale.size(0) != 1``, from v0.1.10
  (22dd63a) when ``A_scale`` is 2-D with ``size(1) > 1`` (``:28-41``). The adapter always passes
  ``A_scale`` as a contiguous float32 ``[M, 1]`` and ``B_scale`` as a contiguous ``[1, N]`` (a
  per-tensor scale expanded: a copy of M or N floats): per token and per channel under every
  routing (2-D, and more than one element, or one element where M or N is 1, which per tensor
  reads the same), never the block path (one column).
- **Why always expanded**: the primitive cache (``onednn_ext.h``, ``matmul_primitive_cache_t``:
  v0.1.0 ``:713-771``, main ``:782-809``) keys on ``(A_scale.numel() << 8) | B_scale.numel()``
  (``fp8_gemm_w8a8.h:114-116`` at v0.1.0, ``:144-149`` at main), not on the scale kinds, and a
  cached primitive keeps the scale masks of its first call: per tensor x per channel and per
  token x per channel give the same key for M = 17, N = 4096 (``(1 << 8) | 4096 == (17 << 8) |
  4096``), so the second of two such calls would read its per-token scales with the first's
  per-tensor mask. With one scale form per (M, N), this adapter's own calls never share a key
  across scale kinds. Another caller of ``fp8_gemm`` in the same process (vLLM's own XPU fp8
  linear) passing per-tensor scales can still share one with it: ircore cannot see that cache.
- **Scale buffers**: described by ``get_onednn_md`` (``onednn_ext.h:246-251`` at v0.1.0: the
  tensor's sizes, dtype and strides), read by oneDNN densely from the data pointer; v0.1.13
  (22bbc16, #497) TORCH_CHECKs that the scales and the bias are contiguous
  (``onednn_matmul.cpp:111-120`` at main), earlier releases would misread strided ones: made
  contiguous here. float32 (``get_onednn_dtype``).
- **A** (``fp8_gemm_w8a8.h:55-69``): read as ``{M, K}`` with strides ``{A.stride(0), 1}``; the
  output is allocated with A's strides, each but the last as ``stride / K * N``
  (``onednn_matmul.cpp:35-46`` at v0.1.0): only a unit last stride and rows at ``K <= stride(0)
  < 2 K`` (or one row) give the contiguous output the op declares.
- **B** ``[K, N]``: ``is_nt = B.stride(-2) == 1`` (``onednn_matmul.cpp:68``), ``ldb =
  B.stride(-2)`` if ``B.stride(-1) == 1`` else ``B.stride(-1)`` (``fp8_gemm_w8a8.h:66-68``),
  strides ``{1, ldb}`` (nt) or ``{ldb, 1}`` (``onednn_ext.h:380-404``): B's own strides whenever
  one of them is 1; another B would be misread.
- **dtypes**: e4m3fn or e5m2 inputs of one type (``is_supported_fp8``), so no e4m3fnuz; fp16 or
  bf16 outputs (TORCH_CHECK, ``onednn_matmul.cpp:63-66``).
- **bias** (``get_bias_type``, ``onednn_ext.h:273-315`` at v0.1.0, unchanged): f32, bf16 or fp16;
  a contiguous ``[N]`` is a per-column bias (``{1, N}``, format ``ab``: dense; one element: a
  scalar, M * N elements when M = 1: ``{1, N}`` -- the same values). oneDNN adds it in fp32 to
  the scaled accumulator, then rounds once: the op's order. Passed contiguous.

Empty products (M, K or N zero) never reach the kernel (``stride / K`` divides by K).
No batch-invariance claim (oneDNN picks its GEMM kernels per shape).
"""

import torch
from torch import Tensor

from ircore.ops._quant import E4M3FN
from ircore.ops._scaled_mm import row_and_column_scales
from ircore_xpu.impls import _DEVICE

__all__ = ["FP8_GEMM", "scaled_mm_fp8", "scaled_mm_fp8_supports"]

_OUT_DTYPES = (torch.float16, torch.bfloat16)


def _optional_xpu_c(name: str) -> torch._ops.OpOverload | None:
    """``torch.ops._xpu_C.<name>`` if this build loaded ``vllm_xpu_kernels._xpu_C`` and it has
    that op with an XPU kernel (the platform check verified its call form), else None."""
    try:
        packet = getattr(torch.ops._xpu_C, name)
    except (AttributeError, RuntimeError):
        return None
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"_xpu_C::{name}", "XPU"):
        return None
    return packet.default


#: None where this release or build lacks the kernel (its predicate then declines every call).
FP8_GEMM = _optional_xpu_c("fp8_gemm")


def _a_ok(a: Tensor, m: int, k: int) -> bool:
    """A unit last stride, rows at ``K <= stride(0) < 2 K`` (the output's rows then at ``stride(0)
    // K * N == N``: contiguous); one row: any row stride from K."""
    return a.stride(1) == 1 and a.stride(0) >= k and (m == 1 or a.stride(0) < 2 * k)


def _b_ok(b: Tensor, k: int, n: int) -> bool:
    """A unit stride in one dimension (the kernel then reads B's own strides), columns or rows
    not overlapping."""
    s0, s1 = b.stride()
    return (s0 == 1 and s1 >= k) or (s1 == 1 and s0 >= n)


def scaled_mm_fp8_supports(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype,
    bias: Tensor | None = None,
) -> bool:
    """This build has ``fp8_gemm``; ``a`` on the platform's device, e4m3fn; fp16/bf16 output;
    ``a``'s rows as :func:`_a_ok` says, ``b`` with a unit stride (:func:`_b_ok`). Any
    scale layout the op takes, any bias (the op's ``[N]`` of the output dtype)."""
    if FP8_GEMM is None or a.device.type != _DEVICE or a.dtype is not E4M3FN or out_dtype not in _OUT_DTYPES:
        return False
    (m, k), n = a.shape, b.shape[1]
    return not (m and k and n) or (_a_ok(a, m, k) and _b_ok(b, k, n))


def scaled_mm_fp8(
    a: Tensor,
    b: Tensor,
    scale_a: Tensor,
    scale_b: Tensor,
    out_dtype: torch.dtype,
    bias: Tensor | None = None,
) -> Tensor:
    """``torch.ops._xpu_C.fp8_gemm(a, b, out_dtype, sa [M, 1], sb [1, N], bias)``, the scales
    contiguous float32 in that one form whatever the op was given (module docstring)."""
    m, k = a.shape
    n = b.shape[1]
    if not (m and k and n):
        out = torch.zeros((m, n), dtype=out_dtype, device=a.device)
        return out if bias is None else out + bias
    sa, sb = row_and_column_scales(scale_a, scale_b, m, n)
    return FP8_GEMM(a, b, out_dtype, sa, sb, None if bias is None else bias.contiguous())  # type: ignore[misc]
