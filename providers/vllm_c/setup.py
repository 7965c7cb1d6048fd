"""Ahead-of-time kernel build, when the build environment has torch and a C++ compiler.

Under pip's default build isolation there is no torch: the wheel is then pure Python and the
kernels are built on first use (``ircore_vllm_c.kernels``). With ``--no-build-isolation`` in an
environment with torch, ``_C.so`` (CPU) and, where torch is a CUDA build and a toolkit is found,
``_C_cuda.so`` are built now; ``_aot_build.json`` records the torch version, sources hash and
GPU architectures, and the loader uses the build only when all three match at run time (the
sources hash is ircore's ``sources_digest``, shared with the first-use build, so this needs ircore
importable too: it is under ``--no-build-isolation``). A failed AOT build is a warning, never an
install failure.

Environment: ``IRCORE_VLLM_C_NO_AOT=1`` (or ``IRCORE_NO_BUILD=1``, which release builds set for
every project) skips the build; ``IRCORE_VLLM_C_NO_CUDA=1`` skips the
CUDA part; ``IRCORE_VLLM_C_CUDA_ARCH`` (or ``TORCH_CUDA_ARCH_LIST``) like ``"9.0"`` picks the GPU
architectures (default: the visible GPUs', else 9.0).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
CSRC = "ircore_vllm_c/csrc"


def _kernels_module():
    """ircore_vllm_c/kernels.py, loaded by path (the package itself may not be importable; the
    module imports only torch and ircore)."""
    spec = importlib.util.spec_from_file_location("_ircore_vllm_c_kernels", HERE / "ircore_vllm_c/kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _warn(msg: str) -> None:
    print(f"ircore-provider-vllm-c: {msg}", file=sys.stderr, flush=True)


def _cuda_archs(build) -> list[str]:
    env = os.environ.get("IRCORE_VLLM_C_CUDA_ARCH") or os.environ.get("TORCH_CUDA_ARCH_LIST")
    if env:
        return [a.replace("+PTX", "") for a in re.split(r"[;, ]+", env) if a.strip()]
    return build.device_capabilities() or ["9.0"]


def _aot() -> dict:
    if os.environ.get("IRCORE_VLLM_C_NO_AOT") or os.environ.get("IRCORE_NO_BUILD"):
        return {}
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        return {}  # build isolation: pure-Python wheel, first-use build
    try:
        from ircore import kit as build  # the sources digest, shared with the first-use build
    except ImportError as exc:
        _warn(f"ircore's build helper is not importable here ({exc}): kernels will be built on first use")
        return {}
    if shutil.which(os.environ.get("CXX") or "c++") is None:
        _warn("no C++ compiler: kernels will be built on first use")
        return {}
    k = _kernels_module()
    exts = [
        cpp_extension.CppExtension(
            "ircore_vllm_c._C",
            sources=[f"{CSRC}/{s}" for s in k.CPU_SOURCES],
            include_dirs=[str(HERE / CSRC)],
            extra_compile_args={"cxx": list(k.CPU_CFLAGS)},
            extra_link_args=list(k.CPU_LDFLAGS),
        )
    ]
    archs: list[str] = []
    cuda_home = build.resolve_cuda_home() if torch.version.cuda else None
    if torch.version.cuda and not os.environ.get("IRCORE_VLLM_C_NO_CUDA"):
        if cuda_home is None:
            _warn("CUDA torch but no CUDA toolkit found (set CUDA_HOME): CUDA kernels build on first use")
        else:
            os.environ["CUDA_HOME"] = cuda_home
            cpp_extension.CUDA_HOME = cuda_home  # torch resolved it at import; nvcc may be a wrapper
            archs = _cuda_archs(build)
            exts.append(
                cpp_extension.CUDAExtension(
                    "ircore_vllm_c._C_cuda",
                    sources=[f"{CSRC}/{s}" for s in k.CUDA_SOURCES],
                    include_dirs=[str(HERE / CSRC)],
                    extra_compile_args={
                        "cxx": ["-O3"],
                        "nvcc": [*k.CUDA_CFLAGS, *build.cuda_arch_flags(archs)],
                    },
                )
            )

    base = cpp_extension.BuildExtension.with_options(no_python_abi_suffix=True)

    class BuildKernels(base):
        """Builds what it can, then records what was built for the run-time check."""

        def build_extension(self, ext):
            try:
                super().build_extension(ext)
                ext._ircore_built = True
            except Exception as exc:  # the first-use build will try again, and say why
                _warn(f"ahead-of-time build of {ext.name} failed ({exc}); it will build on first use")
                ext._ircore_built = False

        def run(self):
            super().run()
            built = [e.name for e in self.extensions if getattr(e, "_ircore_built", False)]
            if not built:
                return
            meta = {
                "torch": torch.__version__,
                "sources": k.source_hash(),  # ircore.kit.sources_digest
                "built": built,
                "cuda_archs": archs if "ircore_vllm_c._C_cuda" in built else [],
            }
            out = Path(self.get_ext_fullpath("ircore_vllm_c._C")).parent / k.AOT_META
            out.write_text(json.dumps(meta, indent=1) + "\n")

    return {"ext_modules": exts, "cmdclass": {"build_ext": BuildKernels}}


setup(**_aot())
