"""Find, build and load the compiled kernels; never raise, say why in one line instead.

Order: an ahead-of-time build shipped in the package (``_C.so``, ``_C_cuda.so`` plus
``_aot_build.json``) when it was built for exactly this torch and these sources; otherwise a
build on first use with ``torch.utils.cpp_extension.load`` into
``$IRCORE_CACHE_DIR/vllm_c/<torch-version>-<hash>/`` (``~/.cache/ircore`` by default), reused by
later processes. The CPU library defines the ops and is always loaded; the CUDA library adds
CUDA kernels and is loaded only on an NVIDIA GPU machine.
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
from collections.abc import Iterator
from pathlib import Path

import torch

__all__ = [
    "cache_root",
    "cpu_loaded",
    "cuda_loaded",
    "load_kernels",
    "resolve_cuda_home",
    "set_pdl",
]

log = logging.getLogger("ircore.vllm_c")

PACKAGE_DIR = Path(__file__).resolve().parent
CSRC_DIR = PACKAGE_DIR / "csrc"
CPU_SOURCES = ("cpu_ops.cpp", "cpu_kernels.cpp", "checks.cpp")
CUDA_SOURCES = ("cuda_ops.cu", "checks.cpp")
HEADERS = ("cpu_kernels.h", "cpu_kernels_isa.inc", "cpu_avx512.inc", "ops_common.h")
CPU_CFLAGS = ("-O3", "-fopenmp", "-fno-math-errno", "-Wno-unused-parameter")
CPU_LDFLAGS = ("-fopenmp",)
CUDA_CFLAGS = ("-O3", "-DNDEBUG")
AOT_META = "_aot_build.json"
NAMESPACE = "ircore_vllm_c"

_lock = threading.RLock()
_results: dict[str, str | None] = {}  # "cpu" / "cuda" -> None (loaded) or the reason
_fakes_registered = False


# ----------------------------------------------------------------------------------------------
# Public API


def load_kernels(cuda: bool | None = None) -> str | None:
    """Load the CPU kernels, and the CUDA ones on an NVIDIA GPU machine (``cuda=None``: detect).

    Returns None when everything asked for is loaded, else a one-line reason. Safe to call
    often: the outcome is cached per process.
    """
    if cuda is None:
        cuda = _is_nvidia()
    with _lock:
        reason = _load_once("cpu")
        if reason is None and cuda:
            reason = _load_once("cuda")
        return reason


# Whether each library is loaded: read by the predicates on every eager call, so plain globals.
CPU_LOADED = False
CUDA_LOADED = False


def cpu_loaded() -> bool:
    """Whether the CPU kernels are loaded (the ops exist)."""
    return CPU_LOADED


def cuda_loaded() -> bool:
    """Whether the CUDA kernels are loaded."""
    return CUDA_LOADED


def set_pdl(enabled: bool | None, device: int | None = None) -> bool:
    """Turn programmatic dependent launch off (``False``) or back on where the GPU has it
    (``True``); ``None``: as ``IRCORE_VLLM_C_PDL`` says. Returns whether launches on ``device``
    (default: the current CUDA device) now use it. The same shape as the triton provider's
    ``kernels.set_pdl``, for A/B runs and ``ircore.testing.assert_pdl_chain_matches``; needs the
    CUDA kernels loaded (``torch.ops.ircore_vllm_c._cuda_set_pdl``)."""
    mode = -1 if enabled is None else int(bool(enabled))
    dev = torch.cuda.current_device() if device is None else device
    return bool(torch.ops.ircore_vllm_c._cuda_set_pdl(mode, dev))


def cache_root() -> Path:
    """Where first-use builds go: ``$IRCORE_CACHE_DIR`` or ``$XDG_CACHE_HOME/ircore``."""
    env = os.environ.get("IRCORE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ircore"


def resolve_cuda_home() -> str | None:
    """The CUDA toolkit to build with: a directory whose ``bin/nvcc`` is the real compiler.

    ``nvcc`` on PATH may be a wrapper script (``exec /usr/local/cuda-13.0/bin/nvcc "$@"``), so
    its directory is not the toolkit; such scripts are read for the path they run.
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


# ----------------------------------------------------------------------------------------------
# Loading


def _load_once(kind: str) -> str | None:
    if kind in _results:
        return _results[kind]
    try:
        reason = _load(kind)
    except Exception as exc:  # never let a broken build or environment escape
        reason = f"{kind.upper()} kernels failed to load: {type(exc).__name__}: {_first_line(exc)}"
    if reason is None:
        try:
            _register_fakes()
        except Exception as exc:  # e.g. another copy registered them already
            log.info("ircore_vllm_c: fake kernels not registered: %s", _first_line(exc))
        log.debug("ircore_vllm_c %s kernels loaded", kind)
    else:
        log.warning("ircore_vllm_c: %s", reason)
    _results[kind] = reason
    global CPU_LOADED, CUDA_LOADED
    CPU_LOADED = _results.get("cpu", "") is None
    CUDA_LOADED = _results.get("cuda", "") is None
    return reason


def _load(kind: str) -> str | None:
    if kind == "cuda":
        if not _is_nvidia():
            return "CUDA kernels need an NVIDIA GPU and a CUDA build of torch"
        if _ops_present("CUDA"):
            return None
    elif _ops_present("CPU"):
        return None
    aot = _aot_library(kind)
    if aot is not None:
        torch.ops.load_library(str(aot))
        log.info("loaded ahead-of-time %s kernels from %s", kind, aot)
        return None
    return _jit(kind)


def _ops_present(dispatch_key: str) -> bool:
    """Whether another copy already registered our ops (e.g. loaded by hand)."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"{NAMESPACE}::rms_norm", dispatch_key))
    except Exception:
        return False


def _aot_library(kind: str) -> Path | None:
    """The packaged build, if it matches this torch, these sources and this GPU."""
    if os.environ.get("IRCORE_VLLM_C_FORCE_JIT"):
        return None
    lib = PACKAGE_DIR / ("_C.so" if kind == "cpu" else "_C_cuda.so")
    meta_path = PACKAGE_DIR / AOT_META
    if not lib.is_file() or not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    why = None
    if meta.get("torch") != torch.__version__:
        why = f"built for torch {meta.get('torch')}, running {torch.__version__}"
    elif meta.get("sources") != source_hash():
        why = "sources changed since the build"
    elif kind == "cuda":
        archs = set(meta.get("cuda_archs") or [])
        need = {f"{major}.{minor}" for major, minor in _device_capabilities()}
        if not need <= archs:
            why = f"built for sm {sorted(archs)}, this GPU needs {sorted(need)}"
    if why:
        log.info("not using the packaged %s kernels (%s): building instead", kind, why)
        return None
    return lib


def _register_fakes() -> None:
    """Fakes of the ``_out`` variants, so torch.compile can trace calls to them (the ops ircore
    calls get the op's fake from ircore)."""
    global _fakes_registered
    if _fakes_registered:
        return
    _fakes_registered = True

    @torch.library.register_fake(f"{NAMESPACE}::rms_norm_out")
    def _rms_norm_out_fake(out, x, weight, epsilon, variance_size=None):
        return None

    @torch.library.register_fake(f"{NAMESPACE}::silu_and_mul_out")
    def _silu_out_fake(out, x):
        return None


# ----------------------------------------------------------------------------------------------
# Building on first use


def source_hash() -> str:
    """Hash of every source file and the flags: a change means a rebuild."""
    h = hashlib.sha256()
    for name in sorted(CPU_SOURCES + CUDA_SOURCES + HEADERS):
        h.update(name.encode())
        h.update((CSRC_DIR / name).read_bytes())
    h.update(repr((CPU_CFLAGS, CPU_LDFLAGS, CUDA_CFLAGS)).encode())
    return h.hexdigest()[:16]


def cuda_arch_flags(archs: list[str]) -> list[str]:
    """``-gencode`` flags for capabilities like ``["9.0"]`` (SASS for each, no PTX)."""
    flags = []
    for arch in archs:
        num = arch.replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
    return flags


def _cuda_archs() -> list[str]:
    env = os.environ.get("IRCORE_VLLM_C_CUDA_ARCH")
    if env:
        return [a.strip() for a in re.split(r"[;, ]+", env) if a.strip()]
    return sorted({f"{major}.{minor}" for major, minor in _device_capabilities()})


def _jit(kind: str) -> str | None:
    label = kind.upper()
    key = [kind, source_hash(), torch.__version__]
    if kind == "cuda":
        archs = _cuda_archs()
        if not archs:
            return "CUDA kernels: no GPU architecture to build for"
        key += archs
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    tag = re.sub(r"[^A-Za-z0-9._-]", "_", torch.__version__)
    build_dir = cache_root() / "vllm_c" / f"{tag}-{digest}" / kind
    name = f"ircore_vllm_c_{kind}"
    lib = build_dir / f"{name}.so"
    done = build_dir / "complete"
    if done.is_file() and lib.is_file():  # built by an earlier process: no compiler needed
        torch.ops.load_library(str(lib))
        log.info("loaded cached %s kernels from %s", kind, lib)
        return None

    cxx = os.environ.get("CXX") or "c++"
    if shutil.which(cxx) is None:
        return "no C++ compiler found (set CXX or install g++)"
    if not _ensure_ninja():
        return f"cannot build the {label} kernels: ninja not found (pip install ninja)"
    from torch.utils import cpp_extension

    options: dict[str, object] = {}
    if kind == "cuda":
        cuda_home = resolve_cuda_home()
        if cuda_home is None:
            return "CUDA kernels need the CUDA toolkit (nvcc): set CUDA_HOME"
        os.environ["CUDA_HOME"] = cuda_home
        cpp_extension.CUDA_HOME = cuda_home  # torch reads it at import; a wrapper nvcc fools it
        options["extra_cuda_cflags"] = [*CUDA_CFLAGS, *cuda_arch_flags(key[3:])]
        sources = [str(CSRC_DIR / s) for s in CUDA_SOURCES]
    else:
        options["extra_cflags"] = list(CPU_CFLAGS)
        options["extra_ldflags"] = list(CPU_LDFLAGS)
        sources = [str(CSRC_DIR / s) for s in CPU_SOURCES]
    log_path = build_dir / "build.log"
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot build the {label} kernels: cache dir {build_dir}: {exc.strerror}"

    with _file_lock(build_dir.parent / f"{kind}.lock"):
        if done.is_file() and lib.is_file():  # another process built it while we waited
            torch.ops.load_library(str(lib))
            return None
        with contextlib.suppress(OSError):
            (build_dir / "lock").unlink()  # torch's own lock, left behind by a killed build
        msg = f"ircore_vllm_c: building {label} kernels for torch {torch.__version__}"
        print(f"{msg} (first use; cached in {build_dir}) ...", file=sys.stderr, flush=True)
        log.info("%s in %s", msg, build_dir)
        start = time.monotonic()
        try:
            cpp_extension.load(
                name=name,
                sources=sources,
                extra_include_paths=[str(CSRC_DIR)],
                build_directory=str(build_dir),
                is_python_module=False,
                verbose=False,
                **options,
            )
        except (Exception, SystemExit) as exc:  # a failed build is a reason, not a crash
            text = str(exc)
            with contextlib.suppress(OSError):
                log_path.write_text(text)
            line = _first_error_line(text)
            print(f"{msg}: FAILED ({line})", file=sys.stderr, flush=True)
            return f"{label} kernels failed to build: {line}; log at {log_path}"
        took = time.monotonic() - start
        done.write_text(json.dumps({"torch": torch.__version__, "key": key}))
        print(f"{msg} ... {took:.0f} s", file=sys.stderr, flush=True)
        log.info("%s ... %.0f s", msg, took)
        return None  # cpp_extension.load has loaded it


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An flock, released by the OS if this process dies mid-build (unlike torch's baton)."""
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _ensure_ninja() -> bool:
    if shutil.which("ninja"):
        return True
    dirs = [Path(sys.executable).parent]
    try:
        import ninja  # type: ignore[import-not-found]

        dirs.insert(0, Path(ninja.BIN_DIR))
    except Exception:
        pass
    for d in dirs:
        if (d / "ninja").is_file():
            os.environ["PATH"] = f"{d}{os.pathsep}{os.environ.get('PATH', '')}"
            return True
    return False


# ----------------------------------------------------------------------------------------------
# Helpers


def _is_nvidia() -> bool:
    try:
        return bool(
            torch.version.cuda and not getattr(torch.version, "hip", None) and torch.cuda.is_available()
        )
    except Exception:
        return False


def _device_capabilities() -> list[tuple[int, int]]:
    try:
        n = torch.cuda.device_count()
        return [torch.cuda.get_device_capability(i) for i in range(n)]
    except Exception:
        return []


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
    homes = []
    for m in re.finditer(r"(/[^\s\"'$;:]+)/bin/nvcc\b", text):
        homes.append(m.group(1))
    return homes


def _nvcc_version(cuda_home: str) -> str:
    version_json = Path(cuda_home) / "version.json"
    try:
        return json.loads(version_json.read_text())["cuda"]["version"]
    except Exception:
        return "?"


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def _first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if re.search(r"\berror\b", ln, re.IGNORECASE) and not ln.startswith("Error building"):
            return ln[:300]
    return lines[0][:300] if lines else "unknown error"
