"""STAND-IN for ``aiter.ops``: the fp8 GEMMs (``gemm_op_a8w8``) and the Triton fused fp8 quant
wrappers (``triton.fused_fp8_quant``) ircore's adapter calls."""
