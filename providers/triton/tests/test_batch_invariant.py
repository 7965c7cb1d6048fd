"""Batch invariance of this provider's kernels: the claims in its table (the invariant launches of
rms_norm, fused_add_rms_norm, rms_norm_gated and the fused norm + quant ops, invariant_kernels.py) and the persistent matmul
of the matmul layer (matmul_layer.py). Under Triton's interpreter on tiny shapes here; on a GPU, the kit's full
matrix (1, 3, 64 and 1000 rows) and the layer on aten::mm/addmm/bmm."""

import pytest
import torch
from conftest import GPU
from ircore_triton.matmul_layer import MatmulConfig, matmul
from ircore_triton.provider import IRCORE_IMPLEMENTATIONS, MATMUL_OPS, NORM_QUANT_OPS, QUANT_OPS, ROPE_OPS

import ircore
from ircore.kit import Registrar
from ircore.testing import check_invariance

DEVICE = GPU or "cpu"
# The interpreter runs a program at a time in numpy: batches of 1000 rows take minutes there.
SIZES = (1, 3, 64, 1000) if GPU else (1, 3, 17)


def test_every_claim_holds() -> None:
    """Registered under a test name with the table's claims and variants; each op's first sample
    per dtype, the row at the start, middle and end of each batch, contiguous and strided. The
    table is validated under that name too: ``triton`` is the installed provider's, which another
    test's loading of the providers may have registered already in this process."""
    registrar = Registrar("triton_bi")
    registrar.register_table(IRCORE_IMPLEMENTATIONS)
    claimed = [impl for impl in registrar.impls if impl.batch_invariant is not False]
    # every op claims it: the norms, activations, position ops and quant kernels as they are or
    # through variants, the fp8 matmuls through variants with one launch config for every M
    assert {impl.op_name for impl in claimed} == {impl.op_name for impl in registrar.impls}
    assert set(ROPE_OPS) | set(QUANT_OPS) | set(MATMUL_OPS) <= {impl.op_name for impl in claimed}
    for impl in claimed:
        # every claim is for the whole op: the dynamic quant ops themselves refuse per-tensor calls
        assert impl.batch_invariant is True
    try:
        for impl in claimed:
            ircore.get_op(impl.op_name).register_impl(
                "triton_bi", impl.fn, impl.supports_args, impl.inplace,
                batch_invariant=impl.batch_invariant, invariant_fn=impl.invariant_fn, fake=impl.fake,
            )  # fmt: skip
        dtypes = (torch.float32, torch.bfloat16) if GPU else (torch.float32,)
        checked = check_invariance("triton_bi", device=DEVICE, dtypes=dtypes, sizes=SIZES, max_samples=1)
    finally:
        for impl in claimed:
            if "triton_bi" in ircore.get_op(impl.op_name).impls:
                ircore.get_op(impl.op_name).unregister_impl("triton_bi")
    assert set(checked) == {impl.op_name for impl in claimed} and all(checked.values()), checked
    fixed = {impl.op_name for impl in claimed if impl.invariant_fn is not None}
    assert fixed == {"rms_norm", "fused_add_rms_norm", "rms_norm_gated", *MATMUL_OPS, *NORM_QUANT_OPS}


TINY = MatmulConfig(16, 16, 16, 2, 4, 1)


# bf16 only on a GPU: Triton 3.6's interpreter returns garbage for this kernel's bf16 tl.dot
# (values of 1e10 for inputs of 1); the fp32 path is the same code.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16] if GPU else [torch.float32])
def test_persistent_matmul_is_a_matmul_and_keeps_rows(dtype) -> None:
    """a @ b (+ bias) within tolerance; each row of a 37-row product equals the row alone, bit for
    bit (rows at the start, middle and end; tiles of 16 so M crosses tile borders)."""
    config = TINY if not GPU else None
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn(37, 40, generator=gen, device=DEVICE).to(dtype)
    b = torch.randn(40, 24, generator=gen, device=DEVICE).to(dtype)
    bias = torch.randn(24, generator=gen, device=DEVICE).to(dtype)
    out = matmul(a, b, bias, config)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(out.float(), (a.float() @ b.float() + bias.float()), atol=tol * 10, rtol=tol)
    for i in (0, 18, 36):
        assert torch.equal(matmul(a[i : i + 1], b, bias, config), out[i : i + 1])
        assert torch.equal(matmul(a[i : i + 3], b, bias, config)[:1], out[i : i + 1])


def test_matmul_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match=r"expected \(M, K\) @ \(K, N\)"):
        matmul(torch.ones(2, 3), torch.ones(4, 5))
    with pytest.raises(TypeError, match=r"dtype torch\.int32 is not supported"):
        matmul(torch.ones(2, 3, dtype=torch.int32), torch.ones(3, 5, dtype=torch.int32))


@pytest.mark.gpu
def test_matmul_layer_routes_aten_on_cuda() -> None:
    """With the layer on, torch.mm / nn.Linear / bmm give each row the bits it has alone."""
    if GPU != "cuda":
        pytest.skip("the matmul layer runs on CUDA only (no NVIDIA GPU here)")
    from ircore import _matmul_layer

    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(300, 4096, generator=gen, device="cuda", dtype=torch.bfloat16)
    linear = torch.nn.Linear(4096, 1024, device="cuda", dtype=torch.bfloat16)
    b3 = torch.randn(4, 4096, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
    with ircore.batch_invariant(matmul=True):
        assert _matmul_layer.installed()
        for fn in (lambda t: t @ linear.weight.t(), linear):
            full = fn(a)
            for i in (0, 150, 299):
                assert torch.equal(fn(a[i : i + 1]), full[i : i + 1])
        batched = torch.bmm(a[:4, None, :].expand(4, 1, 4096).contiguous(), b3)
        assert torch.equal(torch.bmm(a[:1, None, :].contiguous(), b3[:1]), batched[:1])
    assert not _matmul_layer.installed()


def test_the_core_finds_this_providers_matmul_layer_on_a_cuda_platform() -> None:
    """ircore.batch_invariant(matmul=True) takes the layer the active provider's module names
    (IRCORE_MATMUL_LAYER), through the loader; found here without installing it."""
    from ircore_triton import matmul_layer

    from ircore._matmul_layer import find_layer
    from ircore.testing import simulated_platform

    with simulated_platform(kind="cuda", capability=(9, 0)):
        assert find_layer() == ("triton", matmul_layer.LAYER)
    provider, why = find_layer()
    assert provider is None and "CUDA only" in why
