"""rms_norm_gated and layer_norm kernels against the ops' fp64 references (tiny shapes: they run
in Triton's interpreter without a GPU), over what differs inside the kernels."""

import pytest
import torch
from conftest import GPU
from ircore_triton import impls

import ircore
from ircore.testing import assert_close_to_reference

DEVICE = GPU or "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(*shape: int, dtype: torch.dtype, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE) * scale + shift).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("round_normalized", [False, True])
@pytest.mark.parametrize("group_size", [None, 8, 24])  # the row, power-of-two groups, masked groups
def test_rms_norm_gated(group_size, round_normalized, norm_before_gate, dtype):
    x = _randn(3, 48, dtype=dtype)
    gate = _randn(3, 48, dtype=dtype, scale=2.0)
    w = _randn(48, dtype=dtype, scale=0.1, shift=1.0)
    args = (x, gate, w, 1e-6, group_size, norm_before_gate, round_normalized)
    assert impls.rms_norm_gated_supports(*args)
    out = impls.rms_norm_gated(*args)
    assert_close_to_reference(ircore.ops.rms_norm_gated, out, args)
    # the intermediate roundings as native's: within one unit of the last place of x's dtype (the
    # interpreter truncates the final cast to bf16)
    torch.testing.assert_close(out, ircore.ops.rms_norm_gated.native(*args), atol=1e-6, rtol=2**-7)


def test_rms_norm_gated_strided_rows_and_3d():
    x = _randn(2, 3, 80, dtype=torch.bfloat16)[..., :64]
    gate = _randn(2, 3, 64, dtype=torch.bfloat16)
    w = _randn(64, dtype=torch.bfloat16, shift=1.0)
    args = (x, gate, w, 1e-5, 16, False, True)
    assert_close_to_reference(ircore.ops.rms_norm_gated, impls.rms_norm_gated(*args), args)


def test_rms_norm_gated_declines_what_it_does_not_run():
    x = _randn(2, 16, dtype=torch.bfloat16)
    g = _randn(2, 16, dtype=torch.bfloat16)
    assert not impls.rms_norm_gated_supports(x, g, torch.ones(16), 1e-6)  # fp32 weight
    assert not impls.rms_norm_gated_supports(x.t().contiguous().t(), g, g[0], 1e-6)  # last-dim stride 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(affine, dtype):
    x = _randn(3, 40, dtype=dtype, shift=2.0)
    w = _randn(40, dtype=dtype, scale=0.1, shift=1.0) if affine in ("both", "weight") else None
    b = _randn(40, dtype=dtype, scale=0.1) if affine in ("both", "bias") else None
    args = (x, w, b, 1e-5)
    assert impls.layer_norm_supports(*args)
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(*args), args)


def test_layer_norm_strided_rows_and_empty():
    x = _randn(4, 100, dtype=torch.float16)[:, :64]
    w, b = _randn(64, dtype=torch.float16, shift=1.0), _randn(64, dtype=torch.float16)
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(x, w, b, 1e-5), (x, w, b, 1e-5))
    assert impls.layer_norm(x[:0], w, b, 1e-5).shape == (0, 64)
