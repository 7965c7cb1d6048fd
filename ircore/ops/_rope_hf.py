"""Hugging Face's RoPE form, ``rotary_pos_emb`` (``apply_rotary_pos_emb``): q and k rotated by
per-token cos/sin, as HF's attention modules call it; native semantics, checks, samples,
reference.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch

from ircore.op import Sample, register_op
from ircore.ops import _checks, _samples
from ircore.ops._rope_inputs import _hf_cos_sin
from ircore.ops._rope_rotation import ROPE_TOLERANCES

_FLOAT = _checks.FLOAT_DTYPES


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
