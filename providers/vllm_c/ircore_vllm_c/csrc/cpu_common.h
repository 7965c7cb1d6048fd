// What the CPU bindings (cpu_ops.cpp, cpu_activation.cpp, cpu_rope.cpp) share beyond
// ops_common.h: a tensor's dtype as the CPU kernels (cpu_kernels.h, no torch header) name it.
#pragma once

#include <c10/core/ScalarType.h>

#include "cpu_kernels.h"

namespace ircore_vllm_c {

// float32, float16 or bfloat16 (the checks have refused any other dtype).
inline cpu::DType cpu_dtype(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Half:
      return cpu::DType::kHalf;
    case at::ScalarType::BFloat16:
      return cpu::DType::kBFloat16;
    default:
      return cpu::DType::kFloat;
  }
}

}  // namespace ircore_vllm_c
