"""ircore in a minute: Hugging Face transformers models running on ircore's kernels.

Builds a small Llama and a small Qwen3 from their configs (random weights: nothing is
downloaded) and generates from one prompt three ways:

1. stock transformers;
2. ircore eager: ``apply(model, mlp=True, rope=True)`` routes every RMSNorm to
   ``ircore.ops.rms_norm``, every MLP to one merged gate/up matmul plus ``ircore.ops.silu_and_mul``
   and the rotary embedding to ``ircore.ops.rotary_pos_emb``;
3. compiled: ``torch.compile(model.forward, backend="ircore")``, which also fuses each residual
   add with the RMSNorm after it into ``fused_add_rms_norm`` (and Qwen3's QK-norm + RoPE into
   ``fused_qk_norm_rope``) and replaces every ircore op by the kernel the eager rule picks;
4. ``undo(model)``: the stock model again.

and shows that the greedy tokens are the same, which providers ran, how many add+norm pairs were
fused, and how long each took (a second run: the first warms up; the compiled path's first
call, which compiles, is shown too). Generation runs without a KV cache, so that one compiled graph
(``dynamic=True``) serves every length. Then a tiny FP8 Llama (transformers' ``FP8Linear`` with
block-128 weights, as DeepSeek-V3 / Qwen3-FP8 checkpoints hold them): transformers' own forward
needs a Hub kernel, ircore's runs offline, with the same tokens as a pure-torch dequantizing
reference of the same weights. Run with ``make demo``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: never reach for the Hub

import torch
import transformers

import ircore
from ircore.integrations.transformers import apply, fp8_model, undo

PROMPT_TOKENS, NEW_TOKENS = 16, 8
SIZE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128)
MODELS = {
    "Llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig(**SIZE)),
    "Qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config(head_dim=16, **SIZE)),
}


class CountRuns(logging.Handler):
    """Counts ircore's DEBUG lines "<op>: running <provider>" (one per eager call)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.runs: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        op, _, provider = record.getMessage().partition(": running ")
        if provider:
            self.runs[f"{op} on {provider}"] += 1

    def __enter__(self) -> Counter[str]:
        logger = logging.getLogger("ircore")
        self.level = logger.level
        logger.addHandler(self)
        logger.setLevel(logging.DEBUG)
        return self.runs

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("ircore")
        logger.removeHandler(self)
        logger.setLevel(self.level)


def generate(model: Any, prompt: torch.Tensor, warm_up: bool = True) -> tuple[list[int], float]:
    """Greedy tokens after the prompt, and the seconds the (second, if ``warm_up``) run took."""
    for _ in range(2 if warm_up else 1):
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False, use_cache=False, pad_token_id=0)
    return out[0, PROMPT_TOKENS:].tolist(), time.perf_counter() - start


def row(what: str, tokens: list[int], seconds: float, stock: list[int] | None, note: str = "") -> None:
    same = "-" if stock is None else ("same" if tokens == stock else "DIFFERENT")
    print(f"  {what:<28} {' '.join(f'{t:3d}' for t in tokens)}   {same:<9} {seconds:6.2f} s {note}")


def counts(runs: dict[str, Any]) -> str:
    return ", ".join(f"{what} x{n}" for what, n in sorted(runs.items()))


def show_model(name: str) -> None:
    model_cls, config = MODELS[name]
    torch.manual_seed(0)
    model = model_cls(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, PROMPT_TOKENS))
    layers = config.num_hidden_layers
    print(f"\n=== {name}: {layers} layers, hidden {config.hidden_size}, random weights; "
          f"{PROMPT_TOKENS}-token prompt, greedy ===")
    print(f"  {'run':<28} {'new tokens':<{4 * NEW_TOKENS}}  vs stock  time")
    stock, seconds = generate(model, prompt)
    row("stock transformers", stock, seconds, None)

    summary = apply(model, mlp=True, rope=True)
    tokens, seconds = generate(model, prompt)
    row("ircore eager", tokens, seconds, stock)
    with CountRuns() as runs:
        generate(model, prompt, warm_up=False)
    print(f"      apply(model, mlp=True, rope=True): {'; '.join(str(summary).splitlines())}")
    print(f"      kernels that ran: {counts(runs)}")

    ircore.compile.reset_report()
    model.forward = torch.compile(model.forward, backend="ircore", dynamic=True)
    tokens, seconds = generate(model, prompt, warm_up=False)
    row('backend="ircore", 1st call', tokens, seconds, stock, "(compiles)")
    tokens, seconds = generate(model, prompt)
    row('backend="ircore"', tokens, seconds, stock)
    report = ircore.compile.report()
    lowered = {f"{op} -> {p}": n for op, c in report.lowered.items() for p, n in c.items()}
    print(f"      fused {report.fusions['add_rms_norm']} add+norm pairs into fused_add_rms_norm "
          f"(2 per layer: {layers} layers, the final norm included)")
    if report.fusions.get("hf_qk_norm_rope"):
        n = report.fusions["hf_qk_norm_rope"]
        print(f"      fused {n} QK-norm + RoPE blocks into fused_qk_norm_rope (1 per layer)")
    print(f"      lowered: {counts(lowered)}; ircore nodes left: {report.left}")

    del model.forward  # the compiled wrapper; then the model's own modules again
    undo(model)
    tokens, seconds = generate(model, prompt)
    row("undo(model): stock again", tokens, seconds, stock)


def fp8_reference_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """FP8Linear by hand: activations quantized per token and group of 128 (scale amax / 448),
    weight tiles times their scales, an fp32 matmul."""
    bn, bk = self.block_size
    x2 = x.reshape(-1, x.shape[-1]).float()
    g = x2.reshape(x2.shape[0], -1, bk)  # the inputs' widths are multiples of 128 here
    scale = (g.abs().amax(-1, keepdim=True) / 448).clamp(min=1 / (448 * 512))
    xq = ((g / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale).reshape(x2.shape)
    n, k = self.weight.shape
    tiles = self.weight_scale_inv.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    w = self.weight.float() * tiles
    return (xq @ w.t()).to(x.dtype).reshape(*x.shape[:-1], -1)


def show_fp8() -> None:
    size = dict(SIZE, hidden_size=128, intermediate_size=256)
    config = transformers.LlamaConfig(**size)
    print(f"\n=== FP8 Llama: {config.num_hidden_layers} layers, hidden 128, FP8Linear with 128x128 blocks "
          "(fp8_model: random weights, quantized as transformers stores them)")
    torch.manual_seed(0)
    ours = fp8_model(transformers.LlamaForCausalLM(config).eval())
    torch.manual_seed(0)
    reference = fp8_model(transformers.LlamaForCausalLM(config).eval())
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, config.vocab_size, (1, PROMPT_TOKENS), generator=gen)
    try:
        with torch.no_grad():
            ours(prompt)
        print("  stock transformers: ran")
    except ImportError as exc:
        print(f"  stock transformers: {type(exc).__name__}: {str(exc).splitlines()[0][:90]}...")
    for module in reference.modules():
        if type(module).__name__ == "FP8Linear":
            module.forward = fp8_reference_forward.__get__(module)
    want, seconds = generate(reference, prompt)
    row("pure-torch reference", want, seconds, None)
    summary = apply(ours)
    with CountRuns() as runs:
        got, seconds = generate(ours, prompt)
    row("ircore eager: apply(model)", got, seconds, want)
    print(f"      apply(model): {'; '.join(str(summary).splitlines())}")
    print(f"      kernels that ran: {counts(runs)}")


def main() -> None:
    start = time.perf_counter()
    print(f"ircore {ircore.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
    from ircore.providers._manager import MANAGER

    # Each compile runs ircore's pass, so that the report below has something to say (a graph
    # served from Inductor's FX graph cache runs no pass); compiled kernels are still cached.
    torch._inductor.config.fx_graph_cache = False
    MANAGER.ensure_loaded()
    for name, record in sorted(MANAGER.records.items()):
        print(f"provider {name}: {record.state.value}: {record.reason}")
    for name in MODELS:
        show_model(name)
    show_fp8()
    print(f"\ndone in {time.perf_counter() - start:.0f} s. Next: README.md (ops, priorities, "
          "compiling, the transformers integration, writing a provider).")


if __name__ == "__main__":
    main()
