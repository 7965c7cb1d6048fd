"""Hugging Face models patched by ``ircore.integrations.transformers`` run on vllm_c's kernels.

Tiny Llama and Qwen3 from their configs (random weights, no download), eager: every RMSNorm
and every merged MLP calls vllm_c (counted from ircore's DEBUG log), logits stay within the ops'
tolerance of stock transformers. Needs this provider installed (entry point) and active.
"""

import logging
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
ircore = pytest.importorskip("ircore")
irt = pytest.importorskip("ircore.integrations.transformers")

from conftest import DEVICES  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=128)
MODELS = {
    "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig(**SMALL), 5),
    "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config(head_dim=16, **SMALL), 9),
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}


class Runs(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.runs = []

    def emit(self, record):
        op, _, provider = record.getMessage().partition(": running ")
        if provider:
            self.runs.append((op, provider))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("device", DEVICES)
def test_patched_model_runs_on_vllm_c(name, dtype, device):
    model_cls, config, norms = MODELS[name]
    torch.manual_seed(0)
    model = model_cls(config).eval().to(device, dtype)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.1)
    x = torch.randn(2, 64, device=device, dtype=dtype)
    ids = torch.randint(0, 128, (2, 12), device=device)
    with torch.no_grad():  # with grad on, calls with the model's parameters run native
        if ircore.explain("rms_norm", x, model.model.norm.weight, 1e-6).chosen != "vllm_c":
            pytest.skip("ircore-provider-vllm-c is not installed (no entry point), or not first here")
        stock = model(ids).logits.float()
        summary = irt.apply(model, mlp=True)
        assert len(summary.rms_norm) == norms and len(summary.mlp) == 2
        handler, logger = Runs(), logging.getLogger("ircore")
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            patched = model(ids).logits.float()
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
    torch.testing.assert_close(patched, stock, atol=TOL[dtype], rtol=TOL[dtype])
    assert sorted(handler.runs) == [("rms_norm", "vllm_c")] * norms + [("silu_and_mul", "vllm_c")] * 2
