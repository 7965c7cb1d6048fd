"""Compile every launch config the autotune can pick, for a GPU target, on a machine with no GPU.

Why: the CPU tests run the kernels in Triton's interpreter, which never compiles them. This
compiles them with Triton's real backend (ptxas ships in the triton wheel) for ``sm_90`` (H200)
by default and reports, per kernel variant, registers, spills (stack and local memory), whether the
global loads/stores are 128-bit vectors and, from sm_90 on (where the provider launches with
programmatic dependent launch), whether ``griddepcontrol.wait`` comes before every global access,
so a config that would spill, race or fail to compile shows up before anyone reaches the GPU.
The position ops' kernels (rope_kernels.py) are compiled too, as launched for 32 query and 8
key heads of each ``--rope-head-dim``, both rotation styles (and every autotune candidate of
``rotary_pos_emb``), the gated activations (act_kernels.py) in every candidate tile at each
``--silu-d``, ``rms_norm_gated`` (norm_kernels.py) in every candidate launch at each
``--hidden`` up to its register limit (whole rows, and groups of 512 where the row holds
several), and the fp8 quant kernel (quant_kernels.py) in each input and quant stage at each
``--quant-hidden``, with every row-split candidate of the static and plain/silu group forms
(``quant_kernels.candidates``, each row bucket's), every chunked-walk candidate of the norm
forms (``quant_kernels.norm_candidates``: ``_norm_quant_chunked_kernel``) and their persistent
whole-row candidates (``quant_kernels.norm_persist_candidates``) and rstd pre-pass + split
candidates (``quant_kernels.norm_split_candidates``); the persistent launch and the pre-pass must
lay out their sums of squares as the whole row does (the same order of each row's sum: the same
bits).
Run without ``TRITON_INTERPRET``::

    python providers/triton/tools/compile_check.py [--arch 90] [--hidden 4096 8192] [--quick]

Exit status 1 if any variant fails to compile, spills, or touches memory before the PDL wait (or
a persistent launch's or rstd pre-pass's reductions are laid out unlike its whole row's).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("compile_check: unset TRITON_INTERPRET (the interpreter does not compile)")

import torch
import triton
from ircore_triton import act_kernels as A
from ircore_triton import kernels as K
from ircore_triton import norm_kernels as N
from ircore_triton import quant_kernels as Q
from ircore_triton import rope_kernels as R
from ircore_triton.kernels import ActConfig, QuantConfig, RopeConfig
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from ircore.testing import pdl_problems

_TY = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_ROWS = (1, 16, 128, 1024, 8192, 32768)
_CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def _norm_variants(hidden: int, dtype: torch.dtype) -> set[tuple]:
    es = torch.empty((), dtype=dtype).element_size()
    cfgs = set()
    for rows in _ROWS:
        t_rows = K._bucket_rows(K._bucket(rows), hidden)
        cfgs.update(K._norm_candidates(hidden, t_rows, es, 132))
        cfgs.add(K._norm_heuristic(hidden, rows, es))
    # a capped grid (max_programs) compiles the persistent variant of the single-pass kernel
    return {(c.block_m, c.block_n, c.num_warps, bool(c.max_programs) and c.block_n >= hidden) for c in cfgs}


def _silu_variants(d: int, dtype: torch.dtype) -> set[tuple]:
    es = torch.empty((), dtype=dtype).element_size()
    cfgs = set()
    for rows in _ROWS:
        t_rows = K._bucket_rows(K._bucket(rows), 2 * d)
        cfgs.update(K._silu_candidates(d, t_rows, es))
        cfgs.add(K._silu_heuristic(d, rows, es))
    return {(c.block_m, c.block_d, c.num_warps) for c in cfgs}


def _act_variants(d: int, dtype: torch.dtype, interleaved: bool) -> set:
    es = torch.empty((), dtype=dtype).element_size()
    cfgs = set()
    for rows in _ROWS:
        cfgs.update(A._candidates(d, K._bucket_rows(K._bucket(rows), 2 * d), es, interleaved))
        cfgs.add(A._heuristic(rows, d))
    return cfgs


def _attrs(fn, names: list[str]) -> dict:
    return {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in names}


def spill_bytes(usage: str) -> int:
    """Bytes of spilled registers per thread in ``cuobjdump --dump-resource-usage`` output.

    Spills live in the thread's stack frame (``STACK``); ``LOCAL`` counts declared local arrays,
    which Triton kernels have none of. Both count. -1: no figure found.
    """
    found = [int(m) for m in re.findall(r"\b(?:STACK|LOCAL):(\d+)", usage)]
    return sum(found) if found else -1


def reduce_layouts(ttgir: str) -> list[tuple[str, str]]:
    """Each ``tt.reduce`` of a TTGIR module: (axis, operand types with their layouts spelled out).
    Two kernels whose reductions have the same list sum (and max) each row in the same order:
    a reduction's order is its operand's layout (what each thread holds, then the lanes, then the
    warps)."""
    defs = dict(re.findall(r"^(#\w+) = (#ttg\.[^\n]*)$", ttgir, re.M))
    out = []
    pattern = r'"tt\.reduce"\(([^)]*)\) <\{axis = (\d+) : i32\}>[\s\S]*?\}\) : \(([^)]*)\) ->'
    for m in re.finditer(pattern, ttgir):
        out.append((m.group(2), re.sub(r"#\w+", lambda t: defs.get(t.group(0), t.group(0)), m.group(3))))
    return out


def _compile(src: ASTSource, arch: int, num_warps: int, **options) -> dict:
    options = {"num_warps": num_warps, **({"launch_pdl": True} if arch >= 90 else {}), **options}
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        usage = subprocess.run(
            [str(_CUOBJDUMP), "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    regs = re.search(r"REG:(\d+)", usage)
    ptx = k.asm["ptx"]
    return {
        "regs": int(regs.group(1)) if regs else -1,
        "spill": spill_bytes(usage),
        "ld_v4": len(re.findall(r"ld\.global[^\n]*\.v4", ptx)),
        "ld": len(re.findall(r"ld\.global", ptx)),
        "st_v4": len(re.findall(r"st\.global[^\n]*\.v4", ptx)),
        "st": len(re.findall(r"st\.global", ptx)),
        "smem": k.metadata.shared,
        "pdl": "; ".join(pdl_problems(ptx).values()) or "ok" if arch >= 90 else "n/a",
        "reduce": reduce_layouts(k.asm["ttgir"]),
    }


def norm_source(
    hidden: int, dtype: torch.dtype, has_res: bool, arch: int, bm: int, bn: int, persistent: bool = False
) -> ASTSource:
    """The norm kernel a launch of this shape and config compiles (chunked when bn < hidden)."""
    ty = _TY[dtype]
    chunked = bn < hidden
    fn = K._rms_norm_chunked_kernel if chunked else K._rms_norm_kernel
    sig = {n: f"*{ty}" for n in ("X", "R", "Y", "RO", "W")}
    sig.update({n: "i32" for n in ("n_rows", "N", "var_n")})
    sig.update({n: "i32" for n in ("stride_x", "stride_r", "stride_y", "stride_ro")})
    sig["eps"] = "fp32"
    cons = {"BLOCK_N": bn, "HAS_W": True, "HAS_RES": has_res, "PARTIAL": False, "USE_PDL": arch >= 90}
    if not chunked:
        cons.update(BLOCK_M=bm, PERSISTENT=persistent)
    sig.update(dict.fromkeys(cons, "constexpr"))
    aligned = ["X", "R", "Y", "RO", "W"]
    if hidden % 16 == 0:
        aligned += ["N", "var_n", "stride_x", "stride_r", "stride_y", "stride_ro"]
    return ASTSource(fn, sig, cons, _attrs(fn, aligned))


def check_norm(hidden: int, dtype: torch.dtype, has_res: bool, arch: int) -> list[tuple]:
    out = []
    for bm, bn, w, persistent in sorted(_norm_variants(hidden, dtype)):
        src = norm_source(hidden, dtype, has_res, arch, bm, bn, persistent)
        name = "fused_add_rms_norm" if has_res else "rms_norm"
        kind = " chunked" if bn < hidden else " persistent" if persistent else ""
        label = f"{name} {_TY[dtype]} H={hidden} m{bm} n{bn} w{w}{kind}"
        try:
            out.append((label, _compile(src, arch, w)))
        except Exception as e:
            out.append((label, {"error": f"{type(e).__name__}: {str(e)[:200]}"}))
    return out


def check_silu(d: int, dtype: torch.dtype, arch: int) -> list[tuple]:
    ty = _TY[dtype]
    fn = K._silu_and_mul_kernel
    out = []
    for bm, bd, w in sorted(_silu_variants(d, dtype)):
        sig = {"X": f"*{ty}", "Y": f"*{ty}", "n_rows": "i32", "D": "i32"}
        sig.update({"stride_x": "i32", "stride_y": "i32"})
        cons = {"BLOCK_M": bm, "BLOCK_D": bd, "USE_PDL": arch >= 90}
        sig.update(dict.fromkeys(cons, "constexpr"))
        aligned = ["X", "Y"] + (["D", "stride_x", "stride_y"] if d % 16 == 0 else [])
        label = f"silu_and_mul {ty} d={d} m{bm} d{bd} w{w}"
        try:
            out.append((label, _compile(ASTSource(fn, sig, cons, _attrs(fn, aligned)), arch, w)))
        except Exception as e:
            out.append((label, {"error": f"{type(e).__name__}: {str(e)[:200]}"}))
    return out


#: The gated activations' kernels: (label, ACT of _gated_act_kernel or None for swigluoai's kernel).
ACT_FUNCTIONS = (("gelu_and_mul", 0), ("gelu_tanh_and_mul", 1), ("mul_and_silu", 2), ("fatrelu_and_mul", 3),
                 ("swigluoai_and_mul", None))  # fmt: skip


def check_act(d: int, dtype: torch.dtype, arch: int, quick: bool = False) -> list[tuple]:
    """Every candidate tile of each gated activation (the deinterleaving load for swigluoai's);
    ``quick``: swigluoai's deinterleaving load on the T = 1 heuristic's tile only."""
    ty = _TY[dtype]
    out = []
    for name, act in ACT_FUNCTIONS[-1:] if quick else ACT_FUNCTIONS:
        swiglu = act is None
        fn = A._swigluoai_kernel if swiglu else A._gated_act_kernel
        variants = [ActConfig(1, 1024, 2, True)] if quick else _act_variants(d, dtype, swiglu)
        for c in sorted(variants, key=lambda c: (c.block_m, c.block_d, c.num_warps, c.split)):
            sig = {"X": f"*{ty}", "Y": f"*{ty}", "n_rows": "i32", "D": "i32"}
            sig.update({"stride_x": "i32", "stride_y": "i32"})
            sig.update({"alpha": "fp32", "limit": "fp32"} if swiglu else {"param": "fp32"})
            cons = {"BLOCK_M": c.block_m, "BLOCK_D": c.block_d, "USE_PDL": arch >= 90}
            cons.update({"SPLIT": c.split} if swiglu else {"ACT": act})
            sig.update(dict.fromkeys(cons, "constexpr"))
            aligned = ["X", "Y"] + (["D", "stride_x", "stride_y"] if d % 16 == 0 else [])
            label = f"{name} {ty} d={d} m{c.block_m} d{c.block_d} w{c.num_warps}{' split' if c.split else ''}"
            src = ASTSource(fn, sig, cons, _attrs(fn, aligned))
            try:
                out.append((label, _compile(src, arch, c.num_warps)))
            except Exception as e:
                out.append((label, {"error": f"{type(e).__name__}: {str(e)[:200]}"}))
    return out


def check_gated_norm(hidden: int, dtype: torch.dtype, arch: int, quick: bool = False) -> list[tuple]:
    """rms_norm_gated's candidates for a call with many rows of ``hidden`` (every family: the
    warps, the late loads, several rows per program where the row is short), as a whole
    row (Qwen3-Next's form: norm, weight, then the gate, with the intermediate roundings) and in
    groups of 512 (Mamba2's: the gate first, no roundings) where ``hidden`` holds several; none
    with ``quick`` (the kernel is the one launched before tuning; only the warps are new)."""
    if hidden > N.MAX_ROW_BLOCK:
        return []
    ty = _TY[dtype]
    out = []
    forms = [(hidden, True)] + ([(512, False)] if hidden % 512 == 0 and hidden >= 1024 else [])
    for gs, nbg in forms if not quick else []:
        bn = triton.next_power_of_2(gs)
        for c in N._gated_candidates(bn, dtype.itemsize, 1 << 20, 132, gs % (16 // dtype.itemsize) == 0):
            tiled = c.block_m > 1 or c.late_loads
            fn = N._rms_norm_gated_tile_kernel if tiled else N._rms_norm_gated_kernel
            sig = {"X": f"*{ty}", "G": f"*{ty}", "W": f"*{ty}", "Y": f"*{ty}", "n_groups": "i32"}
            sig.update({"n_total": "i32"} if tiled else {})
            sig.update({"GS": "i32", "stride_x": "i32", "stride_g": "i32", "stride_y": "i32", "eps": "fp32"})
            cons = {"BLOCK_N": bn, "NORM_BEFORE_GATE": nbg, "ROUND": nbg, "HW_MATH": True}  # the NVIDIA forms
            cons["USE_PDL"] = arch >= 90
            if tiled:
                cons.update({"BLOCK_M": c.block_m, "LATE": c.late_loads})
            sig.update(dict.fromkeys(cons, "constexpr"))
            aligned = ["X", "G", "W", "Y"]
            if gs % 16 == 0:
                aligned += ["GS", "stride_x", "stride_g", "stride_y"]
            label = f"rms_norm_gated {ty} H={hidden} gs={gs} w{c.num_warps} m{c.block_m}"
            label += " late" if c.late_loads else ""
            src = ASTSource(fn, sig, cons, _attrs(fn, aligned))
            try:
                out.append((label, _compile(src, arch, c.num_warps)))
            except Exception as e:
                out.append((label, {"error": f"{type(e).__name__}: {str(e)[:200]}"}))
    return out


def rope_sources(
    head_dim: int, dtype: torch.dtype, neox: bool, arch: int, quick: bool = False
) -> list[tuple[str, ASTSource, int]]:
    """The position ops' kernels as launches for Llama-3-8B / Qwen3-8B heads (32 q, 8 kv) of
    ``head_dim`` compile them (full rotary; a cache in ``dtype``; int args aligned as Triton
    specializes them at such sizes: multiples of 16, unit channel strides constant)."""
    ty = _TY[dtype]
    pdl = arch >= 90
    style = "neox" if neox else "gptj"
    half = head_dim // 2
    block_t, block_h, block_half = R._blocks(4096, 40, half)
    out = []
    fn = R._rope_kernel
    sig = {"POS": "*i64", "OFF": "*i64", "Q": f"*{ty}", "k_off": "i64", "CACHE": f"*{ty}"}
    ints = ("n_tokens", "hq", "hk", "half", "rope_off", "stride_qt", "stride_qh", "stride_kt", "stride_kh")
    sig.update({n: "i32" for n in (*ints, "stride_ct")})
    cons = {"stride_cd": 1, "BLOCK_T": block_t, "BLOCK_H": block_h, "BLOCK_HALF": block_half, "NEOX": neox,
            "HAS_OFF": False, "INVERSE": False, "USE_PDL": pdl}  # fmt: skip
    sig.update(dict.fromkeys(cons, "constexpr"))
    aligned = ["POS", "OFF", "Q", "k_off", "CACHE", "half", "rope_off", "stride_qt", "stride_qh"]
    aligned += ["stride_kt", "stride_kh", "stride_ct"]
    label = f"rotary_embedding {ty} D={head_dim} {style} t{block_t} h{block_h} p{block_half}"
    out.append((label, ASTSource(fn, sig, cons, _attrs(fn, aligned)), 4))
    fn = R._qk_norm_rope_kernel
    sig = {"QKV": f"*{ty}", "POS": "*i64", "WQ": f"*{ty}", "WK": f"*{ty}", "CACHE": f"*{ty}"}
    sig.update({n: "i32" for n in ("n_tokens", "hq", "hk", "half", "stride_t", "stride_ct")})
    sig["eps"] = "fp32"
    cons = {"stride_cd": 1, "BLOCK_T": block_t, "BLOCK_H": block_h, "BLOCK_HALF": block_half, "NEOX": neox,
            "USE_PDL": pdl}  # fmt: skip
    sig.update(dict.fromkeys(cons, "constexpr"))
    aligned = ["QKV", "POS", "WQ", "WK", "CACHE", "half", "stride_t", "stride_ct"]
    label = f"fused_qk_norm_rope {ty} D={head_dim} {style} t{block_t} h{block_h} p{block_half}"
    out.append((label, ASTSource(fn, sig, cons, _attrs(fn, aligned)), 4))
    if neox:  # Hugging Face's form is neox only: q/k (B, H, S, D) views, cos/sin (B, S, D)
        fn = R._hf_rope_kernel
        sig = {"Q": f"*{ty}", "k_off": "i64", "COS": f"*{ty}", "SIN": f"*{ty}"}
        names = ("n_tokens", "hq", "hk", "n1", "half", "sq0", "sq1", "sqh", "sk0", "sk1", "skh")
        sig.update({n: "i32" for n in (*names, "sc0", "sc1", "ss0", "ss1")})
        cons = {"BLOCK_T": block_t, "BLOCK_H": block_h, "BLOCK_HALF": block_half, "USE_PDL": pdl}
        sig.update(dict.fromkeys(cons, "constexpr"))
        aligned = ["Q", "k_off", "COS", "SIN", "half", "sq0", "sq1", "sqh", "sk0", "sk1", "skh"]
        aligned += ["sc0", "sc1", "ss0", "ss1"]
        label = f"rotary_pos_emb {ty} D={head_dim} t{block_t} h{block_h} p{block_half}"
        out.append((label, ASTSource(fn, sig, cons, _attrs(fn, aligned)), 4))
        # the autotune's other candidates (rope_kernels._hf_candidates), 32 + 8 heads
        for c in R._hf_candidates(4096, 32, 8, half)[1:] if not quick else [RopeConfig(1, 0, 2, True)]:
            fn = R._hf_rope_qk_kernel if c.split_qk else R._hf_rope_kernel
            if c.split_qk:
                blocks = {"BLOCK_T": c.block_t, "BLOCK_HQ": 32, "BLOCK_HK": 8}
            else:
                blocks = {"BLOCK_T": c.block_t, "BLOCK_H": c.block_h}
            sig = {"Q": f"*{ty}", "k_off": "i64", "COS": f"*{ty}", "SIN": f"*{ty}"}
            sig.update({n: "i32" for n in (*names, "sc0", "sc1", "ss0", "ss1")})
            cons = {**blocks, "BLOCK_HALF": block_half, "USE_PDL": pdl}
            sig.update(dict.fromkeys(cons, "constexpr"))
            kind = "qk-split" if c.split_qk else f"h{c.block_h}"
            label = f"rotary_pos_emb {ty} D={head_dim} t{c.block_t} {kind} w{c.num_warps} p{block_half}"
            out.append((label, ASTSource(fn, sig, cons, _attrs(fn, aligned)), c.num_warps))
    return out


def check_rope(head_dim: int, dtype: torch.dtype, arch: int, quick: bool = False) -> list[tuple]:
    out = []
    for neox in (True, False):
        for label, src, w in rope_sources(head_dim, dtype, neox, arch, quick):
            try:
                out.append((label, _compile(src, arch, w)))
            except Exception as e:
                out.append((label, {"error": f"{type(e).__name__}: {str(e)[:200]}"}))
    return out


# The fp8 quant kernel's variants (quant_kernels.py): (label, IN_MODE, HAS_RES, QUANT, group or
# None, UE8M0, HW_CAST): every input stage with each quant stage the ops launch.
QUANT_VARIANTS = (
    ("static_quant_fp8", 0, False, 0, None, False, True),
    ("dynamic_quant_fp8 per-token", 0, False, 1, None, False, True),
    ("dynamic_quant_fp8 per-tensor amax", 0, False, 2, None, False, True),
    ("dynamic_quant_fp8 per-tensor quant", 0, False, 3, None, False, True),
    ("dynamic_group_quant_fp8 g128 ue8m0", 0, False, 1, 128, True, True),
    ("fused_add_rms_norm_static_fp8_quant", 1, True, 0, None, False, True),
    ("fused_add_rms_norm_static_fp8_quant fnuz", 1, True, 0, None, False, False),
    ("fused_add_rms_norm_dynamic_quant_fp8", 1, True, 1, None, False, True),
    ("fused_add_rms_norm_group_quant_fp8 g128", 1, True, 1, 128, False, True),
    ("rms_norm_group_quant_fp8 g128 fnuz", 1, False, 1, 128, False, False),
    ("rms_norm_static_fp8_quant", 1, False, 0, None, False, True),
    ("rms_norm_dynamic_quant_fp8 per-token", 1, False, 1, None, False, True),
    ("silu_and_mul_static_quant_fp8", 2, False, 0, None, False, True),
    ("silu_and_mul_group_quant_fp8 g128", 2, False, 1, 128, False, True),
)


def quant_source(
    variant: tuple,
    k: int,
    dtype: torch.dtype,
    arch: int,
    cfg: QuantConfig | None = None,
    prepass: bool = False,
) -> tuple[str, ASTSource, int]:
    """The quant kernel as a launch of ``variant`` on rows of ``k`` outputs compiles it (``cfg``:
    a row-split candidate, a norm form's persistent launch or its split after the rstd pre-pass,
    as ``quant_kernels._launch`` sets it up; ``prepass``: that pre-pass, the whole row's launch)."""
    label, mode, has_res, quant, group, ue8m0, hw_cast = variant
    if prepass:
        quant, label = Q._RSTD, label + " rstd pre-pass"
    if cfg is not None and cfg.rstd_pass:  # the split after the pre-pass: x is the residual sum it wrote
        has_res, label = False, label + " rstd-split"
    ty = _TY[dtype]
    fn = Q._quant_rows_kernel
    g = k if group is None else group
    ng, bg = triton.next_power_of_2(-(-k // g)), triton.next_power_of_2(g)
    warps = Q._warps(ng * bg, dtype.itemsize)
    split = cfg is not None and cfg.block < ng * bg
    if cfg is not None:
        warps = cfg.num_warps
        label += f" persist {cfg.persist}" if cfg.persist else f" block {cfg.block}"
    if split:
        assert cfg is not None
        if group is None:
            g = bg = cfg.block
            ng = 1
        else:
            ng = cfg.block // bg
    q_ty = "fp8e4nv" if hw_cast else "u8"
    sig = {"X": f"*{ty}", "R": f"*{ty}", "RO": f"*{ty}", "W": f"*{ty}", "S": "*fp32", "UB": "*fp32"}
    sig.update({"Q": f"*{q_ty}", "SC": "*fp32", "AMAX": "*fp32"})
    ints = ("n_rows", "K", "M", "stride_x", "stride_r", "stride_q", "gm", "gn", "stride_sa", "stride_sb")
    sig.update({n: "i32" for n in (*ints, "stride_scb", "stride_scm", "stride_scg")})
    sig["eps"] = "fp32"
    m = 448.0 if hw_cast else 224.0  # e4m3fn by the hardware's cast, else e4m3fnuz by the bits
    cons = {"FP8_MAX": m, "MIN_SCALE": 1.0 / (m * 512), "IN_MODE": mode, "HAS_RES": has_res,
            "HAS_W": mode == 1, "QUANT": quant, "DIVIDE": group is not None, "UE8M0": ue8m0,
            "HAS_UB": False, "G": g, "NG": ng, "BG": bg, "SCALAR_SCALE": True, "BLOCK_R": 1,
            "HW_CAST": hw_cast, "BIAS": 7 if hw_cast else 8, "USE_PDL": arch >= 90,
            "SPLIT": split, "PERSIST": bool(cfg and cfg.persist)}  # fmt: skip
    sig.update(dict.fromkeys(cons, "constexpr"))
    aligned = ["X", "R", "RO", "W", "Q", "SC"]
    if k % 16 == 0:
        aligned += ["K", "stride_x", "stride_r", "stride_q"]
    return f"{label} {ty} K={k} w{warps}", ASTSource(fn, sig, cons, _attrs(fn, aligned)), warps


def norm_chunk_source(
    variant: tuple, k: int, dtype: torch.dtype, arch: int, cfg: QuantConfig
) -> tuple[str, ASTSource, int]:
    """The norm forms' chunked kernel as ``quant_kernels._launch`` sets it up for ``cfg`` (one of
    ``quant_kernels.norm_candidates`` narrower than the row) on rows of ``k`` outputs."""
    label, mode, has_res, quant, group, ue8m0, hw_cast = variant
    assert mode == Q._NORM and Q._chunk_ok(quant, group, cfg)
    ty = _TY[dtype]
    fn = Q._norm_quant_chunked_kernel
    bg = cfg.block if group is None else triton.next_power_of_2(group)
    g, ng = (cfg.block, 1) if group is None else (group, cfg.block // bg)
    q_ty = "fp8e4nv" if hw_cast else "u8"
    sig = {"X": f"*{ty}", "R": f"*{ty}", "RO": f"*{ty}", "W": f"*{ty}", "S": "*fp32", "UB": "*fp32"}
    sig.update({"Q": f"*{q_ty}", "SC": "*fp32"})
    ints = ("n_rows", "K", "M", "stride_x", "stride_r", "stride_q", "gm", "gn", "stride_sa", "stride_sb")
    sig.update({n: "i32" for n in (*ints, "stride_scb", "stride_scm", "stride_scg")})
    sig["eps"] = "fp32"
    m = 448.0 if hw_cast else 224.0
    cons = {"FP8_MAX": m, "MIN_SCALE": 1.0 / (m * 512), "HAS_RES": has_res, "HAS_W": True, "QUANT": quant,
            "DIVIDE": group is not None, "UE8M0": ue8m0, "HAS_UB": False, "G": g, "NG": ng, "BG": bg,
            "SCALAR_SCALE": True, "BLOCK_R": 1, "HW_CAST": hw_cast, "BIAS": 7 if hw_cast else 8,
            "ROW_SCALE": quant == Q._DYNAMIC and group is None, "USE_PDL": arch >= 90}  # fmt: skip
    sig.update(dict.fromkeys(cons, "constexpr"))
    aligned = ["X", "R", "RO", "W", "Q", "SC"]
    if k % 16 == 0:
        aligned += ["K", "stride_x", "stride_r", "stride_q"]
    label = f"{label} chunk {cfg.block} {ty} K={k} w{cfg.num_warps}"
    return label, ASTSource(fn, sig, cons, _attrs(fn, aligned)), cfg.num_warps


def _norm_chunk_configs(variant: tuple, k: int, dtype: torch.dtype) -> list[QuantConfig]:
    """The chunked-walk candidates of a norm form (its heuristic excluded: the whole-row compile);
    none for the other forms and the per-tensor stages."""
    _, mode, _, quant, group, _, _ = variant
    if mode != Q._NORM or quant not in (Q._STATIC, Q._DYNAMIC):
        return []
    return Q.norm_candidates(k, group, dtype.itemsize)[1:]


def _norm_persist_configs(variant: tuple, k: int, dtype: torch.dtype) -> list[QuantConfig]:
    """The persistent whole-row candidates of a norm form (``quant_kernels.norm_persist_candidates``
    at the top row bucket on 132 SMs: every ``persist`` a smaller bucket may try too)."""
    _, mode, _, quant, group, _, hw_cast = variant
    if mode != Q._NORM or quant not in (Q._STATIC, Q._DYNAMIC):
        return []
    t_rows = K._bucket_rows(K._bucket(_ROWS[-1]), k)
    return Q.norm_persist_candidates(k, group, dtype.itemsize, t_rows, 132, hw_cast)


def _norm_split_configs(variant: tuple, k: int, dtype: torch.dtype) -> list[QuantConfig]:
    """The rstd-pass split candidates of a norm form with static or group scales
    (``quant_kernels.norm_split_candidates`` at 1 and 16 rows)."""
    _, mode, _, quant, group, _, _ = variant
    if mode != Q._NORM or not Q._split_ok(Q._PLAIN, quant, group):
        return []
    out: list[QuantConfig] = []
    for rows in (1, 16):
        out += [c for c in Q.norm_split_candidates(k, group, rows, dtype.itemsize) if c not in out]
    return out


def _quant_split_configs(variant: tuple, k: int, dtype: torch.dtype) -> list[QuantConfig]:
    """The row-split candidates the autotune may try for ``variant`` (its heuristic excluded: the
    plain compile above), over every row bucket; none for the forms that keep the whole row."""
    _, mode, _, quant, group, _, _ = variant
    if not Q._split_ok(mode, quant, group):
        return []
    out: list[QuantConfig] = []
    n_in = 2 * k if mode == Q._SILU else k
    for rows in _ROWS:
        t_rows = K._bucket_rows(K._bucket(rows), n_in)
        out += [c for c in Q.candidates(k, group, t_rows, dtype.itemsize)[1:] if c not in out]
    return out


def check_quant(
    k: int,
    dtype: torch.dtype,
    arch: int,
    variants: tuple = QUANT_VARIANTS,
    split: tuple[str, ...] | None = None,
) -> list[tuple]:
    """Each variant's whole-row launch and its row-split or chunked-walk candidates (those of the
    variants labelled in ``split``; None: every variant's)."""
    out = []
    for v in variants:
        wanted = split is None or v[0] in split
        whole: dict = {}
        extra: list = []
        if wanted:
            extra = [*_quant_split_configs(v, k, dtype), *_norm_persist_configs(v, k, dtype)]
            split_norm = _norm_split_configs(v, k, dtype)
            extra += ["prepass", *split_norm] if split_norm else []
        for cfg in [None, *extra]:
            prepass = cfg == "prepass"
            label, src, w = quant_source(v, k, dtype, arch, None if prepass else cfg, prepass)
            try:
                r = _compile(src, arch, w)
            except Exception as e:
                r = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            if cfg is None:
                whole = r
            elif "error" not in r and (prepass or cfg.persist):
                # the persistent loop and the rstd pre-pass claim the whole row's sums of squares:
                # their reductions must be laid out alike (the pre-pass has only the sum's two)
                n = 2 if prepass else len(whole.get("reduce", []))
                if r["reduce"][:n] != whole.get("reduce", [])[:n] or len(r["reduce"]) < n:
                    r = {"error": f"reductions laid out unlike the whole row's: {r['reduce']}"}
            out.append((label, r))
        for cfg in _norm_chunk_configs(v, k, dtype) if wanted else []:
            label, src, w = norm_chunk_source(v, k, dtype, arch, cfg)
            try:
                out.append((label, _compile(src, arch, w)))
            except Exception as e:
                out.append((label, {"error": f"{type(e).__name__}: {str(e)[:200]}"}))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 90, 80")
    p.add_argument("--hidden", type=int, nargs="*", default=[4096, 8192, 5120, 300, 8190, 128, 40000])
    p.add_argument("--silu-d", type=int, nargs="*", default=[14336, 11008, 1500, 64])
    p.add_argument("--rope-head-dim", type=int, nargs="*", default=[128, 64, 256])
    p.add_argument("--quant-hidden", type=int, nargs="*", default=[4096, 8192, 14336])
    p.add_argument("--dtypes", nargs="*", default=["bf16", "fp16", "fp32"])
    p.add_argument("--quick", action="store_true", help="bf16 only, H in {4096, 8192}")
    args = p.parse_args(argv)
    dtypes = [d for d, name in _TY.items() if name in args.dtypes]
    hiddens, silu_ds, rope_ds = args.hidden, args.silu_d, args.rope_head_dim
    quant_ks, quant_variants, quant_split = args.quant_hidden, QUANT_VARIANTS, None
    if args.quick:
        dtypes, hiddens, silu_ds, rope_ds = [torch.bfloat16], [4096, 8192], [14336], [128]
        quant_ks = [14336]  # the heaviest variants: the add + norm + group quant, silu + group quant
        heavy = ("fused_add_rms_norm_group_quant_fp8 g128", "silu_and_mul_group_quant_fp8 g128")
        quant_variants = tuple(v for v in QUANT_VARIANTS if v[0] in heavy)
        quant_variants = tuple(v for v in QUANT_VARIANTS if "fused_add" in v[0] or "silu" in v[0])
        # the heaviest split (two inputs, group amax) and the heaviest chunked walk (add + norm + group quant)
        quant_split = ("silu_and_mul_group_quant_fp8 g128", "fused_add_rms_norm_group_quant_fp8 g128")

    results = []
    for dtype in dtypes:
        for h in hiddens:
            for has_res in (False, True):
                results += check_norm(h, dtype, has_res, args.arch)
            results += check_gated_norm(h, dtype, args.arch, args.quick)
        for d in silu_ds:
            results += check_silu(d, dtype, args.arch)
            results += check_act(d, dtype, args.arch, args.quick)
        for d in rope_ds:
            results += check_rope(d, dtype, args.arch, args.quick)
        for k in quant_ks:
            results += check_quant(k, dtype, args.arch, quant_variants, quant_split)

    bad = 0
    print(f"sm_{args.arch}, triton {triton.__version__}")
    print(f"{'variant':60s} {'regs':>4s} {'spill':>5s} {'ld.v4/ld':>8s} {'st.v4/st':>8s} {'smem':>6s} pdl")
    for label, r in results:
        if "error" in r:
            bad += 1
            print(f"{label:60s} FAILED {r['error']}")
            continue
        bad += r["spill"] > 0 or r["pdl"] not in ("ok", "n/a")
        print(
            f"{label:60s} {r['regs']:4d} {r['spill']:5d} {r['ld_v4']:>3d}/{r['ld']:<4d} "
            f"{r['st_v4']:>3d}/{r['st']:<4d} {r['smem']:>6} {r['pdl']}"
        )
    print(f"{len(results)} variants, {bad} failed, spilling or unordered")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
