"""The RoPE kernels (rotary_embedding, rotary_embedding_query_only, rotary_pos_emb,
fused_qk_norm_rope) against the ops' fp64 references and native, on every CPU ISA this machine has
(and CUDA where there is a GPU): both styles, partial rotary with rope_dim_offset, deepseek with
offsets, inverse, cache dtypes, strided and GQA layouts, T = 0, and the in-place contract (outputs
written where the inputs lie, pass-through channels and v untouched)."""

import pytest
import torch
from conftest import requires_cuda
from ircore_vllm_c import impls
from test_kernels import TARGET_IDS, TARGETS

import ircore
from ircore.ops import _rope_inputs as _rope

ops = torch.ops.ircore_vllm_c
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ROWS = 97  # cache rows


# AVX512-BF16 runs the plain AVX-512 RoPE copy (cpu_rope_kernels.cpp): not a target of its own.
_ROPE_TARGETS = [(t, i) for t, i in zip(TARGETS, TARGET_IDS, strict=True) if t[1] != "avx512bf16"]


@pytest.fixture(params=[t for t, _ in _ROPE_TARGETS], ids=[i for _, i in _ROPE_TARGETS])
def target(request):
    """Each CPU ISA this machine has, then each other device (as test_kernels' fixture)."""
    device, isa = request.param
    if isa is not None:
        ops._set_cpu_isa(isa)
    try:
        yield device
    finally:
        ops._set_cpu_isa("auto")


def _cache(rotary_dim, dtype, device, scale=1.0):
    """vLLM's cos/sin cache (built in fp32, once per shape), in dtype on device."""
    return _rope._rope_cache(ROWS, rotary_dim, "cpu", scale=scale).to(dtype).to(device)


def _randn(shape, dtype, device, seed, scale=1.0):
    t = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale
    return t.to(dtype).to(device)


def _positions(n, device, seed, high=ROWS):
    return torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(seed)).to(device)


def _close(op, got, args, dtype):
    """Within the op's tolerance of its fp64 reference and of native (on CPU copies)."""
    cpu = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
    tol = op.tolerances[dtype]
    got = got if isinstance(got, tuple) else (got,)
    for name, fn in (("reference", op.reference), ("native", op.native)):
        want = fn(*cpu)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == dtype and g.shape == w.shape
            torch.testing.assert_close(g.cpu().double(), w.double(), atol=tol.atol, rtol=tol.rtol, msg=name)


# (head_size, rotary_dim, rope_dim_offset, neox, format, offsets, inverse, cache dtype or None)
# rotary_dim 20 leaves vector tails (10 pairs neox, 20 channels gptj) on AVX2 and AVX-512.
CASES = [
    (64, 64, 0, True, "standard", False, False, None),
    (128, 128, 0, False, "standard", False, False, None),
    (80, 20, 8, True, "standard", False, False, None),
    (80, 20, 30, False, "standard", False, False, None),
    (64, 64, 0, True, "standard", False, True, None),
    (64, 32, 32, False, "standard", False, True, None),
    (64, 64, 0, True, "standard", False, False, torch.float32),
    (64, 64, 0, False, "standard", False, False, torch.float32),
    (64, 64, 0, True, "deepseek", True, False, torch.float32),
    (64, 32, 16, False, "deepseek", True, False, torch.float32),
    (64, 32, 0, False, "deepseek", False, True, None),
    (64, 64, 0, True, "standard", False, False, torch.bfloat16),  # refused but with bf16 activations
]
CASE_IDS = [
    "neox",
    "gptj-D128",
    "neox-rd20-off8",
    "gptj-rd20-off30",
    "neox-inverse",
    "gptj-inverse-rd32-off32",
    "neox-fp32cache",
    "gptj-fp32cache",
    "deepseek-neox-offsets",
    "deepseek-gptj-offsets-rd32-off16",
    "deepseek-gptj-inverse",
    "neox-bf16cache",
]


def _rope_args(case, dtype, device, tokens=7, hq=3, hk=1, split=False):
    head, rd, off, neox, fmt, with_offsets, inverse, cdt = case
    q = _randn((tokens, hq, head) if split else (tokens, hq * head), dtype, device, 1)
    k = _randn((tokens, hk, head) if split else (tokens, hk * head), dtype, device, 2)
    cache = _cache(rd, cdt or dtype, device, scale=1.1 if fmt == "deepseek" else 1.0)
    offsets = _positions(tokens, device, 4, high=ROWS // 2) if with_offsets else None
    pos = _positions(tokens, device, 3, high=ROWS // 2 if with_offsets else ROWS)
    return (pos, q, k, head, rd, cache, neox, offsets, fmt, inverse, off)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_rotary_embedding(target, case, dtype):
    """query/key rotated in place (GQA: 3 query heads, 1 key head), [T, H*D] and [T, H, D];
    the channels outside [rope_dim_offset, + rotary_dim) are left exactly as they were."""
    op = ircore.ops.rotary_embedding
    for split in (False, True):
        args = _rope_args(case, dtype, target, split=split)
        if case[-1] not in (None, dtype, torch.float32):  # a cache dtype the kernels do not read
            assert not impls.rotary_embedding_supports(*args)
            with pytest.raises(RuntimeError, match="cos_sin_cache must be float32 or the activations' dtype"):
                impls.rotary_embedding(*args)
            return
        assert impls.rotary_embedding_supports(*args)
        q, k = args[1].clone(), args[2].clone()
        ptrs = (q.data_ptr(), k.data_ptr())
        assert impls.rotary_embedding(args[0], q, k, *args[3:]) is None
        assert (q.data_ptr(), k.data_ptr()) == ptrs
        _close(op, (q, k), args, dtype)
        head, rd, off = case[0], case[1], case[2]
        for got, x in ((q, args[1]), (k, args[2])):
            g3, x3 = got.reshape(7, -1, head), x.reshape(7, -1, head)
            assert torch.equal(g3[..., :off], x3[..., :off])
            assert torch.equal(g3[..., off + rd :], x3[..., off + rd :])
        qo = args[1].clone()
        no_key = (args[0], qo, *args[3:])
        impls.rotary_embedding_query_only(*no_key)
        assert torch.equal(qo, q)  # bit for bit the query of the two-tensor op


def _layouts(dtype, device):
    """(label, query, key) in the layouts the kernels read in place, and one they copy."""
    qkv = _randn((6, (4 + 2 + 2) * 64), dtype, device, 5)
    yield "q, k views of one qkv buffer (row stride 512)", qkv[:, : 4 * 64], qkv[:, 4 * 64 : 6 * 64]
    b = _randn((6, 8 * 64), dtype, device, 6).view(2, 3, 8, 64)
    yield "[B, S, H, D] head views (head stride 64, token stride 512)", b[:, :, :4], b[:, :, 4:6]
    p = _randn((3, 2, 4, 64), dtype, device, 7).permute(1, 0, 2, 3)
    yield "[B, S, H, D] with no token stride (a copy, written back)", p, _randn((2, 3, 128), dtype, device, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rotary_embedding_layouts(target, dtype):
    """Strided query/key are rotated where they lie (or through a copy written back); the rest
    of a shared qkv buffer is untouched; T = 0 does nothing."""
    op = ircore.ops.rotary_embedding
    tol = op.tolerances[dtype]
    cache = _cache(64, dtype, target)
    pos = _positions(6, target, 6).view(2, 3)
    for label, q, k in _layouts(dtype, target):
        rest = (64, 64, cache, True, None, "standard", False, 0)
        expected = op.native(pos.cpu(), q.cpu().clone(), k.cpu().clone(), 64, 64, cache.cpu(), *rest[3:])
        base = q._base if q._base is not None else q
        untouched = base.clone()
        impls.rotary_embedding(pos, q, k, *rest)
        for g, e in zip((q, k), expected, strict=True):
            torch.testing.assert_close(g.cpu().double(), e.double(), atol=tol.atol, rtol=tol.rtol, msg=label)
        if label.startswith("q, k views"):
            assert torch.equal(base[:, 6 * 64 :], untouched[:, 6 * 64 :])  # v
    empty = torch.empty(0, dtype=torch.int64, device=target)
    q, k = _randn((0, 128), dtype, target, 1), _randn((0, 64), dtype, target, 2)
    impls.rotary_embedding(empty, q, k, 64, 64, cache, True, None, "standard", False, 0)


def _hf(batch, seq, heads, d, dtype, device, seed):
    """As HF attention makes q/k: proj(x).view(B, S, H, D).transpose(1, 2) (not contiguous)."""
    return _randn((batch, seq, heads * d), dtype, device, seed).view(batch, seq, heads, d).transpose(1, 2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [64, 20])
def test_rotary_pos_emb_hf_strided(target, d, dtype):
    """HF's (B, H, S, D) transposed views are rotated where they lie (their buffers change, no
    copy); GQA key heads; cos/sin with a batch of 1 (broadcast); unsqueeze_dim=2 on (B, S, H, D)."""
    op = ircore.ops.rotary_pos_emb
    for cos_batch, seed in ((2, 0), (1, 1)):
        q, k = _hf(2, 5, 4, d, dtype, target, seed), _hf(2, 5, 2, d, dtype, target, seed + 10)
        ids = torch.arange(5)[None, :] + torch.arange(cos_batch)[:, None] * 9
        cos, sin = (t.to(target) for t in _rope._hf_cos_sin(ids, d, dtype, scaling=0.9))
        args = (q.clone(), k.clone(), cos, sin, 1)
        assert impls.rotary_pos_emb_supports(*args)
        qw, kw = q.clone(), k.clone()
        assert not qw.is_contiguous() and not kw.is_contiguous()  # clone keeps HF's strides
        ptr = qw.data_ptr()
        impls.rotary_pos_emb(qw, kw, cos, sin, 1)
        assert qw.data_ptr() == ptr and qw.stride() == q.stride()
        _close(op, (qw, kw), args, dtype)
    q = _randn((2, 6, 4, d), dtype, target, 3)
    k = _randn((2, 6, 1, d), dtype, target, 4)
    cos, sin = (t.to(target) for t in _rope._hf_cos_sin(torch.arange(12).view(2, 6), d, dtype))
    args = (q, k, cos, sin, 2)
    qw, kw = q.clone(), k.clone()
    impls.rotary_pos_emb(qw, kw, cos, sin, 2)
    _close(op, (qw, kw), args, dtype)


def test_rotary_pos_emb_reads_both_halves_and_odd_layouts(target):
    """cos/sin whose halves differ (the op's formula, not HF's usual equal halves), a last
    dimension with stride 2 (a copy inside, written back), negative unsqueeze_dim, q and k with
    different token grids (a broadcast the op allows), and an empty sequence."""
    op = ircore.ops.rotary_pos_emb
    dtype = torch.float32
    q = _randn((2, 3, 5, 32), dtype, target, 1)
    k = _randn((2, 1, 5, 32), dtype, target, 2)
    cos, sin = _randn((1, 5, 32), dtype, target, 3), _randn((1, 5, 32), dtype, target, 4)
    qw, kw = q.clone(), k.clone()
    impls.rotary_pos_emb(qw, kw, cos, sin, -3)
    _close(op, (qw, kw), (q, k, cos, sin, -3), dtype)
    wide = _randn((2, 3, 5, 64), dtype, target, 5)
    qs = wide[..., ::2]  # channels 2 apart
    before = wide.clone()
    impls.rotary_pos_emb(qs, kw.clone(), cos, sin, 1)
    expected = op.native(q=before[..., ::2].cpu(), k=k.cpu(), cos=cos.cpu(), sin=sin.cpu())[0]
    torch.testing.assert_close(qs.cpu(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(wide[..., 1::2], before[..., 1::2])
    qb, kb = _randn((2, 2, 5, 32), dtype, target, 6), _randn((1, 2, 5, 32), dtype, target, 7)
    args = (qb, kb, cos, sin, 1)
    qw, kw = qb.clone(), kb.clone()
    impls.rotary_pos_emb(qw, kw, cos, sin, 1)
    _close(op, (qw, kw), args, dtype)
    impls.rotary_pos_emb(q[:, :, :0], k[:, :, :0], cos[:, :0], sin[:, :0], 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("d, weights, cache", [(64, None, None), (40, torch.float32, torch.float32)])
def test_fused_qk_norm_rope(target, neox, d, weights, cache, dtype):
    """Per-head RMSNorm then RoPE in place, on rows of a wider buffer; v untouched."""
    op = ircore.ops.fused_qk_norm_rope
    hq, hk, hv = 4, 2, 2
    width = (hq + hk + hv) * d
    buf = _randn((5, width + 16), dtype, target, 1, scale=2.0)
    qkv = buf[:, :width]
    wq = _randn((d,), weights or dtype, target, 2, scale=0.1) + 1
    wk = _randn((d,), weights or dtype, target, 3, scale=0.1) + 1
    c = _cache(d, cache or dtype, target)
    pos = _positions(5, target, 4)
    args = (qkv.clone(), hq, hk, hv, d, 1e-6, wq, wk, c, neox, pos)
    assert impls.fused_qk_norm_rope_supports(*args)
    before = buf.clone()
    impls.fused_qk_norm_rope(qkv, hq, hk, hv, d, 1e-6, wq, wk, c, neox, pos)
    _close(op, qkv, args, dtype)
    assert torch.equal(buf[:, (hq + hk) * d :], before[:, (hq + hk) * d :])  # v and the padding
    flat = _randn((2, 3, width), dtype, target, 5)
    args = (flat.clone(), hq, hk, hv, d, 1e-5, wq, wk, c, neox, _positions(6, target, 6).view(2, 3))
    impls.fused_qk_norm_rope(flat, *args[1:])
    _close(op, flat, args, dtype)
    impls.fused_qk_norm_rope(flat[:0], *args[1:-1], pos[:0])


def test_positions_outside_the_cache_are_refused(target):
    """A position beyond the cache would read outside it: the CPU kernel refuses the call (the
    core refuses it first on CPU, where ircore.ops is called)."""
    if target != "cpu":
        pytest.skip("CUDA kernels do not read positions on the host (as vLLM's)")
    args = _rope_args(CASES[0], torch.float32, "cpu")
    pos = args[0].clone()
    pos[3] = ROWS
    with pytest.raises(RuntimeError, match=r"position 97 \(token 3\) is outside cos_sin_cache's 97 rows"):
        impls.rotary_embedding(pos, *args[1:])
    with pytest.raises(ircore.InvalidArgumentError, match="positions"):
        ircore.ops.rotary_embedding(pos, *args[1:])
    off = args[0].clone() * 0 - 1
    with pytest.raises(RuntimeError, match="position -1"):
        impls.rotary_embedding(
            args[0] * 0, args[1], args[2], 64, 64, args[5], True, off, "deepseek", False, 0
        )


def test_schemas_fakes_and_dispatch():
    """opcheck on the in-place ops (schemas, fakes, aliasing), and the ircore ops choose these
    kernels: maybe_inplace writes into the inputs, the functional call leaves them unchanged."""
    ircore.dispatch.ensure_loaded()
    if "vllm_c" not in ircore.ops.rotary_embedding.impls:
        pytest.skip("ircore-provider-vllm-c is not installed (no entry point), or not active here")
    args = _rope_args(CASES[8], torch.bfloat16, "cpu")
    # schema (mutation and aliasing as declared), fakes, autograd registration; the compiled
    # path (aot_dispatch) is the conformance kit's and test_opcheck_and_compile's, slower
    checks = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(ops.rotary_embedding.default, args, test_utils=checks)
    torch.library.opcheck(
        ops.rotary_embedding_query_only.default, (args[0], args[1], *args[3:]), test_utils=checks
    )
    q, k = _hf(1, 3, 2, 32, torch.float16, "cpu", 0), _hf(1, 3, 1, 32, torch.float16, "cpu", 1)
    cos, sin = _rope._hf_cos_sin(torch.arange(3)[None], 32, torch.float16)
    torch.library.opcheck(ops.rotary_pos_emb.default, (q, k, cos, sin, 1), test_utils=checks)
    fused = ircore.ops.fused_qk_norm_rope.sample_inputs(torch.float32, "cpu")
    torch.library.opcheck(ops.fused_qk_norm_rope.default, next(iter(fused)).args, test_utils=checks)
    op = ircore.ops.rotary_embedding
    with ircore.priority(rotary_embedding=["vllm_c"]):
        assert op.explain(*args).chosen == "vllm_c"
        q0, k0 = args[1].clone(), args[2].clone()
        out = op(*args)
        assert torch.equal(args[1], q0) and torch.equal(args[2], k0)
        got = op.maybe_inplace(*args)
        assert got[0].data_ptr() == args[1].data_ptr() and torch.equal(got[0], out[0])
        assert torch.equal(args[2], out[1])


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_matches_the_cpu_kernels(dtype):
    """Each op's CUDA kernel against the CPU kernel on the op's own samples (both within the
    op's tolerance of the reference; fp32 math in both, so they agree closely)."""
    for name in ("rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb", "fused_qk_norm_rope"):
        op = ircore.get_op(name)
        fn = getattr(impls, name)
        inplace = {"rotary_embedding": (1, 2), "rotary_embedding_query_only": (1,)}.get(
            name, (0, 1) if name == "rotary_pos_emb" else (0,)
        )
        for sample in op.sample_inputs(dtype, "cpu"):
            cpu = [a.clone() if isinstance(a, torch.Tensor) else a for a in sample.args]
            gpu = [a.cuda() if isinstance(a, torch.Tensor) else a for a in sample.args]
            fn(*cpu)
            fn(*gpu)
            torch.cuda.synchronize()
            tol = op.tolerances[dtype]
            for i in inplace:
                torch.testing.assert_close(
                    gpu[i].cpu(), cpu[i], atol=tol.atol, rtol=tol.rtol, msg=sample.label
                )


# The CUDA kernels' paths (cuda_rope.cu), each at T = 1 (heads split over blocks) and at a T past
# the split threshold (one block per token looping over its heads, two per step): the 16-byte
# vector path and the scalar fallback (odd rotary dims, misaligned views), slots past one
# block's 128 threads, q/k boundaries inside a head chunk and an odd head count per step.
# (id, head_size, rotary_dim, rope_dim_offset, neox, q heads, k heads (0: query only), dtype,
# cache dtype or None, deepseek offsets, inverse, element shift of q and k in their buffers)
_CUDA_ROPE = [
    ("vec-neox-bf16", 128, 128, 0, True, 20, 5, torch.bfloat16, None, False, False, 0),
    (
        "vec-gptj-off32-fp32cache-f16",
        128,
        64,
        32,
        False,
        20,
        5,
        torch.float16,
        torch.float32,
        False,
        False,
        0,
    ),
    ("vec-deepseek-inverse-query-only-f32", 64, 64, 0, True, 20, 0, torch.float32, None, True, True, 0),
    ("vec-rd2048-f32", 2048, 2048, 0, True, 2, 1, torch.float32, None, False, False, 0),
    ("scalar-shifted-neox-bf16", 128, 128, 0, True, 20, 5, torch.bfloat16, None, False, False, 1),
    ("scalar-rd258-gptj-f32", 258, 258, 0, False, 2, 1, torch.float32, None, False, False, 0),
]


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("many", [False, True], ids=["T1", "Tmany"])
@pytest.mark.parametrize("case", _CUDA_ROPE, ids=[c[0] for c in _CUDA_ROPE])
def test_cuda_rope_paths(case, many):
    """Each path of the CUDA rotary_embedding kernel against the CPU kernel; the rest of the
    buffers (pass-through channels, the shift) untouched."""
    _, head, rd, off, neox, hq, hk, dtype, cdt, deepseek, inverse, shift = case
    tokens = (3000 if head > 128 else 4500) if many else 1
    fmt = "deepseek" if deepseek else "standard"
    cache = _cache(rd, cdt or dtype, "cpu", scale=1.1 if deepseek else 1.0)
    high = ROWS // 2 if deepseek else ROWS
    pos = _positions(tokens, "cpu", 3, high=high)
    offsets = _positions(tokens, "cpu", 4, high=ROWS // 2) if deepseek else None
    bufs = [_randn((tokens, h * head + 2 * shift), dtype, "cpu", 1 + n) for n, h in enumerate((hq, hk)) if h]
    runs = {}
    for device in ("cpu", "cuda"):
        b = [t.to(device, copy=True) for t in bufs]  # a copy on the CPU too: bufs stay as made
        xs = [t[:, shift : t.shape[1] - shift] for t in b]
        rest = (cache.to(device), neox, None if offsets is None else offsets.to(device), fmt, inverse, off)
        if hk:
            impls.rotary_embedding(pos.to(device), xs[0], xs[1], head, rd, *rest)
        else:
            impls.rotary_embedding_query_only(pos.to(device), xs[0], head, rd, *rest)
        runs[device] = [t.cpu() for t in b]
    tol = ircore.ops.rotary_embedding.tolerances[dtype]
    for got, want, before in zip(runs["cuda"], runs["cpu"], bufs, strict=True):
        torch.testing.assert_close(got, want, atol=tol.atol, rtol=tol.rtol)
        x = before[:, shift : before.shape[1] - shift].reshape(tokens, -1, head)
        g = got[:, shift : got.shape[1] - shift].reshape(tokens, -1, head)
        assert torch.equal(g[..., :off], x[..., :off]) and torch.equal(g[..., off + rd :], x[..., off + rd :])
        assert torch.equal(got[:, :shift], before[:, :shift]) and torch.equal(
            got[:, got.shape[1] - shift :], before[:, before.shape[1] - shift :]
        )


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("many", [False, True], ids=["T1", "Tmany"])
@pytest.mark.parametrize("shift", [0, 1], ids=["vec", "scalar-shifted"])
def test_cuda_rotary_pos_emb_paths(shift, many):
    """HF's transposed (B, H, S, D) views on the CUDA kernel's vector path and, a channel off
    16-byte alignment, its scalar path, at S = 1 and past the head-split threshold."""
    seq, d, dtype = (9000 if many else 1), 128, torch.bfloat16
    cos, sin = _rope._hf_cos_sin(torch.arange(seq)[None, :], d, dtype)
    bufs = [_randn((1, seq, h * d + shift), dtype, "cpu", 1 + h) for h in (8, 2)]
    runs = {}
    for device in ("cpu", "cuda"):
        b = [t.to(device, copy=True) for t in bufs]
        q, k = (t[..., shift:].view(1, seq, h, d).transpose(1, 2) for t, h in zip(b, (8, 2), strict=True))
        impls.rotary_pos_emb(q, k, cos.to(device), sin.to(device), 1)
        runs[device] = [t.cpu() for t in b]
    tol = ircore.ops.rotary_pos_emb.tolerances[dtype]
    for got, want, before in zip(runs["cuda"], runs["cpu"], bufs, strict=True):
        torch.testing.assert_close(got, want, atol=tol.atol, rtol=tol.rtol)
        assert torch.equal(got[..., :shift], before[..., :shift])


# (id, head_dim, dtype, element shift of qkv in its buffer): the lane-group kernel with groups of
# 8, 16 and 32 lanes per head, 16-byte accesses or (a misaligned view) element ones, and the
# warp-per-head kernel (head_dim 96: 6 lanes of 16 bytes, not a power of two).
_CUDA_QK = [
    ("vec-d128-bf16", 128, torch.bfloat16, 0),
    ("vec-d128-f32", 128, torch.float32, 0),
    ("vec-d512-bf16", 512, torch.bfloat16, 0),
    ("elementwise-shifted-d128-bf16", 128, torch.bfloat16, 1),
    ("warp-d96-bf16", 96, torch.bfloat16, 0),
]


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("many", [False, True], ids=["T1", "Tmany"])
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("case", _CUDA_QK, ids=[c[0] for c in _CUDA_QK])
def test_cuda_fused_qk_norm_rope_paths(case, neox, many):
    """The CUDA fused_qk_norm_rope kernels' paths against the CPU kernel; v and the shift
    untouched."""
    _, d, dtype, shift = case
    hq, hk, hv = (4, 2, 2) if d > 128 else (16, 4, 4)
    tokens = (3000 if d > 128 else 4500) if many else 1
    width = (hq + hk + hv) * d
    buf = _randn((tokens, width + 2 * shift), dtype, "cpu", 1, scale=2.0)
    wq = _randn((d,), dtype, "cpu", 2, scale=0.1) + 1
    wk = _randn((d,), dtype, "cpu", 3, scale=0.1) + 1
    cache = _cache(d, dtype, "cpu")
    pos = _positions(tokens, "cpu", 4)
    runs = {}
    for device in ("cpu", "cuda"):
        b = buf.to(device, copy=True)
        rest = (wq.to(device), wk.to(device), cache.to(device), neox, pos.to(device))
        impls.fused_qk_norm_rope(b[:, shift : shift + width], hq, hk, hv, d, 1e-6, *rest)
        runs[device] = b.cpu()
    tol = ircore.ops.fused_qk_norm_rope.tolerances[dtype]
    torch.testing.assert_close(runs["cuda"], runs["cpu"], atol=tol.atol, rtol=tol.rtol)
    v = shift + (hq + hk) * d
    assert torch.equal(runs["cuda"][:, v:], buf[:, v:]) and torch.equal(
        runs["cuda"][:, :shift], buf[:, :shift]
    )


@requires_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_cuda_rope_paths_agree_bit_for_bit(neox):
    """The vector and scalar paths (an aligned buffer and the same values one element off) and
    the head split (one token alone against the same token among 4500) give the same bits, and
    so do fused_qk_norm_rope's vector and element-wise accesses: the RoPE ops' batch-invariance
    claim on CUDA."""
    tokens, head, dtype = 4500, 128, torch.bfloat16
    cache = _cache(head, dtype, "cuda")
    pos = _positions(tokens, "cuda", 3)
    q, k = _randn((tokens, 20 * head), dtype, "cuda", 1), _randn((tokens, 5 * head), dtype, "cuda", 2)
    qs, ks = (torch.empty((tokens, t.shape[1] + 1), dtype=dtype, device="cuda")[:, 1:] for t in (q, k))
    qs.copy_(q)
    ks.copy_(k)
    q1, k1 = q[:1].clone(), k[:1].clone()
    impls.rotary_embedding(pos, q, k, head, head, cache, neox, None, "standard", False, 0)  # vector
    impls.rotary_embedding(pos, qs, ks, head, head, cache, neox, None, "standard", False, 0)  # scalar
    impls.rotary_embedding(pos[:1], q1, k1, head, head, cache, neox, None, "standard", False, 0)  # split
    assert torch.equal(q, qs) and torch.equal(k, ks)
    assert torch.equal(q1, q[:1]) and torch.equal(k1, k[:1])
    # fused_qk_norm_rope's lane-group kernel: 16-byte and element accesses, all tokens and one
    width = 32 * head
    qkv = _randn((tokens, width), dtype, "cuda", 4)
    shifted = torch.empty((tokens, width + 1), dtype=dtype, device="cuda")[:, 1:]
    shifted.copy_(qkv)
    one = qkv[:1].clone()
    w = _randn((head,), dtype, "cuda", 5, scale=0.1) + 1
    for x, p in ((qkv, pos), (shifted, pos), (one, pos[:1])):
        impls.fused_qk_norm_rope(x, 20, 4, 8, head, 1e-6, w, w, cache, neox, p)
    assert torch.equal(qkv, shifted) and torch.equal(one, qkv[:1])
