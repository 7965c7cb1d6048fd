"""The predicates decide what is particular to these kernels; the core's check comes first.

``supports_args`` runs only on arguments that passed the op's own check (ircore validates
dtypes, shapes and devices before asking any provider), so the predicates here test just what
the kernels add: a device whose kernels are loaded, and the weight dtypes they read.
"""

import dataclasses

import pytest
import torch
from conftest import DEVICES
from ircore_vllm_c import impls, kernels

import ircore

EPS = 1e-6


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_supports(device):
    x = torch.randn(4, 64, device=device)
    w = torch.ones(64, device=device)
    ok = impls.rms_norm_supports
    assert ok(x, w, EPS, None)
    assert ok(x, None, EPS, None)
    assert ok(x.half(), w.half(), EPS, 32)
    assert ok(x.bfloat16(), w.bfloat16(), EPS, 64)
    assert ok(torch.randn(4, 80, device=device)[:, :64], w, EPS, None)  # row stride
    assert ok(torch.randn(64, 4, device=device).t(), w, EPS, None)  # any layout (copied)
    assert ok(torch.randn(2, 3, 64, device=device), w, EPS, None)
    assert ok(torch.randn(0, 64, device=device), w, EPS, None)
    assert ok(x.half(), w, EPS, None)  # fp32 weight with 16-bit x
    assert ok(x.bfloat16(), w, EPS, None)
    assert not ok(x.half(), w.bfloat16(), EPS, None)  # other weight dtypes
    assert not ok(x, w.half(), EPS, None)
    assert not ok(torch.randn(4, 64, device="meta"), None, EPS, None)  # device without kernels


@pytest.mark.parametrize("device", DEVICES)
def test_fused_supports(device):
    x = torch.randn(4, 64, device=device)
    r = torch.randn(4, 64, device=device)
    w = torch.ones(64, device=device)
    ok = impls.fused_add_rms_norm_supports
    assert ok(x, r, w, EPS, None)
    assert ok(x.bfloat16(), r.bfloat16(), None, EPS, 7)
    assert ok(x.bfloat16(), r.bfloat16(), w, EPS, None)
    assert not ok(x, r, w.bfloat16(), EPS, None)
    assert not ok(x.to("meta"), r.to("meta"), None, EPS, None)


@pytest.mark.parametrize("device", DEVICES)
def test_silu_supports(device):
    ok = impls.silu_and_mul_supports
    assert ok(torch.randn(4, 64, device=device))
    assert ok(torch.randn(4, 2, device=device, dtype=torch.bfloat16))
    assert ok(torch.randn(3, 64, 4, device=device).transpose(1, 2))
    assert not ok(torch.randn(4, 64, device="meta"))


def test_cuda_rejected_when_cuda_kernels_not_loaded(monkeypatch):
    monkeypatch.setattr(kernels, "CUDA_LOADED", False)
    assert not kernels.cuda_loaded()
    if torch.cuda.is_available():
        assert not impls.rms_norm_supports(torch.randn(4, 64, device="cuda"), None, EPS, None)


BAD = [
    ("rms_norm", lambda: (torch.randn(4, 64).double(), None, EPS)),
    ("rms_norm", lambda: (torch.randn(4, 64).to(torch.int32), None, EPS)),
    ("rms_norm", lambda: (torch.randn(4, 64), torch.ones(32), EPS)),
    ("rms_norm", lambda: (torch.randn(4, 64), torch.ones(8, 8), EPS)),
    ("rms_norm", lambda: (torch.randn(4, 64), torch.ones(64, device="meta"), EPS)),
    ("rms_norm", lambda: (torch.randn(4, 64), None, EPS, 65)),
    ("rms_norm", lambda: (torch.randn(4, 0), None, EPS)),
    ("rms_norm", lambda: (torch.tensor(1.0), None, EPS)),
    ("fused_add_rms_norm", lambda: (torch.randn(4, 64), torch.randn(4, 64).half(), None, EPS)),
    ("fused_add_rms_norm", lambda: (torch.randn(4, 64), torch.randn(4, 32), None, EPS)),
    ("silu_and_mul", lambda: (torch.randn(4, 7),)),
    ("silu_and_mul", lambda: (torch.randn(4, 0),)),
]


@pytest.mark.parametrize(("op_name", "make"), BAD)
def test_bad_input_never_reaches_the_kernels(op_name, make, monkeypatch):
    """What the predicates do not check, the core rejects before any predicate runs."""
    op = ircore.get_op(op_name)
    pred = getattr(impls, f"{op_name}_supports")
    calls = []

    def recording_pred(*args):
        calls.append(args)
        return pred(*args)

    impl = op.validate_impl("vllm_c_probe", getattr(impls, op_name), supports_args=pred,
                            inplace=op_name == "fused_add_rms_norm")
    monkeypatch.setitem(op.impls, "vllm_c_probe", dataclasses.replace(impl, supports_args=recording_pred))
    ircore.dispatch.STATE.bump()
    try:
        with ircore.priority(**{op_name: ["vllm_c_probe"]}):
            op(*op.make_inputs((2, 64), torch.float32, "cpu"))  # a valid call reaches the predicate
            assert len(calls) == 1
            calls.clear()
            with pytest.raises(ircore.InvalidArgumentError):
                op(*make())
    finally:
        monkeypatch.undo()
        ircore.dispatch.STATE.bump()
    assert calls == []
