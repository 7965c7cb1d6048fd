"""GPU benchmark and launch-configuration sweep for the vllm_c CUDA kernels (run on the H200).

Why: the norm kernels' launch heuristic (threads per row, vectors per thread, rows per thread
group, register bound) was written without a GPU; this measures the kernels' own time (CUDA-graph
replay of back-to-back calls, so host launch cost is excluded), as % of the copy bandwidth
measured in the same run, and with ``--sweep`` tries the compiled configurations per shape to
show what the heuristic should pick.

Run:  python providers/vllm_c/bench_gpu.py                 (default sizes, bf16)
      python providers/vllm_c/bench_gpu.py --sweep         (+ best forced configs per shape)
      python providers/vllm_c/bench_gpu.py --sweep --ops rms_norm fused_add_rms_norm \
          --shapes 1024x4096 8192x4096 32768x4096 8192x8192   (the quick check, ~1 min)
      python providers/vllm_c/bench_gpu.py --pdl both --shapes 1x4096 128x4096   (PDL on vs off)
      python providers/vllm_c/bench_gpu.py --json > out.json

A configuration is ``nv tpr block rows minb`` (see _cuda_set_norm_config in csrc/cuda_ops.cu):
16-byte vectors per thread, threads per row, threads per block, rows per thread group, and the
register bound (1: none; 3 / 4: at most 40 / 32 registers, 1536 / 2048 threads per SM). Each
line shows the configuration the heuristic picked (``auto``) and, with ``--sweep``, the fastest.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from ircore.tools.timing import graph_runner

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
    """Median per-call time of ``fn`` inside a CUDA graph of ``calls`` back-to-back calls, one
    replay per sample (the graph is ircore's, ``ircore.tools.timing.graph_runner``)."""
    run = graph_runner(fn, calls)
    run(1)  # the first replay pays for lazy set-up
    return sorted(run(1) for _ in range(replays))[replays // 2] * 1e6


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


# (nv, rows, minb) compiled for 16-byte vectors: kNormVariants in csrc/cuda_ops.cu.
NORM_VARIANTS = [(1, 1, 1), (1, 2, 1), (1, 2, 4), (1, 4, 1), (2, 1, 1), (2, 1, 3), (2, 2, 1), (4, 1, 1)]
SWEEP_BLOCKS = (256, 512, 1024)


def _round_tpr(t: int) -> int:
    """Threads per row as the kernels round them: a power of two up to 32, a multiple of 32 above."""
    if t <= 32:
        return 1 << max(0, (t - 1).bit_length())
    return min(1024, -(-t // 32) * 32)


def sweep_configs(hidden: int, dtype: torch.dtype):
    """Forced (nv, tpr, block, rows, minb) configurations worth trying for this hidden size.

    Every compiled variant whose row fits its thread bound (1024 threads for one vector of one
    row, else 512), with as many threads per row as it needs, in blocks of 256 to 1024 threads;
    and, for rows of 512+ vectors, the two-pass loop kernel (a forced config whose threads do not
    cover the row runs it; it reports as ``nv0``): fewer registers, more resident warps, the row
    re-read from L1/L2 (what Inductor's kernel does at mid sizes: at 1024x8192 Nsight Compute showed
    it keeping twice the resident warps of a kernel that holds the row in registers).
    """
    vec = 16 // torch.empty((), dtype=dtype).element_size()
    nvec = -(-hidden // vec)
    for nv, rows, minb in NORM_VARIANTS:
        tpr = _round_tpr(-(-nvec // nv))
        bound = 1024 if nv * rows == 1 else 512
        if tpr > bound or tpr * nv < nvec:  # does not fit: the loop kernel, measured as auto
            continue
        blocks = [b for b in SWEEP_BLOCKS if tpr <= b <= bound] or [bound]
        for block in blocks:
            yield nv, tpr, block, rows, minb
    if nvec >= 512:  # threads that do not cover the row: the loop kernel, one row per block
        for tpr in (128, 256, 512):
            if tpr < nvec:
                yield 1, tpr, tpr, 1, 1


def _fmt_cfg(cfg) -> str:
    nv, tpr, block, rows, minb = cfg
    return f"nv{nv} tpr{tpr} b{block} r{rows} mb{minb}"


def _last_cfg() -> tuple[int, ...]:
    """(nv, tpr, block, rows, minb) of the latest norm launch (nv 0: the loop kernel)."""
    return tuple(torch.ops.ircore_vllm_c._cuda_last_norm_config()[:5])


def run(
    ops: list[str], shapes: list[tuple[int, int]], dtype_name: str, sweep: bool, top: int = 3, pdl: str = "on"
) -> dict:
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
    set_pdl = torch.ops.ircore_vllm_c._cuda_set_pdl
    device = torch.cuda.current_device()
    pdl_on = set_pdl(0 if pdl == "off" else 1, device)
    print(f"# PDL {'on' if pdl_on else 'off'} (--pdl {pdl})", file=sys.stderr)
    for op, (t, h) in itertools.product(ops, shapes):
        fn, nbytes, check = _case(op, t, h, dtype)
        set_cfg(0, 0, 0, 0, 0)
        check()
        norm = op != "silu_and_mul"
        auto = _last_cfg() if norm else None
        us = graph_time_us(fn)
        row = {"op": op, "tokens": t, "hidden": h, "dtype": dtype_name, "us": us, "gbs": nbytes / (us * 1e3)}
        row["pct_copy_bw"] = 100 * row["gbs"] / bw
        row["pdl"] = pdl_on
        line = f"{op:19} {t:>6}x{h:<6} {us:9.2f} us {row['gbs']:7.0f} GB/s {row['pct_copy_bw']:5.1f}%"
        if norm:
            row["auto_cfg"] = dict(zip(("nv", "tpr", "block", "rows", "minb"), auto))
            line += f"   auto {_fmt_cfg(auto)}"
        if pdl == "both":  # the same launch without PDL, measured next to it
            set_pdl(0, device)
            row["us_no_pdl"] = graph_time_us(fn)
            set_pdl(1, device)
            line += f"   no PDL {row['us_no_pdl']:.2f} us ({row['us_no_pdl'] / us:.2f}x)"
        print(line, file=sys.stderr, flush=True)
        if sweep and norm:
            configs = list(sweep_configs(h, dtype))
            print(f"#   sweep: {len(configs)} configs", file=sys.stderr, flush=True)
            results = {auto: us}  # by the configuration that actually ran
            for cfg in configs:
                set_cfg(*cfg)
                check()
                ran = _last_cfg()
                if ran != cfg:
                    print(f"#   {_fmt_cfg(cfg)} ran as {_fmt_cfg(ran)}", file=sys.stderr)
                if ran not in results:
                    results[ran] = graph_time_us(fn)
            set_cfg(0, 0, 0, 0, 0)
            ranked = sorted(results.items(), key=lambda kv: kv[1])
            row["sweep"] = [{"cfg": _fmt_cfg(c), "us": u} for c, u in ranked]
            row["best_cfg"] = dict(zip(("nv", "tpr", "block", "rows", "minb"), ranked[0][0]))
            row["best_us"] = ranked[0][1]
            for cfg, cus in ranked[:top]:
                pct = 100 * nbytes / (cus * 1e3) / bw
                mark = "  <- auto" if cfg == auto else ""
                print(f"#   {_fmt_cfg(cfg):28} {cus:9.2f} us {pct:5.1f}%{mark}", file=sys.stderr)
            if auto not in dict(ranked[:top]):
                rank = [c for c, _ in ranked].index(auto) + 1
                print(f"#   auto is #{rank} of {len(ranked)}", file=sys.stderr, flush=True)
        rows.append(row)
    set_pdl(-1, device)
    return {"device": torch.cuda.get_device_name(), "copy_gbs": bw, "pdl": pdl, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="+", default=["rms_norm", "fused_add_rms_norm", "silu_and_mul"])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--shapes", nargs="+", default=None, help="TxH, e.g. 8192x4096")
    p.add_argument("--sweep", action="store_true", help="also try every compiled launch configuration")
    p.add_argument("--top", type=int, default=3, help="with --sweep: configurations shown per shape")
    p.add_argument(
        "--pdl", default="on", choices=("on", "off", "both"),
        help="programmatic dependent launch (sm_90+): on (default), off, or both (each row also without)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes] if args.shapes else SHAPES
    result = run(args.ops, shapes, args.dtype, args.sweep, args.top, args.pdl)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
