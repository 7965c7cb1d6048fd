"""SiLU-and-mul (the gate of SwiGLU MLPs): native semantics, checks, tolerances, inputs."""

import math
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


# ----------------------------------------------------------------------------------------------
# The other gated activations of vLLM's activation layers (GeluAndMul, MulAndSilu, FatreluAndMul,
# SwigluOAIAndMul). Same conventions as silu_and_mul: computed in fp32 and rounded once to x's
# dtype (vLLM's forward_native computes in x's dtype, rounding each step); halves [gate, up] of
# the last dimension, except swigluoai_and_mul's interleaved pairs.

GELU_APPROXIMATIONS = ("none", "tanh")
_FP32_MAX = float(torch.finfo(torch.float32).max)


def _check_halves(op: str, x: torch.Tensor, what: str = "the two halves [gate, up] of equal size") -> None:
    """The careful check of x shared by the gated activations (after the fast path missed)."""
    _checks.check_float(op, "x", x)
    if x.dim() == 0:
        _checks.check_rows(op, x)
    if x.shape[-1] % 2 or not x.shape[-1]:
        _checks.bad_argument(
            op,
            "x",
            f"has last dimension {x.shape[-1]} (shape {tuple(x.shape)}); it must be even and "
            f"non-zero: {what}",
        )


def _check_real(op: str, arg: str, value: float, *, nonnegative: bool = False) -> None:
    if value != value or (nonnegative and not value >= 0):
        need = "a number >= 0 (not NaN; inf is allowed)" if nonnegative else "a number, not NaN"
        _checks.bad_argument(op, arg, f"is {value!r}; expected {need}")


def _check_gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> None:
    try:  # the common valid call first: this runs on every eager call (no signature cache: a str)
        if (
            (approximate == "none" or approximate == "tanh")
            and x.dtype in _FLOAT
            and (d := x.shape[-1])
            and not d % 2
        ):
            return
    except (AttributeError, IndexError):
        pass
    _checks.check_types("gelu_and_mul", x, approximate)
    _check_halves("gelu_and_mul", x)
    if approximate not in GELU_APPROXIMATIONS:
        _checks.bad_argument(
            "gelu_and_mul",
            "approximate",
            f"is {approximate!r}; expected one of 'none' (erf GELU) or 'tanh' (the tanh approximation), "
            "as torch.nn.functional.gelu's approximate",
        )


def _check_mul_and_silu(x: torch.Tensor) -> None:
    try:
        if x.dtype in _FLOAT and (d := x.shape[-1]) and not d % 2:
            return
    except (AttributeError, IndexError):
        pass
    _checks.check_types("mul_and_silu", x)
    _check_halves("mul_and_silu", x, "the two halves [up, gate] of equal size")


def _check_fatrelu_and_mul(x: torch.Tensor, threshold: float = 0.0) -> None:
    try:
        if threshold == threshold and x.dtype in _FLOAT and (d := x.shape[-1]) and not d % 2:
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _checks.check_types("fatrelu_and_mul", x, threshold)
    _check_halves("fatrelu_and_mul", x)
    _check_real("fatrelu_and_mul", "threshold", threshold)


def _check_swigluoai_and_mul(x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> None:
    try:
        if (
            -_FP32_MAX <= alpha <= _FP32_MAX
            and limit >= 0
            and x.dtype in _FLOAT
            and (d := x.shape[-1])
            and not d % 2
        ):
            return
    except (AttributeError, IndexError, TypeError):
        pass
    _checks.check_types("swigluoai_and_mul", x, alpha, limit)
    _check_halves("swigluoai_and_mul", x, "interleaved pairs (gate, up): x[..., ::2] and x[..., 1::2]")
    if not -_FP32_MAX <= alpha <= _FP32_MAX:  # inf * a zero gate would be NaN
        _checks.bad_argument(
            "swigluoai_and_mul",
            "alpha",
            f"is {alpha!r}; expected a finite number within float32's range, e.g. 1.702",
        )
    _check_real("swigluoai_and_mul", "limit", limit, nonnegative=True)


def _gelu_and_mul_reference(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    d = x.shape[-1] // 2
    xd = x.double()
    return F.gelu(xd[..., :d], approximate=approximate) * xd[..., d:]


def _mul_and_silu_reference(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    xd = x.double()
    return xd[..., :d] * F.silu(xd[..., d:])


def _fatrelu_and_mul_reference(x: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    d = x.shape[-1] // 2
    xd = x.double()
    t = torch.tensor(threshold, dtype=torch.float32).item()  # the op compares in fp32 (see there)
    return torch.where(xd[..., :d] <= t, 0.0, xd[..., :d]) * xd[..., d:]


def _swigluoai_and_mul_reference(x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    limit = limit if limit <= _FP32_MAX else math.inf
    xd = x.double()
    gate = xd[..., ::2].clamp(max=limit)
    up = xd[..., 1::2].clamp(min=-limit, max=limit)
    return (up + 1) * (gate * torch.sigmoid(gate * alpha))


# Shapes of the gated activations' samples: small, odd half-widths (vector tails), a 3-D batch, no
# rows; each op adds its strided rows and its parameter variants. Kept small: the triton provider's
# conformance test runs every sample in Triton's interpreter.
_GATED_SHAPES = ((1, 16), (4, 256), (7, 2 * 37), (5, 2 * 1001), (2, 3, 128), (0, 64))


def _gated_samples(seed: int, device: str, dtype: torch.dtype, params: tuple[tuple, ...], scale: float = 2.0):
    gen = _samples.generator(seed, device)
    for shape in _GATED_SHAPES:
        yield Sample(
            (_samples.randn(shape, dtype, device, gen, scale=scale), *params[0]), "x".join(map(str, shape))
        )
    x = _samples.randn((6, 2 * 96), dtype, device, gen, scale=scale)
    for extra in params[1:]:
        yield Sample((x, *extra), f"6x192 {extra}")
    xs = _samples.strided_rows(6, 512, dtype, device, gen)
    yield Sample((xs * scale, *params[-1]), f"6x512 row stride 576 (non-contiguous) {params[-1]}")


def _gelu_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    return _gated_samples(seed + 21, device, dtype, (("none",), ("tanh",)), scale=3.0)


def _mul_and_silu_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    return _gated_samples(seed + 22, device, dtype, ((),))


def _fatrelu_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    return _gated_samples(seed + 23, device, dtype, ((0.0,), (0.5,), (-0.75,)))


def _swigluoai_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    # scale 4: a good share of gates above 7 and ups beyond +-7 (the clamps); limit 2: most clamp
    return _gated_samples(
        seed + 24, device, dtype, ((1.702, 7.0), (1.0, 2.0), (1.702, float("inf"))), scale=4.0
    )


def _make_gated_inputs(*params: object, scale: float = 2.0):
    def make(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
        return (_samples.randn(shape, dtype, device, _samples.generator(seed, device), scale=scale), *params)

    return make


@register_op(
    check_args=_check_gelu_and_mul,
    # measured: 7.8e-7 in fp32 on the CPU
    batch_invariant=(
        "torch's vectorised erf/tanh and its scalar tail differ in the last bit, and which elements "
        "fall in the tail depends on the whole tensor"
    ),
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_gelu_samples,
    make_inputs=_make_gated_inputs("none", scale=3.0),
    reference=_gelu_and_mul_reference,
    # no cache_by_signature: the check reads ``approximate``, a str, which the signature cache's
    # compiled helper cannot key on; the fast path above costs two string compares instead
)
def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(a, approximate) * b`` where ``a, b`` are the two halves of x's last dimension (the
    GeGLU gate; vLLM's ``GeluAndMul``; ``approximate="tanh"`` is Gemma's ``gelu_pytorch_tanh``).

    ``approximate`` is ``"none"`` (erf) or ``"tanh"``, as ``torch.nn.functional.gelu``'s.
    Computed in fp32, rounded once to x's dtype; the result's last dimension is half of x's.
    """
    d = x.shape[-1] // 2
    xf = x.float()
    return (F.gelu(xf[..., :d], approximate=approximate) * xf[..., d:]).to(x.dtype)


@register_op(
    check_args=_check_mul_and_silu,
    batch_invariant=True,  # elementwise
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_mul_and_silu_samples,
    make_inputs=_make_gated_inputs(),
    reference=_mul_and_silu_reference,
    cache_by_signature=True,  # dtype, dims and the last dimension's size
)
def mul_and_silu(x: torch.Tensor) -> torch.Tensor:
    """``a * silu(b)`` where ``a, b`` are the two halves of x's last dimension: silu_and_mul with
    the halves swapped (vLLM's ``MulAndSilu``).

    Computed in fp32, rounded once to x's dtype; the result's last dimension is half of x's.
    """
    d = x.shape[-1] // 2
    xf = x.float()
    return (xf[..., :d] * F.silu(xf[..., d:])).to(x.dtype)


@register_op(
    check_args=_check_fatrelu_and_mul,
    batch_invariant=True,  # elementwise
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_fatrelu_samples,
    make_inputs=_make_gated_inputs(0.0),
    reference=_fatrelu_and_mul_reference,
    # no cache_by_signature: the check reads threshold's value (NaN is refused)
)
def fatrelu_and_mul(x: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    """``threshold(a) * b`` where ``a, b`` are the two halves of x's last dimension and
    ``threshold(a)`` keeps a where ``a > threshold``, else 0 (``F.threshold(a, threshold, 0)``;
    vLLM's ``FatreluAndMul``, MiniCPM's FATReLU; a NaN ``a`` stays NaN). ``threshold`` is any
    number but NaN; the comparison is in fp32, as torch compares a float32 tensor with a Python
    number (the threshold rounded to fp32; one beyond fp32's range acts as +-inf, where
    ``F.threshold`` itself would raise).

    Computed in fp32, rounded once to x's dtype; the result's last dimension is half of x's.
    """
    d = x.shape[-1] // 2
    xf = x.float()
    a = xf[..., :d]
    return (torch.where(a <= threshold, 0.0, a) * xf[..., d:]).to(x.dtype)


@register_op(
    check_args=_check_swigluoai_and_mul,
    batch_invariant=True,  # elementwise
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_swigluoai_samples,
    make_inputs=_make_gated_inputs(1.702, 7.0, scale=4.0),
    reference=_swigluoai_and_mul_reference,
    # no cache_by_signature: the check reads alpha's and limit's values
)
def swigluoai_and_mul(x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """GPT-OSS's clamped SwiGLU (vLLM's ``SwigluOAIAndMul``) on **interleaved** pairs:
    ``gate = x[..., ::2].clamp(max=limit)``, ``up = x[..., 1::2].clamp(-limit, limit)``,
    ``(up + 1) * gate * sigmoid(alpha * gate)``. ``alpha`` is finite (within float32's range);
    ``limit`` is ``>= 0`` (``inf``, or any value beyond float32's range: no clamping).

    Computed in fp32, rounded once to x's dtype; the result's last dimension is half of x's.
    """
    xf = x.float()
    lim = limit if limit <= _FP32_MAX else math.inf  # clamp would raise for a bound beyond fp32
    gate = xf[..., ::2].clamp(max=lim)
    up = xf[..., 1::2].clamp(min=-lim, max=lim)
    return ((up + 1) * (gate * torch.sigmoid(gate * alpha))).to(x.dtype)
