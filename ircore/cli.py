"""The ``ircore`` command: ``list``, ``explain``, ``doctor``, ``verify``, ``bench``, ``check-dist``;
``--json`` on each.

Exit codes: 0 fine; 1 ``doctor`` found a problem (a failed, invalid, conflicting or incompatible
provider, an unavailable one the configuration names, or a bad configuration), ``verify`` a
failing case, or ``check-dist`` a metadata problem; 2 bad usage or bad configuration (the message
names the source and the key). ``verify``, ``bench`` and ``check-dist`` live in
:mod:`ircore.tools`; this module only wires them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as stdlib_platform
import sys
from importlib import metadata
from typing import Any

import torch

import ircore
from ircore import _signature, dispatch
from ircore._state import STATE
from ircore.config import find_config_file, unknown_environment
from ircore.errors import IrcoreError
from ircore.providers._discovery import discover
from ircore.providers._manager import MANAGER
from ircore.providers._records import ProviderState
from ircore.tools import bench, distcheck, verify
from ircore.tools.common import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, parse_dtype, parse_shape, table


def _version_of(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _providers() -> list[dict[str, Any]]:
    return [record.to_dict() for record in MANAGER.current_records()]


def _ops() -> list[dict[str, Any]]:
    out = []
    for name, op in sorted(ircore.all_ops().items()):
        names, source = dispatch.effective_priority(op, dispatch.SCOPE.get())
        out.append(
            {
                "op": name,
                "priority": list(names),
                "source": source,
                "implementations": ["native", *op.impls],
                "signature": f"{name}{op.signature}",
                # what batch-invariant mode may run: each implementation's claim, in words
                "batch_invariant": {p: op.invariance_of(p) for p in ["native", *op.impls]},
                # whether the op declares calls that depend on the batch by definition (refused)
                "batch_dependent_calls": op.batch_dependent is not None,
            }
        )
    return out


#: appended where the op refuses the calls that depend on the batch by its definition
_DEPENDENT_NOTE = "; not batch-dependent calls"


def _qualifying(claims: dict[str, str]) -> str:
    """``vllm_c (some calls), native (fixed-order form)``: who may run in batch-invariant mode."""
    out = []
    for provider, claim in claims.items():
        if claim.startswith("claims batch invariance for some"):
            out.append(f"{provider} (some calls)")
        elif claim == "claims batch invariance" or claim == "native is batch-invariant":
            out.append(provider)
        elif claim.startswith("native runs its batch-invariant form"):
            out.append("native (fixed-order form)")
    return ", ".join(out) or "none: calls raise in the mode"


def _mode_line() -> str:
    on = dispatch.batch_invariant_active()
    where = "configured" if STATE.batch_invariant else "this block" if on else ""
    return f"batch-invariant mode: {'on (' + where + ')' if on else 'off'}"


# ---------------------------------------------------------------------- commands
def _op_libraries() -> list[dict[str, Any]]:
    records = MANAGER.op_libraries.records
    return [records[name].to_dict() for name in sorted(records)]


def cmd_list(args: argparse.Namespace) -> int:
    MANAGER.ensure_loaded()
    providers, ops, libraries = _providers(), _ops(), _op_libraries()
    if args.json:
        print(json.dumps({"providers": providers, "op_libraries": libraries, "ops": ops}, indent=2))
        return EXIT_OK
    if libraries:  # distributions declaring ops of their own (`ircore.ops` entry points)
        print("op libraries:")
        rows = [
            [p["name"], f"{p['distribution']} {p['version']}", p["state"], p["reason"]] for p in libraries
        ]
        print(table(rows, ["name", "distribution", "state", "reason"]))
        print()
    print("providers:")
    if providers:
        rows = [
            [p["name"], f"{p['distribution']} {p['version']}", p["state"], p["reason"]] for p in providers
        ]
        print(table(rows, ["name", "distribution", "state", "reason"]))
        for p in providers:
            for warning in p["warnings"]:
                print(f"  warning: {p['name']}: {warning}")
    else:
        print("  (none installed: pip install ircore-provider-<name>)")
    print("\nops:")
    rows = [
        [
            o["op"],
            ", ".join(o["priority"]),
            o["source"],
            ", ".join(o["implementations"]),
            _qualifying(o["batch_invariant"]) + _DEPENDENT_NOTE * o["batch_dependent_calls"],
        ]
        for o in ops
    ]
    print(table(rows, ["op", "priority", "from", "implementations", "batch-invariant"]))
    print(_mode_line())
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    op = ircore.get_op(args.op)
    if op.make_inputs is None:
        raise IrcoreError(f"op {op.name!r} has no input generator; call ircore.explain() from Python")
    try:
        inputs = op.make_inputs(args.shape, args.dtype, args.device)
    except (RuntimeError, AssertionError) as exc:
        raise IrcoreError(f"cannot make inputs on device {args.device!r}: {exc}") from None
    if args.batch_invariant:
        with ircore.batch_invariant():
            ex = ircore.explain(op, *inputs)
    else:
        ex = ircore.explain(op, *inputs)
    if args.json:
        print(
            json.dumps(
                {
                    **ex.to_dict(),
                    "shape": list(args.shape),
                    "dtype": str(args.dtype).replace("torch.", ""),
                    "device": args.device,
                },
                indent=2,
            )
        )
    else:
        # the shape is make_inputs' (x's for the norms, the query's for the rotary ops, ...)
        shape = "x".join(map(str, args.shape))
        dtype = str(args.dtype).replace("torch.", "")
        print(f"{ex}\n  (inputs: {op.name}.make_inputs({shape}, {dtype}, {args.device}))")
    return EXIT_OK


def _warnings(providers: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What does not stop a provider loading but will bite later: per provider, one line each.

    A hook function left unmarked (from its record), and a ``Requires-Dist: ircore`` without an
    upper bound (from its metadata: a future core with another provider API would load it).
    """
    out = [{"provider": p["name"], "warning": w} for p in providers for w in p["warnings"]]
    for cand in sorted(discover(), key=lambda c: c.name):
        unbounded = distcheck.unbounded_core_requirement(cand.requires)
        if unbounded is not None:
            out.append(
                {
                    "provider": cand.name,
                    "warning": (
                        f"{cand.distribution} {cand.version} {unbounded}, so a future ircore with an "
                        "incompatible provider API would still load it; its next release should pin a "
                        f"range, e.g. {distcheck.example_pin()}"
                    ),
                }
            )
    return out


def _doctor_report() -> dict[str, Any]:
    plat = ircore.current_platform()
    config_error = None
    try:
        MANAGER.ensure_loaded()
    except IrcoreError as exc:
        config_error = str(exc)
    try:
        config_file = find_config_file()
    except IrcoreError as exc:
        config_file, config_error = None, config_error or str(exc)
    env = {var: value for var, value in sorted(os.environ.items()) if var.startswith("IRCORE_")}
    providers = _providers()
    return {
        "ircore": ircore.__version__,
        "api_version": ircore.API_VERSION,
        "python": stdlib_platform.python_version(),
        "platform": plat.describe(),
        "platform_kind": plat.kind,
        "torch": torch.__version__,
        "triton": _version_of("triton"),
        # the compiled call-signature helper: not an error when missing, only a slower eager path
        "signature_helper": "loaded" if _signature.signature is not None else _signature.unavailable_reason,
        "config_file": str(config_file) if config_file else None,
        "environment": env,
        "unknown_environment": unknown_environment(os.environ),
        "config_error": config_error,
        # tracing records the chosen implementations instead of torch.ops.ircore.* (docs/compiling.md)
        "trace_implementations": STATE.tracing_implementations,
        # only implementations claiming batch invariance run (docs/batch-invariance.md)
        "batch_invariant": STATE.batch_invariant,
        "providers": providers,
        "not_active": [p for p in providers if p["state"] != ProviderState.ACTIVE.value],
        # distributions declaring ops of their own; a broken one is a problem as a provider is
        "op_libraries": _op_libraries(),
        # what strict mode refuses: broken providers, and unavailable ones the configuration names
        "broken": sorted(r.name for r in MANAGER.problems()),
        "removed": {p["name"]: p["removed"] for p in providers if p["removed"]},
        # not problems (the exit code ignores them): what will bite later
        "warnings": _warnings(providers),
    }


def cmd_doctor(args: argparse.Namespace) -> int:
    report = _doctor_report()
    failing = bool(report["broken"] or report["config_error"])
    if args.json:
        print(json.dumps(report, indent=2))
        return EXIT_PROBLEMS if failing else EXIT_OK
    print(f"ircore {report['ircore']} (provider API {report['api_version']}), Python {report['python']}")
    print(f"platform: {report['platform']}")
    print(f"torch {report['torch']}, triton {report['triton'] or 'not installed'}")
    helper = report["signature_helper"]
    print(
        "eager signature cache: "
        + ("on (compiled helper loaded)" if helper == "loaded" else f"off, slower eager calls ({helper})")
    )
    searched = "none (IRCORE_CONFIG, ./ircore.toml, ./pyproject.toml [tool.ircore])"
    print(f"config file: {report['config_file'] or searched}")
    print(
        "environment: "
        + (", ".join(f"{k}={v}" for k, v in report["environment"].items()) or "no IRCORE_* variables set")
    )
    if report["unknown_environment"]:
        ignored = ", ".join(report["unknown_environment"])
        print(f"ignored (read by neither ircore nor an installed provider): {ignored}")
    if report["config_error"]:
        print(f"configuration error: {report['config_error']}")
    if report["trace_implementations"]:
        print("trace_implementations: on (graphs record the chosen implementations, not torch.ops.ircore.*)")
    print(
        "batch-invariant mode: "
        + (
            "on (configured: only implementations claiming invariance run; `ircore list` says which)"
            if report["batch_invariant"]
            else "off (ircore.batch_invariant() or IRCORE_BATCH_INVARIANT=1 turns it on)"
        )
    )
    active = [p["name"] for p in report["providers"] if p["state"] == "active"]
    if not report["providers"] and report["config_error"]:
        # a configuration ircore cannot read stops it before any provider loads: "none" would mislead
        installed = ", ".join(sorted({c.name for c in discover()})) or "none"
        print(f"providers: not loaded, because of the configuration error above (installed: {installed})")
    else:
        print(f"active providers: {', '.join(active) or 'none'}")
    for p in report["not_active"]:
        print(f"  {p['name']} ({p['distribution']} {p['version']}): {p['state']}: {p['reason']}")
    for p in report["op_libraries"]:
        print(f"op library {p['name']} ({p['distribution']} {p['version']}): {p['state']}: {p['reason']}")
    for name, removed in report["removed"].items():
        for op, how in removed.items():
            print(f"  {name}: its implementation of {op} was {how}")
    for warning in report["warnings"]:
        print(f"  warning: {warning['provider']}: {warning['warning']}")
    if failing:
        print(f"problems: {', '.join(report['broken']) or 'configuration'}; see the reasons above")
    else:
        print("no problems found")
    return EXIT_PROBLEMS if failing else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ircore",
        description="Inspect ircore's ops, installed providers and dispatch decisions.",
    )
    parser.add_argument("--version", action="version", version=f"ircore {ircore.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_list = sub.add_parser("list", help="every provider with its state, and every op with its priority")
    p_list.add_argument("--json", action="store_true", help="machine-readable output")
    p_list.set_defaults(func=cmd_list)

    p_explain = sub.add_parser("explain", help="which implementation a call runs, and why the others don't")
    p_explain.add_argument("op", help="op name, e.g. rms_norm")
    p_explain.add_argument("--shape", type=parse_shape, default=(16, 4096), help="shape of x, e.g. 16x4096")
    p_explain.add_argument(
        "--dtype", type=parse_dtype, default=torch.bfloat16, help="float32, float16 or bfloat16"
    )
    p_explain.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda:0")
    p_explain.add_argument("--json", action="store_true", help="machine-readable output")
    p_explain.add_argument(
        "--batch-invariant", action="store_true", help="explain the call inside ircore.batch_invariant()"
    )
    p_explain.set_defaults(func=cmd_explain)

    p_doctor = sub.add_parser("doctor", help="platform, versions, config in effect, every provider problem")
    p_doctor.add_argument("--json", action="store_true", help="machine-readable output")
    p_doctor.set_defaults(func=cmd_doctor)

    verify.add_parser(sub)
    bench.add_parser(sub)
    distcheck.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (IrcoreError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"ircore: error: {message}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
