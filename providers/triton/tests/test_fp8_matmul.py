"""The fp8 matmul kernels against native, under the interpreter on tiny shapes (on a GPU, larger):
the shapes ``torch._scaled_mm`` refuses or gets wrong (M = 1, K / 128 not a multiple of 4) are
taken and right here."""

import pytest
import torch
from conftest import GPU
from ircore_triton import fp8_matmul_kernels as mk
from ircore_triton import impls

from ircore.ops import block_scaled_mm_fp8, scaled_mm_fp8
from ircore.ops._scaled_mm import quantize_blocks, quantize_groups

DEVICE = GPU or "cpu"
E4M3 = torch.float8_e4m3fn


def _block(m, k, n, block=(128, 128), out_dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(m * 7 + k)
    a, sa = quantize_groups(torch.randn(m, k, generator=g), block[1])
    b, sb = quantize_blocks(torch.randn(n, k, generator=g) * 0.05, block)
    return (*(t.to(DEVICE) for t in (a, b, sa, sb)), list(block), out_dtype)


@pytest.mark.parametrize(
    ("m", "k", "n", "block"),
    [
        (1, 640, 96, (128, 128)),  # M = 1 and K / 128 = 5: both declined by torch._scaled_mm
        (3, 200, 70, (128, 128)),  # ragged group and tile
        (5, 64, 48, (16, 32)),  # other block shapes
    ],
)
def test_block_kernel_matches_native(m, k, n, block):
    args = _block(m, k, n, block)
    assert impls.block_scaled_mm_fp8_supports(*args)
    out = mk.block_scaled_mm_fp8(*args)
    torch.testing.assert_close(out.float(), block_scaled_mm_fp8.native(*args).float(), atol=2e-2, rtol=1.6e-2)


def test_block_predicate_needs_a_power_of_two_group_of_16_to_256():
    assert not impls.block_scaled_mm_fp8_supports(*_block(4, 96, 32, (32, 48)))
    assert not impls.block_scaled_mm_fp8_supports(*_block(4, 64, 32, (32, 8)))
    assert impls.block_scaled_mm_fp8_supports(*_block(4, 64, 32, (32, 16)))


@pytest.mark.parametrize("bias", [False, True])
def test_scaled_kernel_matches_native_per_row_and_per_tensor(bias):
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(3, 80, generator=g), torch.randn(40, 80, generator=g) * 0.05
    sa, sb = x.abs().amax(1, keepdim=True) / 448, w.abs().amax(1).reshape(1, 40) / 448
    a = (x / sa).clamp(-448, 448).to(E4M3)
    b = (w / sb.reshape(-1, 1)).clamp(-448, 448).to(E4M3).t()  # [K, N], column-major
    bias_t = torch.randn(40, generator=g).bfloat16() if bias else None
    for args in (
        (a, b, sa, sb, torch.bfloat16, bias_t),
        (a, b.contiguous(), sa.amax().reshape(1), sb, torch.bfloat16, bias_t),
    ):
        args = tuple(t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in args)
        assert impls.scaled_mm_fp8_supports(*args)
        torch.testing.assert_close(
            mk.scaled_mm_fp8(*args).float(), scaled_mm_fp8.native(*args).float(), atol=2e-2, rtol=1.6e-2
        )


@pytest.mark.parametrize(
    "config",
    [
        mk.BlockMatmulConfig(16, 32, split_k=2),  # K split across programs: fp32 partials, then their sum
        mk.BlockMatmulConfig(16, 64, split_k=8),  # more splits than K tiles: the extra programs add zeros
        mk.BlockMatmulConfig(32, 32, num_warps=8, num_stages=4),
    ],
)
def test_block_kernel_launch_configs_match_native(config):
    args = _block(3, 640, 70)  # 5 K tiles (ragged N tile)
    out = mk.block_scaled_mm_fp8(*args, config=config)
    torch.testing.assert_close(out.float(), block_scaled_mm_fp8.native(*args).float(), atol=2e-2, rtol=1.6e-2)


def test_block_candidates_start_with_the_heuristic_and_split_k_only_for_small_m():
    for m in (1, 16, 128, 1024):
        got = mk._block_candidates(m, 4096, 112)
        assert got[0] == mk._block_heuristic(m) and len(got) == len(set(got))
        assert any(c.split_k > 1 for c in got) == (m <= 128)
    assert all(c.split_k == 1 for c in mk._block_candidates(1, 4096, 4))  # too few K tiles to split


@pytest.mark.gpu
@pytest.mark.skipif(GPU != "cuda", reason="the launch-config tuning runs on a CUDA GPU (not in the interpreter)")
@pytest.mark.parametrize("m", [1, 16, 300])
def test_block_kernel_tunes_once_per_key_and_stays_right(m):
    from ircore_triton import kernels

    args = _block(m, 14336, 4096)  # Llama-3-8B's down projection: few programs at small M
    out = mk.block_scaled_mm_fp8(*args)
    key = ("block_scaled_mm_fp8", 4096, 14336, (128, 128), torch.bfloat16, kernels._bucket(m))
    assert isinstance(kernels._CONFIGS.get(key), mk.BlockMatmulConfig)
    torch.testing.assert_close(out.float(), block_scaled_mm_fp8.native(*args).float(), atol=2e-2, rtol=1.6e-2)
