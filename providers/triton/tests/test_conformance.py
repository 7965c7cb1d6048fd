"""Against the core's own op declarations (when ``ircore`` is importable): registration is
accepted, and every sample the predicate accepts matches the op's reference within its
tolerance. This is what the core's conformance kit checks, run here before that kit exists.
"""

import pytest
import torch
from conftest import GPU
from ircore_triton import impls

ircore = pytest.importorskip("ircore", reason="the ircore core package is not importable")
if not hasattr(ircore, "get_op"):
    pytest.skip("this ircore has no get_op", allow_module_level=True)

DEVICE = GPU or "cpu"
IMPLS = {
    "rms_norm": (impls.rms_norm, impls.rms_norm_supports, False),
    "fused_add_rms_norm": (impls.fused_add_rms_norm, impls.fused_add_rms_norm_supports, True),
    "silu_and_mul": (impls.silu_and_mul, impls.silu_and_mul_supports, False),
}


@pytest.mark.parametrize("name", sorted(IMPLS))
def test_core_accepts_registration(name: str) -> None:
    fn, pred, inplace = IMPLS[name]
    ircore.get_op(name).validate_impl("triton", fn, pred, inplace)


def _clone(args: tuple) -> tuple:
    return tuple(
        torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        if isinstance(a, torch.Tensor)
        else a
        for a in args
    )


def _check(name: str, got, expected, dtype: torch.dtype) -> None:
    tol = ircore.get_op(name).tolerances.get(dtype)
    atol, rtol = (tol.atol, tol.rtol) if tol is not None else (0.0, 0.0)
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g.double(), e.double(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(IMPLS))
def test_core_samples(name: str, dtype: torch.dtype) -> None:
    op = ircore.get_op(name)
    if op.sample_inputs is None:
        pytest.skip(f"{name} declares no sample inputs")
    fn, pred, _ = IMPLS[name]
    ran = 0
    for sample in op.sample_inputs(dtype, DEVICE):
        args = sample.args
        if not pred(*args):
            continue
        expected = op.native(*_clone(args))
        got = fn(*_clone(args))
        _check(name, got, expected, dtype)
        ran += 1
    assert ran > 0
