"""The pluggy hook module named by this distribution's ``ircore.providers`` entry point.

Importing it stays light: triton and the kernels load inside :func:`ircore_register`, so a
machine without a GPU or without triton sees the provider ``unavailable`` with a reason instead
of an import failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ircore import hookimpl

if TYPE_CHECKING:
    from ircore.platform import Platform

_GPU_KINDS = ("cuda", "rocm", "xpu")
_OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
_MIN_TRITON = (3, 4)  # the range declared in the "triton" extra; tested on 3.6


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for p in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@hookimpl
def ircore_check_platform(platform: Platform) -> str | None:
    """None where triton imports and the platform is a CUDA, ROCm or XPU GPU, else why not."""
    if platform.kind not in _GPU_KINDS:
        return f"no GPU: Triton kernels need a CUDA, ROCm or XPU device; found {platform.describe()}"
    try:
        import triton
    except ImportError as e:
        return f"needs the triton package: {e}"
    version = getattr(triton, "__version__", "0")
    if _version_tuple(version) < _MIN_TRITON:
        return f"needs triton>={'.'.join(map(str, _MIN_TRITON))}; found triton {version}"
    return None


# The predicates read only devices, dtypes and last-dimension layout (see impls.py): facts of the
# call signature, so ircore may ask once per signature instead of on every call.
_CACHED = {"cache_by_signature": True}


@hookimpl
def ircore_register(registrar: Any, platform: Platform) -> None:
    """Register the three ops; fused_add_rms_norm works in place (the core clones if needed)."""
    from . import impls

    registrar.register("rms_norm", impls.rms_norm, supports_args=impls.rms_norm_supports, **_CACHED)
    registrar.register(
        "fused_add_rms_norm",
        impls.fused_add_rms_norm,
        supports_args=impls.fused_add_rms_norm_supports,
        inplace=True,
        **_CACHED,
    )
    registrar.register(
        "silu_and_mul", impls.silu_and_mul, supports_args=impls.silu_and_mul_supports, **_CACHED
    )


@hookimpl
def ircore_default_priority(platform: Platform) -> dict[str, int] | None:
    """On NVIDIA GPUs, ahead of vllm_c (rank 10) where its kernels measured faster; else 20.

    H200, 2026-12-02 (benchmarks/RESULTS.md, CUDA-graph replay, bf16+fp16, 24 shapes): triton's
    kernel time over vllm_c's, geometric mean, is 0.79 for rms_norm (faster in 24/24 shapes) and
    0.94 for fused_add_rms_norm (19/24), so rank 5 there; 0.98 for silu_and_mul, within the
    noise, where vllm_c keeps first place: its eager launch from Python is 2x cheaper.
    """
    if platform.kind == "cuda":
        return {"rms_norm": 5, "fused_add_rms_norm": 5, "silu_and_mul": 20}
    return dict.fromkeys(_OPS, 20)
