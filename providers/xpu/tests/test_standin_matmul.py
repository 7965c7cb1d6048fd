"""``scaled_mm_fp8`` against the ``vllm_xpu_kernels._xpu_C`` STAND-IN, on a simulated Intel GPU.

The stand-in models ``_xpu_C.fp8_gemm`` (oneDNN): the output allocated from A's strides, A and B
addressed through the leading dimensions the kernel derives, scale buffers read densely, the scale
routing of every release (``"numel"``) and of c3385f6 (``"rank"``), v0.1.13's contiguity checks,
the bias types, and the primitive cache keyed on the scales' element counts. The kit and the
layouts run under both routings: the one scale form the adapter passes reads the same under each.
"""

import pytest
import torch

import ircore
from ircore.ops._quant import E4M3FNUZ
from ircore.ops._scaled_mm import quantize_fp8
from ircore.testing import assert_close_to_reference, check_provider
from tests.layouts import BF16, FP16, FP32

OP = "scaled_mm_fp8"


@pytest.fixture(scope="module")
def gemm(xpu):
    from vllm_xpu_kernels import _xpu_C as standin

    assert standin.__doc__.startswith("STAND-IN for ``vllm_xpu_kernels._xpu_C``")
    return standin


@pytest.fixture(params=["numel", "rank"])
def routing(gemm, request, monkeypatch):
    """Each routing, with an empty primitive cache."""
    monkeypatch.setattr(gemm, "ROUTING", request.param)
    gemm.PRIMITIVES.clear()
    yield request.param
    gemm.PRIMITIVES.clear()


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def operands(m: int, k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``(a, b = w.t(), per-row scale_a [M, 1], per-column scale_b [1, N])``, rows' scales differing."""
    g = _gen(seed)
    x = torch.randn(m, k, generator=g) * torch.linspace(0.5, 4.0, m).reshape(m, 1)
    w = torch.randn(n, k, generator=g) * torch.linspace(0.02, 0.1, n).reshape(n, 1)
    sa = (x.abs().amax(1, keepdim=True) / 448).clamp(min=1e-6) if k else torch.ones(m, 1)
    sw = (w.abs().amax(1, keepdim=True) / 448).clamp(min=1e-6) if k else torch.ones(n, 1)
    return quantize_fp8(x, sa), quantize_fp8(w, sw).t(), sa, sw.reshape(1, n)


def check(args: tuple, accepted: bool, label: str = "") -> None:
    assert (ircore.explain(OP, *args).chosen == "xpu") is accepted, label
    op = ircore.get_op(OP)
    assert_close_to_reference(op, op(*args), args, label=label)


def test_conformance_kit(gemm, routing):
    """bf16 and fp16 outputs, one seed: every sample but e4m3fnuz accepted (per tensor, per row x
    per column, bias, b row-major) and right under the routing."""
    calls = gemm.CALLS["fp8_gemm"]
    report = check_provider("xpu", dtypes=(BF16, FP16), seeds=(0,), ops=(OP,))
    assert report.checked[OP] > 0, report
    declined = report.declined[OP]
    assert declined and all("e4m3fnuz" in label for label in declined), declined
    assert gemm.CALLS["fp8_gemm"] > calls


def _wide(t: torch.Tensor, cols: int) -> torch.Tensor:
    """``t`` as the first columns of a wider row-major buffer (row stride ``cols``)."""
    buf = torch.zeros(t.shape[0], cols, dtype=t.dtype)
    buf[:, : t.shape[1]] = t
    return buf[:, : t.shape[1]]


def _no_unit_stride(b: torch.Tensor) -> torch.Tensor:
    """``b``'s values at strides ``(2 * N, 2)``."""
    out = torch.zeros(b.shape[0], 2 * b.shape[1], dtype=b.dtype)[:, ::2]
    out.copy_(b)
    return out


def _case(transform, m=5, k=64, n=48, out=BF16):
    def make():
        a, b, sa, sb = operands(m, k, n)
        return transform(a, b, sa, sb, out)

    return make


BIAS = torch.randn(48, generator=_gen(1)).to(BF16)
CASES = {
    # scale forms: any (the adapter passes one contiguous float32 [M, 1] / [1, N] form)
    "per row x per column, b column-major": (_case(lambda a, b, sa, sb, o: (a, b, sa, sb, o, None)), True),
    "per tensor, 1-element scales": (
        _case(lambda a, b, sa, sb, o: (a, b, sa.amax().reshape(1), sb.amax().reshape(1), o, None)),
        True,
    ),
    "per tensor, (1, 1) scales": (
        _case(lambda a, b, sa, sb, o: (a, b, sa.amax().reshape(1, 1), sb.amax().reshape(1, 1), o, None)),
        True,
    ),
    "per tensor, 0-d scales": (_case(lambda a, b, sa, sb, o: (a, b, sa.amax(), sb.amax(), o, None)), True),
    "per-row scale of a wider buffer": (
        _case(lambda a, b, sa, sb, o: (a, b, _wide(sa, 2), sb, o, None)),
        True,
    ),
    "per-column scale, column of a buffer": (
        _case(lambda a, b, sa, sb, o: (a, b, sa, _wide(sb.t(), 3).t(), o, None)),
        True,
    ),
    "bias": (_case(lambda a, b, sa, sb, o: (a, b, sa, sb, o, BIAS)), True),
    "bias, every other element": (
        _case(lambda a, b, sa, sb, o: (a, b, sa, sb, o, torch.stack([BIAS, BIAS], 1).reshape(-1)[::2])),
        True,
    ),
    "fp16 output, bias": (_case(lambda a, b, sa, sb, o: (a, b, sa, sb, FP16, BIAS.to(FP16))), True),
    "fp32 output": (_case(lambda a, b, sa, sb, o: (a, b, sa, sb, FP32, None)), False),
    # b: a unit stride in one dimension, not overlapping
    "b row-major": (_case(lambda a, b, sa, sb, o: (a, b.contiguous(), sa, sb, o, None)), True),
    "b row-major, row stride 80": (_case(lambda a, b, sa, sb, o: (a, _wide(b, 80), sa, sb, o, None)), True),
    "b = w[:, :K].t() of a wider w": (
        _case(lambda a, b, sa, sb, o: (a, _wide(b.t(), 96).t(), sa, sb, o, None)),
        True,
    ),
    "b without a unit stride": (
        _case(lambda a, b, sa, sb, o: (a, _no_unit_stride(b), sa, sb, o, None)),
        False,
    ),
    "b of one column expanded": (
        _case(lambda a, b, sa, sb, o: (a, b[:, :1].expand(64, 48), sa, sb, o, None)),
        False,
    ),
    # a: rows at stride K (one row: any stride from K)
    "a row stride 80 (< 2K: output rows at 80 // 64 * 48 = 48)": (
        _case(lambda a, b, sa, sb, o: (_wide(a, 80), b, sa, sb, o, None)),
        True,
    ),
    "a row stride 128 (2K)": (_case(lambda a, b, sa, sb, o: (_wide(a, 128), b, sa, sb, o, None)), False),
    "a column-major": (_case(lambda a, b, sa, sb, o: (a.t().contiguous().t(), b, sa, sb, o, None)), False),
    "a one row of a wider buffer": (
        _case(lambda a, b, sa, sb, o: (_wide(a, 200), b, sa, sb, o, None), m=1),
        True,
    ),
    "a one row at row stride 0": (
        _case(lambda a, b, sa, sb, o: (a.as_strided((1, 64), (0, 1)), b, sa, sb, o, None), m=1),
        False,
    ),
    "e4m3fnuz": (
        _case(lambda a, b, sa, sb, o: (a.float().to(E4M3FNUZ), b.float().to(E4M3FNUZ), sa, sb, o, None)),
        False,
    ),
    # edges
    "N = 1, per tensor": (
        _case(lambda a, b, sa, sb, o: (a, b, sa.amax().reshape(1), sb.amax().reshape(1), o, None), n=1),
        True,
    ),
    "M = 0": (_case(lambda a, b, sa, sb, o: (a, b, sa, sb, o, None), m=0), True),
    "K = 0, bias": (_case(lambda a, b, sa, sb, o: (a, b, sa, sb, o, BIAS), k=0), True),
}


@pytest.mark.parametrize("label", CASES)
def test_layouts(gemm, routing, label):
    make, accepted = CASES[label]
    check(make(), accepted, label)


def test_release_without_fp8_gemm_declines_it(gemm, monkeypatch):
    """A build without _xpu_C (or a release without fp8_gemm) still serves every other op."""
    from ircore_xpu import scaled_mm

    args = (*operands(5, 64, 48), BF16, None)
    assert ircore.explain(OP, *args).chosen == "xpu"
    monkeypatch.setattr(scaled_mm, "FP8_GEMM", None)
    assert ircore.explain(OP, *args).chosen != "xpu"


# ---------------------------------------------------------------------- why the restrictions
def test_the_routings_disagree_on_the_forms_the_adapter_never_passes(gemm, monkeypatch):
    """A 2-D one-element A scale is per tensor by element count, per token by rank (M floats read
    from a one-element buffer: past its end); a 1-D per-channel B scale ``[N]`` is per channel by
    element count, per tensor by rank (every column gets the first column's scale)."""
    a, b, sa, sb = operands(5, 64, 48)
    one = sa.amax().reshape(1)
    op = ircore.get_op(OP)
    monkeypatch.setattr(gemm, "ROUTING", "numel")
    gemm.PRIMITIVES.clear()
    out = gemm.fp8_gemm(a, b, BF16, one.reshape(1, 1), sb.reshape(-1), None)
    assert_close_to_reference(op, out, (a, b, one, sb, BF16, None))
    monkeypatch.setattr(gemm, "ROUTING", "rank")
    gemm.PRIMITIVES.clear()
    with pytest.raises(RuntimeError, match="out of bounds"):
        gemm.fp8_gemm(a, b, BF16, one.reshape(1, 1), sb, None)
    out = gemm.fp8_gemm(a, b, BF16, sa, sb.reshape(-1), None)
    with pytest.raises(AssertionError):
        assert_close_to_reference(op, out, (a, b, sa, sb, BF16, None))
    gemm.PRIMITIVES.clear()


def test_the_primitive_cache_keys_on_element_counts(gemm, routing):
    """M = 17, N = 4096: ``(1 << 8) | 4096 == (17 << 8) | 4096``. Called directly, a per-token
    call after a per-tensor one of that shape reuses its per-tensor mask (wrong); through the
    adapter (one scale form per shape) every order is right."""
    a, b, sa, sb = operands(17, 32, 4096)
    one = sa.amax().reshape(1)
    op = ircore.get_op(OP)
    if routing == "numel":
        gemm.fp8_gemm(a, b, BF16, one, sb, None)
        out = gemm.fp8_gemm(a, b, BF16, sa, sb, None)
        with pytest.raises(AssertionError):
            assert_close_to_reference(op, out, (a, b, sa, sb, BF16, None))
        gemm.PRIMITIVES.clear()
    for scale_a in (one, sa, one):
        check((a, b, scale_a, sb, BF16, None), True, str(tuple(scale_a.shape)))


def test_what_each_declined_layout_would_get(gemm, routing):
    """A's rows at 2K or more: right values in an output with rows at ``stride // K * N``, not the
    op's layout; a b without a unit stride: read at the wrong strides; K = 0: the output's strides
    divide by K; strided scales: refused from v0.1.13 (numel), misread before (rank)."""
    a, b, sa, sb = operands(5, 64, 48)
    op = ircore.get_op(OP)
    out = gemm.fp8_gemm(_wide(a, 128), b, BF16, sa, sb, None)
    assert out.stride() == (96, 1)
    assert_close_to_reference(op, out.contiguous(), (a, b, sa, sb, BF16, None))
    with pytest.raises(AssertionError):
        assert_close_to_reference(
            op, gemm.fp8_gemm(a, _no_unit_stride(b), BF16, sa, sb, None), (a, b, sa, sb, BF16, None)
        )
    with pytest.raises(RuntimeError, match="division by zero"):
        gemm.fp8_gemm(a[:, :0], b[:0], BF16, sa, sb, None)
    strided = _wide(sa, 2)
    if routing == "numel":
        with pytest.raises(RuntimeError, match="A_scale must be contiguous"):
            gemm.fp8_gemm(a, b, BF16, strided, sb, None)
    else:
        out = gemm.fp8_gemm(a, b, BF16, strided, sb, None)
        with pytest.raises(AssertionError):
            assert_close_to_reference(op, out, (a, b, sa, sb, BF16, None))
