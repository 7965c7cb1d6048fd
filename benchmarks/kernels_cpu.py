"""CPU micro-benchmark of the vllm_c kernels, side by side with vLLM's own CPU kernels.

Why: the CPU kernels must be at least as fast as vLLM's ``torch.ops._C.rms_norm`` /
``fused_add_rms_norm`` at every size; this measures both in one process, interleaved, so they
see the same machine state.

Run:  .venv/bin/python benchmarks/kernels_cpu.py            (ours only)
      .venv-vllm/bin/python benchmarks/kernels_cpu.py       (ours and vLLM's, side by side)
      .venv/bin/python benchmarks/kernels_cpu.py --vllm     (re-runs itself in .venv-vllm)
(the vLLM venv: bash benchmarks/setup_vllm_venv.sh)
      .venv/bin/python benchmarks/kernels_cpu.py --ops rotary_embedding rotary_pos_emb \
          fused_qk_norm_rope --compile      (the RoPE kernels against the ops' native, eager and
                                            compiled: vLLM has no CPU RoPE kernel in _C)

The gated activations (``--ops gelu_and_mul gelu_tanh_and_mul mul_and_silu fatrelu_and_mul
swigluoai_and_mul``) are compared with the op's native (eager torch in fp32: what a CPU user gets
without ircore) and, with ``--compile``, the native compiled by Inductor, as the RoPE ops are
(``--inductor`` is the same flag's older name). The fp8 quant ops (``--ops static_quant_fp8
dynamic_quant_fp8 ...``, see QUANT) and the blockwise fp8 matmul (``--ops block_scaled_mm_fp8``:
``--tokens`` activation rows against a ``--hidden`` x ``--hidden`` weight) are compared the same way.

Method: per case, rounds of back-to-back calls (calls per round calibrated to ~20 ms), median of
the per-round means, candidates interleaved round by round; inference_mode on; in-place
buffers restored between rounds (outside the timed region). Ours is the functional op
(allocates its output); vLLM's rms_norm writes a preallocated ``out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "providers" / "vllm_c"))  # ircore_vllm_c, also from the vLLM venv

EPS = 1e-6
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _load_ours() -> None:
    from ircore_vllm_c import kernels

    reason = kernels.load_kernels(cuda=False)
    if reason is not None:
        raise SystemExit(f"ircore_vllm_c kernels did not load: {reason}")


def _load_vllm() -> bool:
    """Loads vllm._C (torch.ops._C.*) when vLLM is importable here."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm.kernels.vllm_c  # noqa: F401  (loads the right _C variant)
    except Exception:
        return False
    return hasattr(torch.ops._C, "rms_norm")


def _cases(
    op: str, tokens: int, hidden: int, dtype: torch.dtype, with_vllm: bool, compile_native: bool = False
):
    """{name: (call, restore)} for one op and size."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, dtype=dtype, generator=gen)
    w = torch.randn(hidden, dtype=dtype, generator=gen)
    ours = torch.ops.ircore_vllm_c
    cases: dict[str, tuple[Callable[[], object], Callable[[], object] | None]] = {}
    if op == "rms_norm":
        out = torch.empty_like(x)
        cases["ours"] = (lambda: ours.rms_norm.default(x, w, EPS, None), None)
        cases["ours_out"] = (lambda: ours.rms_norm_out.default(out, x, w, EPS, None), None)
        if with_vllm:
            cases["vllm"] = (lambda: torch.ops._C.rms_norm(out, x, w, EPS), None)
    elif op == "fused_add_rms_norm":
        r0 = torch.randn(tokens, hidden, dtype=dtype, generator=gen)
        bufs = {k: (x.clone(), r0.clone()) for k in ("ours", "vllm")}

        def restore(k):
            bufs[k][0].copy_(x)
            bufs[k][1].copy_(r0)

        xo, ro = bufs["ours"]
        cases["ours"] = (
            lambda: ours.fused_add_rms_norm.default(xo, ro, w, EPS, None),
            lambda: restore("ours"),
        )
        if with_vllm:
            xv, rv = bufs["vllm"]
            cases["vllm"] = (lambda: torch.ops._C.fused_add_rms_norm(xv, rv, w, EPS), lambda: restore("vllm"))
    elif op == "silu_and_mul":
        x2 = torch.randn(tokens, 2 * hidden, dtype=dtype, generator=gen)
        out2 = torch.empty(tokens, hidden, dtype=dtype)
        cases["ours"] = (lambda: ours.silu_and_mul.default(x2), None)
        cases["ours_out"] = (lambda: ours.silu_and_mul_out.default(out2, x2), None)
        if with_vllm and hasattr(torch.ops._C, "silu_and_mul"):
            cases["vllm"] = (lambda: torch.ops._C.silu_and_mul(out2, x2), None)
    # vLLM's _C has no CPU kernel for these two: the anchor is torch's own (the op's native,
    # F.layer_norm), the function a CPU user gets without ircore.
    elif op == "rms_norm_gated":  # Qwen3-Next's form, transformers' roundings
        import ircore

        g = torch.randn(tokens, hidden, dtype=dtype, generator=gen)
        native = ircore.ops.rms_norm_gated.native
        cases["ours"] = (lambda: ours.rms_norm_gated.default(x, g, w, EPS, None, True, True), None)
        cases["torch"] = (lambda: native(x, g, w, EPS, None, True, True), None)
    elif op == "layer_norm":
        b = torch.randn(hidden, dtype=dtype, generator=gen)
        cases["ours"] = (lambda: ours.layer_norm.default(x, w, b, EPS), None)
        cases["torch"] = (lambda: torch.nn.functional.layer_norm(x, (hidden,), w, b, EPS), None)
    elif op in GATED:  # the gated activations: x of (tokens, 2 * hidden)
        import ircore

        name, params = GATED[op]
        x2 = torch.randn(tokens, 2 * hidden, dtype=dtype, generator=gen) * 3
        out2 = torch.empty(tokens, hidden, dtype=dtype)
        kernel = getattr(ours, name).default
        native = ircore.get_op(name).native
        cases["ours"] = (lambda: kernel(x2, *params), None)
        cases["torch"] = (lambda: native(x2, *params), None)  # the op's native, eager
        if compile_native:
            compiled = torch.compile(native, dynamic=False)
            cases["compile"] = (lambda: compiled(x2, *params), None)
        vname = {"gelu_tanh_and_mul": "gelu_tanh_and_mul"}.get(op, name)
        if with_vllm and hasattr(torch.ops._C, vname) and name != "swigluoai_and_mul":
            vfn = getattr(torch.ops._C, vname)
            vparams = params if name == "fatrelu_and_mul" else ()
            cases["vllm"] = (lambda: vfn(out2, x2, *vparams), None)
    elif op in ROPE_OPS:
        cases.update(_rope_cases(op, tokens, hidden, dtype, gen, compile_native))
    elif op in QUANT:
        cases.update(_quant_cases(op, tokens, hidden, dtype, compile_native))
    return cases


# The fp8 quant ops (--ops names below; the "_tensor" names: per_token=False): inputs from each
# op's make_inputs at (tokens, hidden) (silu_and_mul's x: (tokens, 2 * hidden)), e4m3fn, group
# 128 row-major; "torch" is the op's native (eager: a chain of torch ops), "compile" (with
# --compile) that native under torch.compile. vLLM's CPU _C has no fp8 quant kernel.
QUANT = {
    "static_quant_fp8": ("static_quant_fp8", {}),
    "dynamic_quant_fp8": ("dynamic_quant_fp8", {}),
    "dynamic_quant_fp8_tensor": ("dynamic_quant_fp8", {"per_token": False}),
    "dynamic_group_quant_fp8": ("dynamic_group_quant_fp8", {}),
    "rms_norm_static_fp8_quant": ("rms_norm_static_fp8_quant", {}),
    "fused_add_rms_norm_static_fp8_quant": ("fused_add_rms_norm_static_fp8_quant", {}),
    "rms_norm_dynamic_quant_fp8": ("rms_norm_dynamic_quant_fp8", {}),
    "rms_norm_dynamic_quant_fp8_tensor": ("rms_norm_dynamic_quant_fp8", {"per_token": False}),
    "fused_add_rms_norm_dynamic_quant_fp8": ("fused_add_rms_norm_dynamic_quant_fp8", {}),
    "rms_norm_group_quant_fp8": ("rms_norm_group_quant_fp8", {}),
    "fused_add_rms_norm_group_quant_fp8": ("fused_add_rms_norm_group_quant_fp8", {}),
    "silu_and_mul_static_quant_fp8": ("silu_and_mul_static_quant_fp8", {}),
    "silu_and_mul_group_quant_fp8": ("silu_and_mul_group_quant_fp8", {}),
    # the blockwise fp8 matmul, the same way: make_inputs at (tokens, hidden) is a [tokens, hidden]
    # activation against a [hidden, hidden] weight, block 128 x 128, out in --dtypes
    "block_scaled_mm_fp8": ("block_scaled_mm_fp8", {}),
}
#: The vllm_c torch op of a QUANT op whose kernel goes by another name.
KERNEL_NAMES = {"block_scaled_mm_fp8": "block_scaled_mm_fp8_cpu"}


def _quant_cases(op: str, tokens: int, hidden: int, dtype: torch.dtype, compile_native: bool) -> dict:
    import inspect

    import ircore

    name, replace = QUANT[op]
    o = ircore.get_op(name)
    width = 2 * hidden if name.startswith("silu") else hidden
    args = list(o.make_inputs((tokens, width), dtype, "cpu", 0))
    params = list(inspect.signature(o.native).parameters)
    for key, value in replace.items():
        args[params.index(key)] = value
    kernel, native = getattr(torch.ops.ircore_vllm_c, KERNEL_NAMES.get(name, name)).default, o.native
    cases = {"ours": (lambda: kernel(*args), None), "torch": (lambda: native(*args), None)}
    if compile_native:
        # one native compiled per size, dtype and variant (the _tensor names share theirs) is over
        # dynamo's recompile limit (8), past which it would silently run eager: start afresh
        torch._dynamo.reset()
        compiled = torch.compile(native, dynamic=False)
        cases["compile"] = (lambda: compiled(*args), None)
    return cases


# The RoPE ops at Llama-3-8B's geometry when hidden is 4096 (head 128, hidden / 128 query heads,
# a quarter as many key/value heads). Ours rotates in place (as vLLM's kernel); "torch" is the
# op's native (functional: it allocates its outputs), the function a CPU user gets without
# ircore (vLLM's CPU build has no RoPE op in _C); "compile" (with --compile) is that native under
# torch.compile (Inductor's C++ backend). Rotating the same buffers again and again keeps their
# magnitudes (a rotation), so no restore is needed.
ROPE_OPS = ("rotary_embedding", "rotary_pos_emb", "fused_qk_norm_rope")


def _rope_cases(
    op: str, tokens: int, hidden: int, dtype: torch.dtype, gen: torch.Generator, compile_native: bool
) -> dict:
    import ircore
    from ircore.ops import _rope_inputs

    ours = torch.ops.ircore_vllm_c
    d = 128 if hidden % 128 == 0 else hidden
    hq = hidden // d
    hk = max(1, hq // 4)
    pos = torch.randint(0, 8192, (tokens,), generator=gen)
    cache = _rope_inputs._rope_cache(8192, d, "cpu").to(dtype)
    if op == "rotary_embedding":
        q = torch.randn(tokens, hq * d, generator=gen).to(dtype)
        k = torch.randn(tokens, hk * d, generator=gen).to(dtype)
        args = (pos, q, k, d, d, cache, True, None, "standard", False, 0)
        kernel, native = ours.rotary_embedding.default, ircore.ops.rotary_embedding.native
    elif op == "rotary_pos_emb":  # HF's (B, H, S, D) views of (B, S, H, D)
        q = torch.randn(1, tokens, hq, d, generator=gen).to(dtype).transpose(1, 2)
        k = torch.randn(1, tokens, hk, d, generator=gen).to(dtype).transpose(1, 2)
        cos, sin = _rope_inputs._hf_cos_sin(pos[None, :], d, dtype)
        args = (q, k, cos, sin, 1)
        kernel, native = ours.rotary_pos_emb.default, ircore.ops.rotary_pos_emb.native
    else:
        qkv = torch.randn(tokens, (hq + 2 * hk) * d, generator=gen).to(dtype)
        wq = torch.randn(d, generator=gen).to(dtype) * 0.1 + 1
        wk = torch.randn(d, generator=gen).to(dtype) * 0.1 + 1
        args = (qkv, hq, hk, hk, d, EPS, wq, wk, cache, True, pos)
        kernel, native = ours.fused_qk_norm_rope.default, ircore.ops.fused_qk_norm_rope.native
    cases = {"ours": (lambda: kernel(*args), None), "torch": (lambda: native(*args), None)}
    if compile_native:
        compiled = torch.compile(native, dynamic=False)
        cases["compile"] = (lambda: compiled(*args), None)
    return cases


# --ops names of the gated activations -> (op, parameters)
GATED = {
    "gelu_and_mul": ("gelu_and_mul", ("none",)),
    "gelu_tanh_and_mul": ("gelu_and_mul", ("tanh",)),
    "mul_and_silu": ("mul_and_silu", ()),
    "fatrelu_and_mul": ("fatrelu_and_mul", (0.1,)),
    "swigluoai_and_mul": ("swigluoai_and_mul", (1.702, 7.0)),
}


def _round_ns(fn: Callable[[], object], calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in itertools.repeat(None, calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def _time_interleaved(cases: dict, rounds: int, target_ms: float, max_calls: int) -> dict[str, float]:
    """Median ns per call of each case; cases alternate round by round."""
    calls = {}
    for name, (fn, restore) in cases.items():
        for _ in range(3):
            fn()
        if restore:
            restore()
        est = min(_round_ns(fn, 3) for _ in range(3))
        calls[name] = max(1, min(max_calls, int(target_ms * 1e6 / max(est, 1.0))))
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (fn, restore) in cases.items():
            if restore:
                restore()
            samples[name].append(_round_ns(fn, calls[name]))
    return {name: statistics.median(v) for name, v in samples.items()}


def bench_cpu(
    tokens: tuple[int, ...] = (1, 16, 256, 4096),
    dtypes: tuple[str, ...] = ("fp32", "bf16"),
    threads: tuple[int, ...] = (1, 2),
    ops: tuple[str, ...] = ("rms_norm", "fused_add_rms_norm"),
    hidden: int = 4096,
    rounds: int = 11,
    target_ms: float = 20.0,
    max_calls: int = 5000,
    isa: str = "auto",
    vllm: bool = True,
    compile_native: bool = False,
) -> list[dict]:
    """Time our CPU ops (and vLLM's when importable); returns one row per case."""
    _load_ours()
    with_vllm = vllm and _load_vllm()
    prev_threads = torch.get_num_threads()
    torch.ops.ircore_vllm_c._set_cpu_isa(isa)
    rows = []
    try:
        with torch.inference_mode():
            for nt, op, dname, t in itertools.product(threads, ops, dtypes, tokens):
                torch.set_num_threads(nt)
                cases = _cases(op, t, hidden, DTYPES[dname], with_vllm, compile_native)
                med = _time_interleaved(cases, rounds, target_ms, max_calls)
                row = {"op": op, "dtype": dname, "tokens": t, "hidden": hidden, "threads": nt}
                row.update({f"{k}_us": v / 1e3 for k, v in med.items()})
                if "vllm" in med:  # kernel to kernel: both write a preallocated output
                    row["speedup"] = med["vllm"] / med.get("ours_out", med["ours"])
                if "torch" in med:  # both allocate their output (RoPE: ours in place)
                    row["torch_speedup"] = med["torch"] / med["ours"]
                if "compile" in med:
                    row["compile_speedup"] = med["compile"] / med["ours"]
                rows.append(row)
    finally:
        torch.set_num_threads(prev_threads)
        torch.ops.ircore_vllm_c._set_cpu_isa("auto")
    return rows


def format_rows(rows: list[dict]) -> str:
    """A text table: one line per case."""
    has_vllm = any("vllm_us" in r for r in rows)
    head = f"{'op':19} {'dtype':5} {'T':>5} {'thr':>3} {'ours us':>9} {'ours_out':>9}"
    if has_vllm:
        head += f" {'vllm us':>9} {'vllm/ours':>9}"
    lines = [head]
    for r in rows:
        line = f"{r['op']:19} {r['dtype']:5} {r['tokens']:>5} {r['threads']:>3} {r['ours_us']:9.2f}"
        line += f" {r['ours_out_us']:9.2f}" if "ours_out_us" in r else f" {'-':>9}"
        if "vllm_us" in r:
            line += f" {r['vllm_us']:9.2f} {r['speedup']:9.2f}"
        if "torch_us" in r:  # rms_norm_gated, layer_norm: torch's own as the anchor
            line += f"  torch {r['torch_us']:9.2f} us, torch/ours {r['torch_speedup']:5.2f}"
        if "compile_us" in r:  # --compile: the op's native under torch.compile
            line += f"  compile {r['compile_us']:9.2f} us, compile/ours {r['compile_speedup']:5.2f}"
        lines.append(line)
    lines.append("ours_out: the out-variant op (no allocation); vllm/ours compares it (else ours) with vLLM")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 256, 4096])
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument(
        "--ops",
        nargs="+",
        default=["rms_norm", "fused_add_rms_norm"],
        help="also silu_and_mul, rms_norm_gated, layer_norm (these two against torch's own: vLLM has no CPU kernel), "
        f"the gated activations {', '.join(GATED)} (against the op's native, eager, and with --compile "
        "compiled; vLLM's _C where it has the op; hidden is then the output width, x: 2 * hidden), and the RoPE "
        "ops rotary_embedding, rotary_pos_emb, fused_qk_norm_rope (against the op's native, with --compile "
        "also compiled; --hidden is the query width, head size 128), and the fp8 quant ops "
        f"{', '.join(QUANT)} (against the op's native, with --compile also compiled; block_scaled_mm_fp8: "
        "--tokens rows against a --hidden x --hidden fp8 weight)",
    )
    p.add_argument(
        "--compile",
        "--inductor",
        dest="compile",
        action="store_true",
        help="the gated activations, the RoPE and the quant ops: also the op's native under torch.compile (Inductor)",
    )
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--isa", default="auto", choices=["auto", "scalar", "avx2", "avx512"])
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.add_argument("--vllm", action="store_true", help="re-run under .venv-vllm (vLLM side by side)")
    args = p.parse_args(argv)
    if args.vllm and "vllm" not in sys.modules:
        py = REPO / ".venv-vllm" / "bin" / "python"
        if not py.exists():
            raise SystemExit(f"{py} missing: run bash benchmarks/setup_vllm_venv.sh")
        rest = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--vllm"]
        return subprocess.call([str(py), str(Path(__file__).resolve()), *rest])
    rows = bench_cpu(
        tokens=tuple(args.tokens),
        dtypes=tuple(args.dtypes),
        threads=tuple(args.threads),
        ops=tuple(args.ops),
        hidden=args.hidden,
        rounds=args.rounds,
        isa=args.isa,
        compile_native=args.compile,
    )
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
