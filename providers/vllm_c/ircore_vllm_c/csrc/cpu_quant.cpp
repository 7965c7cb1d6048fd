// Schemas of the fp8 quant ops and the fused norm/activation + quant ops (ircore's
// ircore/ops/_quant.py and _norm_quant.py, argument for argument), defined once here in the
// library every machine loads; their kernels are cpu_quant_kernels.cpp (CPU) and cuda_quant.cu
// (CUDA, bound in cuda_quant_ops.cpp).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def(
      "static_quant_fp8(Tensor x, Tensor scale, ScalarType fp8_dtype, "
      "int? num_token_padding=None) -> Tensor");
  m.def(
      "static_group_quant_fp8(Tensor x, Tensor scale, ScalarType fp8_dtype, "
      "int? num_token_padding=None) -> Tensor");
  m.def(
      "dynamic_quant_fp8(Tensor x, bool per_token, ScalarType fp8_dtype, Tensor? scale_ub=None, "
      "int? num_token_padding=None) -> (Tensor, Tensor)");
  m.def(
      "dynamic_group_quant_fp8(Tensor x, int[] group_shape, bool column_major, bool use_ue8m0, "
      "ScalarType fp8_dtype, int scale_alignment=1) -> (Tensor, Tensor)");
  m.def(
      "rms_norm_static_fp8_quant(Tensor x, Tensor? weight, float epsilon, Tensor scale, "
      "ScalarType fp8_dtype, int? num_token_padding=None) -> Tensor");
  m.def(
      "fused_add_rms_norm_static_fp8_quant(Tensor x, Tensor x_residual, Tensor? weight, "
      "float epsilon, Tensor scale, ScalarType fp8_dtype, int? num_token_padding=None) "
      "-> (Tensor, Tensor)");
  m.def(
      "rms_norm_dynamic_quant_fp8(Tensor x, Tensor? weight, float epsilon, bool per_token, "
      "ScalarType fp8_dtype, Tensor? scale_ub=None, int? num_token_padding=None) "
      "-> (Tensor, Tensor)");
  m.def(
      "fused_add_rms_norm_dynamic_quant_fp8(Tensor x, Tensor x_residual, Tensor? weight, "
      "float epsilon, bool per_token, ScalarType fp8_dtype, Tensor? scale_ub=None, "
      "int? num_token_padding=None) -> (Tensor, Tensor, Tensor)");
  m.def(
      "rms_norm_group_quant_fp8(Tensor x, Tensor? weight, float epsilon, int[] group_shape, "
      "bool column_major, bool use_ue8m0, ScalarType fp8_dtype, int scale_alignment=1) "
      "-> (Tensor, Tensor)");
  m.def(
      "fused_add_rms_norm_group_quant_fp8(Tensor x, Tensor x_residual, Tensor? weight, "
      "float epsilon, int[] group_shape, bool column_major, bool use_ue8m0, "
      "ScalarType fp8_dtype, int scale_alignment=1) -> (Tensor, Tensor, Tensor)");
  m.def(
      "silu_and_mul_static_quant_fp8(Tensor x, Tensor scale, ScalarType fp8_dtype, "
      "int? num_token_padding=None) -> Tensor");
  m.def(
      "silu_and_mul_group_quant_fp8(Tensor x, int[] group_shape, bool column_major, "
      "bool use_ue8m0, ScalarType fp8_dtype, int scale_alignment=1) -> (Tensor, Tensor)");
}
