"""Argument checks of the RoPE ops: positions against the cache's rows, the index tensors
(positions, offsets), and the arguments of vLLM's form that ``rotary_embedding`` and
``rotary_embedding_query_only`` share (the careful checks, and the fast path run on every call).

A position outside the cache is a caller's error: on CPU tensors the checks refuse it (one
reduction over the positions); on other devices it is not checked, since that needs a host sync
(see docs/ops.md, "Positions").
"""

from __future__ import annotations

import torch

from ircore.ops import _checks
from ircore.ops._rope_rotation import _heads

_FLOAT = _checks.FLOAT_DTYPES
_I64 = torch.int64
_FORMATS = ("standard", "deepseek")


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
