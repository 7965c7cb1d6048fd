"""The conformance kit passes a correct provider and catches each kind of wrong one."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

import ircore
from ircore.testing import check_provider

from .impls import fused_inplace, only_fp32, rms_norm_a


def test_correct_provider_passes_and_declines_are_reported():
    ircore.ops.rms_norm.register_impl("kit_ok", rms_norm_a, supports_args=only_fp32)
    ircore.ops.fused_add_rms_norm.register_impl("kit_ok", fused_inplace, inplace=True)
    report = check_provider("kit_ok", seeds=(0,))
    assert report.checked["rms_norm"] > 5 and report.checked["fused_add_rms_norm"] > 15
    assert len(report.declined["rms_norm"]) == report.checked["fused_add_rms_norm"] - report.checked["rms_norm"]
    assert "kit_ok" in str(report)


def test_wrong_numerics_are_caught():
    def sloppy(x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None) -> torch.Tensor:
        return ircore.ops.rms_norm.native(x, weight, epsilon, None)  # ignores variance_size

    ircore.ops.rms_norm.register_impl("kit_bad", sloppy)
    with pytest.raises(AssertionError, match=r"kit_bad.rms_norm \[5x256 variance_size=96\]"):
        check_provider("kit_bad", dtypes=(torch.float32,), seeds=(0,))


def test_mutating_functional_impl_is_caught():
    def mutating(x: torch.Tensor) -> torch.Tensor:
        out = ircore.ops.silu_and_mul.native(x)
        x.mul_(1.0001)
        return out

    ircore.ops.silu_and_mul.register_impl("kit_mut", mutating)
    with pytest.raises(AssertionError, match="the functional call changed argument 'x'"):
        check_provider("kit_mut", dtypes=(torch.float32,), seeds=(0,))


@pytest.mark.parametrize("hidden", [64, 300, 4096])
def test_beyond_fp32_rows_exercise_the_overflow_rule(hidden):
    x = ircore.testing.beyond_fp32_rows(hidden, torch.float32, "cpu")
    assert x.shape == (5, hidden) and x.dtype == torch.float32
    sum_sq = x.double().pow(2).sum(-1)
    fp32_max = torch.finfo(torch.float32).max
    assert (x[0].abs() > fp32_max**0.5).all()  # squares overflow
    assert (x[1].abs() < fp32_max**0.5).all() and sum_sq[1] > fp32_max  # only the sum does
    assert fp32_max / 16 <= sum_sq[2] < fp32_max / 4  # large, and fits (magnitudes [0.25, 0.5) x limit)
    assert torch.isinf(x[4]).sum() == 1
    ref = ircore.ops.rms_norm.reference(x, None, 1e-6, None)
    assert (ref[:2] == 0).all() and (ref[2:4] != 0).all() and ref[4].isnan().any()
    assert torch.equal(x, ircore.testing.beyond_fp32_rows(hidden, torch.float32, "cpu"))
