"""Calls as users write them; ``mypy`` (run by ``make test``) checks the types they come out with."""

import torch
from typing_extensions import assert_type

import ircore

x = torch.randn(16, 4096)
w = torch.ones(4096)

assert_type(ircore.ops.rms_norm(x, w, 1e-6), torch.Tensor)
assert_type(ircore.ops.rms_norm(x, None, 1e-6, variance_size=96), torch.Tensor)
assert_type(ircore.ops.fused_add_rms_norm(x, x, w, 1e-6), tuple[torch.Tensor, torch.Tensor])
assert_type(ircore.ops.fused_add_rms_norm.maybe_inplace(x, x, w, 1e-6), tuple[torch.Tensor, torch.Tensor])
assert_type(ircore.ops.silu_and_mul(x), torch.Tensor)
assert_type(ircore.explain("rms_norm", x, w, 1e-6), ircore.Explanation)


@ircore.register_op
def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


assert_type(scale(x, 2.0), torch.Tensor)
scale(x, "two")  # type: ignore[arg-type]  # mypy must refuse a str where the native takes a float
