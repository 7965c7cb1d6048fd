"""Triton kernels and launchers for the position ops: ``rotary_embedding`` (and its query-only
form), ``rotary_pos_emb`` (Hugging Face's ``apply_rotary_pos_emb``) and ``fused_qk_norm_rope``.

Why it looks like this:

- **In place, addressed by strides.** Every launcher writes the rotated channels back into the
  tensors it is given (the ops declare them ``inplace_args``; ircore clones first where the
  caller's overload must not mutate). Pass-through channels (``rotary_dim < head_size``, the v
  heads of ``qkv``) are never read or written. Activations are addressed by a token (or
  batch/sequence) stride and a head stride with a unit channel stride, so vLLM's q/k views of one
  qkv buffer and Hugging Face's ``(B, S, H, D).transpose(1, 2)`` views are rotated where they
  lie, with no contiguous copy (a copy would also break the in-place contract).
- **fp32 maths, one rounding per output** (vLLM's ``_C`` kernel, FlashInfer): cos/sin and the
  activations are widened to fp32, the rotation (and for ``fused_qk_norm_rope`` the per-head
  RMSNorm before it) is computed there and rounded once to the activations' dtype. The natives
  round after every operation in the activation dtype; both stay within the ops' tolerances of
  the fp64 reference, this one closer (docs/ops.md). Not bitwise equal to native or to HF.
- **One program per token (row) and block of heads.** The cos/sin row is loaded once and reused
  by every head of the block. Query heads and key heads share one head index (``j < hq``: query
  head ``j``, else key head ``j - hq``, addressed from query's pointer), so one launch rotates
  both and the compiled kernel has no branch between them (which would cost it the rows'
  alignment, hence its vector loads). gptj pairs are read as one contiguous ``[heads,
  rotary_dim]`` tile and split into even/odd channels in registers (``tl.split``), so loads stay
  contiguous vectors. Under Triton's interpreter (tests) a program takes up to 16 tokens and
  every head instead: the interpreter runs programs one by one at a cost per operation.
- ``rotary_pos_emb``'s launch (:class:`~ircore_triton.kernels.RopeConfig`) is tuned per (query
  heads, key heads, head_dim, dtype, token-count bucket) by the autotune of
  :mod:`ircore_triton.kernels` (``_pick``), on scratch q/k in HF's layout (``(1, heads, T, D)``
  views of ``(1, T, heads * D)``). Candidates: the heuristic blocks first (:func:`_blocks`: 32
  heads of 128 per program, so Llama's 32 + 8 heads make two programs per token, the second
  three quarters masked and reloading cos/sin), every head of a token in one program, and
  :func:`_hf_rope_qk_kernel`: one program per token (or two) holding its query heads and its
  key heads as two tiles, each padded to a power of two on its own (32 and 8: nothing masked),
  cos/sin loaded once; 2 to 16 warps (at most 40 pairs per thread). Every candidate rotates
  each pair with the same operations (``x1 * c1 - x2 * s1``, ``x2 * c2 + x1 * s2`` in fp32),
  so the op stays batch-invariant.
- PDL as in :mod:`ircore_triton.kernels` (Hopper and later): wait before the first global
  access, let the next kernel launch once the loads are issued.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import triton
import triton.language as tl

from . import kernels as _k
from .kernels import RopeConfig, _device_ctx, _launch_opts, _off_current_device, interpreting

_INTERPRET = interpreting()

__all__ = [
    "fused_qk_norm_rope_",
    "head_layout",
    "hf_layout",
    "rotary_embedding_",
    "rotary_pos_emb_",
]

#: Elements of one program's tile (heads x rotated pairs): about 16 fp32 values per thread at
#: four warps.
_TILE = 2048


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _load_pairs(
    rows, row_ok, offs_i, half,
    NEOX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    """The rotated pairs of the ``[BLOCK_T, BLOCK_H]`` head rows starting at ``rows`` as fp32
    ``(x1, x2)``, each ``[BLOCK_T, BLOCK_H, BLOCK_HALF]``: neox the two halves, gptj even and odd
    channels (one contiguous load, split in registers)."""
    ptrs = rows[:, :, None]
    if NEOX:
        mask = row_ok[:, :, None] & (offs_i < half)[None, None, :]
        x1 = tl.load(ptrs + offs_i[None, None, :], mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(ptrs + half + offs_i[None, None, :], mask=mask, other=0.0).to(tl.float32)
    else:
        cols = tl.arange(0, 2 * BLOCK_HALF)
        mask = row_ok[:, :, None] & (cols < 2 * half)[None, None, :]
        x = tl.load(ptrs + cols[None, None, :], mask=mask, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (BLOCK_T, BLOCK_H, BLOCK_HALF, 2)))
    return x1, x2


@triton.jit
def _store_pairs(
    rows, row_ok, offs_i, half, o1, o2,
    NEOX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):  # fmt: skip
    """The inverse of :func:`_load_pairs`: ``(o1, o2)`` rounded once to the tensor's dtype."""
    ptrs = rows[:, :, None]
    ty = rows.dtype.element_ty
    if NEOX:
        mask = row_ok[:, :, None] & (offs_i < half)[None, None, :]
        tl.store(ptrs + offs_i[None, None, :], o1.to(ty), mask=mask)
        tl.store(ptrs + half + offs_i[None, None, :], o2.to(ty), mask=mask)
    else:
        cols = tl.arange(0, 2 * BLOCK_HALF)
        mask = row_ok[:, :, None] & (cols < 2 * half)[None, None, :]
        out = tl.reshape(tl.join(o1, o2), (BLOCK_T, BLOCK_H, 2 * BLOCK_HALF))
        tl.store(ptrs + cols[None, None, :], out.to(ty), mask=mask)


@triton.jit
def _load_weight_pairs(W, offs_i, half, NEOX: tl.constexpr, BLOCK_HALF: tl.constexpr):
    """A per-channel weight ``[rotary_dim]`` as fp32 ``(w1, w2)`` paired like :func:`_load_pairs`,
    each ``[1, 1, BLOCK_HALF]``."""
    if NEOX:
        w1 = tl.load(W + offs_i, mask=offs_i < half, other=0.0).to(tl.float32)
        w2 = tl.load(W + half + offs_i, mask=offs_i < half, other=0.0).to(tl.float32)
    else:
        cols = tl.arange(0, 2 * BLOCK_HALF)
        w = tl.load(W + cols, mask=cols < 2 * half, other=0.0).to(tl.float32)
        w1, w2 = tl.split(tl.reshape(w, (BLOCK_HALF, 2)))
    return w1[None, None, :], w2[None, None, :]


@triton.jit
def _load_cos_sin(ROW, tok_ok, offs_i, half, stride_cd):
    """cos and sin ``[BLOCK_T, 1, BLOCK_HALF]`` in fp32 from the cache rows ``ROW`` (``[BLOCK_T]``
    pointers): cos the first ``half`` columns, sin the next."""
    mask = tok_ok[:, None] & (offs_i < half)[None, :]
    cols = offs_i[None, :] * stride_cd
    cos = tl.load(ROW[:, None] + cols, mask=mask, other=0.0).to(tl.float32)
    sin = tl.load(ROW[:, None] + half * stride_cd + cols, mask=mask, other=0.0).to(tl.float32)
    return cos[:, None, :], sin[:, None, :]


@triton.jit
def _rope_kernel(
    POS, OFF, Q, k_off, CACHE, n_tokens, hq, hk, half, rope_off,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_ct, stride_cd,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, NEOX: tl.constexpr,
    HAS_OFF: tl.constexpr, INVERSE: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """vLLM's rotary_embedding, in place: program ``(a, b)`` rotates tokens ``a * BLOCK_T ...``,
    heads ``b * BLOCK_H ...`` of the query heads followed by the key heads (``j < hq``: query
    head ``j``; else key head ``j - hq``, addressed ``k_off`` elements from ``Q``: one pointer,
    no branch, so the compiler keeps the rows' alignment and issues vector loads)."""
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tok_ok = toks < n_tokens
    t = toks.to(tl.int64)[:, None]
    j = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H))[None, :]
    is_k = j >= hq
    jk = (j - hq).to(tl.int64)
    row_ok = tok_ok[:, None] & (j < hq + hk)
    k_rows = k_off + t * stride_kt + jk * stride_kh
    rows = Q + rope_off + tl.where(is_k, k_rows, t * stride_qt + j * stride_qh)
    offs_i = tl.arange(0, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    pos = tl.load(POS + toks, mask=tok_ok, other=0)
    if HAS_OFF:
        pos += tl.load(OFF + toks, mask=tok_ok, other=0)
    cos, sin = _load_cos_sin(CACHE + pos * stride_ct, tok_ok, offs_i, half, stride_cd)
    x1, x2 = _load_pairs(rows, row_ok, offs_i, half, NEOX, BLOCK_T, BLOCK_H, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if INVERSE:
        sin = -sin
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    _store_pairs(rows, row_ok, offs_i, half, o1, o2, NEOX, BLOCK_T, BLOCK_H, BLOCK_HALF)


@triton.jit
def _hf_rope_kernel(
    Q, k_off, COS, SIN, n_tokens, hq, hk, n1, half,
    sq0, sq1, sqh, sk0, sk1, skh, sc0, sc1, ss0, ss1,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """Hugging Face's ``q*cos + rotate_half(q)*sin``, in place: a "token" ``p`` is the leading
    index ``(p // n1, p % n1)`` (batch and sequence for ``(B, H, S, D)``); heads as in
    :func:`_rope_kernel`. Both halves of cos/sin are read: the first output half uses the first
    half of cos/sin, the second the second (equal for HF's rotary modules)."""
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tok_ok = toks < n_tokens
    i0 = (toks // n1).to(tl.int64)
    i1 = (toks % n1).to(tl.int64)
    j = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H))[None, :]
    is_k = j >= hq
    jk = (j - hq).to(tl.int64)
    row_ok = tok_ok[:, None] & (j < hq + hk)
    q_rows = (i0 * sq0 + i1 * sq1)[:, None] + j * sqh
    k_rows = (k_off + i0 * sk0 + i1 * sk1)[:, None] + jk * skh
    rows = Q + tl.where(is_k, k_rows, q_rows)
    offs_i = tl.arange(0, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    c1, c2 = _load_cos_sin(COS + i0 * sc0 + i1 * sc1, tok_ok, offs_i, half, 1)
    s1, s2 = _load_cos_sin(SIN + i0 * ss0 + i1 * ss1, tok_ok, offs_i, half, 1)
    x1, x2 = _load_pairs(rows, row_ok, offs_i, half, True, BLOCK_T, BLOCK_H, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    o1, o2 = x1 * c1 - x2 * s1, x2 * c2 + x1 * s2
    _store_pairs(rows, row_ok, offs_i, half, o1, o2, True, BLOCK_T, BLOCK_H, BLOCK_HALF)


@triton.jit
def _hf_rope_qk_kernel(
    Q, k_off, COS, SIN, n_tokens, hq, hk, n1, half,
    sq0, sq1, sqh, sk0, sk1, skh, sc0, sc1, ss0, ss1,
    BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr, BLOCK_HALF: tl.constexpr,
    USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """:func:`_hf_rope_kernel` with every head of ``BLOCK_T`` tokens in one program: the query
    heads as one ``[BLOCK_T, BLOCK_HQ]`` tile, the key heads (``k_off`` elements from ``Q``) as
    another, each padded on its own (GQA's 32 + 8 heads: no masked head), cos/sin loaded once per
    token. The same rotation, operation for operation."""
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tok_ok = toks < n_tokens
    i0 = (toks // n1).to(tl.int64)
    i1 = (toks % n1).to(tl.int64)
    jq = tl.arange(0, BLOCK_HQ)[None, :]
    jk = tl.arange(0, BLOCK_HK)[None, :]
    q_rows = Q + ((i0 * sq0 + i1 * sq1)[:, None] + jq * sqh)
    k_rows = Q + ((k_off + i0 * sk0 + i1 * sk1)[:, None] + jk * skh)
    q_ok = tok_ok[:, None] & (jq < hq)
    k_ok = tok_ok[:, None] & (jk < hk)
    offs_i = tl.arange(0, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    c1, c2 = _load_cos_sin(COS + i0 * sc0 + i1 * sc1, tok_ok, offs_i, half, 1)
    s1, s2 = _load_cos_sin(SIN + i0 * ss0 + i1 * ss1, tok_ok, offs_i, half, 1)
    q1, q2 = _load_pairs(q_rows, q_ok, offs_i, half, True, BLOCK_T, BLOCK_HQ, BLOCK_HALF)
    k1, k2 = _load_pairs(k_rows, k_ok, offs_i, half, True, BLOCK_T, BLOCK_HK, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    oq1, oq2 = q1 * c1 - q2 * s1, q2 * c2 + q1 * s2
    ok1, ok2 = k1 * c1 - k2 * s1, k2 * c2 + k1 * s2
    _store_pairs(q_rows, q_ok, offs_i, half, oq1, oq2, True, BLOCK_T, BLOCK_HQ, BLOCK_HALF)
    _store_pairs(k_rows, k_ok, offs_i, half, ok1, ok2, True, BLOCK_T, BLOCK_HK, BLOCK_HALF)


@triton.jit(do_not_specialize=["eps"])
def _qk_norm_rope_kernel(
    QKV, POS, WQ, WK, CACHE, n_tokens, hq, hk, half, stride_t, stride_ct, stride_cd, eps,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, NEOX: tl.constexpr,
    USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """Per-head RMSNorm then RoPE of tokens ``a * BLOCK_T ...``, q and k heads ``b * BLOCK_H ...``
    (q heads first, then k heads, as they lie in the row), in place; the v heads are not
    touched. Everything in fp32, rounded once at the store."""
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tok_ok = toks < n_tokens
    j = (tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H))[None, :]
    row_ok = tok_ok[:, None] & (j < hq + hk)
    is_q = (j < hq)[:, :, None]
    rows = QKV + toks.to(tl.int64)[:, None] * stride_t + j * (2 * half)
    offs_i = tl.arange(0, BLOCK_HALF)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    x1, x2 = _load_pairs(rows, row_ok, offs_i, half, NEOX, BLOCK_T, BLOCK_H, BLOCK_HALF)
    wq1, wq2 = _load_weight_pairs(WQ, offs_i, half, NEOX, BLOCK_HALF)
    wk1, wk2 = _load_weight_pairs(WK, offs_i, half, NEOX, BLOCK_HALF)
    pos = tl.load(POS + toks, mask=tok_ok, other=0)
    cos, sin = _load_cos_sin(CACHE + pos * stride_ct, tok_ok, offs_i, half, stride_cd)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    rstd = tl.rsqrt((tl.sum(x1 * x1, axis=2) + tl.sum(x2 * x2, axis=2)) / (2 * half) + eps)[:, :, None]
    y1 = x1 * rstd * tl.where(is_q, wq1, wk1)
    y2 = x2 * rstd * tl.where(is_q, wq2, wk2)
    o1, o2 = y1 * cos - y2 * sin, y2 * cos + y1 * sin
    _store_pairs(rows, row_ok, offs_i, half, o1, o2, NEOX, BLOCK_T, BLOCK_H, BLOCK_HALF)


# --------------------------------------------------------------------------------------------
# Layouts (read by the predicates in impls.py on every eager call: metadata only)
# --------------------------------------------------------------------------------------------


def _collapse(sizes: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """One stride that walks the dims ``sizes`` in row-major order (their product's index times
    it), or None where they do not collapse (a transposed or sliced batch/sequence pair)."""
    step = None
    inner = 0
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size == 1:
            continue
        if step is None:
            step, inner = stride, size
        elif stride != step * inner:
            return None
        else:
            inner *= size
    return 0 if step is None else step


def head_layout(x: torch.Tensor, tokens: int, head_size: int) -> tuple[int, int, int] | None:
    """``(heads, token stride, head stride)`` of ``x`` seen as ``[tokens, heads, head_size]``
    with unit channel stride, as the op reads it (``[*, H*D]`` or ``[*, H, D]``), or None where
    no such strides exist (non-unit channel stride, token dims that do not collapse)."""
    shape = x.shape
    if not shape or (x.stride(-1) != 1 and shape[-1] > 1):
        return None
    last = shape[-1]
    if last % head_size == 0 and math.prod(shape[:-1]) == tokens:
        lead, heads, head_stride = len(shape) - 1, last // head_size, head_size
    elif len(shape) >= 2 and last == head_size and math.prod(shape[:-2]) == tokens:
        lead, heads, head_stride = len(shape) - 2, shape[-2], x.stride(-2)
    else:
        return None
    token_stride = _collapse(tuple(shape[:lead]), tuple(x.stride()[:lead]))
    return None if token_stride is None else (heads, token_stride, head_stride)


def hf_layout(
    x: torch.Tensor, wide: torch.Tensor, head_dim: int
) -> tuple[int, int, int, int, int, int, int, int] | None:
    """``(n0, n1, heads, s0, s1, s_head, c0, c1)`` of a 4-D ``x`` whose heads are dim
    ``head_dim`` (0..2): the sizes of its two other leading dims (in order) and of the heads, their
    strides in ``x``, and the strides of those two dims in ``wide`` (cos or sin unsqueezed)
    broadcast to ``x`` (0 where it broadcasts). None where ``x``'s channels are not unit-stride."""
    if x.stride(-1) != 1 and x.shape[-1] > 1:
        return None
    d0, d1 = (d for d in range(3) if d != head_dim)
    c = wide.expand(x.shape).stride()
    s = x.stride()
    return (x.shape[d0], x.shape[d1], x.shape[head_dim], s[d0], s[d1], s[head_dim], c[d0], c[d1])


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def _blocks(tokens: int, heads: int, half: int) -> tuple[int, int, int]:
    """``(BLOCK_T, BLOCK_H, BLOCK_HALF)``: pairs padded to a power of two, heads per program
    filling about :data:`_TILE` pairs (at most the heads there are, rounded up to a power of
    two), one token per program. Under Triton's interpreter (tests) every head and up to 16
    tokens per program: it runs programs one after another, each operation costing about the
    same whatever the tile's size."""
    block_half = triton.next_power_of_2(max(half, 1))
    if _INTERPRET:
        block_t = min(16, triton.next_power_of_2(max(tokens, 1)))
        return block_t, triton.next_power_of_2(max(heads, 1)), block_half
    return 1, max(1, min(triton.next_power_of_2(max(heads, 1)), _TILE // block_half)), block_half


def rotary_embedding_(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> None:
    """Rotate ``query`` (and ``key``, if given) in place (the op's semantics, fp32 maths).

    ``offsets`` is read only in the deepseek format (the op refuses it in the standard one); the
    deepseek format's widened cos/sin rotate the same pairs by the same angles, so both formats
    take one kernel. Callers check :func:`head_layout` first (the predicate does)."""
    if _off_current_device(query):
        with _device_ctx(query):
            args = (head_size, rotary_dim, cos_sin_cache, is_neox_style, offsets, cos_sin_format, inverse)
            return rotary_embedding_(positions, query, key, *args, rope_dim_offset)
    tokens = positions.numel()
    if tokens == 0:
        return None
    q_layout = head_layout(query, tokens, head_size)
    k_layout = q_layout if key is None else head_layout(key, tokens, head_size)
    if q_layout is None or k_layout is None:
        raise ValueError("rotary_embedding_: query/key have no [tokens, heads, head_size] strides")
    hq, sqt, sqh = q_layout
    hk, skt, skh = k_layout if key is not None else (0, 0, 0)
    half = rotary_dim // 2
    block_t, block_h, block_half = _blocks(tokens, hq + hk, half)
    pos = positions.reshape(-1)
    use_off = offsets is not None and cos_sin_format == "deepseek"
    off = offsets.reshape(-1) if use_off and offsets is not None else pos
    # key addressed from query's pointer (same dtype: a whole number of elements apart)
    k_off = 0 if key is None else (key.data_ptr() - query.data_ptr()) // query.element_size()
    grid = (_k.cdiv(tokens, block_t), _k.cdiv(hq + hk, block_h))
    _rope_kernel[grid](
        pos, off, query, k_off, cos_sin_cache, tokens, hq, hk, half, rope_dim_offset,
        sqt, sqh, skt, skh, cos_sin_cache.stride(0), cos_sin_cache.stride(1),
        BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_HALF=block_half, NEOX=bool(is_neox_style), HAS_OFF=use_off,
        INVERSE=bool(inverse), num_warps=4, **_launch_opts(query.device),
    )  # fmt: skip
    return None


def hf_head_dim(q: torch.Tensor, cos: torch.Tensor, unsqueeze_dim: int) -> int:
    """Index of the heads dimension of a 4-D ``q`` (the one cos is unsqueezed at, counted in
    ``q``'s dims after broadcasting), or -1 where it is not one of dims 0..2."""
    wide_dim = cos.dim() + 1
    u = unsqueeze_dim + wide_dim if unsqueeze_dim < 0 else unsqueeze_dim
    d = u + q.dim() - wide_dim
    return d if 0 <= d <= 2 else -1


#: Most rotated pairs (each two fp32 values in registers) per thread a candidate may hold: the
#: heuristic holds 16 (2048 pairs on 4 warps). sm_90 compiles (tools/compile_check.py): every
#: head of a token on 4 warps (32 pairs) takes 128 registers, the q/k split on 2 warps (40
#: pairs) ~110; neither spills.
_MAX_PAIRS_PER_THREAD = 40


def _hf_heuristic(tokens: int, hq: int, hk: int, half: int) -> RopeConfig:
    block_t, block_h, _ = _blocks(tokens, hq + hk, half)
    return RopeConfig(block_t, block_h, 4)


def _hf_candidates(tokens: int, hq: int, hk: int, half: int) -> list[RopeConfig]:
    """The heuristic first; every head of a token in one program of the shared kernel (4 to 16
    warps); the q/k-split kernel with 1 token per program, and 2 at T >= 1024 (2 to 8 warps: its
    key tile is small, 8 heads x 64 pairs, and loses its 16-byte vectors past 2 warps per token
    (sm_90 PTX), so more warps only thin it further); from 4 to :data:`_MAX_PAIRS_PER_THREAD`
    pairs per thread."""
    p2 = triton.next_power_of_2
    block_half = p2(max(half, 1))

    def warps(pairs: int, choices: tuple[int, ...]) -> list[int]:
        return [w for w in choices if 4 * 32 * w <= pairs <= _MAX_PAIRS_PER_THREAD * 32 * w] or [4]

    out = [_hf_heuristic(tokens, hq, hk, half)]
    all_heads = p2(hq + hk)
    out.extend(RopeConfig(1, all_heads, w) for w in warps(all_heads * block_half, (4, 8, 16)))
    split_pairs = (p2(hq) + p2(hk)) * block_half
    for bt in (1, 2) if tokens >= 1024 else (1,):
        out.extend(RopeConfig(bt, 0, w, True) for w in warps(bt * split_pairs, (2, 4, 8)))
    return list(dict.fromkeys(out))


def _run_hf(
    cfg: RopeConfig, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_off: int, tokens: int,
    hq: int, hk: int, n1: int, half: int, strides: tuple[int, ...],
) -> None:  # fmt: skip
    block_half = triton.next_power_of_2(max(half, 1))
    p2 = triton.next_power_of_2
    if cfg.split_qk:
        _hf_rope_qk_kernel[(_k.cdiv(tokens, cfg.block_t),)](
            q, k_off, cos, sin, tokens, hq, hk, n1, half, *strides,
            BLOCK_T=cfg.block_t, BLOCK_HQ=p2(max(hq, 1)), BLOCK_HK=p2(max(hk, 1)), BLOCK_HALF=block_half,
            num_warps=cfg.num_warps, **_launch_opts(q.device),
        )  # fmt: skip
    else:
        grid = (_k.cdiv(tokens, cfg.block_t), _k.cdiv(hq + hk, cfg.block_h))
        _hf_rope_kernel[grid](
            q, k_off, cos, sin, tokens, hq, hk, n1, half, *strides,
            BLOCK_T=cfg.block_t, BLOCK_H=cfg.block_h, BLOCK_HALF=block_half, num_warps=cfg.num_warps,
            **_launch_opts(q.device),
        )  # fmt: skip


def _hf_config(q: torch.Tensor, tokens: int, hq: int, hk: int, half: int) -> RopeConfig:
    key = ("rotary_pos_emb", (hq, hk, q.shape[-1]), q.dtype, _k._bucket(tokens))
    cfg = _k._CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]

    def tune() -> RopeConfig:
        d = q.shape[-1]
        t = _k._bucket_rows(key[3], 2 * (hq + hk) * d)
        dev, dt = q.device, q.dtype
        # HF attention's layout: (1, heads, T, D) views of (1, T, heads * D); constant values
        # (timing does not depend on them; the caller's RNG is untouched)
        qs = torch.full((1, t, hq, d), 0.5, dtype=dt, device=dev).transpose(1, 2)
        ks = torch.full((1, t, hk, d), 0.5, dtype=dt, device=dev).transpose(1, 2)
        cs = torch.full((1, t, d), 0.5, dtype=dt, device=dev)
        k_off = (ks.data_ptr() - qs.data_ptr()) // qs.element_size()
        sq, sk = qs.stride(), ks.stride()
        cs_strides = (cs.stride(0), cs.stride(1))
        strides = (sq[0], sq[2], sq[1], sk[0], sk[2], sk[1], *cs_strides, *cs_strides)

        def make(c: RopeConfig) -> Callable[[], None]:
            return lambda: _run_hf(c, qs, cs, cs, k_off, t, hq, hk, t, d // 2, strides)

        return _k._pick(key, _hf_candidates(t, hq, hk, d // 2), make, dev)

    heuristic = lambda: _hf_heuristic(tokens, hq, hk, half)  # noqa: E731
    return _k._untuned(heuristic, tune, q.device)  # type: ignore[return-value]


def rotary_pos_emb_(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    config: RopeConfig | None = None,
) -> None:
    """Hugging Face's ``apply_rotary_pos_emb`` into ``q`` and ``k`` in place (fp32 maths). q and
    k are 4-D with unit channel stride and the same leading sizes; cos/sin broadcast to them
    (checked by the op and the predicate). ``config`` overrides the tuned launch."""
    if _off_current_device(q):
        with _device_ctx(q):
            return rotary_pos_emb_(q, k, cos, sin, unsqueeze_dim, config)
    hd = hf_head_dim(q, cos, unsqueeze_dim)
    wide_c, wide_s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    lq, lk = hf_layout(q, wide_c, hd), hf_layout(k, wide_c, hd)
    ls = hf_layout(q, wide_s, hd)
    if hd < 0 or lq is None or lk is None or ls is None:
        raise ValueError("rotary_pos_emb_: q/k/cos/sin layout not supported")
    n0, n1, hq, sq0, sq1, sqh, sc0, sc1 = lq
    hk, sk0, sk1, skh = lk[2:6]
    ss0, ss1 = ls[6:8]
    half = q.shape[-1] // 2
    if n0 * n1 == 0 or half == 0:
        return None
    tokens = n0 * n1
    cfg = config or _hf_config(q, tokens, hq, hk, half)
    k_off = (k.data_ptr() - q.data_ptr()) // q.element_size()  # k addressed from q's pointer
    strides = (sq0, sq1, sqh, sk0, sk1, skh, sc0, sc1, ss0, ss1)
    _run_hf(cfg, q, cos, sin, k_off, tokens, hq, hk, n1, half, strides)
    return None


def fused_qk_norm_rope_(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> None:
    """Per-head RMSNorm and RoPE of the q and k heads of ``qkv``, in place (fp32, one rounding).
    ``qkv``'s token dims must collapse to one stride with a unit channel stride (the predicate
    checks :func:`head_layout`)."""
    if _off_current_device(qkv):
        with _device_ctx(qkv):
            return fused_qk_norm_rope_(qkv, num_heads_q, num_heads_k, head_dim, eps, q_weight, k_weight,
                                       cos_sin_cache, is_neox, position_ids)  # fmt: skip
    tokens = position_ids.numel()
    if tokens == 0:
        return None
    layout = head_layout(qkv, tokens, head_dim)
    if layout is None:
        raise ValueError("fused_qk_norm_rope_: qkv has no [tokens, width] strides with unit channel stride")
    heads = num_heads_q + num_heads_k
    block_t, block_h, block_half = _blocks(tokens, heads, head_dim // 2)
    wq = q_weight if q_weight.stride(0) == 1 else q_weight.contiguous()
    wk = k_weight if k_weight.stride(0) == 1 else k_weight.contiguous()
    _qk_norm_rope_kernel[(_k.cdiv(tokens, block_t), _k.cdiv(heads, block_h))](
        qkv, position_ids.reshape(-1), wq, wk, cos_sin_cache, tokens, num_heads_q, num_heads_k, head_dim // 2,
        layout[1], cos_sin_cache.stride(0), cos_sin_cache.stride(1), eps,
        BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_HALF=block_half, NEOX=bool(is_neox), num_warps=4,
        **_launch_opts(qkv.device),
    )  # fmt: skip
    return None
