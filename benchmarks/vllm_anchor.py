"""vLLM anchor benchmark: vLLM IR dispatch overhead and vllm._C CPU kernel times.

Why: ircore is compared against vLLM IR. This script runs inside the separate
vLLM venv (see benchmarks/setup_vllm_venv.sh) so that vLLM never has to be
importable from the project venv; our own benchmarks call it as a subprocess
with ``--json`` and merge the result.

Run:  .venv-vllm/bin/python benchmarks/vllm_anchor.py [--json] [--only ...]
From the project venv: ``run_in_vllm_venv(["--only", "overhead"])`` -> dict.

Two measurements:

* overhead: ``vllm.ir.ops.rms_norm(x, w, eps)`` with the ``vllm_c`` provider
  selected (a), versus calling that provider's function directly (b);
  overhead = a - b.  Measured both with vLLM's default torch-op wrapping
  (call goes through the torch dispatcher) and with wrapping disabled.
* kernels: ``torch.ops._C.rms_norm`` / ``torch.ops._C.fused_add_rms_norm``
  raw per-call time, for the CPU-kernel comparison.

On CPU, vLLM registers ``vllm_c`` with ``supported=False`` (it is gated on
CUDA-alike/XPU), so priority filtering would silently drop it.  We flip the
impl's ``supported`` flag for the duration of the measurement; the dispatch
path is otherwise untouched (the result says so in ``vllm_c_supported_natively``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator

# vLLM logs to stdout by default; keep stdout clean for --json.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import torch

HIDDEN = 4096
EPS = 1e-6
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

_perf = time.perf_counter_ns


def _log(msg: str) -> None:
    """Progress goes to stderr so stdout can carry JSON."""
    print(f"[vllm_anchor] {msg}", file=sys.stderr, flush=True)


def load_vllm_ir():
    """Import vLLM IR plus the built-in kernel impls (loads vllm._C)."""
    # vllm.kernels.vllm_c calls current_platform.import_kernels(), which loads
    # the right _C variant (AVX512/AVX2) and registers torch.ops._C.*.
    import vllm.kernels.vllm_c  # noqa: F401
    from vllm import ir

    return ir


def _round_ns(fn: Callable[[], object], calls: int) -> float:
    """Mean ns per call over one round of ``calls`` back-to-back calls."""
    t0 = _perf()
    for _ in itertools.repeat(None, calls):
        fn()
    return (_perf() - t0) / calls


def _busy_s() -> tuple[float, float]:
    """(CPU seconds busy on the whole machine, CPU seconds of this process)."""
    with open("/proc/stat") as f:
        v = [int(t) for t in f.readline().split()[1:9]]
    busy = sum(v) - v[3] - v[4]  # minus idle and iowait
    t = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system


def _measured_with_load(fn: Callable[[], object], max_other: float, retries: int):
    """Run ``fn``; retry while other processes used > max_other cores meanwhile.

    Why: this box has 2 cores shared with other work; a busy neighbour turns a
    2-thread OpenMP barrier into a scheduler time slice (ms instead of us).
    Returns (result, other_cores) of the least contended attempt.
    """
    best = None
    for attempt in range(retries + 1):
        w0, (b0, s0) = time.perf_counter(), _busy_s()
        result = fn()
        w1, (b1, s1) = time.perf_counter(), _busy_s()
        other = max(0.0, ((b1 - b0) - (s1 - s0)) / (w1 - w0))
        if best is None or other < best[1]:
            best = (result, other)
        if other <= max_other:
            break
        _log(f"  other processes used {other:.2f} cores; retry {attempt + 1}")
        time.sleep(0.5)
    return best


def _interleaved(
    fns: dict[str, Callable[[], object]],
    rounds: int,
    calls: int,
    warmup: int,
    before_round: Callable[[], None] | None = None,
    scopes: dict[str, Callable[[], contextlib.AbstractContextManager]] | None = None,
) -> dict[str, list[float]]:
    """Time several variants in alternating rounds (rotated order) to cancel drift.

    ``scopes[name]`` (optional) is a context entered around that variant's
    rounds, outside the timed loop (used to disable torch wrapping).
    """
    names = list(fns)
    scopes = scopes or {}
    null = contextlib.nullcontext
    for name in names:
        with scopes.get(name, null)():
            for _ in range(warmup):
                fns[name]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            if before_round is not None:
                before_round()
            with scopes.get(name, null)():
                out[name].append(_round_ns(fns[name], calls))
    return out


@contextlib.contextmanager
def selected_provider(op, provider: str) -> Iterator[tuple[object, bool]]:
    """Make ``provider`` the first-priority impl of ``op`` (native as fallback).

    Yields (impl, natively_supported).  If vLLM marks the impl unsupported on
    this platform (vllm_c on CPU), flip ``supported`` for the scope only.
    """
    impl = op.impls[provider]
    natively = bool(impl.supported)
    impl.supported = True
    try:
        prio = [provider] if provider == "native" else [provider, "native"]
        with op.set_priority(prio):
            yield impl, natively
    finally:
        impl.supported = natively


def _maybe_inference_mode(enabled: bool):
    """vLLM runs forward passes under inference_mode; make that switchable."""
    return torch.inference_mode() if enabled else contextlib.nullcontext()


def measure_overhead(
    tokens: tuple[int, ...] = (1, 16),
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    hidden: int = HIDDEN,
    provider: str = "vllm_c",
    rounds: int = 20,
    calls: int = 2000,
    warmup: int = 500,
    threads: int = 1,
    inference_mode: bool = True,
    max_other: float = 0.25,
    retries: int = 2,
) -> list[dict]:
    """Per-call cost of the vLLM IR eager call vs. the impl called directly.

    Variants (interleaved per round):
      a_wrap   ir.ops.rms_norm(x, w, eps)              default: via torch.ops.vllm_ir
      a_nowrap same, inside ir.enable_torch_wrap(False): straight to dispatch()
      a_scope  ``with op.set_priority(prio): op(x, w, eps)``: a priority block around one call
      b        impl.impl_fn(x, w, eps)                 the provider function itself
    Times are medians over rounds, in ns.  A case is re-run (up to ``retries``)
    when other processes used more than ``max_other`` cores meanwhile.
    """
    ir = load_vllm_ir()
    op = ir.ops.rms_norm
    torch.set_num_threads(threads)
    rows = []
    prio = [provider] if provider == "native" else [provider, "native"]
    with (
        selected_provider(op, provider) as (impl, natively),
        _maybe_inference_mode(inference_mode),
    ):
        for dname, T in itertools.product(dtypes, tokens):
            dt = DTYPES[dname]
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(T, hidden, dtype=dt, generator=gen)
            w = torch.randn(hidden, dtype=dt, generator=gen)
            assert op.dispatch(x, w, EPS) is impl, "provider not selected"
            ref = op.impls["native"].impl_fn(x, w, EPS)
            tol = op.get_tolerance(dt)
            torch.testing.assert_close(op(x, w, EPS), ref, **tol)

            def call(x=x, w=w):
                return op(x, w, EPS)

            def scoped(x=x, w=w):
                with op.set_priority(prio):
                    return op(x, w, EPS)

            fns = {
                "a_wrap": call,
                "a_nowrap": call,
                "a_scope": scoped,
                "b_direct": lambda x=x, w=w, f=impl.impl_fn: f(x, w, EPS),
            }
            scopes = {"a_nowrap": lambda: ir.enable_torch_wrap(False)}
            res, other = _measured_with_load(
                lambda fns=fns, scopes=scopes: _interleaved(fns, rounds, calls, warmup, scopes=scopes),
                max_other,
                retries,
            )
            med = {k: statistics.median(v) for k, v in res.items()}
            paired = [a - b for a, b in zip(res["a_wrap"], res["b_direct"])]
            paired_nw = [a - b for a, b in zip(res["a_nowrap"], res["b_direct"])]
            row = {
                "op": "rms_norm",
                "provider": provider,
                "vllm_c_supported_natively": natively,
                "tokens": T,
                "hidden": hidden,
                "dtype": dname,
                "threads": threads,
                "inference_mode": inference_mode,
                "a_wrap_ns": med["a_wrap"],
                "a_nowrap_ns": med["a_nowrap"],
                "a_scope_ns": med["a_scope"],
                "b_direct_ns": med["b_direct"],
                "overhead_wrap_ns": med["a_wrap"] - med["b_direct"],
                "overhead_nowrap_ns": med["a_nowrap"] - med["b_direct"],
                "overhead_wrap_paired_median_ns": statistics.median(paired),
                "overhead_nowrap_paired_median_ns": statistics.median(paired_nw),
                "rounds": rounds,
                "calls_per_round": calls,
                "other_load_cores": round(other, 3),
                "contended": other > max_other,
            }
            _log(
                f"overhead {dname} T={T}: wrap {row['a_wrap_ns']:.0f} "
                f"nowrap {row['a_nowrap_ns']:.0f} direct {row['b_direct_ns']:.0f} ns"
            )
            rows.append(row)
    return rows


def _kernel_case(op_name: str, T: int, hidden: int, dt: torch.dtype):
    """Build (call, restore, bytes_moved) for one raw _C kernel case."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, hidden, dtype=dt, generator=gen)
    w = torch.randn(hidden, dtype=dt, generator=gen)
    esize = x.element_size()
    if op_name == "rms_norm":
        out = torch.empty_like(x)
        kern = torch.ops._C.rms_norm

        def call():
            kern(out, x, w, EPS)

        return call, None, (2 * T * hidden + hidden) * esize
    res = torch.randn(T, hidden, dtype=dt, generator=gen)
    x0, res0 = x.clone(), res.clone()
    kern = torch.ops._C.fused_add_rms_norm

    def call():
        kern(x, res, w, EPS)

    def restore():
        # In place: residual accumulates each call; reset between rounds
        # (outside the timed region) so values stay in a sane range.
        x.copy_(x0)
        res.copy_(res0)

    return call, restore, (4 * T * hidden + hidden) * esize


def _calibrated_rounds(call, restore, rounds, target_round_ms, max_calls):
    """Pick calls/round so a round lasts ~target_round_ms, then time rounds."""
    for _ in range(3):
        call()
    est = min(_round_ns(call, 3) for _ in range(3))
    calls = max(1, min(max_calls, int(target_round_ms * 1e6 / est)))
    res = _interleaved({"k": call}, rounds, calls, max(1, calls // 4), restore)
    return res["k"], calls


def measure_kernels(
    tokens: tuple[int, ...] = (1, 16, 256, 4096),
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    threads: tuple[int, ...] = (1, 2),
    ops: tuple[str, ...] = ("rms_norm", "fused_add_rms_norm"),
    hidden: int = HIDDEN,
    rounds: int = 15,
    target_round_ms: float = 30.0,
    max_calls: int = 2000,
    inference_mode: bool = True,
    max_other: float = 0.25,
    retries: int = 2,
) -> list[dict]:
    """Median per-call time of the raw vllm._C CPU kernels.

    Calls per round are calibrated so a round lasts ~target_round_ms (capped
    at max_calls); fused_add_rms_norm buffers are restored before each round.
    Cases disturbed by other processes are re-run (see measure_overhead).
    """
    load_vllm_ir()
    rows = []
    with _maybe_inference_mode(inference_mode):
        for nt, op_name, dname, T in itertools.product(threads, ops, dtypes, tokens):
            torch.set_num_threads(nt)
            call, restore, nbytes = _kernel_case(op_name, T, hidden, DTYPES[dname])
            (res, calls), other = _measured_with_load(
                lambda c=call, r=restore: _calibrated_rounds(c, r, rounds, target_round_ms, max_calls),
                max_other,
                retries,
            )
            med = statistics.median(res)
            row = {
                "op": op_name,
                "impl": f"torch.ops._C.{op_name}",
                "tokens": T,
                "hidden": hidden,
                "dtype": dname,
                "threads": nt,
                "inference_mode": inference_mode,
                "median_ns": med,
                "min_ns": min(res),
                "gbps": nbytes / med,
                "rounds": rounds,
                "calls_per_round": calls,
                "other_load_cores": round(other, 3),
                "contended": other > max_other,
            }
            _log(f"kernel {op_name} {dname} T={T} thr={nt}: {med / 1e3:.2f} us")
            rows.append(row)
    return rows


def environment() -> dict:
    """Versions and host facts that the figures depend on."""
    import vllm

    cpu = platform.processor()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "vllm": vllm.__version__,
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()),
        "timer": "time.perf_counter_ns, median of per-round means",
        "loadavg_at_start": os.getloadavg(),
    }


def run_in_vllm_venv(args: list[str] | tuple[str, ...] = (), venv: str | None = None) -> dict:
    """Run this script under the vLLM venv's python and return its JSON.

    For ircore's own benchmarks, which run in the project venv (no vLLM
    there): ``from benchmarks.vllm_anchor import run_in_vllm_venv``.
    Importing this module needs only torch; vLLM is imported lazily.
    """
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    venv_dir = Path(venv or os.environ.get("VLLM_VENV", ".venv-vllm"))
    if not venv_dir.is_absolute():
        venv_dir = root / venv_dir
    py = venv_dir / "bin" / "python"
    if not py.exists():
        raise FileNotFoundError(f"{py} missing: run bash benchmarks/setup_vllm_venv.sh")
    proc = subprocess.run(
        [str(py), str(Path(__file__).resolve()), "--json", *args],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(proc.stdout)


def _table(result: dict) -> str:
    """Readable text version of the JSON result."""
    lines = []
    if result.get("overhead"):
        lines.append("vLLM IR rms_norm, provider selected, per call (us):")
        lines.append(
            f"{'dtype':5} {'T':>5} {'a_wrap':>8} {'a_nowrap':>9} {'b_direct':>9}"
            f" {'ovh_wrap':>9} {'ovh_nowrap':>11}"
        )
        for r in result["overhead"]:
            lines.append(
                f"{r['dtype']:5} {r['tokens']:>5} {r['a_wrap_ns'] / 1e3:8.2f}"
                f" {r['a_nowrap_ns'] / 1e3:9.2f} {r['b_direct_ns'] / 1e3:9.2f}"
                f" {r['overhead_wrap_ns'] / 1e3:9.2f}"
                f" {r['overhead_nowrap_ns'] / 1e3:11.2f}" + ("  *contended" if r["contended"] else "")
            )
        r0 = result["overhead"][0]
        lines.append(
            f"(provider={r0['provider']}, supported natively on this platform: "
            f"{r0['vllm_c_supported_natively']})"
        )
    if result.get("kernels"):
        lines.append("")
        lines.append("raw vllm._C kernels, median per call (us) [GB/s]:")
        for r in result["kernels"]:
            lines.append(
                f"{r['op']:19} {r['dtype']:5} T={r['tokens']:<5} thr={r['threads']}"
                f" {r['median_ns'] / 1e3:10.2f} [{r['gbps']:6.1f}]"
                + ("  *contended" if r["contended"] else "")
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run the selected parts, print JSON or a table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="JSON on stdout")
    p.add_argument("--only", choices=["overhead", "kernels"], default=None)
    p.add_argument("--provider", default="vllm_c", help="IR provider for (a)/(b)")
    p.add_argument("--rounds", type=int, default=20, help="overhead rounds")
    p.add_argument("--calls", type=int, default=2000, help="overhead calls/round")
    p.add_argument(
        "--no-inference-mode",
        action="store_true",
        help="time outside torch.inference_mode (vLLM itself runs inside it)",
    )
    p.add_argument("--quick", action="store_true", help="few reps, smoke test")
    a = p.parse_args(argv)
    im = not a.no_inference_mode
    rounds, calls = (3, 200) if a.quick else (a.rounds, a.calls)
    t0 = time.perf_counter()
    result: dict = {"env": environment()}
    if a.only in (None, "overhead"):
        result["overhead"] = measure_overhead(
            provider=a.provider, rounds=rounds, calls=calls, inference_mode=im
        )
    if a.only in (None, "kernels"):
        kw = {"rounds": 3, "target_round_ms": 2.0} if a.quick else {}
        result["kernels"] = measure_kernels(inference_mode=im, **kw)
    result["elapsed_s"] = round(time.perf_counter() - t0, 2)
    if a.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print(_table(result))
        print(f"elapsed {result['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
