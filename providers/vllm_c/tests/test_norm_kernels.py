"""rms_norm_gated and layer_norm kernels against the ops' fp64 references, on every CPU ISA this
machine has (and CUDA where there is a GPU): widths that hit the vector body, the tail and both."""

import _ref
import pytest
import torch
from conftest import DEVICES
from ircore_vllm_c import impls
from test_kernels import TARGET_IDS, TARGETS

import ircore
from ircore.testing import assert_close_to_reference

ops = torch.ops.ircore_vllm_c


@pytest.fixture(params=TARGETS, ids=TARGET_IDS)
def target(request):
    """Each CPU ISA this machine has, then each other device (as test_kernels' fixture)."""
    device, isa = request.param
    if isa is not None:
        ops._set_cpu_isa(isa)
    try:
        yield device
    finally:
        ops._set_cpu_isa("auto")


def _randn(shape, dtype, device, seed, scale=1.0, shift=0.0):
    t = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale + shift
    return t.to(dtype).to(device)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden, group_size", [(40, None), (96, 32), (35, 7), (1, None)])
@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("round_normalized", [False, True])
def test_rms_norm_gated(target, round_normalized, norm_before_gate, hidden, group_size, dtype):
    x = _randn((5, hidden), dtype, target, 0)
    g = _randn((5, hidden), dtype, target, 1, scale=2.0)
    w = _randn((hidden,), dtype, target, 2, scale=0.1, shift=1.0)
    args = (x, g, w, 1e-6, group_size, norm_before_gate, round_normalized)
    assert impls.rms_norm_gated_supports(*args)
    assert_close_to_reference(ircore.ops.rms_norm_gated, impls.rms_norm_gated(*args), args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_rms_norm_gated_fp32_weight_and_layouts(target, dtype):
    x = _randn((3, 4, 80), dtype, target, 3)[..., :64]  # padded rows
    g = _randn((4, 3, 64), dtype, target, 4).transpose(0, 1)  # no row view: a copy inside
    w = _randn((64,), torch.float32, target, 5, shift=1.0)
    for form in ((16, False, True), (None, True, True), (8, False, False)):
        args = (x, g, w, 1e-5, *form)
        assert_close_to_reference(ircore.ops.rms_norm_gated, impls.rms_norm_gated(*args), args)
    assert impls.rms_norm_gated(x[:0], g[:0], w, 1e-5).shape == (0, 4, 64)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [40, 96, 1])
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
def test_layer_norm(target, affine, hidden, dtype):
    x = _randn((5, hidden), dtype, target, 0, shift=3.0)
    w = _randn((hidden,), dtype, target, 1, scale=0.1, shift=1.0) if affine in ("both", "weight") else None
    b = _randn((hidden,), dtype, target, 2, scale=0.1) if affine in ("both", "bias") else None
    args = (x, w, b, 1e-5)
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(*args), args)


def test_layer_norm_small_variance_and_layouts(target):
    """Mean 4, std 0.25 over a tail-sized row: the variance is taken from x - mean."""
    x = _randn((3, 37), torch.float32, target, 6, scale=0.25, shift=4.0)
    w, b = _randn((37,), torch.float32, target, 7, shift=1.0), _randn((37,), torch.float32, target, 8)
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(x, w, b, 1e-5), (x, w, b, 1e-5))
    xt = _randn((64, 6), torch.bfloat16, target, 9).t()
    assert_close_to_reference(ircore.ops.layer_norm, impls.layer_norm(xt, None, None, 1e-5), (xt, None, None, 1e-5))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_arguments_raise(device):
    x = torch.randn(2, 8, device=device)
    with pytest.raises(RuntimeError, match="group_size must divide 8, got 3"):
        ops.rms_norm_gated(x, x, torch.ones(8, device=device), 1e-6, 3)
    with pytest.raises(RuntimeError, match="gate must have x's shape"):
        ops.rms_norm_gated(x, x[:, :4], torch.ones(8, device=device), 1e-6)
    with pytest.raises(RuntimeError, match="bias must be Float"):
        ops.layer_norm(x, None, torch.ones(8, device=device, dtype=torch.half), 1e-6)


def test_opcheck_and_compiled_calls():
    """Schemas and fakes hold up for torch.compile: opcheck on the kernels, and the ircore ops
    compiled (backend "ircore" lowers them to these kernels) equal the eager calls."""
    ircore.dispatch.ensure_loaded()
    assert "vllm_c" in ircore.ops.rms_norm_gated.impls and "vllm_c" in ircore.ops.layer_norm.impls
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    g = torch.randn(4, 64, dtype=torch.bfloat16)
    w = torch.randn(64, dtype=torch.bfloat16)
    torch.library.opcheck(ops.rms_norm_gated.default, (x, g, w, 1e-6, 16, False, True))
    torch.library.opcheck(ops.rms_norm_gated.default, (x, g, w.float(), 1e-6, None, True, False))
    torch.library.opcheck(ops.layer_norm.default, (x, w, w, 1e-5))
    torch.library.opcheck(ops.layer_norm.default, (x, None, None, 1e-5))

    def f(x, g, w):
        y = ircore.ops.rms_norm_gated(x, g, w, 1e-6, 16, False, True)
        return ircore.ops.layer_norm(y, w, None, 1e-5)

    with torch.inference_mode(), ircore.priority(rms_norm_gated=["vllm_c"], layer_norm=["vllm_c"]):
        compiled = torch.compile(f, backend="ircore", fullgraph=True)
        torch.testing.assert_close(compiled(x, g, w), f(x, g, w), atol=0, rtol=0)
