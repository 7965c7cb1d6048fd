"""Load the kernels once (building them on first use), for CPU and, where there is one, CUDA."""

import os
import sys
import tempfile
from pathlib import Path

# The core suite's Inductor cache (tests/conftest.py), shared by every suite of a run and their
# subprocesses: what one compiled (and Inductor's C++ toolchain checks) the others reuse; no pool
# of compile workers to start for graphs this small (CI has 2 cores).
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"ircore-tests-inductor-{os.getuid()}")
)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # ircore_vllm_c without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
REPO = ROOT.parents[1]
try:
    import ircore  # noqa: F401
except ImportError:  # the core from this checkout, when it is not installed
    if (REPO / "ircore" / "__init__.py").is_file():
        sys.path.append(str(REPO))

from ircore_vllm_c import kernels  # noqa: E402

HAS_CUDA = torch.cuda.is_available() and torch.version.cuda is not None
LOAD_REASON = kernels.load_kernels(cuda=HAS_CUDA)
if LOAD_REASON is not None:  # every test here needs the kernels: fail loudly, with the reason
    pytest.exit(f"ircore_vllm_c kernels did not load: {LOAD_REASON}", returncode=3)

DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU and a CUDA build of torch")
