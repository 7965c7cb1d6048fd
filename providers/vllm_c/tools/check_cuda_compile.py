"""Compile the CUDA source to an object file with nvcc, without a GPU or a CUDA build of torch.

Catches compile errors on a CPU-only machine: torch's CPU wheel ships the c10/cuda headers (all
the .cu includes) except the generated ``cuda_cmake_macros.h``, which is stubbed when missing.
Flags mirror torch's CUDA extension build. Usage: ``python tools/check_cuda_compile.py [-v]``
(``-v`` adds ``-Xptxas -v``: registers and spills per kernel).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from ircore_vllm_c import kernels  # noqa: E402

TORCH_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
]


def compile_cuda_object(
    out_dir: Path, archs: tuple[str, ...] = ("9.0",), ptxas_verbose: bool = False, keep_ptx: bool = False
) -> tuple[bool, str]:
    """Compile every CUDA source to ``out_dir``; returns (ok, compiler output). ``keep_ptx``
    also leaves nvcc's intermediate PTX there (``*.ptx``), for checks such as the PDL order."""
    cuda_home = kernels.resolve_cuda_home()
    if cuda_home is None:
        return False, "no CUDA toolkit found"
    nvcc = str(Path(cuda_home) / "bin" / "nvcc")
    include = Path(torch.__file__).parent / "include"
    stub = out_dir / "stub"
    macros = include / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    if not macros.is_file():
        (stub / "c10" / "cuda" / "impl").mkdir(parents=True, exist_ok=True)
        (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text(
            "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"
        )
    std = "-std=c++20" if torch.__version__ >= (2, 10) else "-std=c++17"  # as torch builds
    commands = []
    for src in [s for s in kernels.CUDA_SOURCES if s.endswith(".cu")]:
        cmd = [
            nvcc, "-c", str(kernels.CSRC_DIR / src), "-o", str(out_dir / (Path(src).stem + ".o")),
            std, "-Xcompiler", "-fPIC", *TORCH_NVCC_FLAGS, *kernels.CUDA_CFLAGS,
            *kernels.cuda_arch_flags(list(archs)),
            "-isystem", str(include), "-isystem", str(include / "torch" / "csrc" / "api" / "include"),
            "-isystem", str(stub), "-I", str(kernels.CSRC_DIR),
        ]  # fmt: skip
        if ptxas_verbose:
            cmd += ["-Xptxas", "-v"]
        if keep_ptx:
            cmd += ["-keep", "-keep-dir", str(out_dir)]
        commands.append(cmd)
    # one nvcc per source, all at once (each is single-threaded; the sources are independent)
    procs = [
        (cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for cmd in commands
    ]
    log = []
    ok = True
    for cmd, proc in procs:
        output, _ = proc.communicate()
        log.append(" ".join(cmd) + "\n" + output)
        ok = ok and proc.returncode == 0
    return ok, "\n".join(log)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        ok, log = compile_cuda_object(Path(tmp), ptxas_verbose="-v" in sys.argv)
    print(log)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
