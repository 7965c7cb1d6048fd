"""Run one call of each implementation of the given rows under the CUDA profiler, for Nsight Compute.

Why: the rows where ircore's kernels still trail the best anchor at T <= 1024 (kernels_gpu.py)
need counters, not more timings: memory throughput, achieved occupancy, waves, L2 hit rate,
registers per thread. This script makes exactly one profiled launch per (row, column) between
``torch.cuda.profiler.start()`` and ``stop()`` (warm-up, tuning and compilation happen before),
so ``ncu --profile-from-start off`` records only those. The columns are kernels_gpu.py's.

Run on the GPU machine (repo root)::

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \\
        --csv --page details python3 benchmarks/profile_small_t.py > ncu.csv

A row is ``op:dtype:TxH:col,col,...``; the default rows are those where ircore's kernels once
trailed the best anchor at T <= 1024 (kernels_gpu.py). The profiled order is printed to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_ROWS = (
    "rms_norm:bf16:1024x8192:compile,vllm_c,triton",
    "rms_norm:bf16:128x8192:compile,vllm_c,triton",
    "fused_add_rms_norm:fp16:128x8192:liger,compile,vllm_c,triton",
    "fused_add_rms_norm:fp16:1024x4096:liger,compile,vllm_c,triton",
)


def parse_row(text: str) -> tuple[str, str, int, int, list[str]]:
    try:
        op, dtype, shape, cols = text.split(":")
        t, h = (int(v) for v in shape.split("x"))
    except ValueError:
        raise SystemExit(f"bad row {text!r}: expected op:dtype:TxH:col,col (e.g. {DEFAULT_ROWS[0]})") from None
    return op, dtype, t, h, [c for c in cols.split(",") if c]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rows", nargs="*", default=list(DEFAULT_ROWS), help="op:dtype:TxH:col,col,...")
    args = p.parse_args(argv)
    import torch
    from kernels_gpu import DTYPE_NAMES, INPLACE, Impls, make_inputs, use_checkout_paths

    use_checkout_paths()

    if not torch.cuda.is_available():
        print("profile_small_t: needs a CUDA GPU", file=sys.stderr)
        return 2
    impls = Impls({}, build_timeout=300.0)
    plan = []
    with torch.no_grad():
        for row in args.rows:
            op, dtype_name, t, h, cols = parse_row(row)
            dtype = getattr(torch, DTYPE_NAMES[dtype_name])
            for col in cols:
                try:
                    fn = impls.fn(col, op, h)
                except RuntimeError as exc:
                    print(f"skip {op} {dtype_name} {t}x{h} {col}: {exc}", file=sys.stderr)
                    continue
                inputs = make_inputs(op, t, h, dtype)
                work = [a.clone() for a in inputs] if (op, col) in INPLACE else list(inputs)
                for _ in range(3):  # compile, tune, load
                    fn(*work)
                plan.append((f"{op} {dtype_name} {t}x{h} {col}", fn, work))
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for i, (label, fn, work) in enumerate(plan):
            print(f"profiled #{i}: {label}", file=sys.stderr, flush=True)
            fn(*work)
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
