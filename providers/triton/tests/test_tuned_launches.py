"""Every candidate launch the autotune may pick for the gated activations, rms_norm_gated and
rotary_pos_emb (act_kernels.py, norm_kernels.py, rope_kernels.py) runs and matches the op's fp64
reference, and gives the same bits as the heuristic launch where the op claims batch invariance
through it: a tuned kernel whose alternative is wrong is caught here, not on the GPU that picks it.
The candidate lists are the GPU's (the interpreter's own launch is the heuristic: no tuning there),
built for shapes that reach each family (narrow and wide column tiles, whole short rows, the
deinterleaving swigluoai load, every head in one program, the q/k-split RoPE kernel); tiny tensors.
"""

import pytest
import torch
import triton
from conftest import GPU
from ircore_triton import act_kernels, impls, norm_kernels, rope_kernels
from ircore_triton.kernels import ActConfig, GatedNormConfig, RopeConfig

import ircore
from ircore.testing import assert_close_to_reference

DEVICE = GPU or "cpu"


def _act_configs(d: int, interleaved: bool) -> list[ActConfig]:
    """The candidates at 1, 16 and 1024+ rows (each bucket's widths), heuristic first."""
    out: list[ActConfig] = []
    for rows in (1, 3, 1024):
        out += [c for c in act_kernels._candidates(d, rows, 2, interleaved) if c not in out]
    return out


def _distinct_for_device(configs: list) -> list:
    """All of them on a GPU; under the interpreter one per launch shape: it ignores num_warps
    (its programs run one by one), so configs that differ only there compute the same thing."""
    if GPU:
        return configs
    seen: dict = {}
    for c in configs:
        seen.setdefault(tuple(v for k, v in vars(c).items() if k != "num_warps"), c)
    return list(seen.values())


def test_act_candidates_reach_every_family(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(act_kernels, "interpreting", lambda: False)  # the GPU's heuristic
    wide = _act_configs(14336, True)
    assert wide[0] == ActConfig(1, 1024, 2) and not wide[0].split  # today's launch at T = 1 comes first
    assert {c.block_d for c in wide} >= {128, 256, 1024, 4096}
    assert {c.split for c in wide} == {False, True}
    assert not any(c.split for c in _act_configs(14336, False))
    # the alternatives: at most two 16-byte vectors per thread (rows not in whole vectors load
    # element by element; the heuristic's tile, four at T >= 4, stays as it was)
    for rows in (1, 3, 1024):
        cands = act_kernels._candidates(14336, rows, 2, True)
        h = cands[0]
        others = [c for c in cands if (c.block_m, c.block_d, c.num_warps) != (h.block_m, h.block_d, h.num_warps)]
        assert others and all(c.block_m * c.block_d <= c.num_warps * 32 * 8 * 2 for c in others)


# d = 1030: column tiles of 128..2048 (masked last tile); d = 40: several whole rows per tile
@pytest.mark.parametrize("d", [1030, 40])
def test_every_act_candidate_matches_reference_and_heuristic(d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(act_kernels, "interpreting", lambda: False)
    g = torch.Generator().manual_seed(d)
    rows = 1 if d > 1024 else 3  # the interpreter's time goes by programs: one row of the wide case
    x = (torch.randn(rows, 2 * d + 8, generator=g) * 4).to(torch.bfloat16).to(DEVICE)[:, : 2 * d]  # padded rows
    for name, params, interleaved in (
        ("gelu_and_mul", ("tanh",), False),  # one function of the shared kernel: tiles do not depend on it
        ("swigluoai_and_mul", (1.702, 7.0), True),
    ):
        fn = getattr(act_kernels, name)
        configs = _act_configs(d, interleaved)
        assert len(configs) >= 3
        first = fn(x, *params, config=configs[0])
        op = ircore.get_op(name)
        assert_close_to_reference(op, first, (x, *params))
        for c in _distinct_for_device(configs)[1:]:
            assert torch.equal(fn(x, *params, config=c), first), f"{name} {c}"  # elementwise: same bits


def test_every_gated_norm_candidate_matches_reference() -> None:
    """A row and a group width with two or three candidates (1 to 4 warps); the invariant
    variant's launch is the heuristic's (the first candidate), bit for bit."""
    from ircore_triton import invariant_kernels

    x = (torch.randn(2, 1024, device=DEVICE)).to(torch.bfloat16)
    gate = (torch.randn(2, 1024, device=DEVICE) * 2).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(1024, device=DEVICE)).to(torch.bfloat16)
    for gs, nbg in ((None, False), (512, True)):
        configs = norm_kernels._gated_candidates(1024 if gs is None else gs, 2)
        assert len(configs) >= 2 and configs[0] == norm_kernels.gated_heuristic(1024 if gs is None else gs, 2)
        args = (x, gate, w, 1e-6, gs, nbg, True)
        outs = [norm_kernels.rms_norm_gated(*args, config=c) for c in _distinct_for_device(configs)]
        for out in outs:
            assert_close_to_reference(ircore.ops.rms_norm_gated, out, args)
        assert torch.equal(invariant_kernels.rms_norm_gated(*args), outs[0])
    assert norm_kernels._gated_candidates(8192, 2) == [GatedNormConfig(8), GatedNormConfig(16), GatedNormConfig(32)]


def test_gated_norm_candidates_add_tiles_for_small_groups_and_late_loads_for_wide_ones() -> None:
    """Calls with a program per SM of them (132 SMs) also try 2, 4 and 8 groups of <= 1024
    elements per program (about four 16-byte vectors per thread of the tile) and, for groups of
    4096+, the weight and a trailing gate loaded after the reduction on the heuristic's warps and
    half of them (at most eight vectors per thread), then on twice them, and over two waves two
    groups per program late on those (at most four vectors per thread, groups of whole 16-byte
    vectors only); smaller calls keep the warp-only list; heuristic first."""
    C = GatedNormConfig
    mamba = norm_kernels._gated_candidates(512, 2, 32768 * 8, 132)  # H 4096 in 8 groups, bf16
    assert mamba == [C(1), C(2), C(1, 2), C(2, 4), C(4, 8)]
    assert norm_kernels._gated_candidates(512, 2, 128 * 8, 132) == [C(1), C(2), C(1, 2), C(2, 4)]
    assert norm_kernels._gated_candidates(512, 2, 16 * 8, 132) == [C(1), C(2)]
    fp32 = norm_kernels._gated_candidates(1024, 4, 8192, 132)
    assert fp32 == [C(2), C(4), C(8), C(4, 2), C(8, 4), C(16, 8)]
    qwen = norm_kernels._gated_candidates(8192, 2, 1024, 132)  # Qwen3-Next's rows, bf16
    assert qwen == [C(8), C(16), C(32), C(8, 1, True), C(4, 1, True), C(16, 1, True), C(16, 2, True)]
    one_wave = norm_kernels._gated_candidates(8192, 2, 200, 132)  # no two-group tile under two waves
    assert one_wave == [C(8), C(16), C(32), C(8, 1, True), C(4, 1, True), C(16, 1, True)]
    ragged = norm_kernels._gated_candidates(8192, 2, 1024, 132, whole_vectors=False)  # 8190: loads by element
    assert ragged == one_wave
    assert norm_kernels._gated_candidates(8192, 2, 128, 132) == [C(8), C(16), C(32)]
    fp32_wide = norm_kernels._gated_candidates(8192, 4, 1024, 132)
    assert fp32_wide == [C(16), C(32), C(16, 1, True), C(8, 1, True), C(32, 1, True), C(32, 2, True)]
    # 32768 bf16: late on 16 warps (8 vectors) and 32 (4); two groups on 32 would be 8: not offered
    assert norm_kernels._gated_candidates(32768, 2, 1024, 132) == [C(16), C(32), C(16, 1, True), C(32, 1, True)]
    assert norm_kernels._gated_candidates(2048, 2, 1 << 20, 132) == norm_kernels._gated_candidates(2048, 2)
    for bn in (512, 1024, 4096, 8192, 16384, 32768):
        for es in (2, 4):
            cands = norm_kernels._gated_candidates(bn, es, 1 << 20, 132)
            assert cands[0] == norm_kernels.gated_heuristic(bn, es)
            for c in cands:
                vectors = c.block_m * bn // (c.num_warps * 32 * (16 // es))
                assert vectors >= 1, (bn, es, c)
                if c.block_m > 1 or c.late_loads:  # (the heuristic's 16 warps give 32768 eight)
                    assert vectors <= (8 if c.late_loads else 4), (bn, es, c)


@pytest.mark.parametrize("gs", [512, 8192])
def test_every_tiled_gated_norm_candidate_matches_reference(gs: int) -> None:
    """The candidates of a call with many groups (the tiles at 512, the late loads and the
    two-row late tile at 8192), each form on a few rows (a ragged last tile: 5 groups of 512, 3
    rows of 8192) against the fp64 reference and, under the interpreter (which runs each
    program's elements in one order, whatever the warps), the heuristic launch's bits: every
    candidate does the same operations on each element."""
    rows = 5 if gs == 512 else 3  # few wide rows: the interpreter's time goes by elements
    x = torch.randn(rows, gs, device=DEVICE).to(torch.bfloat16)
    gate = (torch.randn(rows, gs, device=DEVICE) * 2).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(gs, device=DEVICE)).to(torch.bfloat16)
    configs = norm_kernels._gated_candidates(gs, 2, 1 << 20)
    assert any(c.block_m > 1 or c.late_loads for c in configs)
    if gs == 8192:
        assert GatedNormConfig(16, 1, True) in configs and GatedNormConfig(16, 2, True) in configs
    for nbg in (False, True):
        args = (x, gate, w, 1e-6, gs, nbg, True)
        first = None
        for c in _distinct_for_device(configs):
            out = norm_kernels.rms_norm_gated(*args, config=c)
            assert_close_to_reference(ircore.ops.rms_norm_gated, out, args)
            if first is None:
                first = out  # the heuristic's launch (the candidates' first)
            elif not GPU:
                assert torch.equal(out, first), (nbg, c)


def test_every_rope_candidate_matches_reference_and_heuristic(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF's (B, H, S, D) views of (B, S, H*D), B = 2 (a token is (batch, position)), 5 query heads
    and 3 key heads (masked heads in every family), cos/sin with unequal halves, broadcast over B."""
    monkeypatch.setattr(rope_kernels, "_INTERPRET", False)  # the GPU's candidates
    b, s, hq, hk, d = 2, 2, 5, 3, 32
    configs = rope_kernels._hf_candidates(1024, hq, hk, d // 2)
    assert configs[0] == RopeConfig(1, 8, 4)
    assert {(c.split_qk, c.block_t) for c in configs} == {(False, 1), (True, 1), (True, 2)}
    qp = torch.randn(b, s, hq * d, device=DEVICE).to(torch.bfloat16)
    kp = torch.randn(b, s, hk * d, device=DEVICE).to(torch.bfloat16)
    cos, sin = torch.randn(1, s, d, device=DEVICE), torch.randn(1, s, d, device=DEVICE)
    cos, sin = cos.to(torch.bfloat16), sin.to(torch.bfloat16)
    configs = _distinct_for_device(configs)
    outs = []
    for c in configs:
        qb, kb = qp.clone(), kp.clone()
        q, k = qb.view(b, s, hq, d).transpose(1, 2), kb.view(b, s, hk, d).transpose(1, 2)
        rope_kernels.rotary_pos_emb_(q, k, cos, sin, 1, config=c)
        outs.append((qb, kb))
    q0 = qp.view(b, s, hq, d).transpose(1, 2)
    k0 = kp.view(b, s, hk, d).transpose(1, 2)
    qb, kb = outs[0]
    out = (qb.view(b, s, hq, d).transpose(1, 2), kb.view(b, s, hk, d).transpose(1, 2))
    assert_close_to_reference(ircore.ops.rotary_pos_emb, out, (q0, k0, cos, sin, 1))
    for c, (qc, kc) in zip(configs[1:], outs[1:]):
        assert torch.equal(qc, qb) and torch.equal(kc, kb), c


# ---------------------------------------------------------------------------------------------
# On a GPU: every candidate at the geometries of benchmarks/README.md 3c, and the autotune itself


_needs_cuda = pytest.mark.skipif(GPU != "cuda", reason="needs a CUDA or ROCm GPU: candidates compile for it")


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("tokens", [1, 1024])  # the narrow tiles and the wide ones (~60 compiles)
def test_gpu_every_act_candidate_gives_the_heuristics_bits(tokens: int) -> None:
    """Llama-3-8B's intermediate width (14336), bf16: each bucket's candidates (every tile,
    warps and deinterleaving load, compiled for this GPU) give the heuristic launch's bits, which
    are within tolerance of the reference: the elementwise claim the row-count tuning rests on."""
    d = 14336
    x = (torch.randn(tokens, 2 * d, device="cuda") * 4).to(torch.bfloat16)
    for name, params, interleaved in (
        ("gelu_and_mul", ("none",), False),
        ("gelu_and_mul", ("tanh",), False),
        ("mul_and_silu", (), False),
        ("fatrelu_and_mul", (0.1,), False),
        ("swigluoai_and_mul", (1.702, 7.0), True),
    ):
        fn = getattr(act_kernels, name)
        configs = act_kernels._candidates(d, tokens, 2, interleaved)
        first = fn(x, *params, config=configs[0])
        assert_close_to_reference(ircore.get_op(name), first, (x, *params))
        for c in configs[1:]:
            assert torch.equal(fn(x, *params, config=c), first), f"{name}{params} {c}"


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("tokens", [1, 1024])
def test_gpu_every_rope_candidate_gives_the_heuristics_bits(tokens: int) -> None:
    """HF's q/k views at Llama-3-8B's attention (32 query heads, 8 KV heads of 128), bf16."""
    hq, hk, d = 32, 8, 128
    qp = torch.randn(1, tokens, hq * d, device="cuda").to(torch.bfloat16)
    kp = torch.randn(1, tokens, hk * d, device="cuda").to(torch.bfloat16)
    ang = torch.randn(1, tokens, d // 2, device="cuda")
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1), torch.cat((ang.sin(), ang.sin()), -1)
    cos, sin = cos.to(torch.bfloat16), sin.to(torch.bfloat16)
    outs = []
    for c in rope_kernels._hf_candidates(tokens, hq, hk, d // 2):
        qb, kb = qp.clone(), kp.clone()
        q, k = qb.view(1, tokens, hq, d).transpose(1, 2), kb.view(1, tokens, hk, d).transpose(1, 2)
        rope_kernels.rotary_pos_emb_(q, k, cos, sin, 1, config=c)
        outs.append((c, qb, kb))
    _, q0, k0 = outs[0]
    ref_args = (qp.view(1, tokens, hq, d).transpose(1, 2), kp.view(1, tokens, hk, d).transpose(1, 2), cos, sin, 1)
    got = (q0.view(1, tokens, hq, d).transpose(1, 2), k0.view(1, tokens, hk, d).transpose(1, 2))
    assert_close_to_reference(ircore.ops.rotary_pos_emb, got, ref_args)
    for c, qc, kc in outs[1:]:
        assert torch.equal(qc, q0) and torch.equal(kc, k0), c


@pytest.mark.gpu
@_needs_cuda
def test_gpu_gated_norm_candidates_and_the_autotune() -> None:
    """rms_norm_gated at 4096 and 8192 (Qwen3-Next's form), bf16: every candidate within
    tolerance; then the real autotune for the three ops (timed on this GPU): each key tuned once,
    its pick one of the candidates, the tuned call's result as the pick's."""
    from ircore_triton import kernels

    for n in (4096, 8192):
        x = torch.randn(16, n, device="cuda").to(torch.bfloat16)
        gate = torch.randn(16, n, device="cuda").to(torch.bfloat16)
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        args = (x, gate, w, 1e-6, None, True, True)
        for c in norm_kernels._gated_candidates(n, 2, 1 << 20):  # every family, the late loads too
            out = norm_kernels.rms_norm_gated(*args, config=c)
            assert_close_to_reference(ircore.ops.rms_norm_gated, out, args)
        grouped = (x, gate, w, 1e-6, 512, False, False)  # Mamba2's groups: the multi-group tiles
        for c in norm_kernels._gated_candidates(512, 2, 1 << 20):
            out = norm_kernels.rms_norm_gated(*grouped, config=c)
            assert_close_to_reference(ircore.ops.rms_norm_gated, out, grouped)
    if not kernels._AUTOTUNE:
        pytest.skip("IRCORE_TRITON_AUTOTUNE=0: the autotune is off")
    saved = kernels.tuned_configs()
    kernels.clear_configs()
    try:
        xa = torch.randn(16, 2 * 14336, device="cuda").to(torch.bfloat16)
        ya = act_kernels.swigluoai_and_mul(xa)
        key = ("swigluoai_and_mul", 14336, torch.bfloat16, kernels._bucket(16))
        pick = kernels.tuned_configs()[key]
        assert pick in act_kernels._candidates(14336, kernels._bucket_rows(key[3], 2 * 14336), 2, True)
        assert torch.equal(ya, act_kernels.swigluoai_and_mul(xa, config=pick))
        out = norm_kernels.rms_norm_gated(*args)
        gkey = ("rms_norm_gated", (8192, 8192), torch.bfloat16, kernels._bucket(16))
        assert torch.equal(out, norm_kernels.rms_norm_gated(*args, config=kernels.tuned_configs()[gkey]))
        assert len(kernels._TUNE_TIMES) == 2  # one timing per key, none for the second calls
    finally:
        kernels.clear_configs()
        kernels._CONFIGS.update(saved)


def _gated_extreme_inputs(rows: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x and gate for the bit-for-bit check of ``HW_MATH``: random rows, gates at the edges of
    the sigmoid's range (2**(-g*log2 e) subnormal above 87.3, 1 + e past 2**126 below -87.3,
    infinite below -88.7), signed zeros, subnormals, infinities and NaN; one row of x with a NaN."""
    x = torch.randn(rows, n, device="cuda") * 3
    gate = torch.randn(rows, n, device="cuda") * 4
    special = torch.tensor(
        [87.0, 87.5, 88.0, 89.0, 100.0, -87.0, -87.5, -88.0, -88.5, -88.75, -89.0, -100.0, 0.0, -0.0,
         1e-40, -1e-40, float("inf"), float("-inf"), float("nan"), 1e4, -1e4],
        device="cuda",
    )  # fmt: skip
    gate[0, : special.numel()] = special
    gate[1, ::7] = -87.6
    x[2, 5] = float("nan")
    return x.to(dtype), gate.to(dtype)


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.skipif(torch.version.hip is not None, reason="HW_MATH is the NVIDIA form (PTX)")
def test_gpu_gated_norm_hw_math_gives_the_portable_bits() -> None:
    """Every candidate (each family) of the gated norm with ``HW_MATH`` (the PTX ``ex2.approx.ftz``
    silu and the hardware's bf16 cast, what a CUDA GPU runs) against the same launch with the
    portable forms (``tl.sigmoid``, the bf16 rounding by the bits), bit for bit: whole rows of
    4096 and 8192 in Qwen3-Next's form, groups of 512 in Mamba2's, both gate orders and both
    roundings, bf16, fp16 and fp32."""
    assert norm_kernels._hw_math(torch.device("cuda"))
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        es = torch.empty((), dtype=dtype).element_size()
        for n, gs in ((8192, 8192), (4096, 4096), (4096, 512)):
            x, gate = _gated_extreme_inputs(33, n, dtype)
            w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
            for nbg in (True, False):
                for rnd in (True, False):
                    for c in norm_kernels._gated_candidates(triton.next_power_of_2(gs), es, 1 << 20):
                        ys = []
                        for hw in (False, True):
                            y = torch.empty_like(x)
                            norm_kernels._run_gated(c, x, gate, w, y, 33, n // gs, gs, 1e-6, nbg, rnd, hw)
                            ys.append(y.view(torch.int16 if es == 2 else torch.int32))
                        assert torch.equal(ys[0], ys[1]), (dtype, n, gs, nbg, rnd, c)


# ---------------------------------------------------------------------------------------------
# The fp8 quant ops split over programs (quant_kernels.candidates): every chunking gives the
# whole-row launch's bits, the claim their row-bucket tuning and batch invariance rest on

_FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def _quant_configs(k: int, group: int | None) -> list:
    """Every bucket's candidates (heuristic, the whole row, first), one per launch shape under
    the interpreter."""
    from ircore_triton import quant_kernels

    out: list = []
    for rows in (1, 3, 1024):
        out += [c for c in quant_kernels.candidates(k, group, rows, 2) if c not in out]
    return _distinct_for_device(out)


def _bits(outs) -> list[torch.Tensor]:
    """Each output's bits (fp8 as bytes, fp32 scales as int32: NaN compares), with its strides."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [o.view(torch.uint8 if o.element_size() == 1 else torch.int32) for o in outs]


def _assert_each_gives(ref: list[torch.Tensor], fn, args: tuple, configs, what: str) -> None:
    """Each launch of ``fn`` in ``configs`` gives ``ref`` (the reference launch's :func:`_bits`):
    every output's bits and strides."""
    for c in configs:
        for a, b in zip(_bits(fn(*args, config=c)), ref, strict=True):
            assert a.stride() == b.stride() and torch.equal(a, b), f"{what} {c}"


def _quant_x(shape: tuple[int, ...], pad: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values past fp8's range and below its subnormals, a NaN in one group, rows padded by
    ``pad`` columns (a row stride); on the test's device."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape[:-1], shape[-1] + pad, generator=g) * torch.logspace(-6, 3, shape[-1] + pad)
    x.view(-1, x.shape[-1])[1, 700] = float("nan")
    return x.to(dtype).to(DEVICE)[..., : shape[-1]]


# (op, x's shape, row padding, dtype, group size, extra args): K = 1100 is a ragged last group of
# 128 (76 wide) and of 96 (44 wide, group 96 padded to 128 in registers); static in chunks of
# 512 / 1024 columns, the last one ragged; 1024 with 2-D group scales of 2 rows x 128 columns.
_QUANT_CASES = [
    ("dynamic_group_quant_fp8", (3, 1100), 8, torch.bfloat16, 128, ([1, 128], False, False, _FP8[0])),
    ("dynamic_group_quant_fp8", (2, 3, 1100), 0, torch.bfloat16, 128, ([1, 128], True, True, _FP8[1])),
    ("dynamic_group_quant_fp8", (5, 1100), 4, torch.float16, 96, ([1, 96], True, False, _FP8[0], 4)),
    ("silu_and_mul_group_quant_fp8", (3, 2200), 16, torch.bfloat16, 128, ([1, 128], True, True, _FP8[0])),
    ("silu_and_mul_group_quant_fp8", (2, 2, 2200), 0, torch.float32, 128, ([1, 128], False, False, _FP8[1])),
    ("static_quant_fp8", (3, 1100), 8, torch.bfloat16, None, ("scalar", _FP8[1], 8)),
    ("static_quant_fp8", (2, 3, 1100), 0, torch.float16, None, ("channel", _FP8[0])),
    ("static_quant_fp8", (4, 1024), 0, torch.bfloat16, None, ("group", _FP8[0])),
    ("silu_and_mul_static_quant_fp8", (3, 2200), 8, torch.bfloat16, None, ("token", _FP8[0], 6)),
]


@pytest.mark.parametrize("case", _QUANT_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}")
def test_every_quant_split_gives_the_whole_rows_bits(case: tuple) -> None:
    from ircore_triton import quant_kernels

    name, shape, pad, dtype, group, extra = case
    x = _quant_x(shape, pad, dtype, len(name) + shape[-1])
    k = shape[-1] // 2 if name.startswith("silu") else shape[-1]
    if group is None:  # the scale layouts the static kernel addresses: one, per channel / token, 2-D groups
        m = shape[-2]
        sizes = {"scalar": (1,), "channel": (k,), "token": (m, 1), "group": (m // 2, k // 128)}
        scale = (torch.rand(sizes[extra[0]], generator=torch.Generator().manual_seed(1)) * 0.1 + 1e-3).to(DEVICE)
        args: tuple = (x, scale, *extra[1:])
    else:
        args = (x, *extra)
    fn = getattr(quant_kernels, name)
    configs = _quant_configs(k, group)
    assert configs[0] == quant_kernels.heuristic(k, group, 2) and len(configs) >= 2
    whole = fn(*args)  # the interpreter's launch: the heuristic's
    assert_close_to_reference(ircore.get_op(name), whole, args)
    _assert_each_gives(_bits(whole), fn, args, configs, name)


def test_quant_candidates_split_only_what_the_row_need_not_hold() -> None:
    """At Llama's 14336 the heuristic (the whole row, 16 warps) comes first, then chunks of 4-32
    groups (512-4096 elements) at T <= 128 and 8-64 (1024-8192) above, at 16 or 32 elements a
    thread there; the norm forms (walked in chunks instead: norm_candidates) and per-token /
    per-tensor scales are not split."""
    from ircore_triton import quant_kernels as qk
    from ircore_triton.kernels import QuantConfig

    small, large = qk.candidates(14336, 128, 1, 2), qk.candidates(14336, 128, 8192, 2)
    assert small[0] == large[0] == QuantConfig(16384, 16)
    assert {c.block for c in small[1:]} == {512, 1024, 2048, 4096}
    assert {c.block for c in large[1:]} == {1024, 2048, 4096, 8192}
    assert all(c.block // (32 * c.num_warps) in (16, 32) for c in large[1:])
    assert qk.candidates(14336, 1024, 1, 2)[1:] and all(c.block >= 1024 for c in qk.candidates(14336, 1024, 1, 2))
    assert qk.candidates(256, None, 1, 2) == [QuantConfig(256, 1)]  # nothing to split
    assert qk._split_ok(qk._PLAIN, qk._STATIC, None) and qk._split_ok(qk._SILU, qk._DYNAMIC, 128)
    assert not qk._split_ok(qk._NORM, qk._STATIC, None) and not qk._split_ok(qk._NORM, qk._DYNAMIC, 128)
    assert not qk._split_ok(qk._PLAIN, qk._DYNAMIC, None)  # per token
    assert not qk._split_ok(qk._PLAIN, qk._FROM_AMAX, None) and not qk._split_ok(qk._PLAIN, qk._AMAX, None)


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("tokens", [1, 33, 4096])
def test_gpu_every_quant_split_gives_the_whole_rows_bits(tokens: int) -> None:
    """Llama-3-8B's 4096 and 14336, bf16: each bucket's candidates (compiled for this GPU, the
    hardware cast) give the whole row's bits for the four split ops."""
    from ircore_triton import quant_kernels

    for k in (4096, 14336):
        x = (torch.randn(tokens, 2 * k, device="cuda") * 4).to(torch.bfloat16)
        s = torch.full((1,), 0.02, device="cuda")
        for name, args, group in (
            ("static_quant_fp8", (x[:, :k], s, _FP8[0]), None),
            ("silu_and_mul_static_quant_fp8", (x, s, _FP8[0]), None),
            ("dynamic_group_quant_fp8", (x[:, :k], [1, 128], True, True, _FP8[0], 4), 128),
            ("silu_and_mul_group_quant_fp8", (x, [1, 128], False, False, _FP8[0]), 128),
        ):
            fn = getattr(quant_kernels, name)
            configs = quant_kernels.candidates(k, group, tokens, 2)
            _assert_each_gives(_bits(fn(*args, config=configs[0])), fn, args, configs[1:], name)


# ---------------------------------------------------------------------------------------------
# The fused norm + quant ops walked in chunks (quant_kernels.norm_candidates): every candidate
# within the op's tolerance of its reference (the chunks sum the squares in another order: not
# the whole row's bits), the residual output the exact rounded sum in each, and the invariant
# variant the heuristic's launch, bit for bit


def _norm_quant_configs(k: int, group: int | None) -> list:
    """The norm forms' candidates (one list for every bucket), one per launch shape under the
    interpreter."""
    from ircore_triton import quant_kernels

    return _distinct_for_device(quant_kernels.norm_candidates(k, group, 2))


# (op, x's shape, row padding, dtype, group size, args after x (and the residual) and the weight):
# K = 1100 in chunks of 1024 columns (the last ragged) or of 8 groups of 128 (a ragged last group,
# 76 wide) or of 96 (padded to 128: chunks of 768 columns, the last group 44 wide); K = 2200 in
# chunks of 1024 and 2048; scalar, per-channel and per-token static scales, scale_ub, per-token
# scales of 3-D x, group scales row-major, column-major and TMA-aligned, ue8m0, both fp8 types.
_NQ_CASES = [
    ("rms_norm_static_fp8_quant", (3, 1100), 8, torch.bfloat16, None, ("scalar", _FP8[0], 8)),
    ("rms_norm_static_fp8_quant", (2, 3, 1100), 0, torch.float16, None, ("channel", _FP8[1])),
    ("fused_add_rms_norm_static_fp8_quant", (3, 2200), 8, torch.bfloat16, None, ("token", _FP8[0])),
    ("rms_norm_dynamic_quant_fp8", (3, 1100), 8, torch.bfloat16, None, (True, _FP8[1], "ub", 6)),
    ("fused_add_rms_norm_dynamic_quant_fp8", (2, 2, 1100), 0, torch.float32, None, (True, _FP8[0])),
    ("rms_norm_group_quant_fp8", (3, 1100), 8, torch.bfloat16, 128, ([1, 128], True, True, _FP8[0], 4)),
    ("rms_norm_group_quant_fp8", (2, 3, 1100), 0, torch.float16, 96, ([1, 96], False, False, _FP8[1])),
    ("fused_add_rms_norm_group_quant_fp8", (5, 1100), 4, torch.bfloat16, 128, ([1, 128], True, False, _FP8[1])),
    ("fused_add_rms_norm_group_quant_fp8", (2, 2200), 0, torch.float16, 128, ([1, 128], False, True, _FP8[0])),
]


def _nq_args(case: tuple) -> tuple:
    name, shape, pad, dtype, group, extra = case
    x = _quant_x(shape, pad, dtype, len(name) + shape[-1])
    k = shape[-1]
    gen = torch.Generator().manual_seed(k)
    w = (1 + 0.2 * torch.randn(k, generator=gen)).to(dtype).to(DEVICE)
    head: tuple = (x,)
    if name.startswith("fused_add"):
        head = (x, (torch.randn(*shape, generator=gen) * 2).to(dtype).to(DEVICE))
    if group is None and not isinstance(extra[0], bool):  # static: the scale's layout
        sizes = {"scalar": (1,), "channel": (k,), "token": (shape[-2], 1)}
        scale = (torch.rand(sizes[extra[0]], generator=gen) * 0.05 + 1e-3).to(DEVICE)
        return (*head, w, 1e-6, scale, *extra[1:])
    if group is None:  # per token: the fp8 type, scale_ub, padding
        rest = tuple(torch.full((1,), 0.02, device=DEVICE) if e == "ub" else e for e in extra[2:])
        return (*head, w, 1e-6, *extra[:2], *rest)
    return (*head, w, 1e-6, *extra)


def _near_whole_row(got, whole, what: str) -> None:
    """A chunked walk's outputs against the whole row's: the sums of squares differ in rounding
    order only, so each normalised value differs by at most one ulp of the dtype, a scale by at
    most that (2**-7 relative: bf16's), and each fp8 value by at most one fp8 step (the code's
    magnitude bits +-1, the same sign and NaNs), and few of them (a 2.5% error in the norm moved 2
    to 18% of the codes here, which the kit's tolerance alone let pass in three cases); fused_add's
    residual output (the last) is the same bits."""
    got, whole = (got if isinstance(got, tuple) else (got,)), (whole if isinstance(whole, tuple) else (whole,))
    for i, (a, b) in enumerate(zip(got, whole)):
        assert a.stride() == b.stride(), f"{what}: output {i}'s layout"
        if a.element_size() == 1:
            ca, cb = a.view(torch.uint8).int(), b.view(torch.uint8).int()
            assert torch.equal(ca & 0x80, cb & 0x80), f"{what}: fp8 signs"
            assert ((ca & 0x7F) - (cb & 0x7F)).abs().max() <= 1, f"{what}: more than one fp8 step"
            # a value moves only where its rounding order tips it over a boundary: rarely
            assert (ca != cb).float().mean() <= 0.01, f"{what}: {(ca != cb).float().mean():.1%} of fp8 codes moved"
        elif what.startswith("fused_add") and i == len(got) - 1:
            bits = {2: torch.int16, 4: torch.int32}[a.element_size()]  # NaN compares
            assert torch.equal(a.view(bits), b.view(bits)), f"{what}: residual output"
        else:
            torch.testing.assert_close(a, b, rtol=2.0**-7, atol=0.0, equal_nan=True, msg=f"{what}: scales")


@pytest.mark.parametrize("case", _NQ_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[4]}")
def test_every_norm_quant_chunk_matches_reference(case: tuple) -> None:
    from ircore_triton import quant_kernels

    name, shape, _, _, group, _ = case
    args = _nq_args(case)
    k = shape[-1]
    configs = _norm_quant_configs(k, group)
    assert configs[0] == quant_kernels.heuristic(k, group, 2) and len(configs) >= 2
    assert all(c.block < quant_kernels.row_block(k, group) for c in configs[1:])
    fn, op = getattr(quant_kernels, name), ircore.get_op(name)
    whole = fn(*args, config=configs[0])
    for c in configs:
        out = fn(*args, config=c)
        assert_close_to_reference(op, out, args)
        _near_whole_row(out, whole, f"{name} {c}")
    inv = _bits(getattr(impls, f"{name}_invariant")(*args))  # the mode's launch: the heuristic's bits
    assert all(torch.equal(a, b) for a, b in zip(inv, _bits(whole)))


# The persistent whole-row launch (quant_kernels.norm_persist_candidates): programs loop over
# rows, each row's block and every operation on it the one-row program's, so the same bits as the
# whole row (the residual output included); under the interpreter ``persist`` is the program count
# (1, 2 and 4 programs over 3 to 6 rows: one program taking them all, ragged last rounds)


@pytest.mark.parametrize("case", _NQ_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[4]}")
def test_every_norm_quant_persistent_launch_gives_the_whole_rows_bits(case: tuple) -> None:
    from ircore_triton import quant_kernels
    from ircore_triton.kernels import QuantConfig

    name, shape, _, dtype, group, _ = case
    args = _nq_args(case)
    h = quant_kernels.heuristic(shape[-1], group, dtype.itemsize)
    fn = getattr(quant_kernels, name)
    persistent = [QuantConfig(h.block, h.num_warps, p) for p in (1, 2, 4)]
    _assert_each_gives(_bits(fn(*args, config=h)), fn, args, persistent, name)


# The rstd pre-pass + row split of the norm forms with static or group scales
# (quant_kernels.norm_split_candidates): the whole row's launch writes each row's rstd, the chunks
# normalise with it, every element computed as in the whole row: the same bits (every static and
# group case: scalar, per-channel and per-token static scales, ragged groups of 128 and 96, row-
# and column-major, TMA-aligned and ue8m0 scales, both fp8 types, 3-D x, padding, a NaN row)
_NQ_SPLIT_CASES = [c for c in _NQ_CASES if "dynamic" not in c[0]]


@pytest.mark.parametrize("case", _NQ_SPLIT_CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[4]}")
def test_every_norm_quant_rstd_split_gives_the_whole_rows_bits(case: tuple) -> None:
    from ircore_triton import quant_kernels

    name, shape, _, dtype, group, _ = case
    args = _nq_args(case)
    k = shape[-1]
    fn = getattr(quant_kernels, name)
    whole = _bits(fn(*args, config=quant_kernels.heuristic(k, group, dtype.itemsize)))
    configs = quant_kernels.norm_split_candidates(k, group, 1, 2)
    assert configs and all(c.rstd_pass and c.block < quant_kernels.row_block(k, group) for c in configs)
    _assert_each_gives(whole, fn, args, _distinct_for_device(configs), name)


def test_norm_quant_rstd_split_candidates_only_at_few_rows_and_never_per_token() -> None:
    """The split ops' chunks at T <= 16 (512-4096 elements at 14336: 4-28 programs a row), none
    above 16 rows; the autotune adds them for the static and group forms only (a per-token scale
    is the whole row's amax), and the launcher refuses them per token or per tensor."""
    from ircore_triton import quant_kernels as qk
    from ircore_triton.kernels import QuantConfig

    cands = qk.norm_split_candidates(14336, 128, 1, 2)
    assert {c.block for c in cands} == {512, 1024, 2048, 4096} and all(c.rstd_pass for c in cands)
    assert [(c.block, c.num_warps) for c in cands] == [(c.block, c.num_warps) for c in qk.candidates(14336, 128, 1, 2)[1:]]
    assert qk.norm_split_candidates(14336, None, 16, 2) and qk.norm_split_candidates(14336, 128, 17, 2) == []
    x, w = torch.randn(2, 1100), torch.ones(1100)
    with pytest.raises(AssertionError, match="no rstd pre-pass"):
        qk.rms_norm_dynamic_quant_fp8(x, w, 1e-6, True, _FP8[0], config=QuantConfig(512, 1, rstd_pass=True))


def test_norm_quant_persistent_candidates_keep_the_whole_rows_launch() -> None:
    """The heuristic's block and warps (what the same bits rest on), 1 program per SM at 14336
    (16 warps), 1 and 2 at 8192 (8 warps), each program at least two rows; none for rows of fewer
    than 8192 elements, fp32, the bits' encoding (e4m3fnuz: spills on sm_90) or too few rows."""
    from ircore_triton import quant_kernels as qk
    from ircore_triton.kernels import QuantConfig

    for k, group in ((14336, None), (14336, 128), (8192, None), (8192, 128)):
        h = qk.heuristic(k, group, 2)
        cands = qk.norm_persist_candidates(k, group, 2, 32768, 132)
        assert cands and all((c.block, c.num_warps) == (h.block, h.num_warps) and c.persist for c in cands)
    assert qk.norm_persist_candidates(14336, 128, 2, 4096, 132) == [QuantConfig(16384, 16, 1)]
    assert [c.persist for c in qk.norm_persist_candidates(8192, None, 2, 4096, 132)] == [1, 2]
    assert [c.persist for c in qk.norm_persist_candidates(8192, None, 2, 300, 132)] == [1]  # 2 rows a program
    assert qk.norm_persist_candidates(14336, 128, 2, 263, 132) == []
    assert qk.norm_persist_candidates(4096, 128, 2, 32768, 132) == []
    assert qk.norm_persist_candidates(14336, 128, 4, 32768, 132) == []
    assert qk.norm_persist_candidates(14336, 128, 2, 32768, 132, hw_cast=False) == []


def test_norm_quant_candidates_start_whole_and_chunk_less_than_the_row() -> None:
    """At Llama's 14336: the whole row (16 warps) first, then chunks of 1024-4096 elements at one
    or two 16-byte bf16 vectors a thread; at 4096 (group 128: a 32 x 128 block) chunks of 1024 and 2048 only;
    no chunk covers the row (groups of 96 padded to 128: 8 groups are 768 columns); nothing to
    chunk at 1024."""
    from ircore_triton import quant_kernels as qk
    from ircore_triton.kernels import QuantConfig

    for k, group in ((14336, None), (14336, 128), (4096, None), (4096, 128), (1100, 96), (2200, 128)):
        cands = qk.norm_candidates(k, group, 2)
        assert cands[0] == qk.heuristic(k, group, 2) and len(cands) == len(set(cands)) > 1
        for c in cands[1:]:
            bg = 1 if group is None else triton.next_power_of_2(group)
            cols = c.block if group is None else (c.block // bg) * group
            assert cols < k and c.block < qk.row_block(k, group) and c.block // (32 * c.num_warps) in (8, 16)
    assert qk.norm_candidates(14336, 128, 2)[0] == QuantConfig(16384, 16)
    assert {c.block for c in qk.norm_candidates(14336, 128, 2)[1:]} == {1024, 2048, 4096}
    assert {c.block for c in qk.norm_candidates(4096, 128, 2)[1:]} == {1024, 2048}
    assert qk.norm_candidates(1024, None, 2) == [qk.heuristic(1024, None, 2)]
    assert qk.norm_candidates(1024, 1024, 2) == [qk.heuristic(1024, 1024, 2)]  # one group: the row


def _gpu_norm_quant_cases(tokens: int, k: int) -> list[tuple[str, tuple, int | None]]:
    """(op, arguments, group) of the six fused norm + quant ops on bf16 CUDA inputs of ``tokens``
    x ``k``: static (hardware cast and the bits' encoding), per token, group (column-major
    TMA-aligned ue8m0 scales and row-major ones)."""
    x = (torch.randn(tokens, k, device="cuda") * 4).to(torch.bfloat16)
    r = torch.randn(tokens, k, device="cuda").to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
    s = torch.full((1,), 0.02, device="cuda")
    return [
        ("rms_norm_static_fp8_quant", (x, w, 1e-6, s, _FP8[0]), None),
        ("fused_add_rms_norm_static_fp8_quant", (x, r, w, 1e-6, s, _FP8[1]), None),
        ("rms_norm_dynamic_quant_fp8", (x, w, 1e-6, True, _FP8[0]), None),
        ("fused_add_rms_norm_dynamic_quant_fp8", (x, r, w, 1e-6, True, _FP8[0], s), None),
        ("rms_norm_group_quant_fp8", (x, w, 1e-6, [1, 128], True, True, _FP8[0], 4), 128),
        ("fused_add_rms_norm_group_quant_fp8", (x, r, w, 1e-6, [1, 128], False, False, _FP8[0]), 128),
    ]


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("tokens", [1, 33, 2048])
def test_gpu_every_norm_quant_chunk_matches_reference(tokens: int) -> None:
    """Llama-3-8B's 4096 and 14336, bf16, the hardware cast (e4m3fn) and the bits (e4m3fnuz):
    every candidate within tolerance of the reference, fused_add's residual output the whole
    row's bits, the invariant variant the heuristic's bits."""
    from ircore_triton import quant_kernels

    for k in (4096, 14336):
        for name, args, group in _gpu_norm_quant_cases(tokens, k):
            fn, op = getattr(quant_kernels, name), ircore.get_op(name)
            configs = quant_kernels.norm_candidates(k, group, 2)
            whole = fn(*args, config=configs[0])
            ref = _bits(whole)
            for c in configs:
                out = fn(*args, config=c)
                assert_close_to_reference(op, out, args)
                _near_whole_row(out, whole, f"{name} {c}")
            inv = _bits(getattr(impls, f"{name}_invariant")(*args))
            assert all(torch.equal(a, b) for a, b in zip(inv, ref)), name


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("tokens", [1, 33, 2048])
def test_gpu_norm_quant_persistent_launch_gives_the_whole_rows_bits(tokens: int) -> None:
    """8192 and 14336, bf16, compiled for this GPU: the persistent launch (1 and 2 programs per
    SM, the hardware cast and the bits' encoding) gives the whole row's bits for the six ops."""
    from ircore_triton import quant_kernels
    from ircore_triton.kernels import QuantConfig

    for k in (8192, 14336):
        for name, args, group in _gpu_norm_quant_cases(tokens, k):
            fn = getattr(quant_kernels, name)
            h = quant_kernels.heuristic(k, group, 2)
            persistent = [QuantConfig(h.block, h.num_warps, p) for p in (1, 2)]
            _assert_each_gives(_bits(fn(*args, config=h)), fn, args, persistent, f"{name} {k}")


@pytest.mark.gpu
@_needs_cuda
@pytest.mark.parametrize("tokens", [1, 16])
def test_gpu_norm_quant_rstd_split_gives_the_whole_rows_bits(tokens: int) -> None:
    """4096 and 14336, bf16, compiled for this GPU: every rstd pre-pass + split candidate gives
    the whole row's bits for the four static and group norm forms (the hardware cast and the bits'
    encoding, column-major TMA-aligned ue8m0 and row-major scales)."""
    from ircore_triton import quant_kernels

    for k in (4096, 14336):
        # the static and group forms: per-token scales need the whole row's amax (not split)
        for name, args, group in (c for c in _gpu_norm_quant_cases(tokens, k) if "dynamic" not in c[0]):
            fn = getattr(quant_kernels, name)
            ref = _bits(fn(*args, config=quant_kernels.heuristic(k, group, 2)))
            _assert_each_gives(ref, fn, args, quant_kernels.norm_split_candidates(k, group, tokens, 2), f"{name} {k}")


@pytest.mark.gpu
@_needs_cuda
def test_gpu_norm_quant_autotune_picks_a_candidate() -> None:
    """The real autotune (timed on this GPU) of the add + norm + group quant at 14336, 1024 rows:
    one key, its pick one of the candidates, the tuned call's outputs the pick's bits."""
    from ircore_triton import kernels, quant_kernels

    if not kernels._AUTOTUNE:
        pytest.skip("IRCORE_TRITON_AUTOTUNE=0: the autotune is off")
    saved = kernels.tuned_configs()
    kernels.clear_configs()
    try:
        k = 14336
        x = torch.randn(1024, k, device="cuda").to(torch.bfloat16)
        r = torch.randn(1024, k, device="cuda").to(torch.bfloat16)
        w = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
        args = (x, r, w, 1e-6, [1, 128], False, False, _FP8[0])
        out = quant_kernels.fused_add_rms_norm_group_quant_fp8(*args)
        key = ("fused_add_rms_norm_group_quant_fp8", (k, 128, _FP8[0], "row"), torch.bfloat16, kernels._bucket(1024))
        pick = kernels.tuned_configs()[key]
        t_rows, sms = kernels._bucket_rows(key[3], k), kernels._sm_count(x.device)
        cands = quant_kernels.norm_candidates(k, 128, 2)
        cands += quant_kernels.norm_persist_candidates(k, 128, 2, t_rows, sms)
        cands += quant_kernels.norm_split_candidates(k, 128, t_rows, 2)
        assert pick in cands and len(kernels._TUNE_TIMES) == 1
        again = quant_kernels.fused_add_rms_norm_group_quant_fp8(*args, config=pick)
        assert all(torch.equal(a, b) for a, b in zip(_bits(out), _bits(again)))
    finally:
        kernels.clear_configs()
        kernels._CONFIGS.update(saved)
