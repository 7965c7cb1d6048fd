"""Diagnose: does an exception thrown by the vllm_c CUDA library reach Python, or crash?"""

import sys

import torch

sys.path.insert(0, "providers/vllm_c")
import ircore_vllm_c.kernels as k

print("load:", k.load_kernels(cuda=True), flush=True)
ops = torch.ops.ircore_vllm_c
x = torch.randn(5, 1000, device="cuda")
for label, call in [
    ("cpu lib throw", lambda: ops.rms_norm(torch.randn(4, 8).double(), None, 1e-6, None)),
    ("cuda check_x throw", lambda: ops.rms_norm(x.double(), None, 1e-6, None)),
    ("cuda check_out throw", lambda: ops.rms_norm_out(torch.empty(5, 500, device="cuda"), x, None, 1e-6, None)),
]:
    print("trying", label, flush=True)
    try:
        call()
        print("  no error?!", flush=True)
    except RuntimeError as exc:
        print("  RuntimeError:", str(exc).splitlines()[0], flush=True)
