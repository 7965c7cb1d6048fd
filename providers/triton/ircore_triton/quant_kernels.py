"""Triton kernels and launchers for the fp8 quant ops and the fused RMSNorm / SiLU-and-mul + quant
ops (``ircore.ops._quant``, ``ircore.ops._norm_quant``).

One kernel, specialised by constexprs (and a sibling for the norm forms' chunked walk, below,
sharing its quant stage). The norm forms and the per-token / per-tensor scales need
the whole row: one program per row on a GPU (several under the interpreter, where each program
costs milliseconds), the row (or, for silu_and_mul, both halves) read once into registers laid
out as ``[groups, group width]`` (one group of the whole row for the per-tensor and per-token
ops). The static forms and the group forms without a norm (``static_quant_fp8``,
``static_group_quant_fp8``, ``silu_and_mul_static_quant_fp8``, ``dynamic_group_quant_fp8``,
``silu_and_mul_group_quant_fp8``) need no more than a group: their rows may be split over a 2-D
grid (rows, chunks of whole groups or of columns), the chunk and warps tuned per key
(:func:`candidates`, :class:`~ircore_triton.kernels.QuantConfig`; the whole row, the launch
before the split, first), so that few rows still fill the GPU and wide rows do not sit in one
program's registers. The norm forms (``rms_norm_*_quant*``, ``fused_add_rms_norm_*_quant*``) need
the row's sum of squares before any output: their alternative keeps one program per row but
walks it in chunks of whole groups or of columns (:func:`norm_candidates`,
``_norm_quant_chunked_kernel``): pass 1 sums the squares (and stores the rounded residual sum),
the last pass re-reads each chunk from L2 and quantises it, per-token scales with a pass between
for the row's amax; the whole row first, the chunks tried only where they are narrower than it
(a 14336-wide row in one program is a 16384-element fp32 block on 16 warps: 63-128 registers a
thread on sm_90, one or two such blocks per SM, too few loads in flight). Two more candidates
keep the whole row's bits: a persistent loop over rows with the next row's loads in flight
(:func:`norm_persist_candidates`), and at T <= 16 an rstd pre-pass then the rows split as the
split ops (:func:`norm_split_candidates`); both lay out each row's sum of squares as the whole
row (tools/compile_check.py checks it). The input stage runs in
fp32 (the plain row; the RMSNorm with the residual added and rounded first; silu(gate) * up) and
is rounded to x's dtype as the unfused chain rounds it, then the quant stage:

- static: ``y * (1/scale)``, the scale element addressed per row and column group (per tensor,
  per channel, per token, 2-D group scales: ``prep_static_scale`` then ``group_broadcast``);
- dynamic, per group (per token: one group of the row): ``amax / fp8_max`` (amax clamped by
  ``scale_ub`` first), ue8m0 rounding up to a power of two (by the bits, not ``log2``), then the
  ``min_scale`` floor; ``y * (1/scale)`` for the per-token ops, ``y / scale`` for the group ops,
  as the natives;
- per tensor: two launches around one ``amax`` of the per-row maxima (the second launch
  recomputes the row from x, or from the residual written by the first).

Every path clamps to ``±fp8_max`` (NaN kept) before the cast (vLLM's 224 for e4m3fnuz). The cast
is the hardware's for e4m3fn on NVIDIA GPUs of sm_89 and later, else an exact round-to-nearest-even
encoding by the bits (:func:`_encode_fp8`: e4m3fnuz on any GPU, both types under the interpreter).
The reciprocal and the division are IEEE round-to-nearest (``div_rn``), as torch computes them.
Rows wider than :data:`MAX_ROW_BLOCK` elements in registers are left to other providers (the
predicates). The whole-row launch is fixed per hidden size, group size and dtype (warps by the
block); the split ops' chunking is tuned per row bucket too, but it decides only which program
computes an element or a group (each element, and each group's exact amax, is computed alike in
every chunking: tests/test_tuned_launches.py pins every candidate to the whole row's bits), so
the per-row results do not depend on the batch. The norm forms' chunked walk sums a row's squares
in another order than the whole row (results within the op's tolerance, not the same bits), so
their default launch is batch-variant: the batch-invariant mode runs their invariant variants
(invariant_kernels.py), the whole row fixed per hidden size.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from ircore.ops._quant import fp8_max, min_scale, prep_static_scale, tma_aligned

from . import kernels as _k
from .kernels import QuantConfig, _as_rows, _device_ctx, _launch_opts, _off_current_device
from .norm_kernels import _round_to, _warps

__all__ = [
    "MAX_ROW_BLOCK",
    "candidates",
    "dynamic_group_quant_fp8",
    "dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8",
    "fused_add_rms_norm_static_fp8_quant",
    "heuristic",
    "norm_candidates",
    "norm_persist_candidates",
    "norm_split_candidates",
    "row_block",
    "rms_norm_dynamic_quant_fp8",
    "rms_norm_group_quant_fp8",
    "rms_norm_static_fp8_quant",
    "silu_and_mul_group_quant_fp8",
    "silu_and_mul_static_quant_fp8",
    "static_quant_fp8",
    "tune_hidden",
]

#: Most elements of one row's register block (``groups_pow2 * group_pow2``).
MAX_ROW_BLOCK = 32768

# input stages
_PLAIN, _NORM, _SILU = 0, 1, 2
# quant stages
_STATIC, _DYNAMIC, _AMAX, _FROM_AMAX, _RSTD = 0, 1, 2, 3, 4


@triton.jit
def _ceil_pow2(s):
    """``2 ** ceil(log2(s))`` for ``s >= 0`` by the bits (exact; NaN kept, 0 stays 0)."""
    b = s.to(tl.uint32, bitcast=True)
    r = ((b + 0x7FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)
    return tl.where(s != s, s, r)


@triton.jit
def _encode_fp8(v, BIAS: tl.constexpr, NAN_CODE: tl.constexpr, NEG_ZERO: tl.constexpr):
    """fp32 ``v`` (already clamped to the fp8 range, or NaN) as e4m3 bits, round to nearest even:
    e4m3fn (``BIAS`` 7, NaN 0x7F, a -0) or e4m3fnuz (``BIAS`` 8, NaN 0x80, no -0). By the bits,
    where the hardware cast is not used: Triton's interpreter rounds 127.99 to 64 and has no
    e4m3fnuz; the bits work on every device."""
    b = v.to(tl.uint32, bitcast=True)
    sign = (b >> 31) << 7
    a = tl.where(v == v, tl.abs(v), 0.0)  # NaN: its code is set last (no NaN into an int cast)
    # normals: round the 23-bit mantissa to 3 bits (ties to even), re-bias the exponent
    br = (b & 0x7FFFFFFF) + 0x7FFFF + ((b >> 20) & 1)
    normal = ((((br >> 23) & 0xFF) - 127 + BIAS) << 3) | ((br >> 20) & 7)
    # subnormals (and the smallest normal, code 8): a * 2**(BIAS + 2) rounded to an integer
    sub = ((a * (2.0 ** (BIAS + 2)) + 8388608.0) - 8388608.0).to(tl.uint32)
    code = tl.where(a < 2.0 ** (1 - BIAS), sub, normal)
    if NEG_ZERO:
        code = code | sign
    else:
        code = tl.where(code == 0, code, code | sign)
    code = tl.where(v != v, NAN_CODE, code)
    return code.to(tl.uint8)


@triton.jit
def _group_amax(y):
    """``max |y|`` along the last axis (the group), NaN where the group has a NaN (as torch's
    amax: the scale is then NaN and so is the whole group, as the native gives; ``tl.max`` would skip it)."""
    nan = tl.max((y != y).to(tl.int32), axis=2)
    return tl.where(nan > 0, float("nan"), tl.max(tl.abs(y), axis=2))


@triton.jit
def _dyn_scale(amax, UB, FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, UE8M0: tl.constexpr,
               HAS_UB: tl.constexpr):  # fmt: skip
    """A dynamic scale from its amax: clamped by ``scale_ub``, ``/ fp8_max``, ue8m0 rounding up,
    the ``min_scale`` floor (NaN kept through each step)."""
    if HAS_UB:
        amax = tl.minimum(amax, tl.load(UB).to(tl.float32), propagate_nan=tl.PropagateNan.ALL)
    scale = tl.math.div_rn(amax, tl.full(amax.shape, FP8_MAX, tl.float32))
    if UE8M0:
        scale = _ceil_pow2(scale)
    return tl.maximum(scale, MIN_SCALE, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _store_group_scales(SC, scale, rr, g0, n_rows, K, M, stride_scb, stride_scm, stride_scg,
                        G: tl.constexpr, NG: tl.constexpr):  # fmt: skip
    """``scale`` ``[BLOCK_R, NG]`` of groups ``g0 ...`` of rows ``rr``, in the op's layout."""
    b2 = rr[:, None] // M
    m2 = rr[:, None] % M
    g2 = g0 + tl.arange(0, NG)[None, :]
    tl.store(SC + b2 * stride_scb + m2 * stride_scm + g2 * stride_scg, scale,
             mask=(g2 * G < K) & (rr[:, None] < n_rows))  # fmt: skip


@triton.jit
def _dyn_q(y, scale, DIVIDE: tl.constexpr):
    """``y / scale`` (the group ops) or ``y * (1/scale)`` (per token), ``scale`` ``[BLOCK_R, NG]``."""
    if DIVIDE:
        q = tl.math.div_rn(y, tl.broadcast_to(scale[:, :, None], y.shape))
    else:
        inv = tl.math.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)
        q = y * inv[:, :, None]
    return q


@triton.jit
def _static_q(y, S, r, col, mask, M, gm, gn, stride_sa, stride_sb, SCALAR_SCALE: tl.constexpr):
    """``y * (1/scale)``, the scale element addressed per row and column group."""
    if SCALAR_SCALE:  # one scale: one load, one reciprocal
        sc = tl.load(S).to(tl.float32)
        q = y * tl.math.div_rn(tl.full([], 1.0, tl.float32), sc)
    else:
        m = r % M
        sc = tl.load(S + (m // gm) * stride_sa + (col // gn) * stride_sb, mask=mask, other=1.0)
        q = y * tl.math.div_rn(tl.full(sc.shape, 1.0, tl.float32), sc.to(tl.float32))
    return q


@triton.jit
def _store_q(Q, q, r, col, mask, stride_q, FP8_MAX: tl.constexpr, HW_CAST: tl.constexpr, BIAS: tl.constexpr):
    """Clamp to ``±fp8_max`` (NaN kept), cast (the hardware's or the bits') and store."""
    q = tl.minimum(tl.maximum(q, -FP8_MAX, propagate_nan=tl.PropagateNan.ALL), FP8_MAX,
                   propagate_nan=tl.PropagateNan.ALL)  # fmt: skip
    if HW_CAST:  # e4m3fn on an NVIDIA GPU: the hardware's round-to-nearest-even cast
        tl.store(Q + r * stride_q + col, q.to(tl.float8e4nv), mask=mask)
    else:  # Q is the fp8 output viewed as uint8
        code = _encode_fp8(q, BIAS, 0x7F if BIAS == 7 else 0x80, BIAS == 7)
        tl.store(Q + r * stride_q + col, code, mask=mask)


@triton.jit
def _rows_out(
    xh, up, res, w, rr, r, col, mask, g0,
    RO, S, UB, Q, SC, AMAX,
    n_rows, K, M, stride_q, eps,
    gm, gn, stride_sa, stride_sb,
    stride_scb, stride_scm, stride_scg,
    FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
    IN_MODE: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
    QUANT: tl.constexpr, DIVIDE: tl.constexpr, UE8M0: tl.constexpr, HAS_UB: tl.constexpr,
    G: tl.constexpr, NG: tl.constexpr, SCALAR_SCALE: tl.constexpr,
    HW_CAST: tl.constexpr, BIAS: tl.constexpr, DT: tl.constexpr, SPLIT: tl.constexpr,
):  # fmt: skip
    """Rows ``rr`` of :func:`_quant_rows_kernel` from their loaded block: the input stage, then
    the quant stage and the stores (one body for the one-row programs and the persistent loop)."""
    x = xh.to(tl.float32)
    if IN_MODE == 1:
        if HAS_RES:
            x = _round_to(x + res, DT)
            tl.store(RO + r * K + col, x.to(RO.dtype.element_ty), mask=mask)  # exact: x is rounded
        if SPLIT:  # a chunk of the row: its rstd from the pre-pass (QUANT 4, the whole row's sum)
            rstd = tl.load(AMAX + rr, mask=rr < n_rows, other=1.0)
        else:
            ss = tl.sum(tl.sum(x * x, axis=2), axis=1)
            rstd = tl.rsqrt(ss / K + eps)
        y = x * rstd[:, None, None]
        if HAS_W:
            y = y * w
        y = _round_to(y, DT)
    elif IN_MODE == 2:
        y = _round_to(x * tl.sigmoid(x) * up, DT)
    else:
        y = x
    if QUANT == 2:
        tl.store(AMAX + rr, tl.max(_group_amax(y), axis=1), mask=rr < n_rows)
    elif QUANT == 4:  # the norm's pre-pass: each row's rstd (and the residual sum, stored above)
        tl.store(AMAX + rr, rstd, mask=rr < n_rows)
        # the whole row's fp8 store, never taken (n_rows < 0 is false), so that the row's block is
        # laid out (and its sum of squares ordered) as in the whole-row launch: tools/compile_check.py
        _store_q(Q, y, r, col, mask & (n_rows < 0), stride_q, FP8_MAX, HW_CAST, BIAS)
    else:
        if QUANT == 0:
            q = _static_q(y, S, r, col, mask, M, gm, gn, stride_sa, stride_sb, SCALAR_SCALE)
        elif QUANT == 3:
            amax = tl.load(AMAX).to(tl.float32)
            scale = tl.maximum(tl.math.div_rn(amax, tl.full([], FP8_MAX, tl.float32)), MIN_SCALE,
                               propagate_nan=tl.PropagateNan.ALL)  # fmt: skip
            if tl.program_id(0) == 0:
                tl.store(SC, scale)
            q = y * tl.math.div_rn(tl.full([], 1.0, tl.float32), scale)
        else:
            scale = _dyn_scale(_group_amax(y), UB, FP8_MAX, MIN_SCALE, UE8M0, HAS_UB)  # [BLOCK_R, NG]
            _store_group_scales(SC, scale, rr, g0, n_rows, K, M, stride_scb, stride_scm, stride_scg, G, NG)
            q = _dyn_q(y, scale, DIVIDE)
        _store_q(Q, q, r, col, mask, stride_q, FP8_MAX, HW_CAST, BIAS)


@triton.jit(do_not_specialize=["n_rows", "M", "eps"])
def _quant_rows_kernel(
    X, R, RO, W, S, UB, Q, SC, AMAX,
    n_rows, K, M, stride_x, stride_r, stride_q, eps,
    gm, gn, stride_sa, stride_sb,
    stride_scb, stride_scm, stride_scg,
    FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr,
    IN_MODE: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
    QUANT: tl.constexpr, DIVIDE: tl.constexpr, UE8M0: tl.constexpr, HAS_UB: tl.constexpr,
    G: tl.constexpr, NG: tl.constexpr, BG: tl.constexpr, SCALAR_SCALE: tl.constexpr, BLOCK_R: tl.constexpr,
    HW_CAST: tl.constexpr, BIAS: tl.constexpr, USE_PDL: tl.constexpr = False, SPLIT: tl.constexpr = False,
    PERSIST: tl.constexpr = False,
):  # fmt: skip
    """Program ``(p, c)`` quantises rows ``p * BLOCK_R ...`` (one on a GPU; more under the
    interpreter, where each program costs milliseconds) of ``K`` output elements, in groups of
    ``G``: the register block is ``[BLOCK_R, NG, BG]``. ``M`` is the row count of one matrix
    (x.shape[-2]): static scale rows and the scale output are addressed by ``(r // M, r % M)``.
    Without ``SPLIT`` the block is the whole row (``c`` = 0). With it (the static forms and the
    group forms without a norm, plain or silu input: no value depends on the rest of the row)
    program ``c`` takes groups ``c * NG ... c * NG + NG - 1`` of the row (the static forms: one
    "group" of ``G = BG`` columns), each element and each group's amax computed exactly as in the
    whole-row block, so the bits do not depend on the split. ``PERSIST`` (the norm forms' whole
    rows, ``BLOCK_R`` 1): program ``p`` of ``P`` takes rows ``p, p + P, ...``, each row's x (and
    residual) loaded before the previous row's reductions and stores (its block, and every
    operation on it, the one-row program's: the same bits)."""
    DT: tl.constexpr = X.dtype.element_ty
    if PERSIST:
        j = tl.arange(0, BG)[None, None, :]
        gi = tl.arange(0, NG)[None, :, None]
        col = gi * G + j
        cmask = (j < G) & (col < K)
        p = tl.program_id(0)
        step = tl.num_programs(0)
        row = p.to(tl.int64) + tl.arange(0, 1)  # [1]: this program's first row
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        r = row[:, None, None]
        mask = cmask & (r < n_rows)
        xh = tl.load(X + r * stride_x + col, mask=mask, other=0.0)
        res = 0.0
        if HAS_RES:
            res = tl.load(R + r * stride_r + col, mask=mask, other=0.0)
        if USE_PDL:
            tl.extra.cuda.gdc_launch_dependents()
        for _ in tl.range(p, n_rows, step):
            rn = r + step  # the next row's loads, before this row's reductions
            mn = cmask & (rn < n_rows)
            xn = tl.load(X + rn * stride_x + col, mask=mn, other=0.0)
            resn = res
            if HAS_RES:
                resn = tl.load(R + rn * stride_r + col, mask=mn, other=0.0)
            if HAS_RES:
                res = res.to(tl.float32)
            w = 0.0
            if HAS_W:  # loaded with each row (from L1 / L2), as the one-row programs do: no registers held
                w = tl.load(W + col, mask=cmask, other=0.0).to(tl.float32)
            _rows_out(xh, 0.0, res, w, row, r, col, mask, 0, RO, S, UB, Q, SC, AMAX,
                      n_rows, K, M, stride_q, eps, gm, gn, stride_sa, stride_sb,
                      stride_scb, stride_scm, stride_scg, FP8_MAX, MIN_SCALE,
                      IN_MODE, HAS_RES, HAS_W, QUANT, DIVIDE, UE8M0, HAS_UB, G, NG,
                      SCALAR_SCALE, HW_CAST, BIAS, DT, False)  # fmt: skip
            row += step
            r = rn
            mask = mn
            xh = xn
            res = resn
    else:
        rr = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
        r = rr[:, None, None]
        j = tl.arange(0, BG)[None, None, :]
        if SPLIT:
            g0 = tl.program_id(1) * NG  # this program's first group of the row
            if NG == 1 and G == BG:  # one chunk of G = BG columns (contiguous: the compiler vectorises)
                col = g0 * G + j
                mask = (col < K) & (r < n_rows)
            else:
                col = (g0 + tl.arange(0, NG)[None, :, None]) * G + j
                mask = (j < G) & (col < K) & (r < n_rows)
        else:
            g0 = 0
            gi = tl.arange(0, NG)[None, :, None]
            if NG == 1:  # one group: the row (contiguous columns the compiler can vectorise)
                col = j
                mask = (j < K) & (r < n_rows)
            else:
                col = gi * G + j
                mask = (j < G) & (col < K) & (r < n_rows)
        if USE_PDL:
            tl.extra.cuda.gdc_wait()
        xh = tl.load(X + r * stride_x + col, mask=mask, other=0.0)
        up = 0.0
        res = 0.0
        w = 0.0
        if IN_MODE == 2:
            up = tl.load(X + r * stride_x + K + col, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            res = tl.load(R + r * stride_r + col, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            w = tl.load(W + col, mask=(j < G) & (col < K), other=0.0).to(tl.float32)
        if USE_PDL:
            tl.extra.cuda.gdc_launch_dependents()
        _rows_out(xh, up, res, w, rr, r, col, mask, g0, RO, S, UB, Q, SC, AMAX,
                  n_rows, K, M, stride_q, eps, gm, gn, stride_sa, stride_sb,
                  stride_scb, stride_scm, stride_scg, FP8_MAX, MIN_SCALE,
                  IN_MODE, HAS_RES, HAS_W, QUANT, DIVIDE, UE8M0, HAS_UB, G, NG,
                  SCALAR_SCALE, HW_CAST, BIAS, DT, SPLIT)  # fmt: skip


@triton.jit
def _norm_chunk_y(X, RO, W, r, col, mask, wmask, stride_x, K, rstd,
                  HAS_RES: tl.constexpr, HAS_W: tl.constexpr, DT: tl.constexpr):  # fmt: skip
    """A chunk of the normalised row, as the whole-row kernel computes it: x (the stored rounded
    sum with a residual) times ``rstd``, times the weight, rounded to the dtype."""
    if HAS_RES:
        x = tl.load(RO + r * K + col, mask=mask, other=0.0).to(tl.float32)
    else:
        x = tl.load(X + r * stride_x + col, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd
    if HAS_W:
        y = y * tl.load(W + col, mask=wmask, other=0.0).to(tl.float32)
    return _round_to(y, DT)


@triton.jit(do_not_specialize=["n_rows", "M", "eps"])
def _norm_quant_chunked_kernel(
    X, R, RO, W, S, UB, Q, SC,
    n_rows, K, M, stride_x, stride_r, stride_q, eps,
    gm, gn, stride_sa, stride_sb,
    stride_scb, stride_scm, stride_scg,
    FP8_MAX: tl.constexpr, MIN_SCALE: tl.constexpr, HAS_RES: tl.constexpr, HAS_W: tl.constexpr,
    QUANT: tl.constexpr, DIVIDE: tl.constexpr, UE8M0: tl.constexpr, HAS_UB: tl.constexpr,
    G: tl.constexpr, NG: tl.constexpr, BG: tl.constexpr, SCALAR_SCALE: tl.constexpr, BLOCK_R: tl.constexpr,
    HW_CAST: tl.constexpr, BIAS: tl.constexpr, ROW_SCALE: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """RMSNorm + quant of rows too wide to sit well in one program's registers: program ``p``
    owns rows ``p * BLOCK_R ...`` (one on a GPU) and walks them in chunks of ``NG`` groups of
    ``G`` columns (the static and per-token forms: one "group" of ``G = BG`` columns). Pass 1 sums
    the squares chunk by chunk (with a residual: adds it, rounds the sum to the dtype and stores
    it); the last pass re-reads each chunk (from L2; with a residual the stored sum, which is the
    rounded value exactly), normalises, weights, rounds and quantises it with the whole-row
    kernel's code (static scale; each group's amax inside the chunk). ``ROW_SCALE`` (per-token
    dynamic scales) adds a pass between them for the row's amax of the normalised values. Every
    element is computed as in the whole-row kernel but for the order of the sum of squares."""
    rr = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    r = rr[:, None, None]
    j = tl.arange(0, BG)[None, None, :]
    gi = tl.arange(0, NG)[None, :, None]
    DT: tl.constexpr = X.dtype.element_ty
    n_chunks = tl.cdiv(K, NG * G)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros([BLOCK_R, NG, BG], dtype=tl.float32)
    for c in tl.range(0, n_chunks):
        col = (c * NG + gi) * G + j
        mask = (j < G) & (col < K) & (r < n_rows)
        x = tl.load(X + r * stride_x + col, mask=mask, other=0.0).to(tl.float32)
        if HAS_RES:
            res = tl.load(R + r * stride_r + col, mask=mask, other=0.0).to(tl.float32)
            x = _round_to(x + res, DT)
            tl.store(RO + r * K + col, x.to(RO.dtype.element_ty), mask=mask)  # exact: x is rounded
        acc += x * x
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    rstd = tl.rsqrt(tl.sum(tl.sum(acc, axis=2), axis=1) / K + eps)[:, None, None]
    if ROW_SCALE:  # per token: the row's amax of y (an exact max: the whole row's), then its scale
        amax = tl.zeros([BLOCK_R, 1], dtype=tl.float32)
        for c in tl.range(0, n_chunks):
            col = (c * NG + gi) * G + j
            mask = (j < G) & (col < K) & (r < n_rows)
            wmask = (j < G) & (col < K)
            y = _norm_chunk_y(X, RO, W, r, col, mask, wmask, stride_x, K, rstd, HAS_RES, HAS_W, DT)
            amax = tl.maximum(amax, tl.max(_group_amax(y), axis=1, keep_dims=True),
                              propagate_nan=tl.PropagateNan.ALL)  # fmt: skip
        row_scale = _dyn_scale(amax, UB, FP8_MAX, MIN_SCALE, UE8M0, HAS_UB)  # [BLOCK_R, 1]
        _store_group_scales(SC, row_scale, rr, 0, n_rows, K, M, stride_scb, stride_scm, stride_scg, 1, 1)
    for c in tl.range(0, n_chunks):
        col = (c * NG + gi) * G + j
        mask = (j < G) & (col < K) & (r < n_rows)
        wmask = (j < G) & (col < K)
        y = _norm_chunk_y(X, RO, W, r, col, mask, wmask, stride_x, K, rstd, HAS_RES, HAS_W, DT)
        if QUANT == 0:
            q = _static_q(y, S, r, col, mask, M, gm, gn, stride_sa, stride_sb, SCALAR_SCALE)
        elif ROW_SCALE:
            q = _dyn_q(y, row_scale, DIVIDE)
        else:
            scale = _dyn_scale(_group_amax(y), UB, FP8_MAX, MIN_SCALE, UE8M0, HAS_UB)  # [BLOCK_R, NG]
            g0 = c * NG
            _store_group_scales(SC, scale, rr, g0, n_rows, K, M, stride_scb, stride_scm, stride_scg, G, NG)
            q = _dyn_q(y, scale, DIVIDE)
        _store_q(Q, q, r, col, mask, stride_q, FP8_MAX, HW_CAST, BIAS)


_HW_E4M3FN: dict[int, bool] = {}


def _hw_e4m3fn(device: torch.device) -> bool:
    """Whether Triton casts to e4m3fn in hardware there: NVIDIA GPUs of sm_89 and later."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    ok = _HW_E4M3FN.get(index)
    if ok is None:
        ok = _HW_E4M3FN[index] = torch.cuda.get_device_capability(index) >= (8, 9)
    return ok


def row_block(k: int, group: int | None = None) -> int:
    """Register block elements of a row of ``k`` outputs in groups of ``group`` (None: one group)."""
    g = k if group is None else group
    return triton.next_power_of_2(-(-k // g)) * triton.next_power_of_2(g)


def _q_out(x_shape: tuple[int, ...], k: int, fp8_dtype: torch.dtype, pad: int | None, dev: torch.device):
    """The fp8 output, ``x_shape`` with last dim ``k``, zero rows appended up to ``pad`` along dim 0."""
    shape = (*x_shape[:-1], k)
    if pad is not None and pad > shape[0]:
        q = torch.empty((pad, *shape[1:]), dtype=fp8_dtype, device=dev)
        rows_q = q[: shape[0]]
        q[shape[0] :].view(torch.uint8).zero_()
        return q, rows_q
    q = torch.empty(shape, dtype=fp8_dtype, device=dev)
    return q, q


def _launch(
    x: torch.Tensor,
    *,
    mode: int,
    quant: int,
    k: int,
    q: torch.Tensor | None,
    fp8_dtype: torch.dtype,
    residual: torch.Tensor | None = None,
    res_out: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
    scale: torch.Tensor | None = None,
    scale_ub: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    scale_strides: tuple[int, int, int] = (0, 0, 0),
    amax: torch.Tensor | None = None,
    group: int | None = None,
    divide: bool = False,
    ue8m0: bool = False,
    cfg: QuantConfig | None = None,
) -> None:
    """One launch over the rows of ``x`` (``k`` outputs a row; ``2k`` inputs for silu_and_mul);
    ``cfg`` (the split ops only, see :func:`_split_ok`) splits each row over programs; for the
    norm forms it walks the row in chunks, loops over rows (``persist``) or runs the rstd pre-pass
    then splits the rows (``rstd_pass``: two launches, the second with ``amax`` the rows' rstd)."""
    n_in = x.shape[-1]
    rows = x.numel() // n_in
    if rows == 0:
        return
    m = x.shape[-2]
    x2 = _as_rows(x, n_in)
    r2 = _as_rows(residual, n_in) if residual is not None else x2
    g = k if group is None else group
    ng, bg = triton.next_power_of_2(-(-k // g)), triton.next_power_of_2(g)
    gm = gn = 1
    sa = sb = 0
    if scale is not None:
        s2 = prep_static_scale(scale, x[..., :k] if mode == _SILU else x)
        gm, gn = m // s2.shape[0], k // s2.shape[1]
        sa = s2.stride(0) if s2.shape[0] > 1 else 0
        sb = s2.stride(1) if s2.shape[1] > 1 else 0
    w = weight if weight is None or weight.stride(-1) == 1 else weight.contiguous()
    hw_cast = fp8_dtype == torch.float8_e4m3fn and _hw_e4m3fn(x.device)
    if q is not None and not hw_cast:
        q = q.view(torch.uint8)
    chunks, split, warps = 1, False, _warps(ng * bg, x.element_size())
    if cfg is not None and cfg.rstd_pass:  # the norm's rstd by the whole row's launch, then the row split
        assert mode == _NORM and _split_ok(_PLAIN, quant, group), f"no rstd pre-pass {cfg} for this launch"
        rstd = torch.empty((rows,), dtype=torch.float32, device=x.device)
        _launch(x, mode=mode, quant=_RSTD, k=k, q=q, fp8_dtype=fp8_dtype, residual=residual, res_out=res_out,
                weight=weight, eps=eps, amax=rstd, group=group)  # fmt: skip
        _launch(x if res_out is None else res_out, mode=mode, quant=quant, k=k, q=q, fp8_dtype=fp8_dtype,
                weight=weight, scale=scale, scale_ub=scale_ub, scale_out=scale_out,
                scale_strides=scale_strides, amax=rstd, group=group, divide=divide, ue8m0=ue8m0,
                cfg=QuantConfig(cfg.block, cfg.num_warps))  # fmt: skip
        return
    if cfg is not None and mode == _NORM and cfg.block < ng * bg and amax is None:  # the row walked in chunks
        assert _chunk_ok(quant, group, cfg), f"no chunked walk {cfg} for this launch"
        cg, cng, cbg = (cfg.block, 1, cfg.block) if group is None else (g, cfg.block // bg, bg)
        block_r = 1 if not x.is_cpu else max(1, min(16, triton.next_power_of_2(rows), 4096 // cfg.block))
        _norm_quant_chunked_kernel.run(
            x2, r2, x2 if res_out is None else res_out, x2 if w is None else w,
            x2 if scale is None else s2, x2 if scale_ub is None else scale_ub, q,
            x2 if scale_out is None else scale_out,
            rows, k, m, x2.stride(0), r2.stride(0), k, eps,
            gm, gn, sa, sb, *scale_strides,
            FP8_MAX=fp8_max(fp8_dtype), MIN_SCALE=min_scale(fp8_dtype),
            HAS_RES=residual is not None, HAS_W=w is not None,
            QUANT=quant, DIVIDE=divide, UE8M0=ue8m0, HAS_UB=scale_ub is not None,
            G=cg, NG=cng, BG=cbg, SCALAR_SCALE=scale is not None and scale.numel() == 1, BLOCK_R=block_r,
            HW_CAST=hw_cast, BIAS=8 if fp8_dtype == torch.float8_e4m3fnuz else 7,
            ROW_SCALE=quant == _DYNAMIC and group is None,
            num_warps=cfg.num_warps, grid=(_k.cdiv(rows, block_r),), warmup=False,
            **_launch_opts(x.device),
        )  # fmt: skip
        return
    if cfg is not None:
        warps = cfg.num_warps
        if cfg.block < ng * bg:  # a chunk of the row a program: whole groups, or columns
            in_mode = _PLAIN if amax is not None else mode  # a norm with the rows' rstd given splits
            ok = _split_ok(in_mode, quant, group) and (group is None or cfg.block >= bg)
            assert ok, f"no row split {cfg} for this launch"
            split = True
            if group is None:
                g = bg = cfg.block
                ng = 1
                chunks = -(-k // g)
            else:
                ng = cfg.block // bg
                chunks = _k.cdiv(_k.cdiv(k, g), ng)
    # one row a program on a device; under the interpreter (CPU) up to 16, at most 4096 elements
    block_r = 1 if not x.is_cpu else max(1, min(16, triton.next_power_of_2(rows), 4096 // (ng * bg)))
    grid = (_k.cdiv(rows, block_r), chunks)
    persist = cfg is not None and cfg.persist > 0
    if persist:  # whole rows, programs looping over them: ``persist`` per SM (the interpreter: in all)
        assert cfg is not None and mode == _NORM and not split, f"no persistent launch {cfg} for this launch"
        block_r = 1
        grid = (min(rows, cfg.persist * (1 if x.is_cpu else max(1, _k._sm_count(x.device)))), 1)
    dummy = x2
    _quant_rows_kernel.run(
        x2, r2, dummy if res_out is None else res_out, dummy if w is None else w,
        dummy if scale is None else s2, dummy if scale_ub is None else scale_ub,
        dummy if q is None else q, dummy if scale_out is None else scale_out, dummy if amax is None else amax,
        rows, k, m, x2.stride(0), r2.stride(0), k, eps,
        gm, gn, sa, sb, *scale_strides,
        FP8_MAX=fp8_max(fp8_dtype), MIN_SCALE=min_scale(fp8_dtype),
        IN_MODE=mode, HAS_RES=residual is not None, HAS_W=w is not None,
        QUANT=quant, DIVIDE=divide, UE8M0=ue8m0, HAS_UB=scale_ub is not None,
        G=g, NG=ng, BG=bg, SCALAR_SCALE=scale is not None and scale.numel() == 1, BLOCK_R=block_r,
        HW_CAST=hw_cast, BIAS=8 if fp8_dtype == torch.float8_e4m3fnuz else 7, SPLIT=split, PERSIST=persist,
        num_warps=warps, grid=grid, warmup=False,
        **_launch_opts(x.device),
    )  # fmt: skip


# ---------------------------------------------------------------------- the row split, tuned
# The ops whose outputs do not need the whole row: per (quant stage, input stage), the op name
# of their tuning key (static_group_quant_fp8 runs static_quant_fp8's launcher and key).
_SPLIT_OPS = {
    (_STATIC, _PLAIN): "static_quant_fp8",
    (_STATIC, _SILU): "silu_and_mul_static_quant_fp8",
    (_DYNAMIC, _PLAIN): "dynamic_group_quant_fp8",
    (_DYNAMIC, _SILU): "silu_and_mul_group_quant_fp8",
}


def _split_ok(mode: int, quant: int, group: int | None) -> bool:
    """Whether no output depends on the rest of its row: static scales, or per-group dynamic
    scales (each group's amax its own), on the plain or silu input. A norm needs the row's sum of
    squares and per-token / per-tensor scales the row's amax: those keep the whole row."""
    return mode != _NORM and (quant == _STATIC or (quant == _DYNAMIC and group is not None))


def heuristic(k: int, group: int | None, elem_bytes: int) -> QuantConfig:
    """The launch before the split: the whole row in one program, warps from its block (about
    four 16-byte vectors a thread). It runs under the interpreter, in CUDA-graph capture and with
    the autotune off, and is every candidate list's first entry."""
    b = row_block(k, group)
    return QuantConfig(b, _warps(b, elem_bytes))


def whole_row(x: torch.Tensor, group: int | None = None) -> QuantConfig:
    """:func:`heuristic` for ``x``'s rows: the fused norm + quant ops' launch in batch-invariant
    mode (impls.<op>_invariant), fixed by the hidden size, group size and dtype."""
    return heuristic(x.shape[-1], group, x.element_size())


def candidates(k: int, group: int | None, rows: int, elem_bytes: int) -> list[QuantConfig]:
    """The heuristic, then chunks of the row: at T <= 128, of 512-4096 elements with 1 or 2
    16-byte input vectors a thread (more programs for few rows: one row of 14336 in chunks of 512
    is 28 programs, where the whole row is one); above, of 1024-8192 elements with 16 or 32
    elements a thread (one or two 16-byte fp8 stores; two or four bf16 input vectors). At most
    16 warps. A chunk is whole groups (``block // next_pow2(group)`` of them) or, for the static
    forms (``group`` None), ``block`` columns; chunks no smaller than the row's block are the
    heuristic's launch, chunks smaller than one padded group are not tried."""
    whole = row_block(k, group)
    out = [heuristic(k, group, elem_bytes)]
    bg = 1 if group is None else triton.next_power_of_2(group)
    vec = max(1, 16 // elem_bytes)
    if rows <= 128:
        blocks, per_thread = (512, 1024, 2048, 4096), (vec, 2 * vec)
    else:
        blocks, per_thread = (1024, 2048, 4096, 8192), (16, 32)
    for b in blocks:
        if b >= whole or b < bg:
            continue
        for e in per_thread:
            c = QuantConfig(b, max(1, min(16, b // (32 * e))))
            if c not in out:
                out.append(c)
    return out


def tune_hidden(k: int, group: int | None, fp8_dtype: torch.dtype, layout: str) -> tuple:
    """The ``hidden`` part of a split op's tuning key: output width, group size (0: the static
    forms), fp8 type (the bits' encoding costs more than the hardware's cast) and the scale
    layout the key was tuned with ("static"; for the group ops "row", "col" or "tma<alignment>",
    "+ue8m0" where the scales round up to powers of two)."""
    return (k, group or 0, fp8_dtype, layout)


def _split_config(
    x: torch.Tensor,
    mode: int,
    quant: int,
    k: int,
    fp8_dtype: torch.dtype,
    group: int | None = None,
    column_major: bool = False,
    scale_alignment: int = 1,
    ue8m0: bool = False,
) -> QuantConfig:
    """The tuned launch of a split op, per (op, :func:`tune_hidden`, dtype, row bucket). Tuned on
    scratch rows (constant values: the timing does not depend on them): the static forms with one
    scale element (per-channel, per-token and group scales take the same key), the group forms
    with the caller's scale layout. Which config is picked never changes a bit of the result
    (each element, and each group's amax, is computed as in the whole row), so the per-row
    results stay independent of the row count although the config is chosen per row bucket."""
    rows = x.numel() // x.shape[-1]
    if quant == _STATIC:
        layout = "static"
    else:
        layout = ("col" if scale_alignment <= 1 else f"tma{scale_alignment}") if column_major else "row"
        layout += "+ue8m0" if ue8m0 else ""
    key = (_SPLIT_OPS[(quant, mode)], tune_hidden(k, group, fp8_dtype, layout), x.dtype, _k._bucket(rows))
    cfg = _k._CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]
    elem_bytes = x.element_size()

    def tune() -> QuantConfig:
        n_in = 2 * k if mode == _SILU else k
        t_rows = _k._bucket_rows(key[3], n_in)
        dev = x.device
        xs = torch.full((t_rows, n_in), 0.5, dtype=x.dtype, device=dev)  # the caller's RNG untouched
        make: Callable[[QuantConfig], Callable[[], None]]
        if quant == _STATIC:
            ss = torch.ones(1, dtype=torch.float32, device=dev)
            qs = torch.empty((t_rows, k), dtype=fp8_dtype, device=dev)

            def make(c: QuantConfig) -> Callable[[], None]:
                return lambda: _launch(xs, mode=mode, quant=_STATIC, k=k, q=qs, fp8_dtype=fp8_dtype,
                                       scale=ss, cfg=c)  # fmt: skip

        else:
            qs, scs, strides = group_outputs(xs, k, group or k, column_major, scale_alignment, fp8_dtype)

            def make(c: QuantConfig) -> Callable[[], None]:
                return lambda: _launch(xs, mode=mode, quant=_DYNAMIC, k=k, q=qs, fp8_dtype=fp8_dtype,
                                       scale_out=scs, scale_strides=strides, group=group, divide=True,
                                       ue8m0=ue8m0, cfg=c)  # fmt: skip

        return _k._pick(key, candidates(k, group, t_rows, elem_bytes), make, dev)

    return _k._untuned(lambda: heuristic(k, group, elem_bytes), tune, x.device)  # type: ignore[return-value]


# ---------------------------------------------------------------------- the norm forms in chunks, tuned
# The fused norm + quant ops (static, per-token dynamic, group scales; not per tensor, whose two
# launches keep the whole row): per (quant stage, per token, with a residual), the op name of
# their tuning key.
_NORM_OPS = {
    (_STATIC, False, False): "rms_norm_static_fp8_quant",
    (_STATIC, False, True): "fused_add_rms_norm_static_fp8_quant",
    (_DYNAMIC, True, False): "rms_norm_dynamic_quant_fp8",
    (_DYNAMIC, True, True): "fused_add_rms_norm_dynamic_quant_fp8",
    (_DYNAMIC, False, False): "rms_norm_group_quant_fp8",
    (_DYNAMIC, False, True): "fused_add_rms_norm_group_quant_fp8",
}
#: Chunk sizes (register-block elements) of the norm forms' chunked walk.
NORM_CHUNKS = (1024, 2048, 4096)


def _chunk_ok(quant: int, group: int | None, cfg: QuantConfig) -> bool:
    """Whether the norm forms' chunked kernel takes ``cfg``: static, per-token or per-group
    dynamic scales (not per tensor), chunks of whole padded groups."""
    return quant in (_STATIC, _DYNAMIC) and (group is None or cfg.block >= triton.next_power_of_2(group))


def norm_candidates(k: int, group: int | None, elem_bytes: int) -> list[QuantConfig]:
    """The norm forms' launches: the heuristic (the whole row in one program, the launch before
    the chunks and the invariant variant's) first, then the row walked in chunks of
    :data:`NORM_CHUNKS` elements (whole groups of the padded group width, or columns) with 4, 8
    or 16 warps at one or two 16-byte input vectors a thread (fewer elements a thread are not
    vector loads: the sm_90 PTX of 1024 bf16 on 8 warps had none), only chunks that cover less than
    the row. One list for every row bucket: one program a row either way, the autotune times it
    per bucket."""
    whole = row_block(k, group)
    out = [heuristic(k, group, elem_bytes)]
    bg = 1 if group is None else triton.next_power_of_2(group)
    vec = max(1, 16 // elem_bytes)
    for b in NORM_CHUNKS:
        cols = b if group is None else (b // bg) * group
        if b >= whole or b < bg or cols >= k:
            continue
        for w in (4, 8, 16):
            if b // (32 * w) in (vec, 2 * vec):
                out.append(QuantConfig(b, w))
    return out


def norm_persist_candidates(
    k: int, group: int | None, elem_bytes: int, rows: int, sms: int, hw_cast: bool = True
) -> list[QuantConfig]:
    """The norm forms' persistent launches: the heuristic's whole row (its block and warps, so
    every row's reductions are laid out, and round, as in the one-row program: the same bits,
    which tools/compile_check.py checks in the TTGIR), ``persist`` programs per SM each looping
    over rows with the next row's loads in flight during this row's two dependent reductions (sum
    of squares, then the amax of the normalised row) and stores. Only for wide rows (a block of
    8192+ elements: one or two one-row programs per SM, few loads in flight) of 16-bit dtypes with
    the hardware's e4m3fn cast (fp32 rows and the encoding by the bits spill on sm_90 with the
    prefetched row: 95-128 registers a thread at 14336 and 8192 in bf16 and fp16, 164-168 for
    fused_add with group scales at 8192); as many programs per SM as fit at 128 registers a thread
    (``16 // warps``: 1 at 14336, 2 at 8192) and half that, at least 1, where each program gets at
    least two rows (``rows >= 2 * persist * sms``). Not the batch-invariant launch: which one
    runs is picked per row bucket (the bits are the same, tests/test_tuned_launches.py)."""
    h = heuristic(k, group, elem_bytes)
    if h.block < 8192 or elem_bytes != 2 or not hw_cast:
        return []
    cap = max(1, 16 // h.num_warps)
    out: list[QuantConfig] = []
    for p in (max(1, cap // 2), cap):
        c = QuantConfig(h.block, h.num_warps, p)
        if rows >= 2 * p * max(1, sms) and c not in out:
            out.append(c)
    return out


def norm_split_candidates(k: int, group: int | None, rows: int, elem_bytes: int) -> list[QuantConfig]:
    """The norm forms with static or per-group scales at T <= 16 (one whole-row program per row:
    1-16 programs): a pre-pass with the whole row's launch (its block and warps, so its sum of
    squares is the whole row's, laid out alike: tools/compile_check.py checks the TTGIR) writes
    each row's rstd (and the residual sum), then the rows are split over programs in chunks of
    whole groups (or columns) as the split ops' :func:`candidates` at T <= 16 (512-4096
    elements, 1 or 2 16-byte vectors a thread), each chunk normalised with the row's rstd: the same
    operations on each element as the whole row, the same bits. Two launches (the second reads the
    rows again, from L2) against one: whether it pays is the autotune's call per key."""
    if rows > 16:
        return []
    split = candidates(k, group, rows, elem_bytes)[1:]
    return [QuantConfig(c.block, c.num_warps, rstd_pass=True) for c in split]


def _norm_config(
    x: torch.Tensor,
    quant: int,
    k: int,
    fp8_dtype: torch.dtype,
    residual: bool,
    group: int | None = None,
    column_major: bool = False,
    scale_alignment: int = 1,
    ue8m0: bool = False,
) -> QuantConfig:
    """The tuned launch of a norm form, per (op, :func:`tune_hidden`, dtype, row bucket): the
    whole row or a chunked walk. The chunks sum a row's squares in another order than the whole
    row, so which config is picked may change the last bit of a row's results with the row count:
    the batch-invariant mode runs the ops' invariant variants (the heuristic, fixed per hidden
    size). Tuned on scratch rows with a weight (static: one scale element; group: the caller's
    scale layout; fused_add: out of place, as the op is)."""
    rows = x.numel() // x.shape[-1]
    per_token = quant == _DYNAMIC and group is None
    if quant == _STATIC:
        layout = "static"
    elif per_token:
        layout = "token"
    else:
        layout = ("col" if scale_alignment <= 1 else f"tma{scale_alignment}") if column_major else "row"
        layout += "+ue8m0" if ue8m0 else ""
    key = (_NORM_OPS[(quant, per_token, residual)], tune_hidden(k, group, fp8_dtype, layout), x.dtype,
           _k._bucket(rows))  # fmt: skip
    cfg = _k._CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]
    elem_bytes = x.element_size()

    def tune() -> QuantConfig:
        t_rows = _k._bucket_rows(key[3], k)
        dev = x.device
        cands = norm_candidates(k, group, elem_bytes)
        hw = fp8_dtype == torch.float8_e4m3fn and _hw_e4m3fn(dev)
        cands += norm_persist_candidates(k, group, elem_bytes, t_rows, _k._sm_count(dev), hw)
        if not per_token:  # a per-token scale needs the whole row's amax: no split
            cands += norm_split_candidates(k, group, t_rows, elem_bytes)
        if len(cands) == 1:  # a row no wider than a chunk, too few rows to loop: the whole row
            _k._CONFIGS[key] = cands[0]
            return cands[0]
        xs = torch.full((t_rows, k), 0.5, dtype=x.dtype, device=dev)  # the caller's RNG untouched
        ws = torch.ones(k, dtype=x.dtype, device=dev)
        rs = torch.full_like(xs, 0.25) if residual else None
        ros = torch.empty_like(xs) if residual else None
        common = dict(mode=_NORM, k=k, fp8_dtype=fp8_dtype, residual=rs, res_out=ros, weight=ws, eps=1e-6)
        make: Callable[[QuantConfig], Callable[[], None]]
        if quant == _STATIC:
            ss = torch.ones(1, dtype=torch.float32, device=dev)
            qs = torch.empty((t_rows, k), dtype=fp8_dtype, device=dev)

            def make(c: QuantConfig) -> Callable[[], None]:
                return lambda: _launch(xs, quant=_STATIC, q=qs, scale=ss, cfg=c, **common)  # type: ignore[arg-type]

        elif per_token:
            qs = torch.empty((t_rows, k), dtype=fp8_dtype, device=dev)
            scs = torch.empty((t_rows, 1), dtype=torch.float32, device=dev)

            def make(c: QuantConfig) -> Callable[[], None]:
                return lambda: _launch(xs, quant=_DYNAMIC, q=qs, scale_out=scs, scale_strides=(t_rows, 1, 0),
                                       cfg=c, **common)  # type: ignore[arg-type]  # fmt: skip

        else:
            qs, scs, strides = group_outputs(xs, k, group or k, column_major, scale_alignment, fp8_dtype)

            def make(c: QuantConfig) -> Callable[[], None]:
                return lambda: _launch(xs, quant=_DYNAMIC, q=qs, scale_out=scs, scale_strides=strides,
                                       group=group, divide=True, ue8m0=ue8m0, cfg=c,
                                       **common)  # type: ignore[arg-type]  # fmt: skip

        return _k._pick(key, cands, make, dev)

    return _k._untuned(lambda: heuristic(k, group, elem_bytes), tune, x.device)  # type: ignore[return-value]


# ---------------------------------------------------------------------- the ops' launchers
def _static(
    x: torch.Tensor,
    mode: int,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    pad: int | None,
    residual: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if _off_current_device(x):
        with _device_ctx(x):
            return _static(x, mode, scale, fp8_dtype, pad, residual, weight, eps, config)
    k = x.shape[-1] // 2 if mode == _SILU else x.shape[-1]
    q, q_rows = _q_out(tuple(x.shape), k, fp8_dtype, pad, x.device)
    res_out = None if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if config is None and x.numel():
        config = (_norm_config(x, _STATIC, k, fp8_dtype, residual is not None) if mode == _NORM
                  else _split_config(x, mode, _STATIC, k, fp8_dtype))  # fmt: skip
    _launch(x, mode=mode, quant=_STATIC, k=k, q=q_rows, fp8_dtype=fp8_dtype, residual=residual,
            res_out=res_out, weight=weight, eps=eps, scale=scale, cfg=config)  # fmt: skip
    return q, res_out


def _dynamic(
    x: torch.Tensor,
    mode: int,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None,
    pad: int | None,
    residual: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    if _off_current_device(x):
        with _device_ctx(x):
            return _dynamic(x, mode, per_token, fp8_dtype, scale_ub, pad, residual, weight, eps, config)
    k = x.shape[-1]
    q, q_rows = _q_out(tuple(x.shape), k, fp8_dtype, pad, x.device)
    res_out = None if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // k
    if per_token or rows == 1:
        # One row per tensor: the tensor's amax is the row's, so the per-token launch of the whole
        # row (one kernel; the row's scale lands at offset 0) gives the two-launch path's bits.
        scale = torch.empty((*x.shape[:-1], 1) if per_token else (1,), dtype=torch.float32, device=x.device)
        if mode != _NORM or not per_token:
            config = None  # the whole row: the plain per-token form, and the two-launch path's norm
        elif config is None and rows:
            config = _norm_config(x, _DYNAMIC, k, fp8_dtype, residual is not None)
        _launch(x, mode=mode, quant=_DYNAMIC, k=k, q=q_rows, fp8_dtype=fp8_dtype, residual=residual,
                res_out=res_out, weight=weight, eps=eps, scale_ub=scale_ub if per_token else None,
                scale_out=scale, scale_strides=(x.shape[-2], 1, 0), cfg=config)  # fmt: skip
        return q, scale, res_out
    scale = torch.empty((1,), dtype=torch.float32, device=x.device)
    row_max = torch.empty((rows,), dtype=torch.float32, device=x.device)
    _launch(x, mode=mode, quant=_AMAX, k=k, q=None, fp8_dtype=fp8_dtype, residual=residual,
            res_out=res_out, weight=weight, eps=eps, amax=row_max)  # fmt: skip
    amax = row_max.amax().reshape(1)
    src = x if res_out is None else res_out  # the second pass norms the rounded sum, as the op
    _launch(src, mode=mode, quant=_FROM_AMAX, k=k, q=q_rows, fp8_dtype=fp8_dtype, weight=weight,
            eps=eps, scale_out=scale, amax=amax)  # fmt: skip
    return q, scale, res_out


def group_outputs(
    x: torch.Tensor, k: int, g: int, column_major: bool, scale_alignment: int, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int, int]]:
    """The group ops' ``q`` and scales, the scales in the op's layout (row-major, column-major, or
    TMA-aligned column-major), and the scale strides ``(matrix, row, group)`` the kernel writes by
    (the layout native returns, which the fake ircore builds declares)."""
    groups = -(-k // g)
    q = torch.empty((*x.shape[:-1], k), dtype=fp8_dtype, device=x.device)
    m = x.shape[-2]
    if not column_major:
        scales = torch.empty((*x.shape[:-1], groups), dtype=torch.float32, device=x.device)
        return q, scales, (m * groups, groups, 1)
    if scale_alignment > 1:  # 2-D x (the op's check)
        step = tma_aligned(m, scale_alignment)
        scales = torch.empty_strided((m, groups), (1, step), dtype=torch.float32, device=x.device)
        return q, scales, (0, 1, step)
    scales = torch.empty((*x.shape[:-2], groups, m), dtype=torch.float32, device=x.device).transpose(-2, -1)
    return q, scales, (m * groups, 1, m)


def _group(
    x: torch.Tensor,
    mode: int,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int,
    residual: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    if _off_current_device(x):
        with _device_ctx(x):
            return _group(x, mode, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment,
                          residual, weight, eps, config)  # fmt: skip
    k = x.shape[-1] // 2 if mode == _SILU else x.shape[-1]
    g = int(group_shape[-1])
    q, scales, strides = group_outputs(x, k, g, column_major, scale_alignment, fp8_dtype)
    res_out = None if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if config is None and x.numel():
        if mode == _NORM:
            config = _norm_config(x, _DYNAMIC, k, fp8_dtype, residual is not None, g, column_major,
                                  scale_alignment, use_ue8m0)  # fmt: skip
        else:
            config = _split_config(x, mode, _DYNAMIC, k, fp8_dtype, g, column_major, scale_alignment,
                                   use_ue8m0)  # fmt: skip
    _launch(x, mode=mode, quant=_DYNAMIC, k=k, q=q, fp8_dtype=fp8_dtype, residual=residual, res_out=res_out,
            weight=weight, eps=eps, scale_out=scales, scale_strides=strides, group=g, divide=True,
            ue8m0=use_ue8m0, cfg=config)  # fmt: skip
    return q, scales, res_out


def static_quant_fp8(
    x: torch.Tensor,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
    config: QuantConfig | None = None,
) -> torch.Tensor:
    """``clamp(x * (1/scale), ±fp8_max)`` cast to fp8, any static scale layout; zero padding rows.
    ``config``: a launch (:func:`candidates`) instead of the tuned one."""
    return _static(x, _PLAIN, scale, fp8_dtype, num_token_padding, config=config)[0]


def dynamic_quant_fp8(
    x: torch.Tensor,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token (one launch) or per-tensor (two launches) dynamic quant: ``(q, scale)``."""
    q, scale, _ = _dynamic(x, _PLAIN, per_token, fp8_dtype, scale_ub, num_token_padding)
    return q, scale


def dynamic_group_quant_fp8(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group dynamic quant, scales in the op's layout: ``(q, scales)``. ``config``: a launch
    (:func:`candidates`) instead of the tuned one."""
    q, scales, _ = _group(x, _PLAIN, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment,
                          config=config)  # fmt: skip
    return q, scales


def rms_norm_static_fp8_quant(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
    config: QuantConfig | None = None,
) -> torch.Tensor:
    """RMSNorm then static quant: the whole row in one program or walked in chunks (the tuned
    launch, or ``config``: one of :func:`norm_candidates`)."""
    return _static(x, _NORM, scale, fp8_dtype, num_token_padding, None, weight, epsilon, config)[0]


def fused_add_rms_norm_static_fp8_quant(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Add, RMSNorm and static quant: ``(q, residual)`` (the residual a new tensor). ``config``:
    as :func:`rms_norm_static_fp8_quant`."""
    q, res = _static(x, _NORM, scale, fp8_dtype, num_token_padding, x_residual, weight, epsilon, config)
    assert res is not None
    return q, res


def rms_norm_dynamic_quant_fp8(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm then dynamic quant: per token one launch (the whole row, or the row walked in
    chunks with a pass more for its amax; ``config`` as :func:`rms_norm_static_fp8_quant`), per
    tensor two launches of the whole row (``config`` unused)."""
    q, scale, _ = _dynamic(
        x, _NORM, per_token, fp8_dtype, scale_ub, num_token_padding, None, weight, epsilon, config
    )
    return q, scale


def fused_add_rms_norm_dynamic_quant_fp8(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    per_token: bool,
    fp8_dtype: torch.dtype,
    scale_ub: torch.Tensor | None = None,
    num_token_padding: int | None = None,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Add, RMSNorm and dynamic quant: ``(q, scale, residual)``; ``config`` as
    :func:`rms_norm_dynamic_quant_fp8`."""
    q, scale, res = _dynamic(
        x, _NORM, per_token, fp8_dtype, scale_ub, num_token_padding, x_residual, weight, epsilon, config
    )
    assert res is not None
    return q, scale, res


def rms_norm_group_quant_fp8(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm then per-group quant: the whole row, or the row walked in chunks of whole groups
    (``config`` as :func:`rms_norm_static_fp8_quant`)."""
    q, scales, _ = _group(
        x,
        _NORM,
        group_shape,
        column_major,
        use_ue8m0,
        fp8_dtype,
        scale_alignment,
        None,
        weight,
        epsilon,
        config,
    )
    return q, scales


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
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Add, RMSNorm and per-group quant: ``(q, scales, residual)``; ``config`` as
    :func:`rms_norm_group_quant_fp8`."""
    q, scales, res = _group(
        x,
        _NORM,
        group_shape,
        column_major,
        use_ue8m0,
        fp8_dtype,
        scale_alignment,
        x_residual,
        weight,
        epsilon,
        config,
    )
    assert res is not None
    return q, scales, res


def silu_and_mul_static_quant_fp8(
    x: torch.Tensor,
    scale: torch.Tensor,
    fp8_dtype: torch.dtype,
    num_token_padding: int | None = None,
    config: QuantConfig | None = None,
) -> torch.Tensor:
    """``silu(gate) * up`` (rounded to x's dtype) then static quant, one pass. ``config``: a
    launch (:func:`candidates`) instead of the tuned one."""
    return _static(x, _SILU, scale, fp8_dtype, num_token_padding, config=config)[0]


def silu_and_mul_group_quant_fp8(
    x: torch.Tensor,
    group_shape: list[int],
    column_major: bool,
    use_ue8m0: bool,
    fp8_dtype: torch.dtype,
    scale_alignment: int = 1,
    config: QuantConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``silu(gate) * up`` then per-group quant, one pass. ``config``: a launch
    (:func:`candidates`) instead of the tuned one."""
    q, scales, _ = _group(x, _SILU, group_shape, column_major, use_ue8m0, fp8_dtype, scale_alignment,
                          config=config)  # fmt: skip
    return q, scales
