"""Triton kernels and their launchers for rms_norm, fused_add_rms_norm and silu_and_mul.

Why it looks like this:

- Norm kernels keep a whole row (or ``BLOCK_M`` short rows) in registers, so ``x`` is read once
  and the op costs one read and one write per element; fp32 accumulation. Rows wider than
  :data:`MAX_ROW_BLOCK` take a two-pass kernel that streams the row in chunks instead.
- The single-pass kernel with one row block per program (the plain launch) is straight-line
  code that issues every load of the block before using any: one memory latency per block. A
  persistent launch (a few programs per SM) compiles it with a grid-stride loop over blocks and
  the weight loaded once; so does the two-pass kernel, one row per iteration.
- On Hopper and later GPUs every kernel is launched with programmatic dependent launch (PDL):
  its programs may start while the previous kernel in the stream finishes, wait for it
  (``gdc_wait``) before touching memory, and let the next kernel start launching once their
  loads are issued. ``IRCORE_TRITON_PDL=0`` turns it off. Small calls are latency-bound, and the
  overlap is most of what is left to gain there.
- The launch config is chosen per (op, hidden size, dtype, row-count bucket) by a small autotune
  that runs on the first call of a key, times the candidates by CUDA-graph replay of back-to-back
  launches (the figure that matters for decode), and caches the winner in a dict. A steady-state
  call costs one dict lookup plus Triton's own launch. Tuning never runs while a CUDA graph is
  being captured (a heuristic config is used and not cached) nor under ``TRITON_INTERPRET=1``.
  The gated activations, ``rms_norm_gated``, ``rotary_pos_emb``, the row split of the static
  and plain/silu group fp8 quant ops and the chunked walk of the fused norm + quant ops
  (act_kernels.py, norm_kernels.py, rope_kernels.py, quant_kernels.py) go through the same cache
  and :func:`_pick` (via :func:`_untuned`), their candidate lists starting with the heuristic
  launch they had before.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable

import torch
import triton
import triton.language as tl

__all__ = [
    "MAX_ROW_BLOCK",
    "ActConfig",
    "GatedNormConfig",
    "NormConfig",
    "QuantConfig",
    "RopeConfig",
    "SiluConfig",
    "cdiv",
    "clear_configs",
    "fused_add_rms_norm",
    "fused_add_rms_norm_",
    "interpreting",
    "pdl_enabled",
    "rms_norm",
    "set_config",
    "set_pdl",
    "silu_and_mul",
    "TunedConfig",
    "tuned_configs",
]

log = logging.getLogger("ircore.triton")

#: Widest row (in elements, a power of two) that is held in registers in one pass.
MAX_ROW_BLOCK = 32768

# Row-count buckets: a config is tuned once per bucket. Bucket upper bounds are the row counts the
# tuning runs at (the last one is open-ended and tuned at _TOP_BUCKET_ROWS, within a memory cap).
_BUCKET_ROWS = (1, 16, 128, 1024, 8192)
_TOP_BUCKET_ROWS = 32768
_TUNE_MAX_ELEMENTS = 1 << 26  # scratch tensors for tuning stay <= 128 MiB each in 16-bit
_TUNE_ROUNDS = 7  # timed rounds per candidate (see _time_candidates)
_TUNE_WARMUP_MS = 20.0  # GPU time spent replaying the candidates before the timed rounds
_TUNE_MAX_WARMUP_ROUNDS = 50


def _make_bucket_table() -> tuple[int, ...]:
    # Indexed by (rows - 1).bit_length(); maps to a bucket index.
    table = []
    for bits in range(64):
        upper = 1 << bits  # largest row count with this bit length of (rows - 1)
        idx = next((i for i, b in enumerate(_BUCKET_ROWS) if upper <= b), len(_BUCKET_ROWS))
        table.append(idx)
    return tuple(table)


_BUCKET_OF_BITS = _make_bucket_table()


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_INTERPRET = interpreting()
_AUTOTUNE = os.environ.get("IRCORE_TRITON_AUTOTUNE", "1") not in ("", "0") and not _INTERPRET


def _pdl_from_env() -> bool:
    """``IRCORE_TRITON_PDL`` ("0" or empty: off); never under the interpreter."""
    return os.environ.get("IRCORE_TRITON_PDL", "1") not in ("", "0") and not _INTERPRET


_PDL = _pdl_from_env()

# Extra launch options per device: {"USE_PDL": True, "launch_pdl": True} where PDL is on.
_LAUNCH_OPTS: dict[tuple[str, int], dict[str, bool]] = {}
_NO_OPTS: dict[str, bool] = {}


def _launch_opts(device: torch.device) -> dict[str, bool]:
    key = (device.type, device.index or 0)
    opts = _LAUNCH_OPTS.get(key)
    if opts is None:
        opts = _NO_OPTS
        if _PDL and device.type == "cuda" and torch.version.hip is None:
            if torch.cuda.get_device_capability(key[1])[0] >= 9:
                opts = {"USE_PDL": True, "launch_pdl": True}
        _LAUNCH_OPTS[key] = opts
    return opts


def pdl_enabled(device: torch.device) -> bool:
    """Whether this provider's launches on ``device`` use programmatic dependent launch."""
    return bool(_launch_opts(device))


def set_pdl(enabled: bool | None) -> None:
    """Turn PDL off (``False``) or back on where the GPU has it (``True``); ``None``: as
    ``IRCORE_TRITON_PDL`` says. For A/B measurements; tuned configs are kept."""
    global _PDL
    _PDL = _pdl_from_env() if enabled is None else bool(enabled) and not _INTERPRET
    _LAUNCH_OPTS.clear()


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _norm_block(
    X, R, Y, RO, W, w, blk, n_rows, var_n, stride_x, stride_r, stride_y, stride_ro, eps, cols, col_mask,
    BLOCK_M: tl.constexpr, HAS_W: tl.constexpr, HAS_RES: tl.constexpr, PARTIAL: tl.constexpr,
    USE_PDL: tl.constexpr, W_LOADED: tl.constexpr,
):  # fmt: skip
    """Rows ``blk * BLOCK_M ...`` of the single-pass kernel. Every load is issued before any
    loaded value is used (x, the residual, and the weight unless ``W_LOADED``), so they are in
    flight together: one memory latency per block, not one for the weight and then one for x."""
    rows = (blk * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    xh = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    if HAS_RES:
        r = tl.load(R + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0)
    if HAS_W:
        if W_LOADED:
            wf = w
        else:
            wf = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    x = xh.to(tl.float32)
    if HAS_RES:
        s = (x + r.to(tl.float32)).to(RO.dtype.element_ty)
        tl.store(RO + rows[:, None] * stride_ro + cols[None, :], s, mask=mask)
        x = s.to(tl.float32)
    sq = x * x
    if PARTIAL:
        sq = tl.where(cols[None, :] < var_n, sq, 0.0)
    rstd = tl.rsqrt(tl.sum(sq, axis=1) / var_n + eps)
    y = x * rstd[:, None]
    if HAS_W:
        y = y * wf[None, :]
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows", "eps"])
def _rms_norm_kernel(
    X,
    R,
    Y,
    RO,
    W,
    n_rows,
    N,
    var_n,
    stride_x,
    stride_r,
    stride_y,
    stride_ro,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_RES: tl.constexpr,
    PARTIAL: tl.constexpr,
    USE_PDL: tl.constexpr = False,
    PERSISTENT: tl.constexpr = False,
):
    """Single pass: BLOCK_M rows x the whole row (BLOCK_N >= N) in registers.

    With HAS_RES: s = (x + r) rounded to the residual dtype is stored to RO and normalised.
    Y/RO may alias X/R (in place): every element is read before it is written by the same program.
    PERSISTENT: fewer programs than row blocks; each loops over blocks, with the weight loaded
    once before the loop. Otherwise one block per program, straight-line, the weight loaded with
    the block's rows (a loop there kept the compiler from issuing x's loads before the weight's
    had returned: two memory latencies per block, sm_90 SASS).
    """
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < N
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    if PERSISTENT:
        w = 0.0
        if HAS_W:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        for blk in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), tl.num_programs(0)):
            _norm_block(
                X, R, Y, RO, W, w, blk, n_rows, var_n, stride_x, stride_r, stride_y, stride_ro, eps, cols,
                col_mask, BLOCK_M, HAS_W, HAS_RES, PARTIAL, USE_PDL, True,
            )  # fmt: skip
    else:
        _norm_block(
            X, R, Y, RO, W, 0.0, pid, n_rows, var_n, stride_x, stride_r, stride_y, stride_ro, eps, cols,
            col_mask, BLOCK_M, HAS_W, HAS_RES, PARTIAL, USE_PDL, False,
        )  # fmt: skip


@triton.jit(do_not_specialize=["n_rows", "eps"])
def _rms_norm_chunked_kernel(
    X,
    R,
    Y,
    RO,
    W,
    n_rows,
    N,
    var_n,
    stride_x,
    stride_r,
    stride_y,
    stride_ro,
    eps,
    BLOCK_N: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_RES: tl.constexpr,
    PARTIAL: tl.constexpr,
    USE_PDL: tl.constexpr = False,
):
    """Two passes over chunks of BLOCK_N for rows too wide for registers; one row per program.

    Pass 1 accumulates sum(x^2) (and writes the rounded residual to RO); pass 2 re-reads the
    row (from RO with HAS_RES, which is what the norm is taken of) and writes Y.
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_N)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    for row in tl.range(pid, n_rows, nprog):
        row64 = tl.cast(row, tl.int64)  # the loop variable is a plain int under the interpreter
        x_row = X + row64 * stride_x
        ro_row = RO + row64 * stride_ro
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in tl.range(0, N, BLOCK_N):
            cols = start + offs
            m = cols < N
            x = tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
            if HAS_RES:  # pass 2 re-reads the sum from RO, not x or r
                r = tl.load(R + row64 * stride_r + cols, mask=m, other=0.0)
                s = (x + r.to(tl.float32)).to(RO.dtype.element_ty)
                tl.store(ro_row + cols, s, mask=m)
                x = s.to(tl.float32)
            sq = x * x
            if PARTIAL:
                sq = tl.where(cols < var_n, sq, 0.0)
            acc += sq
        if USE_PDL:
            tl.extra.cuda.gdc_launch_dependents()
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / var_n + eps)
        for start in tl.range(0, N, BLOCK_N):
            cols = start + offs
            m = cols < N
            if HAS_RES:
                x = tl.load(ro_row + cols, mask=m, other=0.0).to(tl.float32)
            else:
                x = tl.load(x_row + cols, mask=m, other=0.0).to(tl.float32)
            y = x * rstd
            if HAS_W:
                y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            tl.store(Y + row64 * stride_y + cols, y.to(Y.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["n_rows"])
def _silu_and_mul_kernel(
    X,
    Y,
    n_rows,
    D,
    stride_x,
    stride_y,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    USE_PDL: tl.constexpr = False,
):
    """y = silu(x[:, :D]) * x[:, D:] in fp32; a 2-D grid of (row blocks, column blocks)."""
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
    y = a * tl.sigmoid(a) * b
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


# --------------------------------------------------------------------------------------------
# Configs, candidates and the tuning cache
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NormConfig:
    """Launch config of a norm kernel.

    ``block_n < N`` selects the chunked two-pass kernel (chunks of ``block_n``).
    ``max_programs`` caps the grid (a persistent launch); 0 means one program per row block.
    """

    block_m: int
    block_n: int
    num_warps: int
    max_programs: int = 0


@dataclass(frozen=True)
class SiluConfig:
    """Launch config of silu_and_mul: a ``block_m x block_d`` tile per program."""

    block_m: int
    block_d: int
    num_warps: int


@dataclass(frozen=True)
class ActConfig:
    """Launch config of a gated activation (act_kernels.py): a ``block_m x block_d`` output tile
    per program. ``split``: swigluoai_and_mul only, read a contiguous ``2 * block_d`` span and
    deinterleave gate/up in registers instead of two stride-2 loads."""

    block_m: int
    block_d: int
    num_warps: int
    split: bool = False


@dataclass(frozen=True)
class RopeConfig:
    """Launch config of rotary_pos_emb (rope_kernels.py). ``split_qk`` False: ``block_t`` tokens x
    ``block_h`` heads of the query heads followed by the key heads per program (the kernel shared
    with rotary_embedding). True: one program takes ``block_t`` tokens with all their query heads
    and all their key heads as two tiles (each padded to a power of two on its own, cos/sin loaded
    once per token); ``block_h`` is then unused (0)."""

    block_t: int
    block_h: int
    num_warps: int
    split_qk: bool = False


@dataclass(frozen=True)
class GatedNormConfig:
    """Launch config of rms_norm_gated (norm_kernels.py): ``block_m`` groups (rows when
    ungrouped) per program, each whole in registers as one row of a ``block_m x BLOCK_N`` tile
    (1, the launch before tuning: one group per program; more gives tiny groups, Mamba2's 512
    columns, fewer and fuller programs: one-warp programs hit the cap on resident blocks per SM
    first). ``late_loads`` loads the weight, and a gate applied after the norm, after the sum of
    squares: only x in fp32 is live across the reduction (sm_90, bf16 8192 on 8 warps with the
    gate after the norm: 55 registers instead of 80, four resident programs per SM, not three;
    63 before ``norm_kernels._silu``'s NVIDIA form). The warps and the tile change how a
    group's sum of squares is split across threads (hence the invariant variant fixes the whole
    config per group size)."""

    num_warps: int
    block_m: int = 1
    late_loads: bool = False


@dataclass(frozen=True)
class QuantConfig:
    """Launch config of the fp8 quant kernels (quant_kernels.py). For the ops whose outputs do not
    need the whole row (static scales; per-group scales without a norm) each program takes a
    ``block``-element chunk of a row, whole groups of it (``block // next_pow2(group)`` groups) or,
    for the static forms, ``block`` columns; for the fused norm + quant ops one program walks its
    row in such chunks (the chunked kernel). ``block`` >= the row's register block is the whole
    row in one program (the launch before the split or the walk). ``persist`` (the fused norm +
    quant ops' whole row only): that many programs per SM, each looping over rows with the next
    row's loads issued before this row's reductions (0: one program per row). ``rstd_pass`` (the
    fused norm + static / group quant ops): a whole-row pre-pass writes each row's rstd (and the
    residual sum), then the rows are split over programs in chunks of ``block``."""

    block: int
    num_warps: int
    persist: int = 0
    rstd_pass: bool = False


#: Every launch config this provider tunes.
TunedConfig = NormConfig | SiluConfig | ActConfig | RopeConfig | GatedNormConfig | QuantConfig

_CONFIGS: dict[tuple, TunedConfig] = {}
# What the autotune measured for each key it tuned: [(config, us per call), ...] in candidate order
# (bench_gpu.py --sweep shows it next to its own timings).
_TUNE_TIMES: dict[tuple, list[tuple[TunedConfig, float]]] = {}


def tuned_configs() -> dict[tuple, TunedConfig]:
    """A copy of the config cache: ``(op, hidden, dtype, bucket) -> config`` (``hidden`` is a
    tuple for rotary_pos_emb, ``(query heads, key heads, head_dim)``, rms_norm_gated, ``(row
    width, group size)``, and the split and chunked fp8 quant ops, ``quant_kernels.tune_hidden(...)``)."""
    return dict(_CONFIGS)


def clear_configs() -> None:
    """Forget every cached config (the next call of each key tunes again)."""
    _CONFIGS.clear()
    _TUNE_TIMES.clear()


def set_config(
    op: str, hidden: int | tuple[int, ...], dtype: torch.dtype, rows: int, config: TunedConfig
) -> None:
    """Pin ``config`` for ``op`` at the bucket of ``rows``; ``hidden`` is the norm's row width,
    or an activation's output width ``d`` (ops "rms_norm", "fused_add_rms_norm", "silu_and_mul",
    "gelu_and_mul", "gelu_tanh_and_mul", "mul_and_silu", "fatrelu_and_mul", "swigluoai_and_mul"),
    ``(query heads, key heads, head_dim)`` for "rotary_pos_emb" (rows: tokens), ``(row width,
    group size)`` for "rms_norm_gated" (rows: rows, not groups) and, for the split fp8 quant ops
    ("static_quant_fp8", "silu_and_mul_static_quant_fp8", "dynamic_group_quant_fp8",
    "silu_and_mul_group_quant_fp8") and the fused norm + quant ops ("rms_norm_static_fp8_quant",
    "fused_add_rms_norm_static_fp8_quant", "rms_norm_dynamic_quant_fp8",
    "fused_add_rms_norm_dynamic_quant_fp8", "rms_norm_group_quant_fp8",
    "fused_add_rms_norm_group_quant_fp8"), ``quant_kernels.tune_hidden(...)``."""
    _CONFIGS[(op, hidden, dtype, _bucket(rows))] = config


def _bucket(rows: int) -> int:
    return _BUCKET_OF_BITS[(rows - 1).bit_length()]


def _bucket_rows(bucket: int, hidden: int) -> int:
    rows = _BUCKET_ROWS[bucket] if bucket < len(_BUCKET_ROWS) else _TOP_BUCKET_ROWS
    return max(1, min(rows, _TUNE_MAX_ELEMENTS // max(hidden, 1)))


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for the launchers' grids: ``triton.cdiv`` is a ``ConstexprFunction`` in
    Triton 3.6, ~2.4 us a call on the host (CPU box, 2026-12-05), where this is ~0.05 us."""
    return -(-a // b)


_SM_COUNT: dict[tuple[str, int], int] = {}


def _sm_count(device: torch.device) -> int:
    key = (device.type, device.index or 0)
    count = _SM_COUNT.get(key)
    if count is None:
        count = 0
        try:
            props = getattr(torch, device.type).get_device_properties(key[1])
            count = getattr(props, "multi_processor_count", 0) or getattr(props, "gpu_subslice_count", 0)
        except Exception:  # an unknown backend: a plain launch is always correct
            count = 0
        _SM_COUNT[key] = count = int(count) or 128
    return count


def _warp_choices(elements: int, elem_bytes: int, max_vectors: int = 4) -> list[int]:
    """Warps giving 1 to ``max_vectors`` 16-byte vectors per thread for a block of ``elements``."""
    vec = max(1, 16 // elem_bytes)
    ws = [
        w
        for w in (1, 2, 4, 8, 16, 32)
        if w * 32 * vec <= max(elements, 32 * vec) and elements <= w * 32 * vec * max_vectors
    ]
    if not ws:
        ws = [32]
    return ws


def _norm_heuristic(n: int, rows: int, elem_bytes: int) -> NormConfig:
    bn = max(_pow2(n), 16)
    if bn > MAX_ROW_BLOCK:
        return NormConfig(1, 8192, 16)
    bm = 1 if bn >= 1024 else max(1, min(_pow2(rows), 2048 // bn))
    ws = _warp_choices(bm * bn, elem_bytes)
    return NormConfig(bm, bn, ws[len(ws) // 2])


def _norm_candidates(n: int, rows: int, elem_bytes: int, sm_count: int) -> list[NormConfig]:
    bn = max(_pow2(n), 16)
    vec = max(1, 16 // elem_bytes)  # elements per 16-byte vector
    if bn > MAX_ROW_BLOCK:  # chunks of at most four 16-byte vectors per thread (fp32 8192 on
        # 8 warps, eight, spills: tools/compile_check.py)
        chunks = [NormConfig(1, 4096, 8), NormConfig(1, 8192, 8), NormConfig(1, 8192, 16)]
        return [c for c in chunks if c.block_n <= 32 * c.num_warps * vec * 4]
    if bn >= 2048:
        bms = [1]
    else:
        bms = sorted({max(1, min(_pow2(rows), e // bn)) for e in (2048, 4096)})
    # A row that is not a whole number of 16-byte vectors is loaded element by element: at most
    # two vectors' worth per thread (four, bf16 rows of 300 in 4-row blocks on 2 warps, spilled;
    # eight, bf16 rows of 8190 on 4 warps, took 225 registers).
    aligned = n % vec == 0
    max_vectors = 4 if aligned else 2
    out = []
    for bm in bms:
        for w in _warp_choices(bm * bn, elem_bytes, max_vectors):
            out.append(NormConfig(bm, bn, w))
            blocks = -(-rows // bm)
            resident = sm_count * max(1, min(32, 64 // w))  # programs resident at once (by threads)
            if blocks > 2 * resident:
                out.append(NormConfig(bm, bn, w, resident))
    if bn >= 8192 and rows >= sm_count and aligned:
        # Wide rows over a wave or more: also eight 16-byte vectors per thread (half the warps of
        # the fewest above). H200 sweep (bench_gpu.py --sweep): at 1024x8192 it was the fastest
        # or within 1% of it for both norms and dtypes (rms_norm bf16 6.98 us against 7.06 with
        # eight warps). The two-pass kernel in 2048/4096-element chunks, tried there too for its
        # lower register count, was 1-5% slower at every such row, so it is not a candidate.
        fewest = min(_warp_choices(bn, elem_bytes))
        if fewest > 1 and bn // (32 * vec * (fewest // 2)) <= 8:
            out.append(NormConfig(1, bn, fewest // 2))
    return out


def _silu_warps(elements: int, elem_bytes: int, vectors: int) -> int:
    """Warps giving each thread ``vectors`` 16-byte vectors of a tile of ``elements``."""
    vec = max(1, 16 // elem_bytes)
    return max(1, min(16, elements // (32 * vec * vectors)))


def _silu_heuristic(d: int, rows: int, elem_bytes: int) -> SiluConfig:
    bd = min(max(_pow2(d), 16), 1024 if rows <= 16 else 2048)
    bm = max(1, min(_pow2(rows), 2048 // bd))
    return SiluConfig(bm, bd, _silu_warps(bm * bd, elem_bytes, 2))


def _silu_candidates(d: int, rows: int, elem_bytes: int) -> list[SiluConfig]:
    """Tiles of 512..4096 columns (several rows when d is short), 1 or 2 vectors per thread."""
    pd = max(_pow2(d), 16)
    if pd <= 1024:
        tiles = {(max(1, min(_pow2(rows), e // pd)), pd) for e in (2048, 4096)}
    else:
        widths = (512, 1024, 2048) if rows <= 16 else (1024, 2048, 4096)
        tiles = {(1, bd) for bd in widths if bd <= pd}
    out = []
    for bm, bd in sorted(tiles):
        for vectors in (1, 2):
            c = SiluConfig(bm, bd, _silu_warps(bm * bd, elem_bytes, vectors))
            if c not in out:
                out.append(c)
    return out


# --------------------------------------------------------------------------------------------
# Timing for the autotune
# --------------------------------------------------------------------------------------------


def _capturing(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_current_stream_capturing()
    return False


def _time_candidates(launches: list[Callable[[], None]], device: torch.device) -> list[float]:
    """Per-launch time (ms) of each launch fn: the fastest of several replays of back-to-back calls.

    On CUDA/ROCm the calls are captured in a CUDA graph, so the host's launch cost is not
    measured (it is what graph replay in serving sees); elsewhere they run in a plain loop.
    Before the timed rounds every runner is replayed until the GPU has been busy for
    :data:`_TUNE_WARMUP_MS`, then the minimum of interleaved rounds is kept (noise only adds),
    each timed behind a short GPU busy-wait so the host's enqueue time is not counted.
    Without that, the first call of a process on the H200 once picked a config 14% slower than
    the best (rms_norm 1024x8192); a first replay's set-up and clocks ramping up from idle are
    the likely causes.
    """
    mod = getattr(torch, device.type)
    for fn in launches:  # compile and warm up
        fn()
    mod.synchronize()
    start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
    start.record()
    for fn in launches:
        for _ in range(3):
            fn()
    end.record()
    end.synchronize()
    estimate = max(start.elapsed_time(end) / (3 * len(launches)), 1e-3)
    reps = int(min(100, max(5, 0.5 / estimate)))

    runners: list[Callable[[], None]] = []
    graphs = []
    if device.type == "cuda":
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        try:
            with torch.cuda.stream(side):
                for fn in launches:
                    g = torch.cuda.CUDAGraph()
                    g.capture_begin()
                    try:
                        for _ in range(reps):
                            fn()
                    finally:
                        g.capture_end()  # never leave the stream capturing
                    graphs.append(g)
            runners = [g.replay for g in graphs]
        except Exception:  # capture unsupported here: time plain launches
            graphs, runners = [], []
        torch.cuda.current_stream(device).wait_stream(side)
    if not runners:

        def _loop(fn: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                for _ in range(reps):
                    fn()

            return run

        runners = [_loop(fn) for fn in launches]

    start.record()
    for _ in range(_TUNE_MAX_WARMUP_ROUNDS):
        for run in runners:
            run()
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= _TUNE_WARMUP_MS:
            break
    # A GPU busy-wait queued ahead of each timed replay (CUDA): the start event then fires when
    # the replay is already queued, so host enqueue time under CPU load is not counted.
    if device.type == "cuda":
        from ircore.tools.timing import gpu_lead
    else:
        gpu_lead = None
    times: list[list[float]] = [[] for _ in launches]
    for _ in range(_TUNE_ROUNDS):  # rounds interleave candidates, so clock drift hits all alike
        for i, run in enumerate(runners):
            if gpu_lead is not None:
                gpu_lead()
            start.record()
            run()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) / reps)
    del graphs
    return [min(t) for t in times]


def _pick(key: tuple, candidates: list, make_launch: Callable, device: torch.device):
    """Time ``candidates`` (ordered by preference) and cache the fastest under ``key``.

    A candidate that fails to compile or launch (out of registers or shared memory on some
    GPU) is dropped; if all fail, the last error propagates.
    """
    launches, kept = [], []
    error: Exception | None = None
    for c in candidates:
        fn = make_launch(c)
        try:
            fn()
        except Exception as e:
            error = e
            continue
        launches.append(fn)
        kept.append(c)
    if not kept:
        assert error is not None
        raise error
    candidates = kept
    if len(candidates) == 1:
        _CONFIGS[key] = candidates[0]
        return candidates[0]
    times = _time_candidates(launches, device)
    best = min(range(len(candidates)), key=lambda i: (times[i], i))
    _CONFIGS[key] = candidates[best]
    _TUNE_TIMES[key] = [(c, t * 1e3) for c, t in zip(candidates, times)]
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "tuned %s: %s; picked %s",
            key,
            ", ".join(f"{c} {t * 1e3:.2f} us" for c, t in zip(candidates, times)),
            candidates[best],
        )
    return candidates[best]


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def _launch_norm(
    cfg: NormConfig,
    x: torch.Tensor,
    r: torch.Tensor | None,
    y: torch.Tensor,
    ro: torch.Tensor | None,
    w: torch.Tensor | None,
    rows: int,
    n: int,
    var_n: int,
    eps: float,
) -> None:
    has_res = r is not None
    r_ = r if has_res else x
    ro_ = ro if has_res else y
    w_ = w if w is not None else x
    if cfg.block_n >= n:
        blocks = -(-rows // cfg.block_m)
        grid_n = min(blocks, cfg.max_programs) if cfg.max_programs else blocks
        _rms_norm_kernel.run(
            x, r_, y, ro_, w_, rows, n, var_n,
            x.stride(0), r_.stride(0), y.stride(0), ro_.stride(0), eps,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, HAS_W=w is not None, HAS_RES=has_res,
            PARTIAL=var_n != n, PERSISTENT=grid_n < blocks, num_warps=cfg.num_warps, grid=(grid_n,),
            warmup=False,
            **_launch_opts(x.device),
        )  # fmt: skip
    else:
        grid_n = min(rows, cfg.max_programs) if cfg.max_programs else rows
        _rms_norm_chunked_kernel.run(
            x, r_, y, ro_, w_, rows, n, var_n,
            x.stride(0), r_.stride(0), y.stride(0), ro_.stride(0), eps,
            BLOCK_N=cfg.block_n, HAS_W=w is not None, HAS_RES=has_res,
            PARTIAL=var_n != n, num_warps=cfg.num_warps, grid=(grid_n,), warmup=False,
            **_launch_opts(x.device),
        )  # fmt: skip


def _untuned(
    heuristic: Callable[[], TunedConfig], tune: Callable[[], TunedConfig], device: torch.device
) -> TunedConfig:
    """A launcher's config where its key has none in ``_CONFIGS``: ``tune()`` (which scratches
    its own inputs and calls :func:`_pick`, caching the winner), or, with the autotune off, under
    the interpreter or inside CUDA-graph capture, ``heuristic()`` (not cached). Every tuned
    launcher looks in ``_CONFIGS`` first, so that a hit builds neither closure."""
    if not _AUTOTUNE or _capturing(device):
        return heuristic()
    return tune()


def _norm_config(op: str, x: torch.Tensor, rows: int, n: int, has_res: bool) -> NormConfig:
    key = (op, n, x.dtype, _BUCKET_OF_BITS[(rows - 1).bit_length()])
    cfg = _CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]
    elem_bytes = x.element_size()

    def tune() -> NormConfig:
        t_rows = _bucket_rows(key[3], n)
        dev = x.device
        # Constant inputs: timing does not depend on values, and the caller's RNG stays untouched.
        xs = torch.full((t_rows, n), 0.5, dtype=x.dtype, device=dev)
        ws = torch.ones(n, dtype=x.dtype, device=dev)
        # fused_add_rms_norm is timed in place, as engines call it (the residual stream updated
        # where it lies; the out-of-place form takes the same config). Out of place it moves twice
        # the tensors: at 1024x8192 bf16 that is 64 MiB, over the H200's L2, and timed 18 us
        # against 12 in place, which is no basis for choosing the in-place call's config.
        ys = xs if has_res else torch.empty_like(xs)
        rs = torch.full_like(xs, 0.25) if has_res else None
        ros = rs
        cands = _norm_candidates(n, t_rows, elem_bytes, _sm_count(dev))

        def make(c: NormConfig) -> Callable[[], None]:
            return lambda: _launch_norm(c, xs, rs, ys, ros, ws, t_rows, n, n, 1e-6)

        return _pick(key, cands, make, dev)

    return _untuned(lambda: _norm_heuristic(n, rows, elem_bytes), tune, x.device)  # type: ignore[return-value]


def _off_current_device(x: torch.Tensor) -> bool:
    """True when ``x`` lives on a GPU other than the current one: Triton launches on the current
    device, so the launcher must switch first (multi-GPU processes)."""
    if x.is_cuda:
        return x.get_device() != torch._C._cuda_getDevice()
    if x.is_xpu:
        return x.get_device() != torch.xpu.current_device()
    return False


def _device_ctx(x: torch.Tensor):
    return torch.cuda.device(x.device) if x.is_cuda else torch.xpu.device(x.device)


def _as_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` as a 2-D (rows, n) tensor with unit column stride, a view where possible."""
    t2 = t if t.dim() == 2 else t.reshape(-1, n)
    if n > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def _weight(w: torch.Tensor | None) -> torch.Tensor | None:
    if w is not None and w.stride(-1) != 1:
        return w.contiguous()
    return w


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
    config: NormConfig | None = None,
) -> torch.Tensor:
    """RMSNorm of the last dim into a new contiguous tensor (``config`` overrides the tuned one)."""
    if _off_current_device(x):
        with _device_ctx(x):
            return rms_norm(x, weight, epsilon, variance_size, config)
    n = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n if n else 0
    if rows == 0:
        return y
    x2 = _as_rows(x, n)
    cfg = config or _norm_config("rms_norm", x2, rows, n, False)
    var_n = n if variance_size is None else variance_size
    y2 = y if y.dim() == 2 else y.view(rows, n)
    _launch_norm(cfg, x2, None, y2, None, _weight(weight), rows, n, var_n, epsilon)
    return y


def fused_add_rms_norm_(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
    config: NormConfig | None = None,
) -> None:
    """In place: ``x_residual <- x + x_residual`` (in x's dtype), ``x <- rms_norm(x_residual)``.

    When a tensor cannot be viewed as unit-stride rows, the result is computed out of place and
    copied back, so the contract holds for any layout.
    """
    if _off_current_device(x):
        with _device_ctx(x):
            return fused_add_rms_norm_(x, x_residual, weight, epsilon, variance_size, config)
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    if rows == 0:
        return
    try:
        x2 = x if x.dim() == 2 else x.view(rows, n)
        r2 = x_residual if x_residual.dim() == 2 else x_residual.view(rows, n)
        direct = n == 1 or (x2.stride(1) == 1 and r2.stride(1) == 1)
    except RuntimeError:  # no 2-D view of this layout
        direct = False
    if not direct:
        out, res = fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size, config)
        x_residual.copy_(res)
        x.copy_(out)
        return
    cfg = config or _norm_config("fused_add_rms_norm", x2, rows, n, True)
    var_n = n if variance_size is None else variance_size
    _launch_norm(cfg, x2, r2, x2, r2, _weight(weight), rows, n, var_n, epsilon)


def fused_add_rms_norm(
    x: torch.Tensor,
    x_residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
    config: NormConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Out of place: returns new contiguous ``(rms_norm(x + x_residual), x + x_residual)``."""
    if _off_current_device(x):
        with _device_ctx(x):
            return fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size, config)
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    res = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = out.numel() // n if n else 0
    if rows == 0:
        return out, res
    x2 = _as_rows(x, n)
    r2 = _as_rows(x_residual, n)
    cfg = config or _norm_config("fused_add_rms_norm", x2, rows, n, True)
    var_n = n if variance_size is None else variance_size
    _launch_norm(cfg, x2, r2, out.view(rows, n), res.view(rows, n), _weight(weight), rows, n, var_n, epsilon)
    return out, res


def _launch_silu(cfg: SiluConfig, x: torch.Tensor, y: torch.Tensor, rows: int, d: int) -> None:
    grid = (-(-rows // cfg.block_m), -(-d // cfg.block_d))
    _silu_and_mul_kernel.run(
        x, y, rows, d, x.stride(0), y.stride(0),
        BLOCK_M=cfg.block_m, BLOCK_D=cfg.block_d, num_warps=cfg.num_warps, grid=grid, warmup=False,
        **_launch_opts(x.device),
    )  # fmt: skip


def _silu_config(x: torch.Tensor, rows: int, d: int) -> SiluConfig:
    key = ("silu_and_mul", d, x.dtype, _BUCKET_OF_BITS[(rows - 1).bit_length()])
    cfg = _CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]
    elem_bytes = x.element_size()

    def tune() -> SiluConfig:
        t_rows = _bucket_rows(key[3], 2 * d)
        xs = torch.full((t_rows, 2 * d), 0.5, dtype=x.dtype, device=x.device)  # RNG untouched
        ys = torch.empty(t_rows, d, dtype=x.dtype, device=x.device)

        def make(c: SiluConfig) -> Callable[[], None]:
            return lambda: _launch_silu(c, xs, ys, t_rows, d)

        return _pick(key, _silu_candidates(d, t_rows, elem_bytes), make, x.device)

    return _untuned(lambda: _silu_heuristic(d, rows, elem_bytes), tune, x.device)  # type: ignore[return-value]


def silu_and_mul(x: torch.Tensor, config: SiluConfig | None = None) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` with ``d = x.shape[-1] // 2``, into a new tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return silu_and_mul(x, config)
    d = x.shape[-1] // 2
    y = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    rows = y.numel() // d if d else 0
    if rows == 0:
        return y
    x2 = _as_rows(x, x.shape[-1])
    cfg = config or _silu_config(x2, rows, d)
    _launch_silu(cfg, x2, y.view(rows, d), rows, d)
    return y
