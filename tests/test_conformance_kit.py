"""The conformance kit passes a correct provider and catches each kind of wrong one."""

from __future__ import annotations

from typing import Optional

import pytest
import torch

import ircore
from ircore import _signature
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


def test_outputs_that_differ_from_the_compiled_ops_fake_are_caught():
    def strided(x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None) -> torch.Tensor:
        return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size)  # keeps a transposed x's layout

    ircore.ops.rms_norm.register_impl("kit_strided", strided)
    with pytest.raises(AssertionError) as err:
        check_provider("kit_strided", seeds=(0,), dtypes=(torch.float32,))
    message = str(err.value)
    assert "[6x64 transposed (last-dim stride 6)]" in message
    assert "strides (1, 6), but torch.ops.ircore_kit_strided.rms_norm" in message and "strides (64, 1)" in message
    assert "return contiguous outputs (what the core's op declares)" in message


def test_a_fake_that_fails_is_caught_before_torch_compile_is():
    def fine(x: torch.Tensor, weight: Optional[torch.Tensor], epsilon: float, variance_size: Optional[int] = None) -> torch.Tensor:
        return ircore.ops.rms_norm.native(x, weight, epsilon, variance_size).contiguous()

    def broken_fake(x, weight, epsilon, variance_size=None):
        raise NotImplementedError("no meta kernel")

    ircore.ops.rms_norm.register_impl("kit_nofake", fine, fake=broken_fake)
    with pytest.raises(AssertionError) as err:
        check_provider("kit_nofake", seeds=(0,), dtypes=(torch.float32,))
    message = str(err.value)
    assert "torch.ops.ircore_kit_nofake.rms_norm (what compiled graphs hold for it) fails on fake tensors" in message
    assert "NotImplementedError: no meta kernel" in message


def _row_major_group_quant(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dynamic_group_quant_fp8's values with row-major scales whatever ``column_major`` asks."""
    q, scales = ircore.ops.dynamic_group_quant_fp8.native(
        x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    return q.contiguous(), scales.contiguous()


def test_group_scales_in_the_wrong_layout_are_caught():
    """A group quant kernel that returns row-major scales for column_major=True, with a fake that
    says so (so the fake check passes): the values are right, the layout is not."""
    op = ircore.ops.dynamic_group_quant_fp8
    op.register_impl("kit_rows", _row_major_group_quant, fake=_row_major_group_quant)
    with pytest.raises(AssertionError) as err:
        check_provider("kit_rows", seeds=(0,), dtypes=(torch.float32,))
    message = str(err.value)
    assert "output dynamic_group_quant_fp8[1] has strides" in message and "column-major group" in message
    assert "return that layout (the fake ircore builds declares it" in message


def test_group_scales_in_the_wrong_layout_without_a_fake_are_told_the_ops_layout():
    """The same kernel without a fake: the compiled op's fake (ircore's, the op's layouts) differs
    from what it returns, and the message says to return the op's layout, not 'contiguous'."""
    ircore.ops.dynamic_group_quant_fp8.register_impl("kit_rows_nofake", _row_major_group_quant)
    with pytest.raises(AssertionError) as err:
        check_provider("kit_rows_nofake", seeds=(0,), dtypes=(torch.float32,))
    message = str(err.value)
    assert "but torch.ops.ircore_kit_rows_nofake.dynamic_group_quant_fp8" in message
    assert "return output 1 in that layout, strides (1, " in message and "contiguous" not in message


def test_group_scales_in_the_ops_layout_need_no_fake():
    """A group quant kernel returning what the op promises (contiguous q, scales column-major as
    asked; here the native itself) passes with the fake ircore builds: it keeps the layouts of the
    op's contract."""
    op = ircore.ops.dynamic_group_quant_fp8
    samples = [s.args for s in op.sample_inputs(torch.float32, "cpu")]
    assert sum(not op.native(*args)[1].is_contiguous() for args in samples) >= 3  # the case at stake
    op.register_impl("kit_cols", op.native)
    report = check_provider("kit_cols", seeds=(0,), dtypes=(torch.float32,))
    assert report.checked["dynamic_group_quant_fp8"] == len(samples)


@pytest.mark.skipif(_signature.signature is None, reason="needs the call-signature helper (signatures to compare)")
def test_a_cache_by_signature_claim_that_depends_on_the_rows_is_caught():
    def few_rows(x, weight, epsilon, variance_size):
        return x.shape[0] < 5  # the number of rows is not part of the call signature

    ircore.ops.rms_norm.register_impl("kit_rows", rms_norm_a, supports_args=few_rows, cache_by_signature=True)
    with pytest.raises(AssertionError) as err:
        check_provider("kit_rows", seeds=(0,), dtypes=(torch.float32,))
    message = str(err.value)
    assert "the same call signature with another number of rows" in message and "cache_by_signature=True" in message


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
