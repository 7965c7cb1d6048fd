"""The position-op kernels (rope_kernels.py) on what the conformance kit's samples do not reach:
writes land in the caller's buffers and nowhere else (pass-through channels, v heads, padding
between heads and rows), head counts and rotated widths that are not powers of two (masked
tiles), query-only equal to rotary_embedding's query bit for bit, HF cos/sin with distinct halves,
and the predicates declining strides the kernels cannot address. Tiny shapes: they run in
Triton's interpreter without a GPU. (The ops' samples -- neox/gptj, partial rotary with
rope_dim_offset, deepseek with offsets, inverse, fp32 cache with bf16, HF-strided q/k, GQA -- run
through the kit in test_conformance.py.)
"""

import pytest
import torch
from conftest import GPU
from ircore_triton import impls

import ircore
from ircore.testing import assert_close_to_reference

DEVICE = GPU or "cpu"
BF16 = torch.bfloat16


def _randn(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE).to(dtype)


def _cache(rows: int, rotary_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    inv = 10000.0 ** -(torch.arange(0, rotary_dim, 2, device=DEVICE, dtype=torch.float32) / rotary_dim)
    f = torch.outer(torch.arange(rows, device=DEVICE, dtype=torch.float32), inv)
    return torch.cat((f.cos(), f.sin()), dim=-1).to(dtype)


@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
def test_rotary_embedding_writes_only_the_rotated_channels_of_padded_heads(neox):
    """[T, H, D] views whose heads sit 64 apart (D 48) and whose tokens sit 256 and 192 apart; 3
    query heads and 2 key heads, 5 tokens (masked head and token blocks); rotary_dim 24 from
    channel 8 (12 pairs: a masked pair block). The kernel writes the rotated channels of the views
    and nothing else."""
    qbuf, kbuf = _randn(5, 4, 64), _randn(5, 3, 64)
    q, k = qbuf[:, :3, :48], kbuf[:, :2, :48]
    pos = torch.tensor([5, 0, 77, 31, 99], device=DEVICE)
    args = (pos, q, k, 48, 24, _cache(100, 24), neox, None, "standard", False, 8)
    assert impls.rotary_embedding_supports(*args)
    qbuf0, kbuf0, q0, k0 = qbuf.clone(), kbuf.clone(), q.clone(), k.clone()
    out = impls.rotary_embedding(*args)
    assert out[0] is q and out[1] is k
    assert_close_to_reference(ircore.ops.rotary_embedding, out, (pos, q0, k0, *args[3:]))
    rotated = torch.zeros(64, dtype=torch.bool)
    rotated[8:32] = True
    for buf, buf0, heads in ((qbuf, qbuf0, 3), (kbuf, kbuf0, 2)):
        changed = buf != buf0
        assert changed[:, :heads, 8:32].any()
        assert not changed[:, :, ~rotated].any() and not changed[:, heads:].any()


def test_the_gpu_launch_configuration(monkeypatch):
    """The blocks a GPU launch uses (one token per program, 32 heads of 128 channels per block:
    48 query and key heads make two blocks, one straddling the query/key boundary), run here by
    the interpreter: the tests above use its own blocks (every head, up to 16 tokens)."""
    from ircore_triton import rope_kernels

    monkeypatch.setattr(rope_kernels, "_INTERPRET", False)
    assert rope_kernels._blocks(2, 48, 64) == (1, 32, 64)
    qkv = _randn(2, (40 + 2 * 8) * 128)
    pos = torch.tensor([3, 1000], device=DEVICE)
    args = (pos, qkv[:, : 40 * 128], qkv[:, 40 * 128 : 48 * 128], 128, 128, _cache(1024, 128), True)
    ref_args = (pos, args[1].clone(), args[2].clone(), *args[3:])
    assert_close_to_reference(ircore.ops.rotary_embedding, impls.rotary_embedding(*args), ref_args)
    w = 1 + 0.1 * torch.randn(128, device=DEVICE)
    fused = (qkv, 40, 8, 8, 128, 1e-6, w, w.flip(0), _cache(1024, 128), False, pos)
    ref_args = (qkv.clone(), *fused[1:])
    assert_close_to_reference(ircore.ops.fused_qk_norm_rope, impls.fused_qk_norm_rope(*fused), ref_args)
    q = _randn(1, 2, 40 * 128).view(1, 2, 40, 128).transpose(1, 2)
    k = _randn(1, 2, 8 * 128).view(1, 2, 8, 128).transpose(1, 2)
    cos, sin = _randn(1, 2, 128), _randn(1, 2, 128)
    ref_args = (q.clone(), k.clone(), cos, sin, 1)
    assert_close_to_reference(ircore.ops.rotary_pos_emb, impls.rotary_pos_emb(q, k, cos, sin, 1), ref_args)


def test_query_only_is_rotary_embeddings_query_bit_for_bit():
    q, k = _randn(3, 2 * 32), _randn(3, 32)
    pos, off = torch.tensor([1, 9, 4], device=DEVICE), torch.tensor([3, 0, 20], device=DEVICE)
    rest = (32, 16, _cache(40, 16) * 1.2, False, off, "deepseek", True, 16)
    both = impls.rotary_embedding(pos, q.clone(), k, *rest)[0]
    alone = impls.rotary_embedding_query_only(pos, q.clone(), *rest)
    assert torch.equal(both, alone)
    assert_close_to_reference(ircore.ops.rotary_embedding_query_only, alone, (pos, q, *rest))


def test_rotary_pos_emb_rotates_hf_views_where_they_lie_with_each_halfs_cos_sin():
    """q and k as HF's attention makes them (views of the projections' outputs, GQA) are rotated
    in those buffers; cos/sin with unequal halves (not HF's, but the op's reference defines the
    second half by the second half of cos/sin) and a broadcast batch."""
    b, s, hq, hk, d = 2, 3, 3, 2, 48  # 6 tokens and 5 heads: masked token and head blocks
    qproj, kproj = _randn(b, s, hq * d), _randn(b, s, hk * d)
    q, k = qproj.view(b, s, hq, d).transpose(1, 2), kproj.view(b, s, hk, d).transpose(1, 2)
    cos, sin = _randn(1, s, d), _randn(1, s, d)
    q0, k0, qproj0 = q.clone(), k.clone(), qproj.clone()
    assert impls.rotary_pos_emb_supports(q, k, cos, sin, 1)
    out = impls.rotary_pos_emb(q, k, cos, sin, 1)
    assert out[0] is q and out[1] is k
    assert q.data_ptr() == qproj.data_ptr() and not torch.equal(qproj, qproj0)  # no copy
    assert_close_to_reference(ircore.ops.rotary_pos_emb, out, (q0, k0, cos, sin, 1))


def test_fused_qk_norm_rope_leaves_v_and_row_padding_alone():
    """qkv a view of rows padded by 16 elements; 3 q heads, 2 k heads, 1 v head of 48 channels,
    3 tokens (masked token, head and pair blocks); gptj, fp32 weights and cache."""
    buf = _randn(3, 6 * 48 + 16)
    qkv = buf[:, : 6 * 48]
    wq, wk = 1 + 0.1 * torch.randn(48, device=DEVICE), 1 + 0.1 * torch.randn(48, device=DEVICE)
    pos = torch.tensor([2, 60, 7], device=DEVICE)
    args = (qkv, 3, 2, 1, 48, 1e-6, wq, wk, _cache(64, 48), False, pos)
    assert impls.fused_qk_norm_rope_supports(*args)
    buf0, qkv0 = buf.clone(), qkv.clone()
    assert impls.fused_qk_norm_rope(*args) is qkv
    assert_close_to_reference(ircore.ops.fused_qk_norm_rope, qkv, (qkv0, *args[1:]))
    assert torch.equal(buf[:, 5 * 48 :], buf0[:, 5 * 48 :])  # v and the padding
    assert not torch.equal(buf[:, : 5 * 48], buf0[:, : 5 * 48])


def test_predicates_decline_strides_the_kernels_cannot_address():
    pos = torch.arange(6, device=DEVICE)
    cache = _cache(8, 32)
    q, k = _randn(6, 64), _randn(6, 32)
    rest = (32, 32, cache, True)
    assert impls.rotary_embedding_supports(pos, q, k, *rest)
    assert not impls.rotary_embedding_supports(pos, q, q, *rest)  # one tensor as query and key
    assert not impls.rotary_embedding_supports(pos, _randn(64, 6).t(), k, *rest)  # channel stride 6
    sb = _randn(3, 2, 64).transpose(0, 1)  # [B, S, H*D] whose B and S do not collapse to tokens
    assert not impls.rotary_embedding_supports(pos, sb, k, *rest)
    assert not impls.rotary_embedding_query_only_supports(pos, sb, *rest)
    assert impls.rotary_embedding_query_only_supports(pos, sb.contiguous(), *rest)
    hq, hk = _randn(1, 2, 3, 32), _randn(1, 1, 3, 32)
    cos = _randn(1, 3, 32)
    assert impls.rotary_pos_emb_supports(hq, hk, cos, cos, 1)
    assert not impls.rotary_pos_emb_supports(hq, hq, cos, cos, 1)  # q is k
    assert not impls.rotary_pos_emb_supports(hq[0], hk[0], cos[0], cos[0], 1)  # 3-D q/k
    assert not impls.rotary_pos_emb_supports(hq, _randn(1, 1, 32, 3).transpose(-1, -2), cos, cos, 1)
    assert not impls.rotary_pos_emb_supports(hq, hk[:, :, :2], cos, cos, 1)  # k's sequence differs
    qkv = _randn(6, 4 * 32)
    ones = torch.ones(32, device=DEVICE)
    fused = (2, 1, 1, 32, 1e-6, ones, ones, cache, True, pos)
    assert impls.fused_qk_norm_rope_supports(qkv, *fused)
    assert not impls.fused_qk_norm_rope_supports(_randn(4 * 32, 6).t(), *fused)


@pytest.mark.slow  # torch.library.opcheck runs the kernel a dozen times, through AOT dispatch too
def test_opcheck_of_the_op_graphs_hold(triton_first) -> None:
    """The op the core builds for the in-place HF kernel (``torch.ops.ircore_triton.rotary_pos_emb``:
    q and k marked written, nothing returned) agrees with the kernel on HF's transposed views: what
    it writes and aliases, the fake, functionalization. (The kit runs every position op's built op
    on fake copies; this adds torch's own schema and aliasing checks on the strided case.)"""
    built = torch.ops.ircore_triton.rotary_pos_emb.default
    written = [a.name for a in built._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["q", "k"] and not built._schema.returns
    q = _randn(1, 3, 2 * 32).view(1, 3, 2, 32).transpose(1, 2)
    torch.library.opcheck(built, (q, _randn(1, 1, 3, 32), _randn(1, 3, 32), _randn(1, 3, 32), 1))
