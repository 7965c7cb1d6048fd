"""STAND-IN for ``aiter.ops`` (only the Triton fused fp8 quant wrappers ircore's adapter calls)."""
