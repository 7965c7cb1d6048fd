"""``ircore bench``: which provider is fastest per op on this machine, measured.

For each op, shape and dtype, every active provider whose ``supports_args`` accepts the inputs
and ``native`` are timed through the eager call (priority forced to one provider at a time) and,
on an NVIDIA GPU, as CUDA-graph replays (:mod:`ircore.tools.timing`: interleaved rounds,
medians). The order per op puts a provider ahead of the one before it only when it is faster by
more than the tie margin (geometric mean of the time ratios over the shapes both accept), so
near-equal providers keep their suggested order. ``--write-config`` writes that order to an
``ircore.toml`` (:mod:`ircore.tools.config_file`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ircore import dispatch
from ircore.errors import IrcoreError
from ircore.op import IrOp
from ircore.platform import current_platform
from ircore.providers._manager import MANAGER
from ircore.testing._conformance import dtype_name
from ircore.tools import config_file, timing
from ircore.tools.common import EXIT_OK, parse_dtype, parse_shape, select_ops, table
from ircore.tools.progress import Progress
from ircore.tools.verify import check_devices

NATIVE = dispatch.NATIVE
EAGER, GRAPH = "eager", "graph"
CPU_SHAPES = ((1, 4096), (16, 4096), (256, 4096))
GPU_SHAPES = ((1, 4096), (16, 4096), (256, 4096), (4096, 4096), (16384, 8192))
DEFAULT_TIE_MARGIN = 0.05


@dataclass
class Measurement:
    """One op on one shape and dtype: seconds per call of each candidate, per kind of timing."""

    op: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    times: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> candidate -> s
    skipped: dict[str, str] = field(default_factory=dict)  # candidate -> why it was not timed
    failed: dict[str, str] = field(default_factory=dict)  # candidate -> the exception its call raised

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "shape": list(self.shape),
            "dtype": dtype_name(self.dtype),
            "us": {kind: {c: round(s * 1e6, 4) for c, s in t.items()} for kind, t in self.times.items()},
            "skipped": self.skipped,
            "failed": self.failed,
        }


def fastest_order(
    measurements: Sequence[Measurement], suggested: Sequence[str], kind: str, margin: float
) -> list[str]:
    """``suggested`` reordered by speed: a candidate passes the one before it only when it is
    faster by more than ``margin`` (geometric mean of their time ratios over the measurements
    that timed both); otherwise they keep their suggested order. A candidate timed on no shape
    (its ``supports_args`` declined them all) keeps its suggested place but never falls behind
    ``native``: without a measurement the bench does not switch it off. A candidate whose call
    raised on any input goes behind ``native`` (off for this op, as far as the order goes)."""

    def faster(a: str, b: str) -> bool:  # is b faster than a, beyond the margin?
        logs = [
            math.log(t[b] / t[a])
            for m in measurements
            if (t := m.times.get(kind, {})) and a in t and b in t and t[a] > 0 and t[b] > 0
        ]
        return bool(logs) and math.exp(sum(logs) / len(logs)) < 1.0 - margin

    failing = [c for c in suggested if any(c in m.failed for m in measurements)]
    timed = {c for m in measurements for c in m.times.get(kind, {})} - set(failing)
    order = [c for c in suggested if c in timed]
    for _ in range(len(order)):  # bubble passes; a bound, as pairwise verdicts need not be transitive
        swapped = False
        for i in range(len(order) - 1):
            if faster(order[i], order[i + 1]):
                order[i], order[i + 1] = order[i + 1], order[i]
                swapped = True
        if not swapped:
            break
    for i, name in enumerate(suggested):
        if name in timed or name in failing:
            continue
        before = [c for c in suggested[:i] if c in order]  # after these, as suggested...
        at = max((order.index(c) + 1 for c in before), default=0)
        if NATIVE in order:  # ...but ahead of native
            at = min(at, order.index(NATIVE))
        order.insert(at, name)
    return order + failing


def suggested_order(op: IrOp) -> list[str]:
    """The providers' suggested order for ``op`` among the usable ones, ``native`` last."""
    usable = [p for p in dispatch.default_priority(op) if p not in dispatch.STATE.blocked]
    return [*usable, NATIVE]


def _try(m: Measurement, op: IrOp, provider: str, call: Callable[[], Any], args: tuple) -> bool:
    """Whether dispatch runs ``provider`` for these arguments and the call succeeds; if not, note
    why in ``m.skipped`` (not chosen, e.g. declined) or ``m.failed`` (raised)."""
    try:
        with dispatch.priority(**{op.name: [provider]}):
            explanation = op.explain(*args)
            if explanation.chosen != provider:
                m.skipped[provider] = next(s.reason for s in explanation.steps if s.provider == provider)
                return False
            call()
    except Exception as exc:
        m.failed[provider] = f"raised {type(exc).__name__}: {exc}"
        return False
    return True


def _scoped(runner: timing.Runner, op: IrOp, provider: str) -> timing.Runner:
    def run(n: int) -> float:
        with dispatch.priority(**{op.name: [provider]}):
            return runner(n)

    return run


def measure(
    op: IrOp,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    *,
    rounds: int,
    round_s: float,
    graphs: bool,
) -> Measurement:
    """Time every candidate that accepts ``op``'s inputs of ``shape`` and ``dtype`` on ``device``."""
    assert op.make_inputs is not None
    args = op.make_inputs(shape, dtype, device)
    op.check_args(*args)
    m = Measurement(op.name, shape, dtype)
    device_type = torch.device(device).type
    eager: dict[str, timing.Runner] = {}
    graph: dict[str, timing.Runner] = {}

    def call() -> Any:
        return op(*args)

    for provider in suggested_order(op):
        if not _try(m, op, provider, call, args):
            continue
        eager[provider] = _scoped(timing.eager_runner(call, device_type), op, provider)
        if graphs:
            try:
                with dispatch.priority(**{op.name: [provider]}):
                    graph[provider] = timing.graph_runner(call)
            except Exception as exc:  # e.g. a kernel that cannot be captured: eager figures stay
                m.skipped[f"{provider} ({GRAPH})"] = f"CUDA-graph capture failed: {type(exc).__name__}: {exc}"
    m.times[EAGER] = timing.interleaved_medians(eager, rounds=rounds, round_s=round_s)
    if graph:
        m.times[GRAPH] = timing.interleaved_medians(graph, rounds=rounds, round_s=round_s)
    return m


@dataclass
class BenchReport:
    device: str
    platform: str
    rank_by: str
    tie_margin: float
    measurements: list[Measurement] = field(default_factory=list)
    order: dict[str, list[str]] = field(default_factory=dict)
    suggested: dict[str, list[str]] = field(default_factory=dict)
    config_written: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "platform": self.platform,
            "torch": torch.__version__,
            "rank_by": self.rank_by,
            "tie_margin": self.tie_margin,
            "results": [m.to_dict() for m in self.measurements],
            "suggested": self.suggested,
            "order": self.order,
            "config_written": self.config_written,
        }


def run_bench(
    ops: Sequence[IrOp],
    shapes: Sequence[tuple[int, ...]],
    dtypes: Sequence[torch.dtype],
    device: str,
    *,
    rounds: int,
    round_s: float,
    graphs: bool,
    tie_margin: float,
    progress: Callable[[int], Progress] | None = None,
) -> BenchReport:
    rank_by = GRAPH if graphs else EAGER
    report = BenchReport(device, current_platform().describe(), rank_by, tie_margin)
    bar = progress(len(ops) * len(shapes) * len(dtypes)) if progress is not None else None
    try:
        for op in ops:
            for dtype in dtypes:
                for shape in shapes:
                    if bar is not None:
                        bar.advance(f"{op.name} {_shape(shape)} {dtype_name(dtype)}")
                    report.measurements.append(
                        measure(op, shape, dtype, device, rounds=rounds, round_s=round_s, graphs=graphs)
                    )
                    if graphs:
                        torch.cuda.empty_cache()
            mine = [m for m in report.measurements if m.op == op.name]
            report.suggested[op.name] = suggested_order(op)
            report.order[op.name] = fastest_order(mine, report.suggested[op.name], rank_by, tie_margin)
    finally:
        if bar is not None:
            bar.close()
    return report


# ---------------------------------------------------------------------- output
def _shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def _cell(m: Measurement, kind: str, candidate: str) -> str:
    times = m.times.get(kind, {})
    if candidate not in times:
        return "-"
    t, native = times[candidate], times.get(NATIVE)
    ratio = f" ({native / t:.2f}x)" if native and candidate != NATIVE else ""
    return f"{t * 1e6:.2f} us{ratio}"


def _print_text(report: BenchReport) -> None:
    candidates: list[str] = []
    for order in report.suggested.values():
        candidates += [c for c in order if c not in candidates and c != NATIVE]
    candidates.append(NATIVE)
    rows = [
        [m.op, _shape(m.shape), dtype_name(m.dtype), kind] + [_cell(m, kind, c) for c in candidates]
        for m in report.measurements
        for kind in m.times
    ]
    print(f"{report.platform}, torch {torch.__version__}; median time per call (speed-up over native)")
    print(table(rows, ["op", "shape", "dtype", "timing", *candidates]))
    for m in report.measurements:
        for who, why in [*m.skipped.items(), *m.failed.items()]:
            print(f"  {m.op} {_shape(m.shape)} {dtype_name(m.dtype)}: {who} not timed: {why}")
    margin = f"{report.tie_margin:.0%}"
    print(f"\nfastest first, by {report.rank_by} time (within {margin} the suggested order stays):")
    for name, order in report.order.items():
        changed = (
            "" if order == report.suggested[name] else f"  (suggested: {', '.join(report.suggested[name])})"
        )
        print(f"  {name}: {', '.join(order)}{changed}")
    if report.config_written:
        print(
            f"wrote the priority of {len(report.order)} op(s) to {report.config_written}; it applies where "
            "ircore reads it (./ircore.toml in the working directory, or IRCORE_CONFIG=<path>)"
        )


def _select_ops(names: Sequence[str] | None) -> list[IrOp]:
    chosen = select_ops(names)
    for op in chosen:
        if op.make_inputs is None:
            raise IrcoreError(
                f"op {op.name!r} has no input generator (make_inputs); it cannot be benchmarked"
            )
    return chosen


def cmd_bench(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.round_ms <= 0 or not 0 <= args.tie_margin < 1:
        raise IrcoreError("--rounds must be >= 1, --round-ms > 0 and --tie-margin in [0, 1)")
    plat = current_platform()
    device = args.device or plat.device_type
    check_devices([device])
    device_type = torch.device(device).type
    graphs = device_type == "cuda" and torch.version.cuda is not None and not args.no_graphs
    ops = _select_ops(args.op)
    MANAGER.ensure_loaded()
    if args.write_config is not None:
        config_file.check_writable(args.write_config)
    shapes = args.shape or (GPU_SHAPES if device_type != "cpu" else CPU_SHAPES)
    report = run_bench(
        ops,
        shapes,
        args.dtype or [torch.bfloat16],
        device,
        rounds=args.rounds,
        round_s=args.round_ms / 1e3,
        graphs=graphs,
        tie_margin=args.tie_margin,
        progress=lambda total: Progress(total, "bench", enabled=None if not args.json else False),
    )
    if args.write_config is not None:
        measured = ", ".join(
            dict.fromkeys(f"{_shape(m.shape)} {dtype_name(m.dtype)}" for m in report.measurements)
        )
        config_file.write_priority(
            args.write_config,
            report.order,
            note=(
                f"Measured by `ircore bench` on {report.platform}, torch {torch.__version__}, by "
                f"{report.rank_by} time over {measured}; tie margin {report.tie_margin:.0%}."
            ),
        )
        report.config_written = str(args.write_config)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_text(report)
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """Register ``ircore bench`` on the command's subparsers."""
    p = sub.add_parser(
        "bench",
        help="time every active provider per op here; optionally write the fastest order to ircore.toml",
        description=(
            "Time every active provider and native per op, shape and dtype on this machine (the eager "
            "call and, on an NVIDIA GPU, CUDA-graph replay), in interleaved rounds, reporting medians. "
            "The order per op moves a provider ahead only when it is faster by more than the tie "
            "margin. Exit 0 when done, 2 on bad usage or configuration."
        ),
    )
    p.add_argument("--op", action="extend", nargs="+", metavar="OP", help="only these ops (default: all)")
    p.add_argument(
        "--shape",
        action="extend",
        nargs="+",
        type=parse_shape,
        metavar="TxH",
        help="shapes of x (default: 1x4096 16x4096 256x4096 on CPU; up to 16384x8192 on a GPU)",
    )
    p.add_argument(
        "--dtype", action="extend", nargs="+", type=parse_dtype, help="dtypes (default: bfloat16)"
    )
    p.add_argument("--device", help="torch device (default: this machine's accelerator, else cpu)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds per shape (default 15)")
    p.add_argument(
        "--round-ms", type=float, default=10.0, help="length of one round per candidate (default 10)"
    )
    p.add_argument(
        "--tie-margin",
        type=float,
        default=DEFAULT_TIE_MARGIN,
        help="a provider must be this much faster to move ahead (default 0.05 = 5%%)",
    )
    p.add_argument("--no-graphs", action="store_true", help="on a GPU, time and rank by eager calls only")
    p.add_argument(
        "--write-config",
        type=Path,
        metavar="PATH",
        help="write the measured order per op to this ircore.toml (keeps its other settings, not comments)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output (no progress bar)")
    p.set_defaults(func=cmd_bench)
