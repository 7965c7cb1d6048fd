"""Run the CUDA RoPE kernels (csrc/cuda_rope.cu) on the host, without a GPU: a check of their
indexing, paths and head split, not of their speed or of the GPU's memory model.

The kernel source is compiled by g++ as C++ with cuda_emu/emu.h standing in for the CUDA
built-ins: each launch runs every block in turn, each warp's threads as host threads (so the
warp shuffles of fused_qk_norm_rope work), and every 16-byte access aborts if its address is not
16-byte aligned (x86 would not fault). cuda_emu/main.cpp rotates small and large cases of every
path (vector and scalar, cache and HF, head split or not, the lane-group and warp kernels of
fused_qk_norm_rope) and compares them with a float64 reference. Needs g++ (C++20) and the CUDA
toolkit's headers (cuda_bf16.h). Takes a few minutes on 2 cores (thread start-up per warp).
Usage: ``python tools/emulate_cuda_rope.py``; exit status 0 when every case matches.
"""

from __future__ import annotations

import re
import sys

from cuda_emu_build import CSRC, build_and_run

# kernel<...><<<grid, block, 0, stream>>>(args); -> emu_launch(grid, block, [&] { kernel<...>(args); });
_LAUNCH = re.compile(r"(\w+<[^;{}]*?>)\s*<<<(.*?), (\w+|dim3\([^)]*\)), 0, stream>>>\((.*?)\);", re.S)
_LOAD = "      const W w = *reinterpret_cast<const W*>(p + c);"
_STORE = "      *reinterpret_cast<W*>(p + c) = w;"
_CHECK = (
    '      if (reinterpret_cast<uintptr_t>(p + c) % sizeof(W)) {{ printf("MISALIGNED {}\\n"); abort(); }}\n'
)


def emulated_source() -> str:
    """cuda_rope.cu with its launches routed through emu_launch and its 16-byte accesses checked."""
    src = (CSRC / "cuda_rope.cu").read_text()
    src, n = _LAUNCH.subn(lambda m: f"emu_launch({m[2]}, {m[3]}, [&] {{ {m[1]}({m[4]}); }});", src)
    if n != 3 or _LOAD not in src or _STORE not in src:
        raise SystemExit("cuda_rope.cu changed shape: update tools/emulate_cuda_rope.py")
    src = src.replace(_LOAD, _CHECK.format("LOAD") + _LOAD).replace(_STORE, _CHECK.format("STORE") + _STORE)
    extra = '#include <cstdio>\n#include <cstdlib>\n#include "emu.h"'
    return src.replace('#include "cuda_rope.h"', '#include "cuda_rope.h"\n' + extra)


def main() -> int:
    rc, log = build_and_run(
        {"rope_emu.cpp": emulated_source()},
        ("emu.h", "main.cpp"),
        ("cuda_rope.h", "cuda_common.cuh"),
        "main.cpp",
        capture=False,  # (minutes: its progress as it goes)
    )
    print(log, end="")
    return rc


if __name__ == "__main__":
    sys.exit(main())
