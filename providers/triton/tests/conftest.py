"""Run the kernels on a GPU when there is one, else in Triton's interpreter on CPU.

``TRITON_INTERPRET`` must be set before triton is first imported, hence here, at collection.
"""

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # ircore_triton without installing


def _gpu_type() -> str | None:
    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return None


GPU = _gpu_type()
if GPU is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config) -> None:
    """Stop early, with the fix, where Triton's interpreter cannot run (triton-lang/triton#9171)."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return
    import numpy as np

    try:
        int(np.array([1]))  # what triton 3.6's interpreter does for loop bounds
    except TypeError:
        import pytest

        pytest.exit(
            f"Triton's interpreter (triton<=3.6) fails with numpy {np.__version__} "
            "(triton-lang/triton#9171): install numpy<2.4 to run these tests on CPU",
            returncode=4,
        )
