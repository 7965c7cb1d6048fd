"""The compile path across processes: the backend found by name, and Inductor's FX graph cache.

Each scenario is a fresh interpreter (a hit from another process needs one; the backend by name
must work in a script that never imports ircore). They share the run's Inductor cache directory (conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .provider_env import FIXTURES, REPO

pytestmark = pytest.mark.slow  # Inductor compiles in fresh interpreters

# A provider implementation in a file of its own, so that a test can "upgrade" it.
PROVIDER_MODULE = '''
import torch
import ircore

def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float,
             variance_size: int | None = None) -> torch.Tensor:
    return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size) + 0.0
'''

CACHE_SCRIPT = '''
import json, sys, torch
from torch._dynamo.utils import counters
import ircore, cacheprov
ircore.ops.rms_norm.register_impl("cacheprov", cacheprov.rms_norm)
results, reports = [], []
eps = float(sys.argv[2])
for priority in sys.argv[1].split("/"):
    ircore.set_priority(rms_norm=priority.split(","))
    torch._dynamo.reset()
    counters.clear()
    ircore.compile.reset_report()
    f = torch.compile(lambda x, w: ircore.ops.rms_norm(x, w, eps) * 2, backend="ircore")
    f(torch.randn(4, 32), torch.randn(32))
    results.append([priority, counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"]])
    report = ircore.compile.report()
    reports.append([report.graphs, report.cached, report.cached_plans, report.to_dict()["cached_plans"]])
print("RESULT" + json.dumps([results, reports]))
'''


def _run(script: str, argv: list[str], env: dict[str, str], cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRCORE_")}
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no worker pool to start: tiny graphs, 2 cores
    env.update(extra)
    return env


def test_priority_and_provider_changes_miss_the_fx_graph_cache(tmp_path):
    (tmp_path / "cacheprov.py").write_text(PROVIDER_MODULE)
    env = _env(
        IRCORE_PROVIDERS="none",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]),
        TORCHINDUCTOR_FX_GRAPH_CACHE="1",
    )
    # An epsilon of this run only: the graphs are new to the shared cache, whose compiled C++
    # toolchain state still saves ~20 s (an empty cache directory would not).
    eps = str(1e-6 * (1 + time.time_ns() % 10**9 / 10**9))
    first, reports = _run(CACHE_SCRIPT, ["cacheprov/native/cacheprov", eps], env, tmp_path)
    # the third compile, after torch._dynamo.reset() in the same process, is served from the cache
    assert first == [["cacheprov", 0, 1], ["native", 0, 1], ["cacheprov", 1, 0]]
    # the report accounts for it with the plan its cache key covered (rms_norm, and the fused op
    # its add_rms_norm fusion could have made)
    with_provider = {"fused_add_rms_norm": ["native"], "rms_norm": ["cacheprov", "native"]}
    assert reports == [[1, 0, [], []], [1, 0, [], []], [0, 1, [with_provider], [with_provider]]]
    again, reports = _run(CACHE_SCRIPT, ["native/cacheprov", eps], env, tmp_path)
    assert again == [["native", 1, 0], ["cacheprov", 1, 0]]  # going back is a hit, in another process
    native_only = {"fused_add_rms_norm": ["native"], "rms_norm": ["native"]}
    assert reports == [[0, 1, [native_only], [native_only]], [0, 1, [with_provider], [with_provider]]]
    # an upgraded provider (its implementation's source changed) misses; native still hits
    (tmp_path / "cacheprov.py").write_text(PROVIDER_MODULE + "\n# version 2\n")
    upgraded, reports = _run(CACHE_SCRIPT, ["cacheprov/native", eps], env, tmp_path)
    assert upgraded == [["cacheprov", 0, 1], ["native", 1, 0]]
    assert reports == [[1, 0, [], []], [0, 1, [native_only], [native_only]]]


BY_NAME_SCRIPT = '''
import json, sys, torch
backends = torch._dynamo.list_backends()
listed_without_import = "ircore" in backends and "ircore" not in sys.modules
from model import block                     # the model's own module uses ircore ops
x, r, w = torch.randn(4, 32), torch.randn(4, 32), torch.randn(32)
out = torch.compile(block, backend="ircore", fullgraph=True)(x, r, w)
torch.testing.assert_close(out, block(x, r, w))
import ircore
report = ircore.compile.report()
print("RESULT" + json.dumps({"listed_without_import": listed_without_import,
    "fusions": dict(report.fusions), "lowering": sorted(report.last_lowering.values())}))
'''

MODEL = '''
import ircore

def block(x, r, w):
    return ircore.ops.rms_norm(x + r, w, 1e-6) * 2
'''


@pytest.fixture(scope="module")
def good_site(tmp_path_factory) -> Path:
    """The ``good`` fixture provider, pip-installed as a real distribution."""
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-compile",
         "--disable-pip-version-check", "--target", str(site), str(FIXTURES / "good")],
        check=True,
    )
    return site


def test_backend_by_name_in_a_script_that_never_imports_ircore(good_site, tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    env = _env(
        IRCORE_PROVIDERS="good",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(good_site)]),
        TORCHINDUCTOR_FX_GRAPH_CACHE="0",  # a cache hit runs no pass: no fusions counted, no lowering
        TORCHINDUCTOR_AUTOGRAD_CACHE="0",
    )
    result = _run(BY_NAME_SCRIPT, [], env, tmp_path)
    assert result["listed_without_import"]
    assert result["fusions"] == {
        "qk_norm_rope": 0,
        "hf_qk_norm_rope": 0,
        "add_rms_norm": 1,
        "rms_norm_reshape": 0,
        "rms_norm_quant": 0,
        "silu_and_mul_quant": 0,
    }
    # the fixture provider's in-place fused_add_rms_norm (rank 5, ahead of native) was lowered
    assert result["lowering"] == ["good"]
