"""STAND-IN for ``vllm_xpu_kernels._xpu_C`` (a compiled extension in the real package, built when
``XPU_SPECIFIC_KERNELS_ENABLED``; its oneDNN GEMMs).

Owns the torch namespace ``_xpu_C`` and defines, with the real schema (``csrc/xpu/torch_bindings.cpp``,
unchanged from v0.1.0 to main 4543b58)::

    fp8_gemm(Tensor A, Tensor B, ScalarType? out_dtype, Tensor? A_scale_, Tensor? B_scale_,
             Tensor? bias_) -> Tensor

registered for XPU (as the real one) and for the CPU, where it computes. It models, for a 2-D
``A`` (the only form the adapter passes), what ``csrc/xpu/onednn/onednn_matmul.cpp`` and
``fp8_gemm_w8a8.h`` / ``onednn_ext.h`` do:

- the output: shape ``[M, N]``, allocated by ``at::empty_strided`` with A's strides, every one
  but the last replaced by ``stride / K * N`` (integer division), the last kept; fp16 when
  ``out_dtype`` is None; fp8 inputs e4m3fn or e5m2 of one type, fp16/bf16 outputs (TORCH_CHECKs);
- addressing: A as ``{M, K}`` with strides ``{A.stride(0), 1}``; B as ``{K, N}`` with strides
  ``{1, ldb}`` when ``B.stride(-2) == 1`` ("nt") else ``{ldb, 1}``, where ``ldb = B.stride(-2)``
  if ``B.stride(-1) == 1`` else ``B.stride(-1)``; the output at ``{ldc, 1}``, ``ldc =
  out.stride(0)``;
- the scales (``ROUTING``): ``"numel"`` (v0.1.0 to main: one element -> per tensor, mask 0; else
  per token, ``A_scale`` read as M dense floats, and per channel, ``B_scale`` as N dense floats;
  from v0.1.10 a 2-D ``A_scale`` with more than one column takes the block path: groups
  ``{1, K / gk}`` and ``{K / gk, N / gn}``, ``gk = B_scale.size(0)``, integer divisions) or
  ``"rank"`` (c3385f6, the merge of #55, 2025-11-07, replaced by #63 three days later, before any
  release: a 1-D scale per tensor, any other rank per token / per channel). oneDNN reads a scale
  buffer densely from its data pointer, whatever the tensor's strides (here: ``as_strided`` over
  the storage, an error past its end). ``"numel"`` also has v0.1.13's TORCH_CHECKs that the
  scales and the bias are contiguous (22bbc16, #497); ``"rank"`` has none;
- the bias: ``get_bias_type`` (one element: scalar; ``M * N``: ``[M, N]``; ``[..., N]`` of N
  elements: per column; ``[..., 1]`` of M: per row; else an error), f32/bf16/f16 only, read
  densely, added in fp32 after the scales, the sum rounded once to the output type;
- the primitive cache (``PRIMITIVES``, ``matmul_primitive_cache_t``): keyed on the transposition,
  the dtypes, A's and B's strides, M, N, K, the bias type and ``(A_scale.numel() << 8) |
  B_scale.numel()`` (a 32-bit int), **not** on the scale kinds: a later call whose key matches
  reuses the first call's scale masks.

``IRCORE_STANDIN_XPU_VARIANT``: ``no-xpu-c`` (a build without this extension: importing it fails),
``xpu-c-changed`` (a hypothetical release whose fp8_gemm takes ``(A, B, A_scale_, B_scale_,
out_dtype, bias_)``). ``CALLS`` counts kernel calls.
"""

import os
from collections import Counter

import torch

VARIANT = os.environ.get("IRCORE_STANDIN_XPU_VARIANT", "")
if VARIANT == "no-xpu-c":
    raise ModuleNotFoundError("No module named 'vllm_xpu_kernels._xpu_C'", name="vllm_xpu_kernels._xpu_C")

ROUTING = os.environ.get("IRCORE_STANDIN_XPU_FP8_ROUTING", "numel")
CALLS: Counter = Counter()
PRIMITIVES: dict = {}
SCHEMA = (
    "fp8_gemm(Tensor A, Tensor B, Tensor? A_scale_, Tensor? B_scale_, ScalarType? out_dtype, Tensor? bias_) -> Tensor"
    if VARIANT == "xpu-c-changed"
    else "fp8_gemm(Tensor A, Tensor B, ScalarType? out_dtype, Tensor? A_scale_, Tensor? B_scale_, Tensor? bias_) -> Tensor"
)
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_BIAS_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check(cond, message):
    if not cond:
        raise RuntimeError(message)


def _i32(x):
    return (x + 2**31) % 2**32 - 2**31


def _dense(t, count):
    """``count`` elements from ``t``'s data pointer, as a oneDNN buffer is read (strides ignored)."""
    return t.as_strided((count,), (1,)).float()


def _bias_type(bias, m, n):
    if bias is None or not bias.numel():
        return None
    numel = bias.numel()
    if numel == 1:
        shape = "scalar"
    elif numel == m * n:
        shape = "mn"
    elif bias.size(-1) == n and numel == n:
        shape = "n"
    elif bias.size(-1) == 1 and numel == m:
        shape = "m"
    else:
        raise RuntimeError(f"unsupported bias dim in matmul ...{list(bias.shape)}")
    _check(bias.dtype in _BIAS_DTYPES, f"Unsupported data type for bias in int4 matmul: {bias.dtype}")
    return shape, bias.dtype


def _scale_kinds(a_sc, b_sc, k, n):
    if ROUTING == "rank":
        return ("tensor" if a_sc.dim() == 1 else "token",), ("tensor" if b_sc.dim() == 1 else "channel",)
    if a_sc.dim() == 2 and a_sc.size(1) > 1:  # the block path (v0.1.10 on)
        _check(a_sc.size(1) == b_sc.size(0), "Mismatch group size in input and weight.")
        gk, gn = k // b_sc.size(0), n // b_sc.size(1)
        return ("block", gk), ("block", gk, gn)
    return ("tensor" if a_sc.numel() == 1 else "token",), ("tensor" if b_sc.numel() == 1 else "channel",)


def _scales(kind, sc, rows, cols, transposed):
    """The scale of every element of a ``[rows, cols]`` operand (A: ``[M, K]``; B: ``[K, N]``)."""
    if kind[0] == "tensor":
        return _dense(sc, 1).expand(rows, cols)
    if kind[0] == "token":
        return _dense(sc, rows).reshape(rows, 1).expand(rows, cols)
    if kind[0] == "channel":
        return _dense(sc, cols).reshape(1, cols).expand(rows, cols)
    if not transposed:  # A's blocks: [M, K / gk]
        gk = kind[1]
        grid = _dense(sc, rows * (cols // gk)).reshape(rows, cols // gk)
        return grid[:, torch.arange(cols) // gk]
    gk, gn = kind[1], kind[2]
    grid = _dense(sc, (rows // gk) * (cols // gn)).reshape(rows // gk, cols // gn)
    return grid[torch.arange(rows) // gk][:, torch.arange(cols) // gn]


def _fp8_gemm(A, B, out_dtype, A_scale_, B_scale_, bias_):
    CALLS["fp8_gemm"] += 1
    if ROUTING == "numel":  # v0.1.13's checks (22bbc16)
        for name, t in (("A_scale", A_scale_), ("B_scale", B_scale_), ("bias", bias_)):
            _check(t is None or t.is_contiguous(), f"{name} must be contiguous for fp8 matmul")
    _check(A.dim() in (2, 3), "OneDNN Matmul only support 2D and 3D inputs!")
    _check(A.dim() == 2, "the stand-in models a 2-D A only")
    _check(B.dim() == 2, "OneDNN Matmul only support 2D weights!")
    m, k = A.shape
    n = B.shape[1]
    _check(k != 0, "integer division by zero (stride / k)")
    strides = [s // k * n for s in A.stride()[:-1]] + [A.stride(-1)]
    result = torch.empty_strided((m, n), strides, dtype=out_dtype or torch.float16, device=A.device)
    _check(
        A.dtype in _FP8 and B.dtype in _FP8 and A.dtype == B.dtype,
        "input and weight must be f8_e5m2 or f8_e4m3fn for fp8 matmul",
    )
    _check(
        result.dtype in (torch.float16, torch.bfloat16), "output must be float16 or bfloat16 for fp8 matmul"
    )
    is_nt = B.stride(-2) == 1
    a_sc = A_scale_ if A_scale_ is not None else torch.ones(1)
    b_sc = B_scale_ if B_scale_ is not None else torch.ones(1)
    # dnnl_matmul_w8a8_fp8
    kinds = _scale_kinds(a_sc, b_sc, k, n)
    b_type = _bias_type(bias_, m, n)
    lda = A.stride(0)
    ldb = B.stride(-2) if B.stride(-1) == 1 else B.stride(-1)
    ldc = result.stride(0)
    wei_strides = (1, ldb) if is_nt else (ldb, 1)
    key = (
        is_nt,
        A.dtype,
        result.dtype,
        (lda, 1),
        wei_strides,
        m,
        n,
        k,
        b_type,
        _i32((a_sc.numel() << 8) | b_sc.numel()),
    )
    a_kind, b_kind = PRIMITIVES.setdefault(key, kinds)  # a cached primitive keeps its first scale masks
    a = A.as_strided((m, k), (lda, 1)).float() * _scales(a_kind, a_sc, m, k, False)
    w = B.as_strided((k, n), wei_strides).float() * _scales(b_kind, b_sc, k, n, True)
    acc = a @ w
    if b_type is not None:
        shape = b_type[0]
        if shape == "scalar":
            acc = acc + _dense(bias_, 1)
        elif shape == "n":
            acc = acc + _dense(bias_, n).reshape(1, n)
        elif shape == "m":
            acc = acc + _dense(bias_, m).reshape(m, 1)
        else:
            acc = acc + _dense(bias_, m * n).reshape(m, n)
    result.as_strided((m, n), (ldc, 1)).copy_(acc.to(result.dtype))
    return result


if VARIANT == "xpu-c-changed":

    def fp8_gemm(A, B, A_scale_, B_scale_, out_dtype, bias_):
        return _fp8_gemm(A, B, out_dtype, A_scale_, B_scale_, bias_)

else:
    fp8_gemm = _fp8_gemm

_LIB = torch.library.Library("_xpu_C", "DEF")
_LIB.define(SCHEMA)
_LIB.impl("fp8_gemm", fp8_gemm, "CPU")
_LIB.impl("fp8_gemm", fp8_gemm, "XPU")
