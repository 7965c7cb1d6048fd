"""transformers' FP8 models (FineGrainedFP8Config, block-128 weights) through ircore, offline.

Tiny Llama and Qwen3 from configs, random weights quantized by ``fp8_model``: transformers' own
forward needs a Hub kernel (raises offline); ``apply`` routes every FP8Linear to ircore's quant
and block matmul ops, and greedy tokens equal those of an independent pure-torch reference of the
same quantized weights (per-token-group activation quant, dequantized fp32 matmul).
"""

from __future__ import annotations

import types

import pytest
import torch

pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from ircore.integrations.transformers import apply, fp8_model, undo

SMALL = dict(
    vocab_size=256,
    hidden_size=256,
    intermediate_size=384,  # K = 384 for down_proj: 3 blocks of 128
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=64,
)


def _reference_forward(self, x: torch.Tensor) -> torch.Tensor:
    """FP8Linear by hand: activations quantized per token and 128 columns (scale amax / 448,
    floored at 1 / (448 * 512)), weight tiles times their scales, an fp32 matmul."""
    bn, bk = self.block_size
    x2 = x.reshape(-1, x.shape[-1]).float()
    m, k = x2.shape
    groups = -(-k // bk)
    padded = torch.zeros(m, groups * bk)
    padded[:, :k] = x2
    g = padded.reshape(m, groups, bk)
    scale = (g.abs().amax(-1, keepdim=True) / 448).clamp(min=1 / (448 * 512))
    xq = ((g / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale).reshape(m, -1)[:, :k]
    n = self.weight.shape[0]
    s = self.weight_scale_inv.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]
    out = xq @ (self.weight.float() * s).t()
    if self.bias is not None:
        out = out + self.bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], n)


def _model(cls, config_cls):
    torch.manual_seed(0)
    model = cls(config_cls(**SMALL)).eval()
    return fp8_model(model)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def models(request):
    cls, config_cls = {"llama": (LlamaForCausalLM, LlamaConfig), "qwen3": (Qwen3ForCausalLM, Qwen3Config)}[
        request.param
    ]
    return _model(cls, config_cls), _model(cls, config_cls)


@pytest.mark.slow
def test_greedy_tokens_equal_the_reference_of_the_same_quantized_weights(models):
    ours, reference = models
    summary = apply(ours)
    assert len(summary.fp8_linear) == 14  # 7 projections per layer, lm_head kept dense
    assert "FP8Linear -> ircore.ops.dynamic_group_quant_fp8 + block_scaled_mm_fp8" in str(summary)
    assert not summary.own_forward  # the norms' dtype is the model's (fp8 weights left out of it)
    for module in reference.modules():
        if type(module).__name__ == "FP8Linear":
            module.forward = types.MethodType(_reference_forward, module)
    ids = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = ours.generate(ids, max_new_tokens=6, do_sample=False)
        want = reference.generate(ids, max_new_tokens=6, do_sample=False)
        torch.testing.assert_close(ours(ids).logits, reference(ids).logits, atol=1e-4, rtol=1e-4)
    assert torch.equal(got, want)


def test_undo_gives_back_transformers_forward_which_needs_the_hub():
    model = _model(LlamaForCausalLM, LlamaConfig)
    ids = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ImportError, match="finegrained-fp8 kernel unavailable"):
        with torch.no_grad():
            model(ids)
    assert len(apply(model, rms_norm=False).fp8_linear) == 14
    with torch.no_grad():
        model(ids)  # ours: no Hub kernel needed
    assert undo(model) == 14
    with pytest.raises(ImportError, match="finegrained-fp8 kernel unavailable"):
        with torch.no_grad():
            model(ids)


def _fp8_linear(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return fp8_model(torch.nn.Sequential(torch.nn.Linear(384, 130)))  # ragged N tile, a bias


def test_the_routed_forward_takes_2d_inputs_as_they_are_and_every_new_weight():
    """fp8_linear_forward skips its reshapes for a 2-D input (host cost), and keeps nothing of the
    module between calls: new weights by copy_, load_state_dict or a new Parameter count at once
    (issue 28: no path computes with stale weights)."""
    model = _fp8_linear(0)
    assert len(apply(model).fp8_linear) == 1
    linear = model[0]
    x = torch.randn(2, 3, 384, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = _reference_forward(linear, x)
        torch.testing.assert_close(model(x), want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(model(x.reshape(6, 384)), want.reshape(6, 130), atol=1e-4, rtol=1e-4)
        other = _fp8_linear(2)[0]
        linear.weight.copy_(other.weight)
        linear.weight_scale_inv.copy_(other.weight_scale_inv)
        linear.bias.copy_(other.bias)
        torch.testing.assert_close(model(x), _reference_forward(other, x), atol=1e-4, rtol=1e-4)
        third = _fp8_linear(3)
        model.load_state_dict(third.state_dict())
        torch.testing.assert_close(model(x), _reference_forward(third[0], x), atol=1e-4, rtol=1e-4)
        fourth = _fp8_linear(4)[0]
        linear.weight, linear.weight_scale_inv = fourth.weight, fourth.weight_scale_inv
        linear.bias = fourth.bias
        torch.testing.assert_close(model(x[0]), _reference_forward(fourth, x[0]), atol=1e-4, rtol=1e-4)


def test_the_routed_forward_reads_tensors_kept_outside_parameters_too():
    """The forward reads weight, scales and bias from ``_parameters`` where all three are there,
    else by attribute: a scale kept as a buffer, a plain object, give the same result."""
    from ircore.integrations._fp8 import fp8_linear_forward

    linear = _fp8_linear(5)[0]
    x = torch.randn(4, 384, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = fp8_linear_forward(linear, x)
        torch.testing.assert_close(want, _reference_forward(linear, x), atol=1e-4, rtol=1e-4)
        names = ("weight", "weight_scale_inv", "bias")
        plain = types.SimpleNamespace(**{n: getattr(linear, n) for n in names})
        plain.block_size = linear.block_size
        torch.testing.assert_close(fp8_linear_forward(plain, x), want, atol=0, rtol=0)
        scale = linear.weight_scale_inv.detach().clone()
        del linear.weight_scale_inv
        linear.register_buffer("weight_scale_inv", scale)
        torch.testing.assert_close(fp8_linear_forward(linear, x), want, atol=0, rtol=0)


def test_fp8_linears_ircore_cannot_stand_for_are_left_alone_with_the_reason():
    from transformers.integrations.finegrained_fp8 import FP8Linear

    model = torch.nn.Sequential()
    model.add_module("on_meta", FP8Linear(256, 128, block_size=(128, 128)).to("meta"))
    per_tensor = FP8Linear(256, 128, block_size=None)
    model.add_module("per_tensor", per_tensor)
    static = FP8Linear(256, 128, block_size=(128, 128), activation_scheme="static")
    static.weight_scale_inv.data = torch.ones(1, 2)
    model.add_module("static", static)
    summary = apply(model)
    assert summary.fp8_linear == []
    assert "meta device" in summary.left_alone["on_meta"]
    assert "per-tensor weight scale" in summary.left_alone["per_tensor"]
    assert "activation_scheme 'static'" in summary.left_alone["static"]
    assert apply(model, fp8=False).left_alone == {}  # fp8=False: FP8 linears are not looked at


def test_an_fp8_moes_experts_are_refused_by_fp8_model_and_left_alone_by_apply():
    # transformers makes an MoE's experts FP8Experts; ircore routes dense FP8Linear layers only
    from transformers import FineGrainedFP8Config, Qwen3MoeConfig, Qwen3MoeForCausalLM
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    config = Qwen3MoeConfig(**{**SMALL, "num_hidden_layers": 1}, moe_intermediate_size=128, num_experts=4,
                            num_experts_per_tok=2)  # fmt: skip
    with pytest.raises(ValueError, match=r"1 module\(s\) of kind FP8Experts \(first: 'model.layers.0.mlp.experts'\)"):
        fp8_model(Qwen3MoeForCausalLM(config).eval())
    # the way the message gives: the experts stay bf16 (routed by mlp=True), the linears FP8
    model = fp8_model(Qwen3MoeForCausalLM(config).eval(), modules_to_not_convert=("lm_head", "experts"))
    summary = apply(model, mlp=True)
    assert len(summary.fp8_linear) == 4 and summary.experts == ["model.layers.0.mlp.experts"]
    with torch.no_grad():
        assert model(torch.randint(0, 256, (1, 5))).logits.isfinite().all()
    undo(model)
    stock = Qwen3MoeForCausalLM(config).eval()
    only = ["lm_head"]
    replace_with_fp8_linear(stock, modules_to_not_convert=only,
                            quantization_config=FineGrainedFP8Config(modules_to_not_convert=only))  # fmt: skip
    for mlp in (False, True):  # listed with its reason whether or not MLPs are routed
        summary = apply(stock, mlp=mlp)
        assert summary.experts == []
        assert summary.left_alone["model.layers.0.mlp.experts"].startswith("FP8 MoE experts (FP8Experts)")
        undo(stock)


@pytest.mark.slow
def test_under_the_ircore_backend_each_norm_and_its_projections_quant_fuse():
    """One norm, read by q/k/v (or gate/up), each quantizing it: one fused norm + group quant."""
    import ircore
    from ircore.testing import compiled_code

    config = LlamaConfig(**{**SMALL, "num_hidden_layers": 1})
    torch.manual_seed(0)
    model = fp8_model(LlamaForCausalLM(config).eval())
    apply(model)
    ids = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(2))
    ircore.compile.reset_report()
    with torch.no_grad():
        want = model(ids).logits
        out, _ = compiled_code(lambda i: model(i).logits, (ids,))
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    report = ircore.compile.report()
    assert report.fusions["rms_norm_quant"] == 2  # input_layernorm, post_attention_layernorm
    lowered = set(report.lowered)
    assert {"rms_norm_group_quant_fp8", "fused_add_rms_norm_group_quant_fp8", "block_scaled_mm_fp8"} <= lowered
