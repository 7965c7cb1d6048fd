"""STAND-IN for vllm-xpu-kernels, for ircore's CPU tests; not Intel's package.

As in the real package, importing it registers nothing: ``import vllm_xpu_kernels._C`` does.
"""
