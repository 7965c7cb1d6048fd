"""ircore._build: the first-use C++ build that providers with compiled kernels share.

The tests that run the compiler are marked ``slow``. One real build (a one-op ``TORCH_LIBRARY``)
serves all of them: two processes start it at the same moment into an empty cache, and this
process then loads it warm.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from ircore import _build
from ircore._build import (
    BuildError,
    build_extension,
    cache_root,
    cuda_arch_flags,
    resolve_cuda_home,
    sources_digest,
)
from ircore.errors import IrcoreError

REPO = Path(__file__).resolve().parents[1]
HAS_TOOLS = shutil.which(os.environ.get("CXX") or "c++") is not None and _build._ensure_ninja()
needs_compiler = pytest.mark.skipif(not HAS_TOOLS, reason="needs a C++ compiler and ninja")

TWICE_CPP = """\
#include <ATen/core/Tensor.h>
#include <torch/library.h>
#include "twice.h"

static at::Tensor twice(const at::Tensor& x) { return x.mul(kFactor); }

TORCH_LIBRARY(ircore_test_build, m) { m.def("twice(Tensor x) -> Tensor", &twice); }
"""

# Waits for the go file, so that both processes ask for the build at the same moment.
BUILDER = """\
import sys, time, pathlib
from ircore._build import build_extension
import torch
src, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
pathlib.Path(sys.argv[3]).touch()
while not go.exists():
    time.sleep(0.01)
lib = build_extension("ircore_test_twice", [src / "twice.cpp"], headers=[src / "twice.h"], label="test op")
print(lib)
print(torch.ops.ircore_test_build.twice(torch.ones(3)).tolist())
"""


def _write_twice(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "twice.cpp").write_text(TWICE_CPP)
    (directory / "twice.h").write_text("constexpr double kFactor = 2.0;\n")
    return directory


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IRCORE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ------------------------------------------------------------------------------------ no compiler


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("IRCORE_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.delenv("IRCORE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "ircore"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "ircore"


def test_sources_digest_counts_names_contents_and_flags_not_places_or_order(tmp_path):
    a, b = _write_twice(tmp_path / "a"), _write_twice(tmp_path / "b")
    digest = sources_digest([a / "twice.cpp", a / "twice.h"], flags=["-O3"])
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    assert sources_digest([b / "twice.h", b / "twice.cpp", b / "twice.h"], flags=["-O3"]) == digest
    assert sources_digest([a / "twice.cpp", a / "twice.h"], flags=["-O2"]) != digest
    assert sources_digest([a / "twice.cpp"], flags=["-O3"]) != digest
    (b / "twice.h").write_text("constexpr double kFactor = 3.0;\n")
    assert sources_digest([b / "twice.cpp", b / "twice.h"], flags=["-O3"]) != digest
    (b / "twice.h").rename(b / "other.h")
    (b / "other.h").write_text((a / "twice.h").read_text())
    assert sources_digest([b / "twice.cpp", b / "other.h"], flags=["-O3"]) != digest


def test_cuda_arch_flags():
    assert cuda_arch_flags(["9.0", "10.0a"]) == [
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_100a,code=sm_100a",
    ]
    assert cuda_arch_flags(["8.0+PTX"]) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_80,code=compute_80",
    ]
    with pytest.raises(ValueError, match=r"'sm_90': expected MAJOR\.MINOR"):
        cuda_arch_flags(["sm_90"])


def test_resolve_cuda_home_sees_through_a_wrapper(tmp_path, monkeypatch):
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    (toolkit / "bin" / "nvcc").write_bytes(b"\x7fELF" + b"\0" * 60)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvcc").write_text(f'#!/bin/sh\nexec {toolkit}/bin/nvcc "$@"\n')
    (bindir / "nvcc").chmod(0o755)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(bindir))
    assert resolve_cuda_home() == str(toolkit.resolve())
    monkeypatch.setenv("CUDA_HOME", str(bindir.parent))  # not a toolkit: skipped
    assert resolve_cuda_home() == str(toolkit.resolve())


def test_first_error_line_prefers_the_diagnostic_over_command_lines():
    ninja = (
        "Error building extension 'x': [1/2] c++ -Wno-error=format -c /s/x.cpp -o x.o\n"
        "FAILED: x.o\n"
        "c++ -Wno-error=format -c /s/x.cpp -o x.o\n"
        "/s/x.cpp: In function 'int f()':\n"
        "/s/x.cpp:1:18: error: 'y' was not declared in this scope\n"
        "/s/x.cpp:2:1: error: second\n"
        "ninja: build stopped: subcommand failed.\n"
    )
    assert _build._first_error_line(ninja) == "/s/x.cpp:1:18: error: 'y' was not declared in this scope"
    nvcc = '[1/3] nvcc ...\nFAILED: k.cuda.o\n/s/k.cu(12): error: identifier "q" is undefined\n'
    assert _build._first_error_line(nvcc) == '/s/k.cu(12): error: identifier "q" is undefined'
    link = "x.o: in function `f':\nx.cpp:(.text+0x5): undefined reference to `g()'\ncollect2: error: ld returned 1"
    assert _build._first_error_line(link) == "x.cpp:(.text+0x5): undefined reference to `g()'"
    assert _build._first_error_line("") == "unknown error"


def test_what_cannot_start_is_a_one_line_build_error_and_builds_nothing(tmp_path, cache, monkeypatch):
    src = _write_twice(tmp_path / "src")
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(BuildError) as info:
        build_extension("ircore_test_nocxx", [src / "twice.cpp"])
    assert str(info.value) == "no C++ compiler found (set CXX or install g++)"
    assert isinstance(info.value, IrcoreError) and info.value.log_path is None
    with pytest.raises(BuildError, match=r"^cannot build test op: .*/gone\.h is missing \(a broken install"):
        build_extension("ircore_test_nocxx", [src / "twice.cpp"], headers=[src / "gone.h"], label="test op")
    if not torch.version.cuda:
        with pytest.raises(BuildError, match=r"^cannot build CUDA extension: needs a CUDA build of torch"):
            build_extension("ircore_test_nocuda", [src / "twice.cpp"], cuda=True, cuda_archs=["9.0"])
    assert not cache.exists()


def test_caller_mistakes_are_value_errors(tmp_path):
    src = _write_twice(tmp_path)
    with pytest.raises(ValueError, match="name must be an identifier"):
        build_extension("my-ext", [src / "twice.cpp"])
    with pytest.raises(ValueError, match="no sources"):
        build_extension("my_ext", [])
    with pytest.raises(ValueError, match=r"expected MAJOR\.MINOR"):
        build_extension("my_ext", [src / "twice.cpp"], cuda=True, cuda_archs=["sm_90"])


# ------------------------------------------------------------------------- a compile that fails


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """One failed build (a few seconds: the source includes nothing)."""
    root = tmp_path_factory.mktemp("broken")
    src = root / "broken.cpp"
    src.write_text("int f() {\n  return undefined_name;\n}\n")
    mp = pytest.MonkeyPatch()
    mp.setenv("IRCORE_CACHE_DIR", str(root / "cache"))
    try:
        with pytest.raises(BuildError) as info:
            build_extension("ircore_test_broken", [src], label="broken kernels")
    finally:
        mp.undo()
    return root, src, info.value


@pytest.mark.slow
@needs_compiler
def test_a_compile_error_names_the_first_error_line_and_the_log(broken):
    root, src, error = broken
    message = str(error)
    assert "\n" not in message
    first = f"{src}:2:10: error: \u2018undefined_name\u2019 was not declared in this scope"
    if "\u2018" not in message:  # a compiler that quotes in ASCII
        first = first.replace("\u2018", "'").replace("\u2019", "'")
    assert message == f"broken kernels failed to build: {first}; log at {error.log_path}"
    assert error.log_path.is_file() and error.log_path.parent.parent == root / "cache" / "ircore_test_broken"
    log = error.log_path.read_text()
    assert first in log and "ninja: build stopped" in log
    assert not (error.log_path.parent / "complete").exists()


@pytest.mark.slow
@needs_compiler
def test_a_source_change_builds_in_a_new_directory(broken, monkeypatch):
    root, src, error = broken
    monkeypatch.setenv("IRCORE_CACHE_DIR", str(root / "cache"))
    changed = root / "v2" / src.name
    changed.parent.mkdir()
    changed.write_text(src.read_text().replace("undefined_name", "other_undefined_name"))
    with pytest.raises(BuildError) as info:
        build_extension("ircore_test_broken", [changed], label="broken kernels")
    assert "other_undefined_name" in str(info.value)
    assert info.value.log_path.parent != error.log_path.parent
    assert info.value.log_path.parent.parent == error.log_path.parent.parent


@pytest.mark.slow
@needs_compiler
def test_a_lock_left_by_a_killed_torch_build_is_cleared(broken, monkeypatch):
    """torch's own lock file makes every later build wait forever; the flock makes it safe to remove."""
    root, src, error = broken
    monkeypatch.setenv("IRCORE_CACHE_DIR", str(root / "cache"))
    (error.log_path.parent / "lock").write_text("")
    outcome: list[BaseException] = []

    def again():
        try:
            build_extension("ircore_test_broken", [src], label="broken kernels")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=again, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the build waited on torch's stale lock"
    assert isinstance(outcome[0], BuildError) and outcome[0].log_path == error.log_path


# ------------------------------------------------------------------------- a build that works


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Two processes build the one-op library at once into an empty cache (one cold build)."""
    root = tmp_path_factory.mktemp("twice")
    src = _write_twice(root / "src")
    env = {
        **os.environ,
        "IRCORE_CACHE_DIR": str(root / "cache"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    go = root / "go"
    procs = []
    for i in range(2):
        cmd = [sys.executable, "-c", BUILDER, str(src), str(go), str(root / f"ready{i}")]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    deadline = time.monotonic() + 120
    while not all((root / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        results.append((p.returncode, out, err))
    return root, src, results


@pytest.mark.slow
@needs_compiler
def test_two_processes_build_once_say_so_and_both_load(built):
    root, _src, results = built
    for rc, out, err in results:
        assert rc == 0, err
        assert out.splitlines()[-1] == "[2.0, 2.0, 2.0]"
    (build_dir,) = [p for p in (root / "cache" / "ircore_test_twice").iterdir() if p.is_dir()]
    libs = {out.splitlines()[0] for _, out, _ in results}
    assert libs == {str(build_dir / "ircore_test_twice.so")}
    builder = [err for _, _, err in results if "(first use;" in err]
    waiter = [err for _, _, err in results if "(first use;" not in err]
    assert len(builder) == 1 and len(waiter) == 1
    start = f"ircore_test_twice: building test op for torch {torch.__version__}"
    assert f"{start} (first use; cached in {build_dir}) ..." in builder[0]
    assert re.search(rf"{re.escape(start)} \.\.\. \d+ s$", builder[0], re.MULTILINE)
    assert "ircore_test_twice: waiting for test op (another process is building it) ..." in waiter[0]
    assert (build_dir / "complete").is_file()


@pytest.mark.slow
@needs_compiler
def test_a_warm_load_runs_no_compiler(built, monkeypatch, capfd):
    root, src, _ = built
    from torch.utils import cpp_extension

    def no_compiling(*args, **kwargs):
        raise AssertionError("cpp_extension.load called on a warm cache")

    monkeypatch.setattr(cpp_extension, "load", no_compiling)
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setenv("IRCORE_CACHE_DIR", str(root / "cache"))
    lib = build_extension(
        "ircore_test_twice", [src / "twice.cpp"], headers=[src / "twice.h"], label="test op"
    )
    assert lib.parent.parent == root / "cache" / "ircore_test_twice" and lib.name == "ircore_test_twice.so"
    assert torch.ops.ircore_test_build.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    monkeypatch.setattr(torch.ops, "load_library", no_compiling)  # loaded once per process
    again = build_extension(
        "ircore_test_twice", [src / "twice.cpp"], headers=[src / "twice.h"], label="test op"
    )
    assert again == lib
    assert capfd.readouterr().err == ""
