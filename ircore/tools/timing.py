"""Timing several candidates fairly on a noisy machine: interleaved rounds and medians.

A *runner* executes its call ``n`` times and returns the time per call in seconds. Every runner
is warmed up, then calibrated so that one round of it lasts about ``round_s``; then rounds
alternate between the runners (the order rotates each round, so no candidate always runs right
after the same neighbour), and each candidate's figure is the median over its rounds. A burst of
load from another process then spoils a few rounds of every candidate alike, and the median
ignores them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

Runner = Callable[[int], float]  # n calls -> seconds per call
_MAX_REPS = 1 << 20


def eager_runner(call: Callable[[], Any], device_type: str) -> Runner:
    """Wall-clock time of ``call()`` in a loop; on a GPU, synchronized at both ends."""
    sync = torch.cuda.synchronize if device_type == "cuda" else (lambda: None)

    def run(n: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(n):
            call()
        sync()
        return (time.perf_counter() - start) / n

    return run


# GPU cycles of busy-waiting queued ahead of a timed region: about 50 us on an H200 (1.98 GHz),
# longer than the host takes to enqueue the start event and a graph launch.
_LEAD_CYCLES = 100_000


def gpu_lead() -> None:
    """Queue a short busy-wait on the current CUDA stream before a timed region.

    Why: a start event recorded on an idle GPU fires at once, and the time the host then takes
    to enqueue the graph (a few us, more when other processes load the CPU) is counted as GPU
    time. With the GPU busy until the region is queued, the events bracket the kernels alone.
    """
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(_LEAD_CYCLES)


def graph_runner(call: Callable[[], Any], calls_per_graph: int = 10) -> Runner:
    """GPU time of replaying a CUDA graph that holds ``calls_per_graph`` calls (kernel time
    without the launch cost: how an engine's decode step under CUDA graphs sees the op).

    The runner keeps ``call`` (and the tensors it closes over) alive: every replay reads and
    writes their memory, which, freed, the allocator would hand to other tensors (on 2026-12-05 a
    benchmark whose runner outlived its inputs hit an illegal memory access)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside capture, as torch.cuda.graphs requires
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls_per_graph):
            call()
    torch.cuda.synchronize()

    def run(n: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu_lead()
        start.record()
        for _ in range(n):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / (n * calls_per_graph)

    run.graph = graph  # type: ignore[attr-defined]  # keeps the graph (and its memory) alive with the runner
    run.call = call  # type: ignore[attr-defined]  # and the inputs the graph reads and writes
    return run


def _calibrate(run: Runner, round_s: float) -> int:
    """How many calls make one round of about ``round_s`` seconds."""
    reps = 1
    while True:
        per_call = run(reps)
        if per_call * reps >= round_s / 4 or reps >= _MAX_REPS:
            return max(1, min(_MAX_REPS, round(round_s / max(per_call, 1e-9))))
        reps *= 4


def interleaved_medians(runners: Mapping[str, Runner], *, rounds: int, round_s: float) -> dict[str, float]:
    """Median seconds per call of each runner over ``rounds`` interleaved rounds."""
    names = list(runners)
    for name in names:  # first calls pay for lazy set-up (kernel loads, autotuning, allocator)
        runners[name](2)
    reps = {name: _calibrate(runners[name], round_s) for name in names}
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(runners[name](reps[name]))
    return {name: statistics.median(values) for name, values in samples.items()}
