"""Run the kernels on a GPU when there is one, else in Triton's interpreter on CPU.

``TRITON_INTERPRET`` must be set before triton is first imported, hence here, at collection.
"""

import os
import sys
import tempfile
from importlib import metadata
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


OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")


@pytest.fixture
def triton_first():
    """The installed provider loaded (through its entry point), and first for every op, in a scratch
    copy of ircore's state: graphs then lower to ``torch.ops.ircore_triton.*`` (on a GPU machine
    vllm_c, rank 10, would come first)."""
    if "triton" not in {ep.name for ep in metadata.entry_points(group="ircore.providers")}:
        pytest.skip("ircore-provider-triton is not installed (no entry point)")
    from ircore_triton import impls

    import ircore

    ircore.get_priority("rms_norm")  # loads the installed providers, before the scratch copy
    for name in OPS:
        impl = ircore.get_op(name).impls.get("triton")
        assert impl is not None, f"provider triton not active: {ircore.providers.HOST.status_of('triton')}"
        assert impl.fn is getattr(impls, name)  # the function itself: no wrapper, no op of its own
    with ircore.testing.isolated():
        ircore.set_priority({name: ["triton"] for name in OPS})
        yield
