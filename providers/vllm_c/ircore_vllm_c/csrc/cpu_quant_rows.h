// The fp8 quantisation loops of the CPU quant kernels (cpu_quant_rows.cpp), free of torch headers
// (see cpu_kernels.h: the AVX2 copy must not compile any inline torch function).
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace ircore_vllm_c {
namespace cpu {

// The bits of max |y[i]| over n values of dt (ordered as the floats; a NaN, above +inf, wins as
// in torch's amax).
uint32_t quant_amax_bits(Isa isa, DType dt, const void* y, int64_t n);

// q[i] = fp8(clamp(v, +-fp8_max)) for n values y of dt, v = y[i] / s (divide), y[i] * s, or
// y[i] * inv[i] when inv is not null; a NaN stays NaN. fnuz: e4m3fnuz, else e4m3fn; round to
// nearest even, the encodings of torch's casts.
void quant_fp8(Isa isa, DType dt, bool fnuz, const void* y, int64_t n, float s, bool divide,
               const float* inv, float fp8_max, uint8_t* q);

}  // namespace cpu
}  // namespace ircore_vllm_c
