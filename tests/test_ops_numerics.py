"""The op library: native semantics against fp64 references, and bad input errors."""

from __future__ import annotations

import pytest
import torch

import ircore
from ircore.errors import InvalidArgumentError
from ircore.testing import assert_close_to_reference

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# The norms, the activation and the matmuls; the fp8 quant ops have their own (fp8-aware) module,
# tests/test_quant_ops.py, with fewer but targeted samples.
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rms_norm_gated", "layer_norm")
OPS += ("scaled_mm_fp8", "block_scaled_mm_fp8")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("seed", [0, 1])
def test_native_matches_fp64_reference(op_name, dtype, seed):
    op = ircore.get_op(op_name)
    samples = list(op.sample_inputs(dtype, "cpu", seed=seed))
    assert len(samples) >= 6
    for sample in samples:
        out = op(*sample.args)
        assert_close_to_reference(op, out, sample.args, label=sample.label)


def test_samples_cover_the_promised_cases():
    labels = " ".join(s.label for s in ircore.ops.rms_norm.sample_inputs(torch.float16, "cpu"))
    for needle in ("weight=None", "variance_size", "non-contiguous", "transposed", "2x3x128"):
        assert needle in labels


def test_rms_norm_variance_size_scales_whole_row():
    x = torch.tensor([[3.0, 4.0, 100.0, -100.0]])
    out = ircore.ops.rms_norm(x, None, 0.0, 2)
    rms = (12.5) ** 0.5  # mean(9, 16) over the first two elements
    torch.testing.assert_close(out, x / rms)


def test_fused_residual_is_rounded_to_x_dtype():
    x = torch.tensor([[1.0, 2.0**-9, 3.0, 4.0]], dtype=torch.bfloat16)
    r = torch.tensor([[256.0, 256.0, 0.0, 0.0]], dtype=torch.bfloat16)
    out, residual = ircore.ops.fused_add_rms_norm(x, r, None, 1e-6)
    assert residual.dtype == torch.bfloat16
    assert residual[0, 1].item() == 256.0  # 256 + 2^-9 rounds back to 256 in bf16
    torch.testing.assert_close(out, ircore.ops.rms_norm(residual, None, 1e-6))


def test_silu_and_mul_halves():
    x = torch.tensor([[1.0, -2.0, 3.0, 4.0]])
    expected = torch.nn.functional.silu(x[:, :2]) * x[:, 2:]
    torch.testing.assert_close(ircore.ops.silu_and_mul(x), expected)


def test_outputs_keep_dtype_and_shape():
    for dtype in DTYPES:
        x = torch.randn(2, 3, 8, dtype=dtype)
        assert ircore.ops.rms_norm(x, None, 1e-6).dtype == dtype
        assert ircore.ops.silu_and_mul(x).shape == (2, 3, 4)


# ---------------------------------------------------------------------- bad inputs
BAD_CALLS = [
    ("rms_norm", lambda: (torch.randn(2, 8), torch.randn(7), 1e-6), "'weight' has shape (7,); expected (8,)"),
    ("rms_norm", lambda: (torch.randn(2, 8), torch.randn(8, 1), 1e-6), "'weight' has shape (8, 1)"),
    ("rms_norm", lambda: (torch.ones(2, 8, dtype=torch.int32), None, 1e-6), "'x' has dtype torch.int32"),
    (
        "rms_norm",
        lambda: (torch.randn(2, 8), torch.ones(8, dtype=torch.int64), 1e-6),
        "'weight' has dtype torch.int64",
    ),
    (
        "rms_norm",
        lambda: (torch.randn(2, 8), torch.randn(8, device="meta"), 1e-6),
        "'weight' is on meta but x is on cpu",
    ),
    (
        "rms_norm",
        lambda: (torch.randn(2, 8), None, 1e-6, 9),
        "'variance_size' is 9; expected 1 <= variance_size <= 8",
    ),
    ("rms_norm", lambda: (torch.tensor(1.0), None, 1e-6), "'x' is a 0-d tensor"),
    (
        "fused_add_rms_norm",
        lambda: (torch.randn(2, 8), torch.randn(2, 9), None, 1e-6),
        "'x_residual' is torch.float32 (2, 9); expected x's dtype and shape",
    ),
    (
        "fused_add_rms_norm",
        lambda: (torch.randn(2, 8), torch.randn(2, 8).half(), None, 1e-6),
        "'x_residual' is torch.float16",
    ),
    (
        "fused_add_rms_norm",
        lambda: (torch.randn(2, 8), torch.randn(2, 8), torch.randn(4), 1e-6),
        "'weight' has shape (4,)",
    ),
    (
        "fused_add_rms_norm",
        lambda: (torch.ones(2, 8, dtype=torch.int8), torch.ones(2, 8, dtype=torch.int8), None, 1e-6),
        "'x' has dtype torch.int8",
    ),
    ("silu_and_mul", lambda: (torch.randn(3, 7),), "'x' has last dimension 7 (shape (3, 7)); it must be even"),
    ("silu_and_mul", lambda: (torch.randn(3, 0),), "'x' has last dimension 0"),
    ("rms_norm", lambda: (torch.randn(3, 0), None, 1e-6), "'x' has an empty last dimension (shape (3, 0))"),
    ("rms_norm", lambda: (torch.randn(3, 0), torch.randn(0), 1e-6), "'x' has an empty last dimension"),
    ("fused_add_rms_norm", lambda: (torch.randn(3, 0), torch.randn(3, 0), None, 1e-6), "'x' has an empty last dimension"),
    ("silu_and_mul", lambda: (torch.ones(3, 8, dtype=torch.int16),), "'x' has dtype torch.int16"),
]


def _accept_everything(op_name):
    """An implementation that would run on anything: bad input must be stopped before it."""
    op = ircore.get_op(op_name)
    ran = []
    sig_fn = op.native

    def impl(*args):
        ran.append(args)
        return sig_fn(*args)

    impl.__signature__ = op.signature
    impl.__annotations__ = dict(sig_fn.__annotations__)
    op.register_impl("greedy", impl)
    return ran


@pytest.mark.parametrize("route", ["eager", "torch_op", "fake", "greedy_provider"])
@pytest.mark.parametrize(("op_name", "make", "message"), BAD_CALLS, ids=[m for _, _, m in BAD_CALLS])
def test_bad_input_raises_one_clear_error(op_name, make, message, route):
    op = ircore.get_op(op_name)
    args = make()
    ran = _accept_everything(op_name) if route == "greedy_provider" else []
    with pytest.raises(InvalidArgumentError) as info:
        if route == "torch_op":
            op.torch_op(*args)
        elif route == "fake":
            from torch._subclasses.fake_tensor import FakeTensorMode

            with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args])
        else:
            op(*args)
    assert f"ircore.ops.{op_name}: argument " in str(info.value)
    assert message in str(info.value)
    assert ran == []
