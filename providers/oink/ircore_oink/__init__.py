"""ircore provider ``oink``: KernelAgent-Oink's CuTeDSL kernels (NVIDIA Blackwell, compute
capability 10.x) for rms_norm and fused_add_rms_norm.

Importing this package (or :mod:`ircore_oink.provider`) never imports ``kernelagent_oink``: that
happens only in the platform check, on a Blackwell GPU.
"""

__version__ = "0.1.0"
