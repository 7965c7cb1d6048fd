"""LayerNorm, with and without weight and bias: native semantics, checks, tolerances, inputs."""

from typing import Iterator

import torch
import torch.nn.functional as F

from ircore.op import Sample, register_op
from ircore.ops import _checks, _invariant, _samples
from ircore.ops._norm import NORM_TOLERANCES

_FLOAT = _checks.FLOAT_DTYPES
_OP = "layer_norm"


def _check_affine(x: torch.Tensor, arg: str, t: torch.Tensor) -> None:
    if arg == "weight":
        _checks.check_weight(_OP, x, t)
    else:
        _check_bias(x, t)
    if t.dtype != x.dtype:
        _checks.bad_argument(
            _OP,
            arg,
            f"has dtype {t.dtype}; expected x's dtype, {x.dtype} (as torch.nn.LayerNorm's parameters)",
        )


def _check_bias(x: torch.Tensor, bias: torch.Tensor) -> None:
    if bias.dim() != 1 or bias.shape[0] != x.shape[-1]:
        _checks.bad_argument(
            _OP,
            "bias",
            f"has shape {tuple(bias.shape)}; expected ({x.shape[-1]},), the size of the last "
            f"dimension of x {tuple(x.shape)}",
        )
    if bias.device != x.device:
        _checks.bad_argument(_OP, "bias", f"is on {bias.device} but x is on {x.device}")


def _check_layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> None:
    try:  # the common valid call in one expression (this runs on every eager call)
        if (
            epsilon.__class__ is float
            and epsilon >= 0.0
            and x.dtype in _FLOAT
            and (hidden := x.shape[-1])
            and (
                weight is None
                or (
                    weight.dtype is x.dtype
                    and weight.dim() == 1
                    and weight.shape[0] == hidden
                    and weight.device == x.device
                )
            )
            and (
                bias is None
                or (
                    bias.dtype is x.dtype
                    and bias.dim() == 1
                    and bias.shape[0] == hidden
                    and bias.device == x.device
                )
            )
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _checks.check_types(_OP, x, weight, bias, epsilon)
    _checks.check_float(_OP, "x", x)
    _checks.check_rows(_OP, x)
    if weight is not None:
        _check_affine(x, "weight", weight)
    if bias is not None:
        _check_affine(x, "bias", bias)
    _checks.check_epsilon(_OP, epsilon)


def _layer_norm_reference(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> torch.Tensor:
    """The same function in fp64 (biased variance, as torch's)."""
    xd = x.double()
    mean = xd.mean(-1, keepdim=True)
    var = (xd - mean).pow(2).mean(-1, keepdim=True)
    out = (xd - mean) * torch.rsqrt(var + epsilon)
    if weight is not None:
        out = out * weight.double()
    if bias is not None:
        out = out + bias.double()
    return out


def _layer_norm_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 4, device)

    def wb(hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = _samples.randn((hidden,), dtype, device, gen, scale=0.1, shift=1.0)
        return w, _samples.randn((hidden,), dtype, device, gen, scale=0.1)

    for shape in ((1, 8), (3, 64), (16, 1000), (7, 4096), (2, 3, 128), (0, 32)):
        x = _samples.randn(shape, dtype, device, gen, shift=0.5)  # a mean away from 0
        w, b = wb(shape[-1])
        yield Sample((x, w, b, 1e-5), "x".join(map(str, shape)))
    x = _samples.randn((5, 256), dtype, device, gen, scale=3.0, shift=-2.0)
    w, b = wb(256)
    yield Sample((x, None, None, 1e-5), "5x256 weight=None bias=None")
    yield Sample((x, w, None, 1e-6), "5x256 bias=None")
    yield Sample((x, None, b, 1e-6), "5x256 weight=None")
    xc = _samples.randn((3, 96), dtype, device, gen, scale=0.25, shift=4.0)  # variance << mean**2
    w, b = wb(96)
    yield Sample((xc, w, b, 1e-5), "3x96 mean 4, std 0.25")
    xs = _samples.strided_rows(9, 512, dtype, device, gen)
    w, b = wb(512)
    yield Sample((xs, w, b, 1e-5), "9x512 row stride 576 (non-contiguous)")
    xt = _samples.randn((64, 6), dtype, device, gen).t()
    w, b = wb(64)
    yield Sample((xt, w, b, 1e-5), "6x64 transposed (last-dim stride 6)")


def _make_layer_norm_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    gen = _samples.generator(seed, device)
    x = _samples.randn(shape, dtype, device, gen, shift=0.5)
    w = _samples.randn((shape[-1],), dtype, device, gen, scale=0.1, shift=1.0)
    b = _samples.randn((shape[-1],), dtype, device, gen, scale=0.1)
    return (x, w, b, 1e-5)


def _layer_norm_invariant(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> torch.Tensor:
    """LayerNorm with fixed-order mean and variance (batch-invariant mode): F.layer_norm is
    one row per thread block on CUDA and per OpenMP row on CPU, but torch promises nothing."""
    xf = x.float()
    centred = xf - _invariant.fixed_order_mean(xf)
    out = centred * torch.rsqrt(_invariant.fixed_order_mean(centred * centred) + epsilon)
    if weight is not None:
        out = out * weight.float()
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype)


@register_op(
    check_args=_check_layer_norm,
    tolerances=NORM_TOLERANCES,
    sample_inputs=_layer_norm_samples,
    make_inputs=_make_layer_norm_inputs,
    reference=_layer_norm_reference,
    cache_by_signature=True,  # dtypes, devices, dims and sizes only
    batch_invariant=_layer_norm_invariant,
)
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> torch.Tensor:
    """LayerNorm over the last dimension: ``torch.nn.functional.layer_norm(x, x.shape[-1:], weight,
    bias, epsilon)``, whose result native is.

    ``(x - mean) * rsqrt(var + epsilon) * weight + bias`` with the biased variance, computed in
    fp32 and rounded once to x's dtype; ``weight`` and ``bias`` (each optional) have x's dtype,
    as ``torch.nn.LayerNorm``'s parameters.
    """
    return F.layer_norm(x, x.shape[-1:], weight, bias, epsilon)
