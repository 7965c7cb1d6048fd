"""FP8 matmuls on the GPU: ircore's ``block_scaled_mm_fp8`` / ``scaled_mm_fp8`` per provider against
``torch._scaled_mm`` called directly, at the Llama-3-8B projection shapes (issue 26).

Per (op, projection, M): each provider's implementation where its predicate takes the call
(``ircore.explain``), timed by CUDA-graph replay in the same interleaved rounds as the anchor
(``torch._scaled_mm`` with the scales laid out as cuBLASLt needs, where it is valid); the ratio
ours / anchor (< 1 is faster); the % of the weight-bandwidth limit (the fp8 weight read once at
the measured copy bandwidth, the bound at small M); and each result's relative error against the
fp32 dequantized native, which exposes a wrong answer (``_scaled_mm`` blockwise with
``(K / 128) % 4 != 0`` is silently wrong: its row is marked, and no ircore provider may take it).

    python3 benchmarks/matmul_fp8_gpu.py                      # every shape, M = 1..8192
    python3 benchmarks/matmul_fp8_gpu.py --m 1,16,128 --json out.json --budget-s 150

The JSON and the markdown (``--markdown``) are rewritten after every row, so a run cut short keeps
what it measured; ``--budget-s`` starts no row past that many seconds. ``native`` (the fp32
dequantizing reference, slow at large M) is timed only when ``--providers`` names it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_timing import copy_gbps

import ircore
from ircore.ops import block_scaled_mm_fp8
from ircore.ops._scaled_mm import quantize_blocks, quantize_groups
from ircore.tools.timing import graph_runner, interleaved_medians

# Llama-3-8B: (name, N, K) of each projection; plus K = 2816 (K/128 = 22), where cuBLASLt's
# blockwise path is wrong, to show the predicate declining it.
PROJECTIONS = [
    ("qkv", 6144, 4096),
    ("o", 4096, 4096),
    ("gate_up", 28672, 4096),
    ("down", 4096, 14336),
    ("k2816", 4096, 2816),
]
M_VALUES = [1, 4, 16, 64, 128, 512, 1024, 2048, 4096, 8192]


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def block_rows(
    m: int, name: str, n: int, k: int, gbps: float, providers: tuple[str, ...] = ("vllm_c", "triton"), rounds: int = 7
) -> list[dict[str, Any]]:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.05
    a, sa = quantize_groups(x, 128)
    b, sb = quantize_blocks(w, (128, 128))
    # the activation scales column-major, as dynamic_group_quant_fp8(..., column_major=True) makes
    # them and as the Hugging Face client asks (cuBLASLt's layout): both sides get the same input
    sa = sa.t().contiguous().t()
    args = (a, b, sa, sb, [128, 128], torch.bfloat16)
    ref = block_scaled_mm_fp8.native(a, b, sa, sb, [128, 128], torch.float32)
    # the weight read once at the copy's bandwidth (bytes read + written per second: a kernel that only
    # reads moves its bytes at that rate too; half of it would put gate_up's measured read at 177%)
    limit_us = b.numel() / (gbps * 1e3)
    # Each implementation's CUDA graph is captured first, then all are timed in the same interleaved
    # rounds (medians): timed one after another, vllm_c's rows, the very _scaled_mm call of the
    # anchor, read 6-14% off it on 2026-12-05 (H100), an order effect, not a kernel's.
    rows: dict[str, dict[str, Any]] = {}
    runners: dict[str, Any] = {}
    # the bf16 matmul the fp8 one replaces (cuBLAS): what an FP8 model can gain at this shape (an
    # FP8 Llama's prefill ratio over bf16 is bounded by these ratios, its other kernels unchanged)
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    runners["bf16 F.linear"] = graph_runner(lambda: torch.nn.functional.linear(xb, wb), 20)
    rows["bf16 F.linear"] = {}
    if m % 4 == 0:
        sa_t, sb_t, bt = sa, sb.t(), b.t()
        try:
            out = torch._scaled_mm(a, bt, sa_t, sb_t, out_dtype=torch.bfloat16)
            runners["torch._scaled_mm"] = graph_runner(
                lambda: torch._scaled_mm(a, bt, sa_t, sb_t, out_dtype=torch.bfloat16), 20
            )
            rows["torch._scaled_mm"] = {"rel_err": _rel(out, ref), "wrong": (k // 128) % 4 != 0}
        except RuntimeError as exc:
            rows["torch._scaled_mm"] = {"error": str(exc).splitlines()[0]}
    for provider in providers:
        try:
            with ircore.priority(block_scaled_mm_fp8=[provider, "native"]):
                chosen = ircore.explain("block_scaled_mm_fp8", *args).chosen
                if chosen != provider:
                    rows[provider] = {"declined": True}
                    continue
                out = block_scaled_mm_fp8(*args)
                runners[provider] = graph_runner(lambda: block_scaled_mm_fp8(*args), 20)  # captures the kernel
        except Exception as exc:  # a provider not installed here
            rows[provider] = {"error": f"{type(exc).__name__}: {exc}"[:120]}
            continue
        rows[provider] = {"rel_err": _rel(out, ref), "pct_limit": None}
    us = {impl: t * 1e6 for impl, t in interleaved_medians(runners, rounds=rounds, round_s=0.01).items()}
    anchor_us = us.get("torch._scaled_mm")
    for impl, t in us.items():
        rows[impl]["us"] = t
        rows[impl]["vs_bf16"] = t / us["bf16 F.linear"]
        if impl not in ("torch._scaled_mm", "bf16 F.linear"):
            rows[impl]["vs_anchor"] = t / anchor_us if anchor_us else None
            rows[impl]["pct_limit"] = 100 * limit_us / t
    base = {"op": "block_scaled_mm_fp8", "proj": name, "M": m, "N": n, "K": k}
    return [{**base, "impl": impl, **r} for impl, r in rows.items()]


def markdown(rows: list[dict[str, Any]], gbps: float) -> str:
    out = [
        f"copy bandwidth {gbps:.0f} GB/s; times: CUDA-graph replay, us per call",
        "",
        "| op | proj (N x K) | M | impl | us | vs _scaled_mm | vs bf16 F.linear | % weight-bw limit | rel err |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "us" not in r:
            what = "declined" if r.get("declined") else r.get("error", "")
            out.append(
                f"| {r['op']} | {r['proj']} ({r['N']}x{r['K']}) | {r['M']} | {r['impl']} | {what} | | | | |"
            )
            continue
        ratio = f"{r['vs_anchor']:.3f}" if r.get("vs_anchor") else ""
        vs_bf16 = f"{r['vs_bf16']:.3f}" if r.get("vs_bf16") and r["impl"] != "bf16 F.linear" else ""
        pct = f"{r['pct_limit']:.0f}%" if r.get("pct_limit") else ""
        wrong = " **wrong**" if r.get("wrong") else ""
        err = f"{r['rel_err']:.2e}{wrong}" if "rel_err" in r else ""
        out.append(
            f"| {r['op']} | {r['proj']} ({r['N']}x{r['K']}) | {r['M']} | {r['impl']} | {r['us']:.1f} | "
            f"{ratio} | {vs_bf16} | {pct} | {err} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma list of M (tokens)")
    p.add_argument("--providers", default="vllm_c,triton", help="comma list; add native to time the reference")
    p.add_argument("--budget-s", type=float, default=None, help="start no row after this many seconds")
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.perf_counter()
    providers = tuple(x.strip() for x in a.providers.split(",") if x.strip())
    gbps = copy_gbps()
    rows: list[dict[str, Any]] = []
    skipped = []
    for name, n, k in PROJECTIONS:
        for m in map(int, a.m.split(",")):
            elapsed = time.perf_counter() - start
            if a.budget_s is not None and elapsed > a.budget_s:
                skipped.append(f"{name} M={m}")
                continue
            print(f"  {name} M={m} ({elapsed:.0f} s)", file=sys.stderr, flush=True)
            rows += block_rows(m, name, n, k, gbps, providers)
            # after every row: a run cut short (the device call's cap) keeps what it measured
            if a.json:
                Path(a.json).write_text(json.dumps(rows, indent=1))
            if a.markdown:
                Path(a.markdown).write_text(markdown(rows, gbps) + "\n")
    text = markdown(rows, gbps)
    if skipped:
        text += f"\n\nNot started (past --budget-s {a.budget_s:.0f} s): {', '.join(skipped)}"
    print(text)
    if a.markdown:
        Path(a.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
