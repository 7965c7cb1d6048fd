"""``ircore verify`` on this provider's kernels, as a user runs it (the ``ircore`` command in a
fresh interpreter, this distribution installed): on the GPU, or on a machine without one under
Triton's CPU interpreter (``TRITON_INTERPRET=1``, set by conftest.py), where the provider counts
the CPU as a Triton device."""

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest
from conftest import GPU

pytestmark = [pytest.mark.slow, pytest.mark.gpu]  # `ircore verify` in a fresh interpreter, on the GPU if any

ircore = pytest.importorskip("ircore", reason="the ircore core package is not importable")
if "triton" not in {ep.name for ep in metadata.entry_points(group="ircore.providers")}:
    pytest.skip("ircore-provider-triton is not installed (no entry point)", allow_module_level=True)
try:
    from ircore.tools import verify  # noqa: F401
except ImportError:
    pytest.skip("this ircore has no verify tool", allow_module_level=True)


def test_verify_passes(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRCORE_")}
    env["IRCORE_PROVIDERS"] = "triton"
    argv = ["verify", "--provider", "triton", "--seeds", "1", "--json"]
    if GPU is None:  # the interpreter is slow: one device, dtype and the command's three ops are
        # enough (every op's kernels in every dtype are checked by test_conformance.py, once)
        argv += ["--device", "cpu", "--dtype", "float32", "--op", "rms_norm", "fused_add_rms_norm", "silu_and_mul"]
    run = subprocess.run(
        [sys.executable, "-m", "ircore", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert doc["ok"] and not doc["failures"]
    device = GPU or "cpu"
    rows = {(r["op"], r["device"]): r for r in doc["rows"]}
    for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul"):
        row = rows[op, device]
        assert row["passed"] > 5 and row["failed"] == 0 and row["worst"] <= 1, row
