"""``ircore check-dist``: the metadata checks a provider author runs on their own wheel or sdist.

Artifacts are written by the test (a wheel is a zip, an sdist a tar.gz), each with one mistake;
the release's own artifacts, built for real, pass the same checks in test_release.py.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from ircore import cli
from ircore.tools import distcheck

GOOD_METADATA = {
    "Metadata-Version": "2.4",
    "Name": "ircore-provider-x",
    "Version": "1.0",
    "Summary": "x kernels for ircore",
    "License-Expression": "Apache-2.0",
    "License-File": "LICENSE",
    "Classifier": "Programming Language :: Python :: 3",
    "Requires-Python": ">=3.10",
    "Requires-Dist": "ircore<0.2,>=0.1",
    "Description-Content-Type": "text/markdown",
}
ENTRY_POINTS = "[ircore.providers]\nx = ircore_x\n"
PIN_EXAMPLE = 'e.g. Requires-Dist: ircore>=0.1,<0.2 (dependencies = ["ircore>=0.1,<0.2"])'


def _metadata(**changes: str | None) -> str:
    fields = {**GOOD_METADATA, **changes}
    return "".join(f"{k}: {v}\n" for k, v in fields.items() if v is not None) + "\n# ircore-provider-x\n"


def wheel(folder: Path, entry_points: str = ENTRY_POINTS, **changes: str | None) -> Path:
    path = folder / "ircore_provider_x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("ircore_x/__init__.py", "")
        zf.writestr("ircore_provider_x-1.0.dist-info/METADATA", _metadata(**changes))
        zf.writestr("ircore_provider_x-1.0.dist-info/licenses/LICENSE", "Apache-2.0")
        if entry_points:
            zf.writestr("ircore_provider_x-1.0.dist-info/entry_points.txt", entry_points)
    return path


def sdist(folder: Path, pyproject: str, **changes: str | None) -> Path:
    """An sdist as non-setuptools backends write it: entry points only in its pyproject.toml."""
    path = folder / "ircore_provider_x-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name, text in {"PKG-INFO": _metadata(**changes), "pyproject.toml": pyproject, "LICENSE": "x"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"ircore_provider_x-1.0/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["check-dist", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_good_provider_wheel_passes(tmp_path, capsys):
    path = wheel(tmp_path)
    assert _run(capsys, str(path)) == (0, "ok  ircore_provider_x-1.0-py3-none-any.whl\nall 1 artifact(s) pass\n", "")


@pytest.mark.parametrize(
    "entry_points, changes, problem",
    [
        (
            "[ircore.providers]\nx = ircore_x:provider\n",
            {},
            "[ircore.providers] x = ircore_x:provider: entry point value 'ircore_x:provider' must be a module, "
            "not a module:attribute reference: write 'ircore_x.provider' if 'provider' is a module of 'ircore_x', "
            "else 'ircore_x' (pkg.provider, not pkg.provider:attr); ircore "
            "imports that module and reads its hooks or its IRCORE_IMPLEMENTATIONS table",
        ),
        (
            "[ircore.providers]\nX-Kernels = ircore_x\n",
            {},
            "[ircore.providers] X-Kernels = ircore_x: entry point name 'X-Kernels' is not a valid provider name "
            "(must match ^[a-z][a-z0-9_]*$)",
        ),
        (
            "[ircore.providers]\nnative = ircore_x\n",
            {},
            "[ircore.providers] native = ircore_x: entry point name 'native' is reserved "
            "(reserved: ['native', 'unfused'])",
        ),
        (
            ENTRY_POINTS,
            {"Requires-Dist": "ircore>=0.1"},
            f"Requires-Dist ircore>=0.1 needs both a lower and an upper bound, {PIN_EXAMPLE}",
        ),
        (
            ENTRY_POINTS,
            {"Requires-Dist": "torch"},
            f"no Requires-Dist on ircore: a provider pins the core range it supports, {PIN_EXAMPLE}",
        ),
        (
            "[console_scripts]\nx = ircore_x:main\n",
            {},
            "no entry point in the group 'ircore.providers' (read from entry_points.txt): ircore would never "
            'find it; declare [project.entry-points."ircore.providers"] <name> = "<package.module>"',
        ),
        (ENTRY_POINTS, {"Summary": None}, 'no Summary: set description = "..." in [project]'),
        (ENTRY_POINTS, {"Requires-Python": None}, 'no Requires-Python: set requires-python = ">=3.10" in [project]'),
        (ENTRY_POINTS, {"License-Expression": None}, "no license: set license in [project]"),
        (ENTRY_POINTS, {"License-File": "COPYING"}, "License-File COPYING is not in the wheel"),
        (
            ENTRY_POINTS,
            {"Classifier": "Topic :: Scientific/Engineering"},
            "classifiers lack 'Programming Language :: Python :: 3'",
        ),
    ],
    ids=[
        "ep-attr", "ep-name", "ep-reserved", "unbounded", "no-pin", "no-entry-point", "summary", "requires-python", "license",
        "license-file", "classifiers",
    ],
)
def test_each_problem_names_the_artifact_and_the_field(tmp_path, capsys, entry_points, changes, problem):
    path = wheel(tmp_path, entry_points, **changes)
    code, out, _ = _run(capsys, str(path))
    assert code == 1
    assert out.splitlines() == [
        f"problem: ircore_provider_x-1.0-py3-none-any.whl: {problem}",
        "1 problem(s) in 1 of 1 artifact(s)",
    ]


def test_an_sdist_is_read_from_pkg_info_and_pyproject_and_json_lists_everything(tmp_path, capsys):
    pyproject = '[project]\nname = "ircore-provider-x"\n[project.entry-points."ircore.providers"]\nx = "ircore_x"\n'
    sdist(tmp_path, pyproject, **{"Requires-Dist": "ircore>=0.1,<1"})
    wheel(tmp_path, **{"Requires-Dist": "ircore~=0.1"})  # ~=0.1 is >=0.1,<1: bounded
    code, out, _ = _run(capsys, str(tmp_path), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True
    assert [(a["kind"], a["name"], a["providers"], a["problems"]) for a in doc["artifacts"]] == [
        ("wheel", "ircore-provider-x", {"x": "ircore_x"}, []),
        ("sdist", "ircore-provider-x", {"x": "ircore_x"}, []),
    ]
    sdist(tmp_path, pyproject.replace('"ircore_x"', '"ircore_x:main"'), **{"Requires-Dist": "ircore"})
    code, out, _ = _run(capsys, str(tmp_path / "ircore_provider_x-1.0.tar.gz"), "--json")
    assert code == 1
    assert json.loads(out)["artifacts"][0]["problems"] == [
        "ircore_provider_x-1.0.tar.gz: [ircore.providers] x = ircore_x:main: entry point value 'ircore_x:main' "
        "must be a module, not a module:attribute reference: write 'ircore_x.main' if 'main' is a module of "
        "'ircore_x', else 'ircore_x' (pkg.provider, not "
        "pkg.provider:attr); ircore imports that module and reads its hooks or its IRCORE_IMPLEMENTATIONS table",
        f"ircore_provider_x-1.0.tar.gz: Requires-Dist ircore needs both a lower and an upper bound, {PIN_EXAMPLE}",
    ]


def test_an_op_librarys_attribute_entry_point_is_described_as_an_op_library(tmp_path):
    # an op library's module is imported to declare ops: no hooks, no table to read
    pyproject = '[project]\nname = "ircore-ops-x"\n[project.entry-points."ircore.ops"]\nx = "ircore_ops_x:ops"\n'
    artifact = distcheck.read_artifact(sdist(tmp_path, pyproject, **{"Requires-Dist": "ircore>=0.1,<1"}))
    assert distcheck.entry_point_problems(artifact) == [
        "[ircore.ops] x = ircore_ops_x:ops: entry point value 'ircore_ops_x:ops' must be a module, not a "
        "module:attribute reference: write 'ircore_ops_x.ops' if 'ops' is a module of 'ircore_ops_x', else "
        "'ircore_ops_x' (pkg.provider, not pkg.provider:attr); ircore imports that module and lets its import "
        "declare the ops (ircore.register_op)"
    ]


def test_an_sdist_without_requires_dist_in_pkg_info_is_read_from_its_pyproject(tmp_path):
    pyproject = (
        '[project]\nname = "ircore-provider-x"\ndependencies = ["ircore>=0.1"]\n'
        '[project.entry-points."ircore.providers"]\nx = "ircore_x"\n'
    )
    artifact = distcheck.read_artifact(sdist(tmp_path, pyproject, **{"Requires-Dist": None}))
    assert artifact.requires == ["ircore>=0.1"]
    assert distcheck.artifact_problems(artifact) == [
        f"ircore_provider_x-1.0.tar.gz: Requires-Dist ircore>=0.1 needs both a lower and an upper bound, {PIN_EXAMPLE}"
    ]


def test_paths_that_are_no_artifact_are_usage_errors(tmp_path, capsys):
    assert _run(capsys, str(tmp_path / "nope.whl")) == (
        2, "", f"ircore: error: {tmp_path / 'nope.whl'}: no such file or folder\n"
    )  # fmt: skip
    (tmp_path / "README.md").write_text("")
    assert _run(capsys, str(tmp_path / "README.md"))[2] == (
        f"ircore: error: {tmp_path / 'README.md'}: not a wheel (.whl) or an sdist (.tar.gz)\n"
    )
    assert _run(capsys, str(tmp_path))[2] == (
        f"ircore: error: {tmp_path}: no wheel (.whl) or sdist (.tar.gz) in this folder\n"
    )
    (tmp_path / "broken.whl").write_text("not a zip")
    code, _, err = _run(capsys, str(tmp_path / "broken.whl"))
    assert code == 2 and err.startswith(f"ircore: error: {tmp_path / 'broken.whl'}: cannot read it (BadZipFile: ")


def test_unbounded_core_requirement_is_what_doctor_warns_about():
    find = distcheck.unbounded_core_requirement
    assert find(["torch", "ircore>=0.1"]) == "requires ircore>=0.1 with no upper bound"
    assert find(["torch"]) == "declares no Requires-Dist on ircore"
    assert find(['ircore<0.2; extra == "dev"']) == "declares no Requires-Dist on ircore"  # only in an extra
    assert find(["ircore>=0.1,<0.2"]) is None and find(["ircore~=0.1.0"]) is None and find(["ircore<2"]) is None
    assert distcheck.example_pin("0.1.0") == "ircore>=0.1,<0.2" and distcheck.example_pin("2.3.1") == "ircore>=2.3,<2.4"
