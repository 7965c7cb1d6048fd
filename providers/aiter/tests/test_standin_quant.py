"""The fp8 quant adapters against the AITER STAND-IN (tests/standins/aiter), on simulated ROCm
gfx942 (AITER's fp8 is e4m3fnuz) and gfx950 (e4m3fn).

The stand-in models AITER's quant kernels: output buffers passed in, contiguous rows from the
data pointers, 16-byte vectors, a float32 scale, the arch's fp8 only, saturation at
``finfo(out).max`` (240 for e4m3fnuz) and dynamic scales ``amax / max`` without a floor. The
tests show what the adapters accept gives the op's numbers (through the conformance kit's fp8
comparison, which fails one fp8 ulp beyond the op's 224), and that what they decline, or the
AITER entry points they do not use, would give wrong ones.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ircore
from ircore.ops._quant import E4M3FN, E4M3FNUZ
from ircore.testing import assert_close_to_reference, check_provider
from tests.layouts import BF16, FP16, FP32, randn, weight


def _scale(value: float = 0.01) -> torch.Tensor:
    return torch.tensor([value])


def _static(x, fp8=E4M3FN, scale=None, padding=None):
    return (x, _scale() if scale is None else scale, fp8, padding)


def _dynamic(x, per_token=False, fp8=E4M3FNUZ, padding=None):
    return (x, per_token, fp8, None, padding)


# ------------------------------------------------------------------ the conformance kit
def test_conformance_kit_gfx942(gfx942):
    """gfx942: static quant declined (AITER's e4m3fnuz saturates at 240, the op at 224); dynamic
    per-tensor in e4m3fnuz checked (padding included); per-token and e4m3fn declined."""
    calls = gfx942.CALLS["static_per_tensor_quant"]
    report = check_provider("aiter", dtypes=(BF16,), seeds=(0,), ops=("static_quant_fp8", "dynamic_quant_fp8"))
    assert report.checked == {"static_quant_fp8": 0, "dynamic_quant_fp8": 1}, report
    declined = " ".join(report.declined["dynamic_quant_fp8"])
    assert "7x256 per-tensor e4m3fnuz" not in declined
    assert "7x256 per-token" in declined and "3x64 all zeros per-tensor" in declined  # e4m3fn on gfx942
    assert gfx942.CALLS["static_per_tensor_quant"] > calls


def test_conformance_kit_gfx950(gfx950):
    """gfx950: static per-tensor e4m3fn checked (|x| beyond 448 and inf saturate; 3-D; padded
    rows zero); dynamic per-tensor e4m3fn checked, the all-zero tensor (the op's floor) and the
    single row given an upper bound (ignored per tensor, padded) included."""
    report = check_provider("aiter", dtypes=(BF16,), seeds=(0,), ops=("static_quant_fp8", "dynamic_quant_fp8"))
    assert report.checked["static_quant_fp8"] >= 4 and report.checked["dynamic_quant_fp8"] == 3, report
    assert "one row" not in " ".join(report.declined["dynamic_quant_fp8"]), report
    static_declined = " ".join(report.declined["static_quant_fp8"])
    for label in ("e4m3fnuz", "per-channel", "per-token", "group scale", "row stride 192"):
        assert label in static_declined, label
    assert "beyond the fp8 max and inf" not in static_declined


# ------------------------------------------------------------------ dispatch, layout by layout
ACCEPTED_942 = {
    "per-tensor e4m3fnuz 2-D": lambda: _dynamic(randn(6, 256)),
    "per-tensor e4m3fnuz 3-D, fp16": lambda: _dynamic(randn(2, 3, 64, dtype=FP16)),
    "per-tensor e4m3fnuz, padded to 8 rows": lambda: _dynamic(randn(5, 128), padding=8),
    "per-tensor e4m3fnuz, input not 16-byte aligned (copied)": lambda: _dynamic(randn(1 + 4 * 64)[1:].view(4, 64)),
}
DECLINED_942 = {
    "per-token": lambda: ("dynamic_quant_fp8", _dynamic(randn(6, 256), per_token=True)),
    "per-tensor e4m3fn (not this arch's fp8)": lambda: ("dynamic_quant_fp8", _dynamic(randn(6, 256), fp8=E4M3FN)),
    "per-tensor fp32": lambda: ("dynamic_quant_fp8", _dynamic(randn(6, 256, dtype=FP32))),
    "per-tensor row-strided": lambda: ("dynamic_quant_fp8", _dynamic(randn(6, 384)[:, :256])),
    "per-tensor K = 72": lambda: ("dynamic_quant_fp8", _dynamic(randn(6, 72))),
    "static e4m3fnuz (240 vs 224)": lambda: ("static_quant_fp8", _static(randn(6, 256), fp8=E4M3FNUZ)),
}


@pytest.mark.parametrize("label", ACCEPTED_942)
def test_gfx942_accepted_and_right(gfx942, label):
    args = ACCEPTED_942[label]()
    before = gfx942.CALLS["static_per_tensor_quant"]
    assert ircore.explain("dynamic_quant_fp8", *args).chosen == "aiter", label
    q, scale = ircore.ops.dynamic_quant_fp8(*args)
    assert_close_to_reference(ircore.ops.dynamic_quant_fp8, (q, scale), args, label=label)
    assert gfx942.CALLS["static_per_tensor_quant"] == before + 1
    assert q.dtype is E4M3FNUZ and q.float().abs().max() <= 224


@pytest.mark.parametrize("label", DECLINED_942)
def test_gfx942_declined(gfx942, label):
    op, args = DECLINED_942[label]()
    assert ircore.explain(op, *args).chosen != "aiter", label


def test_gfx950_static_dispatch(gfx950):
    x = randn(6, 256) * 50  # beyond 448 scale units at scale 0.01
    assert ircore.explain("static_quant_fp8", *_static(x)).chosen == "aiter"
    q = ircore.ops.static_quant_fp8(*_static(x))
    assert_close_to_reference(ircore.ops.static_quant_fp8, q, _static(x))
    assert q.float().abs().max() == 448
    for label, args in {
        "e4m3fnuz": _static(x, fp8=E4M3FNUZ),
        "per-channel scale": _static(x, scale=torch.full((256,), 0.01)),
        "padding": _static(x, padding=8),  # accepted: the adapter zero-fills the padding rows
    }.items():
        assert (ircore.explain("static_quant_fp8", *args).chosen == "aiter") is (label == "padding"), label


def test_predicates_answer_alike_on_fake_tensors(gfx942):
    from ircore_aiter import impls

    cases = [ACCEPTED_942[k]() for k in ACCEPTED_942] + [DECLINED_942[k]()[1] for k in DECLINED_942]
    with FakeTensorMode() as mode:
        fakes = [tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in c) for c in cases]
        fake = [impls.dynamic_quant_fp8_supports(*c) for c in fakes]
        fake_static = [impls.static_quant_fp8_supports(c[0], _scale(), E4M3FN, None) for c in fakes]
    assert fake == [impls.dynamic_quant_fp8_supports(*c) for c in cases]
    assert fake_static == [impls.static_quant_fp8_supports(c[0], _scale(), E4M3FN, None) for c in cases]


# ------------------------------------------------------------------ why the rest is declined
def test_static_kernel_saturates_e4m3fnuz_at_240(gfx942):
    """The declined static e4m3fnuz call: AITER's kernel writes 240 where the op clamps at 224."""
    x = randn(4, 256) * 50
    args = _static(x, fp8=E4M3FNUZ)
    q = torch.empty(x.shape, dtype=E4M3FNUZ)
    gfx942.static_per_tensor_quant(q, x, args[1])
    assert q.float().abs().max() == 240
    with pytest.raises(AssertionError, match=r"224|limit|beyond"):
        assert_close_to_reference(ircore.ops.static_quant_fp8, q, args)


@pytest.mark.parametrize("kernel", ["dynamic_per_tensor_quant", "dynamic_per_token_scaled_quant"])
def test_aiter_dynamic_kernels_differ_from_the_op(gfx942, kernel):
    """AITER's own dynamic kernels divide by 240 and floor no scale: an all-zero row comes out
    NaN with scale 0, and the op's comparison fails. Why the adapter takes the scale itself."""
    x = randn(4, 256)
    x[1] = 0
    per_token = kernel == "dynamic_per_token_scaled_quant"
    q = torch.empty(x.shape, dtype=E4M3FNUZ)
    scale = torch.empty((4, 1) if per_token else (1,))
    getattr(gfx942, kernel)(q, x, scale)
    assert q.float().nan_to_num(0.0).abs().max() == 240
    if per_token:
        assert scale[1].item() == 0 and q[1].float().isnan().all()
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.dynamic_quant_fp8, (q, scale), _dynamic(x, per_token=per_token))


def test_fused_rmsnorm_dynamicquant_is_not_the_fused_op(gfx942):
    """``rmsnorm2d_fwd_with_dynamicquant`` as modelled: the same 240 and the same missing floor,
    so ``rms_norm_dynamic_quant_fp8`` has no aiter implementation."""
    x, w = randn(3, 256), weight(256)
    x[2] = 0
    q, ys = torch.empty(x.shape, dtype=E4M3FNUZ), torch.empty(3, 1)
    gfx942.rmsnorm2d_fwd_with_dynamicquant(q, x, ys, w, 1e-6)
    assert ys[2].item() == 0 and q[2].float().isnan().all()
    assert "aiter" not in ircore.ops.rms_norm_dynamic_quant_fp8.impls


def test_standin_refuses_what_the_adapter_never_passes(gfx942):
    """The kernel's checks as modelled: the arch's fp8 only, a float32 scale, aligned rows."""
    x, q = randn(4, 256), torch.empty(4, 256, dtype=E4M3FNUZ)
    with pytest.raises(RuntimeError, match="not this arch's fp8"):
        gfx942.static_per_tensor_quant(torch.empty(4, 256, dtype=E4M3FN), x, _scale())
    with pytest.raises(RuntimeError, match="float32"):
        gfx942.static_per_tensor_quant(q, x, _scale().to(BF16))
    with pytest.raises(RuntimeError, match="misaligned"):
        gfx942.static_per_tensor_quant(q[:, :72].contiguous(), randn(4, 72), _scale())  # fp8 rows of 72 B


def test_empty_input_never_launches(gfx950):
    calls = dict(gfx950.CALLS)
    args = _static(randn(0, 64), padding=4)
    assert ircore.explain("static_quant_fp8", *args).chosen == "aiter"
    q = ircore.ops.static_quant_fp8(*args)
    assert q.shape == (4, 64) and q.dtype is E4M3FN and q.float().eq(0).all()
    assert dict(gfx950.CALLS) == calls


def test_a_release_without_the_kernel_declines_every_quant_call(gfx942, monkeypatch):
    """static_per_tensor_quant is optional per release: without it the quant predicates decline."""
    from ircore_aiter import impls

    args = ACCEPTED_942["per-tensor e4m3fnuz 2-D"]()
    assert impls.dynamic_quant_fp8_supports(*args)
    monkeypatch.setattr(impls, "_STATIC_QUANT", None)
    assert not impls.dynamic_quant_fp8_supports(*args)



# ------------------------------------------------------------------ fused norm/activation + static quant
FUSED_OPS = ("rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant", "silu_and_mul_static_quant_fp8")
_TRITON = ("fused_rms_fp8_per_tensor_static_quant", "fused_silu_mul_fp8_per_tensor_static_quant")


def test_fused_conformance_kit_gfx950(gfx950):
    """gfx950, the Triton wrappers' stand-in (aiter.ops.triton.fused_fp8_quant): every accepted
    sample right (|x| beyond 448 and inf saturate, 0-d scale, a row-strided 2-D x, 3-D);
    e4m3fnuz (240) and non-per-tensor scales declined."""
    calls = {name: gfx950.CALLS[name] for name in _TRITON}
    report = check_provider("aiter", dtypes=(BF16,), seeds=(0,), ops=FUSED_OPS)
    assert all(report.checked[op] > 0 for op in FUSED_OPS), report
    for op in FUSED_OPS:
        declined = " ".join(report.declined[op])
        for label in ("e4m3fnuz", "group scale", "(M,1)"):
            assert label in declined, (op, label)
        assert "0-d scale" not in declined and "beyond the fp8 max" not in declined, op
    assert "row stride 192, padded" in " ".join(report.declined["rms_norm_static_fp8_quant"])  # padding rows
    assert all(gfx950.CALLS[name] > calls[name] for name in _TRITON)


def _rms_static(x, w=None, fp8=E4M3FN, padding=None, residual=None):
    norm = (x,) if residual is None else (x, residual)
    return (*norm, w, 1e-6, _scale(0.005), fp8, padding)


FUSED_950 = {
    "2-D column-strided x, fp32 weight": ("rms_norm_static_fp8_quant", lambda: _rms_static(randn(64, 6).t(), randn(64, dtype=FP32)), True),
    "3-D fp32, padding <= rows": ("rms_norm_static_fp8_quant", lambda: _rms_static(randn(2, 3, 64, dtype=FP32), padding=2), True),
    "padding beyond the rows": ("rms_norm_static_fp8_quant", lambda: _rms_static(randn(4, 64), padding=8), False),
    "3-D middle slice": ("rms_norm_static_fp8_quant", lambda: _rms_static(randn(4, 6, 64)[:, :3]), False),
    "weight not contiguous": ("rms_norm_static_fp8_quant", lambda: _rms_static(randn(4, 64), randn(128)[::2]), False),
    "add, transposed residual": ("fused_add_rms_norm_static_fp8_quant", lambda: _rms_static(randn(4, 64), residual=randn(64, 4).t()), True),
    "add, 3-D residual slice": ("fused_add_rms_norm_static_fp8_quant", lambda: _rms_static(randn(2, 3, 64), residual=randn(2, 6, 64)[:, :3]), False),
    "silu fp16 3-D": ("silu_and_mul_static_quant_fp8", lambda: (randn(2, 3, 128, dtype=FP16), _scale(), E4M3FN, None), True),
    "silu e4m3fnuz": ("silu_and_mul_static_quant_fp8", lambda: (randn(4, 128), _scale(), E4M3FNUZ, None), False),
}


def test_fused_gfx950_layouts(gfx950):
    """Each predicate boundary (the same answer on fake tensors), and the op's numbers whichever
    provider runs (one simulated platform for all: entering one costs a provider load)."""
    from ircore_aiter import impls

    for label, (op_name, make, accepted) in FUSED_950.items():
        args = make()
        assert (ircore.explain(op_name, *args).chosen == "aiter") is accepted, label
        with FakeTensorMode() as mode:  # as at compile time
            fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            assert getattr(impls, op_name + "_supports")(*fake) is accepted, label
        op = ircore.get_op(op_name)
        assert_close_to_reference(op, op(*args), args, label=label)


def test_fused_gfx942_declines_every_call(gfx942):
    """gfx942: e4m3fnuz is clamped at 240 by the wrappers (``finfo(dtype_quant).max``), and
    e4m3fn is not this arch's fp8: nothing runs on AITER."""
    for fp8 in (E4M3FNUZ, E4M3FN):
        assert ircore.explain("rms_norm_static_fp8_quant", *_rms_static(randn(4, 64), fp8=fp8)).chosen != "aiter"
        args = _rms_static(randn(4, 64), fp8=fp8, residual=randn(4, 64))
        assert ircore.explain("fused_add_rms_norm_static_fp8_quant", *args).chosen != "aiter"
        assert ircore.explain("silu_and_mul_static_quant_fp8", randn(4, 128), _scale(), fp8, None).chosen != "aiter"


def test_fused_wrapper_saturates_e4m3fnuz_at_240(gfx942):
    """Why e4m3fnuz is declined: the wrapper's DTYPE_MAX is 240 where the op clamps at 224."""
    from aiter.ops.triton import fused_fp8_quant

    x = randn(4, 64) * 4
    args = _rms_static(x, fp8=E4M3FNUZ)
    q = fused_fp8_quant.fused_rms_fp8_per_tensor_static_quant(x, torch.ones(64, dtype=BF16), 1e-6, args[3], dtype_quant=E4M3FNUZ)[0]
    assert q.float().abs().max() == 240
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rms_norm_static_fp8_quant, q, args)


def test_fused_release_without_the_wrappers_declines(gfx950, monkeypatch):
    """0.1.7 and 0.1.8 lack ``rmsnorm_convert_to_inp1_type`` and the silu wrapper: the adapter
    finds no wrapper of the call form it uses, and the predicates decline."""
    from ircore_aiter import impls

    args = _rms_static(randn(4, 64))
    assert impls.rms_norm_static_fp8_quant_supports(*args)
    module = type(impls)("fused_fp8_quant")
    module.fused_rms_fp8_per_tensor_static_quant = lambda inp1, inp1_weight, inp1_epsilon, inp1_scale, inp2=None, inp2_weight=None, inp2_epsilon=None, dtype_quant=None, res1=None, output_unquantized_inp1=False: None
    monkeypatch.setattr(impls.importlib, "import_module", lambda name: module)
    assert impls._triton_wrapper("fused_rms_fp8_per_tensor_static_quant", impls._RMS_PARAMS) is None
    assert impls._triton_wrapper("fused_silu_mul_fp8_per_tensor_static_quant", ("inp",)) is None
    monkeypatch.setattr(impls, "_FUSED_RMS", None)
    assert not impls.rms_norm_static_fp8_quant_supports(*args)
