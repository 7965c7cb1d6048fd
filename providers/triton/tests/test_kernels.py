"""Kernel correctness against fp64 references, through the registered functions and the launchers.

On a machine without a GPU these run in Triton's interpreter (see conftest.py), so shapes are
small; on a GPU the same checks run on the device. The launch config there is the heuristic one
(the interpreter never autotunes), and explicit configs cover the multi-row, persistent and
chunked (wide-row) paths.
"""

import pytest
import torch
from _ref import assert_close, assert_residual, beyond_fp32_rows, rms_norm_ref, silu_and_mul_ref
from conftest import GPU
from ircore_triton import impls, kernels

DEVICE = GPU or "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-6


def _randn(*shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, dtype=torch.float32, device=DEVICE) * scale).to(dtype)


def _weight(n: int, dtype: torch.dtype) -> torch.Tensor:
    return (1.0 + 0.5 * torch.randn(n, device=DEVICE)).to(dtype)


def _layout(kind: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``shape`` that is contiguous, has padded rows, or cannot be viewed as rows."""
    if kind == "contiguous":
        return _randn(*shape, dtype=dtype)
    if kind == "row_stride":  # rows padded by 24 elements: last-dim stride 1, row stride != n
        base = _randn(*shape[:-1], shape[-1] + 24, dtype=dtype)
        return base[..., : shape[-1]]
    if kind == "transposed":  # (a, b, n) from a (b, a, n) buffer: no 2-D view exists
        base = _randn(shape[1], shape[0], *shape[2:], dtype=dtype)
        return base.transpose(0, 1)
    raise AssertionError(kind)


# (shape, has_weight, variance_size, layout)
NORM_CASES = [
    ((4, 256), True, None, "contiguous"),  # several rows per program (short rows)
    ((3, 300), True, None, "contiguous"),  # non-power-of-2 hidden size
    ((2, 3, 200), False, 64, "contiguous"),  # 3-D, no weight, partial variance
    ((5, 1000), True, 999, "contiguous"),  # one row per program
    ((6, 160), True, None, "row_stride"),
    ((3, 4, 96), True, 50, "transposed"),
    ((4, 1), True, None, "contiguous"),  # hidden size 1
    ((1, 128), True, None, "contiguous"),  # a single row
]


def _case_id(case: tuple) -> str:
    shape, w, vs, layout = case
    return f"{'x'.join(map(str, shape))}-{'w' if w else 'nw'}-vs{vs}-{layout}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", NORM_CASES, ids=_case_id)
def test_rms_norm(case: tuple, dtype: torch.dtype) -> None:
    shape, has_w, vs, layout = case
    x = _layout(layout, shape, dtype)
    w = _weight(shape[-1], dtype) if has_w else None
    x_before = x.clone()
    y = impls.rms_norm(x, w, EPS, vs)
    assert y.shape == x.shape and y.is_contiguous()
    assert_close(y, rms_norm_ref(x, w, EPS, vs), dtype)
    assert torch.equal(x, x_before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", NORM_CASES, ids=_case_id)
def test_fused_add_rms_norm_inplace(case: tuple, dtype: torch.dtype) -> None:
    shape, has_w, vs, layout = case
    x = _layout(layout, shape, dtype)
    r = _layout(layout, shape, dtype)
    w = _weight(shape[-1], dtype) if has_w else None
    expected_res = x + r  # rounded to dtype, as the op defines it
    expected_out = rms_norm_ref(expected_res, w, EPS, vs)
    base_x = x._base.clone() if x._base is not None else None

    out, res = impls.fused_add_rms_norm(x, r, w, EPS, vs)
    assert out is x and res is r
    assert_residual(res, expected_res)
    assert_close(out, expected_out, dtype)
    if base_x is not None and layout == "row_stride":  # padding around the rows is untouched
        assert torch.equal(x._base[..., shape[-1] :], base_x[..., shape[-1] :])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", NORM_CASES[:3] + NORM_CASES[4:6], ids=_case_id)
def test_fused_add_rms_norm_out_of_place(case: tuple, dtype: torch.dtype) -> None:
    shape, has_w, vs, layout = case
    x = _layout(layout, shape, dtype)
    r = _layout(layout, shape, dtype)
    w = _weight(shape[-1], dtype) if has_w else None
    x0, r0 = x.clone(), r.clone()
    out, res = impls.fused_add_rms_norm_functional(x, r, w, EPS, vs)
    assert torch.equal(x, x0) and torch.equal(r, r0)
    assert out.is_contiguous() and res.is_contiguous()
    assert_residual(res, x0 + r0)
    assert_close(out, rms_norm_ref(x0 + r0, w, EPS, vs), dtype)


# Explicit configs: several rows per program with a ragged last block; a persistent grid that
# loops (grid-stride) over row blocks; the chunked two-pass kernel (block_n < hidden), also looping.
CONFIGS = [
    kernels.NormConfig(block_m=4, block_n=512, num_warps=4),
    kernels.NormConfig(block_m=2, block_n=512, num_warps=4, max_programs=2),
    kernels.NormConfig(block_m=1, block_n=64, num_warps=4),
    kernels.NormConfig(block_m=1, block_n=128, num_warps=4, max_programs=3),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: f"m{c.block_m}n{c.block_n}p{c.max_programs}"
)
def test_norm_configs(config: kernels.NormConfig, dtype: torch.dtype) -> None:
    x = _randn(7, 300, dtype=dtype)
    r = _randn(7, 300, dtype=dtype)
    w = _weight(300, dtype)
    y = kernels.rms_norm(x, w, EPS, 200, config=config)
    assert_close(y, rms_norm_ref(x, w, EPS, 200), dtype)

    expected_res = x + r
    out, res = kernels.fused_add_rms_norm(x, r, w, EPS, None, config=config)
    assert_residual(res, expected_res)
    assert_close(out, rms_norm_ref(expected_res, w, EPS), dtype)

    kernels.fused_add_rms_norm_(x, r, None, EPS, 200, config=config)
    assert_residual(r, expected_res)
    assert_close(x, rms_norm_ref(expected_res, None, EPS, 200), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("config", [None, CONFIGS[2]], ids=["one pass", "chunked"])
def test_values_whose_squares_leave_fp32(config: kernels.NormConfig | None, dtype: torch.dtype) -> None:
    """The core's semantics: a row whose fp32 sum of squares overflows comes out 0 (NaN at inf)."""
    x = beyond_fp32_rows(300, dtype, DEVICE)
    w = _weight(300, dtype)
    fused = x.clone()
    kernels.fused_add_rms_norm_(fused, torch.zeros_like(x), w, EPS, None, config=config)
    for out in (kernels.rms_norm(x, w, EPS, None, config=config), fused):
        assert_close(out, rms_norm_ref(x, w, EPS), dtype)
        assert (out[:2] == 0).all() and out[2:4].abs().min() > 0
        assert out[4, 150].isnan() and (out[4] == 0).sum() == 299


def test_empty_rows() -> None:
    x = _randn(0, 64)
    assert impls.rms_norm(x, None, EPS).shape == (0, 64)
    out, res = impls.fused_add_rms_norm(x, x.clone(), None, EPS)
    assert out.shape == res.shape == (0, 64)
    assert impls.silu_and_mul(_randn(0, 64)).shape == (0, 32)


SILU_CASES = [
    ((4, 64), "contiguous"),  # several rows per program
    ((3, 2, 200), "contiguous"),  # 3-D, d = 100 (not a power of 2)
    ((2, 3000), "contiguous"),  # d = 1500: several column blocks per row
    ((5, 256), "row_stride"),
    ((3, 2, 64), "transposed"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", SILU_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-{c[1]}")
def test_silu_and_mul(case: tuple, dtype: torch.dtype) -> None:
    shape, layout = case
    x = _layout(layout, shape, dtype)
    y = impls.silu_and_mul(x)
    assert y.shape == (*shape[:-1], shape[-1] // 2) and y.is_contiguous()
    assert_close(y, silu_and_mul_ref(x), dtype)


@pytest.mark.parametrize("config", [kernels.SiluConfig(2, 32, 4), kernels.SiluConfig(1, 128, 4)], ids=str)
def test_silu_configs(config: kernels.SiluConfig) -> None:
    x = _randn(5, 300)
    assert_close(kernels.silu_and_mul(x, config=config), silu_and_mul_ref(x), torch.float32)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
def test_silu_extreme_values() -> None:
    x = torch.tensor([[-100.0, -20.0, 0.0, 20.0, 90.0, 3.0, -1.0, 2.0, 1.0, 1.0, 1.0, 1.0]], device=DEVICE)
    x = x.repeat(2, 1)
    y = impls.silu_and_mul(x)
    assert torch.isfinite(y).all()
    assert_close(y, silu_and_mul_ref(x), torch.float32)
