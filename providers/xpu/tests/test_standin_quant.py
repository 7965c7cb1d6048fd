"""The fp8 quant adapters against the vllm_xpu_kernels._C STAND-IN, on a simulated Intel GPU.

The stand-in models the kernels of csrc/quantization/fp8/fp8_quant.cpp: output buffers passed
in, the rows each one addresses (``stride(-2)`` for the static kernel, contiguous for the
others), float32 scales, e4m3fn/e5m2 only at 448, the per-token floor, the group kernel's
column-major scale addressing and its ue8m0-after-floor order. What the predicates accept is
compared with the op's fp64 reference through the conformance kit's fp8 comparison.
"""

import pytest
import torch

import ircore
from ircore.ops._quant import E4M3FN, E4M3FNUZ
from ircore.testing import assert_close_to_reference, check_provider
from tests.layouts import BF16, FP16, FP32, randn


@pytest.fixture(scope="module")
def kernels(xpu):
    from vllm_xpu_kernels import _C as standin

    assert standin.__doc__.startswith("STAND-IN for ``vllm_xpu_kernels._C``")
    return standin


QUANT_OPS = ("static_quant_fp8", "dynamic_quant_fp8", "dynamic_group_quant_fp8")


def test_conformance_kit(kernels):
    """bf16, one seed (the layouts below cover fp32): every accepted sample right, e4m3fnuz,
    non-per-tensor static scales and ue8m0 declined."""
    calls = dict(kernels.CALLS)
    report = check_provider("xpu", dtypes=(BF16,), seeds=(0,), ops=QUANT_OPS)
    assert all(report.checked[op] > 0 for op in QUANT_OPS), report
    static = " ".join(report.declined["static_quant_fp8"])
    for label in ("e4m3fnuz", "per-channel", "per-token", "group scale"):
        assert label in static, label
    assert "0-d scale" not in static and "row stride 192, padded" not in static
    dynamic = " ".join(report.declined["dynamic_quant_fp8"])
    assert "e4m3fnuz" in dynamic and "a zero row" not in dynamic and "all zeros" not in dynamic
    assert "scale_ub 40, inf" not in dynamic and "row stride 192" in dynamic  # per token: contiguous only
    group = " ".join(report.declined["dynamic_group_quant_fp8"])
    for label in ("ue8m0", "ragged", "row stride 192", "2x3x128 g64 column-major"):
        assert label in group, label
    assert "[5x256 g64 column-major]" not in group and "[5x256 g128, zero groups" not in group
    for name in ("static_scaled_fp8_quant", "dynamic_per_token_scaled_fp8_quant", "per_token_group_fp8_quant"):
        assert kernels.CALLS[name] > calls.get(name, 0), name


CASES = {
    "static per-tensor fp32, 3-D": ("static_quant_fp8", lambda: (randn(2, 3, 64, dtype=FP32), torch.tensor(0.02), E4M3FN, None), True),
    "static per-tensor bf16 scale": ("static_quant_fp8", lambda: (randn(4, 64), torch.tensor([0.02], dtype=BF16), E4M3FN, 6), True),
    "static 3-D middle slice": ("static_quant_fp8", lambda: (randn(4, 6, 64)[:, :3], torch.tensor(0.02), E4M3FN, None), False),
    "per-token fp32 3-D, padded": ("dynamic_quant_fp8", lambda: (randn(2, 3, 64, dtype=FP32), True, E4M3FN, None, 4), True),
    "per-tensor 2-D row-strided": ("dynamic_quant_fp8", lambda: (randn(4, 96)[:, :64], False, E4M3FN, None, None), True),
    "per-token e4m3fnuz": ("dynamic_quant_fp8", lambda: (randn(4, 64), True, E4M3FNUZ, None, None), False),
    "group g32 3-D row-major": ("dynamic_group_quant_fp8", lambda: (randn(2, 3, 128), [1, 32], False, False, E4M3FN, 1), True),
    "group g32 3-D column-major": ("dynamic_group_quant_fp8", lambda: (randn(2, 3, 128), [1, 32], True, False, E4M3FN, 1), False),
    "group g6 (not a multiple of 4)": ("dynamic_group_quant_fp8", lambda: (randn(3, 48), [1, 6], False, False, E4M3FN, 1), False),
}


@pytest.mark.parametrize("label", CASES)
def test_layouts(kernels, label):
    op_name, make, accepted = CASES[label]
    args = make()
    assert (ircore.explain(op_name, *args).chosen == "xpu") is accepted, label
    op = ircore.get_op(op_name)
    assert_close_to_reference(op, op(*args), args, label=label)


def test_group_ue8m0_order_differs_on_a_zero_group(kernels):
    """Why ue8m0 is declined: the kernel floors, then rounds up to a power of two; the op rounds,
    then floors. A zero group's scale: 2^-17 from the kernel, 1/(448*512) from the op."""
    x = randn(2, 64)
    x[0, :32] = 0
    q, s = torch.empty(2, 64, dtype=E4M3FN), torch.empty(2, 2)
    kernels.per_token_group_fp8_quant(x, q, s, 32, 0.0, -448.0, 448.0, True)
    assert s[0, 0].item() == 2.0**-17
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.dynamic_group_quant_fp8, (q, s), (x, [1, 32], False, True, E4M3FN, 1))


def test_standin_refuses_what_the_adapter_never_passes(kernels):
    x = randn(4, 64)
    with pytest.raises(RuntimeError, match="not implemented"):
        kernels.static_scaled_fp8_quant(torch.empty(4, 64, dtype=E4M3FNUZ), x, torch.tensor([0.1]), None)
    with pytest.raises(RuntimeError, match="Float"):
        kernels.static_scaled_fp8_quant(torch.empty(4, 64, dtype=E4M3FN), x, torch.tensor([0.1], dtype=BF16), None)
    with pytest.raises(RuntimeError, match="contiguous"):
        kernels.dynamic_per_token_scaled_fp8_quant(torch.empty(4, 32, dtype=E4M3FN), x[:, :32], torch.empty(4, 1), None)


def test_ops_ircore_built_pass_opcheck(kernels):
    """The op compiled graphs hold for the group quant: schema, the provider's fake (column-major
    scales, strides (1, M)) and the kernel agree (the conformance kit checks the others' outputs
    against their fakes)."""
    ops = torch.ops.ircore_xpu
    torch.library.opcheck(ops.dynamic_group_quant_fp8.default, (randn(4, 128), [1, 32], True, False, E4M3FN, 1))
    torch.library.opcheck(ops.dynamic_group_quant_fp8.default, (randn(2, 3, 64), [1, 32], False, False, E4M3FN, 1))


# ---------------------------------------------------------------------- fused norm/activation + quant
FUSED_OPS = (
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
)
FUSED_KERNELS = (
    "rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_per_token_quant",
    "rms_norm_per_block_quant",
    "silu_and_mul_quant",
)


def test_fused_conformance_kit(kernels):
    """bf16, one seed: every accepted sample of the eight fused ops right against the fp64
    reference (the stand-in's fp32 norm, 448, floor and vector lanes); e4m3fnuz, per-tensor
    dynamic, ue8m0, ragged groups and non-per-tensor static scales declined."""
    calls = dict(kernels.CALLS)
    report = check_provider("xpu", dtypes=(BF16,), seeds=(0,), ops=FUSED_OPS)
    assert all(report.checked[op] > 0 for op in FUSED_OPS), report
    for op in FUSED_OPS:
        declined = " ".join(report.declined[op])
        assert "e4m3fnuz" in declined, op
        assert "0-d scale" not in declined and "a zero row" not in declined, op
    dynamic = " ".join(report.declined["rms_norm_dynamic_quant_fp8"])
    assert "per-tensor]" in dynamic and "scale_ub" not in dynamic
    for op in ("rms_norm_group_quant_fp8",):
        group = " ".join(report.declined[op])
        assert "ue8m0" in group and "ragged" in group and "zero groups" not in group, op
    static = " ".join(report.declined["rms_norm_static_fp8_quant"])
    assert "group scale" in static and "row stride 192" not in static
    for name in FUSED_KERNELS:
        assert kernels.CALLS[name] > calls.get(name, 0), name


def _scale(value=0.02, dtype=torch.float32):
    return torch.tensor([value], dtype=dtype)


FUSED_CASES = {
    # static: rows at stride(-2) with a unit last stride; the weight of x's dtype
    "static 2-D row-strided fp32": ("rms_norm_static_fp8_quant", lambda: (randn(4, 96, dtype=FP32)[:, :64], None, 1e-6, _scale(), E4M3FN, 6), True),
    "static 3-D middle slice": ("rms_norm_static_fp8_quant", lambda: (randn(4, 6, 64)[:, :3], None, 1e-6, _scale(), E4M3FN, None), False),
    "static fp32 weight, bf16 x": ("rms_norm_static_fp8_quant", lambda: (randn(4, 64), randn(64, dtype=FP32), 1e-6, _scale(), E4M3FN, None), False),
    "add static, transposed residual": ("fused_add_rms_norm_static_fp8_quant", lambda: (randn(4, 64), randn(64, 4).t(), randn(64), 1e-6, _scale(dtype=BF16), E4M3FN, None), True),
    # dynamic: per token only, contiguous x
    "per-token 3-D, scale_ub, padded": ("rms_norm_dynamic_quant_fp8", lambda: (randn(2, 3, 64), randn(64), 1e-6, True, E4M3FN, torch.tensor(0.5), 8), True),
    "add per-token fp32, row-strided residual": ("fused_add_rms_norm_dynamic_quant_fp8", lambda: (randn(4, 64, dtype=FP32), randn(4, 96, dtype=FP32)[:, :64], None, 1e-6, True, E4M3FN, None, None), True),
    "per-token row-strided x": ("rms_norm_dynamic_quant_fp8", lambda: (randn(4, 96)[:, :64], None, 1e-6, True, E4M3FN, None, None), False),
    # group: lanes = g / (16 / itemsize) a power of two up to 32; contiguous x
    "group bf16 g64 column-major": ("rms_norm_group_quant_fp8", lambda: (randn(5, 256), randn(256), 1e-6, [1, 64], True, False, E4M3FN, 1), True),
    "add group fp32 g32 3-D": ("fused_add_rms_norm_group_quant_fp8", lambda: (randn(2, 3, 128, dtype=FP32), randn(2, 3, 128, dtype=FP32), None, 1e-6, [1, 32], False, False, E4M3FN, 1), True),
    "group bf16 g24 (3 lanes)": ("rms_norm_group_quant_fp8", lambda: (randn(3, 96), None, 1e-6, [1, 24], False, False, E4M3FN, 1), False),
    "group bf16 g4 (0 lanes)": ("rms_norm_group_quant_fp8", lambda: (randn(3, 64), None, 1e-6, [1, 4], False, False, E4M3FN, 1), False),
    "group bf16 g512 (64 lanes)": ("rms_norm_group_quant_fp8", lambda: (randn(2, 512), None, 1e-6, [1, 512], False, False, E4M3FN, 1), False),
    "group bf16 row of 33 KiB": ("rms_norm_group_quant_fp8", lambda: (randn(1, 16512), None, 1e-6, [1, 128], False, False, E4M3FN, 1), False),
    "group column-major, alignment 4": ("rms_norm_group_quant_fp8", lambda: (randn(5, 128), None, 1e-6, [1, 64], True, False, E4M3FN, 4), False),
    # silu: fp16/bf16, contiguous; groups of 32, 64 or 128
    "silu static fp16 3-D, padded": ("silu_and_mul_static_quant_fp8", lambda: (randn(2, 3, 128, dtype=FP16), _scale(0.01), E4M3FN, 9), True),
    "silu static fp32": ("silu_and_mul_static_quant_fp8", lambda: (randn(4, 128, dtype=FP32), _scale(0.01), E4M3FN, None), False),
}


@pytest.mark.parametrize("label", FUSED_CASES)
def test_fused_layouts(kernels, label):
    """Each predicate boundary (the same answer on fake tensors, as at compile time), and the
    op's numbers whichever provider runs."""
    from ircore_xpu import impls
    from torch._subclasses.fake_tensor import FakeTensorMode

    op_name, make, accepted = FUSED_CASES[label]
    args = make()
    assert (ircore.explain(op_name, *args).chosen == "xpu") is accepted, label
    with FakeTensorMode() as mode:
        fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        assert getattr(impls, op_name + "_supports")(*fake) is accepted, label
    op = ircore.get_op(op_name)
    assert_close_to_reference(op, op(*args), args, label=label)


def test_fused_declined_layouts_are_misread(kernels):
    """Why the predicates decline: the static kernel reads a 3-D slice's rows at ``stride(-2)``
    (the batch stride lost); the block kernel reduces 3-lane groups (g24 in bf16) over 4 lanes,
    mixing neighbouring groups; it rounds the scale up to a power of two after the floor."""
    x = randn(4, 6, 64)[:, :3]
    w = torch.ones(64, dtype=BF16)
    q = torch.empty(x.shape, dtype=E4M3FN)
    kernels.rms_norm_static_fp8_quant(q, x, w, _scale(), 1e-6)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rms_norm_static_fp8_quant, q, (x, None, 1e-6, _scale(), E4M3FN, None))
    x = randn(3, 96)
    x[:, 24:48] *= 8  # the second group's amax leaks into the first's
    w = torch.ones(96, dtype=BF16)
    q, s = torch.empty(3, 96, dtype=E4M3FN), torch.empty(3, 4)
    kernels.rms_norm_per_block_quant(q, x, w, s, 1e-6, None, None, 24, False)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rms_norm_group_quant_fp8, (q, s), (x, None, 1e-6, [1, 24], False, False, E4M3FN, 1))
    x = torch.zeros(2, 64, dtype=BF16)
    q, s = torch.empty(2, 64, dtype=E4M3FN), torch.empty(2, 2)
    kernels.rms_norm_per_block_quant(q, x, torch.ones(64, dtype=BF16), s, 1e-6, None, None, 32, False, True)
    assert s[0, 0].item() == 2.0**-17  # the op: 1 / (448 * 512)


def test_fused_ops_ircore_built_pass_opcheck(kernels):
    """The group ops' fakes (column-major scales, strides (1, M)) agree with the kernels: opcheck
    on the op with most outputs, the others' fakes compared with their results directly."""
    torch.library.opcheck(
        torch.ops.ircore_xpu.fused_add_rms_norm_group_quant_fp8.default,
        (randn(4, 128), randn(4, 128), None, 1e-6, [1, 64], True, False, E4M3FN, 1),
    )
    from ircore_xpu import impls

    for name, args in (
        ("rms_norm_group_quant_fp8", (randn(4, 128), randn(128), 1e-6, [1, 64], True, False, E4M3FN, 1)),
    ):
        real, fake = getattr(impls, name)(*args), getattr(impls, name + "_fake")(*args)
        assert [(t.shape, t.stride(), t.dtype) for t in real] == [(t.shape, t.stride(), t.dtype) for t in fake], name


def test_silu_group_adapter(kernels):
    """silu_and_mul_group_quant_fp8 over ``_C.silu_and_mul_per_block_quant``: right on the
    stand-in (row- and column-major, 3-D), its predicate's boundaries, and its fake; in the table
    with that fake (the kit's fp16 gradient probe no longer overflows on its all-zero group)."""
    from ircore_xpu import impls, provider

    spec = provider.IRCORE_IMPLEMENTATIONS["silu_and_mul_group_quant_fp8"]
    assert spec.fake == "ircore_xpu.impls:silu_and_mul_group_quant_fp8_fake"
    op = ircore.ops.silu_and_mul_group_quant_fp8
    calls = kernels.CALLS["silu_and_mul_per_block_quant"]
    for args, accepted in (
        ((randn(5, 256), [1, 64], True, False, E4M3FN, 1), True),
        ((randn(2, 3, 128, dtype=FP16), [1, 32], False, False, E4M3FN, 1), True),
        ((randn(5, 64), [1, 16], False, False, E4M3FN, 1), False),  # groups of 32, 64 or 128 only
        ((randn(5, 256, dtype=FP32), [1, 64], False, False, E4M3FN, 1), False),  # fp16/bf16 only
        ((randn(5, 256), [1, 64], False, True, E4M3FN, 1), False),  # ue8m0 after the floor
        ((randn(2, 3, 128), [1, 32], True, False, E4M3FN, 1), False),  # column-major on 3-D
    ):
        assert impls.silu_and_mul_group_quant_fp8_supports(*args) is accepted, args[1:]
        if accepted:
            real, fake = impls.silu_and_mul_group_quant_fp8(*args), impls.silu_and_mul_group_quant_fp8_fake(*args)
            assert_close_to_reference(op, real, args)
            assert [(t.shape, t.stride()) for t in real] == [(t.shape, t.stride()) for t in fake]
    assert kernels.CALLS["silu_and_mul_per_block_quant"] == calls + 2
