"""Per-call cost of ircore's eager dispatch, side by side with vLLM IR's, and the import cost.

Why: dispatch runs on every eager call of every layer; it must cost next to nothing compared
with the kernel it picks. For each case we time (a) ``ircore.ops.rms_norm(x, w, eps)`` and (b) the
chosen implementation's function called directly, interleaved in rounds on one thread; the
overhead is median(a) - median(b). The same measurement of vLLM IR runs in its own venv
(benchmarks/setup_vllm_venv.sh) as a subprocess of this run, and the two are reported together.

Also the cost of a ``with ircore.priority(...)`` block around one call, next to vLLM IR's
``op.set_priority`` block (:func:`measure_scopes`).

Run: ``.venv/bin/python benchmarks/dispatch_overhead.py [--json PATH] [--quick] [--no-vllm] [--grad-mode]
[--stub] [--import-against CHECKOUT]``; ``--stub --no-vllm --no-import`` gives ircore's own cost
as an A/B figure that holds on a busy machine (see :func:`measure_stub`); ``--import-against``
times the import of another checkout alternately with this one (see :func:`measure_import`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _round_ns(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls


def interleaved_medians(
    fns: dict[str, Callable[[], object]],
    rounds: int,
    calls: int,
    reduce: Callable[[list[float]], float] = statistics.median,
) -> dict[str, float]:
    """Median (or ``reduce``) per-call ns of each function, in interleaved rounds to cancel drift."""
    for fn in fns.values():
        _round_ns(fn, max(calls // 10, 10))
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(_round_ns(fn, calls))
    return {k: reduce(v) for k, v in samples.items()}


def register_stub(op: Any) -> Callable[..., Any]:
    """Register provider ``bench_stub`` for ``op`` (rms_norm): returns x, with an accepting
    ``supports_args``, both declared ``cache_by_signature``. Returns the stub."""

    def stub(x, weight, epsilon, variance_size=None):  # type: ignore[no-untyped-def]
        return x

    stub.__annotations__ = dict(op.native.__annotations__)  # the native schema, as every impl's

    def accept(x, weight, epsilon, variance_size):  # type: ignore[no-untyped-def]
        return True

    op.register_impl("bench_stub", stub, supports_args=accept, cache_by_signature=True)
    return stub


def measure_stub(rounds: int, calls: int, grad_mode: bool = False) -> list[dict[str, Any]]:
    """ircore's own cost, with a stub implementation (returns x) that a provider registered with
    ``cache_by_signature=True`` and a predicate: eager call minus the stub called directly,
    *minimum* over many short rounds. No kernel time to drift and preemption only ever adds time,
    so this A/B figure holds on a busy machine, where the medians of the rows above do not."""
    import contextlib

    import torch

    import ircore

    torch.set_num_threads(1)
    op = ircore.ops.rms_norm
    stub = register_stub(op)
    ircore.set_priority(rms_norm=["bench_stub"])
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        x, w = torch.randn(16, 4096, dtype=dtype), torch.randn(4096, dtype=dtype)
        fns = {"eager": lambda x=x, w=w: op(x, w, 1e-6), "direct": lambda x=x, w=w: stub(x, w, 1e-6, None)}
        with contextlib.nullcontext() if grad_mode else torch.inference_mode():
            assert ircore.explain(op, x, w, 1e-6).chosen == "bench_stub"
            best = interleaved_medians(fns, rounds * 10, max(calls // 25, 20), reduce=min)
        rows.append(
            {
                "impl": "stub (min)",
                "dtype": str(dtype).replace("torch.", ""),
                "T": 16,
                "eager_us": best["eager"] / 1e3,
                "direct_us": best["direct"] / 1e3,
                "kernel_us": best["direct"] / 1e3,
                "overhead_us": (best["eager"] - best["direct"]) / 1e3,
            }
        )
        _log(f"ircore stub {rows[-1]['dtype']}: overhead {rows[-1]['overhead_us']:.3f} us (min)")
    ircore.set_priority(rms_norm=None)
    op.unregister_impl("bench_stub")
    return rows


def measure_ircore(
    rounds: int, calls: int, grad_mode: bool = False, reduce: Callable[[list[float]], float] = statistics.median
) -> list[dict[str, Any]]:
    """ircore's eager call vs its chosen implementation called directly, per provider/dtype/T.

    Under ``torch.inference_mode()``, as engines run; ``grad_mode`` measures with grad mode on
    instead (tensors that do not require grad: the providers' kernels still run).
    """
    import contextlib

    import torch

    import ircore

    torch.set_num_threads(1)
    op = ircore.ops.rms_norm
    ircore.get_priority("rms_norm")  # discovery and provider loading happen here, not in rounds
    rows = []
    providers = [p for p in ("vllm_c",) if p in op.impls] + ["native"]
    for provider in providers:
        ircore.set_priority(rms_norm=[provider])  # the process-wide path, as an engine runs it
        for dtype in (torch.float32, torch.bfloat16):
            for tokens in (1, 16):
                x = torch.randn(tokens, 4096, dtype=dtype)
                w = torch.randn(4096, dtype=dtype)
                impl = op.native if provider == "native" else op.impls[provider].fn
                fns = {
                    "eager": lambda x=x, w=w: op(x, w, 1e-6),
                    "direct": lambda x=x, w=w, impl=impl: impl(x, w, 1e-6, None),
                }
                if provider == "vllm_c":
                    raw = torch.ops.ircore_vllm_c.rms_norm.default
                    fns["kernel"] = lambda x=x, w=w, raw=raw: raw(x, w, 1e-6, None)
                with contextlib.nullcontext() if grad_mode else torch.inference_mode():
                    assert ircore.explain(op, x, w, 1e-6).chosen == provider
                    med = interleaved_medians(fns, rounds, calls, reduce=reduce)
                row = {
                    "impl": provider,
                    "dtype": str(dtype).replace("torch.", ""),
                    "T": tokens,
                    "eager_us": med["eager"] / 1e3,
                    "direct_us": med["direct"] / 1e3,
                    "kernel_us": med.get("kernel", med["direct"]) / 1e3,
                    "overhead_us": (med["eager"] - med["direct"]) / 1e3,
                }
                _log(f"ircore {provider} {row['dtype']} T={tokens}: overhead {row['overhead_us']:.3f} us")
                rows.append(row)
    ircore.set_priority(rms_norm=None)
    return rows


def measure_scopes(rounds: int, calls: int, stub: bool = False) -> list[dict[str, Any]]:
    """What a ``with ircore.priority(...)`` block costs around one call.

    Variants, interleaved, x 16x4096 under ``torch.inference_mode()``: the call under the
    process-wide priority (``global``); the same call inside a block whose contents were entered
    before (``scope``: a new ``ircore.priority`` object each time, as a per-request block); a
    block entered and left without a call (``scope_empty``); a block never seen (the remembered
    blocks, scopes and plans are forgotten before each), entered and left (``new_scope_empty``:
    validation) and with one call (``new_scope``); the first call inside it (the difference)
    against a call outside scopes whose signature is not remembered (``miss``: the op's
    signature cache cleared before each), and against the same miss made right after entering
    and leaving a never-seen block (``miss_after_new_scope``): a control with the same work
    before the call, whose caches and branch history it leaves colder than a miss repeated in a
    tight loop finds them.
    ``stub`` times a stub implementation with the minimum over many short rounds (ircore's own
    cost, robust on a busy machine); otherwise vllm_c with medians.
    """
    import torch

    import ircore
    from ircore import dispatch

    torch.set_num_threads(1)
    op = ircore.ops.rms_norm
    ircore.get_priority("rms_norm")
    if stub:
        provider, reduce, rounds, calls = "bench_stub", min, rounds * 10, max(calls // 25, 20)
        register_stub(op)
    elif "vllm_c" in op.impls:
        provider, reduce = "vllm_c", statistics.median
    else:
        _log("no vllm_c provider: skipping the scope rows")
        return []
    ircore.set_priority(rms_norm=[provider])
    cache = op.signature_cache

    def forget_scopes() -> None:
        """Forget every remembered block, scope and plan (the state's; module tables in older checkouts)."""
        for name in ("blocks", "scopes", "plans"):
            table = getattr(dispatch.STATE, name, None)
            if not isinstance(table, dict):
                table = getattr(dispatch, f"_{name}", {})
            table.clear()

    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        x, w = torch.randn(16, 4096, dtype=dtype), torch.randn(4096, dtype=dtype)

        def in_scope(x=x, w=w):  # type: ignore[no-untyped-def]
            with ircore.priority(rms_norm=[provider]):
                return op(x, w, 1e-6)

        def empty_scope():  # type: ignore[no-untyped-def]
            with ircore.priority(rms_norm=[provider]):
                pass

        def new_scope_then_miss(x=x, w=w):  # type: ignore[no-untyped-def]
            forget_scopes()
            empty_scope()
            cache.clear()
            return op(x, w, 1e-6)

        def new_scope_then_clear():  # type: ignore[no-untyped-def]
            forget_scopes()
            empty_scope()
            cache.clear()

        fns = {
            "global": lambda x=x, w=w: op(x, w, 1e-6),
            "scope": in_scope,
            "scope_empty": empty_scope,
            "new_scope": lambda: (forget_scopes(), in_scope()),
            "new_scope_empty": lambda: (forget_scopes(), empty_scope()),
            "miss": lambda x=x, w=w: (cache.clear(), op(x, w, 1e-6)),
            "forget_scopes": forget_scopes,  # what new_scope pays for forgetting: subtracted
            "forget_choice": cache.clear,  # likewise for miss
            "miss_after_new_scope": new_scope_then_miss,
            "new_scope_then_clear": new_scope_then_clear,  # likewise for miss_after_new_scope
        }
        with torch.inference_mode():
            assert ircore.explain(op, x, w, 1e-6).chosen == provider
            t = interleaved_medians(fns, rounds, calls, reduce=reduce)
        row = {
            "impl": provider,
            "reduce": reduce.__name__,
            "dtype": str(dtype).replace("torch.", ""),
            "T": 16,
            "global_us": t["global"] / 1e3,
            "scope_us": t["scope"] / 1e3,
            "scope_empty_us": t["scope_empty"] / 1e3,
            "new_scope_enter_us": (t["new_scope_empty"] - t["forget_scopes"]) / 1e3,
            "new_scope_first_call_us": (t["new_scope"] - t["new_scope_empty"]) / 1e3,
            "miss_us": (t["miss"] - t["forget_choice"]) / 1e3,
            "miss_after_new_scope_us": (t["miss_after_new_scope"] - t["new_scope_then_clear"]) / 1e3,
        }
        row["scope_over_global_us"] = row["scope_us"] - row["global_us"]
        row["new_scope_over_miss_us"] = row["new_scope_first_call_us"] - row["miss_us"]
        row["new_scope_over_cold_miss_us"] = row["new_scope_first_call_us"] - row["miss_after_new_scope_us"]
        _log(
            f"ircore priority block {provider} {row['dtype']}: +{row['scope_over_global_us']:.3f} us over the "
            f"global call; first call in a new block +{row['new_scope_over_miss_us']:.3f} us over a miss, "
            f"+{row['new_scope_over_cold_miss_us']:.3f} us over a miss after the same block entry"
        )
        rows.append(row)
    ircore.set_priority(rms_norm=None)
    if stub:
        op.unregister_impl(provider)
    return rows


def measure_without_signature_helper(
    quick: bool, grad_mode: bool = False, stub: bool = False, minimum: bool = False
) -> list[dict[str, Any]]:
    """The same rows in a subprocess with IRCORE_NO_SIGNATURE=1: the pure-Python eager path."""
    _log("measuring ircore without the call-signature helper (IRCORE_NO_SIGNATURE=1) ...")
    env = {**os.environ, "IRCORE_NO_SIGNATURE": "1"}
    options = (("--quick", quick), ("--grad-mode", grad_mode), ("--stub", stub), ("--min", minimum))
    flags = [flag for flag, on in options if on]
    cmd = [sys.executable, __file__, "--ircore-only", *flags]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["ircore"]  # the scope rows of that run are not reported


def measure_vllm(quick: bool) -> dict[str, Any] | None:
    from vllm_anchor import run_in_vllm_venv

    venv = os.environ.get("VLLM_VENV", str(REPO / ".venv-vllm"))
    if not Path(venv, "bin", "python").exists():
        _log(f"no vLLM venv at {venv}: run benchmarks/setup_vllm_venv.sh (skipping vLLM IR)")
        return None
    _log("measuring vLLM IR in its venv ...")
    return run_in_vllm_venv(["--quick"] if quick else [], venv=venv)


_IMPORT_PROBE = """
import json, sys, time
import torch
t0 = time.perf_counter()
import ircore
t1 = time.perf_counter()
try:
    from ircore.providers import HOST  # this checkout
    names = HOST.discovered()
except ImportError:  # a checkout from before the loader was named ircore.providers (A/B runs)
    from ircore.plugins import discovered_names
    names = discovered_names()
t2 = time.perf_counter()
assert not [m for m in sys.modules if m.startswith("ircore_fixture")], "a provider was imported"
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "discover_ms": (t2 - t1) * 1e3, "found": sorted(names)}))
"""


def measure_import(runs: int, against: Path | None = None) -> dict[str, Any]:
    """``import ircore`` after ``import torch``, then discovery of 5 installed providers (none imported).

    Timed inside fresh interpreters (median of ``runs``), with bytecode caching on as in a normal
    installation; the first run, which writes the bytecode, is discarded. With ``against`` (another
    checkout, its helper built in place), each run is followed by one of that checkout, in
    alternating order, and the paired differences (this - that) are reported too: a figure that
    holds when the machine's speed drifts between runs.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRCORE_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    checkouts = [REPO] if against is None else [REPO, against.resolve()]
    with tempfile.TemporaryDirectory() as site:
        fixtures = REPO / "tests" / "fixtures"
        five = ["good", "boom_import", "boom_hook", "unknown_op", "unavailable"]
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
             "--no-compile", "--target", site, *[str(fixtures / f) for f in five]],
            check=True,
        )
        samples: dict[Path, list[dict[str, Any]]] = {c: [] for c in checkouts}
        for i in range(runs + 1):
            for checkout in checkouts if i % 2 == 0 else checkouts[::-1]:
                env["PYTHONPATH"] = os.pathsep.join([site, str(checkout)])
                out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], env=env, check=True,
                                     capture_output=True, text=True).stdout
                if i:
                    samples[checkout].append(json.loads(out))
    mine = samples[REPO]
    found = mine[0]["found"]
    assert set(five) <= set(found), found
    imp = statistics.median(s["import_ms"] for s in mine)
    disc = statistics.median(s["discover_ms"] for s in mine)
    result: dict[str, Any] = {
        "import_ircore_over_torch_ms": imp,
        "discover_5_providers_ms": disc,
        "import_and_discover_5_over_torch_ms": imp + disc,
        "providers_found": found,
        "runs": runs,
    }
    if against is not None:
        theirs = samples[checkouts[1]]
        for key in ("import_ms", "discover_ms"):
            result[f"against_{key}"] = statistics.median(s[key] for s in theirs)
            result[f"paired_diff_{key}"] = statistics.median(a[key] - b[key] for a, b in zip(mine, theirs))
        result["against"] = str(checkouts[1])
    return result


def _vllm_kernel_us(vllm: dict[str, Any], dtype: str, tokens: int) -> float:
    for k in vllm.get("kernels", []):
        if (k.get("op"), k.get("dtype"), k.get("tokens"), k.get("threads")) == ("rms_norm", dtype, tokens, 1):
            return k.get("median_ns", float("nan")) / 1e3
    return float("nan")


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "ircore (overhead = eager call - the chosen implementation's function called directly; "
        f"{result.get('reduce', 'median')} over rounds):",
        "",
        "| impl | dtype | T | eager us | impl fn us | raw kernel us | overhead us |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["ircore"]:
        lines.append(
            f"| {r['impl']} | {r['dtype']} | {r['T']} | {r['eager_us']:.2f} | {r['direct_us']:.2f} "
            f"| {r['kernel_us']:.2f} | **{r['overhead_us']:.3f}** |"
        )
    lines += ["", f"call-signature helper: {result.get('signature_helper')}"]
    scopes = result.get("scopes")
    if scopes:
        lines += [
            "",
            "ircore priority blocks (x 16x4096; block = `with ircore.priority(...)` seen before, written",
            "inline around one call; new = never seen: entering it validates, its first call resolves the",
            "op's plan under it; miss = a call outside blocks whose signature is not remembered; miss after",
            "entry = the same miss right after a never-seen block is entered and left, the same work before it):",
            "",
            "| impl | reduce | dtype | global call us | block + call us | block, no call us | block - global us "
            "| new block: enter + exit us | new block: first call us | miss us | first call - miss us "
            "| miss after entry us | first call - miss after entry us |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in scopes:
            lines.append(
                f"| {r['impl']} | {r['reduce']} | {r['dtype']} | {r['global_us']:.2f} | {r['scope_us']:.2f} "
                f"| {r['scope_empty_us']:.2f} | **{r['scope_over_global_us']:.3f}** "
                f"| {r['new_scope_enter_us']:.2f} | {r['new_scope_first_call_us']:.2f} "
                f"| {r['miss_us']:.2f} | **{r['new_scope_over_miss_us']:.3f}** "
                f"| {r['miss_after_new_scope_us']:.2f} | {r['new_scope_over_cold_miss_us']:.3f} |"
            )
    slow = result.get("ircore_no_signature")
    if slow:
        lines += [
            "",
            "ircore without the call-signature helper (IRCORE_NO_SIGNATURE=1, same run, a subprocess):",
            "",
            "| impl | dtype | T | eager us | impl fn us | overhead us |",
            "|---|---|---|---|---|---|",
        ]
        for r in slow:
            lines.append(
                f"| {r['impl']} | {r['dtype']} | {r['T']} | {r['eager_us']:.2f} | {r['direct_us']:.2f} "
                f"| {r['overhead_us']:.3f} |"
            )
    vllm = result.get("vllm")
    if vllm:
        lines += [
            "",
            "vLLM IR 0.32.0 (same run, its own venv; vllm_c selected; impl fn = vLLM's impl_fn, which",
            "allocates the output; raw kernel = torch.ops._C.rms_norm into a preallocated buffer):",
            "",
            "| dtype | T | eager (default) us | eager (no torch-op layer) us | impl fn us | raw kernel us "
            "| overhead vs impl fn us (default / no layer) | default eager - raw kernel us |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in vllm.get("overhead", []):
            kern = _vllm_kernel_us(vllm, r["dtype"], r["tokens"])
            lines.append(
                f"| {r['dtype']} | {r['tokens']} | {r['a_wrap_ns'] / 1e3:.2f} | {r['a_nowrap_ns'] / 1e3:.2f} "
                f"| {r['b_direct_ns'] / 1e3:.2f} | {kern:.2f} | {r['overhead_wrap_ns'] / 1e3:.2f} / "
                f"{r['overhead_nowrap_ns'] / 1e3:.2f} | {r['a_wrap_ns'] / 1e3 - kern:.2f} |"
            )
        scoped = [r for r in vllm.get("overhead", []) if "a_scope_ns" in r]
        if scoped:
            lines += [
                "",
                "vLLM IR scopes (`with op.set_priority([...])` around one call, inside the outer priority):",
                "",
                "| dtype | T | call us | scope + call us | scope - call us |",
                "|---|---|---|---|---|",
            ]
            for r in scoped:
                lines.append(
                    f"| {r['dtype']} | {r['tokens']} | {r['a_wrap_ns'] / 1e3:.2f} | {r['a_scope_ns'] / 1e3:.2f} "
                    f"| **{(r['a_scope_ns'] - r['a_wrap_ns']) / 1e3:.3f}** |"
                )
    imp = result.get("import")
    if imp:
        lines += ["", f"import ircore after torch: {imp['import_ircore_over_torch_ms']:.1f} ms; discovery "
                  f"of 5 installed providers (none imported): {imp['discover_5_providers_ms']:.1f} ms; "
                  f"together: {imp['import_and_discover_5_over_torch_ms']:.1f} ms (median of {imp['runs']})"]
        if "against" in imp:
            lines += [f"the same for {imp['against']}, alternating with this checkout: import "
                      f"{imp['against_import_ms']:.1f} ms, discovery {imp['against_discover_ms']:.1f} ms; "
                      f"paired median difference (this - that): import {imp['paired_diff_import_ms']:+.2f} ms, "
                      f"discovery {imp['paired_diff_discover_ms']:+.2f} ms"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="write all figures as JSON")
    parser.add_argument("--quick", action="store_true", help="few rounds (smoke test)")
    parser.add_argument("--no-vllm", action="store_true", help="skip the vLLM IR side")
    parser.add_argument("--no-import", action="store_true", help="skip the import-cost measurement")
    parser.add_argument(
        "--grad-mode",
        action="store_true",
        help="time ircore's calls with grad mode on (default: under torch.inference_mode())",
    )
    parser.add_argument(
        "--stub",
        action="store_true",
        help="only a stub implementation's rows, minimum over rounds (ircore's own cost; A/B on a busy machine)",
    )
    parser.add_argument(
        "--min",
        action="store_true",
        help="the provider rows' minimum over rounds instead of the median (A/B on a busy machine)",
    )
    parser.add_argument(
        "--import-against",
        metavar="CHECKOUT",
        help="also time the import of another checkout (helper built in place), alternating: paired A/B",
    )
    parser.add_argument("--ircore-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rounds, calls = (5, 2000) if args.quick else (21, 5000)
    from ircore import _signature

    if args.stub:
        measure = measure_stub
    else:
        reduce = min if args.min else statistics.median

        def measure(rounds: int, calls: int, grad_mode: bool) -> list[dict[str, Any]]:
            return measure_ircore(rounds, calls, grad_mode, reduce)

    result: dict[str, Any] = {
        "signature_helper": "loaded" if _signature.signature is not None else _signature.unavailable_reason,
        "grad_mode": args.grad_mode,
        "reduce": "min" if args.min or args.stub else "median",
        "ircore": measure(rounds, calls, args.grad_mode),
    }
    if not args.grad_mode:
        result["scopes"] = measure_scopes(rounds, calls, stub=args.stub)
    if args.ircore_only:
        print(json.dumps(result))
        return 0
    if _signature.signature is not None:
        result["ircore_no_signature"] = measure_without_signature_helper(
            args.quick, args.grad_mode, args.stub, args.min
        )
    if not args.no_vllm:
        result["vllm"] = measure_vllm(args.quick)
    if not args.no_import:
        _log("measuring import cost ...")
        against = Path(args.import_against) if args.import_against else None
        result["import"] = measure_import(3 if args.quick else 11, against)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
