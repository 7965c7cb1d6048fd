"""The minimal provider in docs/writing-a-provider.md works when copied as the guide says.

The two files are taken from the guide's code blocks, installed with pip as a real distribution
and listed by ``ircore list --json``; without an NVIDIA GPU its platform check must say why it is
unavailable (with one, it is active), and on a simulated NVIDIA GPU its implementation must be
registered and run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from .provider_env import REPO, ProviderEnv

pytestmark = pytest.mark.slow  # pip-installs the guide's provider, runs fresh interpreters

GUIDE = REPO / "docs" / "writing-a-provider.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.S)


def test_guide_provider_installs_and_reports(tmp_path):
    project = tmp_path / "ircore-provider-myprov"
    package = project / "ircore_myprov"
    package.mkdir(parents=True)
    (project / "pyproject.toml").write_text(_blocks("toml")[0])
    (package / "__init__.py").write_text("")
    (package / "provider.py").write_text(_blocks("python")[0])
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-compile", "--target", str(site), str(project)],
        check=True,
    )
    penv = ProviderEnv(site, tmp_path)
    run = penv.cli("list", "--json")
    assert run.returncode == 0, run.stderr
    record = next(p for p in json.loads(run.stdout)["providers"] if p["name"] == "myprov")
    assert record["distribution"] == "ircore-provider-myprov"
    if torch.cuda.is_available() and torch.version.hip is None:  # e.g. the H200 machine
        assert record["state"] == "active", record
    else:
        assert record["state"] == "unavailable"
        assert record["reason"].startswith("needs an NVIDIA GPU; found CPU (")
    # on a simulated NVIDIA GPU (the public testing hook), with its predicate accepting CPU
    # tensors, the same module registers from its table and serves calls
    code = (
        "import dataclasses, torch, ircore, ircore.testing, ircore_myprov.provider as p\n"
        "row = p.IRCORE_IMPLEMENTATIONS['rms_norm']\n"
        "p.IRCORE_IMPLEMENTATIONS['rms_norm'] = dataclasses.replace(\n"
        "    row, supports_args=lambda x, weight, epsilon, variance_size: True)\n"
        "from ircore.providers._manager import MANAGER\n"
        "with ircore.testing.simulated_platform(kind='cuda', capability=(9, 0)):\n"
        "    MANAGER.ensure_loaded()\n"
        "    x, w = torch.randn(2, 8), torch.randn(8)\n"
        "    print('OUT', MANAGER.records['myprov'].state, ircore.get_priority('rms_norm'),"
        " ircore.explain('rms_norm', x, w, 1e-6).chosen)\n"
    )
    run = penv.run(["-c", code])
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("OUT", 1)[1].split() == ["active", "['myprov',", "'native']", "myprov"]
