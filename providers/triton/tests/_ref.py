"""fp64 references and tolerances shared by the tests."""

import os

import torch

import ircore
from ircore.testing import beyond_fp32_rows  # noqa: F401  (the tests import it from here)

TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, variance_size: int | None = None
) -> torch.Tensor:
    """The op's own fp64 reference (with its fp32-overflow rule)."""
    return ircore.ops.rms_norm.reference(x, weight, eps, variance_size)


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    a, b = x[..., :d].double(), x[..., d:].double()
    return a * torch.sigmoid(a) * b


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    assert actual.dtype == dtype
    # NaN only where the reference has NaN (an infinite input, for instance)
    torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol, equal_nan=True)


def assert_residual(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """The residual output is x + x_residual rounded to the dtype: bit-exact.

    Except bf16 under Triton's interpreter, whose fp32->bf16 cast truncates instead of rounding
    to nearest (GPUs round): there it may be 1 ulp (2**-7 relative) off.
    """
    assert actual.dtype == expected.dtype
    if actual.dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        torch.testing.assert_close(actual.double(), expected.double(), atol=0.0, rtol=2.0**-7)
    else:
        assert torch.equal(actual, expected)
