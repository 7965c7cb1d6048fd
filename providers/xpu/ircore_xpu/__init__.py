"""ircore provider ``xpu``: Intel GPU kernels from vllm-xpu-kernels (``torch.ops._C.*`` and, where
built, ``torch.ops._xpu_C.fp8_gemm`` on XPU) for the norms, the gated activations, the rotary ops,
fused_qk_norm_rope, the fp8 quant ops and their fused norm/activation forms, and scaled_mm_fp8
(README.md lists what each adapter accepts and declines).

Importing this package (or :mod:`ircore_xpu.provider`) never imports ``vllm_xpu_kernels``: that
happens only in the platform check, on an XPU platform.
"""

__version__ = "0.1.0"
