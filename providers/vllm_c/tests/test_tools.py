"""``ircore verify`` and ``ircore bench`` on this provider's real kernels, as a user runs them: the
``ircore`` command in a fresh interpreter, with this distribution installed (entry point found).

On CPU, bench measures vllm_c against native; ``--write-config`` writes an ircore.toml that
``ircore list`` then shows as the source of each op's priority. On an NVIDIA GPU the CUDA test
also exercises the CUDA-graph timing.
"""

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # `ircore verify` and `ircore bench` in fresh interpreters

ircore = pytest.importorskip("ircore", reason="the ircore core package is not importable")
if "vllm_c" not in {ep.name for ep in metadata.entry_points(group="ircore.providers")}:
    pytest.skip("ircore-provider-vllm-c is not installed (no entry point)", allow_module_level=True)
try:
    from ircore.config import read_file
    from ircore.tools import bench  # noqa: F401
except ImportError:
    pytest.skip("this ircore has no verify/bench tools", allow_module_level=True)


def _ircore(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRCORE_") or k == "IRCORE_CACHE_DIR"}
    env["IRCORE_PROVIDERS"] = "vllm_c"
    return subprocess.run(
        [sys.executable, "-m", "ircore", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.gpu
def test_verify_passes(tmp_path):
    run = _ircore("verify", "--provider", "vllm_c", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert doc["ok"] and not doc["failures"]
    ops = {(r["op"], r["device"]): r for r in doc["rows"]}
    for device in doc["devices"]:
        for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul"):
            row = ops[op, device]
            assert row["passed"] > 20 and row["failed"] == 0 and row["worst"] <= 1, row


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_bench_writes_a_config_that_list_shows(tmp_path, device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    args = ["--op", "rms_norm", "silu_and_mul", "--shape", "4x64", "16x256", "--dtype", "float32"]
    run = _ircore(
        "bench", *args, "--device", device, "--rounds", "3", "--round-ms", "2",
        "--write-config", "ircore.toml", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    assert doc["rank_by"] == ("graph" if device == "cuda" else "eager")
    for result in doc["results"]:
        for kind, times in result["us"].items():
            assert set(times) == {"vllm_c", "native"} and all(t > 0 for t in times.values()), (kind, result)
    order = doc["order"]
    assert set(order) == {"rms_norm", "silu_and_mul"}
    assert all(sorted(names) == ["native", "vllm_c"] for names in order.values())
    # the written file round-trips through the normal config loader ...
    path = tmp_path / "ircore.toml"
    assert read_file(path).values["priority"] == {op: tuple(names) for op, names in order.items()}
    # ... and `ircore list` (run in that directory) shows it as the source of those priorities
    listed = _ircore("list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    ops = {o["op"]: o for o in json.loads(listed.stdout)["ops"]}
    for op, names in order.items():
        assert ops[op]["source"] == f"{path}: priority"
        assert ops[op]["priority"] == names
    assert ops["fused_add_rms_norm"]["source"] == "provider defaults"
