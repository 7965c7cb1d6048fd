"""Triton kernels and launchers for the gated activations: gelu_and_mul, mul_and_silu,
fatrelu_and_mul and swigluoai_and_mul.

Each program computes a ``BLOCK_M x BLOCK_D`` tile of the output from the matching tiles of the
two halves of x (or, for swigluoai_and_mul, from the even and odd columns of a ``2 * BLOCK_D``
span): one read and one write per element, fp32 math, one rounding to x's dtype. Which function
is a ``constexpr`` (one compiled kernel per function). PDL as in :mod:`ircore_triton.kernels`.

The launch (:class:`~ircore_triton.kernels.ActConfig`) is tuned per (function, output width,
dtype, row-count bucket) by the autotune of :mod:`ircore_triton.kernels` (``_pick``: each
candidate timed once per key on the GPU, the fastest cached). The candidates start with the
heuristic tile (:func:`_tile`, the only launch before tuning existed, and what runs with the
autotune off, under the interpreter and inside CUDA-graph capture), then:

- narrow column tiles at small T (128..2048 columns, one row): one row of 14336 outputs in tiles
  of 1024 is 14 programs at T = 1, which leaves most SMs idle; 256 makes it 56;
- wider tiles at large T (1024..4096 columns), 1 or 2 16-byte vectors per thread;
- for swigluoai_and_mul, the same tiles with ``split``: one contiguous load of the interleaved
  (gate, up) span, deinterleaved in registers (``tl.reshape`` + ``tl.split``), instead of two
  stride-2 loads that cannot be 16-byte vectors.

Every candidate computes each output element with the same operations on the same two inputs
(the tile only decides which program computes it and how it is loaded), so tuning by row count
keeps these ops batch-invariant.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from . import kernels as _k
from .kernels import ActConfig, _as_rows, _device_ctx, _launch_opts, _off_current_device, interpreting

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
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, SPLIT: tl.constexpr = False, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """y[:, j] = (clamp(x[:, 2j+1], -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(x[:, 2j], limit).

    SPLIT: the ``2 * BLOCK_D`` interleaved inputs are one contiguous load, split into gate
    (even) and up (odd) in registers; else two stride-2 loads. Same values either way."""
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows < n_rows)[:, None] & (cols < D)[None, :]
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    if SPLIT:
        cols2 = tl.program_id(1) * (2 * BLOCK_D) + tl.arange(0, 2 * BLOCK_D)
        mask2 = (rows < n_rows)[:, None] & (cols2 < 2 * D)[None, :]
        xy = tl.load(X + rows[:, None] * stride_x + cols2[None, :], mask=mask2, other=0.0).to(tl.float32)
        g, u = tl.split(tl.reshape(xy, (BLOCK_M, BLOCK_D, 2)))
    else:
        x_ptr = X + rows[:, None] * stride_x + 2 * cols[None, :]
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


def _heuristic(rows: int, d: int) -> ActConfig:
    return ActConfig(*_tile(rows, d))


def _candidates(d: int, rows: int, elem_bytes: int, interleaved: bool) -> list[ActConfig]:
    """The heuristic tile first, then tiles aimed at small T (narrow, more programs) or large T
    (wide), 1 or 2 16-byte vectors per thread; for interleaved inputs the tiles with ``split``."""
    out = [_heuristic(rows, d)]
    pd = max(triton.next_power_of_2(d), 16)
    if pd <= 1024:  # short rows: several whole rows per program
        tiles = sorted({(max(1, min(triton.next_power_of_2(rows), e // pd)), pd) for e in (2048, 4096)})
    else:
        if rows <= 1:
            widths: tuple[int, ...] = (128, 256, 512, 1024)
        else:
            widths = (256, 512, 1024, 2048) if rows <= 16 else (1024, 2048, 4096)
        tiles = [(1, bd) for bd in widths if bd <= pd]
    for bm, bd in tiles:
        for vectors in (1, 2):
            c = ActConfig(bm, bd, _k._silu_warps(bm * bd, elem_bytes, vectors), interleaved)
            if c not in out:
                out.append(c)
    if interleaved:  # the heuristic tile, deinterleaved in registers
        h = out[0]
        c = ActConfig(h.block_m, h.block_d, h.num_warps, True)
        if c not in out:
            out.insert(1, c)
    return out


def _run(
    kernel, cfg: ActConfig, x2: torch.Tensor, y2: torch.Tensor, rows: int, d: int, params, constexprs
) -> None:
    grid = (_k.cdiv(rows, cfg.block_m), _k.cdiv(d, cfg.block_d))
    extra = {"SPLIT": True} if cfg.split else {}
    kernel[grid](
        x2, y2, rows, d, x2.stride(0), y2.stride(0), *params,
        BLOCK_M=cfg.block_m, BLOCK_D=cfg.block_d, num_warps=cfg.num_warps, **extra, **constexprs,
        **_launch_opts(x2.device),
    )  # fmt: skip


def _config(op: str, kernel, x2: torch.Tensor, rows: int, d: int, params, constexprs) -> ActConfig:
    key = (op, d, x2.dtype, _k._bucket(rows))
    cfg = _k._CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]
    interleaved = kernel is _swigluoai_kernel

    def tune() -> ActConfig:
        t_rows = _k._bucket_rows(key[3], 2 * d)
        xs = torch.full((t_rows, 2 * d), 0.5, dtype=x2.dtype, device=x2.device)  # RNG untouched
        ys = torch.empty(t_rows, d, dtype=x2.dtype, device=x2.device)

        def make(c: ActConfig) -> Callable[[], None]:
            return lambda: _run(kernel, c, xs, ys, t_rows, d, params, constexprs)

        cands = _candidates(d, t_rows, x2.element_size(), interleaved)
        return _k._pick(key, cands, make, x2.device)

    return _k._untuned(lambda: _heuristic(rows, d), tune, x2.device)  # type: ignore[return-value]


def _launch(
    op: str, kernel, x: torch.Tensor, *params, config: ActConfig | None = None, **constexprs
) -> torch.Tensor:
    d = x.shape[-1] // 2
    y = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    rows = y.numel() // d if d else 0
    if rows == 0:
        return y
    x2 = _as_rows(x, x.shape[-1])
    cfg = config or _config(op, kernel, x2, rows, d, params, constexprs)
    _run(kernel, cfg, x2, y.view(rows, d), rows, d, params, constexprs)
    return y


def gelu_and_mul(x: torch.Tensor, approximate: str = "none", config: ActConfig | None = None) -> torch.Tensor:
    """``gelu(x[..., :d], approximate) * x[..., d:]`` into a new tensor (``approximate``: "none",
    "tanh"; ``config`` overrides the tuned launch)."""
    if _off_current_device(x):
        with _device_ctx(x):
            return gelu_and_mul(x, approximate, config)
    if approximate == "tanh":
        return _launch("gelu_tanh_and_mul", _gated_act_kernel, x, 0.0, config=config, ACT=_GELU_TANH)
    return _launch("gelu_and_mul", _gated_act_kernel, x, 0.0, config=config, ACT=_GELU_ERF)


def mul_and_silu(x: torch.Tensor, config: ActConfig | None = None) -> torch.Tensor:
    """``x[..., :d] * silu(x[..., d:])`` into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return mul_and_silu(x, config)
    return _launch("mul_and_silu", _gated_act_kernel, x, 0.0, config=config, ACT=_MUL_SILU)


def fatrelu_and_mul(x: torch.Tensor, threshold: float = 0.0, config: ActConfig | None = None) -> torch.Tensor:
    """``F.threshold(x[..., :d], threshold, 0) * x[..., d:]`` into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return fatrelu_and_mul(x, threshold, config)
    return _launch("fatrelu_and_mul", _gated_act_kernel, x, float(threshold), config=config, ACT=_FATRELU)


def swigluoai_and_mul(
    x: torch.Tensor, alpha: float = 1.702, limit: float = 7.0, config: ActConfig | None = None
) -> torch.Tensor:
    """GPT-OSS's clamped SwiGLU on interleaved (gate, up) pairs into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return swigluoai_and_mul(x, alpha, limit, config)
    return _launch("swigluoai_and_mul", _swigluoai_kernel, x, float(alpha), float(limit), config=config)
