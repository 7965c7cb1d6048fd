"""GPU timing helpers shared by the project's GPU benchmarks.

- :func:`graph_us`: per-call time of back-to-back calls captured in one CUDA graph and replayed
  (the kernel's own time, launch cost excluded; what decode under CUDA graphs sees);
- :func:`eager_us`: host wall time per call of back-to-back eager calls (launch path included);
- :func:`do_bench_us`: ``triton.testing.do_bench`` median (L2 flushed between calls);
- :func:`copy_gbps`: device-to-device copy bandwidth (read + write), the '% of copy' reference.

Used by ``benchmarks/kernels_gpu.py`` and ``providers/triton/bench_gpu.py``. Imports torch
(ircore's timing helper in :func:`graph_us`, triton in :func:`do_bench_us`, lazily).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["copy_gbps", "do_bench_us", "eager_us", "graph_us"]


def graph_us(fn: Callable[[], Any], calls: int, replays: int = 10) -> float:
    """Median per-call time of ``calls`` back-to-back calls captured in one CUDA graph.

    The graph and its timing are ``ircore.tools.timing.graph_runner``'s (what ``ircore bench``
    measures); each replay is one sample.
    """
    from ircore.tools.timing import graph_runner

    run = graph_runner(fn, calls_per_graph=calls)
    run(1)
    return statistics.median(run(1) for _ in range(replays)) * 1e6


def eager_us(fn: Callable[[], Any], calls: int = 200) -> float:
    """Host wall time per call, back to back, synchronizing only at the end."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / calls


def do_bench_us(fn: Callable[[], Any], warmup: int = 25, rep: int = 100) -> float:
    """``triton.testing.do_bench`` median, in microseconds."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")) * 1e3


def copy_gbps(nbytes: int = 1 << 28) -> float:
    """Device copy bandwidth (read + write, GB/s) in this process, for the '% of copy' column."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    us = graph_us(lambda: dst.copy_(src), calls=20)
    return 2 * nbytes / (us * 1e-6) / 1e9
