"""STAND-IN for ``aiter.ops.triton``: only ``fused_fp8_quant`` (at AITER's head the module lives
in ``quant/`` and this old path is kept by a backward-compatibility import hook)."""
