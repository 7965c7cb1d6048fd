"""``ircore verify``: are the installed providers correct on this machine?

Runs every active provider's implementations over each op's sample inputs on every device
present, through dispatch with the priority forced to that provider, against the op's fp64
reference (the conformance kit's case runner, :mod:`ircore.testing._conformance`). Prints a table
of cases per provider, op and device (passed, failed, declined by ``supports_args``) with the
worst error in units of the tolerance, then every failure by name, then a summary that counts
passed, failed and declined cases apart (a declined case never ran: it proves nothing). Each
batch-invariance claim is checked too (one case per op, device and dtype, labelled ``batch
invariance``: a row alone against the same row in batches of 1, 3, 64 and 1000). Exit 1 on any
failure.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ircore.errors import CONTAINED, IrcoreError
from ircore.op import all_ops
from ircore.testing._conformance import (
    DECLINED,
    DTYPES,
    FAILED,
    PASSED,
    Case,
    CaseResult,
    dtype_name,
    iter_cases,
    present_devices,
    run_case,
    select_providers,
)
from ircore.testing._invariance import claimed_entry, invariance_problem, invariance_samples
from ircore.tools.common import EXIT_OK, EXIT_PROBLEMS, parse_dtype, select_ops, table
from ircore.tools.progress import Progress


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


@dataclass
class Row:
    """The cases of one provider's implementation of one op on one device."""

    provider: str
    op: str
    device: str
    passed: int = 0
    failed: int = 0
    declined: int = 0
    worst: float | None = None  # largest error / tolerance over the cases compared

    def add(self, result: CaseResult) -> None:
        if result.status == PASSED:
            self.passed += 1
        elif result.status == FAILED:
            self.failed += 1
        else:
            self.declined += 1
        if result.worst is not None:
            self.worst = result.worst if self.worst is None else max(self.worst, result.worst)


@dataclass
class VerifyReport:
    """Every case's result, and the providers that were not verified (not active) with why."""

    devices: list[str]
    dtypes: list[str]
    seeds: list[int]
    results: list[CaseResult] = field(default_factory=list)
    not_verified: list[dict[str, str]] = field(default_factory=list)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.status == FAILED]

    @property
    def ok(self) -> bool:
        return not self.failures

    def counts(self) -> dict[str, int]:
        """Cases by outcome: ``passed`` and ``failed`` were compared; ``declined`` never ran
        (``supports_args`` did not accept them), so they say nothing about correctness."""
        out = dict.fromkeys((PASSED, FAILED, DECLINED), 0)
        for result in self.results:
            out[result.status] = out.get(result.status, 0) + 1
        return out

    def summary(self) -> str:
        """The last line of the text output: passed, failed and declined apart."""
        n = self.counts()
        where = ", ".join(self.devices)
        if not self.results:
            return f"nothing to verify: no active provider implements the selected ops ({where})"
        declined = f"{n[DECLINED]} declined by supports_args (not run)"
        if n[FAILED]:
            cases = len(self.results)
            return f"{n[FAILED]} of {cases} cases failed on {where}; {n[PASSED]} passed, {declined}"
        if not n[PASSED]:
            return f"nothing compared: all {n[DECLINED]} cases were declined by supports_args on {where}"
        return f"{n[PASSED]} cases passed, {declined}, none failed ({len(self.results)} cases on {where})"

    def rows(self) -> list[Row]:
        rows: dict[tuple[str, str, str], Row] = {}
        for result in self.results:
            c = result.case
            rows.setdefault((c.provider, c.op, c.device), Row(c.provider, c.op, c.device)).add(result)
        return list(rows.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "devices": self.devices,
            "dtypes": self.dtypes,
            "seeds": self.seeds,
            "cases": len(self.results),
            **self.counts(),  # passed, failed, declined (declined cases never ran)
            "rows": [{**r.__dict__, "worst": _finite(r.worst)} for r in self.rows()],
            "failures": [
                {
                    "case": str(r.case),
                    "provider": r.case.provider,
                    "op": r.case.op,
                    "device": r.case.device,
                    "dtype": dtype_name(r.case.dtype),
                    "seed": r.case.seed,
                    "sample": r.case.label,
                    "message": r.message,
                    "worst": _finite(r.worst),
                }
                for r in self.failures
            ],
            "not_verified": self.not_verified,
        }


def verify(
    providers: Sequence[str],
    *,
    ops: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    dtypes: Sequence[torch.dtype] = DTYPES,
    seeds: Sequence[int] = (0, 1),
    progress: Callable[[int], Progress] | None = None,
) -> VerifyReport:
    """Run every case of the named providers' registered implementations; never raises on a miss."""
    devices = list(devices or present_devices())
    report = VerifyReport(devices, [dtype_name(d) for d in dtypes], list(seeds))
    cases = [
        case_args
        for name in providers
        for case_args in iter_cases(name, devices=devices, dtypes=dtypes, seeds=seeds, ops=ops)
    ]
    bar = progress(len(cases)) if progress is not None else None
    try:
        for case, args in cases:
            if bar is not None:
                bar.advance(f"{case.provider}.{case.op} {case.device} {dtype_name(case.dtype)}")
            report.results.append(run_case(case, args))
    finally:
        if bar is not None:
            bar.close()
    report.results += invariance_results(providers, ops=ops, devices=devices, dtypes=dtypes)
    return report


def invariance_results(
    providers: Sequence[str],
    *,
    ops: Sequence[str] | None,
    devices: Sequence[str],
    dtypes: Sequence[torch.dtype],
) -> list[CaseResult]:
    """Each batch-invariance claim, checked on each op's first sample per device and dtype (the
    row alone against the row inside batches of 1, 3, 64 and 1000; ircore.testing._invariance):
    one result per check, labelled ``batch invariance``."""
    results = []
    for name in providers:
        for op_name, op in sorted(all_ops().items()):
            if (ops is not None and op_name not in ops) or claimed_entry(op, name) is None:
                continue
            for device in devices:
                for dtype in dtypes:
                    for label, args in list(invariance_samples(op, dtype, device))[:1]:
                        case = Case(name, op_name, device, dtype, 0, -1, f"batch invariance, {label}")
                        try:
                            status, problem = invariance_problem(op, name, args)
                        except CONTAINED as exc:
                            status, problem = FAILED, f"{case}: {type(exc).__name__}: {exc}"
                        results.append(CaseResult(case, status, problem or ""))
    return results



def _print_text(report: VerifyReport) -> None:
    rows = report.rows()
    if rows:
        print(
            table(
                [
                    [
                        r.provider,
                        r.op,
                        r.device,
                        str(r.passed),
                        str(r.failed),
                        str(r.declined),
                        "-" if r.worst is None else f"{r.worst:.2f}",
                    ]
                    for r in rows
                ],
                ["provider", "op", "device", "passed", "failed", "declined", "worst error/tolerance"],
            )
        )
    for other in report.not_verified:
        print(f"  not verified: {other['name']} is {other['state']}: {other['reason']}")
    for failure in report.failures:
        print(f"FAILED {failure.message}")
    print(report.summary())


def check_devices(devices: Sequence[str]) -> None:
    """Each device must exist here: the error names it and what torch said."""
    for device in devices:
        try:
            torch.empty(1, device=device)
        except (RuntimeError, AssertionError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise IrcoreError(
                f"--device {device!r} is not usable here ({first}); present: {present_devices()}"
            ) from None


def cmd_verify(args: argparse.Namespace) -> int:
    select_ops(args.op)
    if args.seeds < 1:
        raise IrcoreError(f"--seeds {args.seeds}: expected at least 1")
    devices = args.device or present_devices()
    check_devices(devices)
    providers, others = select_providers(args.provider)
    dtypes = args.dtype or list(DTYPES)
    report = verify(
        providers,
        ops=args.op,
        devices=devices,
        dtypes=dtypes,
        seeds=range(args.seeds),
        progress=lambda total: Progress(total, "verify", enabled=None if not args.json else False),
    )
    report.not_verified = others
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_text(report)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def add_parser(sub: Any) -> None:
    """Register ``ircore verify`` on the command's subparsers."""
    p = sub.add_parser(
        "verify",
        help="check every active provider against the fp64 reference on this machine",
        description=(
            "Run every active provider's implementations over each op's sample inputs, on every "
            "device present, against the op's fp64 reference within its tolerance. Exit 0 when "
            "every case passes, 1 on any failure, 2 on bad usage or configuration."
        ),
    )
    p.add_argument("--provider", action="extend", nargs="+", metavar="NAME", help="only these providers")
    p.add_argument("--op", action="extend", nargs="+", metavar="OP", help="only these ops")
    p.add_argument(
        "--device",
        action="extend",
        nargs="+",
        metavar="DEV",
        help="only these devices (default: all present)",
    )
    p.add_argument(
        "--dtype",
        action="extend",
        nargs="+",
        type=parse_dtype,
        help="only these dtypes (default: all three)",
    )
    p.add_argument("--seeds", type=int, default=2, metavar="N", help="sample seeds per dtype (default 2)")
    p.add_argument("--json", action="store_true", help="machine-readable output (no progress bar)")
    p.set_defaults(func=cmd_verify)
