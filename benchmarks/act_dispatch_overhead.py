"""Eager dispatch cost of the gated activations: the ops that read argument values (a str, floats)
and so are not declared ``cache_by_signature``, next to the ones that are.

Why: ``gelu_and_mul``'s ``approximate`` (a str) and the float values of ``fatrelu_and_mul`` and
``swigluoai_and_mul`` are checked on every call, so these ops cannot use the signature cache; this
measures what that costs per eager call. Method as ``dispatch_overhead.py --stub``: a stub
implementation (returns x) registered for each op with an accepting predicate; the eager call
minus the stub called directly, the minimum over many short interleaved rounds (preemption only
ever adds time, so the figure holds on a busy machine). One thread, inference mode, x (16, 8192).

Run: ``.venv/bin/python benchmarks/act_dispatch_overhead.py [--rounds N] [--calls N] [--json PATH]``
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dispatch_overhead import interleaved_medians

CASES = (  # (op, parameters); silu_and_mul and mul_and_silu are cache_by_signature
    ("silu_and_mul", ()),
    ("mul_and_silu", ()),
    ("gelu_and_mul", ("tanh",)),
    ("fatrelu_and_mul", (0.1,)),
    ("swigluoai_and_mul", (1.702, 7.0)),
)


def measure(rounds: int, calls: int) -> list[dict]:
    import torch

    import ircore

    torch.set_num_threads(1)
    rows = []
    x = torch.randn(16, 8192, dtype=torch.bfloat16)
    for name, params in CASES:
        op = ircore.get_op(name)

        def stub(*args):  # type: ignore[no-untyped-def]
            return args[0]

        stub.__annotations__ = dict(op.native.__annotations__)  # the native schema, as every impl's
        stub.__signature__ = inspect.signature(op.native)  # type: ignore[attr-defined]

        def accept(*args):  # type: ignore[no-untyped-def]
            return True

        accept.__signature__ = stub.__signature__  # type: ignore[attr-defined]
        op.register_impl("bench_stub", stub, supports_args=accept, cache_by_signature=True)
        ircore.set_priority(**{name: ["bench_stub"]})
        try:
            with torch.inference_mode():
                assert ircore.explain(op, x, *params).chosen == "bench_stub"
                fns = {
                    "eager": lambda op=op, params=params: op(x, *params),
                    "direct": lambda params=params: stub(x, *params),
                }
                best = interleaved_medians(fns, rounds, calls, reduce=min)
        finally:
            ircore.set_priority(**{name: None})
            op.unregister_impl("bench_stub")
        rows.append(
            {
                "op": name,
                "params": list(params),
                "signature_cache": op.signature_spec is not None,
                "eager_us": best["eager"] / 1e3,
                "direct_us": best["direct"] / 1e3,
                "overhead_us": (best["eager"] - best["direct"]) / 1e3,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    rows = measure(args.rounds, args.calls)
    print(f"{'op':19} {'sig cache':>9} {'overhead us':>12} {'eager us':>9}")
    for r in rows:
        print(f"{r['op']:19} {r['signature_cache']!s:>9} {r['overhead_us']:12.3f} {r['eager_us']:9.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
