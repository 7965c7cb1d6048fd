"""STAND-IN for vLLM's own compiled extension ``vllm._C``: it owns the torch namespace ``_C``
(``TORCH_LIBRARY(_C, ...)`` in vLLM's csrc/torch_bindings.cpp) with CPU/CUDA kernels of the
same op names, so vllm_xpu_kernels._C cannot be loaded after it in one process."""

import torch

_LIB = torch.library.Library("_C", "DEF")
_LIB.define("rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()")
_LIB.impl("rms_norm", lambda result, input, weight, epsilon: None, "CPU")
