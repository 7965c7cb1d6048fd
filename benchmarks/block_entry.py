"""The cost of entering and leaving a scoped block: ``ircore.batch_invariant()`` against
``ircore.priority(...)``, no call inside (the block itself).

Why: the batch-invariant block keeps a process-wide count of open blocks that Dynamo can guard on
(``dispatch.open_invariant_blocks``: a traced call under ``trace_implementations`` reads it), in
a Python-level enter/exit over the C block; the priority block is the C block alone.

Run:  IRCORE_PROVIDERS=none PYTHONPATH=<checkout> .venv/bin/python benchmarks/block_entry.py
(alternate checkouts to compare them). Prints the minimum over 7 rounds of 100000 blocks, in us.
"""

from __future__ import annotations

import timeit

import torch

import ircore


def main() -> None:
    ircore.ops.rms_norm(torch.randn(2, 8), torch.randn(8), 1e-6)  # load (the configuration, providers)
    invariant, priority = ircore.batch_invariant(), ircore.priority(rms_norm=["native"])

    def enter_invariant() -> None:
        with invariant:
            pass

    def enter_priority() -> None:
        with priority:
            pass

    def us(fn) -> float:
        return min(timeit.repeat(fn, number=100_000, repeat=7)) / 100_000 * 1e6

    print(f"{ircore.__file__}: batch_invariant block {us(enter_invariant):.3f} us, "
          f"priority block {us(enter_priority):.3f} us")  # fmt: skip


if __name__ == "__main__":
    main()
