"""benchmarks/kernels_gpu.py's --unfused-ab column without a GPU: a fused norm/activation + quant
op as one provider's two kernels (norm, then quant) must give the fused op's result; vllm_c's CPU
kernels stand in for the GPU column's triton ones (the same composition code)."""

from __future__ import annotations

import sys
from pathlib import Path

import ircore

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import kernels_gpu as kg


def _quant_tensors(op: str, t: int = 5, h: int = 256) -> tuple:
    import torch

    g = torch.Generator().manual_seed(len(op))
    make = {
        "x": lambda: torch.randn(t, h, generator=g).to(torch.bfloat16),
        "r": lambda: torch.randn(t, h, generator=g).to(torch.bfloat16),
        "w": lambda: (1 + 0.1 * torch.randn(h, generator=g)).to(torch.bfloat16),
        "scale": lambda: torch.full((1,), 0.02),
        "x2": lambda: torch.randn(t, 2 * h, generator=g).to(torch.bfloat16),
    }
    return tuple(make[name]() for name in kg.QUANT_SPEC[op][1] if name != "eps")


def test_the_unfused_column_is_the_fused_ops_composition_of_one_providers_kernels():
    """Each fused op's outputs, within the op's own tolerance (the conformance kit's comparison)."""
    ircore.get_priority("rms_norm")  # loads the providers
    for op in kg.UNFUSED_PARTS:
        tensors = _quant_tensors(op)
        outs = kg.unfused_fn("vllm_c", op)(*[x.clone() for x in tensors])
        fused = ircore.get_op(kg.QUANT_SPEC[op][0]).native(*kg.quant_args(op, tensors))
        assert len(outs) == (len(fused) if isinstance(fused, tuple) else 1), op
        assert kg.quant_problem(op, tensors, outs) is None, op
