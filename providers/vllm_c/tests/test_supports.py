"""The predicates accept what the kernels handle and reject the rest, cheaply."""

import time

import pytest
import torch
from conftest import DEVICES
from ircore_vllm_c import impls

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
    assert not ok(x.double(), w.double(), EPS, None)  # dtype
    assert not ok(x.to(torch.int32), None, EPS, None)
    assert ok(x.half(), w, EPS, None)  # fp32 weight with 16-bit x
    assert ok(x.bfloat16(), w, EPS, None)
    assert not ok(x.half(), w.bfloat16(), EPS, None)  # other weight dtypes
    assert not ok(x, w.half(), EPS, None)
    assert not ok(x, w[:32], EPS, None)  # weight size
    assert not ok(x, w.view(8, 8), EPS, None)  # weight rank
    assert not ok(x, w, EPS, 0)  # variance_size range
    assert not ok(x, w, EPS, 65)
    assert not ok(torch.tensor(1.0, device=device), None, EPS, None)  # 0-d
    assert not ok(torch.randn(4, 0, device=device), None, EPS, None)  # hidden 0
    assert not ok(torch.randn(4, 64, device="meta"), None, EPS, None)  # device


def test_weight_on_another_device_is_rejected():
    x = torch.randn(4, 64)
    assert not impls.rms_norm_supports(x, torch.ones(64, device="meta"), EPS, None)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_supports(device):
    x = torch.randn(4, 64, device=device)
    r = torch.randn(4, 64, device=device)
    w = torch.ones(64, device=device)
    ok = impls.fused_add_rms_norm_supports
    assert ok(x, r, w, EPS, None)
    assert ok(x.bfloat16(), r.bfloat16(), None, EPS, 7)
    assert not ok(x, r.half(), w, EPS, None)  # residual dtype
    assert not ok(x, r[:, :32], w, EPS, None)  # residual shape
    assert not ok(x, r, w, EPS, 100)
    assert not ok(x.double(), r.double(), None, EPS, None)
    assert not ok(x, r.to("meta"), w, EPS, None)


@pytest.mark.parametrize("device", DEVICES)
def test_silu_supports(device):
    ok = impls.silu_and_mul_supports
    assert ok(torch.randn(4, 64, device=device))
    assert ok(torch.randn(4, 2, device=device, dtype=torch.bfloat16))
    assert ok(torch.randn(3, 64, 4, device=device).transpose(1, 2))
    assert not ok(torch.randn(4, 7, device=device))  # odd
    assert not ok(torch.randn(4, 0, device=device))
    assert not ok(torch.tensor(1.0, device=device))
    assert not ok(torch.randn(4, 64, device=device).double())
    assert not ok(torch.randn(4, 64, device="meta"))


def test_cuda_rejected_when_cuda_kernels_not_loaded(monkeypatch):
    from ircore_vllm_c import kernels

    monkeypatch.setitem(kernels._results, "cuda", "not loaded (test)")
    fake_cuda = torch.empty(4, 64, device="meta")  # stands in; is_cuda is False for meta
    assert not impls.rms_norm_supports(fake_cuda, None, EPS, None)
    assert not kernels.cuda_loaded()


def test_predicates_are_cheap():
    x = torch.randn(16, 4096)
    w = torch.ones(4096)
    n = 20000
    start = time.perf_counter()
    for _ in range(n):
        impls.rms_norm_supports(x, w, EPS, None)
    per_call = (time.perf_counter() - start) / n
    assert per_call < 20e-6, f"rms_norm_supports takes {per_call * 1e6:.1f} us"
