// Argument checks of the gated activations, built into the CPU and the CUDA library alike (as
// checks.cpp; numbers are formatted with std::to_string, never by std::ostream: see there).
#include <cmath>
#include <string>

#include "act_common.h"
#include "ops_common.h"

namespace ircore_vllm_c {

void check_act_args(const char* op, const at::Tensor& x) {
  check_x(op, x);
  TORCH_CHECK(x.size(-1) % 2 == 0 && x.size(-1) > 0, "ircore_vllm_c.", op,
              ": the last dimension of x must be even and non-zero, got ",
              std::to_string(x.size(-1)));
}

GatedAct gelu_mode(const std::string& approximate) {
  if (approximate == "none") return GatedAct::kGeluErf;
  TORCH_CHECK(approximate == "tanh", "ircore_vllm_c.gelu_and_mul: approximate must be 'none' or 'tanh', got '",
              approximate, "'");
  return GatedAct::kGeluTanh;
}

void check_swiglu_params(double alpha, double limit) {
  TORCH_CHECK(!std::isnan(alpha), "ircore_vllm_c.swigluoai_and_mul: alpha must not be NaN");
  TORCH_CHECK(limit >= 0, "ircore_vllm_c.swigluoai_and_mul: limit must be >= 0 (inf allowed), got ",
              std::to_string(limit));
}

}  // namespace ircore_vllm_c
