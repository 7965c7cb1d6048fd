"""GPU timings of this provider's kernels, for the project's GPU benchmark to call.

:func:`bench_rows` returns, per (op, rows, hidden), our time three ways:

- ``graph_us``: CUDA-graph replay of back-to-back calls (the kernel's own time; what decode with
  CUDA graphs sees; the figure the H200 anchors in shared/notes/gpu-anchors.md use);
- ``do_bench_us``: ``triton.testing.do_bench`` median (L2 flushed between calls; at small T it
  is dominated by the host's launch cost);
- ``eager_us``: host wall time per call of back-to-back eager calls, launch path included (the
  Python + dispatcher + Triton launcher cost when it exceeds the kernel time).

Every row is first checked against an fp32 PyTorch reference. The first call of each
(op, hidden, dtype, row bucket) autotunes; timing starts after it. Usage::

    from bench_gpu import bench_rows, format_table
    print(format_table(bench_rows()))
    # or: python providers/triton/bench_gpu.py [--rows 1 16 ...] [--hidden 4096 8192]
    #     python providers/triton/bench_gpu.py --sweep --ops rms_norm --rows 1024 --hidden 8192
    #     python providers/triton/bench_gpu.py --sweep --ops rms_norm_gated --rows 1024 32768 --hidden 8192
    #     python providers/triton/bench_gpu.py --sweep --ops rms_norm_gated --rows 1024 --hidden 8192 \
    #         --inductor --rotate 4   # beside Inductor, each call's tensors not in the L2
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # ircore_triton without installing

from ircore_triton import impls, kernels, norm_kernels

ROWS = (1, 16, 128, 1024, 8192, 32768)
HIDDENS = (4096, 8192)
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
EPS = 1e-6


# The timing helpers live in benchmarks/_gpu_timing.py (shared with benchmarks/kernels_gpu.py);
# these names are kept for callers of this module.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _gpu_timing import copy_gbps  # noqa: E402
from _gpu_timing import eager_us as _eager_us  # noqa: E402
from _gpu_timing import graph_us as _graph_us  # noqa: E402


def _norm_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RMSNorm of ``x`` in fp32 (the reference every norm row is checked against)."""
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()


def _case(op: str, t: int, h: int, dtype: torch.dtype, fused_inplace: bool):
    """(fn, bytes moved, reference check) for one row of the table."""
    gen = torch.Generator(device="cuda").manual_seed(t * 7 + h)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=gen).to(dtype)

    es = torch.empty((), dtype=dtype).element_size()
    if op == "rms_norm":
        x, w = rnd(t, h), (1 + 0.1 * rnd(h).float()).to(dtype)

        def check() -> None:
            got = impls.rms_norm(x, w, EPS)
            torch.testing.assert_close(got.float(), _norm_ref(x, w), atol=2e-2, rtol=2e-2)

        return (lambda: impls.rms_norm(x, w, EPS)), (2 * t * h + h) * es, check
    if op == "fused_add_rms_norm":
        x, r, w = rnd(t, h), rnd(t, h), (1 + 0.1 * rnd(h).float()).to(dtype)
        fused = impls.fused_add_rms_norm if fused_inplace else impls.fused_add_rms_norm_functional

        def check() -> None:
            s = x + r
            out, res = fused(x.clone(), r.clone(), w, EPS)
            assert torch.equal(res, s)
            torch.testing.assert_close(out.float(), _norm_ref(s, w), atol=2e-2, rtol=2e-2)

        return (lambda: fused(x, r, w, EPS)), (4 * t * h + h) * es, check
    if op == "silu_and_mul":  # hidden = d, the output width; the input is (t, 2d)
        x = rnd(t, 2 * h)

        def check() -> None:
            a, b = x[:, :h].float(), x[:, h:].float()
            ref = torch.nn.functional.silu(a) * b
            torch.testing.assert_close(impls.silu_and_mul(x).float(), ref, atol=2e-2, rtol=2e-2)

        return (lambda: impls.silu_and_mul(x)), 3 * t * h * es, check
    raise ValueError(f"unknown op {op!r}; known: {OPS}")


def bench_rows(
    rows: Iterable[int] = ROWS,
    hiddens: Iterable[int] = HIDDENS,
    dtype: torch.dtype = torch.bfloat16,
    ops: Iterable[str] = OPS,
    fused_inplace: bool = True,
    graph_calls: int | None = None,
    with_do_bench: bool = True,
    with_eager: bool = True,
) -> list[dict[str, Any]]:
    """Time our kernels for every (op, hidden, rows); one dict per row.

    Keys: op, rows, hidden, dtype, graph_us, do_bench_us, eager_us, gbps (from graph_us),
    config (the tuned launch config), tune_s (first call, incl. compile and autotune).
    ``fused_inplace=False`` times the out-of-place fused variant instead.
    ``graph_calls`` (default: enough for ~2 ms per replay, 20..200) sets calls per graph.
    """
    import triton

    out = []
    for op in ops:
        for h in hiddens:
            for t in rows:
                fn, nbytes, check = _case(op, t, h, dtype, fused_inplace)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                check()  # the first call tunes this bucket
                torch.cuda.synchronize()
                tune_s = time.perf_counter() - t0
                est = triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")
                calls = graph_calls or int(min(200, max(20, 2.0 / max(est, 1e-3))))
                row: dict[str, Any] = {
                    "op": op,
                    "rows": t,
                    "hidden": h,
                    "dtype": str(dtype).removeprefix("torch."),
                    "graph_us": _graph_us(fn, calls),
                    "do_bench_us": (
                        triton.testing.do_bench(fn, return_mode="median") * 1e3
                        if with_do_bench
                        else float("nan")
                    ),
                    "eager_us": _eager_us(fn) if with_eager else float("nan"),
                    "tune_s": tune_s,
                }
                row["gbps"] = nbytes / (row["graph_us"] * 1e-6) / 1e9
                key = (op, h, dtype, kernels._bucket(t))
                row["config"] = kernels.tuned_configs().get(key)
                out.append(row)
    return out


def _sweep_configs(op: str, t: int, h: int, es: int) -> list[kernels.NormConfig]:
    """The autotune's candidates for (t, h), then exploratory configs not among them."""
    cands = kernels._norm_candidates(h, t, es, kernels._sm_count(torch.device("cuda")))
    bn = max(kernels._pow2(h), 16)
    extra = []
    if bn <= kernels.MAX_ROW_BLOCK:
        extra += [kernels.NormConfig(1, bn, w) for w in (4, 8, 16, 32)]
    for chunk in (1024, 2048, 4096):
        if chunk < h:
            extra += [kernels.NormConfig(1, chunk, w) for w in (4, 8, 16)]
    return cands + [c for c in extra if c not in cands]


def sweep_norm(op: str, t: int, h: int, dtype: torch.dtype, calls: int = 50) -> list[dict[str, Any]]:
    """Graph-replay time of each config of :func:`_sweep_configs` for one norm row, fastest first.

    Keys: config, us, candidate (the autotune tries it), tuned (the autotune's pick), tuner_us
    (what the autotune measured for it, None if it did not), error (a config that failed to
    compile or launch).
    """
    gen = torch.Generator(device="cuda").manual_seed(t * 7 + h)
    x = torch.randn(t, h, device="cuda", generator=gen).to(dtype)
    r = torch.randn(t, h, device="cuda", generator=gen).to(dtype)
    w = (1 + 0.1 * torch.randn(h, device="cuda", generator=gen)).to(dtype)
    es = x.element_size()
    fused = op == "fused_add_rms_norm"
    if fused:
        kernels.fused_add_rms_norm_(x.clone(), r.clone(), w, EPS)  # tunes this bucket
    else:
        kernels.rms_norm(x, w, EPS)
    key = (op, h, dtype, kernels._bucket(t))
    tuned = kernels.tuned_configs().get(key)
    tuner_us = dict(kernels._TUNE_TIMES.get(key, []))  # what the autotune measured, per candidate
    cands = set(kernels._norm_candidates(h, t, es, kernels._sm_count(x.device)))
    out = []
    for cfg in _sweep_configs(op, t, h, es):
        try:
            if fused:
                xb, rb = x.clone(), r.clone()
                fn = lambda cfg=cfg, xb=xb, rb=rb: kernels.fused_add_rms_norm_(xb, rb, w, EPS, None, cfg)  # noqa: E731
                got, res = kernels.fused_add_rms_norm(x, r, w, EPS, None, cfg)
                torch.testing.assert_close(res, x + r, atol=0, rtol=0)
            else:
                fn = lambda cfg=cfg: kernels.rms_norm(x, w, EPS, None, cfg)  # noqa: E731
                got = fn()
            torch.testing.assert_close(got.float(), _norm_ref(x + r if fused else x, w), atol=2e-2, rtol=2e-2)
            us = _graph_us(fn, calls)
        except Exception as exc:  # a config that does not compile or launch on this GPU
            out.append({"config": cfg, "us": float("inf"), "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        row = {"config": cfg, "us": us, "candidate": cfg in cands, "tuned": cfg == tuned}
        out.append({**row, "tuner_us": tuner_us.get(cfg)})
    return sorted(out, key=lambda d: d["us"])


def format_sweep(op: str, t: int, h: int, dtype: torch.dtype, rows: list[dict[str, Any]], top: int) -> str:
    lines = [f"# sweep {op} {str(dtype).removeprefix('torch.')} {t}x{h}: {len(rows)} runs"]
    for i, d in enumerate(rows):
        mark = " <- tuned" if d.get("tuned") else ""
        if i >= top and not mark:
            continue
        c = d["config"]
        what = f"bm{c.block_m} bn{c.block_n} w{c.num_warps} mp{c.max_programs}"
        what += " chunked" if c.block_n < h else ""
        if "error" in d:
            lines.append(f"#   {what:36} {d['error']}")
            continue
        cand = "" if d["candidate"] else " (not a candidate)"
        if d.get("tuner_us") is not None:
            cand += f" (autotune: {d['tuner_us']:.2f} us)"
        lines.append(f"#   {i + 1:>3}. {what:36} {d['us']:8.2f} us{cand}{mark}")
    return "\n".join(lines)


def sweep_gated(
    t: int,
    h: int,
    dtype: torch.dtype,
    group: int | None = None,
    calls: int = 50,
    device: str = "cuda",
    inductor: bool = False,
    rotate: int = 1,
) -> list[dict[str, Any]]:
    """Graph-replay time of every rms_norm_gated candidate the autotune has for (t, h), fastest
    first: Qwen3-Next's form (``group`` None: the whole row, the gate after the norm) or Mamba2's
    (groups of ``group``, the gate first), both with ``round_normalized``; each config with the
    NVIDIA forms (``hw_math`` True, what runs) and the portable ones (the A/B of
    ``norm_kernels._silu`` / ``_round_to``), whose outputs must be the same bits.

    ``inductor``: also the op's native compiled by Inductor (the benchmark's anchor), timed alike.
    ``rotate``: the captured calls cycle over that many copies of x, gate and y, so that where
    ``rotate`` copies exceed the L2 each call reads from memory, not from the L2 the previous
    replay left (1: every call on the same tensors, as the benchmark times them).

    Keys: config ("inductor" for the anchor), hw_math, us, gbps, tuned (the autotune's pick),
    tuner_us (what the autotune measured for it), same_bits (hw_math True only: equal to the
    portable launch's output), error (a config that failed to compile or launch)."""
    gen = torch.Generator(device=device).manual_seed(t * 7 + h)
    x = torch.randn(t, h, device=device, generator=gen).to(dtype)
    g = (2 * torch.randn(t, h, device=device, generator=gen)).to(dtype)
    w = (1 + 0.1 * torch.randn(h, device=device, generator=gen)).to(dtype)
    gs = h if group is None else group
    nbg = group is None
    norm_kernels.rms_norm_gated(x, g, w, EPS, group, nbg, True)  # tunes this bucket
    key = ("rms_norm_gated", (h, gs), dtype, kernels._bucket(t))
    tuned = kernels.tuned_configs().get(key)
    tuner_us = dict(kernels._TUNE_TIMES.get(key, []))
    es = x.element_size()
    sms = kernels._sm_count(x.device)
    whole_vectors = gs % (16 // es) == 0
    cands = norm_kernels._gated_candidates(1 << (gs - 1).bit_length(), es, t * (h // gs), sms, whole_vectors)
    nbytes = 3 * t * h * es + h * w.element_size()
    sets = [(x, g)] + [(x.clone(), g.clone()) for _ in range(rotate - 1)]
    outs = [torch.empty_like(x) for _ in sets]

    def cycling(call: Any) -> Any:
        """``call(i)`` on set 0 first, then on the next set at each call."""
        i = [0]

        def fn() -> None:
            call(i[0] % len(sets))
            i[0] += 1

        return fn

    def timed(config: Any, hw: bool, call: Any) -> tuple[dict[str, Any], torch.Tensor | None]:
        try:
            call(0)
            first = outs[0].clone()
            us = _graph_us(cycling(call), calls)
        except Exception as exc:  # a config that does not compile or launch on this GPU
            error = f"{type(exc).__name__}: {exc}"[:200]
            return {"config": config, "hw_math": hw, "us": float("inf"), "error": error}, None
        return {"config": config, "hw_math": hw, "us": us, "gbps": nbytes / (us * 1e-6) / 1e9}, first

    out: list[dict[str, Any]] = []
    if inductor:
        from ircore.ops import rms_norm_gated

        compiled = torch.compile(
            lambda a, b, c: rms_norm_gated.native(a, b, c, EPS, group, nbg, True), dynamic=False
        )

        def run_compiled(i: int) -> None:
            compiled(*sets[i], w)

        row, _ = timed("inductor", False, run_compiled)
        out.append(row)
    for cfg in cands:
        ys = {}
        for hw in (True, False):

            def run(i: int, cfg: Any = cfg, hw: bool = hw) -> None:
                norm_kernels._run_gated(cfg, *sets[i], w, outs[i], t, h // gs, gs, EPS, nbg, True, hw)

            row, y = timed(cfg, hw, run)
            if y is not None:
                ys[hw] = y
                row = {**row, "tuned": cfg == tuned and hw, "tuner_us": tuner_us.get(cfg) if hw else None}
            out.append(row)
        if len(ys) == 2:
            same = torch.equal(ys[True].view(torch.uint8), ys[False].view(torch.uint8))
            for row in out:
                if row["config"] == cfg and row["hw_math"] and "error" not in row:
                    row["same_bits"] = same
    return sorted(out, key=lambda d: d["us"])


def format_gated_sweep(
    t: int,
    h: int,
    dtype: torch.dtype,
    group: int | None,
    rows: list[dict[str, Any]],
    copy_bw_gbps: float,
    rotate: int = 1,
) -> str:
    form = "whole row, gate after the norm" if group is None else f"groups of {group}, gate first"
    l2 = f", cycling over {rotate} copies of the tensors" if rotate > 1 else ""
    name = str(dtype).removeprefix("torch.")
    lines = [f"# sweep rms_norm_gated {name} {t}x{h} ({form}{l2}): {len(rows)} runs"]
    for i, d in enumerate(rows):
        c = d["config"]
        if c == "inductor":
            what = "Inductor (compiled native)"
        else:
            what = f"w{c.num_warps} m{c.block_m}{' late' if c.late_loads else ''}"
            what += " hw_math" if d["hw_math"] else " portable"
        if "error" in d:
            lines.append(f"#   {what:28} {d['error']}")
            continue
        note = f" {100 * d['gbps'] / copy_bw_gbps:3.0f}% of copy"
        if d.get("tuner_us") is not None:
            note += f" (autotune: {d['tuner_us']:.2f} us)"
        if d.get("same_bits") is False:
            note += " BITS DIFFER FROM THE PORTABLE FORMS"
        note += " <- tuned" if d.get("tuned") else ""
        lines.append(f"#   {i + 1:>3}. {what:28} {d['us']:8.2f} us{note}")
    return "\n".join(lines)


def format_table(results: list[dict[str, Any]], copy_bw_gbps: float | None = None) -> str:
    """A markdown table of :func:`bench_rows` results (``% copy`` when a copy bandwidth is given)."""
    head = "| op | T x H | graph us | do_bench us | eager us | GB/s |"
    sep = "|---|---|---|---|---|---|"
    if copy_bw_gbps:
        head += " % copy |"
        sep += "---|"
    head += " config |"
    sep += "---|"
    lines = [head, sep]
    for r in results:
        line = (
            f"| {r['op']} | {r['rows']}x{r['hidden']} | {r['graph_us']:.1f} | "
            f"{r['do_bench_us']:.1f} | {r['eager_us']:.1f} | {r['gbps']:.0f} |"
        )
        if copy_bw_gbps:
            line += f" {100 * r['gbps'] / copy_bw_gbps:.0f}% |"
        line += f" {r['config']} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Time ircore_triton's kernels on this GPU.")
    p.add_argument("--rows", type=int, nargs="*", default=list(ROWS))
    p.add_argument("--hidden", type=int, nargs="*", default=list(HIDDENS))
    p.add_argument("--ops", nargs="*", default=list(OPS))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--out-of-place", action="store_true", help="fused op: out-of-place variant")
    p.add_argument("--sweep", action="store_true", help="norm ops: time every config (see sweep_norm)")
    p.add_argument("--top", type=int, default=6, help="with --sweep: configs shown per row")
    p.add_argument("--group", type=int, default=None, help="with --sweep of rms_norm_gated: group size")
    p.add_argument("--inductor", action="store_true", help="with --sweep of rms_norm_gated: also Inductor's")
    p.add_argument(
        "--rotate",
        type=int,
        default=1,
        help="with --sweep of rms_norm_gated: cycle the captured calls over N copies of the tensors "
        "(N copies larger than the L2: each call reads from memory)",
    )
    args = p.parse_args(argv)
    bw = copy_gbps()
    print(f"{torch.cuda.get_device_name()}; copy bandwidth {bw:.0f} GB/s (read+write)")
    if args.sweep:
        dtype = getattr(torch, args.dtype)
        for op in args.ops:
            if op == "rms_norm_gated":
                for h in args.hidden:
                    for t in args.rows:
                        kw = {"inductor": args.inductor, "rotate": args.rotate}
                        rows = sweep_gated(t, h, dtype, args.group, **kw)
                        print(format_gated_sweep(t, h, dtype, args.group, rows, bw, args.rotate), flush=True)
                continue
            if op == "silu_and_mul":
                continue
            for h in args.hidden:
                for t in args.rows:
                    print(format_sweep(op, t, h, dtype, sweep_norm(op, t, h, dtype), args.top), flush=True)
        return
    results = bench_rows(args.rows, args.hidden, getattr(torch, args.dtype), args.ops, not args.out_of_place)
    print(format_table(results, bw))


if __name__ == "__main__":
    main()
