"""ircore provider ``xpu``: Intel GPU kernels from vllm-xpu-kernels (``torch.ops._C.*`` on XPU)
for rms_norm, fused_add_rms_norm and silu_and_mul.

Importing this package (or :mod:`ircore_xpu.provider`) never imports ``vllm_xpu_kernels``: that
happens only in the platform check, on an XPU platform.
"""

__version__ = "0.1.0"
