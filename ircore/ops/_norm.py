"""RMSNorm and fused residual-add + RMSNorm: native semantics, checks, tolerances, inputs."""

from typing import Iterator

import torch

from ircore.op import Sample, Tolerance, register_op
from ircore.ops import _checks, _invariant, _samples

_FLOAT = _checks.FLOAT_DTYPES

NORM_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}

_SHAPES = ((1, 8), (3, 64), (16, 1000), (7, 4096), (2, 3, 128), (0, 32))
_FP32_MAX = torch.finfo(torch.float32).max


# ---------------------------------------------------------------------- rms_norm
def _check_rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None
) -> None:
    # One expression for the common valid call (this runs on every eager call; only tensors have
    # these attributes); any doubt goes to the careful checks below, which raise the precise error.
    try:
        if variance_size is None and epsilon.__class__ is float and epsilon >= 0.0 and x.dtype in _FLOAT:
            if weight is None:
                if x.shape[-1]:
                    return
            elif (
                (hidden := x.shape[-1])
                and weight.numel() == hidden
                and weight.dim() == 1
                and weight.dtype in _FLOAT
                and weight.device == x.device
            ):
                return
    except (AttributeError, IndexError, TypeError):
        pass
    _checks.check_types("rms_norm", x, weight, epsilon, variance_size)
    _checks.check_float("rms_norm", "x", x)
    _checks.check_rows("rms_norm", x)
    if weight is not None:
        _checks.check_weight("rms_norm", x, weight)
    _checks.check_epsilon("rms_norm", epsilon)
    if variance_size is not None:
        _checks.check_variance_size("rms_norm", x, variance_size)


def _rms_norm_reference(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float, variance_size: int | None
) -> torch.Tensor:
    """The same function in fp64, unrounded: what implementations are measured against.

    As in the op, which sums squares in fp32, a row whose sum of squares passes fp32's largest
    value has 1/rms = 0: its output is 0 (NaN where x is infinite).
    """
    xd = x.double()
    xv = xd if variance_size is None else xd[..., :variance_size]
    sum_sq = xv.pow(2).sum(dim=-1, keepdim=True)
    inv_rms = torch.rsqrt(sum_sq / xv.shape[-1] + epsilon).masked_fill(sum_sq > _FP32_MAX, 0.0)
    out = xd * inv_rms
    return out if weight is None else out * weight.double()


def _beyond_fp32_squares(hidden: int, dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    """Four rows by magnitude: elements past sqrt(fp32 max) (their squares overflow); elements
    within it whose squares sum past fp32 max; large elements whose sum of squares fits (by a
    quarter); ordinary ones. Magnitudes in [0.5, 1) x scale, random signs."""
    magnitude = torch.rand((4, hidden), generator=gen, device=device) * 0.5 + 0.5
    sign = torch.where(torch.rand((4, hidden), generator=gen, device=device) < 0.5, -1.0, 1.0)
    scale = torch.tensor([[1e20], [4e18], [1e18], [1.0]], device=device)
    assert hidden <= 256  # keeps row 2's sum of squares (<= hidden * 1e36) below fp32 max
    return (magnitude * sign * scale).to(dtype)


def _rms_norm_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed, device)
    for shape in _SHAPES:
        hidden = shape[-1]
        x = _samples.randn(shape, dtype, device, gen)
        w = _samples.randn((hidden,), dtype, device, gen, scale=0.1, shift=1.0)
        yield Sample((x, w, 1e-6, None), f"{'x'.join(map(str, shape))}")
    x = _samples.randn((5, 256), dtype, device, gen, scale=3.0)
    yield Sample((x, None, 1e-5, None), "5x256 weight=None")
    w = _samples.randn((256,), dtype, device, gen, scale=0.1, shift=1.0)
    yield Sample((x, w, 1e-6, 96), "5x256 variance_size=96")
    xs = _samples.strided_rows(9, 512, dtype, device, gen)
    w = _samples.randn((512,), dtype, device, gen, scale=0.1, shift=1.0)
    yield Sample((xs, w, 1e-6, None), "9x512 row stride 576 (non-contiguous)")
    xt = _samples.randn((64, 6), dtype, device, gen).t()
    w = _samples.randn((64,), dtype, device, gen, scale=0.1, shift=1.0)
    yield Sample((xt, w, 1e-6, None), "6x64 transposed (last-dim stride 6)")
    if dtype != torch.float32:
        w32 = _samples.randn((128,), torch.float32, device, gen, scale=0.1, shift=1.0)
        yield Sample((_samples.randn((4, 128), dtype, device, gen), w32, 1e-6, None), "4x128 fp32 weight")
    if torch.finfo(dtype).max > 1e20:  # fp32, bf16: values whose squares leave fp32's range
        w = _samples.randn((256,), dtype, device, gen, scale=0.1, shift=1.0)
        huge = _beyond_fp32_squares(256, dtype, device, gen)
        yield Sample((huge, w, 1e-6, None), "4x256 beyond sqrt(fp32 max)")


def _make_rms_norm_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    gen = _samples.generator(seed, device)
    x = _samples.randn(shape, dtype, device, gen)
    w = _samples.randn((shape[-1],), dtype, device, gen, scale=0.1, shift=1.0)
    return (x, w, 1e-6, None)


def _rms_norm_invariant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> torch.Tensor:
    """Native rms_norm with its mean taken in a fixed order (batch-invariant mode)."""
    xf = x.float()
    xv = xf if variance_size is None else xf[..., :variance_size]
    out = xf * torch.rsqrt(_invariant.fixed_order_mean(xv * xv) + epsilon)
    if weight is not None:
        out = out * weight.float()
    return out.to(x.dtype)


@register_op(
    check_args=_check_rms_norm,
    tolerances=NORM_TOLERANCES,
    sample_inputs=_rms_norm_samples,
    make_inputs=_make_rms_norm_inputs,
    reference=_rms_norm_reference,
    cache_by_signature=True,  # _check_rms_norm reads dtypes, devices, dims and sizes only
    batch_invariant=_rms_norm_invariant,
)
def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> torch.Tensor:
    """RMSNorm over the last dimension, computed in fp32, returned in x's dtype.

    ``y = x * rsqrt(mean(x[..., :variance_size]**2) + epsilon) * weight``: the mean runs over
    the first ``variance_size`` elements of the last dimension (all of them when ``None``) and
    the whole row is scaled. ``weight`` (any float dtype, or ``None`` for none) multiplies in
    fp32 before the one rounding to x's dtype.
    """
    xf = x.float()
    xv = xf if variance_size is None else xf[..., :variance_size]
    out = xf * torch.rsqrt(xv.pow(2).mean(dim=-1, keepdim=True) + epsilon)
    if weight is not None:
        out = out * weight.float()
    return out.to(x.dtype)


# ---------------------------------------------------------------------- fused_add_rms_norm
def _check_fused_add_rms_norm(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None,
) -> None:
    try:  # the common valid call in one expression, as in _check_rms_norm
        if (
            variance_size is None
            and epsilon.__class__ is float
            and epsilon >= 0.0
            and x.dtype in _FLOAT
            and x_residual.dtype == x.dtype
            and x_residual.shape == x.shape
            and x_residual.device == x.device
            and (hidden := x.shape[-1])
            and (
                weight is None
                or (
                    weight.numel() == hidden
                    and weight.dim() == 1
                    and weight.dtype in _FLOAT
                    and weight.device == x.device
                )
            )
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    op = "fused_add_rms_norm"
    _checks.check_types(op, x, x_residual, weight, epsilon, variance_size)
    _checks.check_float(op, "x", x)
    _checks.check_rows(op, x)
    if x_residual.shape != x.shape or x_residual.dtype != x.dtype:
        _checks.bad_argument(
            op,
            "x_residual",
            f"is {x_residual.dtype} {tuple(x_residual.shape)}; expected x's dtype and shape, "
            f"{x.dtype} {tuple(x.shape)}",
        )
    if x_residual.device != x.device:
        _checks.bad_argument(op, "x_residual", f"is on {x_residual.device} but x is on {x.device}")
    if weight is not None:
        _checks.check_weight(op, x, weight)
    _checks.check_epsilon(op, epsilon)
    if variance_size is not None:
        _checks.check_variance_size(op, x, variance_size)


def _fused_add_rms_norm_reference(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    residual = (x.double() + x_residual.double()).to(x.dtype)
    return _rms_norm_reference(residual, weight, epsilon, variance_size), residual.double()


def _fused_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 1, device)
    for sample in _rms_norm_samples(dtype, device, seed):
        x, w, eps, vs = sample.args
        r = _samples.randn(x.shape, dtype, device, gen)
        if not x.is_contiguous():  # residual with the same layout as x
            r = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device=device).copy_(r)
        yield Sample((x, r, w, eps, vs), sample.label)


def _make_fused_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    x, w, eps, vs = _make_rms_norm_inputs(shape, dtype, device, seed)
    r = _samples.randn(shape, dtype, device, _samples.generator(seed + 1, device))
    return (x, r, w, eps, vs)


def _fused_add_rms_norm_invariant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Native fused_add_rms_norm with a fixed-order mean (batch-invariant mode)."""
    residual = (x.float() + x_residual.float()).to(x.dtype)
    return _rms_norm_invariant(residual, weight, epsilon, variance_size), residual


@register_op(
    inplace_args=("x", "x_residual"),
    check_args=_check_fused_add_rms_norm,
    tolerances=NORM_TOLERANCES,
    sample_inputs=_fused_samples,
    make_inputs=_make_fused_inputs,
    reference=_fused_add_rms_norm_reference,
    cache_by_signature=True,  # as rms_norm, plus "x_residual has x's shape", a signature fact
    batch_invariant=_fused_add_rms_norm_invariant,
)
def fused_add_rms_norm(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm: returns ``(rms_norm(residual), residual)``.

    ``residual = x + x_residual``, added in fp32 and rounded to x's dtype (as inference engines
    keep it), then normalised exactly as :func:`rms_norm`. In-place implementations may write
    the output into ``x`` and the residual into ``x_residual``.
    """
    residual = (x.float() + x_residual.float()).to(x.dtype)
    return rms_norm.native(residual, weight, epsilon, variance_size), residual
