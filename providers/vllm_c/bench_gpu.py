"""GPU benchmark and launch-configuration sweep for the vllm_c CUDA kernels (run on the H200).

Why: the norm kernels' launch heuristic (threads per row, vectors per thread) was written
without a GPU; this measures the kernels' own time (CUDA-graph replay of back-to-back calls, so
host launch cost is excluded), as % of the copy bandwidth measured in the same run, and with
``--sweep`` tries every configuration per shape to show what the heuristic should pick.

Run:  python providers/vllm_c/bench_gpu.py                 (default sizes, bf16)
      python providers/vllm_c/bench_gpu.py --sweep         (+ best forced config per shape)
      python providers/vllm_c/bench_gpu.py --json > out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [
    (1, 4096),
    (16, 4096),
    (128, 4096),
    (1024, 4096),
    (8192, 4096),
    (32768, 4096),
    (8192, 8192),
    (32768, 8192),
]
EPS = 1e-6


def graph_time_us(fn: Callable[[], object], calls: int = 50, replays: int = 20) -> float:
    """Median per-call time of ``fn`` inside a CUDA graph of ``calls`` back-to-back calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Device copy bandwidth, read + write, GB/s."""
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = graph_time_us(lambda: b.copy_(a), calls=10)
    return 2 * a.numel() / (us * 1e3)


def _case(op: str, tokens: int, hidden: int, dtype: torch.dtype):
    """(fn, bytes moved, check) for one op and size."""
    ops = torch.ops.ircore_vllm_c
    gen = torch.Generator(device="cuda").manual_seed(0)
    es = torch.empty((), dtype=dtype).element_size()
    if op == "silu_and_mul":
        x = torch.randn(tokens, 2 * hidden, device="cuda", dtype=dtype, generator=gen)
        out = torch.empty(tokens, hidden, device="cuda", dtype=dtype)

        def check():
            ops.silu_and_mul_out(out, x)
            xf = x.float()
            ref = torch.nn.functional.silu(xf[:, :hidden]) * xf[:, hidden:]
            torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)

        return (lambda: ops.silu_and_mul_out(out, x)), 3 * tokens * hidden * es, check
    x = torch.randn(tokens, hidden, device="cuda", dtype=dtype, generator=gen)
    w = torch.randn(hidden, device="cuda", dtype=dtype, generator=gen) * 0.1 + 1
    if op == "rms_norm":
        out = torch.empty_like(x)

        def check():
            ops.rms_norm_out(out, x, w, EPS, None)
            xf = x.float()
            ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
            torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)

        return (lambda: ops.rms_norm_out(out, x, w, EPS, None)), (2 * tokens * hidden + hidden) * es, check
    r = torch.randn(tokens, hidden, device="cuda", dtype=dtype, generator=gen)
    xb, rb = x.clone(), r.clone()

    def check():
        xb.copy_(x)
        rb.copy_(r)
        ops.fused_add_rms_norm(xb, rb, w, EPS, None)
        res = (x.float() + r.float()).to(dtype).float()
        ref = res * torch.rsqrt(res.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
        torch.testing.assert_close(xb.float(), ref, atol=2e-2, rtol=2e-2)

    return (lambda: ops.fused_add_rms_norm(xb, rb, w, EPS, None)), (4 * tokens * hidden + hidden) * es, check


def sweep_configs(hidden: int, dtype: torch.dtype):
    """Forced (nv, tpr, block) configurations worth trying for this hidden size."""
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    nvec = hidden // vec
    for nv in (1, 2, 4):
        tpr = -(-nvec // nv)
        if tpr > (1024 if nv == 1 else 512):
            continue
        for block in (0, 128, 256, 512, 1024):
            if block and (block < tpr or (nv > 1 and block > 512)):
                continue
            yield nv, tpr, block


def run(ops: list[str], shapes: list[tuple[int, int]], dtype_name: str, sweep: bool) -> dict:
    from ircore_vllm_c import kernels

    reason = kernels.load_kernels(cuda=True)
    if reason is not None:
        raise SystemExit(f"kernels did not load: {reason}")
    dtype = DTYPES[dtype_name]
    bw = copy_bandwidth_gbs()
    print(
        f"# {torch.cuda.get_device_name()} torch {torch.__version__}; copy bandwidth {bw:.0f} GB/s",
        file=sys.stderr,
    )
    rows = []
    set_cfg = torch.ops.ircore_vllm_c._cuda_set_norm_config
    for op, (t, h) in itertools.product(ops, shapes):
        fn, nbytes, check = _case(op, t, h, dtype)
        set_cfg(0, 0, 0)
        check()
        us = graph_time_us(fn)
        row = {"op": op, "tokens": t, "hidden": h, "dtype": dtype_name, "us": us, "gbs": nbytes / (us * 1e3)}
        row["pct_copy_bw"] = 100 * row["gbs"] / bw
        if sweep and op != "silu_and_mul":
            best = None
            for cfg in sweep_configs(h, dtype):
                set_cfg(*cfg)
                check()
                cus = graph_time_us(fn)
                if best is None or cus < best[1]:
                    best = (cfg, cus)
            set_cfg(0, 0, 0)
            row["best_cfg"] = {"nv": best[0][0], "tpr": best[0][1], "block": best[0][2]}
            row["best_us"] = best[1]
        rows.append(row)
        line = f"{op:19} {t:>6}x{h:<6} {us:9.2f} us {row['gbs']:7.0f} GB/s {row['pct_copy_bw']:5.1f}%"
        if "best_us" in row:
            line += f"   best forced {row['best_cfg']} {row['best_us']:.2f} us"
        print(line, file=sys.stderr, flush=True)
    return {"device": torch.cuda.get_device_name(), "copy_gbs": bw, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="+", default=["rms_norm", "fused_add_rms_norm", "silu_and_mul"])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--shapes", nargs="+", default=None, help="TxH, e.g. 8192x4096")
    p.add_argument("--sweep", action="store_true", help="also try every forced launch configuration")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    result = run(args.ops, shapes, args.dtype, args.sweep)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
