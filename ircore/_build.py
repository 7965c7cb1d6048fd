"""Build a provider's C++/CUDA kernels on first use, once per machine, and load them.

A provider with compiled kernels ships their sources and calls :func:`build_extension` from its
``ircore_check_platform`` hook. The first call on a machine compiles them with
``torch.utils.cpp_extension.load`` into a directory of :func:`cache_root` named by a digest of
everything that changes the binary (sources, headers, flags, CUDA architectures, torch version);
later calls and other processes load the cached library without a compiler. Concurrent
processes build once (an ``flock`` per directory, released by the OS if a builder dies). A build
that cannot run or fails raises :class:`BuildError` with a one-line reason for ``ircore list``;
the compiler's full output stays in a log file whose path the reason gives.

:func:`sources_digest` is the part of the cache key an ahead-of-time build records too (say in a
JSON file beside its ``.so``), so that the provider can tell at run time whether a packaged
build was made from exactly these sources and flags.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Union

import torch

from ircore.errors import IrcoreError

__all__ = [
    "BuildError",
    "build_extension",
    "cache_root",
    "cuda_arch_flags",
    "device_capabilities",
    "resolve_cuda_home",
    "sources_digest",
]

log = logging.getLogger("ircore.build")

StrPath = Union[str, "os.PathLike[str]"]

#: Bumped when this module changes how it builds, so that older cached builds are not reused.
_RECIPE = 1
#: The file whose presence says a build directory holds a finished library (JSON: what was built).
_MARKER = "complete"
_LOG = "build.log"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARCH = re.compile(r"^(\d+)\.(\d+)([a-z]?)(\+PTX)?$")

_lock = threading.RLock()  # one build at a time in this process; the flock covers other processes
_loaded: dict[Path, Path] = {}  # build directory -> library loaded from it by this process


class BuildError(IrcoreError, RuntimeError):
    """A compiled extension could not be built or loaded.

    The message is one line meant to be shown as a provider's reason: what failed, the first
    compiler error line, where the full log is, or what to install or set. ``log_path`` is that
    log (None when nothing was compiled).
    """

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


# ----------------------------------------------------------------------------------------------
# Public API


def build_extension(
    name: str,
    sources: Sequence[StrPath],
    *,
    headers: Sequence[StrPath] = (),
    include_dirs: Sequence[StrPath] = (),
    cflags: Sequence[str] = (),
    ldflags: Sequence[str] = (),
    cuda: bool = False,
    cuda_cflags: Sequence[str] = (),
    cuda_archs: Sequence[str] | None = None,
    label: str | None = None,
) -> Path:
    """Build (first use) or find (cached) a library of torch ops, load it, and return its path.

    The library registers its ops itself (``TORCH_LIBRARY``); after this returns they are in
    ``torch.ops.<namespace>``. Nothing is compiled when this machine already built the same
    inputs, in this process or an earlier one; a cold build prints one line on stderr before and
    one after, since it takes from seconds to minutes.

    Args:
        name: the library's file name (``<name>.so``) and cache subdirectory; an identifier,
            unique to your provider (e.g. ``"ircore_myprov_cpu"``).
        sources: ``.cpp`` (and with ``cuda``, ``.cu``) files to compile.
        headers: files the sources include; they are not compiled but are part of the cache
            key, so that editing one rebuilds.
        include_dirs: ``-I`` directories (torch's own are always there).
        cflags, ldflags: extra host compiler and linker flags.
        cuda: compile ``.cu`` sources with nvcc and link the CUDA runtime; needs a CUDA build
            of torch and a toolkit (:func:`resolve_cuda_home`).
        cuda_cflags: extra nvcc flags (architecture flags are added from ``cuda_archs``).
        cuda_archs: GPU architectures to compile for, like ``["9.0"]`` (``"9.0+PTX"`` adds
            PTX, ``"9.0a"`` the arch-specific features); None: this machine's GPUs
            (:func:`device_capabilities`).
        label: what the messages call it (``"CUDA kernels"``); default ``"C++ extension"`` or
            ``"CUDA extension"``.

    Raises:
        BuildError: no compiler, ninja or CUDA toolkit; a source missing; the compile failed;
            the library does not load. The message is one line (see :class:`BuildError`).
        ValueError: a bad ``name``, no sources, or a malformed architecture.
    """
    if not _NAME.fullmatch(name):
        raise ValueError(f"build_extension: name must be an identifier (letters, digits, _), got {name!r}")
    if not sources:
        raise ValueError(f"build_extension({name!r}): no sources")
    if cuda and cuda_archs is not None:
        cuda_archs = [a.strip() for a in cuda_archs]
        cuda_arch_flags(cuda_archs)  # ValueError for a malformed one
    what = label or ("CUDA extension" if cuda else "C++ extension")
    source_paths = [Path(s).resolve() for s in sources]
    header_paths = [Path(h).resolve() for h in headers]
    for path in (*source_paths, *header_paths):
        if not path.is_file():
            raise BuildError(
                f"cannot build {what}: {path} is missing (a broken install? reinstall the package)"
            )
    archs: list[str] = []
    if cuda:
        if not torch.version.cuda:
            raise BuildError(
                f"cannot build {what}: needs a CUDA build of torch; this is torch {torch.__version__}"
            )
        archs = sorted(set(cuda_archs if cuda_archs is not None else device_capabilities()))
        if not archs:
            raise BuildError(
                f"cannot build {what}: no GPU architecture to build for (no GPU visible; pass cuda_archs)"
            )
    key = {
        "recipe": _RECIPE,
        "name": name,
        "sources": sources_digest([*source_paths, *header_paths]),
        "cflags": list(cflags),
        "ldflags": list(ldflags),
        "cuda": cuda,
        "cuda_cflags": list(cuda_cflags),
        "cuda_archs": archs,
        "torch": torch.__version__,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    build_dir = cache_root() / name / f"{_path_tag(torch.__version__)}-{digest}"

    with _lock:
        if build_dir in _loaded:
            return _loaded[build_dir]
        lib = _cached_library(build_dir, what)
        if lib is not None:
            log.info("loaded cached %s from %s", what, lib)
        else:
            options: dict[str, Any] = {
                "sources": [str(s) for s in source_paths],
                "extra_cflags": list(cflags),
                "extra_ldflags": list(ldflags),
                "extra_include_paths": [str(Path(d).resolve()) for d in include_dirs],
                "with_cuda": cuda,
            }
            if cuda:
                options["extra_cuda_cflags"] = [*cuda_cflags, *cuda_arch_flags(archs)]
            lib = _build(name, what, build_dir, key, options)
        _loaded[build_dir] = lib
        return lib


def cache_root() -> Path:
    """Where first-use builds go: ``$IRCORE_CACHE_DIR``, else ``$XDG_CACHE_HOME/ircore``, else
    ``~/.cache/ircore``. Each build is a directory ``<name>/<torch version>-<digest>`` below it;
    deleting any of them (or all) only costs a rebuild."""
    env = os.environ.get("IRCORE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ircore"


def sources_digest(files: Iterable[StrPath], *, flags: Iterable[str] = ()) -> str:
    """16 hex digits of the files' base names and contents, and of ``flags``.

    Where the files are does not count, and neither do their order and repeats: an
    ahead-of-time build made from an sdist's temporary copy and the installed package give the
    same digest. Record it beside the prebuilt library and compare at run time; a mismatch
    means the library was built from other sources or flags. (:func:`build_extension` keys its
    cache with it too, plus the flags, CUDA architectures and torch version.)
    """
    entries = {(Path(f).name, Path(f).read_bytes()) for f in files}
    h = hashlib.sha256()
    for name, data in sorted(entries):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    h.update(json.dumps(list(flags)).encode())
    return h.hexdigest()[:16]


def resolve_cuda_home() -> str | None:
    """The CUDA toolkit to build with: a directory whose ``bin/nvcc`` is the real compiler.

    Tried in order: ``$CUDA_HOME``, ``$CUDA_PATH``, the ``nvcc`` on PATH, the toolkit matching
    torch's CUDA version in ``/usr/local``, ``/usr/local/cuda``, other ``/usr/local/cuda-*``.
    ``nvcc`` on PATH may be a wrapper script (``exec /usr/local/cuda-13.0/bin/nvcc "$@"``), whose
    directory is not the toolkit (torch's own guess goes wrong there); such scripts are read for
    the path they run. None when no candidate has both ``bin/nvcc`` and ``cuda_runtime.h``.
    """
    candidates: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.environ[var])
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = os.path.realpath(nvcc)
        if _is_elf(real):
            candidates.append(str(Path(real).parent.parent))
        else:
            candidates.extend(_paths_in_script(real))
    cuda_ver = getattr(torch.version, "cuda", None)
    if cuda_ver:
        candidates.append(f"/usr/local/cuda-{cuda_ver}")
    candidates.append("/usr/local/cuda")
    candidates.extend(sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True))
    for home in candidates:
        nvcc_bin = Path(home) / "bin" / "nvcc"
        if nvcc_bin.is_file() and _is_elf(str(nvcc_bin.resolve())):
            if (Path(home) / "include" / "cuda_runtime.h").is_file():
                return str(Path(home).resolve())
    return None


def cuda_arch_flags(archs: Iterable[str]) -> list[str]:
    """nvcc ``-gencode`` flags for architectures like ``["8.0", "9.0"]``: machine code (SASS)
    for each, no PTX unless an entry ends in ``+PTX`` (``"9.0+PTX"``); ``"9.0a"`` selects the
    arch-specific features of sm_90a. ``ValueError`` for anything else (e.g. ``"sm_90"``)."""
    flags = []
    for arch in archs:
        m = _ARCH.match(arch.strip())
        if m is None:
            raise ValueError(
                f"CUDA architecture {arch!r}: expected MAJOR.MINOR like '9.0' (or '9.0a', '9.0+PTX')"
            )
        num = f"{m.group(1)}{m.group(2)}{m.group(3)}"
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if m.group(4):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


def device_capabilities() -> list[str]:
    """The compute capabilities of this machine's CUDA GPUs, like ``["9.0"]``: sorted, each once,
    in the form ``cuda_archs`` takes; empty without a GPU or a CUDA build of torch."""
    try:
        if not torch.version.cuda:
            return []
        n = torch.cuda.device_count()
        return sorted({"{}.{}".format(*torch.cuda.get_device_capability(i)) for i in range(n)})
    except Exception:
        return []


def _first_error_line(text: str) -> str:
    """The line of compiler or linker output that says what went wrong first (at most 300
    characters): a ``file:line: error:`` diagnostic, else an undefined symbol, else any line
    naming an error that is not a ninja command line, else the first line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in _DIAGNOSTICS:
        for ln in lines:
            if pattern.search(ln) and not _COMMAND.match(ln):
                return ln[:300]
    for ln in lines:
        if (
            re.search(r"\berror\b", ln, re.IGNORECASE)
            and not ln.startswith("Error building")
            and not _COMMAND.match(ln)
        ):
            return ln[:300]
    return lines[0][:300] if lines else "unknown error"


# gcc/clang "f.cpp:3:5: error:", nvcc "f.cu(3): error", then linker and loader messages
_DIAGNOSTICS = (
    re.compile(r"(:\d+(:\d+)?: (fatal )?error\b)|(\(\d+\): (catastrophic )?error\b)"),
    re.compile(r"undefined (reference to|symbol)"),
)
_COMMAND = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja:)")


# ----------------------------------------------------------------------------------------------
# Helpers


def _build(name: str, what: str, build_dir: Path, key: dict[str, object], options: dict[str, Any]) -> Path:
    """Compile into ``build_dir`` under its flock (or find that another process just did), load."""
    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx) is None:
        raise BuildError("no C++ compiler found (set CXX or install g++)")
    if not _ensure_ninja():
        raise BuildError(f"cannot build {what}: ninja not found (pip install ninja)")
    from torch.utils import cpp_extension

    if options["with_cuda"]:
        cuda_home = resolve_cuda_home()
        if cuda_home is None:
            raise BuildError(f"cannot build {what}: no CUDA toolkit (nvcc) found; set CUDA_HOME")
        # torch resolved CUDA_HOME when it was imported, from an nvcc on PATH that may be a wrapper
        os.environ["CUDA_HOME"] = cuda_home
        cpp_extension.CUDA_HOME = cuda_home
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(
            f"cannot build {what}: cache dir {build_dir}: {exc.strerror} (set IRCORE_CACHE_DIR)"
        ) from None

    prefix = f"{name}: building {what} for torch {torch.__version__}"
    with _file_lock(build_dir.with_name(build_dir.name + ".lock"), f"{name}: waiting for {what}"):
        lib = _cached_library(build_dir, what)
        if lib is not None:
            log.info("loaded %s from %s, built by another process", what, lib)
            return lib
        with contextlib.suppress(OSError):
            (build_dir / "lock").unlink()  # torch's own lock, left behind by a killed build
        log_path = build_dir / _LOG
        print(f"{prefix} (first use; cached in {build_dir}) ...", file=sys.stderr, flush=True)
        log.info("%s in %s", prefix, build_dir)
        start = time.monotonic()
        try:
            built = cpp_extension.load(
                name=name, build_directory=str(build_dir), is_python_module=False, verbose=False, **options
            )
        except (Exception, SystemExit) as exc:  # a failed build is a reason, not a crash
            with contextlib.suppress(OSError):
                log_path.write_text(f"{type(exc).__name__}: {exc}\n")
            line = _first_error_line(str(exc))
            print(f"{prefix}: FAILED ({line}); log at {log_path}", file=sys.stderr, flush=True)
            if isinstance(exc, OSError):  # compiled and linked, but dlopen refused it
                message = f"{what} was built but does not load: {line}; log at {log_path}"
            else:
                message = f"{what} failed to build: {line}; log at {log_path}"
            raise BuildError(message, log_path) from None
        took = time.monotonic() - start
        lib = Path(str(built))  # <name>.so, or <name>_v1.so if this process built <name> before
        tmp = build_dir / f"{_MARKER}.tmp{os.getpid()}"
        tmp.write_text(json.dumps({"library": lib.name, "seconds": round(took, 1), **key}, indent=1) + "\n")
        os.replace(tmp, build_dir / _MARKER)
        print(f"{prefix} ... {took:.0f} s", file=sys.stderr, flush=True)
        log.info("%s ... %.1f s", prefix, took)
        return lib  # cpp_extension.load has loaded it


def _cached_library(build_dir: Path, what: str) -> Path | None:
    """The finished library in ``build_dir``, loaded; None if there is none yet."""
    try:
        marker = json.loads((build_dir / _MARKER).read_text())
        lib = build_dir / marker["library"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not lib.is_file():
        return None
    try:
        torch.ops.load_library(str(lib))
    except OSError as exc:
        line = _first_error_line(str(exc))
        raise BuildError(
            f"{what}: the cached {lib} does not load: {line}; delete {build_dir} to rebuild"
        ) from None
    return lib


@contextlib.contextmanager
def _file_lock(path: Path, waiting: str) -> Iterator[None]:
    """An flock, released by the OS if this process dies mid-build (unlike torch's baton file).
    Says on stderr when it has to wait for another process's build."""
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{waiting} (another process is building it) ...", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _ensure_ninja() -> bool:
    """Put ninja on PATH (torch runs it by name): PATH itself, the ``ninja`` package, the venv."""
    if shutil.which("ninja"):
        return True
    dirs = [Path(sys.executable).parent]
    try:
        import ninja

        dirs.insert(0, Path(ninja.BIN_DIR))
    except Exception:
        pass
    for d in dirs:
        if (d / "ninja").is_file():
            os.environ["PATH"] = f"{d}{os.pathsep}{os.environ.get('PATH', '')}"
            return True
    return False


def _path_tag(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def _paths_in_script(path: str) -> list[str]:
    """Toolkit directories named by a wrapper script's ``.../bin/nvcc`` paths."""
    try:
        text = Path(path).read_text(errors="replace")[:65536]
    except OSError:
        return []
    return [m.group(1) for m in re.finditer(r"(/[^\s\"'$;:]+)/bin/nvcc\b", text)]
