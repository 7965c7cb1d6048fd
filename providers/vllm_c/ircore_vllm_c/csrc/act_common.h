// The gated activations (gelu_and_mul, mul_and_silu, fatrelu_and_mul, swigluoai_and_mul): what
// the CPU and CUDA bindings share, so both devices accept and reject exactly the same calls.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "cpu_activation.h"  // GatedAct

namespace ircore_vllm_c {

// x of a supported dtype, at least 1-D, with an even last dimension (defined in act_checks.cpp).
void check_act_args(const char* op, const at::Tensor& x);
// "none" -> kGeluErf, "tanh" -> kGeluTanh; anything else is refused with the allowed values.
GatedAct gelu_mode(const std::string& approximate);
// alpha not NaN, limit >= 0 (inf allowed).
void check_swiglu_params(double alpha, double limit);

inline std::vector<int64_t> half_last_dim(const at::Tensor& x) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() /= 2;
  return sizes;
}

}  // namespace ircore_vllm_c
