"""Ops declared out of tree: a distribution with an ``ircore.ops`` entry point, as the guide writes it.

The op library and provider of docs/writing-a-provider.md ("Declaring ops of your own") are taken
from the guide's code blocks, built and installed with pip as a real distribution (not editable),
next to fixture op libraries and providers that go wrong in each way the loader must contain
(tests/fixtures_ops). Every scenario runs in a fresh interpreter: the CLI, dispatch, compile and
the conformance kit must all see the new op.
"""

from __future__ import annotations

import json
import re

import pytest

from .provider_env import REPO, ProviderEnv, install_fixtures

pytestmark = pytest.mark.slow

GUIDE = REPO / "docs" / "writing-a-provider.md"
FIXTURES_OPS = REPO / "tests" / "fixtures_ops"


def _guide_files() -> dict[str, str]:
    """``{path: text}`` of the blocks the guide marks ``<!-- op-library: path -->``."""
    text = GUIDE.read_text()
    return dict(re.findall(r"<!-- op-library: (\S+) -->\n```\w+\n(.*?)```", text, flags=re.S))


@pytest.fixture(scope="module")
def penv(tmp_path_factory) -> ProviderEnv:
    tmp = tmp_path_factory.mktemp("op_libraries")
    project = tmp / "zeta-kernels"
    files = _guide_files()
    assert sorted(files) == [
        "pyproject.toml",
        "zeta_kernels/impls.py",
        "zeta_kernels/ops.py",
        "zeta_kernels/provider.py",
    ]
    for path, text in files.items():
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text(text)
    (project / "zeta_kernels" / "__init__.py").write_text("")
    site = tmp / "site"
    install_fixtures(site, [project, *sorted(p for p in FIXTURES_OPS.iterdir() if p.is_dir())])
    return ProviderEnv(site, tmp)


def test_list_shows_op_libraries_and_what_became_of_each(penv):
    run = penv.cli("list", "--json")
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    libraries = {r["name"]: r for r in listed["op_libraries"]}
    assert libraries["zeta"]["state"] == "active" and libraries["zeta"]["reason"] == "declares gelu_tanh_and_mul"
    assert libraries["zeta"]["distribution"] == "zeta-kernels"
    broken = libraries["broken"]
    assert broken["state"] == "failed"
    assert broken["reason"].startswith("RuntimeError: the op library's import failed halfway (at ")
    assert "ircore_ops_broken/__init__.py:12, importing ircore_ops_broken)" in broken["reason"]
    clash = libraries["clash"]
    assert clash["state"] == "invalid" and "op 'rms_norm'" in clash["reason"] and "is already declared by" in clash["reason"]
    providers = {r["name"]: r for r in listed["providers"]}
    assert providers["zeta"]["state"] == "active"
    assert providers["zeta"]["reason"].startswith("implements gelu_tanh_and_mul, silu_and_mul on ")
    declaring = providers["declaring"]
    assert declaring["state"] == "invalid"
    assert "called ircore.register_op() for 'declared_by_a_provider'" in declaring["reason"]
    assert "declare ops in a module named by an `ircore.ops` entry point" in declaring["reason"]
    late = providers["late"]
    assert late["state"] == "invalid" and "unknown op 'late_scale'" in late["reason"]
    ops = {o["op"]: o for o in listed["ops"]}
    assert ops["gelu_tanh_and_mul"]["priority"] == ["zeta", "native"]
    # a failed or refused library leaves none of its ops, a rejected provider none of its own
    assert not {"broken_scale", "clash_first", "declared_by_a_provider"} & set(ops)


CALLS = r"""
import json, torch, ircore, ircore.testing
out = {}
x = torch.randn(4, 64)
op = ircore.ops.gelu_tanh_and_mul
y = op(x)
torch.testing.assert_close(y.double(), op.reference(x), atol=1e-5, rtol=1e-5)
out["chosen"] = ircore.explain("gelu_tanh_and_mul", x).chosen
out["torch_op"] = torch.equal(torch.ops.ircore.gelu_tanh_and_mul(x), y)
out["undone"] = [hasattr(torch.ops.ircore, n) for n in ("broken_scale", "clash_first")]
out["conformance"] = ircore.testing.check_provider("zeta", seeds=(0,)).checked

def f(x):
    return ircore.ops.gelu_tanh_and_mul(x) * 2

compiled = torch.compile(f, backend="ircore", fullgraph=True)
torch.testing.assert_close(compiled(x), f(x))
out["lowered"] = {k: dict(v) for k, v in ircore.compile.report().lowered.items()}

# an op the user's script declares after providers loaded: the provider that implements it
# (rejected at first, for an unknown op) is examined again on the next use
@ircore.register_op
def late_scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor

out["late"] = ircore.explain("late_scale", x, 2.0).chosen
print("CALLS" + json.dumps(out))
"""


def test_the_new_op_runs_compiles_and_is_checked_like_any_other(penv):
    # the graph caches off: a graph served from a cache (an earlier run's, in the shared cache
    # directory) never runs the lowering pass, and the report would count it under ``cached``
    no_graph_caches = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
    run = penv.run(["-c", CALLS], {"IRCORE_DISABLE": None, "TORCHINDUCTOR_COMPILE_THREADS": "1", **no_graph_caches})
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.split("CALLS", 1)[1])
    assert out["chosen"] == "zeta" and out["torch_op"] is True and out["undone"] == [False, False]
    assert out["conformance"]["gelu_tanh_and_mul"] > 0 and out["conformance"]["silu_and_mul"] > 0
    assert out["lowered"] == {"gelu_tanh_and_mul": {"zeta": 1}}
    assert out["late"] == "late"


def test_the_cli_tools_see_the_new_op(penv):
    explain = penv.cli("explain", "gelu_tanh_and_mul", "--shape", "4x64", "--json")
    assert explain.returncode == 0, explain.stderr
    assert json.loads(explain.stdout)["chosen"] == "zeta"
    verify = penv.cli("verify", "--provider", "zeta", "--op", "gelu_tanh_and_mul", "--seeds", "1", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["ok"] is True
    bench = penv.cli(
        "bench", "--op", "gelu_tanh_and_mul", "--shape", "4x64", "--rounds", "1", "--round-ms", "1", "--json"
    )
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["order"]["gelu_tanh_and_mul"][-1] in ("native", "zeta")
    # configuration may name the new op: it is validated after op libraries load
    prio = penv.run(
        ["-c", "import ircore; print('PRIO', ircore.get_priority('gelu_tanh_and_mul'))"],
        {"IRCORE_PRIORITY": "gelu_tanh_and_mul=native"},
    )
    assert prio.returncode == 0, prio.stderr
    assert prio.stdout.split("PRIO", 1)[1].strip() == "['native']"
