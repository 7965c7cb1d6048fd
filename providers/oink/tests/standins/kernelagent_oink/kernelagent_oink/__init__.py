"""STAND-IN for KernelAgent-Oink (``import kernelagent_oink``), for ircore's CPU tests; not Oink.

Like the real package, importing it registers nothing; ``register(*, force=False)`` defines
``torch.ops.oink.rmsnorm(Tensor x, Tensor weight, float eps) -> Tensor`` and the in-place
``torch.ops.oink.fused_add_rms_norm(Tensor(a0!) x, Tensor(a1!) residual, Tensor weight, float eps)``
with ``torch.library.custom_op`` (fakes included), only when forced or ``VLLM_USE_OINK_RMSNORM``
is set, once, and sets ``CUTE_DSL_ARCH`` if unset. The real one also needs a GPU of compute
capability >= 10.0 and cutlass; this stand-in stands for that hardware and computes on the CPU.

The ops behave as Oink's: 2-D x, 1-D weight (asserted); the CuTeDSL pointer path only for a unit
last stride, a row stride of a multiple of 256 bits, 16-byte aligned data (weight: 32 for fp32),
a weight of x's dtype (rmsnorm also takes an fp32 weight) and, in place, a contiguous residual;
anything else takes Oink's slow reference path (right numbers). ``PATHS`` counts which path each
call took, so ircore's tests can check its predicates admit only the fast one.

``IRCORE_STANDIN_OINK_VARIANT``: ``no-cutlass`` (register() logs a warning and registers
nothing, as Oink does without nvidia-cutlass-dsl) or ``changed`` (a hypothetical release whose
rmsnorm takes ``(x, eps, weight)``).
"""

import logging
import os
from collections import Counter

import torch
from torch import Tensor

if os.environ.get("IRCORE_FIXTURE_IMPORT_LOG"):
    with open(os.environ["IRCORE_FIXTURE_IMPORT_LOG"], "a") as _log:
        _log.write(__name__ + "\n")

VARIANT = os.environ.get("IRCORE_STANDIN_OINK_VARIANT", "")
PATHS: Counter = Counter()
_REGISTERED = False
_log = logging.getLogger("kernelagent_oink")


def _aligned(t: Tensor, alignment: int = 16) -> bool:
    return t.data_ptr() % alignment == 0


def _pointer_path(x: Tensor) -> bool:
    elements = 256 // (x.element_size() * 8)
    return x.stride(1) == 1 and x.stride(0) % elements == 0 and _aligned(x)


def _weight_ok(weight: Tensor, x: Tensor, allow_fp32: bool) -> bool:
    dtypes = (x.dtype, torch.float32) if allow_fp32 else (x.dtype,)
    return weight.dtype in dtypes and weight.is_contiguous() and _aligned(weight, 32 if weight.dtype is torch.float32 else 16)


def _normalize(rows: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = rows.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def _rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    assert x.dim() == 2 and weight.dim() == 1, "oink::rmsnorm takes a 2-D x and a 1-D weight"
    if _pointer_path(x) and _weight_ok(weight, x, allow_fp32=True):
        PATHS["rmsnorm fast"] += 1
        out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        rows = x.as_strided(x.shape, (x.stride(0), 1))  # the kernel's addressing
        out.as_strided(out.shape, (out.stride(0), 1)).copy_(_normalize(rows, weight, eps).to(x.dtype))
        return out
    PATHS["rmsnorm reference"] += 1
    return _normalize(x, weight, eps).to(x.dtype)


def _fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    assert x.shape == residual.shape and x.dtype == residual.dtype and x.dim() == 2
    fast = (
        _pointer_path(x) and _pointer_path(residual) and residual.is_contiguous() and _weight_ok(weight, x, False)
    )
    PATHS["fused_add_rms_norm " + ("fast" if fast else "reference")] += 1
    residual.add_(x)
    x.copy_(_normalize(residual, weight, eps).to(x.dtype))


def _define() -> None:
    if VARIANT == "changed":

        @torch.library.custom_op("oink::rmsnorm", mutates_args=())
        def rmsnorm(x: Tensor, eps: float, weight: Tensor) -> Tensor:
            return _rmsnorm(x, weight, eps)

    else:

        @torch.library.custom_op("oink::rmsnorm", mutates_args=())
        def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
            return _rmsnorm(x, weight, eps)

    @rmsnorm.register_fake
    def _(x, *rest):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)

    @torch.library.custom_op("oink::fused_add_rms_norm", mutates_args=("x", "residual"))
    def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
        _fused_add_rms_norm(x, residual, weight, eps)

    @fused_add_rms_norm.register_fake
    def _(x, residual, weight, eps):
        return None


def register(*, force: bool = False) -> None:
    """Define torch.ops.oink.* (once), when forced or VLLM_USE_OINK_RMSNORM is set."""
    global _REGISTERED
    if _REGISTERED or not (force or os.environ.get("VLLM_USE_OINK_RMSNORM", "").lower() in ("1", "true")):
        return
    if VARIANT == "no-cutlass":
        _log.warning("Oink: cutlass (nvidia-cutlass-dsl) is not importable; not registering ops")
        return
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_100a")
    _define()
    _REGISTERED = True
