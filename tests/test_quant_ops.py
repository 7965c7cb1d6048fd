"""FP8 quant ops and the fused norm/act + quant ops: natives against fp64 references and vLLM's
formulas, the constants at the edges, the fused natives against the unfused chains (bitwise),
every check's message, the kit's fp8 comparison, and one compiled call."""

from __future__ import annotations

import re

import pytest
import torch

import ircore
from ircore.errors import InvalidArgumentError
from ircore.ops import _quant
from ircore.testing import compare_to_reference

FN, FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
UNFUSED = ("static_quant_fp8", "static_group_quant_fp8", "dynamic_quant_fp8", "dynamic_group_quant_fp8")
FUSED = (
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
    "silu_and_mul_group_quant_fp8",
)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes (NaN equals NaN, -0 differs from 0): for bitwise comparisons. Flat, so
    an empty tensor with a zero stride (no rows of column-major scales) has bytes too: none."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: object, b: object) -> bool:
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.stride() == y.stride() and torch.equal(bits(x), bits(y))
        for x, y in zip(a, b)
    )


# ---------------------------------------------------------------------- natives vs references
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op_name", UNFUSED + FUSED)
def test_native_matches_fp64_reference_within_one_fp8_ulp(op_name, dtype):
    """Every sample (all-zero rows and groups, |x| past the fp8 maximum and inf, ragged groups,
    M == K, e4m3fnuz, column-major, ue8m0 and TMA-aligned scales, padding): native is within the
    kit's fp8 comparison of the fp64 reference (one ulp; half an ulp is the rounding itself)."""
    op = ircore.get_op(op_name)
    samples = list(op.sample_inputs(dtype, "cpu", seed=0))
    assert len(samples) >= 3
    for sample in samples:
        result = compare_to_reference(op, op(*sample.args), sample.args, label=sample.label)
        assert result.ok, result.problem
        assert result.worst <= 0.51 or sample.args[0].dtype != torch.float32 or op_name in FUSED, sample.label


def test_samples_cover_the_promised_fixtures():
    labels = " | ".join(
        s.label
        for name in UNFUSED
        for s in ircore.get_op(name).sample_inputs(torch.bfloat16, "cpu")
    )
    for needle in (
        "zero row", "zero groups", "all zeros", "beyond the fp8 max and inf", "ragged last group",
        "M == K", "e4m3fnuz (max 224)", "column-major", "ue8m0", "TMA-aligned", "padded",
    ):  # fmt: skip
        assert needle in labels, needle


# ---------------------------------------------------------------------- static: exact
def _vllm_static(x, scale2d, fp8_dtype, fp8_max):
    """vLLM's quant_fp8 written out: x.float() * reciprocal(group-broadcast scale), clamped, cast."""
    m, k = x.shape[-2:]
    s = scale2d.float()
    s = s.repeat_interleave(m // s.shape[0], 0).repeat_interleave(k // s.shape[1], 1)
    return (x.float() * s.reciprocal()).clamp(-fp8_max, fp8_max).to(fp8_dtype)


@pytest.mark.parametrize(
    ("scale_shape", "as_2d"),
    [((), (1, 1)), ((1,), (1, 1)), ((64,), (1, 64)), ((12,), (12, 1)), ((12, 1), (12, 1)), ((4, 2), (4, 2))],
    ids=["0-d", "(1,)", "per-channel", "per-token", "per-token 2-D", "groups"],
)
@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_static_quant_is_exactly_vllms_formula(scale_shape, as_2d, fp8_dtype):
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(12, 64, generator=gen) * 3).to(torch.bfloat16)
    x[0, 0], x[1, 1], x[2, 2] = float("inf"), -1e4, 0.0
    scale = torch.rand(scale_shape, generator=gen) * 0.01 + 0.004
    expected = _vllm_static(x, scale.reshape(as_2d), fp8_dtype, 224.0 if fp8_dtype == FNUZ else 448.0)
    for name in ("static_quant_fp8", "static_group_quant_fp8"):
        got = ircore.get_op(name)(x, scale, fp8_dtype)
        assert same_bits(got, expected), name
    # scale invariance, as vLLM's test: (2x, 2s) quantises to the same bits
    assert same_bits(ircore.ops.static_quant_fp8(x * 2, scale * 2, fp8_dtype), expected)


def test_fp8_maxima_clamp_before_the_cast_and_fnuz_stops_at_224():
    x = torch.tensor([[1000.0, -1000.0, 300.0, float("inf"), float("-inf"), 230.0, 1.0, 0.0]])
    one = torch.ones(())
    fn = ircore.ops.static_quant_fp8(x, one, FN).float()
    assert fn.tolist() == [[448.0, -448.0, 288.0, 448.0, -448.0, 224.0, 1.0, 0.0]]
    fnuz = ircore.ops.static_quant_fp8(x, one, FNUZ).float()
    assert fnuz.tolist() == [[224.0, -224.0, 224.0, 224.0, -224.0, 224.0, 1.0, 0.0]]
    assert _quant.fp8_max(FNUZ) == 224.0 and torch.finfo(FNUZ).max == 240.0
    assert _quant.min_scale(FN) == 1 / (448 * 512) and _quant.min_scale(FNUZ) == 1 / (224 * 512)


def test_a_1d_scale_of_length_k_is_per_channel_even_when_m_equals_k():
    x = torch.ones(4, 4)
    scale = torch.tensor([1.0, 2.0, 4.0, 8.0])
    q = ircore.ops.static_quant_fp8(x, scale, FN).float()
    assert q.tolist() == [[1.0, 0.5, 0.25, 0.125]] * 4  # per channel: each column its scale
    q = ircore.ops.static_quant_fp8(x, scale.reshape(4, 1), FN).float()
    assert q.tolist() == [[1.0] * 4, [0.5] * 4, [0.25] * 4, [0.125] * 4]  # (M, 1): per token


def test_padding_rows_are_zero_and_the_dynamic_scale_is_not_padded():
    x = torch.randn(3, 32)
    q = ircore.ops.static_quant_fp8(x, torch.ones(()), FN, 5)
    assert q.shape == (5, 32) and not q[3:].float().any()
    assert ircore.ops.static_quant_fp8(x, torch.ones(()), FN, 2).shape == (3, 32)  # never fewer rows
    q, scale = ircore.ops.dynamic_quant_fp8(x, True, FN, None, 8)
    assert q.shape == (8, 32) and scale.shape == (3, 1) and not q[3:].float().any()


# ---------------------------------------------------------------------- dynamic and group
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fp8_dtype", [FN, FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_dynamic_and_group_dequantise_within_vllms_test_tolerance(dtype, fp8_dtype):
    """vLLM's tests/kernels/ir/test_quant.py bounds: dequantised within rtol 0.15 / atol 0.01 of
    x; scales > 0 and fp32; vLLM's exact formulas for the scales."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(12, 256, generator=gen).to(dtype)
    x[3] = 0
    fmax = _quant.fp8_max(fp8_dtype)
    for per_token in (True, False):
        q, scale = ircore.ops.dynamic_quant_fp8(x, per_token, fp8_dtype)
        amax = x.float().abs().amax(-1, keepdim=True) if per_token else x.float().abs().amax().reshape(1)
        assert torch.equal(scale, (amax / fmax).clamp(min=1 / (fmax * 512)))
        assert scale.dtype == torch.float32 and bool((scale > 0).all())
        torch.testing.assert_close(q.float() * scale, x.float(), rtol=0.15, atol=0.01)
    for group, column_major, ue8m0 in ((128, False, False), (64, True, True), (32, False, True)):
        q, scales = ircore.ops.dynamic_group_quant_fp8(x, [1, group], column_major, ue8m0, fp8_dtype)
        raw = x.float().reshape(12, -1, group).abs().amax(-1) / fmax
        if ue8m0:
            raw = torch.exp2(torch.ceil(torch.log2(raw)))
            # powers of two, except the floor of all-zero groups (vLLM floors after rounding up)
            nonzero = torch.log2(scales[torch.arange(12) != 3])
            assert bool((nonzero == nonzero.round()).all())
            assert scales[3].tolist() == [pytest.approx(1 / (fmax * 512))] * scales.shape[1]
        assert torch.equal(scales, raw.clamp(min=1 / (fmax * 512)))
        assert scales.stride() == ((1, 12) if column_major else (256 // group, 1))
        dq = q.float().reshape(12, -1, group) * scales.unsqueeze(-1)
        torch.testing.assert_close(dq.reshape(12, 256), x.float(), rtol=0.15, atol=0.01)


def test_zero_rows_and_groups_get_the_floor_scale_not_nan():
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    x[1, 32:] = 1.0
    q, scale = ircore.ops.dynamic_quant_fp8(x, True, FN)
    assert scale[0].item() == pytest.approx(1 / (448 * 512)) and not q.float().isnan().any()
    q, scales = ircore.ops.dynamic_group_quant_fp8(x, [1, 32], False, True, FN)
    assert scales[0].tolist() == [pytest.approx(1 / (448 * 512))] * 2 and not q.float().isnan().any()
    q, scale = ircore.ops.dynamic_quant_fp8(torch.zeros(3, 8), False, FN)
    assert scale.shape == (1,) and not q.float().any()


def test_scale_ub_bounds_the_per_token_amax_only():
    x = torch.tensor([[1000.0, float("inf"), 1.0], [2.0, 1.0, 0.5]])
    ub = torch.tensor([100.0])
    q, scale = ircore.ops.dynamic_quant_fp8(x, True, FN, ub)
    assert scale.flatten().tolist() == pytest.approx([100 / 448, 2 / 448])
    assert q[0, :2].float().tolist() == [448.0, 448.0]  # past the bound: clamped, not NaN
    _, scale = ircore.ops.dynamic_quant_fp8(x[1:], False, FN, ub)  # per tensor: ignored, as vLLM
    assert scale.tolist() == pytest.approx([2 / 448])


def test_ragged_last_group_and_tma_aligned_column_major_scales():
    x = torch.randn(5, 200)
    q, scales = ircore.ops.dynamic_group_quant_fp8(x, [1, 64], True, False, FN, 4)
    assert q.shape == (5, 200) and scales.shape == (5, 4)
    assert q.is_contiguous()  # rows of K, as kernels return them (not a view of a padded buffer)
    assert scales.stride() == (1, 8)  # 5 rows rounded up to 16 bytes of fp32: 8
    assert scales[:, 3].tolist() == pytest.approx((x[:, 192:].abs().amax(-1) / 448).tolist())
    _, rows = ircore.ops.dynamic_group_quant_fp8(x, (64,), False, False, FN, 4)
    assert rows.stride() == (4, 1) and torch.equal(rows, scales)  # row-major ignores the alignment
    # no rows: no scale rows either, in whichever implementation runs (vllm_c allocated one)
    q0, none = ircore.ops.dynamic_group_quant_fp8(x[:0], [1, 64], True, False, FN, 4)
    assert q0.shape == (0, 200) and none.shape == (0, 4)


def test_an_output_without_elements_has_no_layout_to_match():
    # as Inductor's stride asserts: strides of an empty tensor address nothing, so any will do
    from torch._C._dynamo.guards import assert_size_stride

    from ircore._torch_ops import same_strides

    assert same_strides((0, 4), (1, 0), (4, 1))
    assert_size_stride(torch.empty_strided((0, 4), (1, 0)), (0, 4), (4, 1))  # passes
    assert not same_strides((5, 4), (1, 8), (4, 1))
    with pytest.raises(AssertionError):
        assert_size_stride(torch.empty_strided((5, 4), (1, 8)), (5, 4), (4, 1))


def test_ue8m0_scale_of_an_exact_power_of_two_stays_put():
    """ue8m0 rounds ``amax / fp8_max`` up to a power of two; one that is a power of two already
    (amax 7 = 448 / 64) stays, the next bf16 value above it (7.03125) goes up: natives and the
    fp64 reference alike, exactly (no log2 rounding)."""
    x = torch.zeros(2, 128, dtype=torch.bfloat16)
    x[0, 5], x[1, 9] = 7.0, 7.03125
    op = ircore.ops.dynamic_group_quant_fp8
    args = (x, [1, 128], False, True, FN, 1)
    _, scales = op(*args)
    _, ref = op.reference(*args)
    assert scales[:, 0].tolist() == ref[:, 0].tolist() == [2.0**-6, 2.0**-5]
    assert _quant.pow2_ceil(torch.tensor([0.0, 2.0**-126, 0.75, float("inf")])).tolist() == [0.0, 2.0**-126, 1.0, float("inf")]


def test_per_tensor_dynamic_quant_is_declared_batch_dependent():
    """``register_op(batch_dependent=...)`` of the three dynamic ops: per tensor only, with the
    reason and what to change (batch-invariant mode refuses these calls with it)."""
    x = torch.randn(2, 8)
    for name, per_token_at in (
        ("dynamic_quant_fp8", 1),
        ("rms_norm_dynamic_quant_fp8", 3),
        ("fused_add_rms_norm_dynamic_quant_fp8", 4),
    ):
        op = ircore.get_op(name)
        args = list(op.make_inputs((2, 8), torch.float32, "cpu"))
        assert args[per_token_at] is True and op.batch_dependent(*args) is None
        args[per_token_at] = False
        why = op.batch_dependent(*args)
        assert "per_token=False" in why and "per_token=True" in why, why
    # the scale of a row changes with the rest of the batch
    alone = ircore.ops.dynamic_quant_fp8(x[:1], False, FN)[1]
    assert alone.item() != ircore.ops.dynamic_quant_fp8(torch.cat([x[:1], x[1:] * 100]), False, FN)[1].item()


# ---------------------------------------------------------------------- fused == unfused, bitwise
def _unfused(name: str, args: tuple) -> object:
    ops = ircore.ops
    if name.startswith("silu_and_mul"):
        y = ops.silu_and_mul(args[0])
        quant = ops.static_quant_fp8 if "static" in name else ops.dynamic_group_quant_fp8
        return quant(y, *args[1:])
    if name.startswith("fused_add"):
        x, r, w, eps, *rest = args
        y, residual = ops.fused_add_rms_norm(x, r, w, eps)
    else:
        x, w, eps, *rest = args
        y, residual = ops.rms_norm(x, w, eps), None
    if "static" in name:
        out = ops.static_quant_fp8(y, *rest)
        return out if residual is None else (out, residual)
    quant = ops.dynamic_quant_fp8 if "dynamic" in name else ops.dynamic_group_quant_fp8
    outs = quant(y, *rest)
    return outs if residual is None else (*outs, residual)


@pytest.mark.parametrize("op_name", FUSED)
def test_fused_native_equals_the_unfused_chain_bitwise(op_name):
    op = ircore.get_op(op_name)
    for dtype in (torch.bfloat16, torch.float32):
        for sample in op.sample_inputs(dtype, "cpu", seed=1):
            assert same_bits(op(*sample.args), _unfused(op_name, sample.args)), (dtype, sample.label)


def test_the_residual_is_rounded_before_the_variance_as_fused_add_rms_norm():
    """One convention: the sum in fp32, rounded to x's dtype, the variance from the rounded sum."""
    x = torch.tensor([[1.0, 2.0**-9, 3.0, 4.0]], dtype=torch.bfloat16)
    r = torch.tensor([[256.0, 256.0, 0.0, 0.0]], dtype=torch.bfloat16)
    q, residual = ircore.ops.fused_add_rms_norm_static_fp8_quant(x, r, None, 1e-6, torch.ones(()), FN)
    assert residual[0, 1].item() == 256.0  # 256 + 2^-9 rounds back to 256 in bf16
    assert same_bits(q, ircore.ops.static_quant_fp8(ircore.ops.rms_norm(residual, None, 1e-6), torch.ones(()), FN))


# ---------------------------------------------------------------------- checks
X = torch.randn(4, 64)
W8 = torch.ones(64)
ONE = torch.ones(())
META = torch.ones((), device="meta")
BAD = [
    ("static_quant_fp8", (X, ONE, torch.float16), "fp8_dtype", "expected one of torch.float8_e4m3fn"),
    ("static_quant_fp8", (X[0], ONE, FN), "x", "expected at least 2 dimensions"),
    ("static_quant_fp8", (X.long(), ONE, FN), "x", "has dtype torch.int64"),
    ("static_quant_fp8", (torch.randn(4, 0), ONE, FN), "x", "empty last dimension"),
    ("static_quant_fp8", (X, torch.ones(5), FN), "scale", "does not broadcast over x's last two dimensions (M, K) = (4, 64)"),
    # the silu form's scale fits its output (K/2 wide): the message says whose dimensions those are
    ("silu_and_mul_static_quant_fp8", (X, torch.ones(64), FN), "scale",
     "does not broadcast over the output's last two dimensions (x's, the last one halved) (M, K) = (4, 32)"),
    ("static_quant_fp8", (X, torch.ones(3, 64), FN), "scale", "sizes divide M and K"),
    ("static_quant_fp8", (X, torch.ones(2, 2, 2), FN), "scale", "does not broadcast"),
    ("static_quant_fp8", (X, torch.ones(1, dtype=torch.int32), FN), "scale", "has dtype torch.int32"),
    ("static_quant_fp8", (X, META, FN), "scale", "is on meta but x is on cpu"),
    ("static_quant_fp8", (X, ONE, FN, -1), "num_token_padding", "expected None or a count >= 0"),
    ("static_group_quant_fp8", (X, torch.ones(3, 3), FN), "scale", "does not broadcast"),
    ("dynamic_quant_fp8", (X, True, FNUZ, torch.ones(2)), "scale_ub", "expected one float32 element"),
    ("dynamic_quant_fp8", (X, True, FN, META), "scale_ub", "is on meta"),
    ("dynamic_quant_fp8", (torch.randn(0, 8), False, FN), "x", "a per-tensor scale needs at least one"),
    ("dynamic_quant_fp8", (X, True, torch.float8_e5m2), "fp8_dtype", "is torch.float8_e5m2"),
    ("dynamic_group_quant_fp8", (X, [2, 32], False, False, FN), "group_shape", "expected (1, g) or (g,)"),
    ("dynamic_group_quant_fp8", (X, [1, 0], False, False, FN), "group_shape", "g >= 1"),
    ("dynamic_group_quant_fp8", (X, [1, 1, 32], False, False, FN), "group_shape", "expected (1, g)"),
    ("dynamic_group_quant_fp8", (X, [1, 32], True, False, FN, 3), "scale_alignment", "is 3; expected 1"),
    ("dynamic_group_quant_fp8", (X.reshape(2, 2, 64), [1, 32], True, False, FN, 4), "x", "need a 2-D x"),
    ("rms_norm_static_fp8_quant", (X, torch.ones(8), 1e-6, ONE, FN), "weight", "expected (64,)"),
    ("rms_norm_static_fp8_quant", (X, W8, -1.0, ONE, FN), "epsilon", "expected a number >= 0"),
    ("rms_norm_static_fp8_quant", (X, W8, 1e-6, torch.ones(3), FN), "scale", "does not broadcast"),
    ("fused_add_rms_norm_static_fp8_quant", (X, X[:2], W8, 1e-6, ONE, FN), "x_residual", "expected x's dtype and shape"),
    ("fused_add_rms_norm_static_fp8_quant", (X, X.to("meta"), W8, 1e-6, ONE, FN), "x_residual", "is on meta"),
    ("rms_norm_dynamic_quant_fp8", (X, W8, 1e-6, True, FN, torch.ones(3)), "scale_ub", "one float32 element"),
    ("fused_add_rms_norm_dynamic_quant_fp8", (X, X.half(), W8, 1e-6, True, FN), "x_residual", "expected x's dtype"),
    ("fused_add_rms_norm_dynamic_quant_fp8", (X[:0], X[:0], W8, 1e-6, False, FN), "x", "per-tensor scale"),
    ("rms_norm_group_quant_fp8", (X, W8, 1e-6, [4, 32], False, False, FN), "group_shape", "expected (1, g)"),
    ("fused_add_rms_norm_group_quant_fp8", (X, X, W8, 1e-6, [1, 32], False, False, torch.int8), "fp8_dtype", "is torch.int8"),
    ("silu_and_mul_static_quant_fp8", (torch.randn(4, 63), ONE, FN), "x", "it must be even"),
    ("silu_and_mul_static_quant_fp8", (X, torch.ones(64), FN), "scale", "(M, K) = (4, 32)"),
    ("silu_and_mul_group_quant_fp8", (X, [1, 32], False, False, FN, 5), "scale_alignment", "is 5"),
    ("silu_and_mul_group_quant_fp8", (torch.randn(64), [1, 32], False, False, FN), "x", "at least 2 dimensions"),
]  # fmt: skip


@pytest.mark.parametrize(("op_name", "args", "arg", "fragment"), BAD, ids=[f"{b[0]}-{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_every_check_names_the_argument_and_the_fix(op_name, args, arg, fragment):
    op = ircore.get_op(op_name)
    with pytest.raises(InvalidArgumentError, match=rf"^ircore\.ops\.{op_name}: argument '{arg}' ") as info:
        op(*args)
    assert fragment in str(info.value)


def test_a_mode_flag_that_is_not_a_bool_is_refused_by_its_annotation():
    with pytest.raises(InvalidArgumentError, match=re.escape("argument 'per_token' must be a bool, got 1")):
        ircore.ops.dynamic_quant_fp8(X, 1, FN)
    with pytest.raises(InvalidArgumentError, match=re.escape("argument 'fp8_dtype' must be a torch.dtype")):
        ircore.ops.static_quant_fp8(X, ONE, "e4m3fn")


# ---------------------------------------------------------------------- the kit's fp8 comparison
def _case():
    op = ircore.ops.dynamic_quant_fp8
    x = torch.randn(6, 128, generator=torch.Generator().manual_seed(9)) * 3
    return op, (x, True, FNUZ, None, 8)


def _moved(q: torch.Tensor, steps: int, where: tuple[int, int]) -> torch.Tensor:
    """q with one element moved ``steps`` fp8 values up (in magnitude) by its bits."""
    b = q.view(torch.uint8).clone()
    b[where] += steps
    return b.view(q.dtype)


def test_fp8_edge_rows_at_a_kernel_width_pass_against_the_reference():
    """ircore.testing.fp8_edge_rows: any width (a ragged last group here), every quant kind."""
    x = ircore.testing.fp8_edge_rows(1000, torch.bfloat16, "cpu")
    assert not x[1].float().any() and not x[2, :128].float().any() and x[4].float().isinf().sum() == 2
    finite = x[[0, 1, 2, 3, 5]]
    cases = [
        (ircore.ops.static_quant_fp8, (x, torch.full((1,), 0.01), FN, 8)),
        (ircore.ops.dynamic_quant_fp8, (x, True, FNUZ, torch.tensor([50.0]), None)),
        (ircore.ops.dynamic_quant_fp8, (finite, False, FN, None, None)),
        (ircore.ops.dynamic_group_quant_fp8, (finite, [1, 128], True, True, FN, 4)),
    ]
    for op, args in cases:
        result = compare_to_reference(op, op(*args), args)
        assert result.ok, result.problem


def test_kit_allows_one_fp8_ulp_and_refuses_two():
    op, args = _case()
    q, scale = op(*args)
    where = (2, int(q[2].float().abs().argmax()) - 1)
    assert compare_to_reference(op, (_moved(q, 1, where), scale), args).ok
    two = compare_to_reference(op, (_moved(q, 2, where), scale), args)
    assert not two.ok and "more than one fp8 ulp" in two.problem and "dequantised" in two.problem


def test_kit_refuses_the_fnuz_maximum_240_and_nan_from_a_missing_clamp():
    op = ircore.ops.static_quant_fp8
    x = torch.tensor([[1000.0, 2.0, -1000.0, 3.0]])
    args = (x, torch.ones(()), FNUZ, None)
    good = op(*args)
    assert good.float().tolist() == [[224.0, 2.0, -224.0, 3.0]]
    at_240 = good.clone()
    at_240[0, 0] = 240.0  # finfo.max: one fp8 ulp above vLLM's 224, still refused
    result = compare_to_reference(op, at_240, args)
    assert not result.ok and "1 of 4 elements beyond ±224, the op's clamp; first at index (0, 0)" in result.problem
    unclamped = x.to(FNUZ)  # the cast alone: NaN past 240 on torch 2.11
    unclamped[0, 0] = float("nan")
    assert not compare_to_reference(op, unclamped, args).ok


def test_kit_never_compares_padding_rows_but_compares_scales_with_the_op_tolerance():
    op, args = _case()
    q, scale = op(*args)
    garbage = q.clone()
    garbage[6:] = 100.0  # vLLM's CUDA kernel leaves padding rows uninitialised
    assert compare_to_reference(op, (garbage, scale), args).ok
    off = compare_to_reference(op, (q, scale * 1.001), args)
    assert not off.ok and "output 1" in off.problem


def test_an_implementation_with_the_wrong_clamp_fails_the_conformance_kit(ircore_isolated):
    """End to end through check_provider: a right implementation passes every sample, one that
    clamps e4m3fnuz at finfo.max (240) fails naming the sample."""
    op = ircore.ops.static_quant_fp8

    def right(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None) -> torch.Tensor:
        return op.native(x, scale, fp8_dtype, num_token_padding)

    def finfo_max(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None) -> torch.Tensor:
        m = torch.finfo(fp8_dtype).max
        s = _quant.group_broadcast(_quant.prep_static_scale(scale, x).float(), tuple(x.shape[-2:]))
        return _quant.pad_rows((x.float() / s).clamp(-m, m).to(fp8_dtype), num_token_padding)

    op.register_impl("right", right)
    report = ircore.testing.check_provider("right", dtypes=(torch.bfloat16,), seeds=(0,), ops=["static_quant_fp8"])
    assert report.checked["static_quant_fp8"] == len(list(op.sample_inputs(torch.bfloat16, "cpu")))
    op.register_impl("finfo_max", finfo_max)
    with pytest.raises(AssertionError, match=r"finfo_max\.static_quant_fp8 \[9x256 per-tensor e4m3fnuz \(max 224\)\] .* beyond ±224"):
        ircore.testing.check_provider("finfo_max", dtypes=(torch.bfloat16,), seeds=(0,), ops=["static_quant_fp8"])


def test_quantized_outputs_is_checked_when_the_op_is_declared(ircore_isolated):
    def native(x: torch.Tensor) -> torch.Tensor:
        return x.to(FN)

    with pytest.raises(ircore.OpDeclarationError, match=r"quantized_outputs .* takes \(outs\) but ircore calls it as quantized_outputs\(args, outputs\)"):
        ircore.register_op(native, name="q_bad", quantized_outputs=lambda outs: {})


# ---------------------------------------------------------------------- compile
@pytest.mark.slow
def test_one_quant_op_compiles_with_the_ircore_backend():
    def f(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return ircore.ops.static_quant_fp8(x * 2, s, FN)

    x, s = torch.randn(4, 32), torch.full((1,), 0.05)
    compiled = torch.compile(f, backend="ircore", fullgraph=True)
    assert same_bits(compiled(x, s), f(x, s))
