"""End to end: does a Llama-shaped model give one prompt the same logits alone and in a batch?

The issue's device check for batch-invariant mode: a ``LlamaForCausalLM`` built from a config
(random weights, bf16; Llama-3-8B's shapes with ``--layers`` layers, 4 by default), its norms and
MLPs routed to ircore (``apply(model, mlp=True)``), run inside
``ircore.batch_invariant(matmul=True)``. One prompt is run alone (batch 1) and as row ``--row`` of
a batch of 8 prompts of the same length (so no padding enters), at prefill and for
``--steps`` greedy decode steps with transformers' KV cache; the logits of that prompt must be
bitwise equal at every step. Without the mode (``--off``) the same run is the contrast: it
must differ somewhere, or the check above could not have failed on this machine.

Prints, per step, whether the logits are equal and the max |difference|; exits 1 on any
difference with the mode on, and with ``--off`` when nothing differs. Attention (SDPA) is not covered by the mode (docs/batch-invariance.md): where a step
differs with the mode on, it is the first suspect; note it in benchmarks/README.md.

    python benchmarks/e2e_batch_invariant.py --device cuda             # the check (H200)
    python benchmarks/e2e_batch_invariant.py --device cuda --off       # the same, mode off
    python benchmarks/e2e_batch_invariant.py --device cpu --tiny       # smoke run (no matmul layer)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import torch


def build(args: argparse.Namespace) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    if args.tiny:
        cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                          num_hidden_layers=2, vocab_size=1000)  # fmt: skip
    else:
        cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                          num_hidden_layers=args.layers, vocab_size=128256, rope_theta=500000.0)  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    model = LlamaForCausalLM(cfg).to(device=args.device, dtype=dtype).eval()
    from ircore.integrations.transformers import apply

    apply(model, mlp=True)
    return model


def greedy(model: Any, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Logits (float32) of every row at prefill's last position and at each decode step."""
    out = model(input_ids=ids, use_cache=True)
    logits = [out.logits[:, -1].float()]
    past = out.past_key_values
    for _ in range(steps):
        nxt = logits[-1].argmax(-1, keepdim=True)
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits.append(out.logits[:, -1].float())
    return logits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--prompt", type=int, default=64, help="prompt length")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--row", type=int, default=3, help="where the prompt sits in the batch")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--off", action="store_true", help="without batch-invariant mode")
    args = p.parse_args(argv)

    import ircore

    model = build(args)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    batch = torch.randint(0, vocab, (args.batch, args.prompt), generator=gen).to(args.device)
    alone = batch[args.row : args.row + 1].clone()
    if args.off:
        mode: Any = contextlib.nullcontext()
    else:
        mode = ircore.batch_invariant(matmul=args.device.startswith("cuda"))
    with torch.inference_mode(), mode:
        one = greedy(model, alone, args.steps)
        many = greedy(model, batch, args.steps)
    bad = 0
    for step, (a, b) in enumerate(zip(one, many)):
        row = b[args.row : args.row + 1]
        equal = torch.equal(a, row)
        bad += not equal
        what = "prefill" if step == 0 else f"decode {step}"
        print(f"{what:10} {'equal' if equal else 'DIFFERS'}  max |diff| {(a - row).abs().max().item():.3g}")
    print(f"mode {'off' if args.off else 'on'}: {len(one) - bad} of {len(one)} steps bitwise equal")
    if args.off:
        if not bad:
            print("mode off and still equal everywhere: on this machine the check proves nothing")
        return 0 if bad else 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
