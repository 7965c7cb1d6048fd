"""The RoPE ops (issue 24): native semantics against fp64 references and Hugging Face, the
relations between the ops, in-place use, every argument check, the conformance kit, compile."""

from __future__ import annotations

import functools

import pytest
import torch

import ircore
from ircore.errors import InvalidArgumentError
from ircore.ops import (
    fused_qk_norm_rope,
    rms_norm,
    rotary_embedding,
    rotary_embedding_query_only,
    rotary_pos_emb,
)
from ircore.ops._rope_inputs import _rope_cache
from ircore.testing import assert_close_to_reference, check_provider

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ROPE_OPS = ("rotary_embedding", "rotary_embedding_query_only", "rotary_pos_emb", "fused_qk_norm_rope")


def _samples(op_name: str, dtype: torch.dtype, seed: int = 0) -> list:
    return list(ircore.get_op(op_name).sample_inputs(dtype, "cpu", seed))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op_name", ROPE_OPS)
def test_native_matches_fp64_reference(op_name, dtype):
    op = ircore.get_op(op_name)
    for seed in (0, 1):
        for sample in _samples(op_name, dtype, seed):
            assert_close_to_reference(op, op(*sample.args), sample.args, label=sample.label)


def test_samples_cover_the_promised_cases():
    labels = " | ".join(s.label for name in ROPE_OPS for s in _samples(name, torch.bfloat16))
    for needle in (
        "[T,H*D]", "[T,H,D]", "[B,S,H*D]", "neox", "gptj", "rope_dim_offset 16", "deepseek neox with offsets",
        "inverse", "fp32 cache", "HF-strided", "T=0", "(GQA)", "non-contiguous", "unsqueeze_dim=2",
    ):  # fmt: skip
        assert needle in labels, needle
    (q, _k, *_), label = _samples("rotary_pos_emb", torch.bfloat16)[0]
    assert "HF-strided" in label and not q.is_contiguous()  # (B, H, S, D) views, HF's strides


# ---------------------------------------------------------------------- Hugging Face, bit for bit
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_pos_emb_is_transformers_apply_rotary_pos_emb_bit_for_bit(dtype):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    for sample in _samples("rotary_pos_emb", dtype):
        q, k, cos, sin, unsqueeze_dim = sample.args
        want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
        got_q, got_k = rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
        assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k), sample.label


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rotary_embedding_equals_hf_with_llamas_cos_sin_as_its_cache(dtype):
    """vLLM's form on [T, H*D] rows, HF's on (B, H, S, D) views of the same projections: equal bit
    for bit when the cache holds LlamaRotaryEmbedding's cos/sin in the activations' dtype."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(
        hidden_size=256, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64
    )
    rope = LlamaRotaryEmbedding(config)
    batch, seq, d = 2, 5, 64
    gen = torch.Generator().manual_seed(0)
    q_proj = torch.randn(batch, seq, 4 * d, generator=gen).to(dtype)
    k_proj = torch.randn(batch, seq, 2 * d, generator=gen).to(dtype)
    position_ids = torch.arange(seq)[None, :] + torch.tensor([[0], [9]])
    cos, sin = rope(q_proj, position_ids)
    q = q_proj.view(batch, seq, 4, d).transpose(1, 2)
    k = k_proj.view(batch, seq, 2, d).transpose(1, 2)
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    all_cos, all_sin = rope(q_proj, torch.arange(64)[None, :])
    cache = torch.cat((all_cos[0, :, : d // 2], all_sin[0, :, : d // 2]), dim=-1)  # [max_pos, d], dtype
    got_q, got_k = rotary_embedding(position_ids, q_proj, k_proj, d, d, cache, True)
    assert torch.equal(got_q, want_q.transpose(1, 2).reshape(batch, seq, 4 * d))
    assert torch.equal(got_k, want_k.transpose(1, 2).reshape(batch, seq, 2 * d))


# ---------------------------------------------------------------------- relations between the ops
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_query_only_is_the_full_ops_query_bit_for_bit(dtype):
    for sample in _samples("rotary_embedding", dtype):
        args = sample.args
        full_q, _ = rotary_embedding(*args)
        alone = rotary_embedding_query_only(args[0], args[1], *args[3:])
        assert torch.equal(alone, full_q), sample.label


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_qk_norm_rope_is_the_unfused_chain_bit_for_bit(dtype):
    """The chain the compile fusion rewrites: split qkv, per-head rms_norm on q and k (views of
    qkv), rotary_embedding on them; v untouched."""
    for sample in _samples("fused_qk_norm_rope", dtype):
        qkv, hq, hk, hv, d, eps, wq, wk, cache, neox, pos = sample.args
        q, k, v = qkv.split([hq * d, hk * d, hv * d], dim=-1)
        qn = rms_norm(q.view(*q.shape[:-1], hq, d), wq, eps).view(q.shape)
        kn = rms_norm(k.view(*k.shape[:-1], hk, d), wk, eps).view(k.shape)
        qr, kr = rotary_embedding(pos, qn, kn, d, d, cache, neox)
        want = torch.cat((qr, kr, v), dim=-1)
        assert torch.equal(fused_qk_norm_rope(*sample.args), want), sample.label


def _qk(tokens=4, hq=2, hk=1, d=64, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, hq * d, generator=gen).to(dtype)
    k = torch.randn(tokens, hk * d, generator=gen).to(dtype)
    return torch.randint(0, 64, (tokens,), generator=gen), q, k


@pytest.mark.parametrize("fmt", ["standard", "deepseek"])
@pytest.mark.parametrize("neox", [True, False])
def test_a_zero_angle_cache_is_the_identity(neox, fmt):
    pos, q, k = _qk(dtype=torch.bfloat16)
    cache = torch.cat((torch.ones(64, 16), torch.zeros(64, 16)), dim=-1)  # cos 1, sin 0
    out_q, out_k = rotary_embedding(pos, q, k, 64, 32, cache, neox, None, fmt, False, 16)
    assert torch.equal(out_q, q) and torch.equal(out_k, k)


@pytest.mark.parametrize("fmt", ["standard", "deepseek"])
@pytest.mark.parametrize("neox", [True, False])
def test_inverse_undoes_the_rotation(neox, fmt):
    pos, q, k = _qk(dtype=torch.float32)
    cache = _rope_cache(64, 64, "cpu")
    offsets = torch.arange(4) if fmt == "deepseek" else None
    pos = pos.clamp(max=59)
    turned = rotary_embedding(pos, q, k, 64, 64, cache, neox, offsets, fmt, False, 0)
    back_q, back_k = rotary_embedding(pos, *turned, 64, 64, cache, neox, offsets, fmt, True, 0)
    torch.testing.assert_close(back_q, q, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(back_k, k, atol=2e-5, rtol=1e-5)
    assert (turned[0] - q).abs().max() > 0.1  # it did rotate


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_channels_outside_the_rotary_slice_pass_through_bit_for_bit(dtype):
    pos, q, k = _qk(dtype=dtype)
    cache = _rope_cache(64, 32, "cpu").to(dtype)
    for offset in (0, 16, 32):
        for neox in (True, False):
            out_q, out_k = rotary_embedding(pos, q, k, 64, 32, cache, neox, None, "standard", False, offset)
            for out, x in ((out_q, q), (out_k, k)):
                heads_out, heads_in = out.view(4, -1, 64), x.view(4, -1, 64)
                keep = [c for c in range(64) if not offset <= c < offset + 32]
                assert torch.equal(heads_out[..., keep], heads_in[..., keep])
                assert not torch.equal(
                    heads_out[..., offset : offset + 32], heads_in[..., offset : offset + 32]
                )


def test_gptj_and_neox_pair_different_channels():
    """One head, position 1, angle pi/2 on the first pair only: neox turns channels (0, 2), gptj (0, 1)."""
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    cache = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])  # row 1: cos (0, 1), sin (1, 0)
    pos = torch.tensor([1])
    neox, _ = rotary_embedding(pos, x, x, 4, 4, cache, True)
    gptj, _ = rotary_embedding(pos, x, x, 4, 4, cache, False)
    assert neox.tolist() == [[-3.0, 2.0, 1.0, 4.0]]  # (x0, x2) -> (-x2, x0)
    assert gptj.tolist() == [[-2.0, 1.0, 3.0, 4.0]]  # (x0, x1) -> (-x1, x0)


def test_deepseek_reads_rows_positions_plus_offsets_and_rounds_once():
    pos, q, k = _qk(dtype=torch.bfloat16)
    cache32 = _rope_cache(128, 64, "cpu")
    offsets = torch.tensor([3, 0, 60, 1])
    got = rotary_embedding(pos, q, k, 64, 64, cache32, True, offsets, "deepseek")
    want = rotary_embedding(pos + offsets, q.float(), k.float(), 64, 64, cache32, True, None, "deepseek")
    assert torch.equal(got[0], want[0].to(torch.bfloat16)) and torch.equal(got[1], want[1].to(torch.bfloat16))


# ---------------------------------------------------------------------- in place
def _like(op, body):
    """``body`` under the op's exact signature (implementations are registered against it)."""
    return functools.wraps(op.native)(lambda *args: body(*args))


def _inplace_rotary(positions, query, key, head_size, rotary_dim, cache, neox, offsets=None, fmt="standard",
                    inverse=False, rope_dim_offset=0):  # fmt: skip
    """Like vLLM's _C kernel: fp32 maths, one rounding, written into query and key."""
    out = rotary_embedding.native(positions, query.float(), key.float(), head_size, rotary_dim, cache.float(), neox,
                                  offsets, fmt, inverse, rope_dim_offset)  # fmt: skip
    query.copy_(out[0])
    key.copy_(out[1])
    return query, key


def _inplace_query_only(positions, query, *rest):
    return _inplace_rotary(positions, query, query.clone(), *rest)[0]


def _inplace_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """Like Liger's kernel: in place on HF's strided q/k, from the first half of cos/sin, in fp32."""
    half = q.shape[-1] // 2
    c = torch.cat((cos[..., :half], cos[..., :half]), dim=-1).float()
    s = torch.cat((sin[..., :half], sin[..., :half]), dim=-1).float()
    out = rotary_pos_emb.native(q.float(), k.float(), c, s, unsqueeze_dim)
    q.copy_(out[0])
    k.copy_(out[1])
    return q, k


def _inplace_fused(qkv, *rest):
    qkv.copy_(fused_qk_norm_rope.native(qkv, *rest))
    return qkv


INPLACE = {
    "rotary_embedding": _like(rotary_embedding, _inplace_rotary),
    "rotary_embedding_query_only": _like(rotary_embedding_query_only, _inplace_query_only),
    "rotary_pos_emb": _like(rotary_pos_emb, _inplace_pos_emb),
    "fused_qk_norm_rope": _like(fused_qk_norm_rope, _inplace_fused),
}


@pytest.mark.parametrize("op_name", ROPE_OPS)
def test_maybe_inplace_reuses_the_buffers_and_the_default_call_mutates_nothing(op_name):
    op = ircore.get_op(op_name)
    op.register_impl("inplace_rope", INPLACE[op_name], inplace=True)
    ircore.set_priority({op_name: ["inplace_rope"]})
    for sample in _samples(op_name, torch.bfloat16):
        args = sample.args
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        out = op(*args)
        for a, b in zip(args, before):
            assert not isinstance(a, torch.Tensor) or torch.equal(a, b), sample.label
        assert_close_to_reference(op, out, args, label=sample.label)
        work = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        written = op.maybe_inplace(*work)
        written = written if isinstance(written, tuple) else (written,)
        assert len(written) == len(op.inplace_indices)
        for i, got in zip(op.inplace_indices, written):
            assert got.data_ptr() == work[i].data_ptr(), sample.label
        for i, (a, b) in enumerate(zip(work, before)):  # positions, cache, weights: never written
            if isinstance(a, torch.Tensor) and i not in op.inplace_indices:
                assert torch.equal(a, b), (sample.label, op.param_names[i])
        expect = out if isinstance(out, tuple) else (out,)
        assert all(torch.equal(g, e) for g, e in zip(written, expect)), sample.label


def test_conformance_kit_checks_inplace_providers_of_the_rope_ops():
    """Tuple outputs written into in-place arguments, int64 positions first, HF-strided q/k: the kit
    runs every sample (fp32 maths with one rounding is within the ops' tolerance of fp64) and
    catches a kernel that loses the pass-through channels."""
    for name, fn in INPLACE.items():
        ircore.get_op(name).register_impl("kit_rope", fn, inplace=True)
    report = check_provider("kit_rope", dtypes=(torch.bfloat16,), seeds=(0,))
    assert set(report.checked) == set(ROPE_OPS) and not report.declined
    assert report.checked["rotary_embedding"] == len(_samples("rotary_embedding", torch.bfloat16))

    def drops_tail(*args):
        q, k = rotary_embedding.native(*args)
        head_size, rotary_dim, rope_dim_offset = args[3], args[4], args[10]
        q.view(q.shape[0], -1, head_size)[..., rope_dim_offset + rotary_dim :] = 0
        return q, k

    rotary_embedding.register_impl("kit_rope_bad", _like(rotary_embedding, drops_tail))
    with pytest.raises(AssertionError, match=r"kit_rope_bad.rotary_embedding \[rotary_dim 32 of 64 neox"):
        check_provider("kit_rope_bad", dtypes=(torch.float32,), seeds=(0,))


# ---------------------------------------------------------------------- argument checks
def _rot(**change):
    pos, q, k = _qk()
    args = dict(positions=pos, query=q, key=k, head_size=64, rotary_dim=64, cos_sin_cache=_rope_cache(64, 64, "cpu"),
                is_neox_style=True, offsets=None, cos_sin_format="standard", inverse=False, rope_dim_offset=0)  # fmt: skip
    args.update(change)
    return args


def _hf(**change):
    q = torch.randn(2, 5, 4 * 8).view(2, 5, 4, 8).transpose(1, 2)
    args = dict(
        q=q, k=torch.randn(2, 1, 5, 8), cos=torch.randn(2, 5, 8), sin=torch.randn(2, 5, 8), unsqueeze_dim=1
    )
    args.update(change)
    return args


def _fused(**change):
    args = dict(qkv=torch.randn(3, 4 * 16), num_heads_q=2, num_heads_k=1, num_heads_v=1, head_dim=16, eps=1e-6,
                q_weight=torch.ones(16), k_weight=torch.ones(16), cos_sin_cache=_rope_cache(32, 16, "cpu"),
                is_neox=True, position_ids=torch.tensor([0, 5, 31]))  # fmt: skip
    args.update(change)
    return args


BAD = [
    ("rotary_embedding", lambda: _rot(positions=torch.arange(4, dtype=torch.int32)),
     "argument 'positions' has dtype torch.int32; expected torch.int64 (convert with .long())"),
    ("rotary_embedding", lambda: _rot(positions=torch.arange(3)),
     "argument 'query' has shape (4, 128); expected [*, heads * head_size] or [*, heads, head_size] with head_size 64, "
     "at least one head, and * holding the 3 tokens of positions"),
    ("rotary_embedding", lambda: _rot(key=torch.randn(4, 48)), "argument 'key' has shape (4, 48); expected [*, heads"),
    ("rotary_embedding", lambda: _rot(key=torch.randn(4, 64).half()),
     "argument 'key' has dtype torch.float16; expected query's dtype, torch.float32"),
    ("rotary_embedding", lambda: _rot(query=torch.ones(4, 128, dtype=torch.int32)),
     "argument 'query' has dtype torch.int32; expected one of float32, float16, bfloat16"),
    ("rotary_embedding", lambda: _rot(rotary_dim=63), "argument 'rotary_dim' is 63; expected a positive even int"),
    ("rotary_embedding", lambda: _rot(rotary_dim=0), "argument 'rotary_dim' is 0; expected a positive even int"),
    ("rotary_embedding", lambda: _rot(head_size=0), "argument 'head_size' is 0; expected a positive int"),
    ("rotary_embedding", lambda: _rot(rope_dim_offset=8),
     "argument 'rope_dim_offset' is 8 with rotary_dim 64; expected rope_dim_offset >= 0 and "
     "rope_dim_offset + rotary_dim <= head_size (64)"),
    ("rotary_embedding", lambda: _rot(rope_dim_offset=-2), "argument 'rope_dim_offset' is -2 with rotary_dim 64"),
    ("rotary_embedding", lambda: _rot(cos_sin_cache=_rope_cache(64, 32, "cpu")),
     "argument 'cos_sin_cache' has shape (64, 32); expected [max_position, rotary_dim] = [*, 64]"),
    ("rotary_embedding", lambda: _rot(cos_sin_cache=_rope_cache(64, 64, "cpu").double()),
     "argument 'cos_sin_cache' has dtype torch.float64; expected one of float32, float16, bfloat16"),
    ("rotary_embedding", lambda: _rot(cos_sin_cache=torch.ones(64, 64, device="meta")),
     "argument 'cos_sin_cache' is on meta but query is on cpu"),
    ("rotary_embedding", lambda: _rot(positions=torch.zeros(4, dtype=torch.int64, device="meta")),
     "argument 'positions' is on meta but the activations are on cpu"),
    ("rotary_embedding", lambda: _rot(cos_sin_format="yarn"),
     "argument 'cos_sin_format' is 'yarn'; expected one of ['standard', 'deepseek']"),
    ("rotary_embedding", lambda: _rot(offsets=torch.zeros(4, dtype=torch.int64)),
     "argument 'offsets' is given with cos_sin_format='standard', which does not read it; pass "
     "cos_sin_format='deepseek'"),
    ("rotary_embedding", lambda: _rot(offsets=torch.zeros(3, dtype=torch.int64), cos_sin_format="deepseek"),
     "argument 'offsets' has 3 elements (shape (3,)); expected 4, one per token"),
    ("rotary_embedding", lambda: _rot(positions=torch.tensor([0, 1, 64, 2])),
     "argument 'positions' holds 64 at flat index 2; every position must index a row of cos_sin_cache, in [0, 64)"),
    ("rotary_embedding", lambda: _rot(positions=torch.tensor([0, -1, 3, 2])), "argument 'positions' holds -1 at flat index 1"),
    ("rotary_embedding", lambda: _rot(offsets=torch.tensor([0, 0, 0, 70]), cos_sin_format="deepseek",
                                      positions=torch.tensor([0, 1, 2, 3])),
     "argument 'positions' is such that positions + offsets is 73 at flat index 3; every position must index a row"),
    ("rotary_embedding_query_only", lambda: {k: v for k, v in _rot(rotary_dim=66).items() if k != "key"},
     "argument 'rope_dim_offset' is 0 with rotary_dim 66; expected rope_dim_offset >= 0 and "
     "rope_dim_offset + rotary_dim <= head_size (64)"),
    ("rotary_embedding_query_only", lambda: {k: v for k, v in _rot(positions=torch.tensor([0, 1, 2, 99])).items()
                                             if k != "key"},
     "argument 'positions' holds 99 at flat index 3"),
    ("rotary_pos_emb", lambda: _hf(cos=torch.randn(2, 5, 8).half(), sin=torch.randn(2, 5, 8).half()),
     "argument 'cos' has dtype torch.float16; expected q's dtype, torch.float32 (HF's rotary embedding modules"),
    ("rotary_pos_emb", lambda: _hf(k=torch.randn(2, 1, 5, 8).bfloat16()),
     "argument 'k' has dtype torch.bfloat16; expected q's dtype, torch.float32"),
    ("rotary_pos_emb", lambda: _hf(sin=torch.randn(2, 5, 4)),
     "argument 'sin' has shape (2, 5, 4); expected cos's shape, (2, 5, 8)"),
    ("rotary_pos_emb", lambda: _hf(cos=torch.randn(2, 6, 8), sin=torch.randn(2, 6, 8)),
     "argument 'cos' has shape (2, 6, 8) (unsqueezed at 1: (2, 1, 6, 8)), which does not broadcast to q's shape "
     "(2, 4, 5, 8)"),
    ("rotary_pos_emb", lambda: _hf(unsqueeze_dim=2),
     "argument 'cos' has shape (2, 5, 8) (unsqueezed at 2: (2, 5, 1, 8)), which does not broadcast"),
    ("rotary_pos_emb", lambda: _hf(unsqueeze_dim=5), "argument 'unsqueeze_dim' is 5; expected a dimension of cos"),
    ("rotary_pos_emb", lambda: _hf(q=torch.randn(2, 4, 5, 7), k=torch.randn(2, 1, 5, 7), cos=torch.randn(2, 5, 7),
                                   sin=torch.randn(2, 5, 7)),
     "argument 'q' has shape (2, 4, 5, 7); expected a non-empty, even last dimension"),
    ("rotary_pos_emb", lambda: _hf(q=torch.ones(2, 4, 5, 8, dtype=torch.int64)), "argument 'q' has dtype torch.int64"),
    ("fused_qk_norm_rope", lambda: _fused(qkv=torch.randn(3, 60)),
     "argument 'qkv' has shape (3, 60); expected [*, (num_heads_q + num_heads_k + num_heads_v) * head_dim] = "
     "[*, (2 + 1 + 1) * 16] = [*, 64]"),
    ("fused_qk_norm_rope", lambda: _fused(num_heads_k=0, qkv=torch.randn(3, 48)),
     "argument 'num_heads_k' is 0; expected an int >= 1"),
    ("fused_qk_norm_rope", lambda: _fused(head_dim=15), "argument 'head_dim' is 15; expected a positive even int"),
    ("fused_qk_norm_rope", lambda: _fused(q_weight=torch.ones(64)),
     "argument 'q_weight' has shape (64,); expected (16,), one weight per channel of a head"),
    ("fused_qk_norm_rope", lambda: _fused(k_weight=torch.ones(16, dtype=torch.int64)),
     "argument 'k_weight' has dtype torch.int64"),
    ("fused_qk_norm_rope", lambda: _fused(eps=-1.0), "argument 'eps' is -1.0; expected a number >= 0 (not NaN)"),
    ("fused_qk_norm_rope", lambda: _fused(eps=float("nan")), "argument 'eps' is nan; expected a number >= 0"),
    ("fused_qk_norm_rope", lambda: _fused(cos_sin_cache=_rope_cache(32, 8, "cpu")),
     "argument 'cos_sin_cache' has shape (32, 8); expected [max_position, head_dim] = [*, 16]"),
    ("fused_qk_norm_rope", lambda: _fused(position_ids=torch.tensor([0, 1])),
     "argument 'position_ids' has 2 elements (shape (2,)); expected 3, one per token"),
    ("fused_qk_norm_rope", lambda: _fused(position_ids=torch.tensor([0, 32, 1])),
     "argument 'position_ids' holds 32 at flat index 1; every position must index a row of cos_sin_cache, in [0, 32)"),
    ("fused_qk_norm_rope", lambda: _fused(position_ids=torch.tensor([0, 1, 2], dtype=torch.int32)),
     "argument 'position_ids' has dtype torch.int32; expected torch.int64"),
]  # fmt: skip


@pytest.mark.parametrize(("op_name", "make", "message"), BAD, ids=[f"{o}: {m[:60]}" for o, _, m in BAD])
def test_every_bad_argument_gets_one_clear_error_before_any_implementation(op_name, make, message):
    op = ircore.get_op(op_name)
    ran = []
    op.register_impl("greedy_rope", _like(op, lambda *a: ran.append(a) or op.native(*a)))
    ircore.set_priority({op_name: ["greedy_rope"]})
    kwargs = make()
    good = {"rotary_embedding": _rot, "rotary_pos_emb": _hf, "fused_qk_norm_rope": _fused}.get(op_name)
    if good is not None:  # a good call first: a choice cached for it must not let the bad one through
        op(**good())
        ran.clear()
    for route in ("eager", "maybe_inplace", "torch_op"):
        call = {"eager": op, "maybe_inplace": op.maybe_inplace, "torch_op": op.torch_op}[route]
        with pytest.raises(InvalidArgumentError) as info:
            call(*kwargs.values()) if route == "torch_op" else call(**kwargs)
        assert str(info.value).startswith(f"ircore.ops.{op_name}: argument "), (route, str(info.value))
        assert message in str(info.value), (route, str(info.value))
    assert ran == []


def test_positions_beyond_the_cache_on_fake_tensors_are_not_checked():
    """Fake (and GPU) positions have no values to read without a host sync: the range check runs
    on real CPU tensors only (docs/ops.md, "Positions"); the shapes are still checked."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = _rot(positions=torch.tensor([0, 1, 64, 2]))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        out_q, out_k = rotary_embedding(**fake)
        assert out_q.shape == (4, 128) and out_k.shape == (4, 64)
        with pytest.raises(InvalidArgumentError, match="argument 'rotary_dim' is 63"):
            rotary_embedding(**{**fake, "rotary_dim": 63})


# ---------------------------------------------------------------------- compile
@pytest.mark.slow
def test_compiled_graph_runs_the_rope_ops():
    """backend="ircore" on one small graph (Inductor's FX graph cache off, as the other tests that
    read the lowering report): both ops lower to native; the result is eager's."""
    torch._dynamo.reset()
    ircore.compile.reset_report()
    pos, q, k = _qk()
    cache = _rope_cache(64, 64, "cpu")
    cos = cache[pos, :32].repeat(1, 2)[None]
    sin = cache[pos, 32:].repeat(1, 2)[None]

    def f(pos, q, k, cache, cos, sin):
        q, k = ircore.ops.rotary_embedding(pos, q, k, 64, 64, cache, True)
        q4 = q.view(1, 4, 2, 64).transpose(1, 2)
        k4 = k.view(1, 4, 1, 64).transpose(1, 2)
        q4, k4 = ircore.ops.rotary_pos_emb(q4, k4, cos, sin)
        return q4 * 2, k4

    want = f(pos, q, k, cache, cos, sin)
    from torch._inductor import config as inductor_config

    with inductor_config.patch(fx_graph_cache=False):  # a cache hit runs no lowering to report
        got = torch.compile(f, backend="ircore", fullgraph=True)(pos, q, k, cache, cos, sin)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    lowered = ircore.compile.report().last_lowering
    assert sorted(lowered) == ["rotary_embedding", "rotary_pos_emb"] and set(lowered.values()) == {"native"}
    torch._dynamo.reset()
