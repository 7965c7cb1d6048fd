"""Kernel launches per layer of a compiled decode step: stock Inductor against ``backend="ircore"``.

Where each kernel is short (decode at batch 1), a step's time follows its launch count. An ircore
op is opaque to Inductor: it runs its provider's kernel, and Inductor can no longer fuse what it
computes into the kernels around it (a q/k norm into the RoPE after it, ``act(gate) * up`` into the
MoE experts' split and transpose). This counts, from Inductor's own output code, the launches in
one decode step of a small Hugging Face model built from its config (random weights; the layers'
structure is what counts, not their size): Inductor's generated kernels, the matmuls it calls, and
the custom ops (ircore's providers' and others'), per variant, divided by the layers.

    python benchmarks/compiled_launches.py                      # Llama and Qwen3-MoE, CPU, seconds
    python benchmarks/compiled_launches.py --model qwen3_moe --device cuda

Runs on the CPU (Inductor's C++ kernels) and on CUDA (its Triton kernels); the counts are of the
code, so they hold for either, fusion decisions aside. Variants as in ``e2e_transformers.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_transformers as e2e  # its model builder and decode step

VARIANTS = (
    "stock compile", "ircore compile", "ircore compile with rope routed", "ircore compile with norms to inductor",
    "ircore compile with small norms to inductor", "ircore compile with small ops to inductor",
)  # fmt: skip
# launches in an Inductor output module's ``call``: its generated kernels (C++ or Triton), the
# library calls it makes (extern_kernels.mm, ...) and custom ops (torch.ops.<namespace>.<op>)
_KERNEL = re.compile(r"^\s+(?:(cpp_fused_\w+)\(|(triton_\w+)\.run\()", re.M)
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)\(")
_CUSTOM = re.compile(r"\btorch\.ops\.(\w+)\.(\w+)\.default\(")


def count_launches(code: str) -> Counter[str]:
    """Launches in the ``call`` function of one Inductor output module, by kind and name."""
    body = code[code.find("def call(") :] if "def call(" in code else ""
    end = body.find("\ndef ")  # the next function: the module's benchmark harness
    body = body if end < 0 else body[:end]
    counts: Counter[str] = Counter()
    kernels = len(_KERNEL.findall(body))
    if kernels:
        counts["inductor kernel"] = kernels
    for name in _EXTERN.findall(body):
        counts[f"matmul ({name})" if "mm" in name else f"extern {name}"] += 1
    for namespace, op in _CUSTOM.findall(body):
        counts[f"{namespace}.{op}"] += 1
    return counts


def model_args(model: str, device: str, layers: int) -> argparse.Namespace:
    """A small model of ``e2e_transformers.build_model``'s family (every layer as in the full one)."""
    small = dict(hidden=128, intermediate=64 if model == "qwen3_moe" else 256, heads=4, kv_heads=2,
                 head_dim=32, experts=8, top_k=2, vocab=512)  # fmt: skip
    return argparse.Namespace(model=model, device=device, dtype="bfloat16" if device.startswith("cuda") else "float32",
                              layers=layers, context=8, **small)  # fmt: skip


def measure(variant: str, model: Any, a: argparse.Namespace, batch: int) -> Counter[str]:
    """Launches of one compiled decode step of ``variant`` (set up as e2e_transformers does)."""
    from torch._inductor.utils import run_and_get_code

    with e2e.variant_on(variant, model, None) as fn:
        step = e2e.Runner(model, fn, a).decode(batch, steps=4)
        with torch.no_grad():
            _, codes = run_and_get_code(step)
    total: Counter[str] = Counter()
    for code in codes:
        total += count_launches(code)
    return total


def table(results: dict[str, dict[str, Counter[str]]], layers: int) -> str:
    lines = [f"Launches per layer of one compiled decode step ({layers} layers; the whole step / layers).", ""]
    for model, by_variant in results.items():
        kinds = sorted({k for c in by_variant.values() for k in c})
        lines += [f"**{model}**", "", "| variant | launches / layer | " + " | ".join(kinds) + " |",
                  "|---|---|" + "---|" * len(kinds)]  # fmt: skip
        for variant, c in by_variant.items():
            cells = " | ".join(f"{c.get(k, 0) / layers:.1f}" for k in kinds)
            lines.append(f"| {variant} | {sum(c.values()) / layers:.1f} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(e2e.MODEL_CLASS), nargs="*", default=["llama", "qwen3_moe"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=1, help="decode batch")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",")]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    torch._inductor.config.fx_graph_cache = False  # the code is generated, so that it can be read
    results: dict[str, dict[str, Counter[str]]] = {}
    for model_name in a.model:
        args = model_args(model_name, a.device, a.layers)
        model = e2e.build_model(args)
        results[model_name] = {}
        for variant in variants:
            e2e.log(f"{model_name}: {variant} ...")
            results[model_name][variant] = measure(variant, model, args, a.batch)
    print(table(results, a.layers))
    if a.json:
        a.json.write_text(json.dumps({m: {v: dict(c) for v, c in r.items()} for m, r in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
