"""STAND-IN for ``vllm_xpu_kernels._C`` (a compiled extension in the real package).

Like the real one it owns the torch namespace ``_C`` (``TORCH_LIBRARY(_C, ...)``: one owner per
process, which is why it cannot coexist with vLLM's own ``vllm._C``) and defines, with the
0.1.16 schemas::

    rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()
    fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()
    silu_and_mul(Tensor! result, Tensor input) -> ()

Its kernels are registered for XPU (as the real ones) and for the CPU, where they compute, and
they address memory as the real SYCL kernels do (csrc/layernorm.cpp, activation.cpp):

- rms_norm: ranks 2-4 only, rows through the input's strides (a non-unit last stride is made
  contiguous), ``result`` must be contiguous; weight of the input's dtype, 1-D, contiguous;
- fused_add_rms_norm: no checks; input rows at ``row * input.stride(-2)`` with a unit last
  stride, residual rows at ``row * hidden``, the weight read as the input's dtype;
- silu_and_mul: contiguous rows of ``2d`` in, ``d`` out, 16-byte aligned vector loads.

``IRCORE_STANDIN_XPU_VARIANT``: ``required-weight`` (releases before the optional weight),
``no-xpu-kernel`` (rms_norm registered for the CPU only), ``changed`` (a hypothetical release
whose rms_norm takes ``(input, result, ...)``). ``CALLS`` counts kernel calls.
"""

import os
from collections import Counter

import torch

if os.environ.get("IRCORE_FIXTURE_IMPORT_LOG"):
    with open(os.environ["IRCORE_FIXTURE_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

VARIANT = os.environ.get("IRCORE_STANDIN_XPU_VARIANT", "")
CALLS: Counter = Counter()
_WEIGHT = "Tensor weight" if VARIANT == "required-weight" else "Tensor? weight"
_RMS = "rms_norm(Tensor input, Tensor! result" if VARIANT == "changed" else "rms_norm(Tensor! result, Tensor input"
SCHEMAS = {
    "rms_norm": f"{_RMS}, {_WEIGHT}, float epsilon) -> ()",
    "fused_add_rms_norm": f"fused_add_rms_norm(Tensor! input, Tensor! residual, {_WEIGHT}, float epsilon) -> ()",
    "silu_and_mul": "silu_and_mul(Tensor! result, Tensor input) -> ()",
}


def _as_input_dtype(weight, x, hidden):
    """The kernels read the weight as the input's scalar type."""
    return weight.as_strided((weight.numel(),), (1,)).view(torch.uint8).view(x.dtype)[:hidden]


def _normalize(rows, weight, epsilon):
    xf = rows.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon)
    return out if weight is None else out * weight.float()


def rms_norm(result, input, weight, epsilon):
    CALLS["rms_norm"] += 1
    if input.dim() not in (2, 3, 4):
        raise RuntimeError("stand-in _C::rms_norm: Expects rank 2, 3 or 4 tensors")
    if not result.is_contiguous() or result.shape != input.shape:
        raise RuntimeError("stand-in _C::rms_norm: out must be contiguous and of the input's shape")
    if weight is not None:
        if weight.dtype != input.dtype:
            raise RuntimeError("stand-in _C::rms_norm: weight dtype must match input dtype")
        if weight.dim() not in (1, 2) or not weight.is_contiguous():
            raise RuntimeError("stand-in _C::rms_norm: weight must be 1D or 2D and contiguous")
    x = input if input.stride(-1) == 1 else input.contiguous()
    result.copy_(_normalize(x, weight, epsilon).to(input.dtype))  # rows through x's own strides


def fused_add_rms_norm(input, residual, weight, epsilon):
    CALLS["fused_add_rms_norm"] += 1
    hidden = input.shape[-1]
    tokens = input.numel() // hidden
    x = input.as_strided((tokens, hidden), (input.stride(-2), 1))
    r = residual.as_strided((tokens, hidden), (hidden, 1))
    total = (x.float() + r.float()).to(input.dtype)
    r.copy_(total)
    w = None if weight is None else _as_input_dtype(weight, input, hidden)
    x.copy_(_normalize(total, w, epsilon).to(input.dtype))


def silu_and_mul(result, input):
    CALLS["silu_and_mul"] += 1
    if input.data_ptr() % 16 or result.data_ptr() % 16:
        raise RuntimeError("stand-in _C::silu_and_mul: misaligned 16-byte vector access")
    d = input.shape[-1] // 2
    tokens = input.numel() // (2 * d)
    xf = input.as_strided((tokens, 2 * d), (2 * d, 1)).float()
    y = torch.nn.functional.silu(xf[:, :d]) * xf[:, d:]
    result.as_strided((tokens, d), (d, 1)).copy_(y.to(result.dtype))


def _changed_rms_norm(input, result, weight, epsilon):
    rms_norm(result, input, weight, epsilon)


_KERNELS = {"rms_norm": _changed_rms_norm if VARIANT == "changed" else rms_norm,
            "fused_add_rms_norm": fused_add_rms_norm, "silu_and_mul": silu_and_mul}
_LIB = torch.library.Library("_C", "DEF")  # raises if another library owns _C (vLLM's _C)
for _name, _schema in SCHEMAS.items():
    _LIB.define(_schema)
    _LIB.impl(_name, _KERNELS[_name], "CPU")
    if not (VARIANT == "no-xpu-kernel" and _name == "rms_norm"):
        _LIB.impl(_name, _KERNELS[_name], "XPU")
