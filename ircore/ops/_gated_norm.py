"""Gated RMSNorm (Mamba2, Qwen3-Next, Falcon-H1, ...): native semantics, checks, tolerances, inputs."""

from typing import Iterator

import torch
import torch.nn.functional as F

from ircore.op import Sample, register_op
from ircore.ops import _checks, _invariant, _samples
from ircore.ops._norm import NORM_TOLERANCES

_FLOAT = _checks.FLOAT_DTYPES
_FP32_MAX = torch.finfo(torch.float32).max
_OP = "rms_norm_gated"


def _check_rms_norm_gated(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None,
    norm_before_gate: bool,
    round_normalized: bool,
) -> None:
    try:  # the common valid call in one expression (this runs on every eager call)
        if (
            epsilon.__class__ is float
            and epsilon >= 0.0
            and x.dtype in _FLOAT
            and gate.dtype is x.dtype
            and gate.shape == x.shape
            and gate.device == x.device
            and (hidden := x.shape[-1])
            and weight.numel() == hidden
            and weight.dim() == 1
            and weight.dtype in _FLOAT
            and weight.device == x.device
            and (
                group_size is None
                or (group_size.__class__ is int and 0 < group_size and not hidden % group_size)
            )
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _checks.check_types(_OP, x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized)
    _checks.check_float(_OP, "x", x)
    _checks.check_rows(_OP, x)
    if gate.shape != x.shape or gate.dtype != x.dtype:
        _checks.bad_argument(
            _OP,
            "gate",
            f"is {gate.dtype} {tuple(gate.shape)}; expected x's dtype and shape, {x.dtype} {tuple(x.shape)}",
        )
    if gate.device != x.device:
        _checks.bad_argument(_OP, "gate", f"is on {gate.device} but x is on {x.device}")
    _checks.check_weight(_OP, x, weight)
    _checks.check_epsilon(_OP, epsilon)
    if group_size is not None:
        hidden = x.shape[-1]
        if not 0 < group_size <= hidden or hidden % group_size:
            _checks.bad_argument(
                _OP,
                "group_size",
                f"is {group_size}; expected None or a divisor of x.shape[-1] = {hidden} "
                "(the last dimension is normalised in groups of group_size)",
            )


def _normalise(
    xf: torch.Tensor, epsilon: float, group_size: int | None, fixed_order: bool = False
) -> torch.Tensor:
    """``xf * rsqrt(mean(xf**2) + epsilon)`` per group of ``group_size`` (the row when None);
    ``fixed_order``: the mean summed in an order fixed by the group's size (batch-invariant mode)."""
    hidden = xf.shape[-1]

    def mean(t: torch.Tensor) -> torch.Tensor:
        return _invariant.fixed_order_mean(t * t) if fixed_order else t.pow(2).mean(-1, keepdim=True)

    if group_size is None or group_size == hidden:
        return xf * torch.rsqrt(mean(xf) + epsilon)
    grouped = xf.unflatten(-1, (hidden // group_size, group_size))
    return (grouped * torch.rsqrt(mean(grouped) + epsilon)).flatten(-2)


def _rms_norm_gated_reference(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None,
    norm_before_gate: bool,
    round_normalized: bool,
) -> torch.Tensor:
    """The same function in fp64; only the roundings ``round_normalized`` asks for are made.

    As in the op, a group whose sum of squares passes fp32's largest value has 1/rms = 0.
    """
    xd = x.double()
    g = F.silu(gate.double())
    if not norm_before_gate:
        xd = xd * g
    hidden = x.shape[-1]
    gs = hidden if group_size is None else group_size
    grouped = xd.unflatten(-1, (hidden // gs, gs))
    sum_sq = grouped.pow(2).sum(-1, keepdim=True)
    inv_rms = torch.rsqrt(sum_sq / gs + epsilon).masked_fill(sum_sq > _FP32_MAX, 0.0)
    out = (grouped * inv_rms).flatten(-2)
    if round_normalized:
        out = (out.to(x.dtype).double() * weight.double()).to(x.dtype).double()
    else:
        out = out * weight.double()
    return out * g if norm_before_gate else out


def _rms_norm_gated_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 3, device)

    def xgw(shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = _samples.randn(shape, dtype, device, gen)
        g = _samples.randn(shape, dtype, device, gen, scale=2.0)
        w = _samples.randn((shape[-1],), dtype, device, gen, scale=0.1, shift=1.0)
        return x, g, w

    # (shape, group_size): whole rows, and groups as Mamba2/Falcon-H1 use them
    cases = (
        ((1, 8), None),
        ((3, 64), 16),
        ((16, 1000), None),
        ((7, 4096), 1024),
        ((2, 3, 128), 64),
        ((0, 32), 8),
    )
    forms = (
        (False, False),
        (True, False),
        (False, True),
        (True, True),
    )  # (norm_before_gate, round_normalized)
    for i, (shape, gs) in enumerate(cases):
        for norm_before_gate, round_normalized in forms[i % 4 :] + forms[: i % 4]:
            x, g, w = xgw(shape)
            label = f"{'x'.join(map(str, shape))} group_size={gs} norm_before_gate={norm_before_gate}"
            yield Sample(
                (x, g, w, 1e-6, gs, norm_before_gate, round_normalized), f"{label} round={round_normalized}"
            )
            if shape[-1] > 1000:
                break  # the long row once
    x, g, w = xgw((5, 256))
    yield Sample((x, g, w, 1e-5, 256, True, False), "5x256 group_size=hidden")
    for norm_before_gate in (False, True):
        xs = _samples.strided_rows(9, 512, dtype, device, gen)
        gs_ = _samples.strided_rows(9, 512, dtype, device, gen, pad=32)
        w = _samples.randn((512,), dtype, device, gen, scale=0.1, shift=1.0)
        yield Sample(
            (xs, gs_, w, 1e-6, 128, norm_before_gate, False),
            f"9x512 strided rows norm_before_gate={norm_before_gate}",
        )
    xt = _samples.randn((64, 6), dtype, device, gen).t()
    gt = _samples.randn((64, 6), dtype, device, gen).t()
    w = _samples.randn((64,), dtype, device, gen, scale=0.1, shift=1.0)
    yield Sample((xt, gt, w, 1e-6, None, True, True), "6x64 transposed (last-dim stride 6)")
    if dtype != torch.float32:
        x, g, _ = xgw((4, 128))
        w32 = _samples.randn((128,), torch.float32, device, gen, scale=0.1, shift=1.0)
        yield Sample((x, g, w32, 1e-6, 32, False, False), "4x128 fp32 weight")
        yield Sample((x, g, w32, 1e-6, None, True, True), "4x128 fp32 weight round_normalized")


def _make_rms_norm_gated_inputs(
    shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0
) -> tuple:
    """Qwen3-Next's form by default (norm then gate, whole rows)."""
    gen = _samples.generator(seed, device)
    x = _samples.randn(shape, dtype, device, gen)
    g = _samples.randn(shape, dtype, device, gen, scale=2.0)
    w = _samples.randn((shape[-1],), dtype, device, gen, scale=0.1, shift=1.0)
    return (x, g, w, 1e-6, None, True, False)


def _rms_norm_gated_invariant(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> torch.Tensor:
    """Native rms_norm_gated with fixed-order means (batch-invariant mode)."""
    return _gated(x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized, True)


@register_op(
    check_args=_check_rms_norm_gated,
    tolerances=NORM_TOLERANCES,
    sample_inputs=_rms_norm_gated_samples,
    make_inputs=_make_rms_norm_gated_inputs,
    reference=_rms_norm_gated_reference,
    cache_by_signature=True,  # dtypes, devices, shapes, group_size: signature facts
    batch_invariant=_rms_norm_gated_invariant,
)
def rms_norm_gated(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
) -> torch.Tensor:
    """Gated RMSNorm over the last dimension, in fp32, returned in x's dtype.

    ``norm_before_gate=False`` (Mamba2, Bamba, Zamba2, Nemotron-H, Granite-MoE-Hybrid,
    Falcon-H1's default): ``y = rms(x * silu(gate)) * weight``; ``True`` (Qwen3-Next, Qwen3.5,
    OLMo-Hybrid, Falcon-H1's other form): ``y = rms(x) * weight * silu(gate)``; ``rms(v) = v *
    rsqrt(mean(v**2) + epsilon)``, the mean taken per group of ``group_size`` elements of the last
    dimension (the whole row when None; Mamba2's ``group_size``, Falcon-H1's ``hidden // n_groups``).
    ``gate`` has x's shape and dtype; ``silu(gate)`` is computed in fp32.

    ``round_normalized=False``: fp32 throughout, one rounding at the end (Falcon-H1, vLLM).
    ``True``: as transformers' Mamba2 and Qwen3-Next modules, the normalised value is rounded to
    x's dtype, multiplied by the weight in fp32 and rounded to x's dtype again (then, with
    ``norm_before_gate``, multiplied by ``silu(gate)`` in fp32 and rounded). With a weight of x's
    dtype each form equals the module it names, bit for bit.
    """
    return _gated(x, gate, weight, epsilon, group_size, norm_before_gate, round_normalized, False)


def _gated(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None,
    norm_before_gate: bool,
    round_normalized: bool,
    fixed_order: bool,
) -> torch.Tensor:
    dtype = x.dtype
    xf = x.float()
    g = F.silu(gate.float())
    if not norm_before_gate:
        xf = xf * g
    out = _normalise(xf, epsilon, group_size, fixed_order)
    if round_normalized:
        out = (out.to(dtype).float() * weight.float()).to(dtype).float()
    else:
        out = out * weight.float()
    if norm_before_gate:
        out = out * g
    return out.to(dtype)
