"""The inputs RoPE callers build: vLLM's cos/sin cache (``[max_position, rotary_dim]``, cos in
the first half of a row, sin in the second), the positions that index it, and Hugging Face's
per-token cos/sin. The ops' samples and make_inputs use them, and so do tests and benchmarks that
need the same tables as the ops' callers.
"""

from __future__ import annotations

import functools

import torch

_I64 = torch.int64


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
