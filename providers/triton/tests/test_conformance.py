"""Against the core's own op declarations (when ``ircore`` is importable): registration is
accepted, and the core's conformance kit passes on the provider's own functions (every sample
the predicate accepts matches the op's fp64 reference within its tolerance, and more).
"""

import pytest
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


def test_conformance_kit() -> None:
    """The core's conformance kit on these functions (samples against the fp64 reference, inputs
    left unchanged, the in-place contract, calls needing grad running native). Registered under
    a test name: ``triton`` itself is an installed provider's name, and unavailable without a GPU."""
    testing = pytest.importorskip("ircore.testing")
    for name, (fn, pred, inplace) in IMPLS.items():
        ircore.get_op(name).register_impl("triton_under_test", fn, pred, inplace)
    try:
        report = testing.check_provider("triton_under_test", device=DEVICE, seeds=(0,))
    finally:
        for name in IMPLS:
            ircore.get_op(name).unregister_impl("triton_under_test")
    assert set(report.checked) == set(IMPLS) and all(n > 0 for n in report.checked.values()), str(report)
