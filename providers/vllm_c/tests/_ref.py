"""fp64 references with the ops' semantics, and the tolerances they are compared at."""

import torch

TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


FP32_MAX = torch.finfo(torch.float32).max


def rms_norm(x, weight, eps, variance_size=None):
    """The op sums squares in fp32: a row whose sum passes fp32's largest value has 1/rms = 0."""
    xd = x.double()
    xv = xd if variance_size is None else xd[..., :variance_size]
    sum_sq = xv.pow(2).sum(dim=-1, keepdim=True)
    inv_rms = torch.rsqrt(sum_sq / xv.shape[-1] + eps).masked_fill(sum_sq > FP32_MAX, 0.0)
    out = xd * inv_rms
    return out if weight is None else out * weight.double()


def beyond_fp32_rows(hidden, dtype, device):
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


def residual(x, r):
    """x + r added in fp32 and rounded once to x's dtype (what the kernels store)."""
    return (x.float() + r.float()).to(x.dtype)


def fused_add_rms_norm(x, r, weight, eps, variance_size=None):
    res = residual(x, r)
    return rms_norm(res, weight, eps, variance_size), res


def silu_and_mul(x):
    d = x.shape[-1] // 2
    a, b = x.double()[..., :d], x.double()[..., d:]
    return a * torch.sigmoid(a) * b


def assert_close(got, expected, dtype):
    atol, rtol = TOL[dtype]
    assert got.dtype == dtype
    assert got.shape == expected.shape
    # NaN only where the reference has NaN (an infinite input, for instance)
    torch.testing.assert_close(
        got.double().cpu(), expected.double().cpu(), atol=atol, rtol=rtol, equal_nan=True
    )
