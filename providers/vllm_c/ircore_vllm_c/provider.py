"""The module named by this distribution's ``ircore.providers`` entry point.

Importing it is cheap and safe: the kernels are loaded (and built on first use) inside
:func:`ircore_check_platform`, which turns any failure into the one-line reason ircore shows
for an ``unavailable`` provider; the implementations are declared as data in
:data:`IRCORE_IMPLEMENTATIONS`, whose ``impls`` module is imported only after that check passed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ircore

if TYPE_CHECKING:
    from ircore.platform import Platform

_KINDS = ("cpu", "cuda")
OPS = (
    "rms_norm",
    "fused_add_rms_norm",
    "silu_and_mul",
    "rms_norm_gated",
    "layer_norm",
    "gelu_and_mul",
    "mul_and_silu",
    "fatrelu_and_mul",
    "swigluoai_and_mul",
)
# Hand-written kernels ahead of generic ones (triton: 20) on CPU and CUDA, the only platforms
# where this provider is available. fused_add_rms_norm works in place (the core clones if needed).
# cache_by_signature: the predicates read only devices, dtypes and last-dimension layout (see
# impls.py), facts of the call signature, so ircore may ask once per signature.
DEFAULT_RANK = 10

IRCORE_IMPLEMENTATIONS = ircore.impl_table(
    "ircore_vllm_c.impls", OPS, inplace=("fused_add_rms_norm",), cache_by_signature=True, rank=DEFAULT_RANK
)


@ircore.hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None on a CPU or NVIDIA GPU platform where the kernels load; otherwise why not."""
    if platform.kind not in _KINDS:
        return f"needs an NVIDIA GPU or a CPU; found {platform.describe()}"
    from . import kernels

    return kernels.load_kernels(cuda=platform.kind == "cuda")
