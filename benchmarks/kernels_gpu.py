"""Side-by-side GPU benchmark of ircore's kernels and the anchors, in one process.

For each op (rms_norm, fused_add_rms_norm, silu_and_mul; more with --ops: NORM_OPS, ROPE_OPS, QUANT_OPS, ACT_OPS
(the gated activations)),
dtype (bf16, fp16), tokens T and hidden H, every implementation ("column") is first checked against an fp32 reference
(``||out - ref|| / ||ref|| < 1e-2``; a column that fails is reported and not timed), then timed
two ways, as in shared/notes/gpu-anchors.md:

- graph replay: N back-to-back calls (20..100) captured in one CUDA graph, replayed 10 times;
  per-call time = median replay time / N (the kernel's own time; the tables show this);
- ``triton.testing.do_bench`` median (L2 flushed; at small T dominated by launch cost).

Columns: ``eager`` (``F.rms_norm``; fused: eager add then ``F.rms_norm``; silu: ``F.silu(a) * b``),
``compile`` (the ircore op's native composite under ``torch.compile``, fullgraph, static shapes),
``liger`` (Liger-Kernel 0.8.5), ``flashinfer`` (FlashInfer's CUDA JIT norm kernels), and ours:
``vllm_c`` (``torch.ops.ircore_vllm_c.*``) and ``triton`` (``ircore_triton.impls``). Liger and
FlashInfer have norms only. ``--pdl-ab`` adds ``vllm_c_nopdl`` and ``triton_nopdl``: the same
kernels launched without programmatic dependent launch (both providers use it on sm_90+), to show
what it is worth at each size; they are not counted as ours in the summary. ``--whole-row-ab``
adds ``triton_whole`` for the fused norm + quant ops: triton's launch with the whole row in one
program (its batch-invariant variant, the launch before the chunked walk), next to ``triton``,
whose first call of each key tunes between it and the chunks (quant_kernels.norm_candidates); not
counted as ours either. Effective bandwidth = bytes the op must read + write (rms_norm
``2*T*H + H`` elements, fused ``4*T*H + H``, silu ``3*T*H``, H = output width) / time, shown as %
of the device-to-device copy bandwidth measured in the same run.

In-place kernels (fused_add_rms_norm of flashinfer, vllm_c, triton) are timed on work buffers
that each call overwrites: the residual grows by about the output's size per call (finite for
the few thousand calls a cell makes); buffers are reset from pristine copies before each timing.

The vllm_c CUDA kernels and FlashInfer's norm module are JIT-built in background subprocesses
at start (the main process measures the other columns meanwhile, and loads the cached builds
later). A time budget (``--budget-s``) skips what is left rather than running over; the JSON and
markdown are written whatever happens.

Usage (repo root; see benchmarks/gpu_run.sh)::

    python3 benchmarks/kernels_gpu.py --json out.json --markdown out.md
    python3 benchmarks/kernels_gpu.py --quick
    python3 benchmarks/kernels_gpu.py --dry-run [--fake]   # CPU: plan (and tables of fake numbers)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent
VLLM_C_DIR = REPO / "providers" / "vllm_c"
TRITON_DIR = REPO / "providers" / "triton"


def use_checkout_paths() -> None:
    """Put this checkout first on sys.path (the benchmarks' helpers, the two providers, the core),
    for a run from the checkout without installs. Called by the scripts' entry points, not on
    import: a test that imports this module keeps its own sys.path."""
    for p in (str(BENCH_DIR), str(TRITON_DIR), str(VLLM_C_DIR), str(REPO)):
        if p not in sys.path:
            sys.path.insert(0, p)


OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
# Not in the default run (its time budget is the three ops'): ask with --ops. Gated RMSNorm in
# Qwen3-Next's form (norm, weight, then silu(gate); whole rows) and Mamba2's (gate first, 8
# groups); both with transformers' roundings (round_normalized), as a model would call them.
# LayerNorm with weight and bias, and with weight only.
NORM_OPS = ("rms_norm_gated", "rms_norm_gated_grouped", "layer_norm", "layer_norm_nobias")
# The gated activations (also asked for with --ops): bench op -> (ircore op, its parameters). x is
# (T, 2H), the output (T, H). Anchors: vLLM's forward_native in eager torch (x's dtype, as vLLM
# runs it), the ircore op's native under torch.compile, and Liger's GEGLU (LigerGELUMulFunction,
# the tanh GELU) for gelu_tanh_and_mul. vLLM's own _C kernels are not in this harness (no vLLM on
# the GPU image): benchmarks/vllm_anchor.py would be the place.
ACT_FORM = {
    "gelu_and_mul": ("gelu_and_mul", ("none",)),
    "gelu_tanh_and_mul": ("gelu_and_mul", ("tanh",)),
    "mul_and_silu": ("mul_and_silu", ()),
    "fatrelu_and_mul": ("fatrelu_and_mul", (0.1,)),
    "swigluoai_and_mul": ("swigluoai_and_mul", (1.702, 7.0)),
}
ACT_OPS = tuple(ACT_FORM)
# RoPE (issue 24), not in the default run either: --ops. H is the query width, heads * 128, with
# 8 KV heads of 128: H 4096 is Llama-3-8B's and Qwen3-8B's attention (32 query heads), 8192
# Llama-3-70B's. rotary_embedding: vLLM's form ([T, H] q, [T, 1024] k, positions 0..T-1 into a
# cache in the activations' dtype, neox). rotary_pos_emb: HF's form (q/k (1, heads, T, 128) views
# of (1, T, heads*128), as HF attention makes them; cos/sin (1, T, 128)). fused_qk_norm_rope:
# Qwen3's q/k RMSNorm + RoPE on a [T, (H + 2*1024)] qkv. Columns: eager and compile run the op's
# native; Liger (rotary_pos_emb) and FlashInfer's apply_rope_with_cos_sin_cache_inplace
# (rotary_embedding, fp32 cache) are the anchors; vllm_c and triton run whatever implementation
# that provider registers for the op through ircore (n/a until it has one).
ROPE_OPS = ("rotary_embedding", "rotary_pos_emb", "fused_qk_norm_rope")
ROPE_HEAD_DIM, ROPE_KV_HEADS = 128, 8
# FP8 quant ops and the fused norm/act + quant ops (issue 25), also asked with --ops; run them at
# --hidden 4096 8192 14336. Anchors: the op's native eager and Inductor-compiled (which, for a
# fused op, is Inductor's own fusion of the unfused chain). Provider columns join as kernels land
# (add the op to APPLIES[provider]; Impls._quant_fn runs what the provider registers through
# ircore, as _rope_fn): vllm_c's and triton's so far. Inputs: x (and residual, weight) of
# the dtype; static scales 0.02 per tensor; groups of 128; e4m3fn.
QUANT_OPS = (
    "static_quant_fp8",
    "dynamic_quant_fp8",
    "dynamic_quant_fp8_per_tensor",
    "dynamic_group_quant_fp8",
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_group_quant_fp8",
)
FP8 = "float8_e4m3fn"
GROUP = 128
# bench op -> (ircore op, the tensors it takes, its arguments after them (fp8 dtype added at run time))
QUANT_SPEC: dict[str, tuple[str, tuple[str, ...], tuple]] = {
    "static_quant_fp8": ("static_quant_fp8", ("x", "scale"), ("fp8",)),
    "dynamic_quant_fp8": ("dynamic_quant_fp8", ("x",), (True, "fp8")),
    "dynamic_quant_fp8_per_tensor": ("dynamic_quant_fp8", ("x",), (False, "fp8")),
    "dynamic_group_quant_fp8": ("dynamic_group_quant_fp8", ("x",), ([1, GROUP], False, False, "fp8")),
    "rms_norm_static_fp8_quant": ("rms_norm_static_fp8_quant", ("x", "w", "eps", "scale"), ("fp8",)),
    "fused_add_rms_norm_static_fp8_quant": (
        "fused_add_rms_norm_static_fp8_quant",
        ("x", "r", "w", "eps", "scale"),
        ("fp8",),
    ),
    "rms_norm_dynamic_quant_fp8": ("rms_norm_dynamic_quant_fp8", ("x", "w", "eps"), (True, "fp8")),
    "fused_add_rms_norm_dynamic_quant_fp8": (
        "fused_add_rms_norm_dynamic_quant_fp8",
        ("x", "r", "w", "eps"),
        (True, "fp8"),
    ),
    "rms_norm_group_quant_fp8": ("rms_norm_group_quant_fp8", ("x", "w", "eps"), ([1, GROUP], False, False, "fp8")),
    "fused_add_rms_norm_group_quant_fp8": (
        "fused_add_rms_norm_group_quant_fp8",
        ("x", "r", "w", "eps"),
        ([1, GROUP], False, False, "fp8"),
    ),
    "silu_and_mul_static_quant_fp8": ("silu_and_mul_static_quant_fp8", ("x2", "scale"), ("fp8",)),
    "silu_and_mul_group_quant_fp8": ("silu_and_mul_group_quant_fp8", ("x2",), ([1, GROUP], False, False, "fp8")),
}
ALL_OPS = OPS + NORM_OPS + ROPE_OPS + QUANT_OPS + ACT_OPS
# bench op -> the ircore op, and its arguments after the tensors and epsilon, given H
IRCORE_OP = {
    "rms_norm_gated": "rms_norm_gated",
    "rms_norm_gated_grouped": "rms_norm_gated",
    "layer_norm": "layer_norm",
    "layer_norm_nobias": "layer_norm",
}
GATED_FORM = {
    "rms_norm_gated": lambda h: (None, True, True),
    "rms_norm_gated_grouped": lambda h: (h // 8, False, True),
}
TOKENS = (1, 16, 128, 1024, 8192, 32768)
HIDDENS = (4096, 8192)
DTYPES = ("bf16", "fp16")
ANCHORS = ("eager", "compile", "liger", "flashinfer")
PROVIDERS = ("vllm_c", "triton")
NO_PDL = {"vllm_c_nopdl": "vllm_c", "triton_nopdl": "triton"}  # --pdl-ab columns -> provider
WHOLE_ROW = {"triton_whole": "triton"}  # --whole-row-ab column -> provider
# --unfused-ab column -> provider: a fused norm/activation + quant op as its two unfused ops, each
# the provider's kernel (issue 25: the fused op must beat them by at least the pass it saves)
UNFUSED = {"triton_unfused": "triton"}
# the fused op -> (its first op and how many of the fused op's leading arguments it takes, the quant op)
UNFUSED_PARTS = {
    "rms_norm_static_fp8_quant": ("rms_norm", 3, "static_quant_fp8"),
    "fused_add_rms_norm_static_fp8_quant": ("fused_add_rms_norm", 4, "static_quant_fp8"),
    "rms_norm_dynamic_quant_fp8": ("rms_norm", 3, "dynamic_quant_fp8"),
    "fused_add_rms_norm_dynamic_quant_fp8": ("fused_add_rms_norm", 4, "dynamic_quant_fp8"),
    "rms_norm_group_quant_fp8": ("rms_norm", 3, "dynamic_group_quant_fp8"),
    "fused_add_rms_norm_group_quant_fp8": ("fused_add_rms_norm", 4, "dynamic_group_quant_fp8"),
    "silu_and_mul_static_quant_fp8": ("silu_and_mul", 1, "static_quant_fp8"),
    "silu_and_mul_group_quant_fp8": ("silu_and_mul", 1, "dynamic_group_quant_fp8"),
}
QUICK = {"tokens": (1, 128, 8192), "hidden": (4096,), "dtypes": ("bf16",)}
EPS = 1e-6
REL_TOL = 1e-2
GRAPH_CALLS = (20, 100)  # min, max calls captured per graph
GRAPH_TARGET_US = 2000.0  # aim for about this much GPU time per replay
GRAPH_REPLAYS = 10
# Rows whose ours / best-anchor ratio (each cell timed in turn) falls here are timed again, the two
# cells in the same interleaved rounds: a clock or cache change between two cells timed minutes
# apart reads as a few percent (on 2026-12-05 the fp8 matmul benchmark showed a provider 6-14% off
# the very call it makes, timed in turn).
RETIME_RANGE = (0.97, 1.10)
RETIME_ROUNDS = 9
DO_BENCH = {"warmup": 5, "rep": 25}  # ms
DEFAULT_BUDGET_S = 320.0

# Which ops each column implements.
APPLIES = {
    "eager": set(ALL_OPS),
    "compile": set(ALL_OPS),
    "liger": {"rms_norm", "fused_add_rms_norm", "layer_norm", "layer_norm_nobias", "gelu_tanh_and_mul"},
    "flashinfer": {"rms_norm", "fused_add_rms_norm"},
    "vllm_c": set(OPS + NORM_OPS + ROPE_OPS + ACT_OPS),
    "triton": set(OPS + NORM_OPS + ROPE_OPS + ACT_OPS),
    "vllm_c_nopdl": set(OPS + NORM_OPS),  # the gated activations' CUDA kernels have no PDL yet
    "triton_nopdl": set(OPS + NORM_OPS + ACT_OPS),
}
APPLIES["liger"].add("rotary_pos_emb")
APPLIES["flashinfer"].add("rotary_embedding")
# FlashInfer's rmsnorm_quant / fused_add_rmsnorm_quant (a static per-tensor scale, the CUDA JIT norm
# module): the anchor issue 25 names for the static norm + quant forms
FLASHINFER_QUANT = {"rms_norm_static_fp8_quant": "rmsnorm_quant", "fused_add_rms_norm_static_fp8_quant": "fused_add_rmsnorm_quant"}
APPLIES["flashinfer"].update(FLASHINFER_QUANT)
APPLIES["vllm_c"].update(QUANT_OPS)  # csrc/cuda_quant.cu (e4m3fn)
APPLIES["triton"].update(QUANT_OPS)  # quant_kernels.py (e4m3fn, e4m3fnuz)
# the fused norm + quant ops: triton's whole-row launch (impls.<op>_invariant) beside its tuned one
APPLIES["triton_whole"] = {op for op in QUANT_OPS if "rms_norm" in op}
APPLIES["triton_unfused"] = set(UNFUSED_PARTS)
# Measuring order: both providers and the anchors first, the A/B columns last (a budget that runs
# out costs those); vllm_c before Inductor's compile, the slowest column (a compile per cell). A
# column needing a background build waits while its build runs (see next_cell): its build
# overlaps the rest, and it is measured as soon as the build is done, not last (on 2026-12-05 a
# budget spent before vllm_c's column, measured last, left it empty).
ORDER = (
    "eager", "triton", "vllm_c", "compile", "liger", "flashinfer", "triton_whole", "triton_unfused", "triton_nopdl",
    "vllm_c_nopdl",
)  # fmt: skip
BUILT_BY = {"vllm_c": "vllm_c", "vllm_c_nopdl": "vllm_c", "flashinfer": "flashinfer"}  # column -> its build
# Display order in the tables: anchors, then ours.
DISPLAY = (
    "eager", "compile", "liger", "flashinfer", "vllm_c", "triton", "triton_whole", "triton_unfused", "vllm_c_nopdl",
    "triton_nopdl",
)  # fmt: skip
EAGER_LABEL = {
    "rms_norm": "F.rms_norm",
    "fused_add_rms_norm": "add+F.rms_norm",
    "silu_and_mul": "F.silu*b",
    "rms_norm_gated": "native (eager)",
    "rms_norm_gated_grouped": "native (eager)",
    "layer_norm": "F.layer_norm",
    "layer_norm_nobias": "F.layer_norm",
    **{op: "vLLM native (eager)" for op in ACT_OPS},
    **{op: "native (eager)" for op in ROPE_OPS},
    **dict.fromkeys(QUANT_OPS, "native (eager)"),
}
LABEL = {
    "compile": "torch.compile",
    "liger": "Liger",
    "flashinfer": "FlashInfer",
    "vllm_c": "vllm_c",
    "triton": "triton",
    "vllm_c_nopdl": "vllm_c no PDL",
    "triton_nopdl": "triton no PDL",
    "triton_whole": "triton whole row",
    "triton_unfused": "triton unfused",
}
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16"}
INPLACE = {
    ("fused_add_rms_norm", "flashinfer"),
    ("fused_add_rms_norm", "vllm_c"),
    ("fused_add_rms_norm", "triton"),
    ("fused_add_rms_norm", "vllm_c_nopdl"),
    ("fused_add_rms_norm", "triton_nopdl"),
    ("rotary_embedding", "flashinfer"),
    ("fused_add_rms_norm_static_fp8_quant", "flashinfer"),  # residual += x in place
    ("rotary_pos_emb", "liger"),
    # a provider's RoPE kernel may rotate in place (the work buffers are reset before each timing)
    *((op, col) for op in ROPE_OPS for col in ("vllm_c", "triton", "vllm_c_nopdl", "triton_nopdl")),
    # the unfused form's fused_add_rms_norm may add and normalise in place (reset before each timing)
    *((op, col) for op in UNFUSED_PARTS if op.startswith("fused_add") for col in UNFUSED),
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def col_label(impl: str, op: str) -> str:
    return EAGER_LABEL[op] if impl == "eager" else LABEL[impl]


def op_bytes(op: str, t: int, h: int, elt: int) -> int:
    """Bytes an op must read + write (H is the output width)."""
    if op == "rms_norm":
        return (2 * t * h + h) * elt
    if op == "fused_add_rms_norm":
        return (4 * t * h + h) * elt
    if op == "silu_and_mul" or op in ACT_FORM:  # x (T, 2H) in, (T, H) out
        return 3 * t * h * elt
    if op in GATED_FORM:  # x, gate, weight in; out
        return (3 * t * h + h) * elt
    if op == "layer_norm":
        return (2 * t * h + 2 * h) * elt
    if op == "layer_norm_nobias":
        return (2 * t * h + h) * elt
    if op in ROPE_OPS:  # q and k read and written, one cache row (cos/sin) per token, positions
        qk = t * (h + ROPE_KV_HEADS * ROPE_HEAD_DIM)
        weights = 2 * ROPE_HEAD_DIM if op == "fused_qk_norm_rope" else 0
        return (2 * qk + t * ROPE_HEAD_DIM * (2 if op == "rotary_pos_emb" else 1) + weights) * elt + 8 * t
    if op in QUANT_SPEC:  # tensors in (x of width h, or 2h for silu), one fp8 byte out per element, scales
        _, tensors, extra = QUANT_SPEC[op]
        read = (2 if "x2" in tensors or "r" in tensors else 1) * t * h + (h if "w" in tensors else 0)
        write = t * h if "r" in tensors else 0  # the residual
        scales = 4 * t * -(-h // GROUP) if [1, GROUP] in extra else (4 * t if True in extra else 0)
        return (read + write) * elt + t * h + scales
    raise ValueError(op)


@dataclass
class Cell:
    op: str
    dtype: str
    tokens: int
    hidden: int
    impl: str
    status: str = "pending"  # ok | fail (correctness) | error | skip | unavailable
    error: str | None = None
    rel_err: float | None = None
    rel_err_residual: float | None = None
    graph_us: float | None = None
    graph_calls: int | None = None
    do_bench_us: float | None = None
    bytes: int = 0
    gbps: float | None = None
    pct_copy: float | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Arguments and plan


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--ops", nargs="+", default=None, help=f"subset of {', '.join(ALL_OPS)} (default {', '.join(OPS)})"
    )
    p.add_argument("--tokens", nargs="+", type=int, default=None, help=f"T values (default {TOKENS})")
    p.add_argument("--hidden", nargs="+", type=int, default=None, help=f"H values (default {HIDDENS})")
    p.add_argument("--dtypes", nargs="+", default=None, help=f"subset of {', '.join(DTYPES)}")
    p.add_argument("--providers", nargs="*", default=None, help=f"ours: subset of {', '.join(PROVIDERS)}")
    p.add_argument("--anchors", nargs="*", default=None, help=f"subset of {', '.join(ANCHORS)}")
    p.add_argument("--json", type=Path, default=None, help="write all results as JSON here")
    p.add_argument("--markdown", type=Path, default=None, help="write the tables here")
    p.add_argument("--quick", action="store_true", help="small subset: T 1 128 8192, H 4096, bf16")
    p.add_argument("--dry-run", action="store_true", help="validate arguments, print the plan; no GPU")
    p.add_argument("--fake", action="store_true", help="with --dry-run: fill fake numbers, print tables")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="skip what is left after this")
    p.add_argument("--no-do-bench", action="store_true", help="graph replay only (faster)")
    p.add_argument("--pdl-ab", action="store_true", help="add vllm_c and triton columns without PDL")
    p.add_argument(
        "--whole-row-ab", action="store_true", help="add triton's whole-row launch of the fused norm + quant ops"
    )
    p.add_argument(
        "--unfused-ab",
        action="store_true",
        help="add each fused norm/activation + quant op as triton's two unfused kernels (norm, then quant)",
    )
    p.add_argument("--build-timeout-s", type=float, default=240.0, help="max wait for a background build")
    p.add_argument(
        "--retime-s",
        type=float,
        default=20.0,
        help="of the budget, seconds kept to re-time close rows (ours/best anchor within "
        f"{RETIME_RANGE[0]}-{RETIME_RANGE[1]}x) in interleaved rounds; 0: none",
    )
    args = p.parse_args(argv)

    def pick(name: str, given: list | None, default: tuple, known: tuple | None = None) -> tuple:
        vals = tuple(given) if given is not None else default
        # accept comma-separated values too: --ops rms_norm,silu_and_mul
        out: list = []
        for v in vals:
            if isinstance(v, str):
                out.extend(x for x in v.split(",") if x)
            else:
                out.append(v)
        if known is not None:
            bad = [v for v in out if v not in known]
            if bad:
                p.error(f"--{name}: unknown {bad}; known: {', '.join(known)}")
        return tuple(dict.fromkeys(out))

    args.ops = pick("ops", args.ops, OPS, ALL_OPS)
    args.tokens = pick("tokens", args.tokens, QUICK["tokens"] if args.quick else TOKENS)
    args.hidden = pick("hidden", args.hidden, QUICK["hidden"] if args.quick else HIDDENS)
    args.dtypes = pick("dtypes", args.dtypes, QUICK["dtypes"] if args.quick else DTYPES, DTYPES)
    args.providers = pick("providers", args.providers, PROVIDERS, PROVIDERS)
    args.anchors = pick("anchors", args.anchors, ANCHORS, ANCHORS)
    for name in ("tokens", "hidden"):
        if any(v < 1 for v in getattr(args, name)):
            p.error(f"--{name}: values must be >= 1")
    if not args.providers and not args.anchors:
        p.error("nothing to measure: give --providers and/or --anchors")
    if args.fake and not args.dry_run:
        p.error("--fake needs --dry-run")
    if args.budget_s <= 0:
        p.error("--budget-s must be > 0")
    return args


def columns(args: argparse.Namespace) -> list[str]:
    chosen = set(args.anchors) | set(args.providers)
    if getattr(args, "pdl_ab", False):
        chosen |= {c for c, p in NO_PDL.items() if p in args.providers}
    if getattr(args, "whole_row_ab", False):
        chosen |= {c for c, p in WHOLE_ROW.items() if p in args.providers}
    if getattr(args, "unfused_ab", False):
        chosen |= {c for c, p in UNFUSED.items() if p in args.providers}
    return [c for c in ORDER if c in chosen]


def plan(args: argparse.Namespace) -> list[Cell]:
    """Cells in measuring order: dtype, then column (:data:`ORDER`), then op, H, T."""
    cells = []
    for dt in args.dtypes:
        for impl in columns(args):
            for op in args.ops:
                if op not in APPLIES[impl]:
                    continue
                for h in args.hidden:
                    for t in args.tokens:
                        cells.append(Cell(op, dt, t, h, impl))
    return cells


# ---------------------------------------------------------------------------------------------
# Environment for the JIT builds


def resolve_cuda_home() -> str | None:
    """The real CUDA toolkit (nvcc on PATH may be a wrapper script); vllm_c's resolver first."""
    try:
        from ircore_vllm_c.kernels import resolve_cuda_home as _resolve

        home = _resolve()
        if home:
            return home
    except Exception as exc:
        log(f"note: ircore_vllm_c.kernels.resolve_cuda_home unavailable ({type(exc).__name__}: {exc})")
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = os.path.realpath(nvcc)
        try:
            with open(real, "rb") as fh:
                head = fh.read(4)
            if head == b"\x7fELF":
                return str(Path(real).parent.parent)
            import re

            text = Path(real).read_text(errors="replace")[:65536]
            for m in re.finditer(r"(/[^\s\"'$;:]+)/bin/nvcc\b", text):
                if (Path(m.group(1)) / "bin" / "nvcc").is_file():
                    return m.group(1)
        except OSError:
            pass
    for cand in (
        "/usr/local/cuda",
        *sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True),
    ):
        if (Path(cand) / "bin" / "nvcc").is_file():
            return cand
    return None


def nvidia_include_dirs() -> list[str]:
    """``site-packages/nvidia/cu13/include`` (and cu12) from torch's CUDA wheels, where present."""
    dirs = []
    try:
        spec = importlib.util.find_spec("nvidia")
        roots = list(spec.submodule_search_locations or []) if spec else []
    except Exception:
        roots = []
    for root in roots:
        for sub in ("cu13", "cu12"):
            inc = Path(root) / sub / "include"
            if inc.is_dir():
                dirs.append(str(inc))
    return dirs


def setup_build_env(arch: str | None) -> dict[str, str]:
    """Set (in os.environ, inherited by the build subprocesses) what the JIT builds need."""
    env: dict[str, str] = {}
    if not os.environ.get("FLASHINFER_CUDA_ARCH_LIST"):
        env["FLASHINFER_CUDA_ARCH_LIST"] = arch or "9.0"
    ws = os.environ.get("FLASHINFER_WORKSPACE_BASE")
    if not ws or not os.access(ws, os.W_OK):
        ws = str(Path(os.environ.get("TMPDIR", "/tmp")) / "ircore_flashinfer_ws")
        Path(ws).mkdir(parents=True, exist_ok=True)
        env["FLASHINFER_WORKSPACE_BASE"] = ws
    home = resolve_cuda_home()
    if home:
        env["CUDA_HOME"] = home
        env["CUDA_PATH"] = home
        path = os.environ.get("PATH", "")
        if f"{home}/bin" not in path.split(os.pathsep):
            env["PATH"] = f"{home}/bin{os.pathsep}{path}"
        need = ("cublasLt.h", "curand_kernel.h")
        if not all((Path(home) / "include" / h).is_file() for h in need):
            extra = [d for d in nvidia_include_dirs() if d not in os.environ.get("CPATH", "")]
            if extra:
                env["CPATH"] = os.pathsep.join([*extra, *filter(None, [os.environ.get("CPATH")])])
    # Whichever dir holds ninja (pip's ninja package puts it next to python or in ninja.BIN_DIR).
    if not shutil.which("ninja", path=env.get("PATH", os.environ.get("PATH"))):
        with contextlib.suppress(Exception):
            import ninja  # type: ignore[import-not-found]

            env["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{env.get('PATH', os.environ.get('PATH', ''))}"
    os.environ.update(env)
    return env


VLLM_C_BUILD = """
import sys
sys.path.insert(0, {path!r})
from ircore_vllm_c import load_kernels
r = load_kernels(cuda=True)
print("BUILD_RESULT", "ok" if r is None else r, flush=True)
sys.exit(0 if r is None else 1)
"""

FLASHINFER_BUILD = """
import flashinfer.norm as n
n.get_norm_module()
print("BUILD_RESULT ok", flush=True)
"""


class Build:
    """A JIT build in a background subprocess (so that no CUDA work of the build's process can
    disturb the main process's graph captures); its output goes to a log file."""

    def __init__(self, name: str, code: str, log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"build_{name}.log"
        self.t0 = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.result: str | None = None  # None while running; "ok" or a reason
        self.seconds: float | None = None
        try:
            fh = open(self.log_path, "w")
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], stdout=fh, stderr=subprocess.STDOUT, env=os.environ.copy()
            )
            fh.close()
            log(f"background build {name}: started (log {self.log_path})")
        except Exception as exc:
            self.result = f"could not start: {type(exc).__name__}: {exc}"

    def done(self) -> bool:
        """Whether the build is over (its result then recorded), without waiting."""
        if self.result is None and self.proc is not None and self.proc.poll() is not None:
            self.wait(1)
        return self.result is not None

    def wait(self, timeout: float) -> str:
        if self.result is not None:
            return self.result
        assert self.proc is not None
        if self.proc.poll() is None:
            log(f"waiting for background build {self.name} (up to {timeout:.0f} s) ...")
        try:
            rc = self.proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.result = f"build timed out after {time.monotonic() - self.t0:.0f} s (log {self.log_path})"
            return self.result
        self.seconds = time.monotonic() - self.t0
        if rc == 0:
            self.result = "ok"
        else:
            tail = ""
            with contextlib.suppress(OSError):
                lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
                tail = " | ".join(lines[-3:])[-400:]
            self.result = f"build failed (rc {rc}): {tail} (log {self.log_path})"
        log(f"background build {self.name}: {self.result} ({self.seconds:.0f} s)")
        return self.result


# ---------------------------------------------------------------------------------------------
# Implementations


class Impls:
    """Loads each column once (lazily) and builds (call, inplace) for an (op, column)."""

    def __init__(self, builds: dict[str, Build], build_timeout: float) -> None:
        self.builds = builds
        self.build_timeout = build_timeout
        self.loaded: dict[str, Any] = {}
        self.why: dict[str, str] = {}
        self.compiled: dict[str, Any] = {}

    @contextlib.contextmanager
    def pdl_off(self, impl: str):
        """Inside: a ``*_nopdl`` column's provider launches without PDL (no-op for the others)."""
        provider = NO_PDL.get(impl)
        if provider is None:
            yield
            return
        self.load(provider)
        if provider == "vllm_c":
            from ircore_vllm_c.kernels import set_pdl
        else:
            from ircore_triton.kernels import set_pdl
        set_pdl(False)
        try:
            yield
        finally:
            set_pdl(None)

    def load(self, impl: str) -> Any:
        if impl in self.loaded:
            return self.loaded[impl]
        if impl in self.why:
            raise RuntimeError(self.why[impl])
        try:
            self.loaded[impl] = self._load(impl)
            return self.loaded[impl]
        except Exception as exc:
            self.why[impl] = (
                f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:400]
            )
            log(f"column {impl} unavailable: {self.why[impl]}")
            raise RuntimeError(self.why[impl]) from exc

    def _load(self, impl: str) -> Any:
        import torch

        if impl == "eager":
            return torch.nn.functional
        if impl == "compile":
            import torch._dynamo

            cfg = torch._dynamo.config
            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(cfg, name):
                    setattr(cfg, name, 4096)
            for name in ("accumulated_recompile_limit", "accumulated_cache_size_limit"):
                if hasattr(cfg, name):
                    setattr(cfg, name, 1 << 16)
            from ircore import get_op
            from ircore.ops import fused_add_rms_norm, layer_norm, rms_norm, rms_norm_gated, silu_and_mul

            return {
                **{name: get_op(name).native for name, _, _ in QUANT_SPEC.values()},
                "rms_norm": rms_norm.native,
                "fused_add_rms_norm": fused_add_rms_norm.native,
                "silu_and_mul": silu_and_mul.native,
                "rms_norm_gated": rms_norm_gated.native,
                "layer_norm": layer_norm.native,
            }
        if impl == "liger":
            from liger_kernel.transformers import functional as lf

            return lf
        if impl == "flashinfer":
            b = self.builds.get("flashinfer")
            if b is not None:
                res = b.wait(self.build_timeout)
                if res != "ok":
                    log(f"flashinfer background build: {res}; trying the in-process build")
            import flashinfer.norm as fn

            fn.get_norm_module()  # cached by the background build, else built here
            return fn
        if impl == "vllm_c":
            b = self.builds.get("vllm_c")
            if b is not None:
                res = b.wait(self.build_timeout)
                if res != "ok":
                    log(f"vllm_c background build: {res}; trying in process")
            from ircore_vllm_c import kernels

            reason = kernels.load_kernels(cuda=True)
            if reason is not None:
                raise RuntimeError(reason)
            return torch.ops.ircore_vllm_c
        if impl == "triton":
            from ircore_triton import impls

            return impls
        raise ValueError(impl)

    def fn(self, impl: str, op: str, h: int):  # -> Callable[..., tuple[Tensor, ...]]
        """A function of the op's tensors (x[, r], w) returning (out[, residual])."""
        import torch
        import torch.nn.functional as F

        if impl in WHOLE_ROW:  # the provider's whole-row variant of a fused norm + quant op
            return self._quant_fn(impl, op, self.load(WHOLE_ROW[impl]))
        if impl in UNFUSED:  # the fused op as the provider's two unfused kernels
            self.load(UNFUSED[impl])
            return unfused_fn(UNFUSED[impl], op)
        impl = NO_PDL.get(impl, impl)
        mod = self.load(impl)
        if op in NORM_OPS:
            return self._norm_fn(impl, op, h, mod)
        if op in ACT_FORM:
            return self._act_fn(impl, op, h, mod)
        if op in ROPE_OPS:
            return self._rope_fn(impl, op)
        if op in QUANT_SPEC:
            return self._quant_fn(impl, op, mod)
        if impl == "eager":
            if op == "rms_norm":
                return lambda x, w: (F.rms_norm(x, (h,), w, EPS),)
            if op == "fused_add_rms_norm":

                def fused(x, r, w):
                    s = x + r
                    return F.rms_norm(s, (h,), w, EPS), s

                return fused
            return lambda x: (F.silu(x[:, :h]) * x[:, h:],)
        if impl == "compile":
            c = self.compiled.get(op)
            if c is None:
                c = self.compiled[op] = torch.compile(mod[op], fullgraph=True, dynamic=False)
            if op == "rms_norm":
                return lambda x, w: (c(x, w, EPS, None),)
            if op == "fused_add_rms_norm":
                return lambda x, r, w: tuple(c(x, r, w, EPS, None))
            return lambda x: (c(x),)
        if impl == "liger":
            if op == "rms_norm":
                return lambda x, w: (mod.liger_rms_norm(x, w, EPS),)
            return lambda x, r, w: tuple(mod.liger_fused_add_rms_norm(x, r, w, EPS))
        if impl == "flashinfer":
            if op == "rms_norm":
                return lambda x, w: (mod.rmsnorm(x, w, EPS),)

            def fi_fused(x, r, w):
                mod.fused_add_rmsnorm(x, r, w, EPS)
                return x, r

            return fi_fused
        if impl == "vllm_c":
            if op == "rms_norm":
                rms = mod.rms_norm.default
                return lambda x, w: (rms(x, w, EPS, None),)
            if op == "fused_add_rms_norm":
                fz = mod.fused_add_rms_norm.default

                def vc_fused(x, r, w):
                    fz(x, r, w, EPS, None)
                    return x, r

                return vc_fused
            silu = mod.silu_and_mul.default
            return lambda x: (silu(x),)
        if impl == "triton":
            if op == "rms_norm":
                return lambda x, w: (mod.rms_norm(x, w, EPS),)
            if op == "fused_add_rms_norm":
                return lambda x, r, w: tuple(mod.fused_add_rms_norm(x, r, w, EPS))
            return lambda x: (mod.silu_and_mul(x),)
        raise ValueError(impl)


    def _act_fn(self, impl: str, op: str, h: int, mod: Any):
        """The gated activations: x (T, 2H) -> (out,)."""
        import torch
        import torch.nn.functional as F

        import ircore

        name, params = ACT_FORM[op]
        if impl == "eager":  # vLLM's forward_native, in x's dtype
            if name == "gelu_and_mul":
                return lambda x: (F.gelu(x[:, :h], approximate=params[0]) * x[:, h:],)
            if name == "mul_and_silu":
                return lambda x: (x[:, :h] * F.silu(x[:, h:]),)
            if name == "fatrelu_and_mul":
                return lambda x: (F.threshold(x[:, :h], params[0], 0.0) * x[:, h:],)
            alpha, limit = params

            def swiglu(x):
                g = x[:, ::2].clamp(max=limit)
                u = x[:, 1::2].clamp(min=-limit, max=limit)
                return ((u + 1) * (g * torch.sigmoid(g * alpha)),)

            return swiglu
        if impl == "compile":
            c = self.compiled.get(op)
            if c is None:
                c = self.compiled[op] = torch.compile(ircore.get_op(name).native, fullgraph=True, dynamic=False)
            return lambda x: (c(x, *params),)
        if impl == "liger":  # GEGLU with the tanh GELU, on the two halves (views)
            from liger_kernel.ops.geglu import LigerGELUMulFunction

            return lambda x: (LigerGELUMulFunction.apply(x[:, :h], x[:, h:]),)
        kernel = getattr(mod, name).default if impl == "vllm_c" else getattr(mod, name)
        return lambda x: (kernel(x, *params),)
    def _rope_fn(self, impl: str, op: str):
        """The ROPE_OPS, as functions of rope_inputs' tensors returning the op's outputs."""
        import torch

        import ircore

        d = ROPE_HEAD_DIM
        native = ircore.get_op(op).native
        if op == "rotary_embedding":
            extra: tuple = (d, d)
            bind = lambda p, q, k, c, fn: fn(p, q, k, *extra, c, True)  # noqa: E731
        elif op == "rotary_pos_emb":
            bind = lambda q, k, cos, sin, fn: fn(q, k, cos, sin, 1)  # noqa: E731
        else:
            hq_of = lambda qkv: qkv.shape[-1] // d - 2 * ROPE_KV_HEADS  # noqa: E731
            bind = lambda qkv, wq, wk, c, p, fn: fn(  # noqa: E731
                qkv, hq_of(qkv), ROPE_KV_HEADS, ROPE_KV_HEADS, d, EPS, wq, wk, c, True, p
            )

        def tupled(out: Any) -> tuple:
            return out if isinstance(out, tuple) else (out,)

        if impl == "eager":
            return lambda *a: tupled(bind(*a, native))
        if impl == "compile":
            c = self.compiled.get(op)
            if c is None:
                c = self.compiled[op] = torch.compile(native, fullgraph=True, dynamic=False)
            return lambda *a: tupled(bind(*a, c))
        if impl == "liger":  # in place on HF's q/k views
            from liger_kernel.transformers.rope import liger_rotary_pos_emb

            return lambda q, k, cos, sin: tuple(liger_rotary_pos_emb(q, k, cos, sin))
        if impl == "flashinfer":  # in place; FlashInfer takes an fp32 cache (as vLLM keeps it for it)
            from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace

            fp32: dict[int, Any] = {}

            def fi_rope(p, q, k, cache):
                c32 = fp32.get(cache.data_ptr())
                if c32 is None:
                    c32 = fp32[cache.data_ptr()] = cache.float()
                apply_rope_with_cos_sin_cache_inplace(p, q, k, d, c32, True)
                return q, k

            return fi_rope
        ircore.get_priority(op)  # loads the providers
        registered = ircore.get_op(op).impls.get(impl)
        if registered is None:
            raise RuntimeError(f"provider {impl!r} registers no implementation of {op} (yet)")
        run, supports = registered.run, registered.supports_args

        def provider_fn(*a):
            if supports is not None and not bind(*a, supports):
                raise RuntimeError(f"{impl}'s supports_args declines {op} here")
            return tupled(bind(*a, run))

        return provider_fn
    def _quant_fn(self, impl: str, op: str, mod: Any):
        """QUANT_OPS: a function of the op's tensors (QUANT_SPEC) returning its outputs as a tuple."""
        import torch

        name = QUANT_SPEC[op][0]
        if impl == "eager":
            from ircore import get_op

            f = get_op(name).native
        elif impl == "compile":
            f = self.compiled.get(name)
            if f is None:
                f = self.compiled[name] = torch.compile(mod[name], fullgraph=True, dynamic=False)
        elif impl == "flashinfer":  # out = fp8(rms_norm(x) * w / scale), into a tensor we allocate
            fp8 = getattr(torch, FP8)
            kernel = getattr(mod, FLASHINFER_QUANT[op])
            residual = op.startswith("fused_add")

            # FlashInfer takes (out, x[, r], w, scale, eps): the cell's tensors in their order;
            # the residual form writes x + r into r, the op's residual output
            def fi_quant(*ts):
                out = torch.empty(ts[0].shape, dtype=fp8, device=ts[0].device)
                kernel(out, *ts, EPS)
                return (out, ts[1]) if residual else (out,)

            return fi_quant
        elif impl in WHOLE_ROW:  # the registered predicate, the whole-row variant's launch
            f = registered_run(WHOLE_ROW[impl], name, getattr(mod, f"{name}_invariant"))
        else:  # a provider's kernel, through ircore's registration (as _rope_fn)
            f = registered_run(impl, name)

        def call(*ts):
            out = f(*quant_args(op, ts))
            return out if isinstance(out, tuple) else (out,)

        return call

    def _norm_fn(self, impl: str, op: str, h: int, mod: Any):
        """The NORM_OPS: gated (x, gate, w) -> (out,); layer_norm (x, w, b) or nobias (x, w)."""
        import torch
        import torch.nn.functional as F

        name = IRCORE_OP[op]
        if op in GATED_FORM:
            form = GATED_FORM[op](h)
            if impl == "eager":
                from ircore.ops import rms_norm_gated

                return lambda x, g, w: (rms_norm_gated.native(x, g, w, EPS, *form),)
            if impl == "compile":
                c = self.compiled.get(name)
                if c is None:
                    c = self.compiled[name] = torch.compile(mod[name], fullgraph=True, dynamic=False)
                return lambda x, g, w: (c(x, g, w, EPS, *form),)
            kernel = mod.rms_norm_gated.default if impl == "vllm_c" else mod.rms_norm_gated
            return lambda x, g, w: (kernel(x, g, w, EPS, *form),)
        if impl == "eager":
            f = lambda x, w, b=None: (F.layer_norm(x, (h,), w, b, EPS),)  # noqa: E731
        elif impl == "compile":
            c = self.compiled.get(name)
            if c is None:
                c = self.compiled[name] = torch.compile(mod[name], fullgraph=True, dynamic=False)
            f = lambda x, w, b=None: (c(x, w, b, EPS),)  # noqa: E731
        elif impl == "liger":  # LigerLayerNorm's kernel; it needs a bias: zeros where there is none
            zeros: dict[tuple, Any] = {}

            def f(x, w, b=None):
                if b is None:
                    key = (w.dtype, w.device)
                    b = zeros.get(key)
                    if b is None:
                        b = zeros[key] = torch.zeros_like(w)
                return (mod.liger_layer_norm(x, w, b, EPS),)
        else:
            kernel = mod.layer_norm.default if impl == "vllm_c" else mod.layer_norm
            f = lambda x, w, b=None: (kernel(x, w, b, EPS),)  # noqa: E731
        return f


# ---------------------------------------------------------------------------------------------
# Measuring


def make_inputs(op: str, t: int, h: int, dtype) -> tuple:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(1000 * t + h)

    def rnd(*shape: int, scale: float = 1.0, shift: float = 0.0):
        return (torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float32) * scale + shift).to(
            dtype
        )

    if op == "rms_norm":
        return rnd(t, h), rnd(h, scale=0.1, shift=1.0)
    if op == "fused_add_rms_norm":
        return rnd(t, h), rnd(t, h), rnd(h, scale=0.1, shift=1.0)
    if op in GATED_FORM:
        return rnd(t, h), rnd(t, h, scale=2.0), rnd(h, scale=0.1, shift=1.0)
    if op == "layer_norm":
        return rnd(t, h, shift=0.5), rnd(h, scale=0.1, shift=1.0), rnd(h, scale=0.1)
    if op == "layer_norm_nobias":
        return rnd(t, h, shift=0.5), rnd(h, scale=0.1, shift=1.0)
    if op in ROPE_OPS:
        return rope_inputs(op, t, h, dtype, rnd, "cuda")
    if op in QUANT_SPEC:
        make = {
            "x": lambda: rnd(t, h, scale=2.0),
            "x2": lambda: rnd(t, 2 * h, scale=2.0),
            "r": lambda: rnd(t, h),
            "w": lambda: rnd(h, scale=0.1, shift=1.0),
            "scale": lambda: torch.full((1,), 0.02, device="cuda"),
        }
        return tuple(make[a]() for a in QUANT_SPEC[op][1] if a != "eps")
    return (rnd(t, 2 * h, scale=2.0),)


def rope_inputs(op: str, t: int, h: int, dtype, rnd, device: str) -> tuple:
    """The tensors of one ROPE_OPS call (see ROPE_OPS): positions 0..T-1, a cache of
    max(T, 4096) rows (base 10000) in dtype."""
    import torch

    d, kv = ROPE_HEAD_DIM, ROPE_KV_HEADS * ROPE_HEAD_DIM
    rows = max(t, 4096)
    inv_freq = 10000.0 ** -(torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
    freqs = torch.outer(torch.arange(rows, dtype=torch.float32, device=device), inv_freq)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
    positions = torch.arange(t, device=device)
    if op == "rotary_embedding":
        return positions, rnd(t, h), rnd(t, kv), cache
    if op == "rotary_pos_emb":
        q = rnd(1, t, h).view(1, t, h // d, d).transpose(1, 2)
        k = rnd(1, t, kv).view(1, t, kv // d, d).transpose(1, 2)
        emb = torch.cat((freqs[:t], freqs[:t]), dim=-1)[None]
        return q, k, emb.cos().to(dtype), emb.sin().to(dtype)
    weights = rnd(d, scale=0.1, shift=1.0), rnd(d, scale=0.1, shift=1.0)
    return rnd(t, h + 2 * kv, scale=2.0), *weights, cache, positions


def reference(op: str, inputs: tuple, h: int) -> tuple:
    """fp32 reference outputs (out[, residual])."""
    import torch
    import torch.nn.functional as F

    def norm(xf, wf):
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * wf

    if op in ROPE_OPS:  # the op's native on fp32 copies (the cache's values as they are)
        from ircore.ops import fused_qk_norm_rope, rotary_embedding, rotary_pos_emb

        f = [a.float() if a.is_floating_point() else a for a in inputs]
        d = ROPE_HEAD_DIM
        if op == "rotary_embedding":
            return tuple(rotary_embedding.native(f[0], f[1], f[2], d, d, f[3], True))
        if op == "rotary_pos_emb":
            return tuple(rotary_pos_emb.native(*f, 1))
        hq = f[0].shape[-1] // d - 2 * ROPE_KV_HEADS
        kv = ROPE_KV_HEADS
        return (fused_qk_norm_rope.native(f[0], hq, kv, kv, d, EPS, f[1], f[2], f[3], True, f[4]),)
    if op in QUANT_SPEC:  # the native, uncompiled (fp8 outputs compared as their values)
        outs = Impls.__new__(Impls)._quant_fn("eager", op, None)(*inputs)
        return tuple(o.float() for o in outs)
    if op in GATED_FORM:
        from ircore.ops import rms_norm_gated

        x, g, w = inputs
        gs, nbg, _ = GATED_FORM[op](h)
        return (rms_norm_gated.native(x.float(), g.float(), w.float(), EPS, gs, nbg, False),)
    if op in ("layer_norm", "layer_norm_nobias"):
        fl = [a.float() for a in inputs]
        return (F.layer_norm(fl[0], (h,), *fl[1:], eps=EPS),)
    if op == "rms_norm":
        x, w = inputs
        return (norm(x.float(), w.float()),)
    if op == "fused_add_rms_norm":
        x, r, w = inputs
        s = x.float() + r.float()
        return norm(s, w.float()), s
    (x,) = inputs
    xf = x.float()
    if op in ACT_FORM:
        import ircore

        name, params = ACT_FORM[op]
        return (ircore.get_op(name).native(xf, *params),)
    return (F.silu(xf[:, :h]) * xf[:, h:],)


def quant_args(op: str, tensors: tuple) -> tuple:
    """The ircore op's arguments for a QUANT_OPS cell: its tensors in order, epsilon where
    QUANT_SPEC puts it, then the op's other arguments."""
    import torch

    _, names, extra = QUANT_SPEC[op]
    it = iter(tensors)
    return (
        *(EPS if a == "eps" else next(it) for a in names),
        *(getattr(torch, FP8) if a == "fp8" else a for a in extra),
    )


def registered_run(provider: str, name: str, run: Any = None) -> Any:
    """``provider``'s registered implementation of the ircore op ``name`` (or ``run`` in its place,
    behind the same predicate: a variant's launch), refusing the calls its predicate declines (a
    benchmark column must not fall back to another implementation)."""
    import ircore

    ircore.get_priority(name)  # loads the providers
    registered = ircore.get_op(name).impls.get(provider)
    if registered is None:
        raise RuntimeError(f"{provider} has no kernel for {name}")
    run, supports = run or registered.run, registered.supports_args

    def f(*a: Any) -> Any:
        if supports is not None and not supports(*a):
            raise RuntimeError(f"{provider}'s supports_args declines {name} here")
        return run(*a)

    return f


def unfused_fn(provider: str, op: str) -> Any:
    """A fused norm/activation + quant op (UNFUSED_PARTS) as ``provider``'s two kernels, the first
    op's output handed to the quant: the natives' own composition, each part a kernel. Returns the
    fused op's outputs as a tuple (a fused_add form: the quant's outputs, then the residual)."""
    first_name, n_first, quant_name = UNFUSED_PARTS[op]
    first, quant = registered_run(provider, first_name), registered_run(provider, quant_name)
    pad = (None,) if first_name != "silu_and_mul" else ()  # the norms' trailing argument, as the natives pass it

    def call(*ts: Any) -> tuple:
        args = quant_args(op, ts)
        y = first(*args[:n_first], *pad)
        residual = None
        if first_name == "fused_add_rms_norm":
            y, residual = y
        q = quant(y, *args[n_first:])
        q = q if isinstance(q, tuple) else (q,)
        return q if residual is None else (*q, residual)

    return call


def quant_problem(op: str, inputs: tuple, outs: tuple) -> str | None:
    """The op's own verdict on a QUANT_OPS cell's outputs (the conformance kit's comparison
    against its fp64 reference: fp8 values dequantised, one fp8 flip allowed, scales within the
    op's tolerance), or None. A 1% relative error is no test of fp8 values: a rounding one ulp
    apart moves an element by 1/16, and Inductor's compile of the natives keeps intermediates
    in fp32 where the natives round them, flipping a few percent of the values."""
    from ircore import get_op
    from ircore.testing import compare_to_reference

    name = QUANT_SPEC[op][0]
    return compare_to_reference(get_op(name), outs, quant_args(op, inputs)).problem


def rel_err(out, ref) -> float:
    import torch

    out = out.float()
    if out.shape != ref.shape:
        raise AssertionError(f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    den = torch.linalg.vector_norm(ref).item()
    num = torch.linalg.vector_norm(out - ref).item()
    return num / den if den > 0 else num


def _triton_configs() -> dict[str, str]:
    """The triton provider's tuned launch configs (``kernels.tuned_configs()``), as strings."""
    from ircore_triton import kernels

    return {str(k): str(v) for k, v in kernels.tuned_configs().items()}


def measure(cell: Cell, impls: Impls, copy_bw: float | None, do_bench: bool) -> None:
    import torch
    from _gpu_timing import do_bench_us, graph_us

    dtype = getattr(torch, DTYPE_NAMES[cell.dtype])
    elt = torch.empty((), dtype=dtype).element_size()
    cell.bytes = op_bytes(cell.op, cell.tokens, cell.hidden, elt)
    try:
        fn = impls.fn(cell.impl, cell.op, cell.hidden)
    except RuntimeError as exc:
        cell.status, cell.error = "unavailable", str(exc)
        return
    inputs = make_inputs(cell.op, cell.tokens, cell.hidden, dtype)
    inplace = (cell.op, cell.impl) in INPLACE
    # 1. correctness, on copies (in-place kernels overwrite their inputs). For the triton columns
    # this first call also runs the provider's autotune for the cell's key (kernels._pick: each
    # candidate launch timed by graph replay, the fastest cached), so timing below sees the tuned
    # launch; the configs it picked are logged and kept in the cell's JSON ("triton_configs").
    tuned_before = _triton_configs() if cell.impl in ("triton", "triton_nopdl") else None
    ref = reference(cell.op, inputs, cell.hidden)
    outs = fn(*[a.clone() for a in inputs])
    torch.cuda.synchronize()
    if tuned_before is not None:
        picked = {k: v for k, v in _triton_configs().items() if tuned_before.get(k) != v}
        if picked:
            cell.extra["triton_configs"] = picked
            for k, v in picked.items():
                log(f"    triton tuned {k}: {v}")
    if len(outs) != len(ref):
        cell.status, cell.error = "fail", f"{len(outs)} outputs, expected {len(ref)}"
        return
    errs = [rel_err(o, r) for o, r in zip(outs, ref)]
    cell.rel_err = errs[0]
    if len(errs) > 1:
        cell.rel_err_residual = errs[1]
    if not all(math.isfinite(e) and e < REL_TOL for e in errs):
        problem = quant_problem(cell.op, inputs, outs) if cell.op in QUANT_SPEC else "not an fp8 op"
        if problem is not None:
            cell.status = "fail"
            cell.error = f"relative error {', '.join(f'{e:.3g}' for e in errs)} >= {REL_TOL}"
            if cell.op in QUANT_SPEC:
                cell.error += f"; {problem}"
            return
        cell.extra["fp8_checked_by_op"] = True  # past 1%, within the op's own tolerance
    del outs, ref
    # 2. timing, on work buffers (reset before each timing for in-place kernels)
    work = [a.clone() for a in inputs] if inplace else list(inputs)

    def reset() -> None:
        if inplace:
            for dst, src in zip(work, inputs):
                dst.copy_(src)

    def call() -> None:
        fn(*work)

    est_us = None
    if do_bench:
        reset()
        cell.do_bench_us = do_bench_us(call, **DO_BENCH)
        est_us = cell.do_bench_us
    else:
        reset()
        call()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        est_us = (time.perf_counter() - t0) * 1e6 / 5
    lo, hi = GRAPH_CALLS
    calls = int(min(hi, max(lo, GRAPH_TARGET_US / max(est_us, 1e-3))))
    reset()
    torch.cuda.synchronize()
    try:
        cell.graph_us = graph_us(call, calls, replays=GRAPH_REPLAYS)
        cell.graph_calls = calls
    except Exception as exc:
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        cell.extra["graph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        log(f"    graph capture failed: {cell.extra['graph_error']}")
    reset()
    best = cell.graph_us or cell.do_bench_us
    if best:
        cell.gbps = cell.bytes / (best * 1e-6) / 1e9
        if copy_bw:
            cell.pct_copy = 100.0 * cell.gbps / copy_bw
    cell.status = "ok" if cell.graph_us is not None else "error"
    if cell.status == "error":
        cell.error = cell.extra.get("graph_error")


# ---------------------------------------------------------------------------------------------
# Tables


def _fmt_us(c: Cell | None, key: str = "graph_us") -> str:
    if c is None:
        return "—"
    if c.status in ("ok", "error") and getattr(c, key) is not None:
        v = getattr(c, key)
        return f"{v:.1f}" if v < 1000 else f"{v:.0f}"
    return {"fail": "FAIL", "error": "ERR", "skip": "skip", "unavailable": "n/a", "pending": "skip"}.get(
        c.status, "?"
    )


SMALL_T = 1024  # decode sizes: where the summary also reports on its own


def best_cells(cells: list[Cell]) -> dict[tuple[str, str, int, int], dict[str, Cell]]:
    """Per row (op, dtype, T, H): the fastest measured cell of ours ("ours") and of the anchors
    ("anchor"), by graph replay."""
    best: dict[tuple[str, str, int, int], dict[str, Cell]] = {}
    for c in cells:
        if c.status != "ok" or c.graph_us is None:
            continue
        kind = "ours" if c.impl in PROVIDERS else "anchor" if c.impl in ANCHORS else None
        if kind is None:
            continue
        slot = best.setdefault((c.op, c.dtype, c.tokens, c.hidden), {})
        if kind not in slot or c.graph_us < slot[kind].graph_us:
            slot[kind] = c
    return best


def context_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA error that leaves the process's context unusable (an illegal
    address, a launch failure, a device-side assert): every later CUDA call raises it again."""
    text = str(exc)
    return any(m in text for m in ("illegal memory access", "unspecified launch failure", "device-side assert"))


def next_cell(pending: list[Cell], builds: dict[str, Build]) -> Cell:
    """Take the next cell to measure from ``pending`` (in :func:`plan`'s order): the first whose
    column needs no build still running; the first of all when every one waits on a build."""
    for i, cell in enumerate(pending):
        build = builds.get(BUILT_BY.get(cell.impl, ""))
        if build is None or build.done():
            return pending.pop(i)
    return pending.pop(0)


def retime_close_rows(cells: list[Cell], make_runner: Any, deadline: float) -> int:
    """Time each close row's two cells (ours and the best anchor, :data:`RETIME_RANGE`) again in
    the same interleaved rounds (``ircore.tools.timing.interleaved_medians``), until ``deadline``
    (``time.monotonic()``); ``make_runner(cell)`` gives a runner for a cell (a CUDA graph of its
    call). Each re-timed cell keeps ``extra["interleaved_us"]`` and the other cell's column as
    ``extra["interleaved_with"]``. Returns how many rows were re-timed."""
    from ircore.tools.timing import interleaved_medians

    done = 0
    for key, slot in sorted(best_cells(cells).items()):
        if "ours" not in slot or "anchor" not in slot:
            continue
        ours, anchor = slot["ours"], slot["anchor"]
        assert ours.graph_us is not None and anchor.graph_us is not None
        if not RETIME_RANGE[0] <= ours.graph_us / anchor.graph_us <= RETIME_RANGE[1]:
            continue
        if time.monotonic() > deadline:
            log("re-timing close rows: out of time")
            break
        try:
            runners = {c.impl: make_runner(c) for c in (ours, anchor)}
            med = interleaved_medians(runners, rounds=RETIME_ROUNDS, round_s=0.005)
        except Exception as exc:
            log(f"re-timing {key}: {type(exc).__name__}: {str(exc)[:200]}")
            if context_lost(exc):
                log("re-timing close rows: the CUDA context is lost; the rows left keep their in-turn figures")
                break
            continue
        for c, other in ((ours, anchor), (anchor, ours)):
            c.extra["interleaved_us"] = med[c.impl] * 1e6
            c.extra["interleaved_with"] = other.impl
        log(
            f"re-timed {key}: ours/best {ours.graph_us / anchor.graph_us:.3f}x in turn, "
            f"{med[ours.impl] / med[anchor.impl]:.3f}x interleaved"
        )
        done += 1
    return done


def retimed_table(cells: list[Cell]) -> list[str]:
    """Markdown lines: the close rows re-timed in interleaved rounds (empty if none)."""
    rows = []
    for (op, dt, t, h), slot in sorted(best_cells(cells).items()):
        ours, anchor = slot.get("ours"), slot.get("anchor")
        if ours is None or anchor is None or "interleaved_us" not in ours.extra:
            continue
        if ours.extra.get("interleaved_with") != anchor.impl or "interleaved_us" not in anchor.extra:
            continue
        assert ours.graph_us is not None and anchor.graph_us is not None
        rows.append(
            f"| {op} | {dt} | {t}x{h} | {ours.impl} | {col_label(anchor.impl, op)} | "
            f"{ours.graph_us / anchor.graph_us:.3f}x | "
            f"{ours.extra['interleaved_us'] / anchor.extra['interleaved_us']:.3f}x |"
        )
    if not rows:
        return []
    return [
        "",
        f"Close rows re-timed (ours/best anchor within {RETIME_RANGE[0]}-{RETIME_RANGE[1]}x when each "
        f"cell was timed in turn): the two cells captured again and timed in the same interleaved "
        f"rounds, medians of {RETIME_ROUNDS}.",
        "",
        "| op | dtype | T x H | ours | best anchor | ours/best, in turn | ours/best, interleaved |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def unfused_table(cells: list[Cell], copy_bw: float | None) -> list[str]:
    """Markdown lines: each fused op (--unfused-ab) against its provider's two unfused kernels,
    with the memory pass the fusion saves (the bf16 intermediate written and read back, at the
    copy bandwidth): issue 25 asks the fused op to be faster by at least that at T >= 1024."""
    by = {(c.op, c.dtype, c.tokens, c.hidden, c.impl): c for c in cells if c.status == "ok" and c.graph_us}
    rows = []
    for (op, dt, t, h, impl), unfused in sorted(by.items()):
        provider = UNFUSED.get(impl)
        fused = by.get((op, dt, t, h, provider)) if provider else None
        if fused is None:
            continue
        assert fused.graph_us is not None and unfused.graph_us is not None
        saved = unfused.graph_us - fused.graph_us
        elt = 2  # the bench's dtypes are 16-bit
        pass_us = 2 * t * h * elt / (copy_bw * 1e3) if copy_bw else None
        verdict = "" if pass_us is None or t < 1024 else (" (met)" if saved >= pass_us else " (**missed**)")
        rows.append(
            f"| {op} | {dt} | {t}x{h} | {provider} | {fused.graph_us:.1f} | {unfused.graph_us:.1f} | "
            f"{saved:.1f}{verdict} | {'' if pass_us is None else f'{pass_us:.1f}'} |"
        )
    if not rows:
        return []
    return [
        "",
        "Fused against unfused (the provider's norm or activation kernel, then its quant kernel), us; "
        "the pass the fusion saves: the 16-bit intermediate written and read back at the copy bandwidth.",
        "",
        "| op | dtype | T x H | provider | fused | unfused | saved | one pass |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def row_ratios(cells: list[Cell]) -> list[tuple[str, str, int, int, float, str, str]]:
    """Per row (op, dtype, T, H): ircore's best provider over the best anchor, graph replay.

    Rows where no provider or no anchor measured are left out. Returns (op, dtype, T, H, ratio,
    our column, anchor column) with ratio < 1 meaning ours is faster.
    """
    out = []
    for (op, dt, t, h), slot in sorted(best_cells(cells).items()):
        if "ours" in slot and "anchor" in slot:
            ratio = slot["ours"].graph_us / slot["anchor"].graph_us
            out.append((op, dt, t, h, ratio, slot["ours"].impl, slot["anchor"].impl))
    return out


def summary(cells: list[Cell]) -> list[str]:
    """The summary lines: geometric mean and worst row of ours/best anchor, all rows and T <= 1024."""
    rows = row_ratios(cells)
    lines = []
    for label, subset in (("all rows", rows), (f"T <= {SMALL_T}", [r for r in rows if r[2] <= SMALL_T])):
        if not subset:
            continue
        geo = math.exp(sum(math.log(r[4]) for r in subset) / len(subset))
        worst = max(subset, key=lambda r: r[4])
        slower = sum(r[4] > 1.02 for r in subset)
        lines.append(
            f"Summary, {label} ({len(subset)}): ours/best anchor geomean {geo:.3f}x, worst {worst[4]:.2f}x "
            f"({worst[0]} {worst[1]} {worst[2]}x{worst[3]}: {worst[5]} vs {col_label(worst[6], worst[0])}), "
            f"{slower} rows more than 2% slower."
        )
    return lines


def tables(cells: list[Cell], args: argparse.Namespace, meta: dict[str, Any]) -> str:
    by = {(c.op, c.dtype, c.tokens, c.hidden, c.impl): c for c in cells}
    chosen = set(columns(args))
    cols = [c for c in DISPLAY if c in chosen]
    out: list[str] = []
    bw = meta.get("copy_gbps")
    out.append(
        f"Device: {meta.get('device', '?')}; torch {meta.get('torch', '?')}, triton {meta.get('triton', '?')}; "
        f"copy bandwidth {bw:.0f} GB/s (read+write)."
        if bw
        else f"Device: {meta.get('device', '?')}"
    )
    out.append(
        "Per-call us in CUDA-graph replay of back-to-back calls (kernel time). FAIL = wrong result "
        f"(rel. err >= {REL_TOL:g}; fp8 ops: outside the op's own tolerance, the conformance kit's comparison), ERR = error, n/a = column unavailable, skip = time budget. "
        "ours/best < 1 means faster than the best anchor; %BW = effective bandwidth / copy bandwidth."
    )
    summary_lines = summary(cells)
    if summary_lines:
        out.append("")
        out += summary_lines
    out += retimed_table(cells)
    out += unfused_table(cells, bw)
    notes = []
    for dt in args.dtypes:
        for op in args.ops:
            op_cols = [c for c in cols if op in APPLIES[c]]
            if not op_cols:
                continue
            anchors = [c for c in op_cols if c in ANCHORS]
            ours = [c for c in op_cols if c in PROVIDERS or c in NO_PDL or c in WHOLE_ROW or c in UNFUSED]
            head = ["T x H", *(col_label(c, op) for c in op_cols)]
            if anchors:
                head.append("best anchor")
            for o in ours:
                if anchors:
                    head.append(f"{col_label(o, op)}/best")
                head.append(f"{col_label(o, op)} %BW")
            out.append("")
            out.append(f"### {op} {dt} (graph replay, us per call)")
            out.append("")
            out.append("| " + " | ".join(head) + " |")
            out.append("|" + "---|" * len(head))
            for h in args.hidden:
                for t in args.tokens:
                    row = [f"{t}x{h}"]
                    for c in op_cols:
                        cell = by.get((op, dt, t, h, c))
                        row.append(_fmt_us(cell))
                        if (
                            cell is not None
                            and cell.status in ("fail", "error", "unavailable")
                            and cell.error
                        ):
                            notes.append(f"{op} {dt} {t}x{h} {col_label(c, op)}: {cell.status}: {cell.error}")
                    best = None
                    for a in anchors:
                        cell = by.get((op, dt, t, h, a))
                        if cell is not None and cell.status == "ok" and cell.graph_us is not None:
                            if best is None or cell.graph_us < best.graph_us:
                                best = cell
                    if anchors:
                        row.append(f"{best.graph_us:.1f} ({col_label(best.impl, op)})" if best else "—")
                    for o in ours:
                        cell = by.get((op, dt, t, h, o))
                        ok = cell is not None and cell.status == "ok" and cell.graph_us is not None
                        if anchors:
                            row.append(f"{cell.graph_us / best.graph_us:.2f}x" if ok and best else "—")
                        row.append(f"{cell.pct_copy:.0f}%" if ok and cell.pct_copy is not None else "—")
                    out.append("| " + " | ".join(row) + " |")
            # do_bench companion table
            if any(
                by.get((op, dt, t, h, c)) and by[(op, dt, t, h, c)].do_bench_us
                for t in args.tokens
                for h in args.hidden
                for c in op_cols
            ):
                out.append("")
                out.append(
                    f"<details><summary>{op} {dt}: triton.testing.do_bench median, us (launch cost included at small T)</summary>"
                )
                out.append("")
                head2 = ["T x H", *(col_label(c, op) for c in op_cols)]
                out.append("| " + " | ".join(head2) + " |")
                out.append("|" + "---|" * len(head2))
                for h in args.hidden:
                    for t in args.tokens:
                        row = [f"{t}x{h}"] + [
                            _fmt_us(by.get((op, dt, t, h, c)), "do_bench_us") for c in op_cols
                        ]
                        out.append("| " + " | ".join(row) + " |")
                out.append("")
                out.append("</details>")
    builds = meta.get("builds") or {}
    unavailable = meta.get("unavailable") or {}
    if builds or unavailable or notes:
        out.append("")
        out.append("Notes:")
        for k, v in builds.items():
            out.append(f"- build {k}: {v}")
        for k, v in unavailable.items():
            out.append(f"- column {k} unavailable: {v}")
        seen = set()
        for n in notes:
            if "unavailable" in n.split(": ")[1:2] or n in seen:
                continue
            seen.add(n)
            out.append(f"- {n}")
    return "\n".join(out) + "\n"


def write_outputs(cells: list[Cell], args: argparse.Namespace, meta: dict[str, Any]) -> str:
    md = tables(cells, args, meta)
    if args.json:
        with contextlib.suppress(Exception):
            args.json.parent.mkdir(parents=True, exist_ok=True)
        try:
            args.json.write_text(
                json.dumps(
                    {"meta": meta, "summary": summary(cells), "results": [asdict(c) for c in cells]},
                    indent=1,
                    default=str,
                )
            )
        except Exception as exc:
            log(f"could not write {args.json}: {exc}")
    if args.markdown:
        try:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(md)
        except Exception as exc:
            log(f"could not write {args.markdown}: {exc}")
    return md


# ---------------------------------------------------------------------------------------------
# Main


def print_plan(cells: list[Cell], args: argparse.Namespace) -> None:
    cols = columns(args)
    log(
        f"plan: {len(cells)} cells; ops {list(args.ops)}; dtypes {list(args.dtypes)}; T {list(args.tokens)}; H {list(args.hidden)}"
    )
    log(
        f"columns (measuring order): {cols}; budget {args.budget_s:.0f} s; do_bench {'off' if args.no_do_bench else DO_BENCH}"
    )
    for impl in cols:
        n = sum(1 for c in cells if c.impl == impl)
        log(f"  {impl:10s} {n:4d} cells  ops {[o for o in args.ops if o in APPLIES[impl]]}")
    for i, c in enumerate(cells[:6], 1):
        log(f"  [{i}/{len(cells)}] {c.op} {c.dtype} {c.tokens}x{c.hidden} {c.impl}")
    if len(cells) > 6:
        log(
            f"  ... [{len(cells)}/{len(cells)}] {cells[-1].op} {cells[-1].dtype} {cells[-1].tokens}x{cells[-1].hidden} {cells[-1].impl}"
        )
    for name in ("torch", "triton", "liger_kernel", "flashinfer", "tvm_ffi"):
        try:
            found = importlib.util.find_spec(name) is not None
        except Exception:
            found = False
        log(f"  module {name}: {'found' if found else 'NOT found'}")
    log(f"  CUDA_HOME would be: {resolve_cuda_home()}; nvidia include dirs: {nvidia_include_dirs()}")


def fake_fill(cells: list[Cell], copy_bw: float) -> None:
    rnd = random.Random(0)
    for c in cells:
        c.bytes = op_bytes(c.op, c.tokens, c.hidden, 2)
        floor = 2.0 + c.bytes / (copy_bw * 0.9e3)  # us
        roll = rnd.random()
        if c.impl == "flashinfer" and c.dtype == "fp16":
            c.status, c.error = "unavailable", "fake: build failed"
            continue
        if roll < 0.03:
            c.status, c.error, c.rel_err = "fail", "relative error 0.5 >= 0.01", 0.5
            continue
        c.status = "ok"
        c.graph_us = floor * (1 + rnd.random() * 0.6)
        c.graph_calls = 20
        c.do_bench_us = c.graph_us + 5 + rnd.random() * 10
        c.rel_err = 3e-3
        c.gbps = c.bytes / (c.graph_us * 1e-6) / 1e9
        c.pct_copy = 100 * c.gbps / copy_bw


def versions() -> dict[str, Any]:
    meta: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    for mod in ("torch", "triton", "liger_kernel", "flashinfer", "tvm_ffi"):
        try:
            m = __import__(mod)
            meta[mod] = getattr(m, "__version__", "?")
        except Exception as exc:
            meta[mod] = f"unavailable ({type(exc).__name__})"
    return meta


def main(argv: list[str] | None = None) -> int:
    use_checkout_paths()
    args = parse_args(argv)
    cells = plan(args)
    if args.dry_run:
        print_plan(cells, args)
        meta = {"dry_run": True, "device": "dry run (no GPU)", "copy_gbps": 4214.0 if args.fake else None}
        if args.fake:
            fake_fill(cells, 4214.0)
            meta.update(torch="fake", triton="fake", builds={"flashinfer": "fake: failed"})
            rnd = random.Random(1)

            def fake_runner(cell: Cell) -> Any:  # the cell's time again, give or take 3%
                return lambda n: (cell.graph_us or 1.0) * 1e-6 * (0.97 + 0.06 * rnd.random())

            meta["retimed_rows"] = retime_close_rows(cells, fake_runner, time.monotonic() + 30)
        md = write_outputs(cells, args, meta)
        if args.fake:
            print(md)
        return 0

    t_start = time.monotonic()
    import torch

    if not torch.cuda.is_available():
        log("no CUDA device: nothing to measure (use --dry-run on CPU)")
        return 2
    meta: dict[str, Any] = versions()
    meta["device"] = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    meta["capability"] = f"{cap[0]}.{cap[1]}"
    meta["args"] = {
        k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
    }
    cols = columns(args)
    env = setup_build_env(f"{cap[0]}.{cap[1]}")
    meta["build_env"] = env
    log(
        f"{meta['device']} (sm {meta['capability']}); torch {meta['torch']}, triton {meta['triton']}; build env {env}"
    )

    log_dir = Path(args.json).parent if args.json else Path(os.environ.get("TMPDIR", "/tmp"))
    with contextlib.suppress(Exception):
        log_dir.mkdir(parents=True, exist_ok=True)
    builds: dict[str, Build] = {}
    if "vllm_c" in cols:
        builds["vllm_c"] = Build("vllm_c", VLLM_C_BUILD.format(path=str(VLLM_C_DIR)), log_dir)
    if "flashinfer" in cols:
        builds["flashinfer"] = Build("flashinfer", FLASHINFER_BUILD, log_dir)
    impls = Impls(builds, args.build_timeout_s)

    try:
        from _gpu_timing import copy_gbps

        copy_bw = copy_gbps()
        meta["copy_gbps"] = copy_bw
        log(f"copy bandwidth {copy_bw:.0f} GB/s (read+write)")
    except Exception as exc:
        copy_bw = None
        meta["copy_gbps"] = None
        log(f"copy bandwidth: failed: {type(exc).__name__}: {exc}")

    n = len(cells)
    pending = list(cells)
    with torch.no_grad():
        for i in range(1, n + 1):
            cell = next_cell(pending, builds)
            elapsed = time.monotonic() - t_start
            if elapsed > args.budget_s - args.retime_s:  # the rest of the budget: re-timing below
                cell.status, cell.error = "skip", f"time budget {args.budget_s:.0f} s spent"
                continue
            log(f"[{i}/{n}] {cell.op} {cell.dtype} {cell.tokens}x{cell.hidden} {cell.impl} ...")
            t0 = time.monotonic()
            try:
                with impls.pdl_off(cell.impl):
                    measure(cell, impls, copy_bw, not args.no_do_bench)
            except Exception as exc:
                cell.status = "error"
                cell.error = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
                log(f"    error: {cell.error}")
                if os.environ.get("KERNELS_GPU_TRACEBACK"):
                    traceback.print_exc()
                if context_lost(exc):  # every later CUDA call fails the same way: say so once
                    lost = f"CUDA context lost at {cell.op} {cell.tokens}x{cell.hidden} {cell.impl}"
                    log(f"    {lost}: the remaining {len(pending)} cells are not measured")
                    for rest in pending:
                        rest.status, rest.error = "error", lost
                    pending.clear()
                    cell.seconds = time.monotonic() - t0
                    break
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize()
                with contextlib.suppress(Exception):
                    torch.cuda.empty_cache()
            cell.seconds = time.monotonic() - t0
            if cell.status == "ok":
                pct = f", {cell.pct_copy:.0f}% BW" if cell.pct_copy is not None else ""
                db = f", do_bench {cell.do_bench_us:.1f} us" if cell.do_bench_us is not None else ""
                log(
                    f"    {cell.graph_us:.2f} us/call (graph x{cell.graph_calls}){db}{pct}; rel err {cell.rel_err:.1e} ({cell.seconds:.1f} s)"
                )
            elif cell.status in ("fail", "unavailable"):
                log(f"    {cell.status}: {cell.error}")
            if i % 24 == 0:  # partial results on disk in case the run is killed
                meta["elapsed_s"] = time.monotonic() - t_start
                write_outputs(cells, args, meta)

        if args.retime_s > 0 and not any(c.error and c.error.startswith("CUDA context lost") for c in cells):

            def make_runner(cell: Cell) -> Any:
                from ircore.tools.timing import graph_runner

                fn = impls.fn(cell.impl, cell.op, cell.hidden)
                inputs = make_inputs(cell.op, cell.tokens, cell.hidden, getattr(torch, DTYPE_NAMES[cell.dtype]))
                work = [a.clone() for a in inputs] if (cell.op, cell.impl) in INPLACE else list(inputs)
                with impls.pdl_off(cell.impl):  # captured into the graph as the cell was measured
                    return graph_runner(lambda: fn(*work), cell.graph_calls or GRAPH_CALLS[0])

            meta["retimed_rows"] = retime_close_rows(cells, make_runner, t_start + args.budget_s)

    with contextlib.suppress(Exception):
        from _gpu_timing import copy_gbps

        meta["copy_gbps_end"] = copy_gbps()
    meta["builds"] = {}
    for name, b in builds.items():
        if b.result is None and b.proc is not None and b.proc.poll() is None:
            b.proc.kill()
            b.result = "not needed / killed at the end"
        elif b.result is None:
            b.wait(1)
        meta["builds"][name] = f"{b.result}" + (f" ({b.seconds:.0f} s)" if b.seconds else "")
    meta["unavailable"] = dict(impls.why)
    meta["elapsed_s"] = time.monotonic() - t_start
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.status] = counts.get(c.status, 0) + 1
    meta["status_counts"] = counts
    md = write_outputs(cells, args, meta)
    print(md)
    log(f"done in {meta['elapsed_s']:.0f} s: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
