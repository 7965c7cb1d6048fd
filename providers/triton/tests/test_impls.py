"""The registered functions: exact native signatures, and what the predicates accept."""

import inspect

import pytest
import torch
from conftest import GPU
from ircore_triton import impls
from torch import Tensor

DEVICE = GPU or "cpu"  # CPU counts as a Triton device only under the interpreter (tests)


# The native signatures, as the op library declares them.
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor: ...


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]: ...


def silu_and_mul(x: Tensor) -> Tensor: ...


@pytest.mark.parametrize(
    "native,impl,pred",
    [
        (rms_norm, impls.rms_norm, impls.rms_norm_supports),
        (fused_add_rms_norm, impls.fused_add_rms_norm, impls.fused_add_rms_norm_supports),
        (silu_and_mul, impls.silu_and_mul, impls.silu_and_mul_supports),
    ],
    ids=["rms_norm", "fused_add_rms_norm", "silu_and_mul"],
)
def test_signatures(native, impl, pred) -> None:
    assert inspect.signature(impl) == inspect.signature(native)
    assert inspect.signature(pred).parameters == inspect.signature(native).parameters
    assert inspect.signature(pred).return_annotation is bool


def _x(*shape: int, dtype: torch.dtype = torch.bfloat16, device: str = DEVICE) -> Tensor:
    return torch.zeros(*shape, dtype=dtype, device=device)


def test_rms_norm_supports() -> None:
    """What the kernels add to the core's check: device, weight dtype, unit last-dim stride."""
    x, w = _x(4, 64), _x(64)
    assert impls.rms_norm_supports(x, w, 1e-6)
    assert impls.rms_norm_supports(x, None, 1e-6, 64)
    assert impls.rms_norm_supports(_x(8, 80)[:, :64], w, 1e-6)  # row stride != hidden size
    assert impls.rms_norm_supports(_x(4, 64, dtype=torch.float32), _x(64, dtype=torch.float32), 1e-6)
    assert impls.rms_norm_supports(_x(4, 1)[:, :1], _x(1), 1e-6)
    assert not impls.rms_norm_supports(x, _x(64, dtype=torch.float32), 1e-6)  # weight dtype
    assert not impls.rms_norm_supports(_x(64, 4).t(), None, 1e-6)  # last-dim stride != 1
    assert not impls.rms_norm_supports(_x(4, 64, device="meta"), None, 1e-6)


def test_fused_add_rms_norm_supports() -> None:
    x, r, w = _x(4, 64), _x(4, 64), _x(64)
    assert impls.fused_add_rms_norm_supports(x, r, w, 1e-6)
    assert impls.fused_add_rms_norm_supports(x, r, None, 1e-6, 32)
    assert impls.fused_add_rms_norm_supports(_x(4, 80)[:, :64], _x(4, 96)[:, :64], w, 1e-6)
    assert not impls.fused_add_rms_norm_supports(x, _x(64, 4).t(), w, 1e-6)
    assert not impls.fused_add_rms_norm_supports(x, r, _x(64, dtype=torch.float32), 1e-6)


def test_silu_and_mul_supports() -> None:
    assert impls.silu_and_mul_supports(_x(4, 64))
    assert impls.silu_and_mul_supports(_x(2, 3, 64, dtype=torch.float16))
    assert impls.silu_and_mul_supports(_x(4, 96)[:, :64])
    assert not impls.silu_and_mul_supports(_x(64, 4).t())
    assert not impls.silu_and_mul_supports(_x(4, 64, device="meta"))


def test_bad_input_is_stopped_by_the_core_first() -> None:
    """What the predicates no longer check never reaches them: the core's check raises first."""
    ircore = pytest.importorskip("ircore")
    calls = []

    def probe(x, weight, epsilon, variance_size=None):
        calls.append(x)
        return impls.rms_norm_supports(x, weight, epsilon, variance_size)

    op = ircore.get_op("rms_norm")
    impl = op.validate_impl("triton_probe", impls.rms_norm, supports_args=probe)
    op.impls["triton_probe"] = impl
    ircore.dispatch.STATE.bump()
    try:
        with ircore.priority(rms_norm=["triton_probe"]):
            for bad in [
                (_x(4, 64, dtype=torch.float64), None, 1e-6),
                (_x(4, 64), _x(32), 1e-6),
                (_x(4, 64), None, 1e-6, 65),
                (_x(4, 0), None, 1e-6),
            ]:
                with pytest.raises(ircore.InvalidArgumentError):
                    op(*bad)
            assert calls == []
            op(_x(4, 64), _x(64), 1e-6)
            assert len(calls) == 1
    finally:
        del op.impls["triton_probe"]
        ircore.dispatch.STATE.bump()


@pytest.mark.skipif(GPU is None, reason="needs a GPU: on CPU, the interpreter makes CPU a Triton device")
def test_cpu_rejected_on_gpu_machines() -> None:
    assert not impls.rms_norm_supports(_x(4, 64, device="cpu"), None, 1e-6)
    assert not impls.silu_and_mul_supports(_x(4, 64, device="cpu"))


@pytest.mark.parametrize(
    "native,impl",
    [
        (rms_norm, impls.rms_norm),
        (fused_add_rms_norm, impls.fused_add_rms_norm),
        (silu_and_mul, impls.silu_and_mul),
    ],
    ids=["rms_norm", "fused_add_rms_norm", "silu_and_mul"],
)
def test_schema_matches_native(native, impl) -> None:
    """The core checks implementations by the torch schema their annotations imply."""
    infer = torch.library.infer_schema
    assert infer(impl, mutates_args=()) == infer(native, mutates_args=())
