"""Against the core's own op declarations (when ``ircore`` is importable): registration is
accepted, and every sample the predicate accepts matches the op's reference within its
tolerance: what the core's conformance kit checks, run on the provider's own functions.
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


@pytest.mark.parametrize("name", sorted(IMPLS))
def test_a_call_that_needs_grad_runs_native(name: str) -> None:
    """ircore's rule for every provider: with grad mode on and an input that requires grad, the
    call runs native (the one implementation with autograd); without, the provider's kernel.
    Registered under a test name: ``triton`` itself is an installed provider's name."""
    op = ircore.get_op(name)
    fn, pred, inplace = IMPLS[name]
    op.register_impl("triton_under_test", fn, pred, inplace)
    try:
        args = op.make_inputs((4, 64), torch.float32, DEVICE)
        with ircore.priority(**{name: ["triton_under_test"]}):
            assert ircore.explain(op, *args).chosen == "triton_under_test"
            args[0].requires_grad_()
            explanation = ircore.explain(op, *args)
            assert explanation.chosen == "native"
            assert explanation.steps[0].reason.startswith("an argument requires grad and grad mode is on")
            out = op(*args)
            (out[0] if isinstance(out, tuple) else out).sum().backward()
            assert args[0].grad is not None and torch.isfinite(args[0].grad).all()
            with torch.no_grad():
                assert ircore.explain(op, *args).chosen == "triton_under_test"
    finally:
        op.unregister_impl("triton_under_test")
