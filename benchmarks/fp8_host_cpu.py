"""The host's cost of an eager FP8 linear, piece by piece, on a CPU: this code against a revision.

Why: on the H100 the FP8 Llama's eager decode is host-bound (``fp8_linear_host.py``: 263 us per
FP8 linear at M = 1 for 13 us of kernels). The host side is the same Python on any machine, so
it is measured here, where no GPU hides or adds anything, with the GPU work stubbed:

- ``dynamic_group_quant_fp8`` by a stub implementation (returns preallocated outputs) under a
  predicate of vllm_c's cost, registered as ``stub_vllm_c``;
- ``block_scaled_mm_fp8`` by two implementations in the H100's order: ``stub_vllm_c`` with
  vllm_c's real shape predicate evaluated for an sm_90 GPU (it declines M = 1, as there), then
  triton's real implementation and predicate (``TRITON_INTERPRET=1`` makes CPU tensors its device)
  whose kernel's ``.run`` is a no-op: its launcher's Python (config lookup, allocations, grid,
  arguments, the split-K sum) runs, the launch does not. The config is pinned per row (a split of
  K 1 or 4: the tuner picks per GPU; 4 is the M = 1 kind of choice at N = 4096).

Pieces, each "before" (the revision's ``ircore/integrations/_fp8.py``, the block op's argument
check and triton's ``fp8_matmul_kernels.py``, loaded from git) and "after" (this checkout):
the whole ``fp8_linear_forward`` on transformers' ``FP8Linear`` (3-D input, as a model calls it,
and 2-D), each op dispatched, the block op's check alone, triton's launcher called directly. All
pieces of a row run in interleaved rounds (ircore.tools.timing; medians), one thread, inference
mode, N = K = 512 (sizes change nothing on the host; small ones keep the split-K sum's CPU work
negligible). A torch view (``x.reshape``) is the scale: one torch op's host cost here.

    .venv/bin/python benchmarks/fp8_host_cpu.py [--against REV] [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

os.environ["IRCORE_PROVIDERS"] = "none"  # only native and the stubs below
os.environ["TRITON_INTERPRET"] = "1"  # triton's predicate takes CPU tensors; .run is stubbed anyway

import torch

import ircore
from ircore.ops import block_scaled_mm_fp8, dynamic_group_quant_fp8
from ircore.ops._scaled_mm import quantize_blocks
from ircore.tools.timing import interleaved_medians

ROOT = Path(__file__).resolve().parent.parent
E4M3 = torch.float8_e4m3fn
N = K = 512
BLOCK = (128, 128)


def source_at(rev: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def module_at(rev: str, path: str, name: str, package: str | None = None, only: set[str] | None = None):
    """``path`` at ``rev`` as a fresh module ``name``; ``only``: just its imports, plain
    assignments and these functions (a module that declares ops cannot run twice)."""
    src = source_at(rev, path)
    if only is not None:
        tree = ast.parse(src)
        keep = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)
        tree.body = [
            node
            for node in tree.body
            if isinstance(node, keep) or (isinstance(node, ast.FunctionDef) and node.name in only)
        ]
        code = compile(tree, f"<{path} at {rev}>", "exec")
    else:
        code = compile(src, f"<{path} at {rev}>", "exec")
    mod = types.ModuleType(name)
    mod.__package__ = package
    sys.modules[name] = mod
    exec(code, mod.__dict__)
    return mod


def stub_like(native, fn):
    fn.__signature__ = inspect.signature(native)
    return fn


def timed(use, variant, fn):
    """A runner (ircore.tools.timing) that puts ``variant`` in place, then calls ``fn`` n times."""

    def run(n: int) -> float:
        use(variant)
        start = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - start) / n

    return run


class Harness:
    """The two variants (before, after) and the stubs of one row (M, split of K)."""

    def __init__(self, rev: str) -> None:
        from ircore_triton import fp8_matmul_kernels as mk_after
        from ircore_triton import impls, kernels
        from ircore_vllm_c import scaled_mm as vllm_after

        from ircore.integrations import _fp8 as fp8_after

        self.impls, self.kernels = impls, kernels
        fp8_before = module_at(rev, "ircore/integrations/_fp8.py", "ircore.integrations._fp8_before")
        mk_before = module_at(
            rev,
            "providers/triton/ircore_triton/fp8_matmul_kernels.py",
            "ircore_triton._mm_before",
            "ircore_triton",
        )
        checks = {"_cdiv", "_check_operands", "_check_scale", "_check_block_size", "_check_block_scaled_mm"}
        checks_before = module_at(
            rev, "ircore/ops/_scaled_mm.py", "ircore.ops._scaled_mm_before", only=checks
        )
        vllm_before = module_at(
            rev, "providers/vllm_c/ircore_vllm_c/scaled_mm.py", "ircore_vllm_c._mm_before", "ircore_vllm_c"
        )
        for mk in (mk_before, mk_after):  # the launch is the GPU's part: a no-op here
            mk._block_scaled_mm_kernel.run = lambda *a, **k: None
        self.variants = {
            "before": (
                fp8_before.fp8_linear_forward,
                checks_before._check_block_scaled_mm,
                mk_before,
                vllm_before.block_shape_ok,
            ),
            "after": (
                fp8_after.fp8_linear_forward,
                block_scaled_mm_fp8.check_declared,
                mk_after,
                vllm_after.block_shape_ok,
            ),
        }
        self.shape_ok = vllm_after.block_shape_ok  # vllm_c's predicate of the variant in place
        self.pinned: tuple[tuple, int] | None = None  # the row's config key and split of K

    def use(self, variant: str) -> None:
        _, check, mk, self.shape_ok = self.variants[variant]
        if self.pinned is not None:  # each launcher module checks for its own config class
            key, split = self.pinned
            self.kernels._CONFIGS[key] = mk.BlockMatmulConfig(16, 64, split)
        # the op's attributes are fixed once declared; the benchmark swaps its check past that guard
        object.__setattr__(block_scaled_mm_fp8, "check_declared", check)
        self.impls._mk = mk

    def row(self, m: int, split: int, rounds: int, round_s: float) -> dict[str, float]:
        """Median us per call of each piece at M = ``m`` with a split of K in ``split``."""
        from transformers.integrations.finegrained_fp8 import FP8Linear

        torch.manual_seed(0)
        linear = FP8Linear(K, N, block_size=BLOCK)
        wq, ws = quantize_blocks(torch.randn(N, K) / K**0.5, BLOCK)
        linear.weight = torch.nn.Parameter(wq, requires_grad=False)
        linear.weight_scale_inv = torch.nn.Parameter(ws, requires_grad=False)
        x = torch.randn(m, K, dtype=torch.bfloat16)
        x3 = x.reshape(1, m, K)
        q = torch.empty(m, K, dtype=E4M3)
        s = torch.empty(K // BLOCK[1], m).t()  # column-major, as the linear asks
        out = torch.empty(m, N, dtype=torch.bfloat16)
        qargs = (x, [1, BLOCK[1]], True, False, E4M3)
        margs = (
            q,
            linear.weight,
            s,
            linear.weight_scale_inv,
            list(BLOCK),
            torch.bfloat16,
        )  # Parameters, as in a model

        def qstub(x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment=1):
            return q, s

        def q_pred(x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment=1):
            return bool(fp8_dtype is E4M3 and x.is_cpu)  # vllm_c's CUDA branch, on the CPU

        def mstub(a, b, scale_a, scale_b, block_size, out_dtype):
            return out

        def mm_pred(a, b, scale_a, scale_b, block_size, out_dtype):
            return a.is_cpu and self.shape_ok(a, b, block_size, out_dtype, (9, 0))  # as on sm_90

        for fn in (qstub, q_pred):
            stub_like(dynamic_group_quant_fp8.native, fn)
        for fn in (mstub, mm_pred):
            stub_like(block_scaled_mm_fp8.native, fn)
        dynamic_group_quant_fp8.register_impl("stub_vllm_c", qstub, supports_args=q_pred)
        block_scaled_mm_fp8.register_impl("stub_vllm_c", mstub, supports_args=mm_pred)
        block_scaled_mm_fp8.register_impl(
            "stub_triton",
            self.impls.block_scaled_mm_fp8,
            supports_args=self.impls.block_scaled_mm_fp8_supports,
        )
        ircore.set_priority(
            dynamic_group_quant_fp8=["stub_vllm_c"], block_scaled_mm_fp8=["stub_vllm_c", "stub_triton"]
        )
        key = ("block_scaled_mm_fp8", N, K, BLOCK, torch.bfloat16, self.kernels._bucket(m))
        self.pinned = (key, split)
        try:
            with torch.inference_mode():
                runners = {}
                for v, (forward, check, mk, _) in self.variants.items():
                    self.use(v)
                    chosen = ircore.explain(block_scaled_mm_fp8, *margs).chosen
                    assert chosen == ("stub_vllm_c" if m % 4 == 0 else "stub_triton"), chosen  # as on sm_90
                    assert forward(linear, x3).shape == (1, m, N)
                    pieces = {
                        "fp8 linear, 3-D input": lambda f=forward: f(linear, x3),
                        "fp8 linear, 2-D input": lambda f=forward: f(linear, x),
                        "matmul dispatched": lambda: block_scaled_mm_fp8(*margs),
                        "matmul check": lambda c=check: c(*margs),
                        "triton launcher, kernel stubbed": lambda mk=mk: mk.block_scaled_mm_fp8(*margs),
                    }
                    runners.update({f"{name} [{v}]": timed(self.use, v, fn) for name, fn in pieces.items()})
                runners["quant dispatched"] = timed(
                    self.use, "after", lambda: dynamic_group_quant_fp8(*qargs)
                )
                runners["quant stub direct"] = timed(self.use, "after", lambda: qstub(*qargs))
                runners["a torch view (x.reshape)"] = timed(self.use, "after", lambda: x3.reshape(-1, K))
                med = interleaved_medians(runners, rounds=rounds, round_s=round_s)
        finally:
            self.use("after")
            self.pinned = None
            ircore.set_priority(dynamic_group_quant_fp8=None, block_scaled_mm_fp8=None)
            dynamic_group_quant_fp8.unregister_impl("stub_vllm_c")
            block_scaled_mm_fp8.unregister_impl("stub_vllm_c")
            block_scaled_mm_fp8.unregister_impl("stub_triton")
            self.kernels._CONFIGS.pop(key, None)
        return {name: sec * 1e6 for name, sec in med.items()}


ROWS = ((1, 1), (1, 4), (16, 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="54671d9", help="the revision measured as 'before'")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--round-s", type=float, default=0.02)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    harness = Harness(args.against)
    rows = []
    print(f"torch {torch.__version__}, before = {args.against}, N = K = {N}, 1 thread; us per call (median)")
    print("| M | split-K | piece | before us | after us |")
    print("|---|---|---|---|---|")
    for m, split in ROWS:
        med = harness.row(m, split, args.rounds, args.round_s)
        rows += [{"M": m, "split_k": split, "piece": name, "us": us} for name, us in med.items()]
        for name in dict.fromkeys(n.split(" [")[0] for n in med):
            before, after = med.get(f"{name} [before]"), med.get(f"{name} [after]", med.get(name))
            bc = "" if before is None else f"{before:.2f}"
            print(f"| {m} | {split} | {name} | {bc} | {after:.2f} |", flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"torch": torch.__version__, "against": args.against, "rows": rows})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
