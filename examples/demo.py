"""A tour of ircore in one minute: ops, providers, priorities, explain, torch.compile.

Run with ``make demo`` (sets everything up first) or ``python examples/demo.py``.
"""

from __future__ import annotations

import logging

import torch

import ircore


def section(title: str) -> None:
    print(f"\n=== {title} ===")


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 4096, dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    weight = torch.ones(4096, dtype=torch.bfloat16)

    section("installed providers (ircore list)")
    from ircore.cli import main as cli

    cli(["list"])

    section("an eager call goes to the first provider that supports it")
    out = ircore.ops.rms_norm(x, weight, 1e-6)
    print(ircore.explain("rms_norm", x, weight, 1e-6))
    reference = ircore.ops.rms_norm.native(x, weight, 1e-6)
    print(f"max |out - native| = {(out.float() - reference.float()).abs().max().item():.3g}")

    section("fused residual add + RMSNorm never mutates its inputs")
    before = x.clone()
    normed, new_residual = ircore.ops.fused_add_rms_norm(x, residual, weight, 1e-6)
    shapes = f"{tuple(normed.shape)}, {tuple(new_residual.shape)}"
    print(f"x unchanged: {torch.equal(x, before)}; outputs {shapes}")

    section("priorities: process-wide, or scoped to a block (per thread / task)")
    print("default rms_norm priority:", ircore.get_priority("rms_norm"))
    with ircore.priority(rms_norm=["native"]):
        print("inside the block:        ", ircore.get_priority("rms_norm"))
        print("runs:", ircore.explain("rms_norm", x, weight, 1e-6).chosen)

    section("bad input: one clear error, whichever provider would have run")
    try:
        ircore.ops.rms_norm(x, torch.ones(1024), 1e-6)
    except ircore.InvalidArgumentError as exc:
        print(f"InvalidArgumentError: {exc}")

    section("torch.compile sees torch.ops.ircore.* nodes")
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def block(h, r):
        h, r = ircore.ops.fused_add_rms_norm(h, r, weight, 1e-6)
        return ircore.ops.silu_and_mul(torch.cat([h, h], dim=-1)), r

    compiled = torch.compile(block, backend=record, fullgraph=True)
    compiled(x, residual)
    targets = sorted({str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"})
    print("graph ops:", ", ".join(t for t in targets if t.startswith("ircore")))

    section("DEBUG logging says which implementation ran")
    logging.basicConfig(format="  %(name)s %(levelname)s: %(message)s")
    logging.getLogger("ircore").setLevel(logging.DEBUG)
    ircore.ops.silu_and_mul(torch.randn(4, 256))
    logging.getLogger("ircore").setLevel(logging.WARNING)
    print("\ndone: see README.md for configuration, the CLI, and writing a provider.")


if __name__ == "__main__":
    main()
