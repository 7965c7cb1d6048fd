"""rms_norm_gated and layer_norm: native against the modules it stands for, bit for bit."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ircore
from ircore.errors import InvalidArgumentError

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _inputs(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen).to(dtype)
    g = (torch.randn(shape, generator=gen) * 2).to(dtype)
    w = (torch.randn(shape[-1], generator=gen) * 0.1 + 1).to(dtype)
    return x, g, w


def _module(cls, hidden, weight, **kwargs):
    m = cls(hidden, **kwargs).to(weight.dtype)
    with torch.no_grad():
        m.weight.copy_(weight)
    return m


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", ["mamba2", "bamba", "zamba2", "nemotron_h", "granitemoehybrid"])
@pytest.mark.parametrize("n_groups", [1, 4])
def test_gate_before_norm_equals_mamba2_family(family, n_groups, dtype):
    transformers = pytest.importorskip("transformers")
    import importlib

    mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    cls = next(getattr(mod, n) for n in dir(mod) if n.endswith("RMSNormGated"))
    x, g, w = _inputs((2, 3, 256), dtype)
    m = _module(cls, 256, w, group_size=256 // n_groups, eps=1e-6)
    with torch.no_grad():
        expected = m(x, g)
    got = ircore.ops.rms_norm_gated.native(x, g, w, 1e-6, 256 // n_groups, False, True)
    assert transformers and got.dtype == expected.dtype
    assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", ["qwen3_next", "qwen3_5", "olmo_hybrid"])
def test_norm_before_gate_equals_qwen3_next_family(family, dtype):
    import importlib

    pytest.importorskip("transformers")
    mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    cls = next(getattr(mod, n) for n in dir(mod) if n.endswith("RMSNormGated"))
    x, g, w = _inputs((5, 128), dtype, seed=1)
    m = _module(cls, 128, w, eps=1e-6)
    with torch.no_grad():
        expected = m(x, g)
    got = ircore.ops.rms_norm_gated.native(x, g, w, 1e-6, None, True, True)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("n_groups", [1, 2])
def test_falcon_h1_equals_the_fp32_form(norm_before_gate, n_groups, dtype):
    pytest.importorskip("transformers")
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1RMSNormGated

    x, g, w = _inputs((2, 4, 192), dtype, seed=2)
    m = _module(FalconH1RMSNormGated, 192, w, eps=1e-6, n_groups=n_groups, norm_before_gate=norm_before_gate)
    with torch.no_grad():
        expected = m(x, g)
    got = ircore.ops.rms_norm_gated.native(x, g, w, 1e-6, 192 // n_groups, norm_before_gate, False)
    assert torch.equal(got, expected)


def test_rms_norm_gated_without_gate_effect_is_rms_norm():
    x, _, w = _inputs((3, 64), torch.float32)
    big = torch.full_like(x, 80.0)  # silu(80) == 80 in fp32: gate * 1/80 == 1
    out = ircore.ops.rms_norm_gated(x, big, w, 1e-6, None, True, False)
    torch.testing.assert_close(out, ircore.ops.rms_norm(x, w, 1e-6) * 80.0)


@pytest.mark.parametrize(
    "args, arg",
    [
        (lambda x, g, w: (x, g[:, :32], w, 1e-6), "gate"),
        (lambda x, g, w: (x, g.double(), w, 1e-6), "gate"),
        (lambda x, g, w: (x, g, w, 1e-6, 24), "group_size"),
        (lambda x, g, w: (x, g, w, 1e-6, 0), "group_size"),
        (lambda x, g, w: (x, g, w[:8], 1e-6), "weight"),
        (lambda x, g, w: (x, g, w, -1.0), "epsilon"),
    ],
)
def test_rms_norm_gated_bad_input(args, arg):
    x, g, w = _inputs((2, 64), torch.float32)
    with pytest.raises(InvalidArgumentError, match=f"rms_norm_gated: argument '{arg}'"):
        ircore.ops.rms_norm_gated(*args(x, g, w))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm_native_is_torch(affine, dtype):
    x, _, w = _inputs((4, 3, 96), dtype)
    b = (torch.randn(96) * 0.1).to(dtype)
    weight = w if affine in ("both", "weight") else None
    bias = b if affine in ("both", "bias") else None
    expected = F.layer_norm(x, (96,), weight, bias, 1e-5)
    if affine != "bias":  # and the module, where it has that form
        m = torch.nn.LayerNorm(96, eps=1e-5, elementwise_affine=weight is not None, bias=bias is not None)
        with torch.no_grad():
            for name, value in (("weight", weight), ("bias", bias)):
                if value is not None:
                    getattr(m, name).copy_(value)
        assert torch.equal(m.to(dtype)(x), expected)
    assert torch.equal(ircore.ops.layer_norm(x, weight, bias, 1e-5), expected)


@pytest.mark.parametrize(
    "args, arg",
    [
        (lambda x, w, b: (x, w.float(), b, 1e-5), "weight"),
        (lambda x, w, b: (x, w, b[:3], 1e-5), "bias"),
        (lambda x, w, b: (x, w, b.float(), 1e-5), "bias"),
        (lambda x, w, b: (x, w, b, float("nan")), "epsilon"),
        (lambda x, w, b: (torch.ones(3, 0, dtype=torch.bfloat16), None, None, 1e-5), "x"),
    ],
)
def test_layer_norm_bad_input(args, arg):
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    w, b = torch.ones(16, dtype=torch.bfloat16), torch.zeros(16, dtype=torch.bfloat16)
    with pytest.raises(InvalidArgumentError, match=f"layer_norm: argument '{arg}'"):
        ircore.ops.layer_norm(*args(x, w, b))
