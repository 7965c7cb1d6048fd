"""Triton kernels and launchers for the gated activations: gelu_and_mul, mul_and_silu,
fatrelu_and_mul and swigluoai_and_mul.

Each program computes a ``BLOCK_M x BLOCK_D`` tile of the output from the matching tiles of the
two halves of x (or, for swigluoai_and_mul, from the even and odd columns of a ``2 * BLOCK_D``
span): one read and one write per element, fp32 math, one rounding to x's dtype. Which function
is a ``constexpr`` (one compiled kernel per function). The launch config is a heuristic (tile by
output width and row count; no autotuning yet). PDL as in :mod:`ircore_triton.kernels`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .kernels import _as_rows, _device_ctx, _launch_opts, _off_current_device, interpreting

__all__ = ["fatrelu_and_mul", "gelu_and_mul", "mul_and_silu", "swigluoai_and_mul"]

# The ACT constexpr of _gated_act_kernel.
_GELU_ERF, _GELU_TANH, _MUL_SILU, _FATRELU = 0, 1, 2, 3


@triton.jit(do_not_specialize=["n_rows", "param"])
def _gated_act_kernel(
    X, Y, n_rows, D, stride_x, stride_y, param,
    ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """y = act(x[:, :D], x[:, D:]) in fp32 (ACT: gelu erf, gelu tanh, a * silu(b), threshold)."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows < n_rows)[:, None] & (cols < D)[None, :]
    x_ptr = X + rows[:, None] * stride_x + cols[None, :]
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    a = tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + D, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if ACT == 0:  # 0.5 a (1 + erf(a / sqrt(2)))
        y = 0.5 * a * (1.0 + tl.math.erf(a * 0.7071067811865476)) * b
    elif ACT == 1:  # 0.5 a (1 + tanh(u)), u = sqrt(2/pi) (a + 0.044715 a^3), tanh(u) = 2 sigmoid(2u) - 1:
        # torch's form, exactly 0 where tanh reaches -1 in fp32 (so 0 * inf is NaN, as native's)
        th = 2.0 * tl.sigmoid(1.5957691216057308 * a * (1.0 + 0.044715 * a * a)) - 1.0
        y = 0.5 * a * (1.0 + th) * b
    elif ACT == 2:
        y = a * (b * tl.sigmoid(b))
    else:  # F.threshold(a, param, 0): NaN a stays NaN
        y = tl.where(a <= param, 0.0, a) * b
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows", "alpha", "limit"])
def _swigluoai_kernel(
    X, Y, n_rows, D, stride_x, stride_y, alpha, limit,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """y[:, j] = (clamp(x[:, 2j+1], -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(x[:, 2j], limit)."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows < n_rows)[:, None] & (cols < D)[None, :]
    x_ptr = X + rows[:, None] * stride_x + 2 * cols[None, :]
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    g = tl.load(x_ptr, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + 1, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    g = tl.where(g > limit, limit, g)  # as torch's clamp: NaN stays NaN
    u = tl.where(u > limit, limit, tl.where(u < -limit, -limit, u))
    y = (u + 1.0) * (g * tl.sigmoid(alpha * g))
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


def _tile(rows: int, d: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_D, num_warps): about 4K outputs per program on a GPU (16K in Triton's
    interpreter, where each program costs Python time), whole short rows in one tile."""
    budget = 16384 if interpreting() else 4096
    block_d = min(triton.next_power_of_2(d), 1024 if budget == 4096 else budget)
    block_m = max(1, min(triton.next_power_of_2(rows), budget // block_d))
    return block_m, block_d, 4 if block_m * block_d >= 2048 else 2


def _launch(kernel, x: torch.Tensor, *params, **constexprs) -> torch.Tensor:
    d = x.shape[-1] // 2
    y = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    rows = y.numel() // d if d else 0
    if rows == 0:
        return y
    x2 = _as_rows(x, x.shape[-1])
    block_m, block_d, warps = _tile(rows, d)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(d, block_d))
    kernel[grid](
        x2, y, rows, d, x2.stride(0), d, *params,
        BLOCK_M=block_m, BLOCK_D=block_d, num_warps=warps, **constexprs, **_launch_opts(x.device),
    )  # fmt: skip
    return y


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """``gelu(x[..., :d], approximate) * x[..., d:]`` into a new tensor (``approximate``: "none", "tanh")."""
    if _off_current_device(x):
        with _device_ctx(x):
            return gelu_and_mul(x, approximate)
    act = _GELU_TANH if approximate == "tanh" else _GELU_ERF
    return _launch(_gated_act_kernel, x, 0.0, ACT=act)


def mul_and_silu(x: torch.Tensor) -> torch.Tensor:
    """``x[..., :d] * silu(x[..., d:])`` into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return mul_and_silu(x)
    return _launch(_gated_act_kernel, x, 0.0, ACT=_MUL_SILU)


def fatrelu_and_mul(x: torch.Tensor, threshold: float = 0.0) -> torch.Tensor:
    """``F.threshold(x[..., :d], threshold, 0) * x[..., d:]`` into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return fatrelu_and_mul(x, threshold)
    return _launch(_gated_act_kernel, x, float(threshold), ACT=_FATRELU)


def swigluoai_and_mul(x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """GPT-OSS's clamped SwiGLU on interleaved (gate, up) pairs into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return swigluoai_and_mul(x, alpha, limit)
    return _launch(_swigluoai_kernel, x, float(alpha), float(limit))
