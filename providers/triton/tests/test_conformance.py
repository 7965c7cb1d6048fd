"""Against the core's own op declarations: the provider's table is accepted by the core's
registrar, and the core's conformance kit passes on the provider's own functions under the
Triton interpreter (every sample the predicate accepts matches the op's fp64 reference within its
tolerance, and more).
"""

import pytest
from conftest import GPU
from ircore_triton.provider import IRCORE_IMPLEMENTATIONS

import ircore
from ircore.kit import Registrar

pytestmark = [pytest.mark.slow, pytest.mark.gpu]  # the whole kit: in the interpreter without a GPU

DEVICE = GPU or "cpu"


def _registered() -> dict:
    registrar = Registrar("triton")
    registrar.register_table(IRCORE_IMPLEMENTATIONS)  # validates every row as ircore does
    return {impl.op_name: (impl.fn, impl.supports_args, impl.inplace, impl.fake) for impl in registrar.impls}


IMPLS = _registered()


def test_conformance_kit() -> None:
    """The core's conformance kit on these functions (samples against the fp64 reference, inputs
    left unchanged, the in-place contract, calls needing grad running native, and the op compiled
    graphs hold for each, run on fake copies, against the kernel's outputs). Registered under
    a test name: ``triton`` itself is an installed provider's name, and unavailable without a GPU."""
    testing = pytest.importorskip("ircore.testing")
    for name, (fn, pred, inplace, fake) in IMPLS.items():
        ircore.get_op(name).register_impl("triton_under_test", fn, pred, inplace, fake=fake)
    try:
        report = testing.check_provider("triton_under_test", device=DEVICE, seeds=(0,))
    finally:
        for name in IMPLS:
            ircore.get_op(name).unregister_impl("triton_under_test")
    assert set(report.checked) == set(IMPLS) and all(n > 0 for n in report.checked.values()), str(report)
