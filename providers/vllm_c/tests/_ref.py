"""fp64 references with the ops' semantics, and the tolerances they are compared at."""

import torch

import ircore
from ircore.testing import beyond_fp32_rows  # noqa: F401  (the tests import it from here)

TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def rms_norm(x, weight, eps, variance_size=None):
    """The op's own fp64 reference (with its fp32-overflow rule)."""
    return ircore.ops.rms_norm.reference(x, weight, eps, variance_size)


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
