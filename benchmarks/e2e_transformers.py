"""End to end: a Hugging Face Llama or Qwen3-MoE through stock transformers, Liger-Kernel, Inductor and ircore.

``--model llama`` (the default): a Llama-3-8B-shaped ``LlamaForCausalLM`` built from its config
(hidden 4096, intermediate 14336, 32/8 heads, vocab 128256, bf16, random weights; ``--layers`` of
them: 8 by default on CUDA so that the run stays under 5 minutes on an H200, 32 for the full model).

``--model qwen3_moe``: a Qwen3-30B-A3B-shaped ``Qwen3MoeForCausalLM`` (hidden 2048, 32/4 heads of
128, 128 experts of intermediate 768, top 8, vocab 151936, bf16, random weights; 8 of its 48
layers by default on CUDA, about 10 GB of experts). ``apply(model, mlp=True)`` gives its experts
``silu_and_mul`` between their two matmuls (transformers' default grouped_mm experts
implementation); the routing and the matmuls are transformers' own.

Each is measured at:

- prefill: one forward of ``--prefill`` tokens (2048 on CUDA), batch 1, logits of the last token;
- decode: one token per sequence per step at batch ``--batches`` (1, 16, 64 on CUDA), with a
  static KV cache already holding ``--context`` tokens.

Variants (each on the same weights; the KV cache is transformers' ``StaticCache`` for all):

- ``stock eager``      transformers as it is;
- ``liger eager``      Liger-Kernel's ``apply_liger_kernel_to_llama(model=...)`` (or ``_qwen3_moe``:
                       RMSNorm, SwiGLU, RoPE; its fused linear cross-entropy off: no loss at
                       inference), CUDA only; skipped with the reason where Liger raises;
- ``ircore eager``     ``ircore.integrations.transformers.apply(model, mlp=True)``;
- ``ircore eager with rope routed``  ``apply(model, mlp=True, rope=True)``: the rotary embedding on
                       ``ircore.ops.rotary_pos_emb`` too (the row to set against ``liger eager``,
                       which patches RoPE as well);
- ``ircore compile with norms to inductor``  ``ircore compile`` with ``native`` first for ``rms_norm``
                       and ``fused_add_rms_norm`` (``ircore.set_priority``, for the variant): the
                       norms traced into aten ops that Inductor fuses with their neighbours, the
                       add+norm fusion and the activations as in ``ircore compile`` (what the
                       opaque norm kernels cost in launches at small batches:
                       ``compiled_launches.py``);
- ``ircore compile with small norms to inductor``  ``ircore.compile(model.forward,
                       leave_to_inductor=SMALL_NORMS)``: only norm calls of at most 65536
                       elements left to Inductor (decode at small batches), the providers'
                       kernels for the rest (prefill);
- ``ircore compile with small ops to inductor``  the same with ``silu_and_mul``'s small calls too
                       (``SMALL_OPS``);
- ``stock compile``    ``torch.compile(model.forward, mode=--mode)`` (Inductor);
- ``ircore compile``   ``apply(model, mlp=True)`` + ``torch.compile(model.forward, backend="ircore",
                       mode=--mode)``; ``--mode`` is ``reduce-overhead`` (CUDA graphs) on CUDA;
- ``ircore compile with rope routed``  the same with ``rope=True``: on Qwen3-MoE, each layer's
                       q_norm/k_norm and rotary embedding become ``fused_qk_norm_rope``
                       (the ``hf_qk_norm_rope`` fusion; ``qk fused`` in the JSON rows);
- ``fp8 transformers`` the same model with FP8 block-128 weights (transformers' ``FP8Linear``, built
                       by ``ircore.integrations.transformers.fp8_model``; lm_head dense), through
                       transformers' own FP8 forward, which loads its matmul from the Hub: offline it
                       raises, and the row records why;
- ``fp8 ircore eager`` that model after ``apply(model, mlp=True)``: each FP8Linear through
                       ``dynamic_group_quant_fp8`` + ``block_scaled_mm_fp8``;
- ``fp8 ircore compile`` the same under ``backend="ircore"`` (each norm fuses with its projections'
                       group quant). fp8 rows' logit differences include the quantization.

Reported per variant and point: tokens/s (median of ``--rounds`` timed rounds), the ratio to
stock eager and (compiled rows) to stock compile, the first call's time for compiled rows, the
add+norm fusions, the max |logit difference| to stock eager, and the share of GPU kernel time
spent in norm, residual-add and activation kernels (torch.profiler; rule in ``kernel_category``).

    python benchmarks/e2e_transformers.py                         # CPU: a small model, see --help
    python benchmarks/e2e_transformers.py --model qwen3_moe --quick  # CPU smoke run: tiny, seconds
    python benchmarks/e2e_transformers.py --device cuda --json out.json --markdown out.md
    python benchmarks/e2e_transformers.py --device cuda --model qwen3_moe --json moe.json --markdown moe.md
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ircore
from ircore.integrations.transformers import apply, fp8_model, undo

VARIANTS = ("stock eager", "liger eager", "ircore eager", "ircore eager with rope routed", "ircore compile",
            "ircore compile with rope routed", "ircore compile with norms to inductor",
            "ircore compile with small norms to inductor", "ircore compile with small ops to inductor", "stock compile", "fp8 transformers", "fp8 ircore eager",
            "fp8 ircore compile")
# what "with norms to inductor" leaves to Inductor (the process-wide priority: the lowering's)
NORMS_NATIVE = {"rms_norm": ["native"], "fused_add_rms_norm": ["native"]}
# "with small norms to inductor": ircore.compile(leave_to_inductor=...), norm calls of at most 65536
# elements (16 tokens of 4096, 32 of 2048; the q/k norms of 16 tokens of 32 heads of 128)
SMALL_NORMS = {"rms_norm": 65536, "fused_add_rms_norm": 65536}
# "with small ops to inductor": the same, and silu_and_mul's small calls (an MoE's experts at decode
# batch 1: top-k rows of 2 x 768; stock Inductor fuses the activation with the experts' transpose)
SMALL_OPS = {**SMALL_NORMS, "silu_and_mul": 65536}
CATEGORIES = ("norm", "add", "act")
_START = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _START:6.1f} s] {msg}", file=sys.stderr, flush=True)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


# ---------------------------------------------------------------------- the model
MODEL_CLASS = {"llama": "LlamaForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


def build_model(a: argparse.Namespace) -> Any:
    import transformers

    if a.model == "llama":
        config = transformers.LlamaConfig(
            hidden_size=a.hidden, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
            num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, vocab_size=a.vocab,
            rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192,
        )
    else:  # every layer an MoE one, as in Qwen3-30B-A3B
        config = transformers.Qwen3MoeConfig(
            hidden_size=a.hidden, moe_intermediate_size=a.intermediate, intermediate_size=3 * a.intermediate,
            num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
            head_dim=a.head_dim, num_experts=a.experts, num_experts_per_tok=a.top_k, vocab_size=a.vocab,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1000000.0,
            rms_norm_eps=1e-6, max_position_embeddings=8192,
        )
    torch.manual_seed(0)
    with torch.device(a.device):  # initialised where it runs: no multi-GB host init
        model = getattr(transformers, MODEL_CLASS[a.model])(config).to(getattr(torch, a.dtype)).eval()
    with torch.no_grad():  # norm weights away from 1, so that they matter
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(1.0, 0.1)
    return model


def static_cache(model: Any, length: int) -> Any:
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=length)


class Runner:
    """Prefill and decode steps of one callable: the model's forward, eager or compiled.

    transformers' ``StaticCache`` (5.17 to 5.23) keeps its own position (a device tensor it
    advances in place), from which the model derives positions and the mask: a prefill step
    resets the cache first; decode steps advance it, so its length covers every step run.
    """

    def __init__(self, model: Any, fn: Callable[..., Any], a: argparse.Namespace) -> None:
        self.model, self.fn, self.a = model, fn, a
        self.compiled = fn != model.forward

    def call(self, fn: Callable[..., Any], ids: torch.Tensor, cache: Any) -> torch.Tensor:
        if fn is self.fn and self.compiled and self.a.device.startswith("cuda"):
            torch.compiler.cudagraph_mark_step_begin()  # a new step: earlier outputs may be overwritten
        return fn(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits

    def prefill(self, batch: int, tokens: int) -> Callable[[], torch.Tensor]:
        """A step that prefills ``tokens`` tokens into an emptied cache."""
        ids = torch.randint(0, self.a.vocab, (batch, tokens), device=self.a.device,
                            generator=torch.Generator(self.a.device).manual_seed(1))
        cache = static_cache(self.model, tokens)
        self.call(self.model.forward, ids, cache)  # allocates the cache, outside any graph

        def step() -> torch.Tensor:
            cache.reset()
            return self.call(self.fn, ids, cache)

        return step

    def decode(self, batch: int, steps: int) -> Callable[[], torch.Tensor]:
        """A step that decodes one token per sequence, after ``--context`` tokens; ``steps`` of them fit."""
        a = self.a
        ids = torch.randint(0, a.vocab, (batch, a.context), device=a.device,
                            generator=torch.Generator(a.device).manual_seed(2))
        cache = static_cache(self.model, a.context + steps)
        self.call(self.model.forward, ids, cache)  # the context, by the eager model
        token = ids[:, -1:].clone()
        return lambda: self.call(self.fn, token, cache)


# ---------------------------------------------------------------------- kernel shares
def kernel_category(name: str) -> str | None:
    """norm / add / act by kernel name, for kernels not launched inside a labelled module.

    Names that say what they compute: vllm_c's ``norm_reg_kernel``/``norm_loop_kernel``
    (fused add+norm included) and ``silu_and_mul_kernel``; triton's ``_rms_norm_kernel``,
    ``_silu_and_mul_kernel``; Liger's ``_rms_norm_forward_kernel``, ``_swiglu_forward_kernel``;
    Inductor's ``triton_*_fused_<ops>`` / ``cpp_fused_<ops>``: with ``rsqrt`` a norm (an add
    fused into it counts as norm), with ``silu``/``sigmoid`` an activation, with ``add`` and no
    rotary/attention op (cos, sin, cat, neg, exp, softmax, bmm, where) a residual add.
    """
    n = name.lower()
    if "silu" in n or "swiglu" in n or "sigmoid" in n:
        return "act"
    if "norm" in n or "rsqrt" in n:
        return "norm"
    if "fused" in n and "add" in n and not any(op in n for op in ("cos", "sin", "cat", "neg", "exp", "softmax", "bmm", "where")):
        return "add"
    return None


_MATMULS = ("aten::mm", "aten::addmm", "aten::matmul", "aten::linear", "aten::bmm")


class ModuleLabels:
    """While installed, each RMSNorm / MLP / attention / rotary module runs in a named profiler range.

    Eager only: an aten op launched inside ``bench::norm`` is norm work, inside ``bench::mlp``
    activation work unless it is a matmul; ``aten::add`` outside any range is the residual add.
    """

    def __init__(self, model: Any) -> None:
        self.handles: list[Any] = []
        for module in model.modules():
            kind = type(module).__name__
            label = ("norm" if kind.endswith("RMSNorm") else "mlp" if kind.endswith("MLP")
                     else "moe" if kind.endswith(("Experts", "SparseMoeBlock"))
                     else "attn" if kind.endswith("Attention") else "rotary" if "Rotary" in kind else None)
            if label is None:
                continue
            stack: list[Any] = []

            def pre(_m: Any, _args: Any, label: str = label, stack: list[Any] = stack) -> None:
                rf = torch.profiler.record_function(f"bench::{label}")
                rf.__enter__()
                stack.append(rf)

            def post(_m: Any, _args: Any, _out: Any, stack: list[Any] = stack) -> None:
                stack.pop().__exit__(None, None, None)

            self.handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _label_of(event: Any) -> tuple[str | None, list[str]]:
    """The innermost ``bench::`` range around a CPU event, and the op names on the way up."""
    names = []
    while event is not None:
        if event.name.startswith("bench::"):
            return event.name[len("bench::") :], names
        names.append(event.name)
        event = event.cpu_parent
    return None, names


def _category(label: str | None, names: list[str], kernel_name: str) -> str | None:
    """``names``: the launching op first, then its parents up to the label's range.

    In an MoE block (router, expert matmuls, gathers, sorts) only kernels named for an activation
    (``kernel_category``: silu, swiglu, sigmoid) count, as act: the multiply of stock's
    ``act(gate) * up`` is not told apart from the routing weights' there.
    """
    if label == "norm":
        return "norm"
    if label == "moe":
        return "act" if kernel_category(kernel_name) == "act" or any("silu" in n for n in names) else None
    if label == "mlp":
        return None if any(n in _MATMULS for n in names) else "act"
    if label is None and names and names[0] in ("aten::add", "aten::add_"):
        return "add"
    if label is None:
        return kernel_category(kernel_name)
    return None  # attention, rotary embedding


def kernel_shares(prof: Any, device: str) -> dict[str, float] | None:
    """Share of kernel time per category; None if the profiler saw no kernels."""
    from torch.autograd import DeviceType

    events = list(prof.events())
    by_id = {e.id: e for e in events if e.device_type == DeviceType.CPU}
    totals: Counter[str] = Counter()
    if device.startswith("cuda"):
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        for k in kernels:
            launcher = by_id.get(getattr(k, "linked_correlation_id", 0))
            label, names = _label_of(launcher)
            us = k.time_range.elapsed_us()
            totals[_category(label, names, k.name) or "other"] += us
    else:  # CPU: each op's own time (children excluded), classified like a kernel it launched
        for e in events:
            if e.device_type != DeviceType.CPU or e.name.startswith("bench::"):
                continue
            label, names = _label_of(e)
            totals[_category(label, names, e.name) or "other"] += e.self_cpu_time_total
    whole = sum(totals.values())
    if whole <= 0:
        return None
    return {c: totals[c] / whole for c in CATEGORIES}


def profile_shares(step: Callable[[], Any], model: Any, calls: int, device: str, label: bool) -> dict[str, float] | None:
    from torch.profiler import ProfilerActivity, profile

    if not label and not device.startswith("cuda"):
        return None  # compiled on CPU: Inductor's C++ kernels are invisible to the profiler
    labels = ModuleLabels(model) if label else None
    try:
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
        with profile(activities=acts) as prof:
            for _ in range(calls):
                step()
            sync(device)
        return kernel_shares(prof, device)
    except Exception as exc:  # the shares are a diagnostic: never lose the timings for them
        log(f"profiling failed: {type(exc).__name__}: {exc}")
        return None
    finally:
        if labels is not None:
            labels.remove()


# ---------------------------------------------------------------------- measurement
def time_step(step: Callable[[], Any], calls: int, rounds: int, device: str) -> float:
    """Median seconds per call over ``rounds`` rounds of ``calls`` back-to-back calls."""
    times = []
    for _ in range(rounds):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        sync(device)
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def measure(variant: str, model: Any, fn: Callable[..., Any], a: argparse.Namespace,
            reference: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    runner = Runner(model, fn, a)
    rows = []
    for phase, batch in [("prefill", 1)] + [("decode", b) for b in a.batches]:
        row: dict[str, Any] = {"variant": variant, "phase": phase, "batch": batch}
        if time.perf_counter() - _START > a.budget_s:
            log(f"{variant} {phase} b={batch}: skipped, past the --budget-s of {a.budget_s:.0f} s")
            rows.append(dict(row, skipped=f"past the {a.budget_s:.0f} s budget"))
            continue
        log(f"{variant}: {phase} batch {batch}")
        ircore.compile.reset_report()
        if phase == "prefill":
            step, tokens, calls = runner.prefill(batch, a.prefill), a.prefill * batch, a.prefill_calls
        else:
            calls = a.decode_calls
            steps = 4 + a.rounds * calls + 3  # warm-up, logits, timed rounds, profiled steps
            step, tokens = runner.decode(batch, steps), batch
        t0 = time.perf_counter()
        step()  # compiled: the compile
        sync(a.device)
        first_s = time.perf_counter() - t0
        for _ in range(2):  # warm-up (compiled: record the CUDA graph, replay)
            step()
        logits = step().float().clone()
        key = f"{phase}{batch}"
        reference.setdefault(key, logits)  # the first variant's (stock eager's) logits
        seconds = time_step(step, calls, a.rounds, a.device)
        report = ircore.compile.report()
        row.update(tokens_per_s=tokens / seconds, ms_per_call=seconds * 1e3,
                   first_s=first_s if runner.compiled else None, fusions=report.fusions.get("add_rms_norm", 0),
                   qk_fused=report.fusions.get("hf_qk_norm_rope", 0),
                   lowered={op: dict(c) for op, c in report.lowered.items()},
                   max_abs_diff=(logits - reference[key]).abs().max().item())
        row["shares"] = profile_shares(step, model, 1 if phase == "prefill" else 3, a.device, label=not runner.compiled)
        log(f"  {row['tokens_per_s']:,.0f} tokens/s, shares {row['shares']}")
        rows.append(row)
    return rows


@contextlib.contextmanager
def variant_on(variant: str, model: Any, mode: str | None) -> Iterator[Callable[..., Any]]:
    """Inside: ``model`` set up as a stock / ircore ``variant`` (eager or compiled), and the
    function to call; after: ``model`` stock again, the priority as before, Dynamo reset."""
    ircore_on = variant.startswith("ircore")
    rope = variant.endswith("with rope routed")
    norms_native = variant.endswith("with norms to inductor")
    if ircore_on:
        summary = apply(model, mlp=True, rope=rope)
        log(f"apply(model, mlp=True, rope={rope}): {'; '.join(str(summary).splitlines())}")
    if norms_native:
        ircore.set_priority(NORMS_NATIVE)
    try:
        fn = model.forward
        small = {"with small norms to inductor": SMALL_NORMS, "with small ops to inductor": SMALL_OPS}
        leave = next((v for k, v in small.items() if variant.endswith(k)), None)
        if leave is not None:
            torch._dynamo.reset()
            fn = ircore.compile(model.forward, leave_to_inductor=leave, mode=mode, dynamic=False)
        elif " compile" in variant:
            torch._dynamo.reset()
            backend = "ircore" if ircore_on else "inductor"
            fn = torch.compile(model.forward, backend=backend, mode=mode, dynamic=False)
        yield fn
    finally:
        if norms_native:
            ircore.set_priority(dict.fromkeys(NORMS_NATIVE))
        if ircore_on:
            undo(model)
        torch._dynamo.reset()


def run_variant(variant: str, model: Any, a: argparse.Namespace, reference: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Set the variant up on ``model``, measure it, and leave ``model`` stock again."""
    if variant == "liger eager":
        return run_liger(model, a, reference)
    if variant.startswith("fp8"):
        return run_fp8(variant, a, reference)
    with variant_on(variant, model, a.mode) as fn:
        return measure(variant, model, fn, a, reference)


def run_fp8(variant: str, a: argparse.Namespace, reference: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """The same model with FP8 block-128 weights (transformers' FP8Linear, ``fp8_model``; lm_head kept
    dense), built once. ``fp8 transformers`` runs transformers' own forward, which loads its
    matmul kernel from the Hub: offline it raises, and the row says so. Logit differences are
    against stock (bf16) eager: they include the quantization."""
    model = getattr(a, "fp8_model", None)
    if model is None:
        model = a.fp8_model = fp8_model(build_model(a))
    if variant == "fp8 transformers":
        try:
            return measure(variant, model, model.forward, a, reference)
        except Exception as exc:  # offline: "finegrained-fp8 kernel unavailable"
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            log(f"{variant}: {why}")
            return [{"variant": variant, "phase": "prefill", "batch": 1, "skipped": why}]
    summary = apply(model, mlp=True)
    log(f"apply(fp8 model, mlp=True): {'; '.join(str(summary).splitlines())}")
    fn = model.forward
    if variant.endswith("compile"):
        torch._dynamo.reset()
        fn = torch.compile(model.forward, backend="ircore", mode=a.mode, dynamic=False)
    try:
        return measure(variant, model, fn, a, reference)
    finally:
        undo(model)
        torch._dynamo.reset()


def run_liger(model: Any, a: argparse.Namespace, reference: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
    """Liger patches instances it cannot unpatch, and module globals: a copy, globals restored."""
    skip = [{"variant": "liger eager", "phase": p, "batch": b, "skipped": None}
            for p, b in [("prefill", 1)] + [("decode", b) for b in a.batches]]
    if not a.device.startswith("cuda"):
        return [dict(r, skipped="Liger-Kernel needs a GPU (Triton)") for r in skip]
    import importlib

    try:
        import liger_kernel.transformers as liger
    except ImportError as exc:
        return [dict(r, skipped=f"liger_kernel not importable: {exc}") for r in skip]
    patch = getattr(liger, f"apply_liger_kernel_to_{a.model}", None)
    if patch is None:
        return [dict(r, skipped=f"this Liger-Kernel has no apply_liger_kernel_to_{a.model}") for r in skip]
    modeling = importlib.import_module(type(model).__module__)
    saved = dict(vars(modeling))  # Liger replaces module globals (rotary, norm and MLP classes)
    copy_ = copy.deepcopy(model)
    try:
        try:
            patch(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False,
                  model=copy_)
        except Exception as exc:  # e.g. a Liger that does not know this transformers' MoE layout
            log(f"liger: {type(exc).__name__}: {exc}")
            return [dict(r, skipped=f"Liger raised {type(exc).__name__}: {str(exc)[:80]}") for r in skip]
        return measure("liger eager", copy_, copy_.forward, a, reference)
    finally:
        for name, value in saved.items():
            if vars(modeling).get(name) is not value:
                setattr(modeling, name, value)
        del copy_
        if a.device.startswith("cuda"):
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------- output
def _ratio(value: float, anchor: float | None) -> str:
    return f"{value / anchor:.3f}" if anchor else "n/a"


def markdown(rows: list[dict[str, Any]], a: argparse.Namespace, env: str) -> str:
    out = [
        f"{env}; {MODEL_CLASS[a.model]}, {a.layers} layers, hidden {a.hidden}, intermediate {a.intermediate}"
        + (f" x {a.experts} experts (top {a.top_k}), head_dim {a.head_dim}" if a.model == "qwen3_moe" else "")
        + f", heads {a.heads}/{a.kv_heads}, vocab {a.vocab}, {a.dtype}, random weights; prefill {a.prefill} tokens; "
        f"decode after {a.context} tokens; compiled with mode={a.mode!r}; median of {a.rounds} rounds",
        "",
        "| point | variant | tokens/s | vs stock eager | vs stock compile | first call s | add+norm fused | "
        "norm % | add % | act % | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    points = []
    for r in rows:
        if (r["phase"], r["batch"]) not in points:
            points.append((r["phase"], r["batch"]))
    for phase, batch in points:
        group = [r for r in rows if (r["phase"], r["batch"]) == (phase, batch)]
        anchors = {r["variant"]: r.get("tokens_per_s") for r in group}
        label = f"prefill {a.prefill}" if phase == "prefill" else f"decode b={batch}"
        for r in group:
            if r.get("skipped"):
                out.append(f"| {label} | {r['variant']} | skipped: {r['skipped']} |  |  |  |  |  |  |  |  |")
                continue
            tps = r["tokens_per_s"]
            vs_eager = _ratio(tps, anchors.get("stock eager"))
            vs_compile = _ratio(tps, anchors.get("stock compile")) if " compile" in r["variant"] else ""
            shares = r.get("shares") or {}
            pct = [f"{100 * shares[c]:.1f}" if c in shares else "n/a" for c in CATEGORIES]
            first = f"{r['first_s']:.1f}" if r.get("first_s") is not None else ""
            fused = str(r["fusions"]) if r["variant"].startswith("ircore compile") else ""
            fused += f" (+{r['qk_fused']} qk-norm+rope)" if r.get("qk_fused") else ""
            diff = f"{r['max_abs_diff']:.3g}" if "max_abs_diff" in r else ""
            out.append(f"| {label} | {r['variant']} | {tps:,.0f} | {vs_eager} | {vs_compile} | {first} | "
                       f"{fused} | {' | '.join(pct)} | {diff} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--model", choices=sorted(MODEL_CLASS), default="llama",
                   help="llama: Llama-3-8B-shaped; qwen3_moe: Qwen3-30B-A3B-shaped (shapes: --help of each below)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: a tiny model (hidden 64, 2 layers), short prefill and decode, 1 round")
    p.add_argument("--layers", type=int, default=None, help="default: 8 on cuda (the full models have 32 / 48), 2 on cpu")
    p.add_argument("--hidden", type=int, default=None, help="default: 4096 / 2048 on cuda, 512 / 256 on cpu")
    p.add_argument("--intermediate", type=int, default=None,
                   help="the MLP's, or each expert's; default: 14336 / 768 on cuda, 1536 / 128 on cpu")
    p.add_argument("--heads", type=int, default=None, help="default: 32 / 32 on cuda, 8 / 4 on cpu")
    p.add_argument("--kv-heads", type=int, default=None, help="default: 8 / 4 on cuda, 2 / 2 on cpu")
    p.add_argument("--head-dim", type=int, default=None, help="qwen3_moe: default 128 on cuda, 64 on cpu")
    p.add_argument("--experts", type=int, default=None, help="qwen3_moe: default 128 on cuda, 8 on cpu")
    p.add_argument("--top-k", type=int, default=None, help="qwen3_moe: experts per token; default 8 on cuda, 2 on cpu")
    p.add_argument("--vocab", type=int, default=None, help="default: 128256 / 151936 on cuda, 8192 on cpu")
    p.add_argument("--prefill", type=int, default=None, help="prefill tokens; default 2048 on cuda, 128 on cpu")
    p.add_argument("--batches", default=None, help="decode batch sizes; default 1,16,64 on cuda, 1,8 on cpu")
    p.add_argument("--context", type=int, default=None, help="tokens in the cache before decoding; default 512 on cuda, 64 on cpu")
    p.add_argument("--mode", default=None, help="torch.compile mode; default reduce-overhead on cuda, default on cpu")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--prefill-calls", type=int, default=None, help="calls per round; default 5 on cuda, 2 on cpu")
    p.add_argument("--decode-calls", type=int, default=None, help="calls per round; default 20 on cuda, 5 on cpu")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--budget-s", type=float, default=None,
                   help="skip points not started after this many seconds; default 240 on cuda, none on cpu")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    p.add_argument("--json", type=Path)
    p.add_argument("--markdown", type=Path)
    a = p.parse_args(argv)
    cuda = a.device.startswith("cuda")
    if a.quick:  # before the defaults: what is set here is kept
        for key, value in dict(layers=2, hidden=64, intermediate=32 if a.model == "qwen3_moe" else 128, heads=4,
                               kv_heads=2, head_dim=16, experts=4, top_k=2, vocab=256, prefill=16, batches="1,2",
                               context=8, prefill_calls=1, decode_calls=2).items():
            if getattr(a, key) is None:
                setattr(a, key, value)
        a.rounds = 1
    defaults = dict(dtype=("bfloat16", "float32"), layers=(8, 2), hidden=(4096, 512), intermediate=(14336, 1536),
                    heads=(32, 8), kv_heads=(8, 2), vocab=(128256, 8192), prefill=(2048, 128),
                    batches=("1,16,64", "1,8"), context=(512, 64), mode=("reduce-overhead", "default"),
                    prefill_calls=(5, 2), decode_calls=(20, 5), budget_s=(240.0, float("inf")))
    if a.model == "qwen3_moe":
        defaults.update(hidden=(2048, 256), intermediate=(768, 128), heads=(32, 4), kv_heads=(4, 2),
                        head_dim=(128, 64), experts=(128, 8), top_k=(8, 2), vocab=(151936, 8192))
    for key, (on_cuda, on_cpu) in defaults.items():
        if getattr(a, key) is None:
            setattr(a, key, on_cuda if cuda else on_cpu)
    a.batches = [int(b) for b in str(a.batches).split(",")]
    variants = [v.strip() for v in a.variants.split(",")]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch._inductor.config.fx_graph_cache = False  # real compiles: the pass runs and reports
    for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)

    import transformers

    from ircore.providers._manager import MANAGER

    MANAGER.ensure_loaded()
    env = (f"torch {torch.__version__}, transformers {transformers.__version__}, ircore {ircore.__version__}, "
           f"{torch.cuda.get_device_name() if cuda else 'CPU'}, providers: "
           + ", ".join(f"{n} {r.state.value}" for n, r in sorted(MANAGER.records.items())))
    log(env)
    model = build_model(a)
    reference: dict[str, torch.Tensor] = {}
    rows: list[dict[str, Any]] = []
    with torch.inference_mode():
        for variant in variants:
            rows += run_variant(variant, model, a, reference)
            if a.json:  # after every variant: a run cut short keeps what it measured
                a.json.write_text(json.dumps({"env": env, "args": {k: str(v) for k, v in vars(a).items()},
                                              "rows": rows}, indent=1))
    md = markdown(rows, a, env)
    print(md)
    if a.markdown:
        a.markdown.write_text(md + "\n")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
