"""ircore.tools.timing: what its runners keep alive (the figures of ``ircore bench`` and the GPU
benchmarks rest on them)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from ircore.tools.timing import graph_runner, interleaved_medians


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_graph_runner_keeps_the_tensors_its_graph_reads_and_writes():
    def make() -> tuple:
        x = torch.ones(1 << 20, device="cuda")  # referenced by the call only, as a benchmark's inputs
        return graph_runner(lambda: x.mul_(1.0), calls_per_graph=4), weakref.ref(x)

    run, x_ref = make()
    gc.collect()
    assert x_ref() is not None, "the graph's input was freed while the runner can still replay it"
    clobber = torch.full((1 << 20,), 7.0, device="cuda")  # would take the freed block
    assert run(3) > 0 and interleaved_medians({"a": run}, rounds=3, round_s=0.001)["a"] > 0
    torch.cuda.synchronize()
    assert bool((x_ref() == 1.0).all()) and bool((clobber == 7.0).all())
    del run
    gc.collect()
    assert x_ref() is None  # and no longer than the runner
