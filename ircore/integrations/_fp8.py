"""transformers' FP8 linears (``FineGrainedFP8Config``: DeepSeek-V3 / Qwen3-FP8 checkpoints) through
ircore, and random-weight FP8 models for tests and benchmarks.

transformers 5.x loads the matmul of its ``FP8Linear`` from the Hub (DeepGEMM or the
``kernels-community/finegrained-fp8`` Triton kernel), so offline it raises. The forward here
quantizes the activations per token and group of ``block_size[1]`` columns
(``ircore.ops.dynamic_group_quant_fp8``) and multiplies with the block-scaled weight
(``ircore.ops.block_scaled_mm_fp8``): any provider's kernels, native on the CPU, no download.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ircore.integrations._forwards import _MARK
from ircore.ops import block_scaled_mm_fp8, dynamic_group_quant_fp8
from ircore.ops._checks import FLOAT_DTYPES
from ircore.ops._scaled_mm import FP8_DTYPES, quantize_blocks


def is_fp8_linear(module: nn.Module) -> bool:
    """transformers' ``FP8Linear`` (by class name, as the other module kinds are found)."""
    return type(module).__name__ == "FP8Linear"


def is_fp8_experts(module: nn.Module) -> bool:
    """transformers' ``FP8Experts``: an FP8 MoE's fused experts, which ircore does not route."""
    return type(module).__name__ == "FP8Experts"


#: why an FP8 MoE's experts keep transformers' forward (``apply``'s ``summary.left_alone``)
FP8_EXPERTS_LEFT = (
    "FP8 MoE experts (FP8Experts): ircore routes dense FP8Linear layers only; these keep "
    "transformers' forward, which needs the Hub's finegrained-fp8 kernel"
)


def fp8_linear_problem(module: nn.Module) -> str | None:
    """Why ircore cannot stand for this ``FP8Linear``, or None."""
    weight = getattr(module, "weight", None)
    scale = getattr(module, "weight_scale_inv", None)
    block = getattr(module, "block_size", None)
    if not isinstance(weight, torch.Tensor) or weight.dtype not in FP8_DTYPES:
        kind = "missing" if weight is None else f"{weight.dtype}"
        return f"its weight is {kind}, not fp8 (FP4-packed or dequantized weights run stock)"
    if weight.device.type == "meta":
        return "its weight is on the meta device (not loaded yet): apply after loading"
    if block is None:
        return "per-tensor weight scale (block_size None): only block-wise FP8 is routed"
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        kind = "missing" if scale is None else f"{scale.dtype}"
        return f"weight_scale_inv is {kind}; only float32 block scales are routed (not ue8m0)"
    if getattr(module, "activation_scheme", "dynamic") != "dynamic":
        scheme = module.activation_scheme
        return f"activation_scheme {scheme!r}: only dynamic activation quantization is routed"
    return None


def _tensors(module: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(weight, weight_scale_inv, bias)`` as they are now: from the module's ``_parameters``
    where all three are registered there (0.2 us on the CPU box, against 0.6 us for each
    ``module.weight``, which reaches them through ``nn.Module.__getattr__`` after the normal
    lookup fails), else by attribute (a buffer, a plain attribute, no ``nn.Module``)."""
    try:
        params = module.__dict__["_parameters"]
        return params["weight"], params["weight_scale_inv"], params["bias"]
    except (KeyError, TypeError):
        return module.weight, module.weight_scale_inv, module.bias


def fp8_linear_forward(self: Any, input: torch.Tensor) -> torch.Tensor:
    """``FP8Linear.forward`` by ircore's ops: per-token-group fp8 activations (groups of the weight's
    block width), the block-scaled matmul in the input's dtype, then the bias.

    Eager decode runs this once per projection and is host-bound, so it does only what it must
    per call: a 2-D input is neither reshaped nor its output reshaped back (each a torch op,
    ~1-1.7 us on the CPU box) and the tensors are read as :func:`_tensors` does. Nothing of the
    module is cached here: every call reads its weight, scales and block size as they are now
    (issue 28)."""
    if input.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"ircore's FP8 linear takes float32, float16 or bfloat16 activations, got {input.dtype}; "
            "run ircore.integrations.transformers.undo(model) to use transformers' own forward"
        )
    weight, weight_scale_inv, bias = _tensors(self)
    block_n, block_k = self.block_size
    flat = input.dim() == 2
    x = input if flat else input.reshape(-1, input.shape[-1])
    # column-major scales: the layout cuBLASLt's blockwise matmul takes as it is (row-major ones
    # cost vllm_c a transposing copy per call, 1-2 us: 1.04-1.11x of torch._scaled_mm on the H200)
    q, scale = dynamic_group_quant_fp8(x, [1, block_k], True, False, weight.dtype)
    out = block_scaled_mm_fp8(q, weight, scale, weight_scale_inv, [block_n, block_k], input.dtype)
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out if flat else out.reshape(*input.shape[:-1], out.shape[-1])


setattr(fp8_linear_forward, _MARK, "fp8_linear")


def fp8_model(
    model: nn.Module,
    *,
    block_size: tuple[int, int] = (128, 128),
    modules_to_not_convert: tuple[str, ...] = ("lm_head",),
) -> nn.Module:
    """Turn ``model``'s linears into transformers' ``FP8Linear`` modules holding its own weights,
    block-quantized (e4m3fn, float32 ``weight_scale_inv``, as ``Fp8Quantize`` stores them): an FP8
    model for tests and benchmarks with no checkpoint and no Hub download.

    ``model`` is any model built from a config (``LlamaForCausalLM(config)``, random weights) on
    the device and dtype it should run in; modules whose name contains an entry of
    ``modules_to_not_convert`` stay as they are. transformers' ``replace_with_fp8_linear`` makes
    the modules on the meta device; they are materialised here, on each weight's device.
    """
    from transformers import FineGrainedFP8Config
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    dense = {
        name: (module.weight.detach(), None if module.bias is None else module.bias.detach())
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not any(skip in name for skip in modules_to_not_convert)
    }
    skip = list(modules_to_not_convert)
    block = (block_size[0], block_size[1])
    config = FineGrainedFP8Config(weight_block_size=block, modules_to_not_convert=skip)
    replace_with_fp8_linear(model, modules_to_not_convert=skip, quantization_config=config)
    for name, (weight, bias) in dense.items():
        module = model.get_submodule(name)
        if not is_fp8_linear(module):
            continue
        q, scale = quantize_blocks(weight, block_size)
        module.weight = nn.Parameter(q, requires_grad=False)
        module.weight_scale_inv = nn.Parameter(scale, requires_grad=False)
        if bias is not None:
            module.bias = nn.Parameter(bias.clone(), requires_grad=False)
    # what transformers made that is not a dense linear (an MoE's FP8Experts) stays on the meta
    # device, unfilled: a model that cannot run, so refuse it here rather than at its forward
    empty = sorted({n.rsplit(".", 1)[0] for n, t in model.named_parameters() if t.device.type == "meta"})
    if empty:
        kinds = sorted({type(model.get_submodule(n)).__name__ for n in empty})
        raise ValueError(
            f"fp8_model: {len(empty)} module(s) of kind {', '.join(kinds)} (first: {empty[0]!r}) were "
            "made FP8 by transformers but only dense linears are filled here; keep an MoE's experts "
            "in the model's dtype with modules_to_not_convert=('lm_head', 'experts')"
        )
    return model
