"""The fp8 matmul adapters against the AITER STAND-IN (tests/standins/aiter/aiter/ops/gemm_op_a8w8.py),
on simulated ROCm gfx950 (AITER's fp8: e4m3fn) and gfx942 (e4m3fnuz).

The stand-in models AITER's CK GEMMs as read: operand bytes decoded as the arch's fp8 whatever
their torch dtype (blockscale) or checked against it (``gemm_a8w8``), rows at ``stride(-2)``
(blockscale) or at K from the data pointer (``gemm_a8w8``), scales read row-major from their data
pointers, bf16/fp16 outputs, and CK's refusal of K and N that are not whole vectors. The tests show
that every call the predicates accept gives the op's numbers (the conformance kit, and each
boundary below), and that every call they decline would give wrong numbers or an error.
"""

from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import ircore
from ircore.ops._quant import E4M3FN, E4M3FNUZ
from ircore.ops._scaled_mm import quantize_blocks, quantize_fp8, quantize_groups
from ircore.testing import assert_close_to_reference, check_provider
from tests.layouts import BF16, FP16, FP32, assert_dispatched

MATMULS = ("scaled_mm_fp8", "block_scaled_mm_fp8")
KERNELS = {"block_scaled_mm_fp8": "gemm_a8w8_blockscale", "scaled_mm_fp8": "gemm_a8w8"}


# ------------------------------------------------------------------ inputs
def _x(m: int, k: int) -> torch.Tensor:
    return torch.randn(m, k)


def _w(n: int, k: int) -> torch.Tensor:
    return torch.randn(n, k) * 0.05


def _block(m=4, n=256, k=384, fp8=E4M3FN, out=BF16, block=(128, 128), a_view=None, sa_col=False):
    """``block_scaled_mm_fp8`` arguments; ``a_view(a)`` re-lays ``a`` out (same values)."""
    a, sa = quantize_groups(_x(m, k), block[1], fp8)
    b, sb = quantize_blocks(_w(n, k), block, fp8)
    if a_view is not None:
        a = a_view(a)
    if sa_col:
        sa = sa.t().contiguous().t()  # [M, K/128] with strides (1, M), as DeepGEMM-style quant makes it
    return (a, b, sa, sb, list(block), out)


def _in(rows: int, cols: int, row_stride: int, offset: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """A view of ``t`` with rows at ``row_stride`` starting ``offset`` elements into a wider buffer."""

    def view(t: torch.Tensor) -> torch.Tensor:
        buf = torch.zeros(offset + rows * row_stride, dtype=t.dtype)
        v = buf[offset:].as_strided((rows, cols), (row_stride, 1))
        v.copy_(t)
        return v

    return view


def _scaled(
    m=5,
    n=48,
    k=64,
    fp8=E4M3FN,
    out=BF16,
    per_tensor=(False, False),
    bias=False,
    b_row_major=False,
    a_slice=False,
):
    """``scaled_mm_fp8`` arguments: per-row / per-column scales, or per tensor (each side apart)."""
    x, w = _x(m, k), _w(n, k)
    sa = x.abs().amax().reshape(1) / 200 if per_tensor[0] else x.abs().amax(1, keepdim=True) / 200
    sb = w.abs().amax().reshape(1) / 200 if per_tensor[1] else w.abs().amax(1).reshape(1, n) / 200
    a, b = quantize_fp8(x, sa, fp8), quantize_fp8(w, sb.reshape(-1, 1), fp8).t()
    if a_slice:
        a = _in(m, k, k + 16)(a)
    if b_row_major:
        b = b.contiguous()
    return (a, b, sa, sb, out, torch.randn(n).to(out) if bias else None)


# (op, make, accepted on the arch): each predicate boundary, beside its accepted neighbour.
GFX950_CASES = {
    "block 4x256x384 bf16": ("block_scaled_mm_fp8", lambda: _block(), True),
    "block fp16 out": ("block_scaled_mm_fp8", lambda: _block(out=FP16), True),
    "block fp32 out (AITER asserts bf16/fp16)": ("block_scaled_mm_fp8", lambda: _block(out=FP32), False),
    "block M=1 (decode)": ("block_scaled_mm_fp8", lambda: _block(m=1), True),
    "block N=136: a ragged last 128-row block": ("block_scaled_mm_fp8", lambda: _block(n=136), True),
    "block N=132: not whole 8-element stores": ("block_scaled_mm_fp8", lambda: _block(n=132), False),
    "block K=320: a ragged last group (by rule)": ("block_scaled_mm_fp8", lambda: _block(k=320), False),
    "block 64x64 blocks": ("block_scaled_mm_fp8", lambda: _block(k=256, block=(64, 64)), False),
    "block a rows strided by K+128": ("block_scaled_mm_fp8", lambda: _block(a_view=_in(4, 384, 512)), True),
    "block a rows strided by K+8": ("block_scaled_mm_fp8", lambda: _block(a_view=_in(4, 384, 392)), False),
    "block a column-major": (
        "block_scaled_mm_fp8",
        lambda: _block(a_view=lambda a: a.t().contiguous().t()),
        False,
    ),
    "block a not 16-byte aligned (copied)": (
        "block_scaled_mm_fp8",
        lambda: _block(a_view=_in(4, 384, 384, 1)),
        True,
    ),
    "block scale_a column-major (made row-major)": ("block_scaled_mm_fp8", lambda: _block(sa_col=True), True),
    "block e4m3fnuz (not gfx950's fp8)": ("block_scaled_mm_fp8", lambda: _block(fp8=E4M3FNUZ), False),
    "scaled per-row x per-column": ("scaled_mm_fp8", lambda: _scaled(), True),
    "scaled per-tensor x per-column, fp16": (
        "scaled_mm_fp8",
        lambda: _scaled(out=FP16, per_tensor=(True, False)),
        True,
    ),
    "scaled per-tensor x per-tensor, M=1": (
        "scaled_mm_fp8",
        lambda: _scaled(m=1, per_tensor=(True, True)),
        True,
    ),
    "scaled fp32 out": ("scaled_mm_fp8", lambda: _scaled(out=FP32), False),
    "scaled bias (by rule)": ("scaled_mm_fp8", lambda: _scaled(bias=True), False),
    "scaled b row-major [K, N]": ("scaled_mm_fp8", lambda: _scaled(b_row_major=True), False),
    "scaled a rows strided by K+16": ("scaled_mm_fp8", lambda: _scaled(a_slice=True), False),
    "scaled K=40: not whole 16-element loads": ("scaled_mm_fp8", lambda: _scaled(k=40), False),
    "scaled N=20: not whole 8-element stores": ("scaled_mm_fp8", lambda: _scaled(n=20), False),
    "scaled e4m3fnuz (not gfx950's fp8)": ("scaled_mm_fp8", lambda: _scaled(fp8=E4M3FNUZ), False),
}
#: Declined by rule, not because the kernel is known to misread them (scaled_mm.py says why).
BY_RULE = {"block K=320: a ragged last group (by rule)", "scaled bias (by rule)"}


# ------------------------------------------------------------------ gfx950
def test_conformance_kit_gfx950(gfx950):
    """Every sample the predicates accept is the op's result (bf16 out; 0 rows never launch: the
    stand-in refuses an empty grid); fp32 outputs, ragged or 32x32 blocks, a bias and a
    row-major b declined."""
    calls = {name: gfx950.CALLS[name] for name in KERNELS.values()}
    report = check_provider("aiter", dtypes=(FP32, BF16), seeds=(0,), ops=MATMULS)
    assert report.checked == {"block_scaled_mm_fp8": 4, "scaled_mm_fp8": 8}, report
    for op in MATMULS:
        assert all("float32" in d for d in report.declined[op] if "bfloat16" not in d), op
    block = " ".join(d for d in report.declined["block_scaled_mm_fp8"] if "bfloat16" in d)
    assert "3x200x70" in block and "blocks 32x32" in block
    scaled = " ".join(d for d in report.declined["scaled_mm_fp8"] if "bfloat16" in d)
    assert "bias" in scaled and "b row-major" in scaled
    assert all(gfx950.CALLS[name] > calls[name] for name in KERNELS.values())


def test_gfx950_boundaries(gfx950):
    """Each boundary: the right provider chosen (on fake tensors too, as at compile time), the op's
    numbers, the kernel launched once exactly where accepted (one simulated platform for all)."""
    from ircore_aiter import scaled_mm

    for label, (op_name, make, accepted) in GFX950_CASES.items():
        args = make()
        before = gfx950.CALLS[KERNELS[op_name]]
        assert_dispatched(op_name, args, "aiter", accepted, label)
        assert gfx950.CALLS[KERNELS[op_name]] == before + accepted, label
        with FakeTensorMode() as mode:
            fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            assert getattr(scaled_mm, op_name + "_supports")(*fake) is accepted, label


def test_gfx950_what_is_declined_is_misread(gfx950):
    """Why each is declined: the adapter's own call on it errors (AITER's assert, CK's refusal) or
    gives numbers the op's comparison rejects."""
    from ircore_aiter import scaled_mm

    declined = [label for label, case in GFX950_CASES.items() if not case[2] and label not in BY_RULE]
    for label in declined:
        op_name, make, _ = GFX950_CASES[label]
        args = make()
        try:
            got = getattr(scaled_mm, op_name)(*args)
        except (RuntimeError, AssertionError):
            continue
        with pytest.raises(AssertionError):
            assert_close_to_reference(ircore.get_op(op_name), got, args, label=label)


def test_standin_misreads_column_major_block_scales(gfx950):
    """Why the adapter makes the scales row-major: the kernel reads them from the data pointer."""
    a, b, sa, sb, block, out = _block(m=8, sa_col=True)
    got = gfx950.gemm_a8w8_blockscale(a, b, sa, sb, out)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.block_scaled_mm_fp8, got, (a, b, sa, sb, block, out))


def test_a_release_without_the_gemms_declines(gfx950, monkeypatch):
    """Both entry points are optional per release: without one, its predicate declines."""
    from ircore_aiter import scaled_mm

    block, scaled = _block(), _scaled()
    assert scaled_mm.block_scaled_mm_fp8_supports(*block) and scaled_mm.scaled_mm_fp8_supports(*scaled)
    monkeypatch.setattr(scaled_mm, "_BLOCKSCALE", None)
    monkeypatch.setattr(scaled_mm, "_ROWWISE", None)
    assert not scaled_mm.block_scaled_mm_fp8_supports(*block)
    assert not scaled_mm.scaled_mm_fp8_supports(*scaled)


# ------------------------------------------------------------------ gfx942
def test_gfx942_takes_e4m3fnuz_only(gfx942):
    """gfx942's fp8 is e4m3fnuz: accepted and right; e4m3fn declined by both predicates. The kit
    checks the op's one e4m3fnuz sample of each matmul (bf16 out) and nothing else here."""
    for fp8, accepted in ((E4M3FNUZ, True), (E4M3FN, False)):
        assert_dispatched("block_scaled_mm_fp8", _block(fp8=fp8), "aiter", accepted, f"block {fp8}")
        assert_dispatched("scaled_mm_fp8", _scaled(fp8=fp8), "aiter", accepted, f"scaled {fp8}")
    report = check_provider("aiter", dtypes=(BF16,), seeds=(0,), ops=MATMULS)
    assert report.checked == {"block_scaled_mm_fp8": 1, "scaled_mm_fp8": 1}, report


def test_gfx942_blockscale_reads_e4m3fn_as_e4m3fnuz(gfx942):
    """Why e4m3fn is declined on gfx942: the blockscale kernel checks only that the operands agree
    and decodes their bytes as the arch's e4m3fnuz (every value halved, the product a quarter): no
    error, wrong numbers.
    gemm_a8w8 refuses it (TORCH_CHECK against the arch's fp8)."""
    from ircore_aiter import scaled_mm

    args = _block(fp8=E4M3FN)
    got = scaled_mm.block_scaled_mm_fp8(*args)
    with pytest.raises(AssertionError):
        assert_close_to_reference(ircore.ops.block_scaled_mm_fp8, got, args)
    ratio = got.float() / ircore.ops.block_scaled_mm_fp8.native(*args).float()
    assert abs(torch.nanmedian(ratio).item() - 0.25) < 0.01  # both operands halved (exponent biases 8 vs 7)
    with pytest.raises(RuntimeError, match="int8/fp8"):
        scaled_mm.scaled_mm_fp8(*_scaled(fp8=E4M3FN))
