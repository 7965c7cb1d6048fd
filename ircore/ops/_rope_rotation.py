"""The rotation the RoPE ops share: how a tensor is read as heads, the cos/sin rows of each token,
the natives' rounding (one rotated activation) with the tolerance that follows from it, and the
fp64 reference, written independently of the natives, that the conformance kit compares with.
"""

from __future__ import annotations

import math

import torch

from ircore.op import Tolerance

# Every product and sum rounds to the activation dtype (standard format), and cos/sin are rounded
# to it first: the error is a few ulps of |x|, not of the output (x1*c - x2*s may cancel), hence
# an atol as large as the rtol. The natives use at most 0.6 of it on the samples (10 seeds).
ROPE_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}


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
