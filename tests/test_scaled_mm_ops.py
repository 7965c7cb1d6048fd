"""The fp8 scaled matmuls: natives dequantize exactly as transformers' FP8 weights mean, the checks
name what is wrong, and the ops compile."""

from __future__ import annotations

import pytest
import torch

import ircore
from ircore.ops import block_scaled_mm_fp8, scaled_mm_fp8
from ircore.ops._scaled_mm import quantize_blocks, quantize_groups
from ircore.testing import compiled_code

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


@pytest.fixture(scope="module")
def block_args():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 300, generator=g), torch.randn(130, 300, generator=g) * 0.05
    a, sa = quantize_groups(x, 128)
    b, sb = quantize_blocks(w, (128, 128))
    return a, b, sa, sb, [128, 128], torch.float32


def test_block_native_is_transformers_dequantization(block_args):
    """transformers' FP8Linear holds weight [N, K] and weight_scale_inv [N/128, K/128]: the
    dequantized weight is each tile times its scale; ragged tiles (N 130, K 300) included."""
    a, b, sa, sb, _, _ = block_args
    w = torch.empty(b.shape)
    for i in range(sb.shape[0]):
        for j in range(sb.shape[1]):
            tile = (slice(i * 128, (i + 1) * 128), slice(j * 128, (j + 1) * 128))
            w[tile] = b[tile].float() * sb[i, j]
    x = torch.cat([a[:, j * 128 : (j + 1) * 128].float() * sa[:, j : j + 1] for j in range(sa.shape[1])], 1)
    torch.testing.assert_close(block_scaled_mm_fp8(*block_args), x @ w.t(), atol=1e-5, rtol=1e-5)


def test_quantized_weights_reproduce_the_dense_matmul(block_args):
    """The samples' quantization (clamp, then cast; scale = amax / 448) keeps ~4% per element."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(6, 300, generator=g), torch.randn(130, 300, generator=g) * 0.05
    out = block_scaled_mm_fp8(*block_args)
    rel = (out - x @ w.t()).norm() / (x @ w.t()).norm()
    assert rel < 0.05


def test_scaled_native_per_row_and_bias():
    g = torch.Generator().manual_seed(1)
    a = (torch.randn(3, 32, generator=g) * 50).clamp(-448, 448).to(E4M3)
    b = (torch.randn(16, 32, generator=g) * 50).clamp(-448, 448).to(E4M3).t()
    sa, sb = torch.rand(3, 1, generator=g), torch.rand(1, 16, generator=g)
    bias = torch.randn(16, generator=g).bfloat16()
    out = scaled_mm_fp8(a, b, sa, sb, torch.bfloat16, bias)
    expected = ((a.float() * sa) @ (b.float() * sb) + bias.float()).bfloat16()
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def _err(op, *args) -> str:
    with pytest.raises(ircore.InvalidArgumentError) as info:
        op(*args)
    return str(info.value)


def test_block_checks_name_what_is_wrong(block_args):
    a, b, sa, sb, block, out_dtype = block_args
    op = "ircore.ops.block_scaled_mm_fp8"
    cases = [
        ((a.float(), b, sa, sb, block, out_dtype), "argument 'a' has dtype torch.float32; expected torch.float8_e4m3fn"),
        ((a, b[:, :200], sa, sb, block, out_dtype), "argument 'b' has shape (130, 200); expected (N, 300)"),
        ((a, b, sa[:, :2], sb, block, out_dtype), "argument 'scale_a' has shape (6, 2); expected per-token-group (6, 3)"),
        ((a, b, sa, sb.t(), block, out_dtype), "argument 'scale_b' has shape (3, 2); expected per-block (2, 3)"),
        ((a, b, sa.double(), sb, block, out_dtype), "argument 'scale_a' has dtype torch.float64; scales are"),
        ((a, b, sa, sb, [128], out_dtype), "argument 'block_size' is [128]; expected [block_n, block_k]"),
        ((a, b, sa, sb, block, torch.int32), "argument 'out_dtype' is torch.int32; expected torch.float32"),
        ((a, b, sa, sb, block, "bfloat16"), "argument 'out_dtype' must be a torch.dtype, got str 'bfloat16'"),
    ]
    for args, message in cases:
        assert f"{op}: {message}" in _err(block_scaled_mm_fp8, *args)


def test_the_block_checks_quick_path_vouches_for_nothing_the_careful_checks_refuse(block_args):
    """The check's one-expression path for valid calls (eager decode's host cost) lets each of
    these through to the careful checks, which name the argument."""
    a, b, sa, sb, block, out_dtype = block_args
    op = "ircore.ops.block_scaled_mm_fp8"
    cases = [
        ((a, b, sa.to("meta"), sb, block, out_dtype), "argument 'scale_a' is on meta but a is on cpu"),
        ((a, b, sa, sb.to("meta"), block, out_dtype), "argument 'scale_b' is on meta but a is on cpu"),
        ((a, b.to("meta"), sa, sb, block, out_dtype), "argument 'b' is on meta but a is on cpu"),
        ((a, b, sa, sb, [0, 128], out_dtype), "argument 'block_size' is [0, 128]; expected [block_n,"),
        ((a, b, sa, sb, [128, 128, 1], out_dtype), "argument 'block_size' is [128, 128, 1]; expected"),
        ((a[None], b, sa, sb, block, out_dtype), "argument 'a' has shape (1, 6, 300); expected a 2-D fp8"),
        ((a, b.float().to(E5M2), sa, sb, block, out_dtype), "argument 'b' has dtype torch.float8_e5m2"),
        ((a, b, sa.t().contiguous().t()[:, :2], sb, block, out_dtype), "argument 'scale_a' has shape (6, 2)"),
        ((a, b, sa, sb, [64, 128], out_dtype), "argument 'scale_b' has shape (2, 3); expected per-block (3,"),
    ]
    for args, message in cases:
        assert f"{op}: {message}" in _err(block_scaled_mm_fp8, *args)
    assert block_scaled_mm_fp8(*block_args).shape == (6, 130)  # and the valid call passes


def test_scaled_checks_name_what_is_wrong():
    a = torch.zeros(4, 32, dtype=E4M3)
    b = torch.zeros(16, 32, dtype=E4M3).t()
    one = torch.ones(1)
    op = "ircore.ops.scaled_mm_fp8"
    cases = [
        ((a, b.t(), one, one, torch.bfloat16), "argument 'b' has shape (16, 32); expected (32, N)"),
        ((a, b, torch.ones(4), one, torch.bfloat16), "argument 'scale_a' has shape (4,); expected per-tensor"),
        (
            (a, b, one, torch.ones(16, 1), torch.bfloat16),
            "argument 'scale_b' has shape (16, 1); expected per-tensor (1,), per-column (1, 16)",
        ),
        ((a, b.to(torch.float8_e5m2), one, one, torch.bfloat16), "argument 'b' has dtype torch.float8_e5m2"),
        ((a, b, one, one, torch.bfloat16, torch.ones(16)), "argument 'bias' is (16,) torch.float32"),
    ]
    for args, message in cases:
        assert f"{op}: {message}" in _err(scaled_mm_fp8, *args)


@pytest.mark.slow
def test_the_block_op_compiles_with_the_ircore_backend(block_args):
    """Ragged groups (K 300) too: Inductor gets ``x * s.repeat_interleave(128, 1)[:, :300]`` wrong
    on the CPU (torch 2.13), so the natives index the scales instead."""
    a, b, sa, sb, block, _ = block_args

    def f(a, b, sa, sb):
        return block_scaled_mm_fp8(a, b, sa, sb, block, torch.bfloat16).float() * 2

    ircore.compile.reset_report()
    out, _ = compiled_code(f, (a, b, sa, sb))  # Inductor's caches off: the lowering runs here
    # Inductor may keep the bf16 result in fp32 for the * 2: one bf16 rounding apart at most
    torch.testing.assert_close(out, f(a, b, sa, sb), atol=2e-2, rtol=8e-3)
    assert dict(ircore.compile.report().lowered["block_scaled_mm_fp8"]) == {"native": 1}
