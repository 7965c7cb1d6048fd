"""SiLU-and-mul (the gate of SwiGLU MLPs): native semantics, checks, tolerances, inputs."""

from typing import Iterator

import torch
import torch.nn.functional as F

from ircore.op import Sample, Tolerance, register_op
from ircore.ops import _checks, _samples

_FLOAT = _checks.FLOAT_DTYPES

ACTIVATION_TOLERANCES = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}


def _check_silu_and_mul(x: torch.Tensor) -> None:
    try:  # the common valid call first: this runs on every eager call
        if x.dtype in _FLOAT and (d := x.shape[-1]) and not d % 2:
            return
    except (AttributeError, IndexError):
        pass
    _checks.check_types("silu_and_mul", x)
    _checks.check_float("silu_and_mul", "x", x)
    if x.dim() == 0:
        _checks.check_rows("silu_and_mul", x)
    if x.shape[-1] % 2 or not x.shape[-1]:
        _checks.bad_argument(
            "silu_and_mul",
            "x",
            f"has last dimension {x.shape[-1]} (shape {tuple(x.shape)}); it must be even and "
            "non-zero: the two halves [gate, up] of equal size",
        )


def _silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xd = x.double()
    return F.silu(xd[..., :d]) * xd[..., d:]


def _silu_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 2, device)
    for shape in ((1, 16), (4, 256), (13, 2000), (2, 5, 128), (0, 64), (3, 22016)):
        yield Sample((_samples.randn(shape, dtype, device, gen, scale=2.0),), "x".join(map(str, shape)))
    xs = _samples.strided_rows(6, 512, dtype, device, gen)
    yield Sample((xs,), "6x512 row stride 576 (non-contiguous)")


def _make_silu_inputs(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    return (_samples.randn(shape, dtype, device, _samples.generator(seed, device), scale=2.0),)


@register_op(
    check_args=_check_silu_and_mul,
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_silu_samples,
    make_inputs=_make_silu_inputs,
    reference=_silu_and_mul_reference,
    cache_by_signature=True,  # dtype, dims and the last dimension's size
    batch_invariant=True,  # elementwise: each output element reads its own inputs only
)
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(a) * b`` where ``a, b`` are the two halves of x's last dimension.

    Computed in fp32, returned in x's dtype; the result's last dimension is half of x's.
    """
    d = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)
