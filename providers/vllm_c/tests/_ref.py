"""fp64 references with the ops' semantics, and the tolerances they are compared at."""

import torch

TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def rms_norm(x, weight, eps, variance_size=None):
    xd = x.double()
    xv = xd if variance_size is None else xd[..., :variance_size]
    out = xd * torch.rsqrt(xv.pow(2).mean(dim=-1, keepdim=True) + eps)
    return out if weight is None else out * weight.double()


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
    torch.testing.assert_close(got.double().cpu(), expected.double().cpu(), atol=atol, rtol=rtol)
