"""ircore provider ``vllm_c``: hand-written C++ (AVX2/AVX-512) and CUDA kernels for rms_norm,
fused_add_rms_norm and silu_and_mul, registered as ``torch.ops.ircore_vllm_c.*``.

Importing this package loads nothing; :func:`load_kernels` loads (or builds) the kernels.
"""

from .kernels import load_kernels

__version__ = "0.1.0"

__all__ = ["__version__", "load_kernels"]
