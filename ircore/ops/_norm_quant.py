"""Fused RMSNorm + fp8 quant and SiLU-and-mul + fp8 quant: IR ops whose natives compose the
unfused ops, so that a fusion pass can rewrite ``rms_norm -> static_quant_fp8`` (and the others)
into one op IR -> IR, and lowering then picks any provider's kernel.

Arguments: the unfused ops' in turn, the norm's (``variance_size`` left out: a fusion applies
when it is None) then the quant's. Outputs: the unfused chain's, the norm's output replaced by
the quant's outputs: ``q``; ``(q, scale)``; and the residual last for the ``fused_add_`` ops.

Residual convention (one for all, ircore's :func:`~ircore.ops.fused_add_rms_norm`, whose native
this composes): the sum is added in fp32 and **rounded to x's dtype, and the variance is taken
from the rounded sum** (not from the fp32 sum as vLLM's native ``fused_add_rms_norm`` and its
dynamic fused kernel do; a kernel that keeps the fp32 sum differs by at most one ulp of x's dtype
in the norm's output, within the tolerance). The norm's output is rounded to x's dtype before
it is quantised, as in the unfused chain and vLLM's kernels.

None of these ops takes an argument in place: ircore's in-place contract writes output i into
in-place argument i, and the fp8 output cannot be written into ``x``. A kernel writes the residual
to a new tensor (the same bytes as an in-place update; vLLM's in-place kernels run on a clone).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ircore.op import Sample, register_op
from ircore.ops import _checks, _quant, _samples
from ircore.ops._activation import ACTIVATION_TOLERANCES, _silu_and_mul_reference, silu_and_mul
from ircore.ops._norm import (
    NORM_TOLERANCES,
    _fused_add_rms_norm_invariant,
    _rms_norm_invariant,
    _rms_norm_reference,
    fused_add_rms_norm,
    rms_norm,
)
from ircore.ops._quant import E4M3FN, E4M3FNUZ

_FLOAT = _checks.FLOAT_DTYPES


# ---------------------------------------------------------------------- checks
def _norm_fast(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> bool:
    """The common valid norm part in one expression (the careful checks name what is wrong)."""
    try:
        return bool(
            epsilon.__class__ is float
            and epsilon >= 0.0
            and x.dtype in _FLOAT
            and x.dim() >= 2
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
        )
    except (AttributeError, IndexError, TypeError):
        return False


def _residual_fast(x: torch.Tensor, x_residual: torch.Tensor) -> bool:
    try:
        return bool(
            x_residual.dtype == x.dtype and x_residual.shape == x.shape and x_residual.device == x.device
        )
    except AttributeError:
        return False


def _norm_checks(
    op: str, x: torch.Tensor, x_residual: torch.Tensor | None, weight: torch.Tensor | None, epsilon: float
) -> None:
    _quant.check_quant_x(op, x)
    if x_residual is not None:
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


def _static_fast(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> bool:
    try:
        return bool(
            (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and scale.numel() == 1
            and scale.dtype in _FLOAT
            and scale.device == x.device
            and (num_token_padding is None or num_token_padding >= 0)
        )
    except (AttributeError, TypeError):
        return False


def _static_checks(
    op: str,
    x: torch.Tensor,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None,
    of: str = "x's last two dimensions",
) -> None:
    _quant.check_static_scale(op, x, scale, of)
    _quant.check_fp8_dtype(op, fp8_dtype)
    _quant.check_padding(op, num_token_padding)


def _dynamic_fast(
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> bool:
    try:
        return bool(
            (per_token is True or (per_token is False and x.numel()))
            and (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and scale_ub is None
            and (num_token_padding is None or num_token_padding >= 0)
        )
    except (AttributeError, TypeError):
        return False


def _dynamic_checks(
    op: str,
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> None:
    _quant.check_per_tensor_rows(op, x, per_token)
    _quant.check_fp8_dtype(op, fp8_dtype)
    if scale_ub is not None:
        _quant.check_scale_ub(op, x, scale_ub)
    _quant.check_padding(op, num_token_padding)


def _group_fast(
    group_shape: list[int], column_major: bool, use_ue8m0: bool, fp8_dtype: torch.dtype, scale_alignment: int
) -> bool:
    try:
        return bool(
            (fp8_dtype is E4M3FN or fp8_dtype is E4M3FNUZ)
            and len(group_shape) == 2
            and group_shape[0] == 1
            and group_shape[1] >= 1
            and scale_alignment == 1
            and column_major.__class__ is bool
            and use_ue8m0.__class__ is bool
        )
    except (AttributeError, IndexError, TypeError):
        return False


def _group_checks(
    op: str,
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> None:
    _quant.check_group_args(op, x, group_shape, column_major, scale_alignment)
    _quant.check_fp8_dtype(op, fp8_dtype)


# ---------------------------------------------------------------------- references
def _normed(x: torch.Tensor, weight: torch.Tensor | None, epsilon: float) -> torch.Tensor:
    """The norm's output in fp64, rounded to x's dtype (the rounding is part of the op)."""
    return _rms_norm_reference(x, weight, epsilon, None).to(x.dtype)


def _summed(x: torch.Tensor, x_residual: torch.Tensor) -> torch.Tensor:
    return (x.double() + x_residual.double()).to(x.dtype)


def _silu_mul(x: torch.Tensor) -> torch.Tensor:
    return _silu_and_mul_reference(x).to(x.dtype)


# ---------------------------------------------------------------------- samples
def _weight(hidden: int, dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    return _samples.randn((hidden,), dtype, device, gen, scale=0.1, shift=1.0)


def _residual_for(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    r = _samples.randn(x.shape, x.dtype, x.device, gen)
    if not x.is_contiguous():  # the residual with x's layout
        r = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(r)
    return r


def _norm_samples(
    base: Iterator[Sample], dtype: torch.dtype, device: str, seed: int, add: bool
) -> Iterator[Sample]:
    """Each quant sample's x with a weight (None on the first) and epsilon in front; with ``add``
    a residual too."""
    gen = _samples.generator(seed + 30, device)
    for i, sample in enumerate(base):
        x, *quant = sample.args
        w = None if i == 0 else _weight(x.shape[-1], dtype, device, gen)
        label = sample.label + (" weight=None" if w is None else "")
        norm = (x, _residual_for(x, gen)) if add else (x,)
        yield Sample((*norm, w, 1e-6, *quant), label)


def _static_norm_base(dtype: torch.dtype, device: str, seed: int) -> Iterator[Sample]:
    # the norm's output is ~1: scales of 0.002..0.02 put it near and past the fp8 maximum
    keep = ("0-d", "e4m3fnuz (max 224)", "(M,1)", "group scale", "beyond", "stride", "2x3x64", "0x64")
    return (s for s in _quant.static_samples(dtype, device, seed) if any(k in s.label for k in keep))


def _dynamic_norm_base(dtype: torch.dtype, device: str, seed: int) -> Iterator[Sample]:
    keep = ("a zero row", "7x256 per-tensor", "scale_ub", "per-tensor e4m3fnuz", "one row", "2x3x64", "0x64")
    return (s for s in _quant.dynamic_samples(dtype, device, seed) if any(k in s.label for k in keep))


def _group_norm_base(dtype: torch.dtype, device: str, seed: int) -> Iterator[Sample]:
    keep = ("zero groups", "TMA", "e4m3fnuz", "ragged last", "stride", "2x3x128", "0x128")
    return (s for s in _quant.group_samples(dtype, device, seed) if any(k in s.label for k in keep))


def _make_norm(quant_inputs: tuple, dtype: torch.dtype, device: str, seed: int, add: bool) -> tuple:
    x, *quant = quant_inputs
    gen = _samples.generator(seed + 1, device)
    w = _weight(x.shape[-1], dtype, device, gen)
    norm = (x, _samples.randn(x.shape, dtype, device, gen)) if add else (x,)
    return (*norm, w, 1e-6, *quant)


# ====================================================================== rms_norm + static
def _check_rms_static(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None,
) -> None:
    if _norm_fast(x, weight, epsilon) and _static_fast(x, scale, fp8_dtype, num_token_padding):
        return
    op = "rms_norm_static_fp8_quant"
    _checks.check_types(op, x, weight, epsilon, scale, fp8_dtype, num_token_padding)
    _norm_checks(op, x, None, weight, epsilon)
    _static_checks(op, x, scale, fp8_dtype, num_token_padding)


def _rms_static_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None,
) -> torch.Tensor:
    return _quant.static_reference(_normed(x, weight, epsilon), scale, fp8_dtype, num_token_padding)


def _rms_static_invariant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> torch.Tensor:
    """The native with the norm's fixed-order form (batch-invariant mode)."""
    y = _rms_norm_invariant(x, weight, epsilon)
    return _quant.static_quant_fp8.native(y, scale, fp8_dtype, num_token_padding)


@register_op(
    check_args=_check_rms_static,
    tolerances=NORM_TOLERANCES,
    sample_inputs=lambda dtype, device, seed=0: _norm_samples(
        _static_norm_base(dtype, device, seed), dtype, device, seed, False
    ),
    make_inputs=lambda shape, dtype, device, seed=0: _make_norm(
        _quant.make_static_inputs(shape, dtype, device, seed), dtype, device, seed, False
    ),
    reference=_rms_static_reference,
    quantized_outputs=_quant.static_view(0, lambda a: a[0].shape[0], lambda a: a[0], 3),
    batch_invariant=_rms_static_invariant,
    batch_dependent=lambda x, w, eps, scale, *rest: _quant.static_scale_dependence(x, scale),
)
def rms_norm_static_fp8_quant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> torch.Tensor:
    """``static_quant_fp8(rms_norm(x, weight, epsilon), scale, fp8_dtype, num_token_padding)``."""
    y = rms_norm.native(x, weight, epsilon, None)
    return _quant.static_quant_fp8.native(y, scale, fp8_dtype, num_token_padding)


def _check_add_rms_static(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None,
) -> None:
    if (
        _norm_fast(x, weight, epsilon)
        and _residual_fast(x, x_residual)
        and _static_fast(x, scale, fp8_dtype, num_token_padding)
    ):
        return
    op = "fused_add_rms_norm_static_fp8_quant"
    _checks.check_types(op, x, x_residual, weight, epsilon, scale, fp8_dtype, num_token_padding)
    _norm_checks(op, x, x_residual, weight, epsilon)
    _static_checks(op, x, scale, fp8_dtype, num_token_padding)


def _add_rms_static_reference(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    residual = _summed(x, x_residual)
    return _rms_static_reference(
        residual, weight, epsilon, scale, fp8_dtype, num_token_padding
    ), residual.double()


def _add_rms_static_invariant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The native with the norm's fixed-order form (batch-invariant mode)."""
    y, residual = _fused_add_rms_norm_invariant(x, x_residual, weight, epsilon)
    return _quant.static_quant_fp8.native(y, scale, fp8_dtype, num_token_padding), residual


@register_op(
    check_args=_check_add_rms_static,
    tolerances=NORM_TOLERANCES,
    sample_inputs=lambda dtype, device, seed=0: _norm_samples(
        _static_norm_base(dtype, device, seed), dtype, device, seed, True
    ),
    make_inputs=lambda shape, dtype, device, seed=0: _make_norm(
        _quant.make_static_inputs(shape, dtype, device, seed), dtype, device, seed, True
    ),
    reference=_add_rms_static_reference,
    quantized_outputs=_quant.static_view(0, lambda a: a[0].shape[0], lambda a: a[0], 4),
    batch_invariant=_add_rms_static_invariant,
    batch_dependent=lambda x, r, w, eps, scale, *rest: _quant.static_scale_dependence(x, scale),
)
def fused_add_rms_norm_static_fp8_quant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``out, residual = fused_add_rms_norm(x, x_residual, weight, epsilon)``, then returns
    ``(static_quant_fp8(out, scale, fp8_dtype, num_token_padding), residual)``."""
    y, residual = fused_add_rms_norm.native(x, x_residual, weight, epsilon, None)
    return _quant.static_quant_fp8.native(y, scale, fp8_dtype, num_token_padding), residual


# ====================================================================== rms_norm + dynamic
def _check_rms_dynamic(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> None:
    if _norm_fast(x, weight, epsilon) and _dynamic_fast(x, per_token, fp8_dtype, scale_ub, num_token_padding):
        return
    op = "rms_norm_dynamic_quant_fp8"
    _checks.check_types(op, x, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding)
    _norm_checks(op, x, None, weight, epsilon)
    _dynamic_checks(op, x, per_token, fp8_dtype, scale_ub, num_token_padding)


def _rms_dynamic_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _quant.dynamic_reference(
        _normed(x, weight, epsilon), per_token, fp8_dtype, scale_ub, num_token_padding
    )


def _rms_dynamic_invariant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The native with the norm's fixed-order form (batch-invariant mode, per token only)."""
    y = _rms_norm_invariant(x, weight, epsilon)
    return _quant.dynamic_quant_fp8.native(y, per_token, fp8_dtype, scale_ub, num_token_padding)


@register_op(
    check_args=_check_rms_dynamic,
    tolerances=NORM_TOLERANCES,
    sample_inputs=lambda dtype, device, seed=0: _norm_samples(
        _dynamic_norm_base(dtype, device, seed), dtype, device, seed, False
    ),
    make_inputs=lambda shape, dtype, device, seed=0: _make_norm(
        _quant.make_dynamic_inputs(shape, dtype, device, seed), dtype, device, seed, False
    ),
    reference=_rms_dynamic_reference,
    quantized_outputs=_quant.dynamic_view(0, 1, lambda a: a[0].shape[0], 4),
    batch_invariant=_rms_dynamic_invariant,
    batch_dependent=lambda x, w, eps, per_token, *rest: _quant.per_tensor_dependence(per_token),
)
def rms_norm_dynamic_quant_fp8(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``dynamic_quant_fp8(rms_norm(x, weight, epsilon), per_token, fp8_dtype, scale_ub,
    num_token_padding)``: ``(q, scale)``. Per-tensor (``per_token=False``) depends on the whole batch."""
    y = rms_norm.native(x, weight, epsilon, None)
    return _quant.dynamic_quant_fp8.native(y, per_token, fp8_dtype, scale_ub, num_token_padding)


def _check_add_rms_dynamic(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> None:
    if (
        _norm_fast(x, weight, epsilon)
        and _residual_fast(x, x_residual)
        and _dynamic_fast(x, per_token, fp8_dtype, scale_ub, num_token_padding)
    ):
        return
    op = "fused_add_rms_norm_dynamic_quant_fp8"
    _checks.check_types(op, x, x_residual, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding)
    _norm_checks(op, x, x_residual, weight, epsilon)
    _dynamic_checks(op, x, per_token, fp8_dtype, scale_ub, num_token_padding)


def _add_rms_dynamic_reference(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    num_token_padding: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    residual = _summed(x, x_residual)
    q, scale = _rms_dynamic_reference(
        residual, weight, epsilon, per_token, fp8_dtype, scale_ub, num_token_padding
    )
    return q, scale, residual.double()


def _add_rms_dynamic_invariant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The native with the norm's fixed-order form (batch-invariant mode, per token only)."""
    y, residual = _fused_add_rms_norm_invariant(x, x_residual, weight, epsilon)
    q, scale = _quant.dynamic_quant_fp8.native(y, per_token, fp8_dtype, scale_ub, num_token_padding)
    return q, scale, residual


@register_op(
    check_args=_check_add_rms_dynamic,
    tolerances=NORM_TOLERANCES,
    sample_inputs=lambda dtype, device, seed=0: _norm_samples(
        _dynamic_norm_base(dtype, device, seed), dtype, device, seed, True
    ),
    make_inputs=lambda shape, dtype, device, seed=0: _make_norm(
        _quant.make_dynamic_inputs(shape, dtype, device, seed), dtype, device, seed, True
    ),
    reference=_add_rms_dynamic_reference,
    quantized_outputs=_quant.dynamic_view(0, 1, lambda a: a[0].shape[0], 5),
    batch_invariant=_add_rms_dynamic_invariant,
    batch_dependent=lambda x, r, w, eps, per_token, *rest: _quant.per_tensor_dependence(per_token),
)
def fused_add_rms_norm_dynamic_quant_fp8(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``out, residual = fused_add_rms_norm(x, x_residual, weight, epsilon)``, then
    ``(q, scale, residual)`` with ``q, scale = dynamic_quant_fp8(out, per_token, fp8_dtype,
    scale_ub, num_token_padding)``. Per-tensor depends on the whole batch."""
    y, residual = fused_add_rms_norm.native(x, x_residual, weight, epsilon, None)
    q, scale = _quant.dynamic_quant_fp8.native(y, per_token, fp8_dtype, scale_ub, num_token_padding)
    return q, scale, residual


# ====================================================================== rms_norm + group
def _check_rms_group(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> None:
    if _norm_fast(x, weight, epsilon) and _group_fast(
        group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    ):
        return
    op = "rms_norm_group_quant_fp8"
    _checks.check_types(
        op, x, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    _norm_checks(op, x, None, weight, epsilon)
    _group_checks(op, x, group_shape, column_major, fp8_dtype, scale_alignment)


def _rms_group_reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    y = _normed(x, weight, epsilon)
    return _quant.group_reference(y, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)


def _rms_group_invariant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The native with the norm's fixed-order form (batch-invariant mode)."""
    y = _rms_norm_invariant(x, weight, epsilon)
    return _quant.dynamic_group_quant_fp8.native(
        y, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


@register_op(
    check_args=_check_rms_group,
    tolerances=NORM_TOLERANCES,
    sample_inputs=lambda dtype, device, seed=0: _norm_samples(
        _group_norm_base(dtype, device, seed), dtype, device, seed, False
    ),
    make_inputs=lambda shape, dtype, device, seed=0: _make_norm(
        _quant.make_group_inputs(shape, dtype, device, seed), dtype, device, seed, False
    ),
    reference=_rms_group_reference,
    quantized_outputs=_quant.group_view(0, 1, 3, 6),
    batch_invariant=_rms_group_invariant,
)
def rms_norm_group_quant_fp8(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``dynamic_group_quant_fp8(rms_norm(x, weight, epsilon), group_shape, column_major,
    use_ue8m0, fp8_dtype, scale_alignment)``: ``(q, scales)``."""
    y = rms_norm.native(x, weight, epsilon, None)
    return _quant.dynamic_group_quant_fp8.native(
        y, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


def _check_add_rms_group(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> None:
    if (
        _norm_fast(x, weight, epsilon)
        and _residual_fast(x, x_residual)
        and _group_fast(group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)
    ):
        return
    op = "fused_add_rms_norm_group_quant_fp8"
    _checks.check_types(
        op, x, x_residual, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    _norm_checks(op, x, x_residual, weight, epsilon)
    _group_checks(op, x, group_shape, column_major, fp8_dtype, scale_alignment)


def _add_rms_group_reference(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    residual = _summed(x, x_residual)
    q, scales = _rms_group_reference(
        residual, weight, epsilon, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    return q, scales, residual.double()


def _add_rms_group_invariant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The native with the norm's fixed-order form (batch-invariant mode)."""
    y, residual = _fused_add_rms_norm_invariant(x, x_residual, weight, epsilon)
    q, scales = _quant.dynamic_group_quant_fp8.native(
        y, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    return q, scales, residual


@register_op(
    check_args=_check_add_rms_group,
    tolerances=NORM_TOLERANCES,
    sample_inputs=lambda dtype, device, seed=0: _norm_samples(
        _group_norm_base(dtype, device, seed), dtype, device, seed, True
    ),
    make_inputs=lambda shape, dtype, device, seed=0: _make_norm(
        _quant.make_group_inputs(shape, dtype, device, seed), dtype, device, seed, True
    ),
    reference=_add_rms_group_reference,
    quantized_outputs=_quant.group_view(0, 1, 4, 7),
    batch_invariant=_add_rms_group_invariant,
)
def fused_add_rms_norm_group_quant_fp8(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``out, residual = fused_add_rms_norm(x, x_residual, weight, epsilon)``, then
    ``(q, scales, residual)`` with ``q, scales = dynamic_group_quant_fp8(out, ...)``."""
    y, residual = fused_add_rms_norm.native(x, x_residual, weight, epsilon, None)
    q, scales = _quant.dynamic_group_quant_fp8.native(
        y, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
    return q, scales, residual


# ====================================================================== silu_and_mul + quant
def _check_gate(op: str, x: torch.Tensor) -> None:
    _quant.check_quant_x(op, x)
    if x.shape[-1] % 2:
        _checks.bad_argument(
            op,
            "x",
            f"has last dimension {x.shape[-1]} (shape {tuple(x.shape)}); it must be even: the two halves "
            "[gate, up] of equal size",
        )


def _half(x: torch.Tensor) -> torch.Tensor:
    """A view with the shape of silu_and_mul's output (what the scale broadcasts over)."""
    return x[..., : x.shape[-1] // 2]


def _check_silu_static(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> None:
    try:
        if (
            x.dtype in _FLOAT
            and x.dim() >= 2
            and (d := x.shape[-1])
            and not d % 2
            and _static_fast(x, scale, fp8_dtype, num_token_padding)
        ):
            return
    except (AttributeError, IndexError):
        pass
    op = "silu_and_mul_static_quant_fp8"
    _checks.check_types(op, x, scale, fp8_dtype, num_token_padding)
    _check_gate(op, x)
    of = "the output's last two dimensions (x's, the last one halved)"
    _static_checks(op, _half(x), scale, fp8_dtype, num_token_padding, of)


def _silu_static_reference(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None
) -> torch.Tensor:
    return _quant.static_reference(_silu_mul(x), scale, fp8_dtype, num_token_padding)


def _silu_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    """The quant samples' inputs, as [gate, up] halves of twice the width (scaled by 2)."""
    gen = _samples.generator(seed + 31, device)
    for sample in _static_norm_base(dtype, device, seed):
        x, *quant = sample.args
        up = _samples.randn(x.shape, dtype, device, gen, scale=2.0)
        if not x.is_contiguous():
            continue
        yield Sample((torch.cat([x, up], dim=-1), *quant), sample.label + " [gate, up]")


def _make_silu_static(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    x = _samples.randn(shape, dtype, device, _samples.generator(seed, device), scale=2.0)
    return (x, torch.full((1,), 0.02, device=device), E4M3FN, None)


@register_op(
    check_args=_check_silu_static,
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_silu_samples,
    make_inputs=_make_silu_static,
    reference=_silu_static_reference,
    quantized_outputs=_quant.static_view(0, lambda a: a[0].shape[0], lambda a: _half(a[0]), 1),
    batch_invariant=True,  # elementwise
    batch_dependent=lambda x, scale, *rest: _quant.static_scale_dependence(_half(x), scale),
)
def silu_and_mul_static_quant_fp8(
    x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype, num_token_padding: int | None = None
) -> torch.Tensor:
    """``static_quant_fp8(silu_and_mul(x), scale, fp8_dtype, num_token_padding)``; the scale
    broadcasts over the output's shape (half of x's last dimension)."""
    return _quant.static_quant_fp8.native(silu_and_mul.native(x), scale, fp8_dtype, num_token_padding)


def _check_silu_group(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> None:
    try:
        if (
            x.dtype in _FLOAT
            and x.dim() >= 2
            and (d := x.shape[-1])
            and not d % 2
            and _group_fast(group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)
        ):
            return
    except (AttributeError, IndexError):
        pass
    op = "silu_and_mul_group_quant_fp8"
    _checks.check_types(op, x, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment)
    _check_gate(op, x)
    _group_checks(op, x, group_shape, column_major, fp8_dtype, scale_alignment)


def _silu_group_reference(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    return _quant.group_reference(
        _silu_mul(x), group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )


def _silu_group_samples(dtype: torch.dtype, device: str, seed: int = 0) -> Iterator[Sample]:
    gen = _samples.generator(seed + 32, device)
    for sample in _group_norm_base(dtype, device, seed):
        x, *quant = sample.args
        if not x.is_contiguous():
            continue
        up = _samples.randn(x.shape, dtype, device, gen, scale=2.0)
        yield Sample((torch.cat([x, up], dim=-1), *quant), sample.label + " [gate, up]")


def _make_silu_group(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int = 0) -> tuple:
    x = _samples.randn(shape, dtype, device, _samples.generator(seed, device), scale=2.0)
    return (x, [1, min(128, max(1, shape[-1] // 2))], False, False, E4M3FN, 1)


@register_op(
    check_args=_check_silu_group,
    tolerances=ACTIVATION_TOLERANCES,
    sample_inputs=_silu_group_samples,
    make_inputs=_make_silu_group,
    reference=_silu_group_reference,
    quantized_outputs=_quant.group_view(0, 1, 1, 4),
    batch_invariant=True,  # elementwise, then each group's exact max
)
def silu_and_mul_group_quant_fp8(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``dynamic_group_quant_fp8(silu_and_mul(x), group_shape, column_major, use_ue8m0,
    fp8_dtype, scale_alignment)``: groups along the output's last dimension (half of x's)."""
    y = silu_and_mul.native(x)
    return _quant.dynamic_group_quant_fp8.native(
        y, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment
    )
