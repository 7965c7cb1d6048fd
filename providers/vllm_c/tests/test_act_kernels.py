"""The gated activations' kernels (gelu_and_mul, mul_and_silu, fatrelu_and_mul, swigluoai_and_mul)
against the op's fp64 reference and native: every dtype, odd half-widths (vector tails), every
layout (strided, misaligned, transposed, expanded), each CPU ISA this machine has, CUDA where
there is a GPU; the NaN/inf and clamp edges; the kernels' own argument errors."""

import math

import _ref
import pytest
import torch
from conftest import requires_cuda
from test_kernels import _layouts, _randn, target  # noqa: F401  (target: the ISA/device fixture)

import ircore

ops = torch.ops.ircore_vllm_c

# (op, parameters): every function the kernels compile (ACT), and parameter values that matter.
VARIANTS = [
    ("gelu_and_mul", ("none",)),
    ("gelu_and_mul", ("tanh",)),
    ("mul_and_silu", ()),
    ("fatrelu_and_mul", (0.0,)),
    ("fatrelu_and_mul", (-0.4,)),
    ("swigluoai_and_mul", (1.702, 7.0)),
    ("swigluoai_and_mul", (0.5, 1.5)),
    ("swigluoai_and_mul", (1.702, math.inf)),
]
IDS = [f"{n}{p}" for n, p in VARIANTS]


def _check(name, params, x, dtype, label=""):
    op = ircore.get_op(name)
    out = getattr(ops, name)(x, *params)
    assert out.shape == (*x.shape[:-1], x.shape[-1] // 2) and out.dtype == dtype and out.is_contiguous(), label
    tol = op.tolerance(dtype)
    ref = op.reference(x.cpu(), *params).to(out.device)
    torch.testing.assert_close(out.double(), ref, atol=tol.atol, rtol=tol.rtol, msg=lambda m: f"{name}{params} {label}: {m}")
    torch.testing.assert_close(out, op.native(x, *params), atol=tol.atol, rtol=tol.rtol, equal_nan=True)


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_kernel_matches_reference(target, name, params, dtype):  # noqa: F811
    """Half-widths 1 (no vector), 7, 8 (16-bit AVX2 vector exactly), 33, 1000 and 4097 (tails of
    every vector width), over 1, 3 and 257 rows (several threads' tasks)."""
    for tokens, d in ((1, 1), (3, 7), (257, 8), (3, 33), (3, 1000), (1, 4097)):
        x = _randn((tokens, 2 * d), dtype, target, tokens + d, scale=4.0)
        _check(name, params, x, dtype, f"{tokens}x{2 * d}")


@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_layouts_3d_and_empty(target, name, params, dtype):  # noqa: F811
    for label, x in _layouts(5, 2 * 130, dtype, target, 9):
        _check(name, params, x * 3, dtype, label)
    _check(name, params, _randn((2, 3, 2 * 64), dtype, target, 4, scale=3.0), dtype, "2x3x128")
    assert getattr(ops, name)(torch.empty((0, 16), dtype=dtype, device=target), *params).shape == (0, 8)


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_extremes_and_nan_match_native(target, name, params):  # noqa: F811
    """Large magnitudes (exp saturating both ways), +-inf, NaN and zeros, every (a, b) pair of them,
    in several lane positions: the kernel gives native's result, NaN where native has NaN."""
    v = [-100.0, -20.0, -7.5, -1e-3, 0.0, 1e-3, 7.0, 7.5, 20.0, 100.0, math.inf, -math.inf, math.nan]
    vals = torch.tensor(v)
    x = torch.cat([vals.repeat(len(v)), vals.repeat_interleave(len(v))]).reshape(1, -1)  # every pair
    x = torch.cat([x, x.roll(5, -1)]).to(target)  # the pairs in other lanes too
    out = getattr(ops, name)(x, *params)
    expected = ircore.get_op(name).native(x, *params)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_fatrelu_threshold_is_compared_in_fp32(target):  # noqa: F811
    """A value equal to the threshold rounded to fp32 is dropped; one just above is kept; a
    threshold beyond fp32's range acts as +-inf (native's rule)."""
    t = 0.1
    t32 = torch.tensor(t, dtype=torch.float32)
    above = torch.nextafter(t32, torch.tensor(1.0))
    x = torch.stack([t32, above, torch.tensor(-5.0), torch.tensor(1.0), torch.tensor(1.0), torch.tensor(1.0)])
    x = x.reshape(1, 6).to(target)
    out = ops.fatrelu_and_mul(x, t)
    assert out.cpu().tolist() == [[0.0, above.item(), 0.0]]
    assert torch.equal(out, ircore.ops.fatrelu_and_mul.native(x, t))
    assert ops.fatrelu_and_mul(x, 1e308).abs().sum().item() == 0.0
    assert torch.equal(ops.fatrelu_and_mul(x, -1e308), x[:, :3] * x[:, 3:])


def test_kernels_refuse_bad_arguments_themselves(target):  # noqa: F811
    """Called directly (torch.ops.ircore_vllm_c.*, no ircore check in front), the same calls are
    refused, with the op and the fix."""
    x = _randn((2, 8), torch.float32, target, 1)
    for call, message in [
        (lambda: ops.gelu_and_mul(x, "exact"), "approximate must be 'none' or 'tanh', got 'exact'"),
        (lambda: ops.mul_and_silu(x[:, :7]), "mul_and_silu: the last dimension of x must be even and non-zero, got 7"),
        (lambda: ops.fatrelu_and_mul(x.double(), 0.0), "fatrelu_and_mul: x must be float32, float16 or bfloat16"),
        (lambda: ops.swigluoai_and_mul(x, 1.0, -1.0), "swigluoai_and_mul: limit must be >= 0"),
        (lambda: ops.swigluoai_and_mul(x, math.nan, 7.0), "swigluoai_and_mul: alpha must not be NaN"),
        (lambda: ops.gelu_and_mul(torch.empty(2, 0, device=target), "none"), "must be even and non-zero, got 0"),
    ]:
        with pytest.raises(RuntimeError, match=message.replace("(", r"\(").replace(")", r"\)")):
            call()


def test_dispatch_chooses_the_kernels_on_cpu():
    """Through ircore on CPU: the vllm_c kernels run (explain and the call agree), for every op."""
    x = _randn((4, 64), torch.bfloat16, "cpu", 2)
    for name, params in VARIANTS:
        op = ircore.get_op(name)
        assert op.explain(x, *params).chosen == "vllm_c", name
        torch.testing.assert_close(op(x, *params), getattr(ops, name)(x, *params), atol=0, rtol=0)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("dtype", _ref.DTYPES, ids=str)
def test_cuda_vector_and_elementwise_paths_and_graphs(dtype):
    """CUDA: 16-byte vectors where d, the pointers and the row stride allow (d % (16 / size) == 0),
    element-wise otherwise (odd d, a misaligned start); many rows (a grid of many blocks); the
    kernels captured in a CUDA graph and replayed on new inputs."""
    for name, params in VARIANTS:
        for x in (
            _randn((1000, 2 * 4096), dtype, "cuda", 1, scale=4.0),  # vector path, 32k blocks
            _randn((7, 2 * 4093), dtype, "cuda", 2, scale=4.0),  # odd d: element-wise
            _randn((7, 2 * 512 + 3), dtype, "cuda", 3, scale=4.0)[:, 3:],  # misaligned start
        ):
            _check(name, params, x, dtype, f"cuda {tuple(x.shape)}")
        x = _randn((64, 2 * 1024), dtype, "cuda", 4, scale=4.0)
        fn = getattr(ops, name)
        fn(x, *params)  # warm up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(x, *params)
        x.copy_(_randn((64, 2 * 1024), dtype, "cuda", 5, scale=4.0))
        graph.replay()
        _check(name, params, x, dtype, "graph replay")
        torch.testing.assert_close(out, fn(x, *params), atol=0, rtol=0)
