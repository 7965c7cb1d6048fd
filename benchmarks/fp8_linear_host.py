"""Where an eager FP8 linear's time goes: the host's cost of each piece against the kernels' time.

The FP8 Llama's eager decode ran at 0.60x of stock eager on the H200 (benchmarks/README.md,
section 5): about 0.2 ms more per FP8 linear than a bf16 one, far more than ircore's dispatch
(15-25 us per call on the CPU). This script splits one FP8 linear (``ircore.integrations._fp8.
fp8_linear_forward``: ``dynamic_group_quant_fp8`` then ``block_scaled_mm_fp8``) at the Llama-3-8B
projection shapes into its pieces and times each two ways, side by side in one process:

- ``wall``: back-to-back eager calls, synchronised at both ends (per call: what a host-bound
  forward pays; the larger of host cost and kernel time);
- ``kernel`` (CUDA only): the same call replayed from a CUDA graph (the kernels alone);
both with ircore.tools.timing's runners; every piece of a shape in the same interleaved rounds
(medians), so the pieces are compared under the same load (a first version timed one piece after
another: the whole linear then read up to 95 us over its two ops' sum on the H100).

Pieces: the whole linear; each op through ircore's dispatch; each op's chosen implementation
called directly (the dispatch's share is the difference); a bf16 ``F.linear`` of the same shape as
the reference. ``wall - kernel`` where positive is the host's excess. CPU: the dispatch figures
only (the kernels there are the natives' or vllm_c's C++ ones, no graph column).

    python3 benchmarks/fp8_linear_host.py --device cuda [--tokens 1 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

import ircore
from ircore.integrations._fp8 import fp8_linear_forward
from ircore.ops import block_scaled_mm_fp8, dynamic_group_quant_fp8
from ircore.ops._scaled_mm import quantize_blocks
from ircore.tools.timing import Runner, eager_runner, graph_runner, interleaved_medians

# Llama-3-8B's projections (N, K): qkv's q, k/v, o, gate/up, down
SHAPES = ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336))
BLOCK = [128, 128]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def time_pieces(
    fns: dict[str, Callable[[], Any]], device: str, rounds: int, round_s: float
) -> dict[str, tuple[float, float | None]]:
    """(wall, kernel) us per call of each piece: eager back-to-back calls and (CUDA) their
    CUDA-graph replay, every piece's runners in the same interleaved rounds (ircore.tools.timing;
    medians), so that load changes during the run hit every piece alike; kernel None where
    capture fails."""
    runners: dict[str, Runner] = {}
    for name, fn in fns.items():
        runners[f"{name} / wall"] = eager_runner(fn, device)
        if device == "cuda":
            try:
                runners[f"{name} / kernel"] = graph_runner(fn)
            except Exception as exc:  # a piece that cannot be captured: say so, keep the rest
                first = str(exc).splitlines()[0] if str(exc) else ""
                log(f"    {name}: graph capture failed: {type(exc).__name__}: {first}")
    med = interleaved_medians(runners, rounds=rounds, round_s=round_s)
    out = {}
    for name in fns:
        kernel = med.get(f"{name} / kernel")
        out[name] = (med[f"{name} / wall"] * 1e6, None if kernel is None else kernel * 1e6)
    return out


def chosen(op: Any, args: tuple) -> tuple[str, Callable[..., Any]]:
    """The implementation ircore's dispatch picks for ``args``, and its function."""
    name = op.explain(*args).chosen
    return name, op.entry(name).fn


def pieces(m: int, n: int, k: int, device: str) -> dict[str, Callable[[], Any]]:
    torch.manual_seed(0)
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16) / k**0.5
    wq, ws = quantize_blocks(w, (BLOCK[0], BLOCK[1]), torch.float8_e4m3fn)
    linear = SimpleNamespace(weight=wq, weight_scale_inv=ws, block_size=BLOCK, bias=None)
    qargs = (x, [1, BLOCK[1]], True, False, torch.float8_e4m3fn)
    q, s = dynamic_group_quant_fp8(*qargs)
    margs = (q, wq, s, ws, BLOCK, torch.bfloat16)
    qname, qfn = chosen(dynamic_group_quant_fp8, qargs)
    mname, mfn = chosen(block_scaled_mm_fp8, margs)
    return {
        "fp8 linear (ircore)": lambda: fp8_linear_forward(linear, x),
        "quant, dispatched": lambda: dynamic_group_quant_fp8(*qargs),
        f"quant, {qname} direct": lambda: qfn(*qargs),
        "matmul, dispatched": lambda: block_scaled_mm_fp8(*margs),
        f"matmul, {mname} direct": lambda: mfn(*margs),
        "bf16 F.linear": lambda: torch.nn.functional.linear(x, w),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the median is reported)")
    p.add_argument("--round-s", type=float, default=0.05, help="seconds per round of each timing")
    p.add_argument("--shapes", default="all", choices=["all", "small"], help="small: N, K = 512 (CPU smoke)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    shapes = SHAPES if args.shapes == "all" else ((512, 512),)
    log(f"torch {torch.__version__}, ircore {ircore.__version__}, device {args.device}")
    rows = []
    timing = (args.device, args.rounds, args.round_s)
    print("| M | N x K | piece | wall us/call | kernel us/call | host excess us |")
    print("|---|---|---|---|---|---|")
    for m in args.tokens:
        for n, k in shapes:
            log(f"M={m} N={n} K={k} ...")
            for name, (wall, kern) in time_pieces(pieces(m, n, k, args.device), *timing).items():
                excess = None if kern is None else max(0.0, wall - kern)
                rows.append({"M": m, "N": n, "K": k, "piece": name, "wall_us": wall, "kernel_us": kern,
                             "host_excess_us": excess})  # fmt: skip
                kc = "n/a" if kern is None else f"{kern:.1f}"
                ec = "n/a" if excess is None else f"{excess:.1f}"
                print(f"| {m} | {n}x{k} | {name} | {wall:.1f} | {kc} | {ec} |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"torch": torch.__version__, "device": args.device, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
