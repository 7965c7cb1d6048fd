"""Build and run a host emulation of CUDA kernels (tools/emulate_cuda_*.py): the rewritten kernel
source, the cuda_emu/ stand-ins and cases, and the headers it includes, compiled by g++ (C++20,
the CUDA toolkit's headers on the include path) into a temporary folder (or ``out``), then run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE.parent / "ircore_vllm_c" / "csrc"
sys.path.insert(0, str(HERE.parent))

from ircore_vllm_c import kernels  # noqa: E402


def build_and_run(
    written: dict[str, str],
    emu_files: tuple[str, ...],
    headers: tuple[str, ...],
    main: str,
    args: tuple[str, ...] = (),
    out: Path | None = None,
    capture: bool = True,
    opt: str = "-O1",
) -> tuple[int, str]:
    """Writes ``written`` (file name -> text), copies ``emu_files`` from cuda_emu/ and ``headers``
    from csrc/, compiles ``main`` and runs it with ``args``: (exit status, output; the output is
    empty when not captured)."""
    cuda_home = kernels.resolve_cuda_home()
    if cuda_home is None or shutil.which("g++") is None:
        return 2, "needs g++ and the CUDA toolkit's headers"
    with tempfile.TemporaryDirectory() as tmp:
        d = out or Path(tmp)
        for name, text in written.items():
            (d / name).write_text(text)
        for f in emu_files:
            shutil.copy(HERE / "cuda_emu" / f, d / f)
        for h in headers:
            shutil.copy(CSRC / h, d / h)
        cmd = ["g++", "-std=c++20", opt, f"-I{cuda_home}/include", f"-I{d}", str(d / main)]
        cmd += ["-o", str(d / "emu"), "-lpthread"]
        build = subprocess.run(cmd, capture_output=True, text=True)
        if build.returncode != 0:
            return build.returncode, build.stdout + build.stderr
        done = subprocess.run([str(d / "emu"), *args], capture_output=capture, text=True)
        return done.returncode, (done.stdout + done.stderr) if capture else ""
