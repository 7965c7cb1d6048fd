"""The adapter against the AITER STAND-IN (tests/standins/aiter), on a simulated ROCm gfx942.

The stand-in addresses memory as AITER's kernels do (rows at ``stride(0)``, unit last stride,
contiguous activation rows, 16-byte vectors), so these tests catch marshalling mistakes on the
CPU: each layout below is run through ircore's dispatch and compared with the op's fp64
reference, and every layout the predicates refuse is shown to be misread by the stand-in.
"""

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
    norm_block,
    qk_heads,
    randn,
    rope_args,
    weight,
)


@pytest.fixture(scope="module")
def aiter(rocm):
    import aiter as standin

    assert ircore.ops.rms_norm.impls["aiter"].fn.__module__ == "ircore_aiter.impls"
    assert standin.__doc__.startswith("STAND-IN for AMD's AITER")
    return standin


# ------------------------------------------------------------------ layouts: (label, x)
NORM_ACCEPTED = {
    "2-D contiguous": lambda: randn(7, 256),
    "1-D": lambda: randn(256),
    "3-D contiguous (batch stride is not the row stride)": lambda: randn(2, 3, 256),
    "4-D contiguous": lambda: randn(2, 2, 3, 256),
    "2-D row-strided (a QKV split)": lambda: randn(5, 3 * 256)[:, 256:512],
    "fp16": lambda: randn(4, 256, dtype=FP16),
}
NORM_DECLINED = {
    "fp32": lambda: randn(4, 256, dtype=FP32),
    "2-D transposed": lambda: randn(256, 6).t(),
    "3-D middle slice (non-contiguous)": lambda: randn(4, 8, 256)[:, :4],
    "3-D heads of a QKV split (QK-norm)": lambda: qk_heads(3, 2, 64),
    "2-D last-dim stride 2": lambda: randn(4, 512)[:, ::2],
}


@pytest.mark.parametrize("label", NORM_ACCEPTED)
def test_rms_norm_layouts_accepted_and_right(aiter, label):
    x = NORM_ACCEPTED[label]()
    before = aiter.CALLS["rms_norm"]
    assert_dispatched("rms_norm", (x, weight(x.shape[-1], x.dtype), 1e-6, None), "aiter", True, label)
    assert aiter.CALLS["rms_norm"] == before + 1  # the stand-in kernel ran, not a fallback


@pytest.mark.parametrize("label", NORM_DECLINED)
def test_rms_norm_layouts_declined_go_elsewhere(aiter, label):
    x = NORM_DECLINED[label]()
    assert_dispatched("rms_norm", (x, weight(x.shape[-1], x.dtype), 1e-6, None), "aiter", False, label)


@pytest.mark.parametrize("label", NORM_DECLINED)
def test_adapter_would_misread_what_its_predicate_declines(aiter, label):
    """Why each is declined: the adapter's call on it errors or gives wrong numbers."""
    from ircore_aiter import impls

    x = NORM_DECLINED[label]()
    w = weight(x.shape[-1], x.dtype)
    assert not impls.rms_norm_supports(x, w, 1e-6, None)
    try:
        got = impls.rms_norm(x, w, 1e-6)
    except RuntimeError:
        return  # e.g. AITER's dtype check, or no 2-D view without a copy
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rms_norm, got, (x, w, 1e-6, None))


@pytest.mark.parametrize("label", [*NORM_ACCEPTED, *NORM_DECLINED])
def test_predicate_answers_alike_on_fake_tensors(aiter, label):
    """The lowering asks the predicates on fake tensors: they read metadata only, so the answer
    there is the eager one."""
    from ircore_aiter import impls

    x = {**NORM_ACCEPTED, **NORM_DECLINED}[label]()
    r, w = x.contiguous(), weight(x.shape[-1], x.dtype)
    with FakeTensorMode() as mode:
        fx, fr, fw = map(mode.from_tensor, (x, r, w))
        fake = impls.rms_norm_supports(fx, fw, 1e-6, None), impls.fused_add_rms_norm_supports(fx, fr, fw, 1e-6, None)
    assert fake == (impls.rms_norm_supports(x, w, 1e-6, None), impls.fused_add_rms_norm_supports(x, r, w, 1e-6, None))


def test_standin_misreads_an_unflattened_3d_input(aiter):
    """The bug the adapter's flattening fixes (vLLM #48757): 3-D input rows at the batch stride."""
    x = randn(2, 3, 256)
    with pytest.raises(RuntimeError, match="out of bounds"):
        aiter.rms_norm(x, weight(256), 1e-6)


def test_rms_norm_weights(aiter):
    x = randn(4, 256)
    for label, w in {"None": None, "bf16": weight(256)}.items():
        assert ircore.explain("rms_norm", x, w, 1e-6).chosen == "aiter", label
        assert_close_to_reference(ircore.ops.rms_norm, ircore.ops.rms_norm(x, w, 1e-6), (x, w, 1e-6, None))
    for label, w in {"fp32": weight(256, FP32), "strided": weight(512)[::2]}.items():
        assert ircore.explain("rms_norm", x, w, 1e-6).chosen != "aiter", label
    assert ircore.explain("rms_norm", x, weight(256), 1e-6, 128).chosen != "aiter"  # variance_size


def test_weight_none_is_one_cached_tensor_of_ones(aiter):
    from ircore_aiter import impls

    x = randn(2, 192)
    assert impls._weight(None, x) is impls._weight(None, x)
    assert torch.equal(impls._weight(None, x), torch.ones(192, dtype=BF16))


def test_empty_input_never_launches(aiter):
    x, r = randn(0, 64), randn(0, 64)
    calls = dict(aiter.CALLS)
    assert ircore.ops.rms_norm(x, None, 1e-6).shape == (0, 64)
    out, res = ircore.ops.fused_add_rms_norm(x, r, None, 1e-6)
    assert out.shape == res.shape == (0, 64)
    assert ircore.ops.silu_and_mul(randn(0, 64)).shape == (0, 32)
    q, k = ircore.ops.rotary_embedding(*rope_args(randn(0, 128), randn(0, 64), 64))
    assert q.shape == (0, 128) and k.shape == (0, 64)
    assert dict(aiter.CALLS) == calls


# ------------------------------------------------------------------ fused_add_rms_norm
FUSED = {
    "2-D": (lambda: randn(5, 256), lambda: randn(5, 256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), lambda: randn(2, 3, 256), True),
    "4-D contiguous": (lambda: randn(2, 2, 2, 256), lambda: randn(2, 2, 2, 256), True),
    "x row-strided, residual contiguous": (lambda: randn(5, 512)[:, :256], lambda: randn(5, 256), True),
    "residual row-strided": (lambda: randn(5, 256), lambda: randn(5, 512)[:, :256], False),
    "x 2-D transposed": (lambda: randn(256, 5).t(), lambda: randn(5, 256), False),
    "x 3-D middle slice": (lambda: randn(4, 6, 256)[:, :3], lambda: randn(4, 3, 256), False),
}


@pytest.mark.parametrize("label", FUSED)
def test_fused_add_rms_norm_layouts(aiter, label):
    make_x, make_r, accepted = FUSED[label]
    before = aiter.CALLS["rmsnorm2d_fwd_with_add"]
    args = (make_x(), make_r(), weight(256), 1e-6, None)
    assert_dispatched("fused_add_rms_norm", args, "aiter", accepted, label)
    assert aiter.CALLS["rmsnorm2d_fwd_with_add"] == before + accepted


def test_fused_add_is_not_in_place_even_when_allowed(aiter):
    """AITER writes fresh tensors: maybe_inplace returns them and leaves x and the residual alone."""
    assert not ircore.ops.fused_add_rms_norm.impls["aiter"].inplace
    x, r, w = randn(3, 256), randn(3, 256), weight(256)
    x0, r0 = x.clone(), r.clone()
    out, res = ircore.ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    assert out.data_ptr() not in (x.data_ptr(), r.data_ptr()) and res.data_ptr() not in (x.data_ptr(), r.data_ptr())
    assert torch.equal(x, x0) and torch.equal(r, r0)
    assert_close_to_reference(ircore.ops.fused_add_rms_norm, (out, res), (x0, r0, w, 1e-6, None))


# ------------------------------------------------------------------ silu_and_mul
SILU = {
    "2-D, d=128": (lambda: randn(4, 256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), True),
    "misaligned start (copied first)": (lambda: misaligned(3, 256), True),
    "fp16, d=8": (lambda: randn(3, 16, dtype=FP16), True),
    "fp32": (lambda: randn(4, 256, dtype=FP32), False),
    "d=4, not a multiple of 8": (lambda: randn(3, 8), False),
    "row-strided": (lambda: randn(4, 512)[:, :256], False),
}


@pytest.mark.parametrize("label", SILU)
def test_silu_and_mul_layouts(aiter, label):
    make, accepted = SILU[label]
    before = aiter.CALLS["silu_and_mul"]
    assert_dispatched("silu_and_mul", (make(),), "aiter", accepted, label)
    assert aiter.CALLS["silu_and_mul"] == before + accepted


def test_standin_refuses_a_misaligned_input(aiter):
    """Why the adapter copies an unaligned input: AITER's 16-byte loads need an aligned start."""
    x = misaligned(3, 256)
    with pytest.raises(RuntimeError, match="misaligned"):
        aiter.silu_and_mul(torch.empty(3, 128, dtype=BF16), x)


# ------------------------------------------------------------------ rotary_embedding (in place)
T, D = 5, 64
ROPE = {
    "[T, H*D] neox, GQA": (lambda: rope_args(randn(T, 4 * D), randn(T, 2 * D), D), True),
    "[T, H, D] gptj": (lambda: rope_args(randn(T, 4, D), randn(T, 1, D), D, neox=False), True),
    "[B, S, H*D], positions [B, S]": (
        lambda: rope_args(randn(2, 3, 2 * D), randn(2, 3, D), D, positions=torch.randint(0, 80, (2, 3))),
        True,
    ),
    "[B, S, H*D], positions flat (reshaped)": (
        lambda: rope_args(randn(2, 3, 2 * D), randn(2, 3, D), D, positions=torch.randint(0, 80, (6,))),
        True,
    ),
    "[B, S] slice of a longer buffer": (
        lambda: rope_args(randn(2, 6, 2 * D)[:, :3], randn(2, 6, D)[:, :3], D, positions=torch.randint(0, 80, (2, 3))),
        True,
    ),
    "q, k views of one qkv buffer": (lambda: _qkv_views(), True),
    "heads transposed (HF's (B, H, S, D) as [S, H, D])": (
        lambda: rope_args(randn(4, T, D).transpose(0, 1), randn(2, T, D).transpose(0, 1), D),
        True,
    ),
    "fp32 cache, bf16 activations": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, cache_dtype=FP32), True),
    "fp32": (lambda: rope_args(randn(T, 2 * D, dtype=FP32), randn(T, D, dtype=FP32), D), True),
    "non-contiguous positions": (
        lambda: rope_args(randn(T, 2 * D), randn(T, D), D, positions=torch.randint(0, 80, (2 * T,))[::2]),
        True,
    ),
    "positions [B, S] a slice (rows strided, unit last stride)": (
        lambda: rope_args(randn(2, 3, 2 * D), randn(2, 3, D), D, positions=torch.randint(0, 80, (2, 6))[:, :3]),
        True,
    ),
    "rotary_dim 32 of 64": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, rotary_dim=32), False),
    "rope_dim_offset 32": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, rotary_dim=32, rope_dim_offset=32), False),
    "inverse": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, inverse=True), False),
    "deepseek format with offsets": (
        lambda: rope_args(randn(T, 2 * D), randn(T, D), D, cos_sin_format="deepseek", offsets=torch.arange(1, T + 1)),
        False,
    ),
    "three token dimensions": (lambda: rope_args(randn(1, 1, T, 2 * D), randn(1, 1, T, D), D, positions=torch.randint(0, 80, (T,))), False),
}
#: Declined by rule, not because the kernel would misread them: the HIP kernel documents partial
#: rotation (the front rotary_dim channels, or the back ones with nope_first), unverified here and
#: unused by vLLM, whose AITER path asserts full rotary; three token dimensions would need a copy.
BY_RULE = {"rotary_dim 32 of 64", "three token dimensions"}


def _qkv_views():
    qkv = randn(T, 4 * D)
    return rope_args(qkv[:, : 2 * D], qkv[:, 2 * D : 3 * D], D)


def _query_only(args: tuple) -> tuple:
    return (args[0], args[1], *args[3:])


@pytest.mark.parametrize("label", ROPE)
def test_rotary_embedding_layouts(aiter, label):
    make, accepted = ROPE[label]
    args = make()
    calls = dict(aiter.CALLS)
    assert_dispatched("rotary_embedding", args, "aiter", accepted, label)  # in place: on clones
    assert_dispatched("rotary_embedding_query_only", _query_only(args), "aiter", accepted, label)
    assert aiter.CALLS["rope_cached_positions_2c_fwd_impl"] == calls.get("rope_cached_positions_2c_fwd_impl", 0) + accepted
    assert aiter.CALLS["rope_cached_positions_fwd_impl"] == calls.get("rope_cached_positions_fwd_impl", 0) + accepted


@pytest.mark.parametrize("label", [label for label, case in ROPE.items() if not case[1] and label not in BY_RULE])
def test_adapter_would_misread_what_its_rope_predicate_declines(aiter, label):
    """Why each is declined: AITER's forward kernel has no inverse, offset or deepseek mode."""
    from ircore_aiter import impls

    args = ROPE[label][0]()
    assert not impls.rotary_embedding_supports(*args)
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    got = impls.rotary_embedding(*args)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rotary_embedding, got, before)


def test_standin_misreads_a_strided_cos(aiter):
    """Why the adapter copies the cache's halves: the kernel reads cos/sin rows at pos * (rotary_dim / 2)."""
    from ircore_aiter import impls

    args = rope_args(randn(T, 2 * D), randn(T, D), D)
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    q4, k4 = impls._sbhd(args[1], D, T), impls._sbhd(args[2], D, T)
    cos, sin = (h.view(-1, 1, 1, D // 2) if h.is_contiguous() else h[:, None, None, :] for h in args[5].chunk(2, -1))
    aiter.rope_cached_positions_2c_fwd_inplace(q4, k4, cos, sin, args[0].view(T, 1), 0, True, False)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rotary_embedding, (args[1], args[2]), before)


def test_standin_misreads_row_strided_positions(aiter):
    """Why the adapter makes positions contiguous: the kernel reads them at ``sid * b + bid``."""
    q, k = randn(2, 3, 2 * D), randn(2, 3, D)
    args = rope_args(q, k, D, positions=torch.randint(0, 80, (2, 6))[:, :3])
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    from ircore_aiter import impls

    cos, sin = impls._cos_sin(args[5])
    q4, k4 = impls._sbhd(q, D, 6), impls._sbhd(k, D, 6)
    aiter.rope_cached_positions_2c_fwd_inplace(q4, k4, cos, sin, args[0], 0, True, False)  # stride(1) == 1
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rotary_embedding, (q, k), before)


def test_cos_sin_made_once_per_cache_version(aiter):
    from ircore_aiter import impls

    args = rope_args(randn(T, 2 * D), randn(T, D), D)
    cache = args[5]
    first = impls._cos_sin(cache)
    assert impls._cos_sin(cache)[0] is first[0]
    cache.mul_(-1.0)  # an in-place change: made again from the new values
    again = impls._cos_sin(cache)
    assert again[0] is not first[0] and torch.equal(again[0].flatten(1), cache[:, : D // 2])


def test_rope_predicates_answer_alike_on_fake_tensors(aiter):
    from ircore_aiter import impls

    cases = {label: make() for label, (make, _) in ROPE.items()}
    with FakeTensorMode() as mode:
        for label, args in cases.items():
            fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            got = impls.rotary_embedding_supports(*fake), impls.rotary_embedding_query_only_supports(*_query_only(fake))
            assert got == (ROPE[label][1],) * 2, label


def test_rotary_in_place_contract(aiter):
    """maybe_inplace: the kernel rotates query and key where they are."""
    args = rope_args(randn(T, 4 * D), randn(T, 1, D), D)
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    q, k = ircore.ops.rotary_embedding.maybe_inplace(*args)
    assert q.data_ptr() == args[1].data_ptr() and k.data_ptr() == args[2].data_ptr()
    assert_close_to_reference(ircore.ops.rotary_embedding, (q, k), before)


# ------------------------------------------------------------------ the conformance kit
def test_conformance_kit(aiter):
    """Every sample the predicates accept, all dtypes: right numbers, inputs untouched; fp32 declined."""
    calls = dict(aiter.CALLS)
    norms = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
    report = check_provider("aiter", dtypes=(FP32, FP16, BF16), ops=norms)
    assert set(report.checked) == set(norms)
    assert all(n > 0 for n in report.checked.values()), report
    for name in report.checked:
        op = ircore.get_op(name)
        fp32_samples = 2 * len(list(op.sample_inputs(FP32, "cpu")))  # seeds 0 and 1
        assert sum("float32" in where for where in report.declined[name]) == fp32_samples
    for name in ("rms_norm", "rmsnorm2d_fwd_with_add", "silu_and_mul"):
        assert aiter.CALLS[name] > calls.get(name, 0)


def test_conformance_kit_rotary(aiter):
    """The rotary ops (bf16, one seed: the layouts below cover fp32 and the rest): partial
    rotary, inverse and the deepseek format declined, everything else checked against the fp64
    reference."""
    calls = dict(aiter.CALLS)
    ops = ("rotary_embedding", "rotary_embedding_query_only")
    report = check_provider("aiter", dtypes=(BF16,), seeds=(0,), ops=ops)
    assert set(report.checked) == set(ops) and all(n > 0 for n in report.checked.values()), report
    for name in ops:
        declined = " ".join(report.declined[name])
        for label in ("rotary_dim 32 of 64", "inverse neox", "deepseek"):
            assert label in declined, (name, label)
        for label in ("fp32 cache, neox", "fp32 cache, gptj"):  # the kernel reads the cache in its own dtype
            assert label not in declined, (name, label)
    for name in ("rope_cached_positions_2c_fwd_impl", "rope_cached_positions_fwd_impl"):
        assert aiter.CALLS[name] > calls.get(name, 0)


# ------------------------------------------------------------------ compiled graphs
@pytest.mark.slow
def test_compiled_graph_calls_the_ops_ircore_built(aiter):
    """backend="ircore" lowers every op to aiter: the graph calls torch.ops.ircore_aiter.<op>, the
    op ircore built around each implementation, whose kernel is the AITER (stand-in) call."""
    args = (randn(2, 3, 256), randn(2, 3, 256), weight(256))
    expected = norm_block(*(a.clone() for a in args))
    calls = dict(aiter.CALLS)
    got, code = compiled_code(norm_block, args)
    for name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul"):
        assert f"torch.ops.ircore_aiter.{name}.default(" in code, name
    assert "torch.ops.aiter." not in code  # AITER runs inside that kernel, not traced into the graph
    assert set(ircore.compile.report().last_lowering.values()) == {"aiter"}
    used = {"rms_norm", "rmsnorm2d_fwd_with_add", "silu_and_mul"}  # once each, at run time; no other kernel
    assert all(aiter.CALLS[name] == calls.get(name, 0) + (name in used) for name in aiter.CALLS)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.float(), e.float(), atol=1.6e-2, rtol=1.6e-2)


def test_ops_ircore_built_pass_opcheck(aiter):
    ops = torch.ops.ircore_aiter
    x, r, w = randn(4, 256), randn(4, 256), weight(256)
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(ops.rms_norm.default, (x, None, 1e-6))
    torch.library.opcheck(ops.fused_add_rms_norm.default, (x, r, w, 1e-6))
    torch.library.opcheck(ops.silu_and_mul.default, (x,))
