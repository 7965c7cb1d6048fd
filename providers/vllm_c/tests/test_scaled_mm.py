"""The fp8 matmuls through torch._scaled_mm: the predicates take only what it computes right.

The boundaries come from the H200 measurements (ops-wave2.md 5.3); on the CPU the predicates'
device-independent part is checked for a given compute capability. On a GPU the implementation
is compared with native where it is chosen, and the silent-wrong shapes must go elsewhere. (On
the CPU both ops run this provider's own kernel: test_fp8_mm_kernel.py.)
"""

import pytest
import torch
from conftest import requires_cuda
from ircore_vllm_c import scaled_mm as sm

import ircore
from ircore.ops import block_scaled_mm_fp8, scaled_mm_fp8
from ircore.ops._scaled_mm import quantize_blocks, quantize_groups

H100 = (9, 0)
ADA = (8, 9)
BLACKWELL = (10, 0)


def _block_args(m, k, n, device="cpu", block=(128, 128), out_dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) * 0.05
    a, sa = quantize_groups(x, block[1])
    b, sb = quantize_blocks(w, block)
    return (*(t.to(device) for t in (a, b, sa, sb)), list(block), out_dtype)


def _scaled_args(m, k, n, per_tensor=False, bias=False, device="cpu", out_dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.05
    if per_tensor:
        sa, sb = x.abs().amax().reshape(1) / 448, w.abs().amax().reshape(1) / 448
    else:
        sa, sb = x.abs().amax(1, keepdim=True) / 448, w.abs().amax(1).reshape(1, n) / 448
    a = (x / sa).clamp(-448, 448).to(torch.float8_e4m3fn)
    b = (w / sb.reshape(-1, 1) if not per_tensor else w / sb).clamp(-448, 448).to(torch.float8_e4m3fn).t()
    bias_t = torch.randn(n, generator=g).to(out_dtype) if bias else None
    out = (a, b, sa.float(), sb.float(), out_dtype, bias_t)
    return tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in out)


@pytest.mark.parametrize(
    ("k", "ok"),
    # K/128 a multiple of 4 is right; 5, 9, 22 (Llama-2's 11008 is 86) are silently wrong: declined
    [(512, True), (1024, True), (2560, True), (640, False), (1152, False), (2816, False), (11008, False)],
)
def test_blockwise_declines_k_blocks_not_a_multiple_of_four(k, ok):
    a, b, _, _, block, out = _block_args(4, k, 128)
    assert sm.block_shape_ok(a, b, block, out, H100) is ok


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"m": 1}, "M % 4"),
        ({"m": 17}, "M % 4"),
        ({"m": 0}, "empty"),
        ({"n": 200}, "N % 128"),
        ({"block": (64, 64)}, "blocks other than 128x128"),
        ({"out_dtype": torch.float16}, "not measured"),
        ({"capability": ADA}, "sm_89 has no blockwise scaling"),
        ({"capability": BLACKWELL}, "another scale format"),
    ],
)
def test_blockwise_declines_what_cublas_refuses_or_was_not_measured(change, why):
    m, n = change.get("m", 8), change.get("n", 256)
    a, b, _, _, block, out = _block_args(
        m, 512, n, block=change.get("block", (128, 128)), out_dtype=change.get("out_dtype", torch.bfloat16)
    )
    assert not sm.block_shape_ok(a, b, block, out, change.get("capability", H100)), why


def test_blockwise_declines_e4m3fnuz_and_non_contiguous_operands():
    a, b, _, _, block, out = _block_args(8, 512, 256)
    assert sm.block_shape_ok(a, b, block, out, H100)
    assert not sm.block_shape_ok(a.to(torch.float32).to(torch.float8_e4m3fnuz), b, block, out, H100)
    wide = torch.zeros(8, 1024, dtype=a.dtype)
    wide[:, :512] = a
    assert not sm.block_shape_ok(wide[:, :512], b, block, out, H100)


def test_scaled_mm_predicate_boundaries():
    per_row = _scaled_args(7, 64, 32)
    assert sm.scaled_shape_ok(*per_row, H100)
    assert not sm.scaled_shape_ok(*per_row, ADA)  # per-row scales need sm_90
    per_tensor = _scaled_args(7, 64, 32, per_tensor=True)
    assert sm.scaled_shape_ok(*per_tensor, ADA)
    assert not sm.scaled_shape_ok(*per_tensor, (8, 6))  # no fp8 before sm_89
    a, b, sa, sb, out, _ = per_row
    assert not sm.scaled_shape_ok(a, b.contiguous(), sa, sb, out, None, H100)  # b must be column-major
    bad_k = _scaled_args(7, 72, 32)
    assert not sm.scaled_shape_ok(*bad_k, H100)  # K % 16
    bad_n = _scaled_args(7, 64, 40)
    assert not sm.scaled_shape_ok(*bad_n, H100)  # N % 16
    assert sm.scaled_shape_ok(*_scaled_args(7, 64, 32, bias=True), H100)  # bf16 bias, bf16 out
    assert not sm.scaled_shape_ok(*_scaled_args(7, 64, 32, bias=True, out_dtype=torch.float32), H100)


def test_on_the_cpu_both_run_the_cpu_kernel():
    """Both ops have a CPU kernel (test_fp8_mm_kernel.py)."""
    args = _block_args(8, 512, 256)
    assert ircore.explain("block_scaled_mm_fp8", *args).chosen == "vllm_c"
    torch.testing.assert_close(block_scaled_mm_fp8(*args), block_scaled_mm_fp8.native(*args))
    args = _scaled_args(7, 64, 32)
    assert ircore.explain("scaled_mm_fp8", *args).chosen == "vllm_c"
    torch.testing.assert_close(scaled_mm_fp8(*args), scaled_mm_fp8.native(*args))


@pytest.mark.parametrize("column_major", [True, False])
def test_cuda_blockwise_is_the_anchors_call_on_views_of_the_callers_tensors(monkeypatch, column_major):
    """Off the CPU the blockwise op is one ``torch._scaled_mm`` call on views of the caller's
    tensors (scale_a copied only when it is not column-major, cuBLASLt's layout): the call that
    benchmarks/matmul_fp8_gpu.py times as its anchor (``a, b.t(), sa, sb.t()``), so a gap between
    the two there is the measurement's, not this provider's (benchmarks/README.md, 3d). Checked on
    meta tensors (not CPU ones, which take the CPU kernel) with the call recorded."""
    m, k, n = 64, 512, 256
    a = torch.empty(m, k, dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty(n, k, dtype=torch.float8_e4m3fn, device="meta")
    sa = torch.empty_strided((m, k // 128), (1, m) if column_major else (k // 128, 1), device="meta")
    sb = torch.empty(n // 128, k // 128, device="meta")
    calls = []

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return torch.empty(m, n, dtype=kwargs["out_dtype"], device="meta")

    monkeypatch.setattr(torch, "_scaled_mm", record)
    sm.block_scaled_mm_fp8(a, b, sa, sb, [128, 128], torch.bfloat16)
    ((pa, pb, psa, psb), kwargs) = calls[0]
    assert len(calls) == 1 and kwargs == {"out_dtype": torch.bfloat16}
    assert pa is a
    assert pb._base is b and pb.shape == (k, n) and pb.stride() == b.t().stride()
    assert psb._base is sb and psb.shape == (k // 128, n // 128) and psb.stride() == (1, k // 128)
    assert psa.shape == sa.shape and psa.stride() == (1, m)
    assert (psa is sa) is column_major


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("k", [512, 2560, 2816, 640])
def test_cuda_blockwise_is_right_where_chosen_and_declined_where_cublas_is_wrong(k):
    args = _block_args(64, k, 256, device="cuda")
    chosen = ircore.explain("block_scaled_mm_fp8", *args).chosen
    assert (chosen == "vllm_c") is ((k // 128) % 4 == 0 and torch.cuda.get_device_capability()[0] == 9)
    out = block_scaled_mm_fp8(*args)
    ref = block_scaled_mm_fp8.reference(*args).float()
    rel = (out.float() - ref).norm() / ref.norm()
    assert rel < 1e-2, (chosen, rel)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize(("per_tensor", "bias"), [(True, False), (False, False), (False, True)])
def test_cuda_scaled_mm_matches_native(per_tensor, bias):
    args = _scaled_args(64, 256, 128, per_tensor=per_tensor, bias=bias, device="cuda")
    out = sm.scaled_mm_fp8(*args) if sm.scaled_mm_fp8_supports(*args) else pytest.skip("not supported here")
    torch.testing.assert_close(out.float(), scaled_mm_fp8.native(*args).float(), atol=2e-2, rtol=1.6e-2)
