"""Releases as users install them: ``make dist``'s artifacts, their metadata check, and the wheels
installed (not editable) into a fresh virtual environment with no source tree on the path.

One environment serves every check. It is made without ``--system-site-packages`` and without
copying torch: the wheels' third-party dependencies (torch and its requirements, pluggy,
packaging, ninja; pytest for the plugin check) are linked, one top-level entry at a time, from
this test environment's site-packages into the new one, where they are ordinary installed
distributions. pip then installs the three wheels offline (``--no-index``) and must satisfy
every ``Requires-Dist`` from the wheels themselves or those distributions. This costs seconds
instead of the ~35-60 s of unpacking the 900 MB torch wheel again, needs no network, and
installs exactly the torch this suite tests; nothing of this checkout is linked (the linked
names are computed from the wheels' requirements and checked to exclude ircore's own).
"""

from __future__ import annotations

import email.message
import importlib.util
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
# The plugin check runs pytest inside the new environment.
EXTRA_DISTRIBUTIONS = ("pytest",)


def _load_release():
    spec = importlib.util.spec_from_file_location("ircore_release_tool", REPO / "tools" / "release.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


release = _load_release()


def _is_ours(name: str) -> bool:
    name = canonicalize_name(name)
    return name == "ircore" or name.startswith("ircore-provider-")


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """Installed distributions that ``requirements`` need, transitively (markers evaluated, no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        name = canonicalize_name(req.name)
        if (
            name in seen
            or _is_ours(name)
            or (req.marker is not None and not req.marker.evaluate({"extra": ""}))
        ):
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        todo += dist.requires or []
    return list(seen.values())


def _link_distributions(dists: list[metadata.Distribution], site: Path) -> None:
    """Make each distribution installed in ``site`` by linking its top-level files and folders."""
    for dist in dists:
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in sorted(tops):
            if top == ".." or top.startswith("__editable__") or (site / top).exists():
                continue  # scripts outside site-packages, editable hooks, shared folders already linked
            assert not _is_ours(top.split("-")[0].replace("_", "-")), top
            (site / top).symlink_to(base / top)


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRCORE_", "PYTHON", "VIRTUAL_ENV"))}
    env["IRCORE_CACHE_DIR"] = str(cache)  # a first-use kernel build of its own
    return env


def _egg_infos() -> set[Path]:
    return {p for project in release.projects() for p in project.glob("*.egg-info")}


EGG_INFOS_BEFORE: set[Path] = set()


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    EGG_INFOS_BEFORE.update(_egg_infos())
    release.build(out)
    return out


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> dict:
    """A fresh environment with the three wheels installed; every check below runs in it."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    site = Path(purelib)
    wheels = sorted(dist.glob("*.whl"))
    requirements = [r for w in wheels for r in release.read_wheel(w).metadata.get_all("Requires-Dist") or []]
    _link_distributions(_closure(requirements + list(EXTRA_DISTRIBUTIONS)), site)
    cache = tmp_path_factory.mktemp("cache")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", "--no-cache-dir",
         "--disable-pip-version-check", "--find-links", str(dist),
         "ircore", "ircore-provider-vllm-c", "ircore-provider-triton"],
        capture_output=True, text=True, env=_env(cache),
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    return {
        "root": root,
        "python": python,
        "site": site,
        "cache": cache,
        "cwd": tmp_path_factory.mktemp("work"),
    }


def _run(venv: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in argv],
        cwd=venv["cwd"],
        env=_env(venv["cache"]),
        capture_output=True,
        text=True,
        timeout=600,
    )


# ---------------------------------------------------------------------- the artifacts
@pytest.mark.slow
def test_the_build_leaves_no_metadata_in_the_source_tree(dist):
    """An ircore.egg-info in the repository root would shadow the installed metadata (and its
    entry points) for every process started there."""
    assert _egg_infos() == EGG_INFOS_BEFORE


@pytest.mark.slow
def test_every_project_has_an_sdist_and_a_wheel_that_pass_the_metadata_check(dist):
    names = sorted(p.name for p in dist.iterdir())
    projects = release.projects()
    assert len(projects) >= 3 and {p.name for p in projects} >= {"vllm_c", "triton"}
    assert len([n for n in names if n.endswith(".whl")]) == len(projects)
    assert len([n for n in names if n.endswith(".tar.gz")]) == len(projects)
    assert release.check(dist).problems == []


@pytest.mark.slow
def test_the_vllm_c_wheel_carries_its_sources_and_no_prebuilt_library(dist):
    (wheel,) = dist.glob("ircore_provider_vllm_c-*.whl")
    names = set(release.read_wheel(wheel).names)
    spec = importlib.util.spec_from_file_location("_k", REPO / "providers/vllm_c/ircore_vllm_c/kernels.py")
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    for source in kernels.CPU_SOURCES + kernels.CUDA_SOURCES + kernels.HEADERS:
        assert f"ircore_vllm_c/csrc/{source}" in names
    assert not any(n.endswith((".so", "_aot_build.json")) for n in names)
    assert wheel.name.endswith("-py3-none-any.whl")


def _wheel(tmp_path: Path, name: str = "ircore-provider-x", **fields) -> release.Wheel:
    md = email.message.Message()
    defaults = {
        "Name": name,
        "Version": "1.0",
        "Summary": "s",
        "Requires-Python": ">=3.10",
        "License": "Apache-2.0",
        "Description-Content-Type": "text/markdown",
    }
    for key, value in {**defaults, **fields}.items():
        if value is not None:
            md[key] = value
    md["License-File"] = "LICENSE"
    md["Classifier"] = "Programming Language :: Python :: 3"
    if "Requires-Dist" not in fields:
        md["Requires-Dist"] = "ircore<0.2,>=0.1"
    md.set_payload("# readme")
    path = tmp_path / f"{name.replace('-', '_')}-1.0-py3-none-any.whl"
    names = [f"{name.replace('-', '_')}-1.0.dist-info/licenses/LICENSE", "pkg/__init__.py"]
    return release.Wheel(path, md, names, "[ircore.providers]\nx = pkg\n")


def test_the_metadata_check_names_each_problem(tmp_path):
    from packaging.version import Version

    core = Version("0.1.0")
    assert release.wheel_problems(_wheel(tmp_path), core) == []
    problems = release.wheel_problems(_wheel(tmp_path, **{"Requires-Dist": "ircore>=0.1"}), core)
    assert problems == [
        "ircore_provider_x-1.0-py3-none-any.whl: Requires-Dist ircore>=0.1 needs both a lower and an upper "
        'bound, e.g. Requires-Dist: ircore>=0.1,<0.2 (dependencies = ["ircore>=0.1,<0.2"])'
    ]
    assert (
        "excludes the core built alongside it (ircore 0.1.0)"
        in release.wheel_problems(_wheel(tmp_path, **{"Requires-Dist": "ircore>=0.2,<0.3"}), core)[0]
    )
    assert (
        "no Requires-Dist on ircore"
        in release.wheel_problems(_wheel(tmp_path, **{"Requires-Dist": "ninja"}), core)[0]
    )
    assert "no license" in release.wheel_problems(_wheel(tmp_path, License=None), core)[0]
    assert (
        "no readme" in release.wheel_problems(_wheel(tmp_path, **{"Description-Content-Type": None}), core)[0]
    )
    assert "no Summary" in release.wheel_problems(_wheel(tmp_path, Summary=None), core)[0]
    platform_wheel = _wheel(tmp_path)
    platform_wheel.path = tmp_path / "ircore_provider_x-1.0-cp311-cp311-linux_x86_64.whl"
    platform_wheel.names.append("pkg/_C.so")
    problems = release.wheel_problems(platform_wheel, core)
    assert (
        "not a pure-Python wheel" in problems[0]
        and "compiled files in the wheel: ['pkg/_C.so']" in problems[1]
    )


@pytest.mark.slow
def test_ircore_check_dist_passes_every_artifact(dist):
    """The checks third parties run on their own artifacts (``ircore check-dist``) are the
    release's own, less its pure-Python rule: wheels and sdists alike pass them."""
    from ircore.tools import distcheck

    report = distcheck.check_paths([dist])
    assert report.ok, report.problems
    assert {a.kind for a in report.artifacts} == {"wheel", "sdist"}
    providers = {a.name: a.group(distcheck.PROVIDER_GROUP) for a in report.artifacts if a.kind == "sdist"}
    assert providers["ircore-provider-vllm-c"] == {"vllm_c": "ircore_vllm_c.provider"}


@pytest.mark.slow
def test_the_check_finds_a_missing_project(dist, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    for artifact in dist.iterdir():
        if "triton" not in artifact.name:
            (partial / artifact.name).symlink_to(artifact)
    problems = release.check(partial).problems
    assert any("no wheel of ircore-provider-triton" in p for p in problems)
    assert any("expected one sdist of ircore-provider-triton" in p for p in problems)


# ---------------------------------------------------------------------- the installed wheels
@pytest.mark.slow
def test_installed_from_the_wheels_not_this_checkout(venv):
    run = _run(
        venv,
        venv["python"],
        "-c",
        "import ircore, ircore_vllm_c, ircore_pytest as p; print(ircore.__file__, ircore_vllm_c.__file__, p.__file__)",
    )
    assert run.returncode == 0, run.stderr
    for path in run.stdout.split():
        assert Path(path).is_relative_to(venv["site"]) and not Path(path).resolve().is_relative_to(REPO), path


@pytest.mark.slow
def test_ircore_list_builds_the_kernels_on_first_use_and_shows_the_providers(venv):
    run = _run(venv, venv["root"] / "bin" / "ircore", "list", "--json")
    assert run.returncode == 0, run.stderr
    # the wheel carries sources, so the first use builds the CPU kernels into the cache
    assert re.search(r"ircore_vllm_c_cpu: building CPU kernels for torch \S+ \.\.\. \d+ s", run.stderr), (
        run.stderr
    )
    doc = json.loads(run.stdout)
    providers = {p["name"]: p for p in doc["providers"]}
    assert providers["vllm_c"]["state"] == "active" and providers["vllm_c"]["version"] == "0.1.0"
    assert providers["vllm_c"]["distribution"] == "ircore-provider-vllm-c"
    assert providers["triton"]["state"] == "unavailable" and providers["triton"]["reason"].startswith(
        "no GPU"
    )
    # vllm_c first wherever it implements the op; the ops it has no kernel for (the fp8 quant ops)
    # do not list it, and at least the five norm/activation ops are its
    with_vllm_c = [o for o in doc["ops"] if "vllm_c" in o["priority"]]
    assert all(o["priority"][0] == "vllm_c" for o in with_vllm_c) and len(with_vllm_c) >= 5
    assert any(venv["cache"].glob("ircore_vllm_c_cpu/*/ircore_vllm_c_cpu.so"))


CALLS = """
import json, torch, ircore
from ircore.testing import assert_close_to_reference, check_provider
out = {}
for name, op in sorted(ircore.all_ops().items()):
    args = op.make_inputs((8, 512), torch.bfloat16, "cpu")
    assert_close_to_reference(op, op(*args), args, label="installed wheel")
    out[name] = ircore.explain(op, *args).chosen
report = check_provider("vllm_c", seeds=(0,))
print(json.dumps({"chosen": out, "checked": report.checked}))
"""


@pytest.mark.slow
def test_one_call_per_op_and_the_conformance_kit(venv):
    run = _run(venv, venv["python"], "-c", CALLS)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout.splitlines()[-1])
    norms = ("fused_add_rms_norm", "layer_norm", "rms_norm", "rms_norm_gated", "silu_and_mul")
    gated = ("fatrelu_and_mul", "gelu_and_mul", "mul_and_silu", "swigluoai_and_mul")
    rope = ("fused_qk_norm_rope", "rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb")
    quant = (
        "static_quant_fp8", "static_group_quant_fp8", "dynamic_quant_fp8", "dynamic_group_quant_fp8",
        "rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant", "rms_norm_dynamic_quant_fp8",
        "fused_add_rms_norm_dynamic_quant_fp8", "rms_norm_group_quant_fp8", "fused_add_rms_norm_group_quant_fp8",
        "silu_and_mul_static_quant_fp8", "silu_and_mul_group_quant_fp8",
    )  # fmt: skip
    ops = norms + gated + rope + quant + ("block_scaled_mm_fp8", "scaled_mm_fp8")
    # vllm_c's ops run vllm_c (the fp8 quant ops and matmuls too: its CPU kernels)
    assert doc["chosen"] == {name: "vllm_c" if name in ops else "native" for name in doc["chosen"]}
    assert set(ops) <= set(doc["chosen"])
    # the kit checks exactly these
    assert {name for name, n in doc["checked"].items() if n} == set(ops)
    assert all(doc["checked"][name] > 20 for name in norms)
    # the RoPE ops with fewer samples: rotary_pos_emb and fused_qk_norm_rope have 5 per dtype
    assert all(doc["checked"][name] >= 15 for name in rope)


@pytest.mark.slow
def test_ircore_verify_passes(venv):
    run = _run(venv, venv["root"] / "bin" / "ircore", "verify", "--seeds", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "none failed (" in run.stdout and " cases on cpu)" in run.stdout
    assert "not verified: triton is unavailable" in run.stdout


@pytest.mark.slow
def test_the_pytest_plugin_ships_in_the_core_wheel(venv):
    run = _run(
        venv,
        venv["python"],
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--ircore-provider",
        "vllm_c",
        "-k",
        "seed0 and float32",
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert re.search(r"\b\d{2,} passed", run.stdout), run.stdout[-500:]


def test_release_layout_is_found_generically(tmp_path):
    for name in ("b_prov", "a_prov"):
        (tmp_path / "providers" / name).mkdir(parents=True)
        (tmp_path / "providers" / name / "pyproject.toml").write_text("")
    (tmp_path / "providers" / "not_a_project").mkdir()
    assert release.projects(tmp_path) == [
        tmp_path,
        tmp_path / "providers/a_prov",
        tmp_path / "providers/b_prov",
    ]
