"""A provider whose rms_norm is 1% off: the conformance tools must fail it and name each case.

1% is outside the fp32 (1e-5) and fp16 (2e-3) tolerances and inside bf16's (1.6e-2), so some
cases pass and some fail. Its predicate declines ``variance_size`` calls; silu_and_mul is exact.
"""

from typing import Optional

import torch

import ircore


def rms_norm(
    x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None
) -> torch.Tensor:
    exact = ircore.ops.rms_norm.native(x, weight, epsilon, variance_size)
    return (exact.float() * 1.01).to(x.dtype).contiguous()  # wrong by 1%, laid out as kernels return


def rms_norm_supports(x, weight, epsilon, variance_size):
    return variance_size is None


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return ircore.ops.silu_and_mul.native(x)


@ircore.hookimpl
def ircore_register(registrar):
    registrar.register("rms_norm", rms_norm, supports_args=rms_norm_supports)
    registrar.register("silu_and_mul", silu_and_mul)


@ircore.hookimpl
def ircore_default_priority(platform):
    return {"rms_norm": 50, "silu_and_mul": 50}
