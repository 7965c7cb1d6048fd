"""Find, build and load the compiled kernels; never raise, say why in one line instead.

Order: an ahead-of-time build shipped in the package (``_C.so``, ``_C_cuda.so`` plus
``_aot_build.json``) when it was built for exactly this torch and these sources; otherwise a
build on first use by ircore's build helper (``ircore.kit.build_extension``), cached in
``$IRCORE_CACHE_DIR/ircore_vllm_c_<cpu|cuda>/`` (``~/.cache/ircore`` by default) and reused by
later processes. The CPU library defines the ops and is always loaded; the CUDA library adds
CUDA kernels and is loaded only on an NVIDIA GPU machine.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

import torch

from ircore.kit import BuildError, build_extension, device_capabilities, sources_digest
from ircore.kit import cache_root as cache_root  # re-exported: this module's names since 0.1
from ircore.kit import cuda_arch_flags as cuda_arch_flags
from ircore.kit import resolve_cuda_home as resolve_cuda_home

__all__ = [
    "cache_root",
    "cpu_loaded",
    "cuda_loaded",
    "load_kernels",
    "resolve_cuda_home",
    "set_pdl",
]

log = logging.getLogger("ircore.vllm_c")

PACKAGE_DIR = Path(__file__).resolve().parent
CSRC_DIR = PACKAGE_DIR / "csrc"
CPU_SOURCES = (
    "cpu_ops.cpp",
    "cpu_kernels.cpp",
    "checks.cpp",
    "cpu_activation.cpp",
    "act_checks.cpp",
    "cpu_rope.cpp",
    "cpu_rope_kernels.cpp",
    "rope_checks.cpp",
    "cpu_quant.cpp",
    "cpu_quant_kernels.cpp",
    "cpu_quant_rows.cpp",
    "cpu_fp8_mm.cpp",
    "cpu_fp8_mm_kernels.cpp",
)
CUDA_SOURCES = (
    "cuda_ops.cu",
    "checks.cpp",
    "cuda_activation.cu",
    "act_checks.cpp",
    "cuda_rope.cu",
    "cuda_rope_ops.cpp",
    "rope_checks.cpp",
    "cuda_quant.cu",
    "cuda_quant_ops.cpp",
    "cuda_norm_invariant.cu",
    "cuda_norm_invariant_ops.cpp",
)
HEADERS = (
    "cpu_kernels.h",
    "cpu_common.h",
    "cpu_kernels_isa.inc",
    "cpu_avx512.inc",
    "ops_common.h",
    "cpu_activation.h",
    "cpu_activation_isa.inc",
    "cpu_activation_dispatch.inc",
    "act_common.h",
    "cpu_rope.h",
    "cpu_rope_isa.inc",
    "rope_common.h",
    "cuda_common.cuh",
    "cuda_rope.h",
    "cuda_quant.h",
    "cuda_norm_invariant.h",
    "cpu_quant_rows.h",
    "quant_op_bindings.inc",
    "quant_common.h",
    "cpu_fp8_mm.h",
)
CPU_CFLAGS = ("-O3", "-fopenmp", "-fno-math-errno", "-Wno-unused-parameter")
CPU_LDFLAGS = ("-fopenmp",)
CUDA_CFLAGS = ("-O3", "-DNDEBUG")
AOT_META = "_aot_build.json"
NAMESPACE = "ircore_vllm_c"

_lock = threading.RLock()
_results: dict[str, str | None] = {}  # "cpu" / "cuda" -> None (loaded) or the reason
_fakes_registered = False


# ----------------------------------------------------------------------------------------------
# Public API


def load_kernels(cuda: bool | None = None) -> str | None:
    """Load the CPU kernels, and the CUDA ones on an NVIDIA GPU machine (``cuda=None``: detect).

    Returns None when everything asked for is loaded, else a one-line reason. Safe to call
    often: the outcome is cached per process.
    """
    if cuda is None:
        cuda = _is_nvidia()
    with _lock:
        reason = _load_once("cpu")
        if reason is None and cuda:
            reason = _load_once("cuda")
        return reason


# Whether each library is loaded: read by the predicates on every eager call, so plain globals.
CPU_LOADED = False
CUDA_LOADED = False


def cpu_loaded() -> bool:
    """Whether the CPU kernels are loaded (the ops exist)."""
    return CPU_LOADED


def cuda_loaded() -> bool:
    """Whether the CUDA kernels are loaded."""
    return CUDA_LOADED


def set_pdl(enabled: bool | None, device: int | None = None) -> bool:
    """Turn programmatic dependent launch off (``False``) or back on where the GPU has it
    (``True``); ``None``: as ``IRCORE_VLLM_C_PDL`` says. Returns whether launches on ``device``
    (default: the current CUDA device) now use it. The same shape as the triton provider's
    ``kernels.set_pdl``, for A/B runs and ``ircore.testing.assert_pdl_chain_matches``; needs the
    CUDA kernels loaded (``torch.ops.ircore_vllm_c._cuda_set_pdl``)."""
    mode = -1 if enabled is None else int(bool(enabled))
    dev = torch.cuda.current_device() if device is None else device
    return bool(torch.ops.ircore_vllm_c._cuda_set_pdl(mode, dev))


# ----------------------------------------------------------------------------------------------
# Loading


def _load_once(kind: str) -> str | None:
    if kind in _results:
        return _results[kind]
    try:
        reason = _load(kind)
    except Exception as exc:  # never let a broken build or environment escape
        reason = f"{kind.upper()} kernels failed to load: {type(exc).__name__}: {_first_line(exc)}"
    if reason is None:
        try:
            _register_fakes()
        except Exception as exc:  # e.g. another copy registered them already
            log.info("ircore_vllm_c: fake kernels not registered: %s", _first_line(exc))
        log.debug("ircore_vllm_c %s kernels loaded", kind)
    else:
        log.warning("ircore_vllm_c: %s", reason)
    _results[kind] = reason
    global CPU_LOADED, CUDA_LOADED
    CPU_LOADED = _results.get("cpu", "") is None
    CUDA_LOADED = _results.get("cuda", "") is None
    return reason


def _load(kind: str) -> str | None:
    if kind == "cuda":
        if not _is_nvidia():
            return "CUDA kernels need an NVIDIA GPU and a CUDA build of torch"
        if _ops_present("CUDA"):
            return None
    elif _ops_present("CPU"):
        return None
    aot = _aot_library(kind)
    if aot is not None:
        torch.ops.load_library(str(aot))
        log.info("loaded ahead-of-time %s kernels from %s", kind, aot)
        return None
    return _jit(kind)


def _ops_present(dispatch_key: str) -> bool:
    """Whether another copy already registered our ops (e.g. loaded by hand)."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"{NAMESPACE}::rms_norm", dispatch_key))
    except Exception:
        return False


def _aot_library(kind: str) -> Path | None:
    """The packaged build, if it matches this torch, these sources and this GPU."""
    if os.environ.get("IRCORE_VLLM_C_FORCE_JIT"):
        return None
    lib = PACKAGE_DIR / ("_C.so" if kind == "cpu" else "_C_cuda.so")
    meta_path = PACKAGE_DIR / AOT_META
    if not lib.is_file() or not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    why = None
    if meta.get("torch") != torch.__version__:
        why = f"built for torch {meta.get('torch')}, running {torch.__version__}"
    elif meta.get("sources") != source_hash():
        why = "sources changed since the build"
    elif kind == "cuda":
        archs = set(meta.get("cuda_archs") or [])
        need = set(device_capabilities())
        if not need <= archs:
            why = f"built for sm {sorted(archs)}, this GPU needs {sorted(need)}"
    if why:
        log.info("not using the packaged %s kernels (%s): building instead", kind, why)
        return None
    return lib


def _register_fakes() -> None:
    """Fakes of the ``_out`` variants, so torch.compile can trace calls to them (the ops ircore
    calls get the op's fake from ircore)."""
    global _fakes_registered
    if _fakes_registered:
        return
    _fakes_registered = True

    @torch.library.register_fake(f"{NAMESPACE}::rms_norm_out")
    def _rms_norm_out_fake(out, x, weight, epsilon, variance_size=None):
        return None

    @torch.library.register_fake(f"{NAMESPACE}::silu_and_mul_out")
    def _silu_out_fake(out, x):
        return None


# ----------------------------------------------------------------------------------------------
# Building on first use


def source_hash() -> str:
    """Digest of every source file and the flags, recorded by setup.py's ahead-of-time build and
    compared here before using it (the first-use build keys its cache with the same function)."""
    return sources_digest(
        (CSRC_DIR / name for name in CPU_SOURCES + CUDA_SOURCES + HEADERS),
        flags=(*CPU_CFLAGS, "|", *CPU_LDFLAGS, "|", *CUDA_CFLAGS),
    )


def _cuda_archs() -> list[str] | None:
    """``IRCORE_VLLM_C_CUDA_ARCH`` ("9.0", "8.0;9.0"), else None: the visible GPUs'."""
    env = os.environ.get("IRCORE_VLLM_C_CUDA_ARCH")
    if env:
        return [a.strip() for a in re.split(r"[;, ]+", env) if a.strip()]
    return None


def _jit(kind: str) -> str | None:
    headers = [CSRC_DIR / h for h in HEADERS]
    label = f"{kind.upper()} kernels"
    options: dict[str, Any]
    if kind == "cuda":
        sources, options = CUDA_SOURCES, {"cuda": True, "cuda_cflags": CUDA_CFLAGS}
        options["cuda_archs"] = _cuda_archs()
    else:
        sources, options = CPU_SOURCES, {"cflags": CPU_CFLAGS, "ldflags": CPU_LDFLAGS}
    try:
        build_extension(
            f"{NAMESPACE}_{kind}",
            [CSRC_DIR / s for s in sources],
            headers=headers,
            include_dirs=[CSRC_DIR],
            label=label,
            **options,
        )
    except BuildError as exc:
        return str(exc)
    return None


# ----------------------------------------------------------------------------------------------
# Helpers


def _is_nvidia() -> bool:
    try:
        return bool(
            torch.version.cuda and not getattr(torch.version, "hip", None) and torch.cuda.is_available()
        )
    except Exception:
        return False


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__
