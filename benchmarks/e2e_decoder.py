"""End to end: a stack of Llama-style decoder layers under eager, Inductor and the ircore backend.

The layers are written the way Hugging Face writes them: the residual add, then the RMSNorm
(``ircore.ops.rms_norm``, as a model patched by ircore calls it; the ``stock`` rows use Hugging
Face's own RMSNorm forward in plain torch), attention projections with grouped KV heads and
``scaled_dot_product_attention`` (no rotary embedding: it adds the same elementwise work to every
row), and a SwiGLU MLP. Random weights, batch 1, T tokens in one forward.

Rows, each timed per forward in the same process (medians of interleaved rounds):

- ``eager native``         ircore ops, priority native, no compile
- ``eager providers``      ircore ops, the providers' default priority, no compile
- ``inductor stock``       Hugging Face's plain-torch RMSNorm, ``backend="inductor"`` (the anchor)
- ``inductor opaque``      ircore ops under ``backend="inductor"``: the ops stay opaque and
                           dispatch at run time (the situation ``backend="ircore"`` removes)
- ``ircore native``        ``backend="ircore"``, priority native (native traced in and fused)
- ``ircore prov nofusion`` ``backend="ircore"``, providers first, fusions off
- ``ircore prov fusion``  ``backend="ircore"``, providers first, fusions on

Also: kernels per layer (kernel calls in the compiled code, or profiler events when eager),
buffers copied unchanged per layer in the compiled code (``ircore.testing.copied_buffers``: clones
Inductor kept, ``copy_``; eager rows: n/a),
compile time of the first call, and the time spent in ircore's pass (``ircore.compile.report``).

    python benchmarks/e2e_decoder.py                     # CPU defaults (small, see --help)
    python benchmarks/e2e_decoder.py --device cuda --dtype bfloat16 --tokens 1,16,256,2048
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ircore
from ircore.testing import copied_buffers


class RMSNorm(nn.Module):
    """Hugging Face's ``LlamaRMSNorm``: plain torch (``stock``) or ``ircore.ops.rms_norm``."""

    def __init__(self, hidden: int, eps: float, use_ircore: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps
        self.use_ircore = use_ircore

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.use_ircore:
            return ircore.ops.rms_norm(h, self.weight, self.variance_epsilon)
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


class Layer(nn.Module):
    def __init__(self, a: argparse.Namespace, use_ircore: bool) -> None:
        super().__init__()
        h, kv = a.hidden, a.hidden // a.heads * a.kv_heads
        self.heads, self.kv_heads, self.head_dim = a.heads, a.kv_heads, a.hidden // a.heads
        self.input_layernorm = RMSNorm(h, 1e-5, use_ircore)
        self.post_attention_layernorm = RMSNorm(h, 1e-5, use_ircore)
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(h, h, False), nn.Linear(h, kv, False), nn.Linear(h, kv, False)
        self.o_proj = nn.Linear(h, h, False)
        self.gate_proj, self.up_proj = nn.Linear(h, a.intermediate, False), nn.Linear(h, a.intermediate, False)
        self.down_proj = nn.Linear(a.intermediate, h, False)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        residual = hidden
        hidden = self.attention(self.input_layernorm(hidden))
        hidden = residual + hidden
        residual = hidden
        hidden = self.post_attention_layernorm(hidden)
        hidden = self.down_proj(F.silu(self.gate_proj(hidden)) * self.up_proj(hidden))
        return residual + hidden


class Decoder(nn.Module):
    def __init__(self, a: argparse.Namespace, use_ircore: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(a, use_ircore) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, 1e-5, use_ircore)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden)
        return self.norm(hidden)


def make_models(a: argparse.Namespace) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    stock = Decoder(a, use_ircore=False)
    with torch.no_grad():
        for p in stock.parameters():
            if p.dim() == 2:
                p.normal_(0, 1 / math.sqrt(p.shape[1]))
            else:
                p.normal_(1, 0.1)
    patched = Decoder(a, use_ircore=True)
    patched.load_state_dict(stock.state_dict())
    dtype = getattr(torch, a.dtype)
    return stock.to(a.device, dtype).eval(), patched.to(a.device, dtype).eval()


# ---------------------------------------------------------------------- measurement
def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_once(fn: Any, x: torch.Tensor, iters: int, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(x)
    sync(device)
    return (time.perf_counter() - t0) / iters * 1e6


_KERNEL_CALL = re.compile(
    r"^\s+(?:buf\w+ = )?(?:(?:triton_\w+|cpp_fused\w*)(?:\.run)?\(|extern_kernels\.\w+\(|torch\.ops\.\w+\.\w+\.\w+\()",
    re.M,
)


def compiled_kernels(code: str) -> int:
    """Kernel calls in Inductor's generated ``call`` function."""
    body = code[code.find("def call(") :]
    return len(_KERNEL_CALL.findall(body))


def eager_kernels(fn: Any, x: torch.Tensor, device: str) -> int:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CUDA] if device.startswith("cuda") else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        fn(x)
        sync(device)
    if device.startswith("cuda"):
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    # CPU: aten ops at the top of the stack (what runs as a kernel)
    return sum(1 for e in prof.events() if e.cpu_parent is None and e.name.startswith(("aten::", "ircore")))


VARIANTS = {
    "eager native": ("patched", None, {"priority": "native"}),
    "eager providers": ("patched", None, {}),
    "inductor stock": ("stock", "inductor", {}),
    "inductor opaque": ("patched", "inductor", {}),
    "ircore native": ("patched", "ircore", {"priority": "native"}),
    "ircore prov nofusion": ("patched", "ircore", {"fusions": "none"}),
    "ircore prov fusion": ("patched", "ircore", {"fusions": "all"}),
}


def apply_priority(variant: str) -> None:
    """Priority native for the ``native`` variants, the providers' defaults for the others.

    Switching back and forth costs no recompile: compiled functions guard on a fingerprint of
    the configuration, and find the graph compiled for it before.
    """
    native = VARIANTS[variant][2].get("priority") == "native"
    ircore.set_priority({op: (["native"] if native else None) for op in ircore.all_ops()})


def build(name: str, models: dict[str, nn.Module], x: torch.Tensor, a: argparse.Namespace) -> dict[str, Any]:
    """Compile (or not) one variant for ``x``'s shape; first-call time, kernels, pass stats."""
    from torch._inductor.utils import run_and_get_code

    which, backend, opts = VARIANTS[name]
    model = models[which]
    apply_priority(name)
    ircore.compile.reset_report()
    info: dict[str, Any] = {"variant": name}
    if backend is None:
        fn = model
        info["kernels"] = eager_kernels(fn, x, a.device)
        info["copies"] = None
        info["compile_s"] = 0.0
    else:
        fn = a.compiled.get(name)
        if fn is None:  # one compiled function per variant; sizes recompile or reuse (--dynamic)
            if backend == "ircore":
                fn = ircore.compile(model, fusions=opts.get("fusions", "all"), dynamic=False)
            else:
                fn = torch.compile(model, backend=backend, dynamic=False)
            a.compiled[name] = fn
        if a.dynamic and x.shape[1] > 1:
            torch._dynamo.mark_dynamic(x, 1)  # T > 1 shares one graph (Dynamo specializes T = 1)
        t0 = time.perf_counter()
        _, codes = run_and_get_code(fn, x)
        sync(a.device)
        info["compile_s"] = time.perf_counter() - t0
        info["kernels"] = sum(compiled_kernels(c) for c in codes)
        info["copies"] = sum(copied_buffers(c) for c in codes)
        report = ircore.compile.report()
        info["pass_s"] = report.seconds
        info["fusions"] = dict(report.fusions)
        info["lowered"] = {op: dict(c) for op, c in report.lowered.items()}
    info["kernels_per_layer"] = info["kernels"] / a.layers
    info["fn"] = fn
    return info


def run(a: argparse.Namespace) -> list[dict[str, Any]]:
    stock, patched = make_models(a)
    models = {"stock": stock, "patched": patched}
    dtype = getattr(torch, a.dtype)
    rows = []
    with torch.inference_mode():
        for tokens in a.tokens:
            x = torch.randn(1, tokens, a.hidden, device=a.device, dtype=dtype)
            reference = stock(x)
            built = []
            for name in a.variants:
                print(f"  T={tokens}: compiling {name} ...", file=sys.stderr, flush=True)
                info = build(name, models, x, a)
                out = info["fn"](x)
                err = (out.float() - reference.float()).abs().max().item()
                info["max_abs_err"] = err
                built.append(info)
            times: dict[str, list[float]] = {i["variant"]: [] for i in built}
            iters = max(1, a.iters // max(1, tokens // 16))
            for r in range(a.rounds):  # interleaved rounds
                print(f"  T={tokens}: round {r + 1}/{a.rounds}", file=sys.stderr, flush=True)
                for info in built:
                    apply_priority(info["variant"])  # what it was lowered (or runs eagerly) with
                    times[info["variant"]].append(time_once(info["fn"], x, iters, a.device))
            for info in built:
                info["us"] = statistics.median(times[info["variant"]])
                info.pop("fn")
                rows.append({"tokens": tokens, **info})
    return rows


def markdown(rows: list[dict[str, Any]], a: argparse.Namespace) -> str:
    out = [
        f"{a.layers} layers, hidden {a.hidden}, intermediate {a.intermediate}, heads {a.heads}/{a.kv_heads}, "
        f"{a.dtype} on {a.device}; time per forward (median of {a.rounds} interleaved rounds)"
        + ("; one dynamic graph for T > 1 (compile and pass columns: the compile of the first such T)" if a.dynamic else ""),
        "",
        "| T | variant | us / forward | vs inductor stock | kernels / layer | copies / layer | compile s | ircore pass s | fusions | max abs err |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tokens in a.tokens:
        group = [r for r in rows if r["tokens"] == tokens]
        anchor = next((r["us"] for r in group if r["variant"] == "inductor stock"), None)
        for r in group:
            ratio = f"{r['us'] / anchor:.3f}" if anchor else "n/a"
            fus = ", ".join(f"{k} {v}" for k, v in r.get("fusions", {}).items() if v) or "-"
            copies = "n/a" if r["copies"] is None else f"{r['copies'] / a.layers:.1f}"
            out.append(
                f"| {tokens} | {r['variant']} | {r['us']:.1f} | {ratio} | {r['kernels_per_layer']:.1f} | {copies} | "
                f"{r['compile_s']:.1f} | {r.get('pass_s', 0):.2f} | {fus} | {r['max_abs_err']:.3g} |"
            )
    gains = []
    for tokens in a.tokens:
        by = {r["variant"]: r for r in rows if r["tokens"] == tokens}
        if "ircore prov fusion" in by and "ircore prov nofusion" in by:
            gains.append(f"T={tokens}: {by['ircore prov nofusion']['us'] / by['ircore prov fusion']['us']:.3f}x")
    if gains:
        out += ["", "fusion gain (no fusion / fusion): " + ", ".join(gains)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=None, help="default: 14336 on cuda, 4096 on cpu")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--tokens", default=None, help="comma list; default 1,16,256,2048 on cuda, 1,16,256 on cpu")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=20, help="calls per round at T <= 16 (fewer for larger T)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--dynamic", action="store_true", help="one graph for every T > 1 (fewer compiles)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (1: stable timings on a shared box)")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    a = p.parse_args(argv)
    cuda = a.device.startswith("cuda")
    a.dtype = a.dtype or ("bfloat16" if cuda else "float32")
    a.intermediate = a.intermediate or (14336 if cuda else 4096)
    a.tokens = [int(t) for t in (a.tokens or ("1,16,256,2048" if cuda else "1,16,256")).split(",")]
    a.variants = [v.strip() for v in a.variants.split(",")]
    a.compiled = {}
    unknown = [v for v in a.variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if not cuda:
        torch.set_num_threads(a.threads)
    torch._inductor.config.fx_graph_cache = False  # compile time and pass counts of a real compile
    # every variant and size keeps its compiled graph (they share Decoder.forward's code object)
    for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    print(f"torch {torch.__version__}, ircore {ircore.__version__}; providers:", file=sys.stderr)
    from ircore.providers._manager import MANAGER

    MANAGER.ensure_loaded()
    for name, rec in sorted(MANAGER.records.items()):
        print(f"  {name}: {rec.state}: {rec.reason}", file=sys.stderr)
    rows = run(a)
    md = markdown(rows, a)
    print(md)
    if a.json:
        args = {k: str(v) for k, v in vars(a).items() if k != "compiled"}
        a.json.write_text(json.dumps({"args": args, "rows": rows}, indent=1))
    if a.markdown:
        a.markdown.write_text(md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
