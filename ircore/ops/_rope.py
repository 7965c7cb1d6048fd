"""Rotary position embedding (RoPE): vLLM's ``rotary_embedding`` ops, Hugging Face's
``apply_rotary_pos_emb`` form (``rotary_pos_emb``) and the fused QK-norm + RoPE of Qwen3-style
attention (``fused_qk_norm_rope``): native semantics, checks, tolerances, inputs.

Positions index rows of a cos/sin cache. A position outside the cache is a caller's error: on
CPU tensors ``check_args`` refuses it (one reduction over the positions); on other devices it is
not checked, since that needs a host sync (see docs/ops.md, "Positions").
"""

from __future__ import annotations

import functools
import math
from typing import Iterator

import torch

from ircore.op import Sample, Tolerance, register_op
from ircore.ops import _checks, _samples
from ircore.ops._norm import rms_norm

_FLOAT = _checks.FLOAT_DTYPES
_I64 = torch.int64
_FORMATS = ("standard", "deepseek")

# Every product and sum rounds to the activation dtype (standard format), and cos/sin are rounded
# to it first: the error is a few ulps of |x|, not of the output (x1*c - x2*s may cancel), hence
# an atol as large as the rtol. The natives use at most 0.6 of it on the samples (10 seeds).
ROPE_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}
# fused_qk_norm_rope rounds twice (the normalised heads, then each RoPE operation), on values up
# to a few units: fp16's ulp there is 2e-3, so its atol is two of them.
FUSED_ROPE_TOLERANCES = {**ROPE_TOLERANCES, torch.float16: Tolerance(atol=4e-3, rtol=2e-3)}


# ---------------------------------------------------------------------- shared pieces
def _heads(x: torch.Tensor, tokens: int, head_size: int) -> int:
    """Heads per token of ``x`` seen as ``[tokens, heads, head_size]``: ``[*, H*D]`` or
    ``[*, H, D]`` where ``*`` holds ``tokens`` elements; 0 when it is neither."""
    shape = x.shape
    last = shape[-1] if shape else 0
    if last and head_size > 0 and not last % head_size and math.prod(shape[:-1]) == tokens:
        return last // head_size
    if len(shape) >= 2 and last == head_size and math.prod(shape[:-2]) == tokens:
        return shape[-2]
    return 0


def _positions_in_range(
    op: str, arg: str, positions: torch.Tensor, rows: int, offsets: torch.Tensor | None = None
) -> None:
    """Every position (plus offset) indexes a cache row: checked for real CPU tensors only.

    A GPU tensor's values would need a host sync on every call, and fake or traced tensors have
    none; those calls are not checked here (docs/ops.md, "Positions").
    """
    if (
        positions.device.type != "cpu"
        or type(positions) is not torch.Tensor
        or not positions.numel()
        or torch.compiler.is_compiling()
    ):
        return
    if offsets is None and positions.dim() == 1 and positions.numel() <= 64:  # decode: cheapest
        values = positions.tolist()
        if min(values) >= 0 and max(values) < rows:
            return
    pos = positions.reshape(-1)
    if offsets is not None:
        pos = pos + offsets.reshape(-1)
    low, high = torch.aminmax(pos)
    if low.item() >= 0 and high.item() < rows:  # (comparing 0-d tensors costs more)
        return
    bad = int(((pos < 0) | (pos >= rows)).nonzero()[0, 0])
    what = f"positions + offsets is {int(pos[bad])} at flat index {bad}" if offsets is not None else None
    _checks.bad_argument(
        op,
        arg,
        (f"holds {int(pos[bad])} at flat index {bad}" if what is None else f"is such that {what}")
        + f"; every position must index a row of cos_sin_cache, in [0, {rows}): build the cache "
        "with more rows (max_position_embeddings) or pass positions within it",
    )


def _check_index_tensor(op: str, arg: str, t: torch.Tensor, tokens: int, device: torch.device) -> None:
    if t.dtype is not _I64:
        _checks.bad_argument(op, arg, f"has dtype {t.dtype}; expected torch.int64 (convert with .long())")
    if t.numel() != tokens:
        _checks.bad_argument(
            op, arg, f"has {t.numel()} elements (shape {tuple(t.shape)}); expected {tokens}, one per token"
        )
    if t.device != device:
        _checks.bad_argument(op, arg, f"is on {t.device} but the activations are on {device}")


def _check_activation(
    op: str, arg: str, x: torch.Tensor, tokens: int, head_size: int, like: torch.Tensor
) -> None:
    if x is not like:
        if x.dtype != like.dtype:
            _checks.bad_argument(op, arg, f"has dtype {x.dtype}; expected query's dtype, {like.dtype}")
        if x.device != like.device:
            _checks.bad_argument(op, arg, f"is on {x.device} but query is on {like.device}")
    _checks.check_float(op, arg, x)
    if not _heads(x, tokens, head_size):
        _checks.bad_argument(
            op,
            arg,
            f"has shape {tuple(x.shape)}; expected [*, heads * head_size] or [*, heads, head_size] with "
            f"head_size {head_size}, at least one head, and * holding the {tokens} tokens of positions",
        )


def _check_rope_args(
    op: str,
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    offsets: torch.Tensor | None,
    cos_sin_format: str,
    rope_dim_offset: int,
) -> None:
    """The careful checks of both rotary_embedding ops, in the order a reader fixes them."""
    if cos_sin_format not in _FORMATS:
        _checks.bad_argument(op, "cos_sin_format", f"is {cos_sin_format!r}; expected one of {list(_FORMATS)}")
    if head_size <= 0:
        _checks.bad_argument(op, "head_size", f"is {head_size}; expected a positive int")
    if rotary_dim <= 0 or rotary_dim % 2:
        _checks.bad_argument(
            op, "rotary_dim", f"is {rotary_dim}; expected a positive even int (channels rotate in pairs)"
        )
    if rope_dim_offset < 0 or rope_dim_offset + rotary_dim > head_size:
        _checks.bad_argument(
            op,
            "rope_dim_offset",
            f"is {rope_dim_offset} with rotary_dim {rotary_dim}; expected rope_dim_offset >= 0 and "
            f"rope_dim_offset + rotary_dim <= head_size ({head_size})",
        )
    tokens = positions.numel()
    _check_activation(op, "query", query, tokens, head_size, query)
    _check_index_tensor(op, "positions", positions, tokens, query.device)
    if key is not None:
        _check_activation(op, "key", key, tokens, head_size, query)
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != rotary_dim:
        _checks.bad_argument(
            op,
            "cos_sin_cache",
            f"has shape {tuple(cos_sin_cache.shape)}; expected [max_position, rotary_dim] = "
            f"[*, {rotary_dim}] (cos in the first rotary_dim / 2 columns, sin in the rest)",
        )
    _checks.check_float(op, "cos_sin_cache", cos_sin_cache)
    if cos_sin_cache.device != query.device:
        _checks.bad_argument(
            op, "cos_sin_cache", f"is on {cos_sin_cache.device} but query is on {query.device}"
        )
    if offsets is not None:
        if cos_sin_format != "deepseek":
            _checks.bad_argument(
                op,
                "offsets",
                "is given with cos_sin_format='standard', which does not read it; pass "
                "cos_sin_format='deepseek' (rows are then cache[positions + offsets]), or add the "
                "offsets to positions",
            )
        _check_index_tensor(op, "offsets", offsets, tokens, query.device)
    _positions_in_range(op, "positions", positions, cos_sin_cache.shape[0], offsets)


def _fast_rope_ok(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    offsets: torch.Tensor | None,
    cos_sin_format: str,
    rope_dim_offset: int,
) -> bool:
    """The common valid call in one expression (this runs on every eager call)."""
    try:
        return bool(
            positions.dtype is _I64
            and query.dtype in _FLOAT
            and (key is None or (key.dtype is query.dtype and key.device == query.device))
            and (
                offsets is None
                if cos_sin_format == "standard"
                else cos_sin_format == "deepseek"
                and (offsets is None or (offsets.dtype is _I64 and offsets.numel() == positions.numel()))
            )
            and 0 < rotary_dim
            and not rotary_dim % 2
            and 0 <= rope_dim_offset
            and rope_dim_offset + rotary_dim <= head_size
            and cos_sin_cache.dim() == 2
            and cos_sin_cache.shape[1] == rotary_dim
            and cos_sin_cache.dtype in _FLOAT
            and positions.device == query.device
            and cos_sin_cache.device == query.device
            and (offsets is None or offsets.device == query.device)
            and _heads(query, (tokens := positions.numel()), head_size)
            and (key is None or _heads(key, tokens, head_size))
        )
    except (AttributeError, IndexError, TypeError):
        return False


def _cos_sin(
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    offsets: torch.Tensor | None,
    cos_sin_format: str,
    is_neox_style: bool,
    inverse: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin per token, ``[T, 1, n]`` in the cache's dtype: ``n = rotary_dim / 2`` for the
    standard format; widened to ``rotary_dim`` for deepseek (both halves for neox, each value
    twice for gptj); sin negated for ``inverse``."""
    pos = positions.reshape(-1)
    if cos_sin_format == "deepseek" and offsets is not None:
        pos = pos + offsets.reshape(-1)
    cos, sin = cos_sin_cache.index_select(0, pos).chunk(2, dim=-1)
    if inverse:
        sin = -sin
    if cos_sin_format == "deepseek":
        if is_neox_style:
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        else:
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    return cos.unsqueeze(-2), sin.unsqueeze(-2)


def _rotate(
    x: torch.Tensor,
    tokens: int,
    head_size: int,
    rotary_dim: int,
    cos: torch.Tensor,
    sin: torch.Tensor,
    is_neox_style: bool,
    cos_sin_format: str,
    rope_dim_offset: int,
) -> torch.Tensor:
    """One activation rotated: channels ``[rope_dim_offset, + rotary_dim)`` of each head; the
    others pass through. Standard: cos/sin cast to x's dtype, every operation in it. Deepseek:
    ``x*cos + rotate(x)*sin`` with torch's type promotion, one cast to x's dtype at the end."""
    x3 = x.reshape(tokens, _heads(x, tokens, head_size), head_size)
    end = rope_dim_offset + rotary_dim
    part = x3[..., rope_dim_offset:end]
    half = rotary_dim // 2
    if is_neox_style:
        x1, x2 = part[..., :half], part[..., half:]
    else:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    if cos_sin_format == "standard":
        c, s = cos.to(x.dtype), sin.to(x.dtype)
        o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
        rotated = torch.cat((o1, o2), dim=-1) if is_neox_style else torch.stack((o1, o2), dim=-1).flatten(-2)
    else:
        turned = torch.cat((-x2, x1), dim=-1) if is_neox_style else torch.stack((-x2, x1), dim=-1).flatten(-2)
        rotated = (part * cos + turned * sin).to(x.dtype)
    return torch.cat((x3[..., :rope_dim_offset], rotated, x3[..., end:]), dim=-1).reshape(x.shape)


def _rope_reference_one(
    x: torch.Tensor,
    positions: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> torch.Tensor:
    """RoPE in fp64, written independently of native: each rotated channel pair ``(a, b)`` as
    the complex number ``a + ib`` times ``cos + i sin`` (the cache's values, unrounded)."""
    pos = positions.reshape(-1)
    if cos_sin_format == "deepseek" and offsets is not None:
        pos = pos + offsets.reshape(-1)
    tokens, half = pos.numel(), rotary_dim // 2
    rows = cos_sin_cache.double()[pos]
    turn = torch.complex(rows[:, :half], -rows[:, half:] if inverse else rows[:, half:])[:, None, :]
    out = x.double().reshape(tokens, _heads(x, tokens, head_size), head_size).clone()
    part = out[..., rope_dim_offset : rope_dim_offset + rotary_dim]
    first = torch.arange(half) if is_neox_style else torch.arange(0, rotary_dim, 2)
    second = first + half if is_neox_style else first + 1
    z = torch.complex(part[..., first], part[..., second]) * turn
    part[..., first], part[..., second] = z.real, z.imag
    return out.reshape(x.shape)


def _rope_cache(
    rows: int, rotary_dim: int, device: str, base: float = 10000.0, scale: float = 1.0
) -> torch.Tensor:
    """A cos/sin cache in fp32 as vLLM builds it: ``[cos(t * f) | sin(t * f)]`` per position t,
    ``f = base ** (-2i / rotary_dim)``; ``scale`` multiplies both (a YaRN mscale). A new tensor
    each call, made once per arguments (torch's cos/sin of large angles are slow on some CPUs)."""
    return _rope_cache_once(rows, rotary_dim, str(device), base, scale).clone()


@functools.lru_cache(maxsize=32)
def _rope_cache_once(rows: int, rotary_dim: int, device: str, base: float, scale: float) -> torch.Tensor:
    inv_freq = base ** -(torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=device) / rotary_dim)
    freqs = torch.outer(torch.arange(rows, dtype=torch.float32, device=device), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1) * scale


def _positions(shape: tuple[int, ...], rows: int, device: str, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(0, rows, shape, generator=gen, device=device, dtype=_I64)


# ---------------------------------------------------------------------- rotary_embedding
def _check_rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> None:
    rope = (head_size, rotary_dim, cos_sin_cache, offsets, cos_sin_format, rope_dim_offset)
    if _fast_rope_ok(positions, query, key, *rope):
        _positions_in_range("rotary_embedding", "positions", positions, cos_sin_cache.shape[0], offsets)
        return
    op = "rotary_embedding"
    _checks.check_types(op, positions, query, key, head_size, rotary_dim, cos_sin_cache, is_neox_style,
                        offsets, cos_sin_format, inverse, rope_dim_offset)  # fmt: skip
    _check_rope_args(op, positions, query, key, *rope)


def _rotary_embedding_reference(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    rest = (
        head_size,
        rotary_dim,
        cos_sin_cache,
        is_neox_style,
        offsets,
        cos_sin_format,
        inverse,
        rope_dim_offset,
    )
    return _rope_reference_one(query, positions, *rest), _rope_reference_one(key, positions, *rest)


def _rotary_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    """(positions, query, key, head_size, rotary_dim, cache, is_neox_style, offsets, format,
    inverse, rope_dim_offset) for every layout and mode the op has."""
    gen = _samples.generator(seed + 7, device)
    rows = 257  # a prime number of rows: no sample's positions land on a power of two by design

    def qk(shape_q: tuple[int, ...], shape_k: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        return _samples.randn(shape_q, dtype, device, gen), _samples.randn(shape_k, dtype, device, gen)

    def cache(rd: int, cache_dtype: torch.dtype = dtype, scale: float = 1.0) -> torch.Tensor:
        return _rope_cache(rows, rd, device, scale=scale).to(cache_dtype)

    pos = _positions((5,), rows, device, gen)
    q, k = qk((5, 4 * 64), (5, 2 * 64))
    yield Sample(
        (pos, q, k, 64, 64, cache(64), True, None, "standard", False, 0),
        "[T,H*D] 5x4x64 neox, 2 key heads (GQA)",
    )
    yield Sample(
        (pos, q, k, 64, 64, cache(64), False, None, "standard", False, 0),
        "[T,H*D] 5x4x64 gptj, 2 key heads (GQA)",
    )
    q, k = qk((3, 2, 128), (3, 1, 128))
    yield Sample(
        (pos[:3], q, k, 128, 128, cache(128), False, None, "standard", False, 0), "[T,H,D] 3x2x128 gptj"
    )
    pos2 = _positions((2, 3), rows, device, gen)
    q, k = qk((2, 3, 2 * 64), (2, 3, 64))
    yield Sample(
        (pos2, q, k, 64, 64, cache(64), True, None, "standard", False, 0),
        "[B,S,H*D] 2x3x2x64 neox, positions [B,S]",
    )
    q, k = qk((4, 2 * 64), (4, 64))
    yield Sample(
        (pos[:4], q, k, 64, 32, cache(32), True, None, "standard", False, 0),
        "rotary_dim 32 of 64 neox (pass-through tail)",
    )
    yield Sample(
        (pos[:4], q, k, 64, 32, cache(32), False, None, "standard", False, 16),
        "rotary_dim 32 of 64 gptj rope_dim_offset 16",
    )
    yield Sample((pos[:4], q, k, 64, 64, cache(64), True, None, "standard", True, 0), "inverse neox")
    yield Sample(
        (pos[:4], q, k, 64, 32, cache(32), False, None, "standard", True, 32),
        "inverse gptj rotary_dim 32 rope_dim_offset 32",
    )
    yield Sample(
        (pos[:4], q, k, 64, 64, cache(64, torch.float32), True, None, "standard", False, 0),
        "fp32 cache, neox",
    )
    yield Sample(
        (pos[:4], q, k, 64, 64, cache(64, torch.float32), False, None, "standard", False, 0),
        "fp32 cache, gptj",
    )
    offsets = _positions((4,), 64, device, gen)
    dpos = _positions((4,), rows - 64, device, gen)
    ds = cache(64, torch.float32, scale=1.2)
    yield Sample(
        (dpos, q, k, 64, 64, ds, True, offsets, "deepseek", False, 0),
        "deepseek neox with offsets, fp32 cache",
    )
    ds32 = cache(32, torch.float32, scale=1.2)
    yield Sample(
        (dpos, q, k, 64, 32, ds32, False, offsets, "deepseek", False, 32),
        "deepseek gptj with offsets, rotary_dim 32 rope_dim_offset 32",
    )
    yield Sample(
        (dpos, q, k, 64, 32, cache(32), False, None, "deepseek", True, 0),
        "deepseek gptj inverse, no offsets, cache in activation dtype",
    )
    qkv = _samples.randn((6, (4 + 2 * 2) * 64), dtype, device, gen)
    qv, kv = qkv[:, : 4 * 64], qkv[:, 4 * 64 : 6 * 64]
    pos6 = _positions((6,), rows, device, gen)
    yield Sample(
        (pos6, qv, kv, 64, 64, cache(64), True, None, "standard", False, 0),
        "q, k views of one qkv buffer (row stride 512, non-contiguous)",
    )
    q, k = qk((0, 2 * 64), (0, 64))
    empty = torch.empty(0, dtype=_I64, device=device)
    yield Sample((empty, q, k, 64, 64, cache(64), True, None, "standard", False, 0), "T=0 rows")


def _make_rotary_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    """``shape`` is query's, ``[*, heads * head_size]``: head_size 128 where it divides the last
    dimension (else one head), a quarter as many key heads (GQA, at least one), full rotary, neox,
    a cache of 4096 rows in the activation dtype (vLLM's default), positions within it."""
    gen = _samples.generator(seed, device)
    width = shape[-1]
    head_size = 128 if width % 128 == 0 else width
    heads_k = max(1, width // head_size // 4)
    rows = 4096
    query = _samples.randn(shape, dtype, device, gen)
    key = _samples.randn((*shape[:-1], heads_k * head_size), dtype, device, gen)
    positions = _positions(tuple(shape[:-1]), rows, device, gen)
    cache = _rope_cache(rows, head_size, device).to(dtype)
    return (positions, query, key, head_size, head_size, cache, True, None, "standard", False, 0)


@register_op(
    inplace_args=("query", "key"),
    check_args=_check_rotary_embedding,
    tolerances=ROPE_TOLERANCES,
    sample_inputs=_rotary_samples,
    make_inputs=_make_rotary_inputs,
    reference=_rotary_embedding_reference,
    batch_invariant=True,  # elementwise per token: a token reads its own position's cos/sin only
)
def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate query and key by their tokens' positions (vLLM IR's ``rotary_embedding``).

    ``positions`` (int64, any shape) holds one position per token, T in all; query and key are
    ``[*, H*head_size]`` or ``[*, H, head_size]`` with ``*`` holding the T tokens (key may have
    fewer heads). In each head, the ``rotary_dim`` channels from ``rope_dim_offset`` rotate in
    pairs (neox: the two halves; gptj: even and odd channels); the others pass through.
    ``cos_sin_cache`` is ``[max_position, rotary_dim]``: cos in the first half of a row, sin in
    the second; ``inverse`` negates sin (the inverse rotation).

    Rounding: the standard format casts cos/sin to the activations' dtype and computes
    ``x1*cos - x2*sin``, ``x2*cos + x1*sin`` in it, rounding after each operation (Hugging
    Face's ``apply_rotary_pos_emb`` does the same, bit for bit, with a cache in that dtype). The
    deepseek format reads rows ``positions + offsets`` (``offsets`` is refused in the standard
    format), computes ``x*cos + rotate(x)*sin`` with torch's type promotion (fp32 for an fp32
    cache) and rounds once to the activations' dtype. Returns new ``(query, key)`` of the inputs'
    shapes and dtype; an in-place implementation writes them into ``query`` and ``key``.
    """
    tokens = positions.numel()
    cos, sin = _cos_sin(positions, cos_sin_cache, offsets, cos_sin_format, is_neox_style, inverse)
    rest = (head_size, rotary_dim, cos, sin, is_neox_style, cos_sin_format, rope_dim_offset)
    return _rotate(query, tokens, *rest), _rotate(key, tokens, *rest)


# ---------------------------------------------------------------------- rotary_embedding_query_only
def _check_query_only(
    positions: torch.Tensor,
    query: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None,
    cos_sin_format: str,
    inverse: bool,
    rope_dim_offset: int,
) -> None:
    op = "rotary_embedding_query_only"
    rope = (head_size, rotary_dim, cos_sin_cache, offsets, cos_sin_format, rope_dim_offset)
    if _fast_rope_ok(positions, query, None, *rope):
        _positions_in_range(op, "positions", positions, cos_sin_cache.shape[0], offsets)
        return
    _checks.check_types(op, positions, query, head_size, rotary_dim, cos_sin_cache, is_neox_style, offsets,
                        cos_sin_format, inverse, rope_dim_offset)  # fmt: skip
    _check_rope_args(op, positions, query, None, *rope)


def _query_only_reference(
    positions: torch.Tensor,
    query: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> torch.Tensor:
    rest = (
        head_size,
        rotary_dim,
        cos_sin_cache,
        is_neox_style,
        offsets,
        cos_sin_format,
        inverse,
        rope_dim_offset,
    )
    return _rope_reference_one(query, positions, *rest)


def _without_key(args: tuple) -> tuple:
    return (args[0], args[1], *args[3:])


def _query_only_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    for sample in _rotary_samples(dtype, device, seed):
        yield Sample(_without_key(sample.args), sample.label.replace(", 2 key heads (GQA)", ""))


def _make_query_only_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    return _without_key(_make_rotary_inputs(shape, dtype, device, seed))


@register_op(
    inplace_args=("query",),
    check_args=_check_query_only,
    tolerances=ROPE_TOLERANCES,
    sample_inputs=_query_only_samples,
    make_inputs=_make_query_only_inputs,
    reference=_query_only_reference,
    batch_invariant=True,  # elementwise per token: a token reads its own position's cos/sin only
)
def rotary_embedding_query_only(
    positions: torch.Tensor,
    query: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    offsets: torch.Tensor | None = None,
    cos_sin_format: str = "standard",
    inverse: bool = False,
    rope_dim_offset: int = 0,
) -> torch.Tensor:
    """:func:`rotary_embedding` of query alone (no key): bit for bit its query output."""
    cos, sin = _cos_sin(positions, cos_sin_cache, offsets, cos_sin_format, is_neox_style, inverse)
    rest = (head_size, rotary_dim, cos, sin, is_neox_style, cos_sin_format, rope_dim_offset)
    return _rotate(query, positions.numel(), *rest)


# ---------------------------------------------------------------------- rotary_pos_emb (Hugging Face)
def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    """``shape`` broadcasts to ``target`` without changing it."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _check_rotary_pos_emb(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int
) -> None:
    try:  # the common valid call (HF's (B, H, S, D) q/k, (B, S, D) cos/sin) in one expression
        if (
            unsqueeze_dim == 1
            and q.dtype in _FLOAT
            and k.dtype is q.dtype
            and cos.dtype is q.dtype
            and sin.dtype is q.dtype
            and q.dim() == 4
            and k.dim() == 4
            and cos.dim() == 3
            and sin.shape == cos.shape
            and (d := q.shape[-1])
            and not d % 2
            and k.shape[-1] == d
            and cos.shape[2] == d
            and q.shape[2] == k.shape[2] == cos.shape[1]
            and q.shape[0] == k.shape[0]
            and cos.shape[0] in (1, q.shape[0])
            and k.device == q.device
            and cos.device == q.device
            and sin.device == q.device
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    op = "rotary_pos_emb"
    _checks.check_types(op, q, k, cos, sin, unsqueeze_dim)
    _checks.check_float(op, "q", q)
    for name, t in (("k", k), ("cos", cos), ("sin", sin)):
        if t.dtype != q.dtype:
            hint = " (HF's rotary embedding modules return cos/sin in the activations' dtype: .to(q.dtype))"
            _checks.bad_argument(
                op,
                name,
                f"has dtype {t.dtype}; expected q's dtype, {q.dtype}" + (hint if name != "k" else ""),
            )
        if t.device != q.device:
            _checks.bad_argument(op, name, f"is on {t.device} but q is on {q.device}")
    if q.dim() == 0 or not q.shape[-1] or q.shape[-1] % 2:
        _checks.bad_argument(
            op, "q", f"has shape {tuple(q.shape)}; expected a non-empty, even last dimension (head_dim)"
        )
    if sin.shape != cos.shape:
        _checks.bad_argument(
            op, "sin", f"has shape {tuple(sin.shape)}; expected cos's shape, {tuple(cos.shape)}"
        )
    if not -cos.dim() - 1 <= unsqueeze_dim <= cos.dim():
        _checks.bad_argument(
            op,
            "unsqueeze_dim",
            f"is {unsqueeze_dim}; expected a dimension of cos.unsqueeze, in [{-cos.dim() - 1}, {cos.dim()}]",
        )
    wide = cos.unsqueeze(unsqueeze_dim).shape
    for name, t in (("q", q), ("k", k)):
        if t.shape[-1] != cos.shape[-1] or not _broadcasts_to(wide, t.shape):
            _checks.bad_argument(
                op,
                "cos",
                f"has shape {tuple(cos.shape)} (unsqueezed at {unsqueeze_dim}: {tuple(wide)}), which "
                f"does not broadcast to {name}'s shape {tuple(t.shape)}; expected cos/sin (B, S, head_dim) "
                "with q/k (B, heads, S, head_dim) and unsqueeze_dim=1, or q/k (B, S, heads, head_dim) "
                "and unsqueeze_dim=2",
            )


def _rotary_pos_emb_reference(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """In fp64, as complex pairs ``(x[i], x[i + D/2])`` times ``cos[i] + i sin[i]``, with the
    second half's own cos/sin for the second output (equal for HF's duplicated halves)."""
    c, s = cos.double().unsqueeze(unsqueeze_dim), sin.double().unsqueeze(unsqueeze_dim)
    half = q.shape[-1] // 2

    def one(x: torch.Tensor) -> torch.Tensor:
        xd = x.double()
        a, b = xd[..., :half], xd[..., half:]
        lo = torch.complex(a, b) * torch.complex(c[..., :half], s[..., :half])
        hi = torch.complex(a, b) * torch.complex(c[..., half:], s[..., half:])
        return torch.cat((lo.real, hi.imag), dim=-1)

    return one(q), one(k)


def _hf_cos_sin(
    position_ids: torch.Tensor, head_dim: int, dtype: torch.dtype, scaling: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``(B, S, head_dim)`` as ``LlamaRotaryEmbedding.forward`` makes them: fp32
    ``positions * inv_freq``, both halves the same, times the attention scaling, cast to dtype."""
    device = position_ids.device
    inv_freq = 10000.0 ** -(torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim)
    freqs = position_ids.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


def _hf_qk(
    batch: int, seq: int, heads: int, head_dim: int, dtype: torch.dtype, device: str, gen: torch.Generator
) -> torch.Tensor:
    """q or k as HF attention makes them: ``proj(x).view(B, S, H, D).transpose(1, 2)``, strides
    ``(S*H*D, D, H*D, 1)``: not contiguous."""
    flat = _samples.randn((batch, seq, heads * head_dim), dtype, device, gen)
    return flat.view(batch, seq, heads, head_dim).transpose(1, 2)


def _rotary_pos_emb_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 8, device)
    for batch, seq, hq, hk, d in ((2, 5, 4, 2, 64), (1, 3, 2, 1, 128), (2, 0, 2, 1, 64)):
        q, k = _hf_qk(batch, seq, hq, d, dtype, device, gen), _hf_qk(batch, seq, hk, d, dtype, device, gen)
        ids = torch.arange(seq, device=device)[None, :] + torch.arange(batch, device=device)[:, None] * 7
        cos, sin = _hf_cos_sin(ids, d, dtype)
        yield Sample((q, k, cos, sin, 1), f"HF-strided (B,H,S,D) {batch}x{hq}x{seq}x{d}, {hk} key heads")
    q = _samples.randn((2, 4, 6, 64), dtype, device, gen)
    k = _samples.randn((2, 2, 6, 64), dtype, device, gen)
    cos, sin = _hf_cos_sin(torch.arange(6, device=device)[None, :] + 100, 64, dtype, scaling=0.9)
    yield Sample(
        (q, k, cos, sin, 1), "contiguous (B,H,S,D) 2x4x6x64, cos/sin batch 1 (broadcast), scaling 0.9"
    )
    q = _samples.randn((2, 6, 4, 32), dtype, device, gen)
    k = _samples.randn((2, 6, 1, 32), dtype, device, gen)
    cos, sin = _hf_cos_sin(torch.arange(12, device=device).view(2, 6), 32, dtype)
    yield Sample((q, k, cos, sin, 2), "(B,S,H,D) 2x6x4x32 unsqueeze_dim=2")


def _make_rotary_pos_emb_inputs(
    shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0
) -> tuple:
    """``shape`` is ``(B, S, heads * head_dim)`` (the q projection's output), or ``(T, heads *
    head_dim)`` for T sequences of one token each (decode): HF-strided q/k, head_dim 128 where it
    divides the width (else one head), a quarter as many key heads (at least one), cos/sin of
    positions S-1 steps on per sequence, in dtype."""
    gen = _samples.generator(seed, device)
    width = shape[-1]
    batch, seq = (shape[0], 1) if len(shape) == 2 else (math.prod(shape[:-2]), shape[-2])
    d = 128 if width % 128 == 0 else width
    heads = width // d
    q, k = (
        _hf_qk(batch, seq, heads, d, dtype, device, gen),
        _hf_qk(batch, seq, max(1, heads // 4), d, dtype, device, gen),
    )
    ids = torch.arange(seq, device=device)[None, :] + torch.arange(batch, device=device)[:, None] * 3
    cos, sin = _hf_cos_sin(ids, d, dtype)
    return (q, k, cos, sin, 1)


@register_op(
    inplace_args=("q", "k"),
    check_args=_check_rotary_pos_emb,
    tolerances=ROPE_TOLERANCES,
    sample_inputs=_rotary_pos_emb_samples,
    make_inputs=_make_rotary_pos_emb_inputs,
    reference=_rotary_pos_emb_reference,
    batch_invariant=True,  # elementwise: each element reads its own position's cos/sin only
    # not cache_by_signature: the check compares q's, k's and cos's sizes (batch, sequence), which
    # a call signature does not hold (only each tensor's dims and last size)
)
def rotary_pos_emb(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hugging Face's ``apply_rotary_pos_emb``, bit for bit: ``q*cos + rotate_half(q)*sin`` and
    the same for k, with ``cos``/``sin`` unsqueezed at ``unsqueeze_dim``, in the activations'
    dtype (cos and sin must have q's dtype, as HF's rotary modules return them).

    q, k are ``(B, H, S, D)`` (views of ``(B, S, H, D)`` as HF makes them: any strides) with
    cos/sin ``(B or 1, S, D)`` and ``unsqueeze_dim=1``, or ``(B, S, H, D)`` with 2. Neox-style
    pairs ``(i, i + D/2)``. HF's cos/sin have equal halves; implementations may assume so and
    read only the first half. Returns new tensors; an in-place implementation writes q and k.
    """
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


# ---------------------------------------------------------------------- fused_qk_norm_rope
def _check_fused_qk_norm_rope(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> None:
    op = "fused_qk_norm_rope"
    try:  # the common valid call in one expression (this runs on every eager call)
        if (
            eps.__class__ is float
            and eps >= 0.0
            and qkv.dtype in _FLOAT
            and num_heads_q > 0
            and num_heads_k > 0
            and num_heads_v >= 0
            and head_dim > 0
            and not head_dim % 2
            and qkv.shape[-1] == (num_heads_q + num_heads_k + num_heads_v) * head_dim
            and q_weight.dim() == 1
            and q_weight.shape[0] == head_dim
            and q_weight.dtype in _FLOAT
            and k_weight.dim() == 1
            and k_weight.shape[0] == head_dim
            and k_weight.dtype in _FLOAT
            and cos_sin_cache.dim() == 2
            and cos_sin_cache.shape[1] == head_dim
            and cos_sin_cache.dtype in _FLOAT
            and position_ids.dtype is _I64
            and position_ids.numel() == math.prod(qkv.shape[:-1])
            and q_weight.device == qkv.device
            and k_weight.device == qkv.device
            and cos_sin_cache.device == qkv.device
            and position_ids.device == qkv.device
        ):
            _positions_in_range(op, "position_ids", position_ids, cos_sin_cache.shape[0])
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _checks.check_types(op, qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight,
                        cos_sin_cache, is_neox, position_ids)  # fmt: skip
    _checks.check_float(op, "qkv", qkv)
    for name, n, low in (
        ("num_heads_q", num_heads_q, 1),
        ("num_heads_k", num_heads_k, 1),
        ("num_heads_v", num_heads_v, 0),
    ):
        if n < low:
            _checks.bad_argument(op, name, f"is {n}; expected an int >= {low}")
    if head_dim <= 0 or head_dim % 2:
        _checks.bad_argument(
            op, "head_dim", f"is {head_dim}; expected a positive even int (channels rotate in pairs)"
        )
    width = (num_heads_q + num_heads_k + num_heads_v) * head_dim
    if qkv.dim() == 0 or qkv.shape[-1] != width:
        _checks.bad_argument(
            op,
            "qkv",
            f"has shape {tuple(qkv.shape)}; expected [*, (num_heads_q + num_heads_k + num_heads_v) * "
            f"head_dim] = [*, ({num_heads_q} + {num_heads_k} + {num_heads_v}) * {head_dim}] = [*, {width}]",
        )
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if w.dim() != 1 or w.shape[0] != head_dim:
            _checks.bad_argument(
                op,
                name,
                f"has shape {tuple(w.shape)}; expected ({head_dim},), one weight per channel of a head",
            )
        _checks.check_float(op, name, w)
        if w.device != qkv.device:
            _checks.bad_argument(op, name, f"is on {w.device} but qkv is on {qkv.device}")
    if not eps >= 0:
        _checks.bad_argument(op, "eps", f"is {eps!r}; expected a number >= 0 (not NaN), e.g. 1e-6")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != head_dim:
        _checks.bad_argument(
            op,
            "cos_sin_cache",
            f"has shape {tuple(cos_sin_cache.shape)}; expected [max_position, head_dim] = [*, {head_dim}] "
            "(every channel of a head rotates; cos in the first half of a row, sin in the second)",
        )
    _checks.check_float(op, "cos_sin_cache", cos_sin_cache)
    if cos_sin_cache.device != qkv.device:
        _checks.bad_argument(op, "cos_sin_cache", f"is on {cos_sin_cache.device} but qkv is on {qkv.device}")
    _check_index_tensor(op, "position_ids", position_ids, math.prod(qkv.shape[:-1]), qkv.device)
    _positions_in_range(op, "position_ids", position_ids, cos_sin_cache.shape[0])


def _split_heads(qkv: torch.Tensor, hq: int, hk: int, hv: int, d: int) -> tuple[torch.Tensor, ...]:
    q, k, v = qkv.split([hq * d, hk * d, hv * d], dim=-1)
    return q, k, v


def _fused_qk_norm_rope_reference(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> torch.Tensor:
    """In fp64, unrounded: per-head RMSNorm then RoPE (the fp64 rotary reference)."""
    q, k, v = _split_heads(qkv.double(), num_heads_q, num_heads_k, num_heads_v, head_dim)

    def norm(x: torch.Tensor, w: torch.Tensor, heads: int) -> torch.Tensor:
        xh = x.reshape(*x.shape[:-1], heads, head_dim)
        out = xh * torch.rsqrt(xh.pow(2).mean(-1, keepdim=True) + eps) * w.double()
        return out.reshape(x.shape)

    rope = (head_dim, head_dim, cos_sin_cache, is_neox, None, "standard", False, 0)
    q = _rope_reference_one(norm(q, q_weight, num_heads_q), position_ids, *rope)
    k = _rope_reference_one(norm(k, k_weight, num_heads_k), position_ids, *rope)
    return torch.cat((q, k, v), dim=-1)


def _fused_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 9, device)
    rows = 257
    for tokens, (hq, hk, hv), d, neox, cache_dtype in (
        ((5,), (4, 2, 2), 64, True, dtype),
        ((3,), (2, 1, 1), 128, False, dtype),
        ((2, 3), (2, 1, 1), 64, True, dtype),
        ((4,), (4, 1, 1), 64, False, torch.float32),
        ((0,), (2, 1, 1), 64, True, dtype),
    ):
        qkv = _samples.randn((*tokens, (hq + hk + hv) * d), dtype, device, gen, scale=2.0)
        wq = _samples.randn((d,), dtype, device, gen, scale=0.1, shift=1.0)
        wk = _samples.randn((d,), dtype, device, gen, scale=0.1, shift=1.0)
        cache = _rope_cache(rows, d, device).to(cache_dtype)
        pos = _positions(tokens, rows, device, gen)
        label = f"qkv {'x'.join(map(str, tokens))}x({hq}+{hk}+{hv})x{d} {'neox' if neox else 'gptj'}"
        label += ", fp32 cache" if cache_dtype != dtype else ""
        yield Sample((qkv, hq, hk, hv, d, 1e-6, wq, wk, cache, neox, pos), label)


def _make_fused_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    """``shape`` is ``[*, num_heads_q * head_dim]`` (the q part): head_dim 128 where it divides
    the width (else one head), a quarter as many k and v heads (at least one each)."""
    gen = _samples.generator(seed, device)
    width = shape[-1]
    d = 128 if width % 128 == 0 else width
    hq = width // d
    hkv = max(1, hq // 4)
    rows = 4096
    qkv = _samples.randn((*shape[:-1], (hq + 2 * hkv) * d), dtype, device, gen, scale=2.0)
    wq = _samples.randn((d,), dtype, device, gen, scale=0.1, shift=1.0)
    wk = _samples.randn((d,), dtype, device, gen, scale=0.1, shift=1.0)
    cache = _rope_cache(rows, d, device).to(dtype)
    return (qkv, hq, hkv, hkv, d, 1e-6, wq, wk, cache, True, _positions(tuple(shape[:-1]), rows, device, gen))


@register_op(
    inplace_args=("qkv",),
    check_args=_check_fused_qk_norm_rope,
    tolerances=FUSED_ROPE_TOLERANCES,
    sample_inputs=_fused_samples,
    make_inputs=_make_fused_inputs,
    reference=_fused_qk_norm_rope_reference,
)
def fused_qk_norm_rope(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> torch.Tensor:
    """Per-head RMSNorm of the q and k heads of a packed ``qkv``, then RoPE on them (Qwen3-style
    attention; vLLM's ``_C.fused_qk_norm_rope`` without ``forced_token_heads_per_warp``).

    ``qkv`` is ``[*, (num_heads_q + num_heads_k + num_heads_v) * head_dim]``, one position per
    token in ``position_ids`` (int64). Exactly the unfused chain, bit for bit: split qkv; each
    q head ``rms_norm(q_head, q_weight, eps)`` (fp32, rounded once to qkv's dtype), each k head
    likewise with ``k_weight``; then ``rotary_embedding(position_ids, q, k, head_dim, head_dim,
    cos_sin_cache, is_neox)`` (standard format: cos/sin cast to qkv's dtype, every operation in
    it). v passes through. Returns a new qkv; an in-place implementation writes it into ``qkv``.
    """
    q, k, v = _split_heads(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim)
    lead = qkv.shape[:-1]
    qn = rms_norm.native(q.reshape(*lead, num_heads_q, head_dim), q_weight, eps).reshape(q.shape)
    kn = rms_norm.native(k.reshape(*lead, num_heads_k, head_dim), k_weight, eps).reshape(k.shape)
    qr, kr = rotary_embedding.native(position_ids, qn, kn, head_dim, head_dim, cos_sin_cache, is_neox)
    return torch.cat((qr, kr, v), dim=-1)
