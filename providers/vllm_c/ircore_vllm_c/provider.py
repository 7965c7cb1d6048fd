"""The pluggy hook module named by this distribution's ``ircore.providers`` entry point.

Importing it is cheap and safe: the kernels are loaded (and built on first use) inside
:func:`ircore_check_platform`, which turns any failure into the one-line reason ircore shows
for an ``unavailable`` provider.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ircore import hookimpl

if TYPE_CHECKING:
    from ircore.platform import Platform

OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
DEFAULT_RANK = 10
_KINDS = ("cpu", "cuda")


@hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None on a CPU or NVIDIA GPU platform where the kernels load; otherwise why not."""
    if platform.kind not in _KINDS:
        return f"needs an NVIDIA GPU or a CPU; found {platform.describe()}"
    from . import kernels

    return kernels.load_kernels(cuda=platform.kind == "cuda")


@hookimpl
def ircore_register(registrar: Any, platform: Platform) -> None:
    """Register the three ops; fused_add_rms_norm works in place (the core clones if needed)."""
    from . import impls

    # cache_by_signature: the predicates read only devices, dtypes and last-dimension layout (see
    # impls.py), facts of the call signature, so ircore may ask once per signature.
    registrar.register(
        "rms_norm", impls.rms_norm, supports_args=impls.rms_norm_supports, cache_by_signature=True
    )
    registrar.register(
        "fused_add_rms_norm",
        impls.fused_add_rms_norm,
        supports_args=impls.fused_add_rms_norm_supports,
        inplace=True,
        cache_by_signature=True,
    )
    registrar.register(
        "silu_and_mul", impls.silu_and_mul, supports_args=impls.silu_and_mul_supports, cache_by_signature=True
    )


@hookimpl
def ircore_default_priority(platform: Platform) -> dict[str, int] | None:
    """Rank 10 for every op on CPU and CUDA: hand-written kernels ahead of generic ones."""
    if platform.kind not in _KINDS:
        return None
    return dict.fromkeys(OPS, DEFAULT_RANK)
