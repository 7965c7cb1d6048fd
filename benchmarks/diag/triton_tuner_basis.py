"""Diagnose: why the triton autotune and bench_gpu.py --sweep rank rms_norm's configs differently
at 128x8192 (autotune: 16 warps 2.33 us, 32 warps 2.50; sweep: 32 warps 2.31, 16 warps 2.37).

Times each config with the sweep's timer (median graph replay) under each difference between the
two: constant (the tuner's) or random (the sweep's) inputs, one output buffer reused (the
tuner's) or a new output per call (the sweep's); then with the tuner's own timer on its scratch.
Run on a GPU from the repo root: PYTHONPATH=$PWD python3 benchmarks/diag/triton_tuner_basis.py
"""

import sys

import torch

sys.path.insert(0, "providers/triton")
sys.path.insert(0, "benchmarks")
from _gpu_timing import graph_us
from ircore_triton import kernels as K

EPS = 1e-6


def launcher(cfg, x, w, out):  # type: ignore[no-untyped-def]
    """A call into a fixed output buffer (out given) or a new one per call (out None)."""
    t, h = x.shape
    if out is None:
        return lambda: K.rms_norm(x, w, EPS, None, cfg)
    return lambda: K._launch_norm(cfg, x, None, out, None, w, t, h, h, EPS)


def main() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        for t, h in ((128, 8192), (1024, 8192), (128, 4096)):
            cfgs = [K.NormConfig(1, h, w) for w in (8, 16, 32)]
            gen = torch.Generator(device="cuda").manual_seed(1)
            const = (torch.full((t, h), 0.5, dtype=dtype, device="cuda"), torch.ones(h, dtype=dtype, device="cuda"))
            rand = (
                torch.randn(t, h, device="cuda", generator=gen).to(dtype),
                (1 + 0.1 * torch.randn(h, device="cuda", generator=gen)).to(dtype),
            )
            out = torch.empty(t, h, dtype=dtype, device="cuda")
            print(f"rms_norm {str(dtype)[6:]} {t}x{h}, warps " + " ".join(f"{c.num_warps:>6}" for c in cfgs))
            for name, (x, w) in (("const", const), ("rand", rand)):
                for kind, buf in (("fixed", out), ("alloc", None)):
                    fns = [launcher(c, x, w, buf) for c in cfgs]
                    for fn in fns:
                        graph_us(fn, 50)  # warm up: compile, clocks
                    us = [graph_us(fn, 50) for fn in fns]
                    print(f"  graph median, {name:5} in, {kind} out: " + " ".join(f"{v:6.2f}" for v in us))
            x, w = const
            tuner = K._time_candidates([launcher(c, x, w, out) for c in cfgs], x.device)
            print("  autotune timer, const in, fixed out: " + " ".join(f"{v * 1e3:6.2f}" for v in tuner), flush=True)


if __name__ == "__main__":
    main()
