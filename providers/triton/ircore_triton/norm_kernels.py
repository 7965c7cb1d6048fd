"""Triton kernels and launchers for rms_norm_gated and layer_norm.

One program normalises one row, or one group of a row for ``rms_norm_gated`` with a
``group_size``: the whole row (group) is held in registers (``BLOCK_N`` the next power of two),
read once, computed in fp32 and written once. Rows wider than :data:`MAX_ROW_BLOCK` elements
are left to other providers (the predicates say so). PDL as in :mod:`ircore_triton.kernels`.

``layer_norm``'s warps are a heuristic (by row width). ``rms_norm_gated``'s launch
(:class:`~ircore_triton.kernels.GatedNormConfig`) is tuned per (row width, group size, dtype,
row-count bucket) by the autotune of :mod:`ircore_triton.kernels` (:func:`_gated_candidates`):
the heuristic's warps (about four 16-byte vectors per thread) first, then twice and four times
as many: at T <= 128 a row per program leaves most SMs idle and the row's latency is what
counts, so fewer elements per thread (more loads in flight per row) can win. Calls with many
groups also try a second kernel, :func:`_rms_norm_gated_tile_kernel`: several small groups per
program (a ``block_m x BLOCK_N`` tile, each group reduced along axis 1 on its own; one-warp
programs of Mamba2's 512-column groups hit the cap on resident blocks per SM), or, for wide
groups, the weight and a trailing gate loaded after the reduction (fewer registers, more
resident programs). The warps and the tile change how a group's sum of squares is split across
threads, so the tuned launch is batch-variant: the batch-invariant mode runs
:func:`rms_norm_gated` with the heuristic's launch (one group per program, the first kernel),
fixed per group size and dtype (``invariant_kernels.rms_norm_gated``).

On NVIDIA GPUs (not ROCm, not the interpreter) both gated kernels compute the silu and the bf16
roundings in fewer instructions with the same bits (``HW_MATH``: :func:`_silu`, :func:`_round_to`):
sm_90, bf16 8192 on 8 warps in Qwen3-Next's form, 744 instructions a thread instead of 1192 (37
a value: near the SM's issue rate at the H200's copy bandwidth), 80 registers either way.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from . import kernels as _k
from .kernels import GatedNormConfig, _as_rows, _device_ctx, _launch_opts, _off_current_device

__all__ = ["MAX_ROW_BLOCK", "layer_norm", "rms_norm_gated"]

#: Widest row (group) held in registers.
MAX_ROW_BLOCK = 32768


@triton.jit
def _silu(g, HW_MATH: tl.constexpr):
    """``g * sigmoid(g)`` in fp32. ``HW_MATH`` (an NVIDIA GPU): the same bits as
    ``g * tl.sigmoid(g)`` in fewer instructions (sm_90 SASS, about 9 a value instead of 13; bf16
    8192 on 8 warps, Qwen3-Next's form: 1192 instructions a thread, 1064 with this, 744 with the
    hardware cast of :func:`_round_to` too, at the same 80 registers): Triton's
    ``exp`` is ``ex2.approx.f32`` of ``-g * log2(e)``, whose non-flushing form scales inputs below
    -126 (a compare and two predicated multiplies); ``ex2.approx.ftz.f32`` of ``g * -log2(e)``
    (the same product, but for the sign of a zero: ``2**±0`` is 1) differs only where the power
    is subnormal, below ``2**-126``, and ``1 + e`` rounds to 1 for both. The division stays
    Triton's (``div.full.f32``, which keeps a subnormal ``1 / (1 + e)`` for gates near -88)."""
    if HW_MATH:
        e = tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=r,r", [g * -1.4426950408889634],
            dtype=tl.float32, is_pure=True, pack=1,
        )  # fmt: skip
        return g * (1.0 / (1.0 + e))
    else:
        return g * tl.sigmoid(g)


@triton.jit
def _round_to(y, DT: tl.constexpr, HW_MATH: tl.constexpr = False):
    """fp32 ``y`` rounded to ``DT`` (to nearest, ties to even), kept in fp32. bf16 by its bits:
    Triton's interpreter truncates a bf16 cast, which would round the intermediate values of
    ``round_normalized`` differently from a GPU (the final store's cast it may truncate: tolerance).
    NaN stays NaN: the rounding carry of a NaN with a full mantissa (a GPU's fp32 arithmetic gives
    0x7FFFFFFF) would wrap it to a zero. ``HW_MATH`` (an NVIDIA GPU): the hardware's cast
    (``cvt.rn.bf16.f32``, round to nearest even: the same value in fewer instructions, 1192 -> 872
    a thread for the two roundings of bf16 8192 on 8 warps; a NaN may come back as another NaN,
    which every later multiply and the store's cast make the canonical one, as they do the
    original: ``tests/test_tuned_launches.py`` checks the bits on a GPU)."""
    if DT == tl.bfloat16 and not HW_MATH:
        b = y.to(tl.uint32, bitcast=True)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
        return tl.where(y != y, y, b.to(tl.float32, bitcast=True))
    else:
        return y.to(DT).to(tl.float32)


@triton.jit(do_not_specialize=["n_groups", "eps"])
def _rms_norm_gated_kernel(
    X, G, W, Y, n_groups, GS, stride_x, stride_g, stride_y, eps,
    BLOCK_N: tl.constexpr, NORM_BEFORE_GATE: tl.constexpr, ROUND: tl.constexpr, HW_MATH: tl.constexpr = False,
    USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """Program ``pid`` normalises group ``pid % n_groups`` of row ``pid // n_groups`` (``HW_MATH``:
    :func:`_silu`'s and :func:`_round_to`'s NVIDIA forms, the same bits)."""
    pid = tl.program_id(0)
    row = (pid // n_groups).to(tl.int64)
    col0 = (pid % n_groups) * GS
    cols = tl.arange(0, BLOCK_N)
    mask = cols < GS
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    x = tl.load(X + row * stride_x + col0 + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * stride_g + col0 + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + col0 + cols, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if not NORM_BEFORE_GATE:
        x = x * _silu(g, HW_MATH)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / GS + eps)
    if NORM_BEFORE_GATE:  # after the reduction in the source: sm_90, bf16 8192 on 8 warps, HW_MATH
        g = _silu(g, HW_MATH)  # before it held the 32 values a thread live across it (127 registers, not 80)
    y = x * rstd
    if ROUND:
        y = _round_to(_round_to(y, Y.dtype.element_ty, HW_MATH) * w, Y.dtype.element_ty, HW_MATH)
    else:
        y = y * w
    if NORM_BEFORE_GATE:
        y = y * g
    tl.store(Y + row * stride_y + col0 + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_groups", "n_total", "eps"])
def _rms_norm_gated_tile_kernel(
    X, G, W, Y, n_groups, n_total, GS, stride_x, stride_g, stride_y, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NORM_BEFORE_GATE: tl.constexpr, ROUND: tl.constexpr,
    LATE: tl.constexpr, HW_MATH: tl.constexpr = False, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """Program ``pid`` normalises groups ``pid * BLOCK_M`` to ``pid * BLOCK_M + BLOCK_M - 1`` of
    the ``n_total`` (group ``i`` is group ``i % n_groups`` of row ``i // n_groups``), one per row
    of the tile, each group's sum of squares reduced along axis 1 on its own. ``LATE``: the
    weight, and a gate applied after the norm, are loaded after the reduction (only x, or x times
    the gate, in fp32 live across it; a second memory latency, for more resident programs)."""
    i = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row = (i // n_groups).to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_N)[None, :]
    col = ((i % n_groups) * GS)[:, None] + cols
    mask = (i < n_total)[:, None] & (cols < GS)
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    x = tl.load(X + row * stride_x + col, mask=mask, other=0.0).to(tl.float32)
    if not (LATE and NORM_BEFORE_GATE):
        g = tl.load(G + row * stride_g + col, mask=mask, other=0.0).to(tl.float32)
    if not LATE:
        w = tl.load(W + col, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    if not NORM_BEFORE_GATE:
        x = x * _silu(g, HW_MATH)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / GS + eps)
    if NORM_BEFORE_GATE and not LATE:  # after the reduction, as in _rms_norm_gated_kernel
        g = _silu(g, HW_MATH)
    y = x * rstd[:, None]
    if LATE:
        w = tl.load(W + col, mask=mask, other=0.0).to(tl.float32)
        if NORM_BEFORE_GATE:
            g = tl.load(G + row * stride_g + col, mask=mask, other=0.0).to(tl.float32)
            g = _silu(g, HW_MATH)
    if ROUND:
        y = _round_to(_round_to(y, Y.dtype.element_ty, HW_MATH) * w, Y.dtype.element_ty, HW_MATH)
    else:
        y = y * w
    if NORM_BEFORE_GATE:
        y = y * g
    tl.store(Y + row * stride_y + col, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["eps"])
def _layer_norm_kernel(
    X, W, B, Y, N, stride_x, stride_y, eps,
    BLOCK_N: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr, USE_PDL: tl.constexpr = False,
):  # fmt: skip
    """One row per program: mean, then the variance of ``x - mean`` (two passes over registers)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_W:
        w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_B:
        b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    if USE_PDL:
        tl.extra.cuda.gdc_launch_dependents()
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(d * d, axis=0) / N + eps)
    y = d * rstd
    if HAS_W:
        y = y * w
    if HAS_B:
        y = y + b
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


def _warps(block_n: int, elem_bytes: int) -> int:
    """About four 16-byte vectors per thread, 1 to 16 warps."""
    per_warp = 32 * 4 * (16 // elem_bytes)
    return max(1, min(16, triton.next_power_of_2(-(-block_n // per_warp))))


def gated_heuristic(block_n: int, elem_bytes: int) -> GatedNormConfig:
    """rms_norm_gated's launch before tuning, fixed by the group's width and the dtype: the
    invariant variant's, and what runs with the autotune off or inside CUDA-graph capture."""
    return GatedNormConfig(_warps(block_n, elem_bytes))


def _gated_candidates(
    block_n: int, elem_bytes: int, groups: int = 1, sm_count: int = 132, whole_vectors: bool = True
) -> list[GatedNormConfig]:
    """The launches the autotune times for groups of ``block_n`` (a power of two) when a call
    normalises ``groups`` of them (rows x groups per row; ``whole_vectors``: a group is a whole
    number of 16-byte vectors, so its loads are vectorised), heuristic first:

    - the heuristic's warps, then twice and four times as many (at most 32 warps, at least one
      16-byte vector per thread). Fewer than the heuristic's are not tried: x, the gate and the
      weight are all held in fp32 registers, and eight vectors per thread of each would spill;
    - groups of at most 1024 elements (Mamba2's 512): 2, 4 and 8 groups per program where
      ``groups`` gives every SM one such program, on the heuristic's warps for the whole tile
      (about four vectors per thread). One-warp programs of one group hit the cap on resident
      blocks per SM before the SM's warps are full;
    - groups of 4096 or more over at least a wave (one per SM): the weight, and a gate applied
      after the norm, loaded after the reduction (``late_loads``), on the heuristic's warps and
      on half of them where that is at most eight vectors per thread. sm_90, bf16 8192 with the
      gate after the norm (Qwen3-Next's form): 80 registers on 8 warps, three programs per SM
      (1024 rows: 2.6 waves); late, 55: four (1.9 waves), for a second memory latency;
    - then, for the same calls, the late loads on twice the heuristic's warps (at least one
      vector per thread: bf16 8192 on 16 warps, 32 registers, four programs of 512 threads per
      SM, the SM's whole 2048) and, over two waves, two groups per program late on those warps
      (at most four vectors per thread, and only groups of whole vectors: 59 registers, two
      programs per SM; element-wise loads of 8190 spill, as 8 vectors of 32768 do). Not yet
      timed on a GPU.
    """
    h = gated_heuristic(block_n, elem_bytes).num_warps
    per_vector = 32 * max(1, 16 // elem_bytes)  # elements of one 16-byte vector per thread of a warp
    out = [GatedNormConfig(h)]
    for w in (h * 2, h * 4):
        if w <= 32 and w * per_vector <= block_n:
            out.append(GatedNormConfig(w))
    if block_n <= 1024:
        for bm in (2, 4, 8):
            if groups >= bm * sm_count:
                out.append(GatedNormConfig(_warps(bm * block_n, elem_bytes), block_m=bm))
    if block_n >= 4096 and groups >= sm_count:
        for w in (h, h // 2):
            if w >= 1 and block_n // (w * per_vector) <= 8:
                out.append(GatedNormConfig(w, late_loads=True))
        w = h * 2
        if w <= 32 and w * per_vector <= block_n:
            out.append(GatedNormConfig(w, late_loads=True))
            if whole_vectors and groups >= 2 * sm_count and 2 * block_n // (w * per_vector) <= 4:
                out.append(GatedNormConfig(w, block_m=2, late_loads=True))
    return out


_HW_MATH: dict[tuple[str, int | None], bool] = {}


def _hw_math(device: torch.device) -> bool:
    """Whether the gated kernels take :func:`_silu`'s and :func:`_round_to`'s NVIDIA forms (PTX
    ``ex2.approx.ftz``, the hardware's bf16 cast): on a CUDA GPU, not ROCm, not the interpreter."""
    key = (device.type, device.index)
    hw = _HW_MATH.get(key)
    if hw is None:
        hw = _HW_MATH[key] = device.type == "cuda" and torch.version.hip is None and not _k.interpreting()
    return hw


def _run_gated(
    cfg: GatedNormConfig, x2, g2, w, y2, rows: int, n_groups: int, gs: int, eps: float,
    norm_before_gate: bool, round_normalized: bool, hw_math: bool | None = None,
) -> None:  # fmt: skip
    """Launch ``cfg`` (``hw_math``: None as :func:`_hw_math` says; False, the portable forms, for
    the GPU test that compares the two bit for bit)."""
    block_n = triton.next_power_of_2(gs)
    hw = _hw_math(x2.device) if hw_math is None else hw_math
    if cfg.block_m == 1 and not cfg.late_loads:  # the launch before tuning (and the invariant one)
        _rms_norm_gated_kernel.run(
            x2, g2, w, y2, n_groups, gs, x2.stride(0), g2.stride(0), y2.stride(0), eps,
            BLOCK_N=block_n, NORM_BEFORE_GATE=norm_before_gate, ROUND=round_normalized, HW_MATH=hw,
            num_warps=cfg.num_warps, grid=(rows * n_groups,), warmup=False, **_launch_opts(x2.device),
        )  # fmt: skip
        return
    total = rows * n_groups
    _rms_norm_gated_tile_kernel.run(
        x2, g2, w, y2, n_groups, total, gs, x2.stride(0), g2.stride(0), y2.stride(0), eps,
        BLOCK_M=cfg.block_m, BLOCK_N=block_n, NORM_BEFORE_GATE=norm_before_gate, ROUND=round_normalized,
        LATE=cfg.late_loads, HW_MATH=hw, num_warps=cfg.num_warps, grid=(triton.cdiv(total, cfg.block_m),),
        warmup=False, **_launch_opts(x2.device),
    )  # fmt: skip


def _gated_config(
    x2: torch.Tensor, rows: int, n: int, gs: int, norm_before_gate: bool, round_normalized: bool
) -> GatedNormConfig:
    key = ("rms_norm_gated", (n, gs), x2.dtype, _k._bucket(rows))
    cfg = _k._CONFIGS.get(key)
    if cfg is not None:
        return cfg  # type: ignore[return-value]
    block_n = triton.next_power_of_2(gs)

    def tune() -> GatedNormConfig:
        # The top buckets (8192 rows, 32768+) are timed on as many rows as 192 MiB of scratch
        # (x, gate, y) holds, under rms_norm's 256 (x, y): 4096 rows of 8192, 8192 of 4096. At
        # 2730 rows of 8192 (128 MiB) the candidates' last waves were partly empty (16 warps
        # late, four programs per SM: 5.2 waves), a tail of a few percent that 32768 rows lack.
        t_rows = _k._bucket_rows(key[3], 2 * n)
        dev = x2.device
        xs = torch.full((t_rows, n), 0.5, dtype=x2.dtype, device=dev)  # RNG untouched
        gs_ = torch.full((t_rows, n), 0.25, dtype=x2.dtype, device=dev)
        ws = torch.ones(n, dtype=x2.dtype, device=dev)
        ys = torch.empty_like(xs)

        def make(c: GatedNormConfig) -> Callable[[], None]:
            flags = (norm_before_gate, round_normalized)
            return lambda: _run_gated(c, xs, gs_, ws, ys, t_rows, n // gs, gs, 1e-6, *flags)

        es = x2.element_size()
        cands = _gated_candidates(block_n, es, t_rows * (n // gs), _k._sm_count(dev), gs % (16 // es) == 0)
        return _k._pick(key, cands, make, dev)

    heuristic = lambda: gated_heuristic(block_n, x2.element_size())  # noqa: E731
    return _k._untuned(heuristic, tune, x2.device)  # type: ignore[return-value]


def rms_norm_gated(
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    epsilon: float,
    group_size: int | None = None,
    norm_before_gate: bool = False,
    round_normalized: bool = False,
    config: GatedNormConfig | None = None,
) -> torch.Tensor:
    """Gated RMSNorm (the op's semantics) into a new contiguous tensor (``config`` overrides the
    tuned launch)."""
    if _off_current_device(x):
        with _device_ctx(x):
            args = (group_size, norm_before_gate, round_normalized, config)
            return rms_norm_gated(x, gate, weight, epsilon, *args)
    n = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n
    if rows == 0:
        return y
    gs = n if group_size is None else group_size
    x2, g2 = _as_rows(x, n), _as_rows(gate, n)
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    cfg = config or _gated_config(x2, rows, n, gs, norm_before_gate, round_normalized)
    flags = (norm_before_gate, round_normalized)
    _run_gated(cfg, x2, g2, w, y.view(rows, n), rows, n // gs, gs, epsilon, *flags)
    return y


def layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, epsilon: float
) -> torch.Tensor:
    """LayerNorm of the last dim into a new contiguous tensor."""
    if _off_current_device(x):
        with _device_ctx(x):
            return layer_norm(x, weight, bias, epsilon)
    n = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n
    if rows == 0:
        return y
    x2 = _as_rows(x, n)
    w = weight if weight is None or weight.stride(-1) == 1 else weight.contiguous()
    b = bias if bias is None or bias.stride(-1) == 1 else bias.contiguous()
    block_n = triton.next_power_of_2(n)
    _layer_norm_kernel.run(
        x2, x2 if w is None else w, x2 if b is None else b, y.view(rows, n), n, x2.stride(0), n, epsilon,
        BLOCK_N=block_n, HAS_W=w is not None, HAS_B=b is not None,
        num_warps=_warps(block_n, x.element_size()), grid=(rows,), warmup=False,
        **_launch_opts(x.device),
    )  # fmt: skip
    return y
