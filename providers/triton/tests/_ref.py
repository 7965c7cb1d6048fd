"""fp64 references and tolerances shared by the tests."""

import os

import torch

TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


FP32_MAX = torch.finfo(torch.float32).max


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, variance_size: int | None = None
) -> torch.Tensor:
    """The op sums squares in fp32: a row whose sum passes fp32's largest value has 1/rms = 0."""
    xd = x.double()
    n = x.shape[-1] if variance_size is None else variance_size
    sum_sq = xd[..., :n].pow(2).sum(-1, keepdim=True)
    y = xd * torch.rsqrt(sum_sq / n + eps).masked_fill(sum_sq > FP32_MAX, 0.0)
    if weight is not None:
        y = y * weight.double()
    return y


def beyond_fp32_rows(hidden: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Rows by magnitude: elements past sqrt(fp32 max); a sum of squares past fp32 max from
    elements within it; large with a sum that fits (a quarter of the limit at most); ordinary;
    ordinary with one infinite element. Magnitudes in [0.5, 1) x the row's scale."""
    gen = torch.Generator().manual_seed(hidden)
    limit = (FP32_MAX / hidden) ** 0.5
    scale = torch.tensor([[1e20], [2.5 * limit], [0.5 * limit], [1.0], [1.0]], dtype=torch.float64)
    magnitude = torch.rand((5, hidden), generator=gen, dtype=torch.float64) * 0.5 + 0.5
    sign = torch.where(torch.rand((5, hidden), generator=gen) < 0.5, -1.0, 1.0).double()
    x = magnitude * sign * scale
    x[4, hidden // 2] = float("inf")
    return x.to(dtype).to(device)


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
