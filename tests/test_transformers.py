"""Hugging Face transformers through ircore: patched models against stock, eager and compiled.

Tiny Llama and Qwen3 models built from configs (random weights, no download). Core tests run
with no provider, so the ops run ``native``; a counting implementation (first in priority)
shows which modules really call ircore, since fp32 results are bitwise those of stock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

import ircore  # noqa: E402
from ircore.integrations import transformers as irt  # noqa: E402
from ircore.ops import rms_norm, silu_and_mul  # noqa: E402

SMALL = dict(
    hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128
)
MODELS = {
    "llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig, {}),
    "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config, {"head_dim": 16}),
}
TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}  # the ops' own tolerances
SEEN: list[tuple[str, int]] = []  # (op, x.dim()) of every counted call


def counting_rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None = None
) -> torch.Tensor:
    SEEN.append(("rms_norm", x.dim()))
    return rms_norm.native(x, weight, epsilon, variance_size)


def counting_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    SEEN.append(("silu_and_mul", x.dim()))
    return silu_and_mul.native(x)


@pytest.fixture
def counting():
    """Every eager rms_norm / silu_and_mul call goes through a counting implementation."""
    rms_norm.register_impl("counting", counting_rms_norm)
    silu_and_mul.register_impl("counting", counting_silu_and_mul)
    ircore.set_priority(rms_norm=["counting"], silu_and_mul=["counting"])
    SEEN.clear()
    yield SEEN
    SEEN.clear()


def build(name, dtype=torch.float32, layers=2):
    """A model from its config with random weights; norm weights away from 1 so they matter."""
    model_cls, config_cls, extra = MODELS[name]
    torch.manual_seed(0)
    model = model_cls(config_cls(num_hidden_layers=layers, **SMALL, **extra)).eval().to(dtype)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.normal_(1.0, 0.1)
    return model


def logits(model, seed=1):
    ids = torch.randint(0, SMALL["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return model(ids).logits


def close(a, b, dtype):
    torch.testing.assert_close(a.float(), b.float(), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name, norms", [("llama", 5), ("qwen3", 9)])
def test_patched_logits_match_stock(name, norms, dtype, counting):
    model = build(name, dtype)
    stock = logits(model)
    assert counting == []
    summary = irt.apply(model)
    assert len(summary.rms_norm) == norms and summary.forms == {"llama": norms}
    assert summary.mlp == [] and summary.left_alone == {}
    close(logits(model), stock, dtype)
    assert [op for op, _ in counting] == ["rms_norm"] * norms  # every norm calls ircore, once
    if name == "qwen3":  # q_norm and k_norm see (batch, tokens, heads, head_dim) views
        assert sorted(dim for _, dim in counting) == [3] * 5 + [4] * 4
        assert {"model.layers.0.self_attn.q_norm", "model.layers.1.self_attn.k_norm"} <= set(summary.rms_norm)


@torch.no_grad()  # with grad on, a call with a Parameter weight runs native: no provider either way
def test_mixed_dtype_modules_keep_their_own_forward(counting):
    model = build("llama", torch.bfloat16)
    norm = model.model.layers[0].input_layernorm
    norm.float()  # fp32 weight, bf16 activations: Llama's form returns fp32 here, rms_norm bf16
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    stock = norm(x)
    assert irt.apply(model).forms == {"llama": 5}
    out = norm(x)
    assert stock.dtype == out.dtype == torch.float32
    assert torch.equal(out, stock)
    assert counting == []  # it did not reach ircore
    norm(x.float())  # same dtypes again: ircore
    assert counting == [("rms_norm", 3)]


def test_unknown_forms_and_replaced_forwards_are_left_alone():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    model = build("llama")
    model.model.layers[0].input_layernorm = GemmaRMSNorm(64)  # (1 + weight): another form
    hooked = model.model.layers[1].input_layernorm
    hooked.forward = lambda h: h  # e.g. an accelerate hook
    summary = irt.apply(model)
    assert len(summary.rms_norm) == 3
    assert summary.left_alone == {
        "model.layers.0.input_layernorm": "GemmaRMSNorm.forward is not a known RMSNorm form (kept as it is)",
        "model.layers.1.input_layernorm": "its forward was already replaced on the instance "
        "(by another library or a hook)",
    }
    assert irt.apply(model).left_alone["model.norm"] == "already applied"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_mlp_merges_gate_and_up_once(dtype, counting):
    model = build("qwen3", dtype)
    stock, state = logits(model), {k: v.clone() for k, v in model.state_dict().items()}
    summary = irt.apply(model, mlp=True)
    assert summary.mlp == ["model.layers.0.mlp", "model.layers.1.mlp"]
    close(logits(model), stock, dtype)
    assert [op for op, _ in counting].count("silu_and_mul") == 2
    mlp = model.model.layers[0].mlp
    merged = mlp.ircore_gate_up_weight
    assert merged.shape == (2 * 128, 64)
    # gate and up are views of the merged weight: no second copy of them
    assert mlp.gate_proj.weight.data_ptr() == merged.data_ptr()
    assert mlp.up_proj.weight.data_ptr() == merged[128:].data_ptr()
    assert model.state_dict().keys() == state.keys()  # merged weights are not saved
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


def test_save_pretrained_of_a_merged_model_saves_the_stock_weights(tmp_path):
    model = build("llama")
    stock = logits(model)
    irt.apply(model, mlp=True)
    model.save_pretrained(tmp_path)  # gate and up share one storage here
    reloaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(logits(reloaded), stock)


def test_mlp_with_another_activation_is_left_alone():
    model = build("llama")
    model.model.layers[0].mlp.act_fn = nn.GELU()
    summary = irt.apply(model, rms_norm=False, mlp=True)
    assert summary.rms_norm == [] and summary.mlp == ["model.layers.1.mlp"]
    assert summary.left_alone == {"model.layers.0.mlp": "LlamaMLP: the activation GELU is not SiLU"}


def test_undo_restores_the_stock_model(counting):
    model = build("llama", torch.bfloat16)
    stock, state = logits(model), {k: v.clone() for k, v in model.state_dict().items()}
    irt.apply(model, mlp=True)
    assert irt.undo(model) == 5 + 2
    assert not any("forward" in vars(m) for m in model.modules())
    assert not any(name.startswith("ircore") for name, _ in model.named_buffers(recurse=True))
    mlp = model.model.layers[0].mlp
    for weight in (mlp.gate_proj.weight, mlp.up_proj.weight):  # each has its own storage again
        assert weight.untyped_storage().nbytes() == weight.numel() * weight.element_size()
    counting.clear()
    assert torch.equal(logits(model), stock)  # bitwise: HF's own forwards again
    assert counting == []
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    assert irt.undo(model) == 0


def test_class_level_apply_before_building(counting):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    stock_model = build("llama")
    stock = logits(stock_model)
    original = LlamaRMSNorm.forward
    try:
        summary = irt.apply_to_classes("llama")
        assert summary.rms_norm == ["transformers.models.llama.modeling_llama.LlamaRMSNorm"]
        model = build("llama")  # built after: its norms are ircore's
        close(logits(model), stock, torch.float32)
        assert [op for op, _ in counting] == ["rms_norm"] * 5
        assert irt.apply(model).left_alone["model.norm"].endswith("already patched (apply_to_classes)")
    finally:
        assert irt.undo_classes() == 1
    assert LlamaRMSNorm.forward is original
    counting.clear()
    assert torch.equal(logits(model), stock)
    assert counting == []


def test_class_level_errors_name_the_target():
    with pytest.raises(ValueError, match=r"no module transformers\.models\.lama\.modeling_lama .*'llama', 'qwen3'"):
        irt.apply_to_classes("lama")
    with pytest.raises(TypeError, match="name at least one model type or class"):
        irt.apply_to_classes()
    with pytest.raises(TypeError, match=r"expected an nn\.Module, got str"):
        irt.apply("llama")


# ---------------------------------------------------------------------- the kernels package
def test_kernels_mapping_with_kernelize(monkeypatch, counting):
    """kernels' kernelize with ircore's mapping (a local repository object: no Hub access).

    transformers 5.23 accepts only kernels >= 0.18.2; with the 0.17.2 installed here its
    decorator is a no-op, so the test marks the class the way the decorator would.
    """
    kernels = pytest.importorskip("kernels")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    stock_model = build("llama")
    stock = logits(stock_model)
    if not hasattr(LlamaRMSNorm, "kernel_layer_name"):
        monkeypatch.setattr(LlamaRMSNorm, "kernel_layer_name", "RMSNorm", raising=False)
    model = build("llama")
    with kernels.use_kernel_mapping(irt.kernel_mapping(), inherit_mapping=False):
        kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cpu")
    close(logits(model), stock, torch.float32)
    assert [op for op, _ in counting] == ["rms_norm"] * 5
    assert irt.undo(model) == 5  # undo also takes back what kernelize put in place
    counting.clear()
    logits(model)
    assert counting == []


#: transformers 5.22.2, the newest that accepts the kernels 0.17.2 of the package index (5.23
#: wants >= 0.18.2); `make setup` installs it here, outside the venv's site-packages.
COMPAT = Path(sys.prefix) / "compat" / "transformers-5.22.2"
COMPAT_SCRIPT = r"""
import json, logging, torch, transformers, kernels
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.utils import is_kernels_available
from ircore.integrations.transformers import kernel_mapping

runs = []
class Count(logging.Handler):
    def emit(self, record):
        if ": running " in record.getMessage():
            runs.append(record.getMessage())
logging.getLogger("ircore").addHandler(Count())
logging.getLogger("ircore").setLevel(logging.DEBUG)
torch.manual_seed(0)
config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
model = transformers.LlamaForCausalLM(config).eval()
ids = torch.randint(0, 128, (1, 8))
with torch.no_grad():
    stock = model(ids).logits
    with kernels.use_kernel_mapping(kernel_mapping(), inherit_mapping=False):
        kernels.kernelize(model, mode=kernels.Mode.INFERENCE, device="cpu")
    runs.clear()
    out = model(ids).logits
print("RESULT" + json.dumps({
    "versions": [transformers.__version__, kernels.__version__],
    "kernels_available": is_kernels_available(),
    "layer_name": getattr(LlamaRMSNorm, "kernel_layer_name", None),
    "runs": runs,
    "max_diff": (out - stock).abs().max().item(),
}))
"""


@pytest.mark.slow
def test_kernels_mapping_where_transformers_accepts_the_installed_kernels():
    """transformers 5.22.2 + kernels 0.17.2: the decorator marks the classes, kernelize alone routes."""
    pytest.importorskip("kernels")
    if not (COMPAT / "transformers").is_dir():
        pytest.skip(f"{COMPAT} is missing: `make setup` installs transformers 5.22.2 there")
    env = dict(os.environ, PYTHONPATH=str(COMPAT), IRCORE_PROVIDERS="none", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", COMPAT_SCRIPT], env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT") :])
    assert result["versions"] == ["5.22.2", "0.17.2"]
    assert result["kernels_available"] and result["layer_name"] == "RMSNorm"
    assert result["runs"] == ["rms_norm: running native"] * 5
    assert result["max_diff"] <= 1e-5


# ---------------------------------------------------------------------- torch.compile
@pytest.mark.slow
def test_compiled_with_the_ircore_backend_fuses_every_add():
    """One compile (a few seconds on two cores): 2L add+norm pairs in an L-layer model."""
    from torch._inductor import config as inductor_config

    layers = 3
    model = build("llama", layers=layers)
    irt.apply(model, mlp=True)
    eager = logits(model)
    torch._dynamo.reset()
    ircore.compile.reset_report()
    try:
        with inductor_config.patch(fx_graph_cache=False):  # a cache hit would run no pass
            compiled = torch.compile(model, backend="ircore", fullgraph=True)
            close(logits(compiled), eager, torch.float32)
    finally:
        torch._dynamo.reset()
    report = ircore.compile.report()
    # L post-attention norms, L - 1 next-layer input norms and the final norm
    assert report.fusions["add_rms_norm"] == 2 * layers
    assert report.left == 0
    assert {op: dict(c) for op, c in report.lowered.items()} == {
        "rms_norm": {"native": 1},  # the first layer's input norm: no add before it
        "fused_add_rms_norm": {"native": 2 * layers},
        "silu_and_mul": {"native": layers},
    }
