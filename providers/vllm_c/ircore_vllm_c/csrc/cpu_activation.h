// Row kernels of the gated activations (gelu_and_mul, mul_and_silu, fatrelu_and_mul,
// swigluoai_and_mul), free of torch headers as cpu_kernels.h (and compiled the same way: one copy
// per ISA, from cpu_activation_isa.inc, included by cpu_kernels.cpp into each ISA's namespace).
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace ircore_vllm_c {

// Which function a gated-activation kernel computes on the halves a (first) and b (second).
enum class GatedAct : int {
  kGeluErf = 0,   // gelu(a) * b, erf form
  kGeluTanh = 1,  // gelu(a) * b, tanh approximation
  kMulSilu = 2,   // a * silu(b)
  kFatrelu = 3,   // (a > threshold ? a : 0) * b; NaN a stays NaN, as F.threshold
};

namespace cpu {

// The ISA the CPU ops run with now (the best one, or what the _set_cpu_isa hook chose); defined
// in cpu_ops.cpp, which owns that choice.
Isa selected_isa();

// out[r, :d] = act(in[r, :d], in[r, d:2d]), in fp32, rounded once; `param`: kFatrelu's threshold.
// Strides and sizes in elements; rows [begin, end).
void gated_act_rows(Isa isa, DType dt, GatedAct act, float param, void* out, int64_t out_stride,
                    const void* in, int64_t in_stride, int64_t d, int64_t begin, int64_t end);

// out[r, j] = (clamp(u, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(in[r, 2j], limit),
// u = in[r, 2j + 1] (interleaved pairs).
void swigluoai_rows(Isa isa, DType dt, float alpha, float limit, void* out, int64_t out_stride,
                    const void* in, int64_t in_stride, int64_t d, int64_t begin, int64_t end);

}  // namespace cpu
}  // namespace ircore_vllm_c
