"""The fp8 quant kernels (csrc/cuda_quant.cu): the schemas are the ops', the predicates take
exactly what the kernels do, and, on a GPU, the kernels match the ops at real sizes.

On every machine: the schemas (defined in the CPU library, kernels CUDA only) name the ops'
parameters with their defaults; the predicates decline CPU, e4m3fnuz and (fused ops) rows over
the shared-memory bound, and claim batch invariance except for per-tensor scales. On a GPU
(marked gpu): each op at LLM sizes in each dtype against its fp64 reference with the kit's fp8
comparison, the scales' layout (strides) and the residual's bits against the native's, rows
that are not 16-byte aligned (element-wise path), strided and 3-D inputs, rows over 48 KiB of
shared memory. The ops' own samples and the batch-invariance claims run on the GPU through the
conformance kit (test_provider.py::test_conformance_kit[cuda]).
"""

import inspect

import pytest
import torch
from conftest import requires_cuda
from ircore_vllm_c import impls, provider

import ircore
from ircore._torch_ops import same_strides
from ircore.testing import assert_close_to_reference

QUANT_OPS = provider.QUANT_OPS
FUSED = [op for op in QUANT_OPS if "norm" in op or "silu" in op]
FNUZ = torch.float8_e4m3fnuz


def _args(op, shape, dtype, device, seed=0, **replace):
    """The op's make_inputs, with arguments replaced by name."""
    o = ircore.get_op(op)
    args = list(o.make_inputs(shape, dtype, device, seed))
    names = list(inspect.signature(o.native).parameters)
    for name, value in replace.items():
        args[names.index(name)] = value
    return tuple(args)


@pytest.mark.parametrize("op", QUANT_OPS)
def test_schema_is_the_ops(op):
    """Each compiled op takes the ircore op's parameters, in order, with its defaults."""
    schema = getattr(torch.ops.ircore_vllm_c, op).default._schema
    params = inspect.signature(ircore.get_op(op).native).parameters
    assert [a.name for a in schema.arguments] == list(params)
    for a in schema.arguments:
        default = params[a.name].default
        if default is not inspect.Parameter.empty:
            assert a.default_value == default, (op, a.name)


def test_predicates_device_independent_halves():
    """CPU calls declined (no CPU kernels); e4m3fnuz declined; the fused ops' row bound; the
    batch-invariance claim of the dynamic ops per token only."""
    for op in QUANT_OPS:
        args = _args(op, (4, 256), torch.bfloat16, "cpu")
        assert not getattr(impls, f"{op}_supports")(*args), op
    fits = impls.quant_row_fits
    limit = impls.QUANT_ROW_BYTES
    assert fits(torch.empty(1, limit // 2, dtype=torch.bfloat16))
    assert not fits(torch.empty(1, limit // 2 + 1, dtype=torch.bfloat16))
    assert fits(torch.empty(1, limit // 4))
    assert not fits(torch.empty(1, limit // 4 + 8))
    assert fits(torch.empty(1, limit, dtype=torch.half), halve=True)  # silu: the output's half
    assert not fits(torch.empty(1, limit + 2, dtype=torch.half), halve=True)
    # every quant kernel claims invariance as a whole: the ops refuse their batch-dependent calls
    for op in provider.QUANT_OPS:
        assert provider.IRCORE_IMPLEMENTATIONS[op].batch_invariant is True, op


# ---------------------------------------------------------------------------------------- GPU
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (op, argument replacements): each kernel mode
VARIANTS = [
    ("static_quant_fp8", {}),
    ("static_group_quant_fp8", {}),
    ("dynamic_quant_fp8", {}),
    ("dynamic_quant_fp8", {"per_token": False}),
    ("dynamic_group_quant_fp8", {}),
    ("dynamic_group_quant_fp8", {"column_major": True, "use_ue8m0": True, "scale_alignment": 4}),
    ("rms_norm_static_fp8_quant", {}),
    ("fused_add_rms_norm_static_fp8_quant", {}),
    ("rms_norm_dynamic_quant_fp8", {}),
    ("rms_norm_dynamic_quant_fp8", {"per_token": False}),
    ("fused_add_rms_norm_dynamic_quant_fp8", {}),
    ("fused_add_rms_norm_dynamic_quant_fp8", {"per_token": False}),
    ("rms_norm_group_quant_fp8", {}),
    ("rms_norm_group_quant_fp8", {"column_major": True}),
    ("fused_add_rms_norm_group_quant_fp8", {"use_ue8m0": True}),
    ("silu_and_mul_static_quant_fp8", {}),
    ("silu_and_mul_group_quant_fp8", {}),
    ("silu_and_mul_group_quant_fp8", {"column_major": True, "scale_alignment": 4}),
]


def _run_and_check(op, args, label):
    """The kernel's outputs against the reference (kit's fp8 comparison), and each output's
    dtype, shape and strides (the scales' promised layout) against the native's; a residual
    output (bits fixed by the op: the rounded sum) equal to the native's."""
    o = ircore.get_op(op)
    assert getattr(impls, f"{op}_supports")(*args), label
    out = getattr(impls, op)(*args)
    assert_close_to_reference(o, out, args, label=label)
    outs = out if isinstance(out, tuple) else (out,)
    want = o.native(*args)
    want = want if isinstance(want, tuple) else (want,)
    for i, (g, w) in enumerate(zip(outs, want)):  # (strides of size-1 dimensions step nowhere)
        assert same_strides(w.shape, g.stride(), w.stride()), (label, i, g.stride(), w.stride())
    if op.startswith("fused_add"):
        torch.testing.assert_close(outs[-1], want[-1], atol=0, rtol=0)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op, replace", VARIANTS, ids=[f"{op}-{'-'.join(r) or 'default'}" for op, r in VARIANTS])
def test_real_sizes(op, replace, dtype):
    """LLM hidden sizes (4096, 7168, 14336; silu_and_mul twice that) at 1, 37 and 256 tokens."""
    for hidden in (4096, 7168, 14336):
        for tokens in (1, 37, 256):  # decode, a few, more rows than SMs (the fp64 check is on the CPU)
            h = 2 * hidden if "silu" in op else hidden
            args = _args(op, (tokens, h), dtype, "cuda", seed=tokens + hidden, **replace)
            _run_and_check(op, args, f"{tokens}x{h} {replace}")


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op, replace", VARIANTS, ids=[f"{op}-{'-'.join(r) or 'default'}" for op, r in VARIANTS])
def test_element_wise_strided_and_3d(op, replace, dtype):
    """Rows that are not whole 16-byte chunks (hidden 1000, 1003: the element-wise path; group
    128 leaves a ragged last group), row-strided x (and residual), 3-D x, padding rows."""
    names = list(inspect.signature(ircore.get_op(op).native).parameters)
    for hidden in (1000, 1003, 4096):
        if "silu" in op and hidden % 2:
            continue
        args = list(_args(op, (7, hidden), dtype, "cuda", seed=hidden, **replace))
        _run_and_check(op, tuple(args), f"7x{hidden}")
        wide = torch.randn(7, hidden + 24, device="cuda").to(dtype)
        args[0] = wide[:, :hidden]  # row stride hidden + 24
        if "x_residual" in names:
            args[1] = torch.randn(7, hidden + 8, device="cuda").to(dtype)[:, :hidden]
        _run_and_check(op, tuple(args), f"7x{hidden} row-strided")
    if not replace.get("scale_alignment", 1) > 1:  # TMA alignment: 2-D only
        args = _args(op, (2, 5, 1024), dtype, "cuda", seed=5, **replace)
        _run_and_check(op, args, "2x5x1024")
    if "num_token_padding" in names:
        args = _args(op, (5, 512), dtype, "cuda", seed=6, num_token_padding=16, **replace)
        _run_and_check(op, args, "5x512 padded to 16")


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("op", FUSED)
def test_rows_over_48k_of_shared_memory(op):
    """A float32 row of 16384 (64 KiB, over the default 48 KiB of dynamic shared memory: the
    launcher opts in) and the bound itself; one over it is declined."""
    k = impls.QUANT_ROW_BYTES // 4
    for hidden in (16384, k):
        h = 2 * hidden if "silu" in op else hidden
        _run_and_check(op, _args(op, (3, h), torch.float32, "cuda"), f"3x{h} float32")
    h = (2 if "silu" in op else 1) * (k + 4)
    args = _args(op, (1, h), torch.float32, "cuda")
    assert not getattr(impls, f"{op}_supports")(*args)


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("op", QUANT_OPS)
def test_e4m3fnuz_declined_and_refused(op):
    """e4m3fnuz: the predicate declines it, and the kernel called anyway says why."""
    args = _args(op, (4, 256), torch.bfloat16, "cuda", fp8_dtype=FNUZ)
    assert not getattr(impls, f"{op}_supports")(*args)
    with pytest.raises(RuntimeError, match="float8_e4m3fn"):
        getattr(impls, op)(*args)


@requires_cuda
@pytest.mark.gpu
def test_dispatch_picks_vllm_c_on_cuda():
    """Through ircore: the kernel runs for e4m3fn, the native for e4m3fnuz."""
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    with ircore.priority(dynamic_quant_fp8=["vllm_c"]):
        q, s = ircore.ops.dynamic_quant_fp8(x, True, torch.float8_e4m3fn)
        q2, s2 = ircore.ops.dynamic_quant_fp8(x, True, FNUZ)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (16, 1)
    assert q2.dtype == FNUZ
    op = ircore.get_op("dynamic_quant_fp8")
    assert_close_to_reference(op, (q, s), (x, True, torch.float8_e4m3fn))
    assert_close_to_reference(op, (q2, s2), (x, True, FNUZ))
