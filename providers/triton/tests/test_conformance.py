"""Against the core's own op declarations: the provider's table is accepted by the core's
registrar, and every sample each predicate accepts matches the op's reference within its
tolerance (the conformance kit's check, on this provider's kernels under the Triton interpreter).
"""

import pytest
import torch
from conftest import GPU
from ircore_triton.provider import IRCORE_IMPLEMENTATIONS

import ircore
from ircore.plugins.registrar import Registrar

DEVICE = GPU or "cpu"


def _registered() -> dict:
    registrar = Registrar("triton")
    registrar.register_table(IRCORE_IMPLEMENTATIONS)  # validates every row as ircore does
    return {impl.op_name: (impl.fn, impl.supports_args, impl.inplace) for impl in registrar.impls}


IMPLS = _registered()


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
