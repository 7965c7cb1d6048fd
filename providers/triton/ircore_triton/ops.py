"""The provider's own opaque torch ops, ``torch.ops.ircore_triton.*``.

Why: an opaque op is what ``torch.compile`` graphs and CUDA graphs can call without tracing into
Triton's Python launcher. Defined with ``torch.library.Library`` (not ``custom_op``) because its
per-call cost is lower: the dispatcher calls our Python kernel directly. Kernels are registered
for CUDA (also ROCm), XPU and CPU (CPU runs only under ``TRITON_INTERPRET=1``, for tests).

Ops:
- ``rms_norm(Tensor x, Tensor? weight, float epsilon, int? variance_size=None) -> Tensor``
- ``fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, float epsilon,
  int? variance_size=None) -> (Tensor, Tensor)``: out of place.
- ``fused_add_rms_norm_inplace(Tensor(a!) x, Tensor(b!) x_residual, ...) -> ()``: writes the
  output into ``x`` and the sum into ``x_residual``; returns nothing, so ``torch.compile`` can
  auto-functionalize it.
- ``silu_and_mul(Tensor x) -> Tensor``.
"""

from __future__ import annotations

import torch

from ircore.kit import register_device_kernel

from . import kernels

__all__ = ["NAMESPACE", "lib"]

NAMESPACE = "ircore_triton"
_DEVICE_TYPES = ("cuda", "xpu", "cpu")

_SCHEMAS = {
    "rms_norm": ("rms_norm(Tensor x, Tensor? weight, float epsilon, int? variance_size=None) -> Tensor"),
    "fused_add_rms_norm": (
        "fused_add_rms_norm(Tensor x, Tensor x_residual, Tensor? weight, float epsilon, "
        "int? variance_size=None) -> (Tensor, Tensor)"
    ),
    "fused_add_rms_norm_inplace": (
        "fused_add_rms_norm_inplace(Tensor(a!) x, Tensor(b!) x_residual, Tensor? weight, "
        "float epsilon, int? variance_size=None) -> ()"
    ),
    "silu_and_mul": "silu_and_mul(Tensor x) -> Tensor",
}


def _rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    return kernels.rms_norm(x, weight, epsilon, variance_size)


def _fused_add_rms_norm(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return kernels.fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size)


def _fused_add_rms_norm_inplace(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> None:
    kernels.fused_add_rms_norm_(x, x_residual, weight, epsilon, variance_size)


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return kernels.silu_and_mul(x)


_IMPLS = {
    "rms_norm": _rms_norm,
    "fused_add_rms_norm": _fused_add_rms_norm,
    "fused_add_rms_norm_inplace": _fused_add_rms_norm_inplace,
    "silu_and_mul": _silu_and_mul,
}


# Fakes (shape/dtype propagation for torch.compile and meta tensors). Outputs are contiguous.


def _rms_norm_fake(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _fused_add_rms_norm_fake(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty(x.shape, dtype=x.dtype, device=x.device),
        torch.empty(x.shape, dtype=x.dtype, device=x.device),
    )


def _fused_add_rms_norm_inplace_fake(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> None:
    return None


def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)


_FAKES = {
    "rms_norm": _rms_norm_fake,
    "fused_add_rms_norm": _fused_add_rms_norm_fake,
    "fused_add_rms_norm_inplace": _fused_add_rms_norm_inplace_fake,
    "silu_and_mul": _silu_and_mul_fake,
}


def _already_defined() -> bool:
    try:
        getattr(torch.ops, NAMESPACE).rms_norm  # noqa: B018 - probing the registry
    except (AttributeError, RuntimeError):
        return False
    return True


lib: torch.library.Library | None = None
if not _already_defined():  # e.g. a second copy of this module (reload): keep the first
    lib = torch.library.Library(NAMESPACE, "DEF")
    for _name, _schema in _SCHEMAS.items():
        lib.define(_schema)
        for _device in _DEVICE_TYPES:  # "xpu" registers on every torch build, used only on XPU
            register_device_kernel(lib, _name, _IMPLS[_name], _device)
        torch.library.register_fake(f"{NAMESPACE}::{_name}", _FAKES[_name], lib=lib)
