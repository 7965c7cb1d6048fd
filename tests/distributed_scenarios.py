"""Scenarios that run on every rank of a real ``torch.distributed`` group (tests/test_distributed.py).

``launch`` starts the ranks once per group (gloo with two CPU processes; nccl with one GPU),
and every rank runs every scenario in order. Each scenario raises on failure or calls
:func:`skip`; each rank writes "ok", "skip: why" or the traceback per scenario to a JSON file
that the test reads. After a failure a rank stops (its peers would wait in a collective for it):
they time out, and their remaining scenarios say so.

How the model runs is a :data:`VARIANTS` entry, so a compiled variant is one more entry.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import functools
import importlib.util
import json
import logging
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import ircore
from ircore.distributed import ROW_WISE_OPS
from ircore.providers import HOST
from ircore.testing import assert_close_to_reference

REPO = Path(__file__).resolve().parent.parent
# A collective that waits longer than this means a peer failed: fail too, instead of hanging.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=30)


def _load_example() -> Any:
    """examples/tensor_parallel.py: the model and plan of docs/tensor-parallel.md (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("tensor_parallel_example", REPO / "examples" / "tensor_parallel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example()

# How the tensor-parallel model is run: name -> wrap(model) -> callable.
VARIANTS: dict[str, Callable[[nn.Module], Callable[..., Any]]] = {
    "eager": lambda model: model,
    # the fusion and lowering passes see the local graph (the probe below is then traced into it
    # with the local shapes, at compile time)
    "compiled": lambda model: torch.compile(model, backend="ircore", fullgraph=True),
}


@dataclass
class Group:
    rank: int
    world: int
    device: torch.device
    mesh: DeviceMesh


class Skipped(Exception):
    pass


def skip(reason: str) -> None:
    raise Skipped(reason)


SCENARIOS: dict[str, Callable[[Group], None]] = {}


def scenario(fn: Callable[[Group], None]) -> Callable[[Group], None]:
    SCENARIOS[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------------- instruments
@contextlib.contextmanager
def probe_provider() -> Iterator[list[tuple[str, tuple[int, ...]]]]:
    """A provider "probe" first in every op's priority: it records (op, x's shape) and runs native.

    An in-process instrument (not a distribution): it shows that the local call under DTensor is
    ircore's normal dispatch, and on which shard it runs.
    """
    calls: list[tuple[str, tuple[int, ...]]] = []
    for name in ROW_WISE_OPS:
        op = ircore.get_op(name)

        @functools.wraps(op.native)
        def record(*args: Any, _name: str = name, _native: Callable[..., Any] = op.native) -> Any:
            calls.append((_name, tuple(args[0].shape)))
            return _native(*args)

        op.register_impl("probe", record)
    try:
        with ircore.priority({name: ["probe"] for name in ROW_WISE_OPS}):
            yield calls
    finally:
        for name in ROW_WISE_OPS:
            ircore.get_op(name).unregister_impl("probe")


@contextlib.contextmanager
def dispatch_log() -> Iterator[list[str]]:
    """The ``ircore`` logger's messages at DEBUG ("rms_norm: running native", ...)."""
    messages: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("ircore")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield messages
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def all_ranks(value: Any) -> list[Any]:
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


# ---------------------------------------------------------------------- the model
SIZES = {"layers": 2, "hidden": 64, "heads": 4, "intermediate": 128}
BATCH, SEQUENCE = 2, 8


def _block_matches_one_process(variant: str, group: Group) -> None:
    """The two-layer model of docs/tensor-parallel.md, tensor + sequence parallel, gives the one-process result."""
    torch.manual_seed(0)
    model = example.Decoder(**SIZES).to(group.device)
    with torch.no_grad():  # norm weights that are not all ones, so a wrong weight shows
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(torch.rand_like(param) + 0.5)
    x = torch.randn(BATCH, SEQUENCE, SIZES["hidden"], device=group.device)
    with torch.no_grad():
        expected = model(x)
        parallel = VARIANTS[variant](example.tensor_parallel(copy.deepcopy(model), group.mesh))
        with probe_provider() as calls:
            out = parallel(distribute_tensor(x, group.mesh, [Shard(1)]))
    assert isinstance(out, DTensor) and out.placements == (Shard(1),), out
    torch.testing.assert_close(out.full_tensor(), expected, atol=2e-5, rtol=2e-5)
    # every op ran through ircore's dispatch on this rank's shard: norms on a sequence shard,
    # silu_and_mul on this rank's [gate_r, up_r]
    shard = (BATCH, SEQUENCE // group.world, SIZES["hidden"])
    gate_up = (BATCH, SEQUENCE, 2 * SIZES["intermediate"] // group.world)
    expected_calls = [("rms_norm", shard), ("fused_add_rms_norm", shard), ("silu_and_mul", gate_up)]
    expected_calls += [("fused_add_rms_norm", shard), ("fused_add_rms_norm", shard), ("silu_and_mul", gate_up)]
    expected_calls += [("fused_add_rms_norm", shard)]
    if variant == "compiled":  # the rms_norm_reshape fusion may flatten a norm's rows to 2-D
        calls, expected_calls = _rows_and_width(calls), _rows_and_width(expected_calls)
    assert calls == expected_calls, calls


def _rows_and_width(calls: list[tuple[str, tuple[int, ...]]]) -> list[tuple[str, int, int]]:
    return [(name, math.prod(shape[:-1]), shape[-1]) for name, shape in calls]


for _variant in VARIANTS:
    SCENARIOS[f"block_matches_one_process[{_variant}]"] = functools.partial(_block_matches_one_process, _variant)


# ---------------------------------------------------------------------- each op
def _op_cases(device: torch.device, dtype: torch.dtype) -> Iterator[tuple[str, tuple[Any, ...], str]]:
    """(op, full arguments, label): 2-D and 3-D inputs, rows that do not split evenly, options."""
    gen = torch.Generator(device=device).manual_seed(1)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=device).to(dtype)

    weight = randn(64) * 0.1 + 1
    # on two ranks, Shard(0) of 3x6x64 is uneven and of 1x64 would leave rank 1 no rows
    for shape in ((10, 64), (3, 6, 64), (1, 64)):
        label = "x".join(map(str, shape))
        yield "rms_norm", (randn(*shape), weight, 1e-6, None), label
        yield "fused_add_rms_norm", (randn(*shape), randn(*shape), weight, 1e-6, None), label
        yield "silu_and_mul", (randn(*shape[:-1], 128),), label + " (128 wide)"
        yield "rms_norm_gated", (randn(*shape), randn(*shape), weight, 1e-6, 16, False, True), label
        yield "layer_norm", (randn(*shape), weight, weight * 0.1, 1e-5), label
    yield "rms_norm", (randn(5, 64), None, 1e-5, None), "5x64 weight=None"
    yield "rms_norm", (randn(5, 64), weight, 1e-6, 40), "5x64 variance_size=40"


def _distribute(args: tuple[Any, ...], placement: Any, mesh: DeviceMesh) -> tuple[Any, ...]:
    """Row tensors (x, x_residual) get ``placement``, 1-D weights Replicate, the rest stays."""
    return tuple(
        a if not isinstance(a, torch.Tensor)
        else distribute_tensor(a, mesh, [placement if a.dim() > 1 else Replicate()])
        for a in args
    )


def _outputs(out: Any) -> tuple[Any, ...]:
    return out if isinstance(out, tuple) else (out,)


@scenario
def each_op_on_replicate_and_every_allowed_shard(group: Group) -> None:
    """Each op on Replicate and Shard(d) for every d but the last: local, same placement out."""
    for dtype in (torch.float32, torch.bfloat16):
        for name, args, label in _op_cases(group.device, dtype):
            op = ircore.get_op(name)
            for placement in [Replicate(), *(Shard(d) for d in range(args[0].dim() - 1))]:
                where = f"{name} [{label}] {dtype} {placement}"
                out = _outputs(op(*_distribute(args, placement, group.mesh)))
                # DTensor's own rule: a dimension shorter than the mesh is not kept sharded
                too_short = isinstance(placement, Shard) and args[0].shape[placement.dim] < group.world
                expected = Replicate() if too_short else placement
                assert all(o.placements == (expected,) for o in out), f"{where}: {[o.placements for o in out]}"
                assert_close_to_reference(op, tuple(o.full_tensor() for o in out), args, label=where)


@scenario
def sharded_last_dim_is_gathered_to_replicate(group: Group) -> None:
    """x sharded on its last dim: DTensor all-gathers it; the result is Replicate and correct."""
    for name, args, label in _op_cases(group.device, torch.float32):
        op = ircore.get_op(name)
        with dispatch_log() as log:
            out = _outputs(op(*_distribute(args, Shard(args[0].dim() - 1), group.mesh)))
        where = f"{name} [{label}]"
        assert all(o.placements == (Replicate(),) for o in out), f"{where}: {[o.placements for o in out]}"
        assert all(o.to_local().shape == o.shape for o in out), f"{where}: not whole on rank {group.rank}"
        assert_close_to_reference(op, tuple(o.full_tensor() for o in out), args, label=where)
        # DTensor asks the rule once per input signature (placements, shapes, dtypes): no earlier
        # scenario shards a last dimension, so each case here is new to it and says so
        assert any(f"ircore.ops.{name} on DTensor: argument 'x' is sharded on its last" in m for m in log), log


@scenario
def maybe_inplace_on_shards(group: Group) -> None:
    """``op.maybe_inplace`` on DTensors computes out of place: right results, kept placements."""
    op = ircore.ops.fused_add_rms_norm
    for name, args, label in _op_cases(group.device, torch.float32):
        if name != op.name:
            continue
        for placement in [Replicate(), *(Shard(d) for d in range(args[0].dim() - 1))]:
            out, res = op.maybe_inplace(*_distribute(args, placement, group.mesh))
            assert out.placements == res.placements, (out.placements, res.placements)
            where = f"maybe_inplace [{label}] {placement}"
            assert_close_to_reference(op, (out.full_tensor(), res.full_tensor()), args, label=where)
    # the overload itself refuses a placement DTensor would redistribute (the write would be lost)
    x = distribute_tensor(torch.randn(4, 64, device=group.device), group.mesh, [Shard(1)])
    try:
        torch.ops.ircore.fused_add_rms_norm.maybe_inplace(x, x.clone(), None, 1e-6)
    except RuntimeError as exc:
        assert "losing the in-place write" in str(exc), exc
    else:
        raise AssertionError("maybe_inplace on a last-dimension shard was accepted")


@scenario
def partial_input_is_reduced_first(group: Group) -> None:
    """x Partial (e.g. a row-parallel linear's unreduced output): DTensor reduces it, then the op."""
    op = ircore.get_op("rms_norm")
    for x, weight, eps, vs in (args for name, args, _ in _op_cases(group.device, torch.float32) if name == op.name):
        parts = DTensor.from_local(x / group.world, group.mesh, [Partial()])
        out = op(parts, distribute_tensor(weight, group.mesh, [Replicate()]) if weight is not None else None, eps, vs)
        assert_close_to_reference(op, out.full_tensor(), (x, weight, eps, vs), label=f"Partial -> {out.placements}")


@scenario
def bad_input_gets_ircores_error(group: Group) -> None:
    """DTensor re-raises the op's InvalidArgumentError as a RuntimeError with the same message."""
    x = distribute_tensor(torch.randn(4, 64, device=group.device), group.mesh, [Shard(0)])
    weight = distribute_tensor(torch.randn(32, device=group.device), group.mesh, [Replicate()])
    try:
        ircore.ops.rms_norm(x, weight, 1e-6)
    except RuntimeError as exc:
        assert isinstance(exc.__cause__, ircore.InvalidArgumentError), repr(exc.__cause__)
        assert str(exc).startswith("ircore.ops.rms_norm: argument 'weight' has shape (32,); expected (64,)"), exc
    else:
        raise AssertionError("a weight of the wrong size was accepted")


@scenario
def ranks_running_different_providers_agree(group: Group) -> None:
    """Rank 0 runs vllm_c's C++ kernels, rank 1 native: the results agree within tolerance."""
    if group.world < 2:
        skip("needs two ranks")
    chosen = why = None
    if group.rank == 0:  # the other ranks keep IRCORE_PROVIDERS=none
        if "vllm_c" in HOST.discovered():
            ircore.configure(providers=["vllm_c"])
            explanation = ircore.explain("rms_norm", torch.randn(4, 64, device=group.device), None, 1e-6)
            chosen, why = explanation.chosen, f"vllm_c is not chosen on rank 0: {explanation}"
        else:
            why = "the vllm_c provider is not installed"
    chosen, why = all_ranks((chosen, why))[0]  # every rank takes rank 0's branch
    if chosen != "vllm_c":
        skip(why)
    for name, args, label in _op_cases(group.device, torch.bfloat16):
        op = ircore.get_op(name)
        for placement in (Replicate(), Shard(0)):
            where = f"{name} [{label}] {placement}"
            with dispatch_log() as log:
                out = _outputs(op(*_distribute(args, placement, group.mesh)))
            ran = [m.split(": running ")[1] for m in log if m.startswith(f"{name}: running ")]
            assert ran == ["vllm_c" if group.rank == 0 else "native"], f"{where}: rank {group.rank} ran {ran}"
            locals_ = all_ranks([o.to_local().cpu() for o in out])
            if placement == Replicate():  # each rank computed the whole: both within tolerance
                for rank_out in locals_:
                    assert_close_to_reference(op, tuple(rank_out), args, label=f"{where} rank output")
            assert_close_to_reference(op, tuple(o.full_tensor() for o in out), args, label=where)


# ---------------------------------------------------------------------- running the ranks
def _rank_main(rank: int, world: int, backend: str, store: str, out_dir: str) -> None:
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend, init_method=f"file://{store}", rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT
    )
    group = Group(rank, world, device, init_device_mesh(device.type, (world,)))
    outcomes: dict[str, str] = {}
    failed = None
    for name, run in SCENARIOS.items():
        if failed is not None:
            outcomes[name] = f"not run: scenario {failed} failed on rank {rank}"
            continue
        try:
            run(group)
            outcomes[name] = "ok"
        except Skipped as why:
            outcomes[name] = f"skip: {why}"
        except BaseException:
            outcomes[name] = traceback.format_exc()
            failed = name
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(outcomes))
    if failed is None:
        dist.destroy_process_group()


def launch(backend: str, world: int, out_dir: Path, timeout_s: float = 300) -> list[dict[str, str]]:
    """Run every scenario on ``world`` ranks; per rank, {scenario: outcome}."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # two ranks share this machine's cores
    ranks = mp.start_processes(
        _rank_main,
        args=(world, backend, str(out_dir / "store"), str(out_dir)),
        nprocs=world,
        start_method="spawn",
        join=False,
    )
    deadline = time.monotonic() + timeout_s
    while not ranks.join(timeout=1):
        if time.monotonic() > deadline:
            for process in ranks.processes:
                process.kill()
            raise TimeoutError(f"the {backend} ranks did not finish in {timeout_s} s")
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]
