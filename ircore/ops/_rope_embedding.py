"""vLLM's RoPE ops, ``rotary_embedding`` and ``rotary_embedding_query_only``: positions index
rows of a cos/sin cache (standard or deepseek format); native semantics, checks, samples,
references. The query-only op is the first one's query output, and shares its checks and samples.
"""

from __future__ import annotations

from typing import Iterator

import torch

from ircore.op import Sample, register_op
from ircore.ops import _checks, _samples
from ircore.ops._rope_checks import _check_rope_args, _fast_rope_ok, _positions_in_range
from ircore.ops._rope_inputs import _positions, _rope_cache
from ircore.ops._rope_rotation import ROPE_TOLERANCES, _cos_sin, _rope_reference_one, _rotate

_I64 = torch.int64


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
