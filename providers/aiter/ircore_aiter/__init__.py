"""ircore provider ``aiter``: AMD's AITER kernels (ROCm, Instinct CDNA3/CDNA4) for rms_norm,
fused_add_rms_norm, silu_and_mul, the rotary ops, static_quant_fp8, per-tensor
dynamic_quant_fp8, the fused static fp8 quant ops and the fp8 matmuls scaled_mm_fp8 and
block_scaled_mm_fp8.

Importing this package (or :mod:`ircore_aiter.provider`) never imports ``aiter``: that happens
only in the platform check, on a ROCm platform with a supported GPU.
"""

__version__ = "0.1.0"
