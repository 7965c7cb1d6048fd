"""The gated activations (gelu_and_mul, mul_and_silu, fatrelu_and_mul, swigluoai_and_mul): natives
against their fp64 references, against the formulas vLLM's and torch's layers use, the points of
each definition that a wrong kernel would get wrong, and their argument errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import ircore
from ircore.errors import InvalidArgumentError
from ircore.testing import assert_close_to_reference

OPS = ("gelu_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@pytest.mark.parametrize("op_name", OPS)
def test_native_matches_fp64_reference(op_name):
    """Every sample (odd half-widths, 3-D, no rows, strided rows, each parameter variant), each
    dtype, two seeds."""
    op = ircore.get_op(op_name)
    for dtype in DTYPES:
        for seed in (0, 1):
            samples = list(op.sample_inputs(dtype, "cpu", seed=seed))
            assert len(samples) >= 7
            for sample in samples:
                out = op.native(*sample.args)
                assert out.dtype == dtype and out.shape == (
                    *sample.args[0].shape[:-1],
                    sample.args[0].shape[-1] // 2,
                )
                assert_close_to_reference(op, out, sample.args, label=f"{dtype} {sample.label}")


def _vllm_forward_native(name: str, x: torch.Tensor, *params):
    """vLLM's forward_native of each layer (model_executor/layers/activation.py), as written there."""
    d = x.shape[-1] // 2
    if name == "gelu_and_mul":
        return F.gelu(x[..., :d], approximate=params[0]) * x[..., d:]
    if name == "mul_and_silu":
        return x[..., :d] * F.silu(x[..., d:])
    if name == "fatrelu_and_mul":
        return F.threshold(x[..., :d], params[0], 0.0) * x[..., d:]
    alpha, limit = params
    gate, up = x[..., ::2], x[..., 1::2]
    gate = gate.clamp(min=None, max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


CROSS = [
    ("gelu_and_mul", ("none",)),
    ("gelu_and_mul", ("tanh",)),
    ("mul_and_silu", ()),
    ("fatrelu_and_mul", (0.0,)),
    ("fatrelu_and_mul", (0.25,)),
    ("swigluoai_and_mul", (1.702, 7.0)),
    ("swigluoai_and_mul", (0.5, 1.5)),
]


@pytest.mark.parametrize(("op_name", "params"), CROSS, ids=[f"{n}{p}" for n, p in CROSS])
def test_native_is_vllms_forward_native_in_fp32(op_name, params):
    """fp32: the same function as vLLM's layer, to fp32 rounding. 16-bit: vLLM's layer rounds
    each step to x's dtype, ircore's op once; both are within the op's tolerance of the fp32 result."""
    op = ircore.get_op(op_name)
    x = torch.randn(5, 2 * 203, generator=torch.Generator().manual_seed(3)) * 5  # beyond the clamps
    torch.testing.assert_close(
        op.native(x, *params), _vllm_forward_native(op_name, x, *params), rtol=1e-6, atol=1e-6
    )
    for dtype in (torch.float16, torch.bfloat16):
        xl = x.to(dtype)
        tol = op.tolerance(dtype)
        exact = _vllm_forward_native(op_name, xl.float(), *params)
        torch.testing.assert_close(op.native(xl, *params).float(), exact, atol=tol.atol, rtol=tol.rtol)


def test_gelu_tanh_is_gemmas_gelu_pytorch_tanh_and_differs_from_erf():
    x = torch.linspace(-6, 6, 2 * 301).reshape(1, -1).double().float()
    d = x.shape[-1] // 2
    a, b = x[:, :d], x[:, d:]
    tanh_form = 0.5 * a * (1 + torch.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))) * b
    torch.testing.assert_close(ircore.ops.gelu_and_mul(x, "tanh"), tanh_form, rtol=1e-5, atol=1e-6)
    erf_form = 0.5 * a * (1 + torch.erf(a / math.sqrt(2))) * b
    # within the op's fp32 tolerance (1e-5), not 1e-6: torch's vectorised fp32 GELU, which native
    # calls, is 2.1e-6 off this composition on an AVX-512 Xeon (2026-12-05); still 10x under the
    # erf/tanh gap asserted below
    tol = ircore.get_op("gelu_and_mul").tolerance(torch.float32)
    torch.testing.assert_close(ircore.ops.gelu_and_mul(x), erf_form, rtol=tol.rtol, atol=tol.atol)
    assert (ircore.ops.gelu_and_mul(x, "tanh") - ircore.ops.gelu_and_mul(x)).abs().max() > 1e-4


def test_halves_order_and_interleaving():
    """Which element is the gate: the first half (gelu, fatrelu), the second (mul_and_silu), the
    even positions (swigluoai)."""
    x = torch.tensor([[2.0, -1.0, 3.0, 0.5]])
    torch.testing.assert_close(
        ircore.ops.mul_and_silu(x),
        torch.tensor([[2.0 * F.silu(torch.tensor(3.0)), -1.0 * F.silu(torch.tensor(0.5))]]),
    )
    torch.testing.assert_close(ircore.ops.fatrelu_and_mul(x), torch.tensor([[6.0, 0.0]]))
    g, u = torch.tensor([2.0, 3.0]), torch.tensor([-1.0, 0.5])  # x[::2], x[1::2]
    torch.testing.assert_close(ircore.ops.swigluoai_and_mul(x)[0], (u + 1) * g * torch.sigmoid(1.702 * g))


def test_fatrelu_keeps_only_values_above_the_threshold():
    x = torch.tensor([[0.5, 0.50001, -2.0, float("nan"), 1.0, 1.0, 1.0, 1.0]])
    out = ircore.ops.fatrelu_and_mul(x, 0.5)
    assert out[0, 1].item() == torch.tensor(0.50001).item()  # just above: kept (times 1.0)
    assert out[0, 0].item() == 0.0 and out[0, 2].item() == 0.0 and math.isnan(out[0, 3].item())
    # a threshold beyond fp32's range compares as +-inf (F.threshold itself would raise)
    y = torch.tensor([[3e38, -3e38, 1.0, 2.0]])
    assert ircore.ops.fatrelu_and_mul(y, 1e308).tolist() == [[0.0, 0.0]]
    assert torch.equal(ircore.ops.fatrelu_and_mul(y, -1e308), y[:, :2] * y[:, 2:])  # -3e38 * 2: -inf


def test_swigluoai_clamps_gate_above_and_up_both_ways():
    x = torch.tensor([[9.0, 9.0, -9.0, -9.0]])  # (gate, up) = (9, 9), (-9, -9)
    g = torch.tensor([7.0, -9.0])  # gate: only its top is clamped
    u = torch.tensor([7.0, -7.0])
    torch.testing.assert_close(ircore.ops.swigluoai_and_mul(x)[0], (u + 1) * g * torch.sigmoid(1.702 * g))
    unclamped = torch.tensor([9.0, -9.0])
    expected = (unclamped + 1) * unclamped * torch.sigmoid(1.702 * unclamped)
    torch.testing.assert_close(ircore.ops.swigluoai_and_mul(x, 1.702, math.inf)[0], expected)
    torch.testing.assert_close(ircore.ops.swigluoai_and_mul(x, 1.702, 1e300)[0], expected)


def test_16_bit_results_are_rounded_once():
    """bf16: the fp32 result rounded once, which differs from vLLM's per-step bf16 chain somewhere."""
    x = (torch.randn(64, 2 * 256, generator=torch.Generator().manual_seed(5)) * 3).bfloat16()
    for name, params in CROSS:
        op = ircore.get_op(name)
        once = _vllm_forward_native(name, x.float(), *params).bfloat16()
        assert torch.equal(op.native(x, *params), once), name


BAD = [
    (
        "gelu_and_mul",
        (torch.randn(2, 8), "exact"),
        "argument 'approximate' is 'exact'; expected one of 'none' (erf GELU) or 'tanh'",
    ),
    ("gelu_and_mul", (torch.randn(2, 8), "Tanh"), "argument 'approximate' is 'Tanh'"),
    ("gelu_and_mul", (torch.randn(2, 8), None), "argument 'approximate' must be a str"),
    (
        "gelu_and_mul",
        (torch.randn(2, 7),),
        "argument 'x' has last dimension 7 (shape (2, 7)); it must be even",
    ),
    ("mul_and_silu", (torch.randn(2, 0),), "argument 'x' has last dimension 0"),
    ("mul_and_silu", (torch.ones(2, 8, dtype=torch.float64),), "argument 'x' has dtype torch.float64"),
    (
        "fatrelu_and_mul",
        (torch.randn(2, 8), math.nan),
        "argument 'threshold' is nan; expected a number, not NaN",
    ),
    ("fatrelu_and_mul", (torch.randn(3),), "argument 'x' has last dimension 3"),
    ("swigluoai_and_mul", (torch.randn(2, 8), 1.0, -1.0), "argument 'limit' is -1.0; expected a number >= 0"),
    ("swigluoai_and_mul", (torch.randn(2, 8), 1.0, math.nan), "argument 'limit' is nan"),
    (
        "swigluoai_and_mul",
        (torch.randn(2, 8), math.inf, 7.0),
        "argument 'alpha' is inf; expected a finite number",
    ),
    ("swigluoai_and_mul", (torch.randn(2, 8), 1e39, 7.0), "argument 'alpha' is 1e+39"),
    ("swigluoai_and_mul", (torch.randn(2, 5),), "interleaved pairs (gate, up)"),
    ("swigluoai_and_mul", (torch.tensor(1.0),), "argument 'x' is a 0-d tensor"),
]


@pytest.mark.parametrize(("op_name", "args", "message"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_raises_one_clear_error(op_name, args, message):
    op = ircore.get_op(op_name)
    for call in (op, op.explain):
        with pytest.raises(InvalidArgumentError) as info:
            call(*args)
        assert str(info.value).startswith(f"ircore.ops.{op_name}: ") and message in str(info.value), str(
            info.value
        )


def test_the_str_op_is_checked_on_every_call_and_keyword_defaults_work():
    """gelu_and_mul has no signature cache (a str parameter): a good call, then a bad mode with the
    same tensor, is still refused; keywords and defaults bind as the native's."""
    op = ircore.ops.gelu_and_mul
    assert op.signature_spec is None and ircore.ops.mul_and_silu.signature_spec is not None
    x = torch.randn(3, 16)
    torch.testing.assert_close(op(x, approximate="tanh"), op.native(x, "tanh"))
    torch.testing.assert_close(op(x), op.native(x, "none"))
    with pytest.raises(InvalidArgumentError, match="'approximate' is 'sigmoid'"):
        op(x, approximate="sigmoid")
    torch.testing.assert_close(
        ircore.ops.swigluoai_and_mul(x, limit=3.0), ircore.ops.swigluoai_and_mul.native(x, 1.702, 3.0)
    )
