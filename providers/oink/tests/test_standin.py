"""The adapter against the KernelAgent-Oink STAND-IN (tests/standins/kernelagent_oink), on a
simulated Blackwell GPU.

The stand-in takes Oink's CuTeDSL pointer path only for the layouts the real one does and counts
each call's path, so these tests check both the numbers (against the op's fp64 reference) and
that the predicates send Oink only fast-path calls, at every boundary of Oink's layout rules.
"""

from collections import Counter

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ircore
from ircore.testing import assert_close_to_reference, check_provider, compiled_code
from tests.layouts import (
    BF16,
    FP16,
    FP32,
    assert_dispatched,
    misaligned,
    qk_heads,
    randn,
    weight,
)


@pytest.fixture(scope="module")
def oink(blackwell):
    import kernelagent_oink as standin

    assert ircore.ops.rms_norm.impls["oink"].fn.__module__ == "ircore_oink.impls"
    assert standin.__doc__.startswith("STAND-IN for KernelAgent-Oink")
    return standin


# (label, x, accepted): Oink's rules at each boundary
NORM = {
    "2-D contiguous, hidden 256": (lambda: randn(7, 256), True),
    "1-D": (lambda: randn(256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), True),
    "4-D contiguous": (lambda: randn(2, 2, 3, 256), True),
    "size-1 dims between": (lambda: randn(2, 1, 3, 256), True),
    "row stride 272 = 17*16 (bf16)": (lambda: randn(5, 272)[:, :256], True),
    "row stride 264, not a multiple of 16 (bf16)": (lambda: randn(5, 264)[:, :256], False),
    "fp16, hidden 24: rows of 24 elements": (lambda: randn(3, 24, dtype=FP16), False),
    "fp16, hidden 32": (lambda: randn(3, 32, dtype=FP16), True),
    "3-D heads of a QKV split (rows merge, stride 3*H)": (lambda: qk_heads(4, 1, 128), True),
    "3-D heads, 2 heads (leading dims do not merge)": (lambda: qk_heads(4, 2, 64), False),
    "2-D transposed": (lambda: randn(256, 16).t(), False),
    "misaligned start": (lambda: misaligned(3, 256), False),
}


@pytest.mark.parametrize("label", NORM)
def test_rms_norm_layouts_fast_path_only(oink, label):
    make, accepted = NORM[label]
    x = make()
    paths = Counter(oink.PATHS)
    assert_dispatched("rms_norm", (x, weight(x.shape[-1], x.dtype), 1e-6, None), "oink", accepted, label)
    paths["rmsnorm fast"] += accepted
    assert oink.PATHS == paths  # Oink ran once, on its fast path, or not at all


@pytest.mark.parametrize("label", NORM)
def test_predicates_answer_alike_on_fake_tensors(oink, label):
    """The lowering asks the predicates on fake tensors (no data pointers): alignment comes from
    the storage offset, so the answer there is the eager one, misaligned inputs included."""
    from ircore_oink import impls

    x = NORM[label][0]()
    r, w = x.contiguous(), weight(x.shape[-1], x.dtype)
    with FakeTensorMode() as mode:
        fx, fr, fw = map(mode.from_tensor, (x, r, w))
        fake = impls.rms_norm_supports(fx, fw, 1e-6, None), impls.fused_add_rms_norm_supports(fx, fr, fw, 1e-6, None)
    assert fake == (impls.rms_norm_supports(x, w, 1e-6, None), impls.fused_add_rms_norm_supports(x, r, w, 1e-6, None))


@pytest.mark.parametrize("make", [lambda: randn(5, 272)[:, :256], lambda: qk_heads(4, 1, 128), lambda: randn(3, 256)])
def test_row_strided_rms_norm_keeps_its_row_stride_and_its_fake_says_so(oink, make):
    """Oink's output keeps x's row stride: the op compiled graphs hold for this implementation has
    the provider's fake (rms_norm_fake), which says the same layout, so a compiled graph reads it
    right (the conformance kit checks the two agree on every sample)."""
    from ircore_oink import impls

    x = make()
    w = weight(x.shape[-1])
    assert impls.rms_norm_supports(x, w, 1e-6, None)
    out = impls.rms_norm(x, w, 1e-6)
    with FakeTensorMode() as mode:
        said = torch.ops.ircore_oink.rms_norm(mode.from_tensor(x), mode.from_tensor(w), 1e-6)
    assert (said.shape, said.stride()) == (out.shape, out.stride())


def test_weights(oink):
    x = randn(4, 256)
    assert ircore.explain("rms_norm", x, weight(256), 1e-6).chosen == "oink"
    declined = {
        "None (Oink needs a weight)": None,
        "fp32 with bf16 x": weight(256, FP32),
        "non-contiguous": weight(512)[::2],
        "misaligned": misaligned(256),
    }
    for label, w in declined.items():
        assert ircore.explain("rms_norm", x, w, 1e-6).chosen != "oink", label
    assert ircore.explain("rms_norm", x, weight(256), 1e-6, 128).chosen != "oink"  # variance_size


FUSED = {
    "2-D": (lambda: randn(5, 256), lambda: randn(5, 256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), lambda: randn(2, 3, 256), True),
    "x row-strided, residual contiguous": (lambda: randn(5, 272)[:, :256], lambda: randn(5, 256), True),
    "x row stride 264, not a multiple of 16 (bf16)": (lambda: randn(5, 264)[:, :256], lambda: randn(5, 256), False),
    "fp32, x row stride 264 = 33*8": (lambda: randn(5, 264, dtype=FP32)[:, :256], lambda: randn(5, 256, dtype=FP32), True),
    "fp32, x row stride 260, not a multiple of 8": (lambda: randn(5, 260, dtype=FP32)[:, :256], lambda: randn(5, 256, dtype=FP32), False),
    "x 3-D heads of a QKV split (rows merge, stride 3*H)": (lambda: qk_heads(4, 1, 128), lambda: randn(4, 1, 128), True),
    "x misaligned": (lambda: misaligned(3, 256), lambda: randn(3, 256), False),
    "residual row-strided": (lambda: randn(5, 256), lambda: randn(5, 272)[:, :256], False),
    "residual misaligned": (lambda: randn(3, 256), lambda: misaligned(3, 256), False),
    "fp16 hidden 24": (lambda: randn(3, 24, dtype=FP16), lambda: randn(3, 24, dtype=FP16), False),
}


@pytest.mark.parametrize("label", FUSED)
def test_fused_add_rms_norm_layouts_fast_path_only(oink, label):
    make_x, make_r, accepted = FUSED[label]
    x = make_x()
    paths = Counter(oink.PATHS)
    args = (x, make_r(), weight(x.shape[-1], x.dtype), 1e-6, None)
    assert_dispatched("fused_add_rms_norm", args, "oink", accepted, label)  # in place: on clones
    paths["fused_add_rms_norm fast"] += accepted
    assert oink.PATHS == paths


def test_in_place_contract(oink):
    """maybe_inplace: Oink writes the output into x and the sum into the residual, as views of 3-D inputs."""
    x, r, w = randn(2, 3, 256), randn(2, 3, 256), weight(256)
    args = (x.clone(), r.clone(), w, 1e-6, None)
    out, res = ircore.ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    assert out is x and res is r
    assert_close_to_reference(ircore.ops.fused_add_rms_norm, (x, r), args)


def test_empty_input_never_reaches_a_kernel(oink):
    paths = dict(oink.PATHS)
    assert ircore.ops.rms_norm(randn(0, 64), weight(64), 1e-6).shape == (0, 64)
    out, res = ircore.ops.fused_add_rms_norm(randn(0, 64), randn(0, 64), weight(64), 1e-6)
    assert out.shape == res.shape == (0, 64)
    assert dict(oink.PATHS) == paths


def test_silu_and_mul_is_not_provided(oink):
    assert "oink" not in ircore.ops.silu_and_mul.impls


def test_conformance_kit(oink):
    """Every core sample the predicates accept, all dtypes: right numbers, and only fast paths."""
    paths = dict(oink.PATHS)
    report = check_provider("oink", dtypes=(FP32, FP16, BF16))
    assert set(report.checked) == {"rms_norm", "fused_add_rms_norm"}
    assert all(n > 0 for n in report.checked.values()), report
    new = {k: v - paths.get(k, 0) for k, v in oink.PATHS.items()}
    assert new.get("rmsnorm reference", 0) == 0 and new.get("fused_add_rms_norm reference", 0) == 0, new
    assert new["rmsnorm fast"] > 0 and new["fused_add_rms_norm fast"] > 0


@pytest.mark.slow
def test_compiled_graph_calls_the_ops_ircore_built_on_the_fast_path(oink):
    """backend="ircore" lowers both norms to oink: the graph calls torch.ops.ircore_oink.<op>, the
    op ircore built around each implementation (the fused one in place), whose kernel is Oink's
    (stand-in) op on its fast path."""

    def block(x, r, w):
        y = ircore.ops.rms_norm(x, w, 1e-6)
        return ircore.ops.fused_add_rms_norm(y, r, w, 1e-6)

    args = (randn(2, 3, 256), randn(2, 3, 256), weight(256))
    expected = block(*(a.clone() for a in args))
    paths = Counter(oink.PATHS)
    got, code = compiled_code(block, args)
    for name in ("rms_norm", "fused_add_rms_norm"):
        assert f"torch.ops.ircore_oink.{name}.default(" in code, name
    assert "torch.ops.oink." not in code  # Oink runs inside that kernel, not traced into the graph
    assert set(ircore.compile.report().last_lowering.values()) == {"oink"}
    assert Counter(oink.PATHS) - paths == Counter({"rmsnorm fast": 1, "fused_add_rms_norm fast": 1})
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.float(), e.float(), atol=1.6e-2, rtol=1.6e-2)


@pytest.mark.slow
def test_compiled_graph_declines_a_misaligned_input_as_eager_calls_do(oink):
    """Alignment is known at compile time (the storage offset): no lowering to oink that would
    take Oink's reference path at run time."""
    x, w = misaligned(3, 256), weight(256)
    paths = Counter(oink.PATHS)
    got, code = compiled_code(lambda x, w: ircore.ops.rms_norm(x, w, 1e-6), (x, w))
    assert "ircore_oink" not in code and "oink" not in ircore.compile.report().last_lowering.values()
    assert Counter(oink.PATHS) == paths
    assert_close_to_reference(ircore.ops.rms_norm, got, (x, w, 1e-6, None))


def test_ops_ircore_built_pass_opcheck(oink):
    ops = torch.ops.ircore_oink
    x, r, w = randn(4, 256), randn(4, 256), weight(256)
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(ops.fused_add_rms_norm.default, (x, r, w, 1e-6))  # in place: declares its writes
