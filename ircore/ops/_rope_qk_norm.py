"""The fused QK-norm + RoPE of Qwen3-style attention, ``fused_qk_norm_rope``: per-head RMSNorm
of the q and k heads of a packed qkv, then ``rotary_embedding`` on them, bit for bit the unfused
chain; native semantics, checks, samples, reference.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

import torch

from ircore.op import Sample, Tolerance, register_op
from ircore.ops import _checks, _samples
from ircore.ops._norm import _rms_norm_invariant, rms_norm
from ircore.ops._rope_checks import _check_index_tensor, _positions_in_range
from ircore.ops._rope_embedding import rotary_embedding
from ircore.ops._rope_inputs import _positions, _rope_cache
from ircore.ops._rope_rotation import ROPE_TOLERANCES, _rope_reference_one

_FLOAT = _checks.FLOAT_DTYPES
_I64 = torch.int64
# fused_qk_norm_rope rounds twice (the normalised heads, then each RoPE operation), on values up
# to a few units: fp16's ulp there is 2e-3, so its atol is two of them.
FUSED_ROPE_TOLERANCES = {**ROPE_TOLERANCES, torch.float16: Tolerance(atol=4e-3, rtol=2e-3)}


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


def _fused_qk_norm_rope_invariant(
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
    """The native with each head's norm in its fixed-order form (batch-invariant mode)."""
    return _norm_then_rotate(_rms_norm_invariant, qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps,
                             q_weight, k_weight, cos_sin_cache, is_neox, position_ids)  # fmt: skip


@register_op(
    inplace_args=("qkv",),
    check_args=_check_fused_qk_norm_rope,
    tolerances=FUSED_ROPE_TOLERANCES,
    sample_inputs=_fused_samples,
    make_inputs=_make_fused_inputs,
    reference=_fused_qk_norm_rope_reference,
    batch_invariant=_fused_qk_norm_rope_invariant,
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
    return _norm_then_rotate(rms_norm.native, qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps,
                             q_weight, k_weight, cos_sin_cache, is_neox, position_ids)  # fmt: skip


def _norm_then_rotate(
    norm: Callable[..., torch.Tensor],
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
    """The unfused chain with ``norm`` as each head's RMSNorm (native's, or its fixed-order form)."""
    q, k, v = _split_heads(qkv, num_heads_q, num_heads_k, num_heads_v, head_dim)
    lead = qkv.shape[:-1]
    qn = norm(q.reshape(*lead, num_heads_q, head_dim), q_weight, eps).reshape(q.shape)
    kn = norm(k.reshape(*lead, num_heads_k, head_dim), k_weight, eps).reshape(k.shape)
    qr, kr = rotary_embedding.native(position_ids, qn, kn, head_dim, head_dim, cos_sin_cache, is_neox)
    return torch.cat((qr, kr, v), dim=-1)
