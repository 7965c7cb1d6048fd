"""Core test setup: no installed provider leaks into core tests, and dispatch state is restored."""

from __future__ import annotations

import os
import tempfile

# Core tests register their own implementations; providers installed in this environment (the
# repo's own, e.g. vllm_c) must not join in. Plugin tests run in subprocesses with their own env.
os.environ["IRCORE_PROVIDERS"] = "none"
for var in ("IRCORE_DISABLE", "IRCORE_PRIORITY", "IRCORE_CONFIG", "IRCORE_STRICT", "IRCORE_FUSIONS"):
    os.environ.pop(var, None)
# One Inductor cache for every test and subprocess of a run: kernels compile once (CI has 2 cores),
# and no pool of compile workers to start for graphs this small.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"ircore-tests-inductor-{os.getuid()}")
)
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from ircore.op import all_ops  # noqa: E402
from ircore.testing import isolated  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_state():
    """Every test runs on a scratch copy of ircore's state (ops, implementations, priorities,
    configuration, providers), undone afterwards."""
    with isolated() as state:
        yield state


@pytest.fixture
def x4096():
    torch.manual_seed(0)
    return torch.randn(16, 4096), torch.randn(4096) * 0.1 + 1.0


@pytest.fixture(params=["fast call", "python"])
def miss_path(request, monkeypatch):
    """Run the test with signature misses decided by the fast call (ircore/csrc/fast_call.cpp
    calls dispatch.choose_and_cache itself), and again by the eager call's Python path, which
    takes over when the fast call returns its sentinel (here: fast calls built without a miss
    handler, as ``_fastpath.make_fast_call(op, None)`` makes them)."""
    from ircore import _fastpath

    if request.param == "python":
        for op in all_ops().values():
            namespace = type(op).__call__.__globals__
            if namespace.get("_ir_fast") is not None:
                monkeypatch.setitem(namespace, "_ir_fast", _fastpath.make_fast_call(op, None))
    return request.param
