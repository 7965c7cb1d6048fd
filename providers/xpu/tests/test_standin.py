"""The adapter against the vllm-xpu-kernels STAND-IN (tests/standins/vllm_xpu_kernels), on a
simulated Intel GPU.

The stand-in addresses memory as the SYCL kernels do (rms_norm: ranks 2-4 through their strides;
fused_add_rms_norm: input rows at ``stride(-2)``, residual rows at ``row * hidden``; silu_and_mul:
contiguous aligned rows), so these tests catch marshalling mistakes on the CPU: each layout is
run through ircore's dispatch against the op's fp64 reference, and each layout the predicates
refuse is shown to be misread.
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
    rope_cache,
    weight,
)


@pytest.fixture(scope="module")
def kernels(xpu):
    from vllm_xpu_kernels import _C as standin

    assert ircore.ops.rms_norm.impls["xpu"].fn.__module__ == "ircore_xpu.impls"
    assert standin.__doc__.startswith("STAND-IN for ``vllm_xpu_kernels._C``")
    return standin


# ------------------------------------------------------------------ rms_norm
NORM = {
    "2-D contiguous": (lambda: randn(7, 256), True),
    "1-D (flattened)": (lambda: randn(256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), True),
    "4-D contiguous": (lambda: randn(2, 2, 3, 256), True),
    "5-D contiguous (flattened)": (lambda: randn(2, 1, 2, 3, 256), True),
    "2-D row-strided": (lambda: randn(5, 512)[:, :256], True),
    "3-D QK-norm heads (strided rows)": (lambda: qk_heads(3, 2, 64), True),
    "2-D transposed (the op makes it contiguous)": (lambda: randn(256, 6).t(), True),
    "fp32": (lambda: randn(4, 256, dtype=FP32), True),
    "fp16": (lambda: randn(4, 256, dtype=FP16), True),
    "5-D non-contiguous": (lambda: randn(2, 1, 2, 6, 256)[:, :, :, :3], False),
}


@pytest.mark.parametrize("label", NORM)
def test_rms_norm_layouts(kernels, label):
    make, accepted = NORM[label]
    x = make()
    before = kernels.CALLS["rms_norm"]
    assert_dispatched("rms_norm", (x, weight(x.shape[-1], x.dtype), 1e-6, None), "xpu", accepted, label)
    assert kernels.CALLS["rms_norm"] == before + accepted


@pytest.mark.parametrize("label", NORM)
def test_predicates_answer_alike_on_fake_tensors(kernels, label):
    """The lowering asks the predicates on fake tensors: they read metadata only, so the answer
    there is the eager one."""
    from ircore_xpu import impls

    x = NORM[label][0]()
    r, w = x.contiguous(), weight(x.shape[-1], x.dtype)
    with FakeTensorMode() as mode:
        fx, fr, fw = map(mode.from_tensor, (x, r, w))
        fake = impls.rms_norm_supports(fx, fw, 1e-6, None), impls.fused_add_rms_norm_supports(fx, fr, fw, 1e-6, None)
        fake_silu = impls.silu_and_mul_supports(fx)
    assert fake == (impls.rms_norm_supports(x, w, 1e-6, None), impls.fused_add_rms_norm_supports(x, r, w, 1e-6, None))
    assert fake_silu == impls.silu_and_mul_supports(x)


def test_rms_norm_weights(kernels):
    x = randn(4, 256)
    for label, w in {"None": None, "bf16": weight(256)}.items():
        assert ircore.explain("rms_norm", x, w, 1e-6).chosen == "xpu", label
        assert_close_to_reference(ircore.ops.rms_norm, ircore.ops.rms_norm(x, w, 1e-6), (x, w, 1e-6, None))
    for label, w in {"fp32": weight(256, FP32), "strided": weight(512)[::2]}.items():
        assert ircore.explain("rms_norm", x, w, 1e-6).chosen != "xpu", label
    assert ircore.explain("rms_norm", x, weight(256), 1e-6, 128).chosen != "xpu"  # variance_size


def test_weight_none_is_passed_as_none_to_the_optional_schema(kernels):
    from ircore_xpu import impls

    assert impls._PASS_NONE and impls._weight(None, randn(2, 8)) is None


# ------------------------------------------------------------------ fused_add_rms_norm (in place)
FUSED = {
    "2-D": (lambda: randn(5, 256), lambda: randn(5, 256), True),
    "1-D": (lambda: randn(256), lambda: randn(256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), lambda: randn(2, 3, 256), True),
    "4-D contiguous": (lambda: randn(2, 2, 2, 256), lambda: randn(2, 2, 2, 256), True),
    "x row-strided, residual contiguous": (lambda: randn(5, 512)[:, :256], lambda: randn(5, 256), True),
    "fp32": (lambda: randn(5, 256, dtype=FP32), lambda: randn(5, 256, dtype=FP32), True),
    "residual row-strided": (lambda: randn(5, 256), lambda: randn(5, 512)[:, :256], False),
    "x 2-D transposed": (lambda: randn(256, 5).t(), lambda: randn(5, 256), False),
    "x 3-D middle slice": (lambda: randn(4, 6, 256)[:, :3], lambda: randn(4, 3, 256), False),
}


@pytest.mark.parametrize("label", FUSED)
def test_fused_add_rms_norm_layouts(kernels, label):
    make_x, make_r, accepted = FUSED[label]
    x = make_x()
    before = kernels.CALLS["fused_add_rms_norm"]
    args = (x, make_r(), weight(x.shape[-1], x.dtype), 1e-6, None)
    assert_dispatched("fused_add_rms_norm", args, "xpu", accepted, label)  # in place: on clones
    assert kernels.CALLS["fused_add_rms_norm"] == before + accepted


@pytest.mark.parametrize("label", [label for label, case in FUSED.items() if not case[2]])
def test_adapter_would_misread_what_its_fused_predicate_declines(kernels, label):
    from ircore_xpu import impls

    make_x, make_r, _ = FUSED[label]
    x, r = make_x(), make_r()
    w = weight(x.shape[-1], x.dtype)
    args = (x.clone(), r.clone(), w, 1e-6, None)
    assert not impls.fused_add_rms_norm_supports(x, r, w, 1e-6, None)
    try:
        got = impls.fused_add_rms_norm(x, r, w, 1e-6)
    except RuntimeError:
        return  # no 2-D view without a copy
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.fused_add_rms_norm, got, args)


def test_in_place_contract(kernels):
    """maybe_inplace: the kernel writes the output into x and the sum into the residual."""
    x, r, w = randn(2, 3, 256), randn(2, 3, 256), weight(256)
    args = (x.clone(), r.clone(), w, 1e-6, None)
    out, res = ircore.ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    assert out.data_ptr() == x.data_ptr() and res.data_ptr() == r.data_ptr()
    assert_close_to_reference(ircore.ops.fused_add_rms_norm, (x, r), args)


# ------------------------------------------------------------------ silu_and_mul
SILU = {
    "2-D": (lambda: randn(4, 256), True),
    "3-D contiguous": (lambda: randn(2, 3, 256), True),
    "fp32, d=3": (lambda: randn(3, 6, dtype=FP32), True),
    "misaligned start (copied first)": (lambda: misaligned(3, 256), True),
    "row-strided": (lambda: randn(4, 512)[:, :256], False),
}


@pytest.mark.parametrize("label", SILU)
def test_silu_and_mul_layouts(kernels, label):
    make, accepted = SILU[label]
    before = kernels.CALLS["silu_and_mul"]
    assert_dispatched("silu_and_mul", (make(),), "xpu", accepted, label)
    assert kernels.CALLS["silu_and_mul"] == before + accepted


def test_adapter_would_misread_a_row_strided_activation(kernels):
    from ircore_xpu import impls

    x = randn(4, 512)[:, :256]
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.silu_and_mul, impls.silu_and_mul(x), (x,))


def test_empty_input_never_reaches_a_kernel(kernels):
    calls = dict(kernels.CALLS)
    assert ircore.ops.rms_norm(randn(0, 64), None, 1e-6).shape == (0, 64)
    out, res = ircore.ops.fused_add_rms_norm(randn(0, 64), randn(0, 64), None, 1e-6)
    assert out.shape == res.shape == (0, 64)
    assert ircore.ops.silu_and_mul(randn(0, 64)).shape == (0, 32)
    q, k = ircore.ops.rotary_embedding(*rope_args(randn(0, 128), randn(0, 64), 64))
    assert q.shape == (0, 128) and k.shape == (0, 64)
    assert dict(kernels.CALLS) == calls


# ------------------------------------------------------------------ gated activations
ACT = {  # op: (extra args, the stand-in kernel it reaches)
    "gelu_and_mul": (("none",), "gelu_and_mul"),
    "gelu_and_mul tanh": (("tanh",), "gelu_tanh_and_mul"),
    "mul_and_silu": ((), "mul_and_silu"),
    "fatrelu_and_mul": ((0.25,), "fatrelu_and_mul"),
    "swigluoai_and_mul": ((1.702, 7.0), "swigluoai_and_mul"),
}
ACT_LAYOUTS = {
    "2-D": (lambda: randn(4, 256), True),
    "3-D contiguous": (lambda: randn(2, 3, 128), True),
    "fp16, d=3 (scalar loads)": (lambda: randn(3, 6, dtype=FP16), True),
    "fp32": (lambda: randn(3, 64, dtype=FP32), True),
    "d=2048 (vector loads), misaligned start (copied first)": (lambda: misaligned(2, 4096), True),
    "row-strided": (lambda: randn(4, 512)[:, :256], False),
}


@pytest.mark.parametrize("layout", ACT_LAYOUTS)
@pytest.mark.parametrize("case", ACT)
def test_gated_activation_layouts(kernels, case, layout):
    extra, kernel = ACT[case]
    make, accepted = ACT_LAYOUTS[layout]
    before = kernels.CALLS[kernel]
    assert_dispatched(case.split()[0], (make(), *extra), "xpu", accepted, f"{case}, {layout}")
    assert kernels.CALLS[kernel] == before + accepted


@pytest.mark.parametrize("case", ACT)
def test_adapter_would_misread_a_row_strided_gated_input(kernels, case):
    from ircore_xpu import impls

    extra, _ = ACT[case]
    op = case.split()[0]
    x = randn(4, 512)[:, :256]
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.get_op(op), getattr(impls, op)(x, *extra), (x, *extra))


def test_release_without_an_activation_declines_it(kernels, monkeypatch):
    """A release lacking a kernel (older vllm-xpu-kernels) still serves the other ops."""
    from ircore_xpu import impls

    monkeypatch.setitem(impls.ACTIVATIONS, "gelu_tanh_and_mul", None)
    x = randn(4, 256)
    assert ircore.explain("gelu_and_mul", x, "tanh").chosen != "xpu"
    assert ircore.explain("gelu_and_mul", x, "none").chosen == "xpu"


def test_standin_refuses_a_misaligned_gated_input(kernels):
    """Why the adapter copies an unaligned input: the vector loads need an aligned start."""
    with pytest.raises(RuntimeError, match="misaligned"):
        kernels.gelu_and_mul(torch.empty(2, 2048, dtype=BF16), misaligned(2, 4096))
    kernels.gelu_and_mul(torch.empty(3, 128, dtype=BF16), misaligned(3, 256))  # d <= 1024: scalar loads


# ------------------------------------------------------------------ rotary_embedding (in place)
T, D = 5, 64
ROPE = {
    "[T, H*D] neox, GQA": (lambda: rope_args(randn(T, 4 * D), randn(T, 2 * D), D), True),
    "[T, H, D] gptj": (lambda: rope_args(randn(T, 4, D), randn(T, 1, D), D, neox=False), True),
    "[B, S, H*D], positions [B, S]": (
        lambda: rope_args(randn(2, 3, 2 * D), randn(2, 3, D), D, positions=torch.randint(0, 80, (2, 3))),
        True,
    ),
    "q, k views of one qkv buffer": (lambda: _qkv_views(), True),
    "rotary_dim 32 of 64 (tail passes through)": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, rotary_dim=32), True),
    "fp32": (lambda: rope_args(randn(T, 2 * D, dtype=FP32), randn(T, D, dtype=FP32), D), True),
    "fp32 cache, bf16 activations": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, cache_dtype=FP32), False),
    "rope_dim_offset 16": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, rotary_dim=32, rope_dim_offset=16), False),
    "inverse": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, inverse=True), False),
    "deepseek format with offsets": (
        lambda: rope_args(randn(T, 2 * D), randn(T, D), D, cos_sin_format="deepseek", offsets=torch.arange(1, T + 1)),
        False,
    ),
    "[B, S, H*D], positions flat": (lambda: rope_args(randn(2, 3, 2 * D), randn(2, 3, D), D, positions=torch.randint(0, 80, (6,))), False),
    "[T, 1, H*D] (heads not where stride(-2) says)": (lambda: rope_args(randn(T, 1, 2 * D), randn(T, 1, D), D), False),
    "[B, S] slice, stride(0) != S * stride(1)": (
        lambda: rope_args(randn(2, 6, 2 * D)[:, :3], randn(2, 6, D)[:, :3], D, positions=torch.randint(0, 80, (2, 3))),
        False,
    ),
    "key heads padded (stride(-2) != head_size)": (lambda: rope_args(randn(T, 2 * D), randn(T, 2, 2 * D)[..., :D], D), False),
    "non-contiguous cache": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, cache=rope_cache(97, 2 * D)[:, :D]), False),
    "non-contiguous positions": (lambda: rope_args(randn(T, 2 * D), randn(T, D), D, positions=torch.randint(0, 80, (2 * T,))[::2]), False),
}


def _qkv_views():
    qkv = randn(T, 4 * D)
    return rope_args(qkv[:, : 2 * D], qkv[:, 2 * D : 3 * D], D)


#: Cases about the key alone, which the query-only op does not have.
KEY_ONLY = {"key heads padded (stride(-2) != head_size)"}


def _query_only(args: tuple) -> tuple:
    return (args[0], args[1], *args[3:])


@pytest.mark.parametrize("label", ROPE)
def test_rotary_embedding_layouts(kernels, label):
    make, accepted = ROPE[label]
    args = make()
    before = kernels.CALLS["rotary_embedding"]
    assert_dispatched("rotary_embedding", args, "xpu", accepted, label)  # in place: on clones
    query_only = accepted or label in KEY_ONLY
    assert_dispatched("rotary_embedding_query_only", _query_only(args), "xpu", query_only, label)
    assert kernels.CALLS["rotary_embedding"] == before + accepted + query_only


@pytest.mark.parametrize("label", [label for label, case in ROPE.items() if not case[1]])
def test_adapter_would_misread_what_its_rope_predicate_declines(kernels, label):
    """Why each is declined: the 6-argument kernel on it errors or gives wrong numbers."""
    from ircore_xpu import impls

    args = ROPE[label][0]()
    assert not impls.rotary_embedding_supports(*args)
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    try:
        got = impls.rotary_embedding(*args)
    except RuntimeError:
        return  # the kernel's own checks (token counts, cache dtype, out-of-bounds rows)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.rotary_embedding, got, before)


def test_rope_predicates_answer_alike_on_fake_tensors(kernels):
    from ircore_xpu import impls

    cases = {label: make() for label, (make, _) in ROPE.items()}
    with FakeTensorMode() as mode:
        for label, args in cases.items():
            fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            got = impls.rotary_embedding_supports(*fake), impls.rotary_embedding_query_only_supports(*_query_only(fake))
            accepted = ROPE[label][1]
            assert got == (accepted, accepted or label in KEY_ONLY), label


def test_rotary_in_place_contract(kernels):
    """maybe_inplace: the kernel rotates query and key where they are."""
    args = rope_args(randn(T, 4 * D), randn(T, 2 * D), D)
    before = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    q, k = ircore.ops.rotary_embedding.maybe_inplace(*args)
    assert q.data_ptr() == args[1].data_ptr() and k.data_ptr() == args[2].data_ptr()
    assert_close_to_reference(ircore.ops.rotary_embedding, (q, k), before)


# ------------------------------------------------------------------ fused_qk_norm_rope (in place)
def _fused_args(tokens=(4,), d=64, dtype=BF16, cache_dtype=None, neox=True, weight_dtype=None, qkv=None, pos=None):
    hq, hk, hv = 4, 2, 2
    qkv = randn(*tokens, (hq + hk + hv) * d, dtype=dtype) if qkv is None else qkv
    wq, wk = weight(d, weight_dtype or dtype), weight(d, weight_dtype or dtype)
    pos = torch.randint(0, 90, tokens) if pos is None else pos
    return (qkv, hq, hk, hv, d, 1e-6, wq, wk, rope_cache(97, d, cache_dtype or dtype), neox, pos)


FUSED_QK = {
    "[T, W] neox": (lambda: _fused_args(), True),
    "[B, S, W] gptj, fp32 cache": (lambda: _fused_args(tokens=(2, 3), neox=False, cache_dtype=FP32), True),
    "head_dim 128, fp16": (lambda: _fused_args(d=128, dtype=FP16), True),
    "fp32 qkv": (lambda: _fused_args(dtype=FP32), False),
    "head_dim 32": (lambda: _fused_args(d=32), False),
    "fp32 weights, bf16 qkv": (lambda: _fused_args(weight_dtype=FP32), False),
    "qkv a row-strided view": (lambda: _fused_args(qkv=randn(4, 16 * 64)[:, : 8 * 64]), False),
    "non-contiguous position_ids": (lambda: _fused_args(pos=torch.randint(0, 90, (8,))[::2]), False),
}


@pytest.mark.parametrize("label", FUSED_QK)
def test_fused_qk_norm_rope_layouts(kernels, label):
    make, accepted = FUSED_QK[label]
    before = kernels.CALLS["fused_qk_norm_rope"]
    assert_dispatched("fused_qk_norm_rope", make(), "xpu", accepted, label)  # in place: on clones
    assert kernels.CALLS["fused_qk_norm_rope"] == before + accepted


@pytest.mark.parametrize("label", [label for label, case in FUSED_QK.items() if not case[1]])
def test_fused_qk_kernel_refuses_what_its_predicate_declines(kernels, label):
    from ircore_xpu import impls

    args = FUSED_QK[label][0]()
    assert not impls.fused_qk_norm_rope_supports(*args)
    with pytest.raises(RuntimeError):
        impls.fused_qk_norm_rope(*args)


# ------------------------------------------------------------------ the conformance kit
def test_conformance_kit(kernels):
    """Every sample the predicates accept, all dtypes: right numbers, inputs untouched, in place."""
    calls = dict(kernels.CALLS)
    norms = ("rms_norm", "fused_add_rms_norm", "silu_and_mul")
    report = check_provider("xpu", dtypes=(FP32, FP16, BF16), ops=norms)
    assert set(report.checked) == set(norms)
    assert all(n > 0 for n in report.checked.values()), report
    for name in norms:
        assert kernels.CALLS[name] > calls.get(name, 0)


def test_conformance_kit_gated_activations(kernels):
    """The gated activations (bf16, one seed: the layouts above cover fp32, fp16 and the rest)."""
    ops = ("gelu_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul")
    calls = dict(kernels.CALLS)
    report = check_provider("xpu", dtypes=(BF16,), seeds=(0,), ops=ops)
    assert set(report.checked) == set(ops) and all(n > 0 for n in report.checked.values()), report
    for kernel in ("gelu_and_mul", "gelu_tanh_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul"):
        assert kernels.CALLS[kernel] > calls.get(kernel, 0), kernel


def test_conformance_kit_fused_qk_norm_rope(kernels):
    """bf16, one seed (fp16 and the layouts above cover the rest); the in-place kernel each time."""
    calls = kernels.CALLS["fused_qk_norm_rope"]
    report = check_provider("xpu", dtypes=(BF16,), seeds=(0,), ops=("fused_qk_norm_rope",))
    assert report.checked["fused_qk_norm_rope"] > 0 and kernels.CALLS["fused_qk_norm_rope"] > calls, report


def test_conformance_kit_rotary(kernels):
    """The rotary ops (bf16, one seed: the layouts above cover fp32 and the rest): what the
    6-argument schema lacks is declined, everything else checked against the fp64 reference."""
    calls = kernels.CALLS["rotary_embedding"]
    ops = ("rotary_embedding", "rotary_embedding_query_only")
    report = check_provider("xpu", dtypes=(BF16,), seeds=(0,), ops=ops)
    assert set(report.checked) == set(ops) and all(n > 0 for n in report.checked.values()), report
    assert kernels.CALLS["rotary_embedding"] > calls
    for name in ops:
        declined = " ".join(report.declined[name])
        for label in ("rope_dim_offset 16", "inverse neox", "deepseek", "fp32 cache"):
            assert label in declined, (name, label)


# ------------------------------------------------------------------ compiled graphs
@pytest.mark.slow
def test_compiled_graph_calls_the_ops_ircore_built(kernels):
    """backend="ircore" lowers every op to xpu: the graph calls torch.ops.ircore_xpu.<op>, the op
    ircore built around each implementation (the fused one in place), whose kernel is the
    vllm-xpu-kernels (stand-in) call."""
    args = (randn(2, 3, 256), randn(2, 3, 256), weight(256))
    expected = norm_block(*(a.clone() for a in args))
    calls = dict(kernels.CALLS)
    got, code = compiled_code(norm_block, args)
    for name in ("rms_norm", "fused_add_rms_norm", "silu_and_mul"):
        assert f"torch.ops.ircore_xpu.{name}.default(" in code, name
    assert "torch.ops._C." not in code  # the vendor op runs inside that kernel, not traced into the graph
    assert set(ircore.compile.report().last_lowering.values()) == {"xpu"}
    used = {"rms_norm", "fused_add_rms_norm", "silu_and_mul"}  # once each, at run time; no other kernel
    assert all(kernels.CALLS[name] == calls.get(name, 0) + (name in used) for name in kernels.CALLS)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g.float(), e.float(), atol=1.6e-2, rtol=1.6e-2)


def test_ops_ircore_built_pass_opcheck(kernels):
    ops = torch.ops.ircore_xpu
    x, r, w = randn(4, 256), randn(4, 256), weight(256)
    torch.library.opcheck(ops.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(ops.rms_norm.default, (x, None, 1e-6))
    torch.library.opcheck(ops.fused_add_rms_norm.default, (x, r, w, 1e-6))  # in place: declares its writes
    torch.library.opcheck(ops.silu_and_mul.default, (x,))
