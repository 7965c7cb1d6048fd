"""ircore provider ``triton``: Triton kernels for rms_norm, fused_add_rms_norm and silu_and_mul.

Importing this package (or :mod:`ircore_triton.provider`) imports neither triton nor the kernels;
``ircore_triton.impls`` does.
"""

__version__ = "0.1.0"
