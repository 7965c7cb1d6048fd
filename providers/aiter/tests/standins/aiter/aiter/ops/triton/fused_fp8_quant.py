"""STAND-IN for ``aiter.ops.triton.fused_fp8_quant`` (AITER 0.1.9 to head, read at e4048607a5):
the two per-tensor static wrappers ircore's adapter calls, with their parameters, computing on
the CPU as the Triton kernels do (``aiter/ops/triton/_triton_kernels/quant/fused_fp8_quant.py``):

- ``fused_rms_fp8_per_tensor_static_quant``: ``M, N1 = inp1.shape`` (2-D only), one program per
  row with the whole row, ``inp1`` and ``res1`` read through their row and column strides, the
  weight as ``N1`` contiguous elements from its data pointer (any float dtype, to fp32), the
  residual added in fp32 (``out_res1`` that sum rounded to ``inp1``'s dtype, the norm from the
  fp32 sum), ``row * rsqrt(mean(row^2) + eps) * w`` in fp32, rounded to ``inp1``'s dtype with
  ``rmsnorm_convert_to_inp1_type``, times ``1 / scale[0]`` (the scale's first element, any float
  dtype), clamped to ``finfo(dtype_quant).max`` (**240** for e4m3fnuz), cast; outputs allocated
  by the wrapper: ``(out1_fp8, out1, out2, out_res1)``;
- ``fused_silu_mul_fp8_per_tensor_static_quant``: ``M, N2 = inp.shape`` (2-D), halves read
  through the strides, ``silu(a) * b`` in fp32 (rounded to ``inp``'s dtype with
  ``silu_convert_to_inp_type``), the same scale and clamp.

The wrappers' other options (a second input, the unquantised output) are not modelled: they
raise here.
"""

import torch
from torch import Tensor

from aiter import CALLS, _arch_fp8

fp8_dtype = None  # aiter.dtypes.fp8 at import: read per call here (simulated archs)


def _dtype_max(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)  # DTYPE_MAX: torch.finfo(out.dtype).max, 240 for e4m3fnuz


def _launch(name: str, m: int) -> None:
    if m == 0:
        raise RuntimeError(f"stand-in aiter {name}: launch with an empty grid")
    CALLS[name] += 1


def _store(y: Tensor, scale: Tensor, dtype: torch.dtype) -> Tensor:
    s = scale.reshape(-1)[0].float()
    m = _dtype_max(dtype)
    return torch.clamp(y * (1.0 / s), -m, m).to(dtype)


def fused_rms_fp8_per_tensor_static_quant(
    inp1,
    inp1_weight,
    inp1_epsilon,
    inp1_scale,
    inp2=None,
    inp2_weight=None,
    inp2_epsilon=None,
    dtype_quant=None,
    res1=None,
    output_unquantized_inp1=False,
    rmsnorm_convert_to_inp1_type=False,
):
    if inp2 is not None or output_unquantized_inp1:
        raise NotImplementedError("stand-in: inp2 / output_unquantized_inp1 are not modelled")
    dtype_quant = _arch_fp8() if dtype_quant is None else dtype_quant
    M, N1 = inp1.shape
    _launch("fused_rms_fp8_per_tensor_static_quant", M)
    x = inp1.float()
    out_res1 = None
    if res1 is not None:
        Mr, Nr = res1.shape
        assert M == Mr and N1 == Nr, "The shape should be identical between inp1 and res1"
        x = x + res1.float()
        out_res1 = x.to(inp1.dtype)
    w = inp1_weight.as_strided((N1,), (1,)).float()  # weight1_ptr + n_offs: contiguous, unchecked
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + inp1_epsilon) * w
    if rmsnorm_convert_to_inp1_type:
        y = y.to(inp1.dtype).float()
    return _store(y, inp1_scale, dtype_quant), None, None, out_res1


def fused_silu_mul_fp8_per_tensor_static_quant(inp, inp_scale, dtype_quant=None, silu_convert_to_inp_type=False):
    dtype_quant = _arch_fp8() if dtype_quant is None else dtype_quant
    M, N2 = inp.shape
    assert N2 % 2 == 0
    _launch("fused_silu_mul_fp8_per_tensor_static_quant", M)
    n = N2 // 2
    a, b = inp[:, :n].float(), inp[:, n:].float()
    y = a / (1.0 + torch.exp(-a)) * b
    if silu_convert_to_inp_type:
        y = y.to(inp.dtype).float()
    return _store(y, inp_scale, dtype_quant)
