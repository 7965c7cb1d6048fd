"""The cost of batch-invariant mode: each invariant kernel against the default one, per T.

Why: the mode runs other kernels (triton's launch fixed per hidden size, native's fixed-order
form, the persistent matmul of the matmul layer); the issue's target is within 1.10x of the
default at every T. For each op, provider and T in 1, 16, 128, 1024, 8192 (H 4096 and 8192, bf16
by default) this times what the default plan runs for the provider (``op.entry(p).call``) and
what the mode runs (``op.invariant_entry(p).call``), interleaved, and prints the ratio
invariant / default. ``--matmul`` adds the persistent matmul against ``torch.mm`` (cuBLAS) at M = T,
K = N = H.

Run (GPU):  .venv/bin/python benchmarks/batch_invariant_gpu.py [--markdown PATH] [--json PATH]
Run (CPU):  .venv/bin/python benchmarks/batch_invariant_gpu.py --device cpu --dtype float32
On CUDA the times are CUDA-graph replays (benchmarks/_gpu_timing.graph_us); on CPU, alternating
rounds of back-to-back calls, the fastest round's mean of each. Providers without a claim for an op are left out.
vllm_c's rows are its CUDA norms' launches fixed per hidden size (csrc/cuda_norm_invariant.cu)
against its default launches, which pick their configuration by T; on CPU its variants are the
default kernels themselves (ratio ~1). ``--providers vllm_c`` for those rows alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TOKENS = (1, 16, 128, 1024, 8192)
HIDDENS = (4096, 8192)
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "layer_norm", "rms_norm_gated")


def cpu_pair_us(
    a: Callable[[], Any], b: Callable[[], Any], rounds: int = 9, target_ms: float = 10.0
) -> tuple[float, float]:
    """Both functions in alternating rounds of back-to-back calls; the fastest round's mean of
    each (noise on a shared machine only adds)."""
    a(), b()
    start = time.perf_counter()
    a()
    once = max(time.perf_counter() - start, 1e-6)
    calls = max(1, min(1000, int(target_ms / 1e3 / once)))
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, fn in enumerate((a, b)):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[k] = min(best[k], (time.perf_counter() - start) / calls * 1e6)
    return best[0], best[1]


def pair_timer(device: str) -> Callable[[Callable[[], Any], Callable[[], Any]], tuple[float, float]]:
    if device == "cpu":
        return cpu_pair_us
    from _gpu_timing import graph_us

    return lambda a, b: (graph_us(a, calls=20), graph_us(b, calls=20))


def inputs(op: Any, t: int, h: int, dtype: torch.dtype, device: str) -> tuple:
    shape = (t, 2 * h) if op.name == "silu_and_mul" else (t, h)
    return op.make_inputs(shape, dtype, device)


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    import ircore
    from ircore import dispatch

    dispatch.ensure_loaded()
    time_pair = pair_timer(args.device)
    dtype = getattr(torch, args.dtype)
    rows = []
    for name in args.ops:
        op = ircore.get_op(name)
        for provider in ["native", *op.impls]:
            if args.providers and provider not in args.providers:
                continue
            invariant = op.invariant_entry(provider)
            if invariant is None or invariant.call == op.refuse_variant:  # bound methods: equal, not identical
                continue
            default = op.entry(provider)
            for h in args.hidden:
                for t in args.tokens:
                    call_args = inputs(op, t, h, dtype, args.device)
                    if default.supports_args is not None and not default.supports_args(*call_args):
                        continue
                    if invariant.supports_args is not None and not invariant.supports_args(*call_args):
                        continue
                    d, i = time_pair(
                        lambda f=default.call, a=call_args: f(*a), lambda f=invariant.call, a=call_args: f(*a)
                    )
                    rows.append({"op": name, "provider": provider, "T": t, "H": h, "default_us": d,
                                 "invariant_us": i, "ratio": i / d})  # fmt: skip
                    print(f"{name:20} {provider:8} T={t:5} H={h}: {d:9.2f} us -> {i:9.2f} us  {i / d:5.2f}x",
                          file=sys.stderr, flush=True)  # fmt: skip
    if args.matmul:
        from ircore_triton.matmul_layer import matmul

        for h in args.hidden:
            b = torch.randn(h, h, dtype=dtype, device=args.device)
            for t in args.tokens:
                a = torch.randn(t, h, dtype=dtype, device=args.device)
                d, i = time_pair(lambda a=a, b=b: torch.mm(a, b), lambda a=a, b=b: matmul(a, b))
                rows.append({"op": "mm", "provider": "triton matmul layer", "T": t, "H": h, "default_us": d,
                             "invariant_us": i, "ratio": i / d})  # fmt: skip
    return rows


def markdown(rows: list[dict[str, Any]], device: str, dtype: str) -> str:
    out = [f"Batch-invariant / default time, {device}, {dtype} (lower is better; target <= 1.10)", ""]
    tokens = sorted({r["T"] for r in rows})
    out.append("| op | provider | H | " + " | ".join(f"T={t}" for t in tokens) + " |")
    out.append("|---|---|---|" + "---|" * len(tokens))
    keys = sorted({(r["op"], r["provider"], r["H"]) for r in rows})
    for op, provider, h in keys:
        cells = {r["T"]: r["ratio"] for r in rows if (r["op"], r["provider"], r["H"]) == (op, provider, h)}
        out.append(f"| {op} | {provider} | {h} | " + " | ".join(f"{cells[t]:.2f}" if t in cells else "-" for t in tokens) + " |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    p.add_argument("--hidden", type=int, nargs="+", default=list(HIDDENS))
    p.add_argument("--ops", nargs="+", default=list(OPS))
    p.add_argument(
        "--providers", nargs="+", help="only these providers (e.g. vllm_c); default: every one that claims"
    )
    p.add_argument("--matmul", action="store_true", help="also the matmul layer against torch.mm")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    args = p.parse_args(argv)
    rows = bench(args)
    table = markdown(rows, args.device, args.dtype)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
