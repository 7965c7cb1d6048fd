"""ircore ops on DTensor: the sharding rules, their lazy registration, a tensor-parallel model.

The scenarios (tests/distributed_scenarios.py) run in a real process group: two CPU processes
on gloo here; on a CUDA machine also one GPU on nccl (the single-GPU path of the same code):
``python3 -m pytest -q tests/test_distributed.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from .provider_env import REPO

if not dist.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

from . import distributed_scenarios as scenarios

# slow: the ranks are fresh processes (the nccl group has its own passes in gpu_run.sh: session, checks)
GROUPS = [
    pytest.param(("gloo", 2), id="gloo-2cpu", marks=pytest.mark.slow),
    pytest.param(
        ("nccl", 1),
        id="nccl-1gpu",
        marks=[
            pytest.mark.slow,
            pytest.mark.skipif(
                not (torch.cuda.is_available() and dist.is_nccl_available()),
                reason="needs a CUDA GPU and NCCL",
            ),
        ],
    ),
]


@pytest.fixture(scope="module", params=GROUPS)
def outcomes(request, tmp_path_factory) -> list[dict[str, str]]:
    backend, world = request.param
    return scenarios.launch(backend, world, tmp_path_factory.mktemp(backend))


def _check(outcomes: list[dict[str, str]], name: str) -> None:
    """Fail with the first failing rank's traceback; skip if the ranks skipped it."""
    for rank, results in enumerate(outcomes):
        outcome = results.get(name, f"missing: rank {rank} never reached {name}")
        assert outcome == "ok" or outcome.startswith("skip: "), f"rank {rank}, {name}:\n{outcome}"
    if outcomes[0][name].startswith("skip: "):
        pytest.skip(outcomes[0][name][len("skip: "):])


@pytest.mark.parametrize("variant", list(scenarios.VARIANTS))
def test_two_layer_tensor_parallel_block_matches_one_process(outcomes, variant):
    _check(outcomes, f"block_matches_one_process[{variant}]")


def test_each_op_on_replicate_and_every_allowed_shard(outcomes):
    _check(outcomes, "each_op_on_replicate_and_every_allowed_shard")


def test_sharded_last_dim_is_gathered_to_replicate(outcomes):
    _check(outcomes, "sharded_last_dim_is_gathered_to_replicate")


def test_maybe_inplace_on_shards(outcomes):
    _check(outcomes, "maybe_inplace_on_shards")


def test_partial_input_is_reduced_first(outcomes):
    _check(outcomes, "partial_input_is_reduced_first")


def test_bad_input_gets_ircores_error(outcomes):
    _check(outcomes, "bad_input_gets_ircores_error")


def test_ranks_running_different_providers_agree(outcomes):
    _check(outcomes, "ranks_running_different_providers_agree")


def test_every_scenario_has_a_test():
    tested = {"each_op_on_replicate_and_every_allowed_shard", "sharded_last_dim_is_gathered_to_replicate",
              "maybe_inplace_on_shards",
              "partial_input_is_reduced_first", "bad_input_gets_ircores_error",
              "ranks_running_different_providers_agree"}
    tested |= {f"block_matches_one_process[{v}]" for v in scenarios.VARIANTS}
    assert set(scenarios.SCENARIOS) == tested


# ---------------------------------------------------------------------- lazy registration
# One rank, gloo: a DTensor reaching torch.ops.ircore.* directly (not through ircore.ops, so the
# trigger cannot be the eager call) must find the rules, whatever the import order.
_DTENSOR_CALL = """
import tempfile, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
dist.init_process_group("gloo", init_method="file://" + tempfile.mkdtemp() + "/store", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
x, w = torch.randn(6, 64), torch.randn(64)
out = torch.ops.ircore.rms_norm(distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Replicate()]), 1e-6)
torch.testing.assert_close(out.full_tensor(), torch.ops.ircore.rms_norm(x, w, 1e-6))
print("CALLED", out.placements)
dist.destroy_process_group()
"""


def _python(code: str) -> subprocess.CompletedProcess:
    env_code = "import os; os.environ['IRCORE_PROVIDERS'] = 'none'\n"
    return subprocess.run(
        [sys.executable, "-c", env_code + code], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_import_ircore_leaves_dtensor_alone_and_rules_follow_its_import():
    run = _python(
        "import sys, ircore\n"
        "assert 'torch.distributed.tensor' not in sys.modules, 'import ircore imported torch.distributed.tensor'\n"
        "assert 'torch._dynamo' not in sys.modules, 'import ircore imported torch._dynamo'  # it imports the above\n"
        "from torch.distributed.tensor.parallel import parallelize_module  # the package, through a submodule\n"
        "assert not [f for f in sys.meta_path if getattr(f, 'name', '') == 'torch.distributed.tensor'], sys.meta_path\n"
        + _DTENSOR_CALL
    )
    assert "CALLED (Shard(dim=0),)" in run.stdout, run.stderr


@pytest.mark.slow
def test_rules_are_registered_when_ircore_comes_after_dtensor():
    run = _python("import torch.distributed.tensor\nimport ircore\n" + _DTENSOR_CALL)
    assert "CALLED (Shard(dim=0),)" in run.stdout, run.stderr


@pytest.mark.slow
def test_a_failing_registration_warns_and_never_fails_the_users_import():
    run = _python(
        "import logging, ircore, ircore.distributed\n"
        "logging.basicConfig()\n"
        "def boom(): raise RuntimeError('boom')\n"
        "ircore.distributed.register_sharding_rules = boom\n"
        "import torch.distributed.tensor\n"
        "print('IMPORTED')\n"
    )
    assert "IMPORTED" in run.stdout, run.stderr
    assert (
        "ircore.distributed:register_sharding_rules() failed after torch.distributed.tensor was imported "
        "(RuntimeError: boom); ircore ops called with a DTensor will fail"
    ) in run.stderr, run.stderr


# ---------------------------------------------------------------------- docs
def test_docs_show_the_example_model_verbatim():
    example = (REPO / "examples" / "tensor_parallel.py").read_text()
    regions = re.findall(r"# --- README \(begin\)\n(.*?)# --- README \(end\)\n", example, re.S)
    page = (REPO / "docs" / "tensor-parallel.md").read_text()
    assert len(regions) == 2
    for region in regions:
        assert region in page, f"docs/tensor-parallel.md's code differs from examples/tensor_parallel.py:\n{region}"
