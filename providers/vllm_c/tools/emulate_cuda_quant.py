"""Run the CUDA fp8 quant kernels (csrc/cuda_quant.cu) on the host, without a GPU: a check of
their indexing (teams, lanes, register slots, ragged ends, resident and two-pass paths, scale
addresses), not of their speed or of the GPU's memory model.

As tools/emulate_cuda_rope.py: the kernel source is compiled by g++ as C++ with
cuda_emu/emu.h and cuda_emu/emu_block.h standing in for the CUDA built-ins (each block's threads
run at once as host threads, so __syncthreads and the warp shuffles are exact), every 16-byte
access aborting if misaligned. cuda_emu/quant_main.cpp runs every mode and source over row and
group shapes that take each path and compares the bytes and scales with a reference written there
from the ops' semantics (inputs chosen so that the norms' sums of squares are exact in any order,
so the comparison is exact). Needs g++ (C++20) and the CUDA toolkit's headers. Usage:
``python tools/emulate_cuda_quant.py [quick]``; exit status 0 when every case matches (``quick``: one
case per path, what tests/test_cuda_build.py runs).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from cuda_emu_build import CSRC, build_and_run

_LAUNCH = re.compile(r"kernel<<<(.*?), (sh\.threads), smem, stream>>>\((.*?)\);", re.S)
_VEC_LOAD = "  if (vec) return *reinterpret_cast<const Pack*>(p + i);"
_VEC_STORE = "    *reinterpret_cast<Pack*>(p + i) = u;"
_CHECK = '{{ if (reinterpret_cast<uintptr_t>(p + i) % 16) {{ printf("MISALIGNED {}\\n"); abort(); }} }}\n'
_SHARED = {
    "extern __shared__ __align__(16) unsigned char smem_raw[];": (
        "alignas(16) static unsigned char smem_raw[96 * 1024];"
    ),
    "__shared__ float red[32];": "static float red[32];",
}


def emulated_source() -> str:
    """cuda_quant.cu with its launch routed through emu_launch_block, its shared memory static and
    its 16-byte accesses checked."""
    src = (CSRC / "cuda_quant.cu").read_text()
    src, n = _LAUNCH.subn(lambda m: f"emu_launch_block({m[1]}, {m[2]}, [&] {{ kernel({m[3]}); }});", src)
    if n != 1 or _VEC_LOAD not in src or _VEC_STORE not in src or any(k not in src for k in _SHARED):
        raise SystemExit("cuda_quant.cu changed shape: update tools/emulate_cuda_quant.py")
    src = src.replace(_VEC_LOAD, "  if (vec) " + _CHECK.format("LOAD") + _VEC_LOAD)
    src = src.replace(_VEC_STORE, "    " + _CHECK.format("STORE") + _VEC_STORE)
    for a, b in _SHARED.items():
        src = src.replace(a, b)
    extra = '#include <cstdio>\n#include <cstdlib>\n#include "emu_block.h"'
    return src.replace('#include "cuda_common.cuh"', '#include "cuda_common.cuh"\n' + extra)


def run(quick: bool = False, out: Path | None = None) -> tuple[int, str]:
    """Builds the emulation (in out, else a temporary folder) and runs it: (exit status, output)."""
    return build_and_run(
        {"quant_emu.cpp": emulated_source()},
        ("emu.h", "emu_block.h", "quant_main.cpp"),
        ("cuda_quant.h", "cuda_common.cuh"),
        "quant_main.cpp",
        ("quick",) if quick else (),
        out,
        opt="-O0",  # the build is most of the quick run's time
    )


def main() -> int:
    rc, log = run(quick="quick" in sys.argv[1:])
    print(log)
    return rc


if __name__ == "__main__":
    sys.exit(main())
