"""The fp8 quant kernels (csrc/cpu_quant_kernels.cpp, csrc/cuda_quant.cu): the schemas are the
ops', the predicates take exactly what the kernels do, and the kernels match the ops.

On every machine: the schemas (defined in the CPU library) name the ops' parameters with their
defaults; the predicates take CPU calls in both fp8 dtypes where the CPU kernels are loaded, and
on CUDA decline e4m3fnuz and (fused ops) rows over the shared-memory bound; every kernel claims
batch invariance (the ops refuse their per-tensor calls in the mode). On the CPU, in each ISA
compiled in: the fp8 encodings bit for bit against torch's casts (every representable value,
ties, +-max, NaN, e4m3fnuz's 224), and each kernel mode at a few shapes (ragged tails, strided
rows, 3-D, padding) against its fp64 reference, the scales' layout and the residual's bits
against the native's. On a GPU (marked gpu): each op at LLM sizes in each dtype against its fp64
reference with the kit's fp8 comparison, the scales' layout (strides) and the residual's bits
against the native's, rows that are not 16-byte aligned (element-wise path), strided and 3-D
inputs, rows over 48 KiB of shared memory, group sizes that take each team width and path of the
group kernel, 16-bit rows at and past what one block keeps in registers. The ops' own samples and the batch-invariance claims
run through the conformance kit on each device (test_provider.py::test_conformance_kit).
"""

import inspect

import pytest
import torch
from conftest import requires_cuda
from ircore_vllm_c import impls, kernels, provider

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


def test_predicates_device_independent_halves(monkeypatch):
    """CPU calls taken in both fp8 dtypes where the CPU kernels are loaded (at any row length:
    no shared-memory bound), declined where they are not; the CUDA fused ops' row bound; the
    batch-invariance claim of every kernel."""
    assert kernels.CPU_LOADED  # conftest loads them (or stops the run)
    for op in QUANT_OPS:
        for fp8 in (torch.float8_e4m3fn, FNUZ):
            args = _args(op, (4, 256), torch.bfloat16, "cpu", fp8_dtype=fp8)
            assert getattr(impls, f"{op}_supports")(*args) is True, (op, fp8)
        wide = (2 if "silu" in op else 1) * (impls.QUANT_ROW_BYTES // 4 + 4)  # over the CUDA bound
        assert getattr(impls, f"{op}_supports")(*_args(op, (1, wide), torch.float32, "cpu")), op
    with monkeypatch.context() as m:
        m.setattr(kernels, "CPU_LOADED", False)
        for op in QUANT_OPS:
            assert not getattr(impls, f"{op}_supports")(*_args(op, (4, 256), torch.bfloat16, "cpu")), op
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


# ------------------------------------------------------------------------- both devices
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


# ---------------------------------------------------------------------------------------- CPU
def _cpu_isas():
    have = []
    for isa in ("scalar", "avx2"):  # the two copies of the quantisation loops (AVX-512 runs avx2's)
        try:
            torch.ops.ircore_vllm_c._set_cpu_isa(isa)
        except RuntimeError:
            continue
        have.append(isa)
    torch.ops.ircore_vllm_c._set_cpu_isa("auto")
    return have


CPU_ISAS = _cpu_isas()


@pytest.fixture(params=CPU_ISAS)
def cpu_isa(request):
    torch.ops.ircore_vllm_c._set_cpu_isa(request.param)
    try:
        yield request.param
    finally:
        torch.ops.ircore_vllm_c._set_cpu_isa("auto")


def _fp8_probe(fp8):
    """Every finite value of fp8, the midpoints between neighbours (ties: round to even) and one
    fp32 ulp either side of them, values past the max, fp32 subnormals, +-0, +-inf, +-NaN, and
    random values over the whole exponent range."""
    allv = torch.arange(256, dtype=torch.uint8).view(fp8).float()
    allv = allv[torch.isfinite(allv)].unique()
    mids = (allv[1:] + allv[:-1]) / 2
    gen = torch.Generator().manual_seed(0)
    rnd = torch.randn(4096, generator=gen) * torch.exp2(torch.randint(-20, 12, (4096,), generator=gen).float())
    special = [0.0, -0.0, 1e-40, -1e-40, 224.0, 230.0, 240.0, 448.0, 449.0, 464.0, 500.0, -1e30]
    special += [float("inf"), -float("inf"), float("nan"), -float("nan")]
    return torch.cat(
        [allv, mids, torch.nextafter(mids, allv[1:]), torch.nextafter(mids, allv[:-1]), rnd, torch.tensor(special)]
    )


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, FNUZ], ids=str)
def test_cpu_fp8_encoding_is_torchs(fp8, cpu_isa):
    """The kernels' fp8 bytes are torch's cast of the clamped value, bit for bit: round to nearest
    even (ties included), +-fp8_max (448; 224 for e4m3fnuz, not its finfo 240), NaN (with its
    sign on e4m3fn; e4m3fnuz's one NaN 0x80 and no -0), subnormals; in a whole-vector body and
    its element-wise tail (length not a multiple of 8)."""
    m = 224.0 if fp8 is FNUZ else 448.0
    v = _fp8_probe(fp8)
    v = v[: v.numel() // 8 * 8 - 3]  # a tail of 5
    q = torch.ops.ircore_vllm_c.static_quant_fp8(v.reshape(1, -1), torch.ones(1), fp8, None)
    want = v.clamp(-m, m).to(fp8)
    bad = (q.reshape(-1).view(torch.uint8) != want.view(torch.uint8)).nonzero().reshape(-1)
    assert not bad.numel(), (v[bad][:8], q.reshape(-1).view(torch.uint8)[bad][:8], want.view(torch.uint8)[bad][:8])
    top = torch.tensor(m).to(fp8).view(torch.uint8)  # 448: 0x7e; 224 (e4m3fnuz): 0x77, not 240
    for big in [b for b in (230.0, 449.0, 500.0) if b > m]:
        assert q.reshape(-1).view(torch.uint8)[v == big][0] == top, big


def _bits(t):
    """fp8 tensors as their bytes (torch.equal compares NaNs unequal; bytes compare bits)."""
    return t.view(torch.uint8) if t.dtype.itemsize == 1 else t


# (ISA, dtype): every dtype in the vector copy; the portable copy in float16 (its software
# half conversion; the loops are the same for every dtype)
CPU_CASES = [(isa, d) for isa in CPU_ISAS if isa != "scalar" for d in DTYPES] + [("scalar", torch.float16)]


@pytest.mark.parametrize("isa, dtype", CPU_CASES, ids=[f"{i}-{d}" for i, d in CPU_CASES])
@pytest.mark.parametrize("op, replace", VARIANTS, ids=[f"{op}-{'-'.join(r) or 'default'}" for op, r in VARIANTS])
def test_cpu_modes(op, replace, isa, dtype):
    """Each kernel mode against its fp64 reference (the scales' layout and the residual's bits
    against the native's): a row of whole vectors and an element-wise tail, with a ragged last
    group (1002), row-strided x and residual, 3-D x, padding rows, e4m3fnuz. The plain quant ops
    compute what their natives compute, in the same fp32 steps: bit for bit the native's bytes
    and scales (the fp8 tolerance, one fp8 ulp, would let a scale a few % off pass)."""
    names = list(inspect.signature(ircore.get_op(op).native).parameters)
    torch.ops.ircore_vllm_c._set_cpu_isa(isa)
    try:
        args = list(_args(op, (3, 1002), dtype, "cpu", seed=1, **replace))
        _run_and_check(op, tuple(args), "3x1002")
        if op not in FUSED:
            got, want = getattr(impls, op)(*args), ircore.get_op(op).native(*args)
            for g, w in zip(*((t if isinstance(t, tuple) else (t,)) for t in (got, want))):
                assert torch.equal(_bits(g), _bits(w)), (op, replace)
        args[0] = torch.randn(3, 1002 + 24).to(dtype)[:, :1002]  # row stride 1026
        if "x_residual" in names:
            args[1] = torch.randn(3, 1002 + 8).to(dtype)[:, :1002]
        _run_and_check(op, tuple(args), "3x1002 row-strided")
        if not replace.get("scale_alignment", 1) > 1:  # TMA alignment: 2-D only
            _run_and_check(op, _args(op, (2, 5, 256), dtype, "cpu", seed=5, **replace), "2x5x256")
        if "num_token_padding" in names:
            args = _args(op, (5, 512), dtype, "cpu", seed=6, num_token_padding=16, **replace)
            _run_and_check(op, args, "5x512 padded to 16")
        _run_and_check(op, _args(op, (4, 512), dtype, "cpu", seed=7, fp8_dtype=FNUZ, **replace), "e4m3fnuz")
    finally:
        torch.ops.ircore_vllm_c._set_cpu_isa("auto")


@pytest.mark.parametrize("form", ["channel", "token", "group"])
def test_cpu_static_scale_forms(form):
    """vLLM's static scale forms, plain and fused: per channel (K,), per token (M, 1), 2-D group
    scales (M/2, K/64)."""
    shapes = {"channel": (256,), "token": (6, 1), "group": (3, 4)}
    scale = torch.rand(shapes[form], generator=torch.Generator().manual_seed(1)) * 0.02 + 0.005
    for op in ("static_quant_fp8", "rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant"):
        args = _args(op, (6, 256), torch.bfloat16, "cpu", seed=3, scale=scale)
        _run_and_check(op, args, form)
    args = _args("silu_and_mul_static_quant_fp8", (6, 512), torch.bfloat16, "cpu", seed=3, scale=scale)
    _run_and_check("silu_and_mul_static_quant_fp8", args, form)


def test_cpu_dispatch_picks_vllm_c():
    """Through ircore on the CPU: vllm_c's kernel runs for both fp8 dtypes."""
    x = torch.randn(16, 4096, dtype=torch.bfloat16)
    op = ircore.get_op("dynamic_quant_fp8")
    for fp8 in (torch.float8_e4m3fn, FNUZ):
        with ircore.priority(dynamic_quant_fp8=["vllm_c"]):
            assert ircore.explain("dynamic_quant_fp8", x, True, fp8).chosen == "vllm_c"
            q, s = ircore.ops.dynamic_quant_fp8(x, True, fp8)
        assert q.dtype == fp8 and s.shape == (16, 1)
        assert_close_to_reference(op, (q, s), (x, True, fp8))


# ---------------------------------------------------------------------------------------- GPU
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


GROUP_OPS = [op for op in QUANT_OPS if "group_quant" in op and not op.startswith("static")]


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", GROUP_OPS)
def test_group_sizes_take_each_team_width(op, dtype):
    """Group sizes that take each path of the CUDA group kernel (csrc/cuda_quant.h plan_quant):
    8 and 16 (one-lane teams; 9600 / 16 = 600 groups, more teams than one block pass), 64 (two
    lanes; 300 groups, two passes), 100 (groups of partial 16-byte chunks: element-wise), 2048
    (a group past its 32 lanes' registers: read twice; ragged at 4100), each with row-major and
    column-major TMA-strided ue8m0 scales."""
    for g, hidden in ((8, 1000), (16, 9600), (64, 19200), (100, 1000), (2048, 4100)):
        h = 2 * hidden if "silu" in op else hidden
        for replace in ({}, {"column_major": True, "use_ue8m0": True, "scale_alignment": 4}):
            args = _args(op, (5, h), dtype, "cuda", seed=g, group_shape=[1, g], **replace)
            _run_and_check(op, args, f"5x{h} group {g} {replace}")


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("op, replace", VARIANTS, ids=[f"{op}-{'-'.join(r) or 'default'}" for op, r in VARIANTS])
def test_16bit_rows_at_and_past_the_registers(op, replace, dtype):
    """16-bit rows of 16384 (the longest one 512-thread block keeps in registers, 4 chunks a
    lane) and 16392 (past it: read twice, the fused sources through shared memory); float32
    passes that bound at 8192 (test_real_sizes' 14336 and the 48 KiB rows cover it)."""
    for hidden in (16384, 16392):
        h = 2 * hidden if "silu" in op else hidden
        _run_and_check(op, _args(op, (3, h), dtype, "cuda", seed=hidden, **replace), f"3x{h} {replace}")


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
