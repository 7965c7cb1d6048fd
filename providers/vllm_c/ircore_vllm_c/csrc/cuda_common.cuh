// Device helpers every CUDA source of this provider uses (cuda_ops.cu, cuda_activation.cu,
// cuda_rope.cu, cuda_quant.cu, cuda_norm_invariant.cu): no torch header, so each file stays
// fast to compile.
//
// Programmatic dependent launch (PDL, sm_90+): a kernel launched with the stream serialization
// attribute may start while the previous kernel in the stream is finishing, so it waits for that
// kernel's completion and memory (pdl_wait) before its first global read or write, and lets the
// next kernel start launching once its own loads are issued (pdl_launch_dependents). Both are
// no-ops in a plain launch; before sm_90 they are compiled out.
//
// Cvt<T>: T <-> float, one rounding (round to nearest even) on the way back.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ircore_vllm_c {
namespace cuda_common {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <class T>
struct Cvt;
template <>
struct Cvt<float> {
  __device__ __forceinline__ static float f32(float v) { return v; }
  __device__ __forceinline__ static float of(float v) { return v; }
};
template <>
struct Cvt<__half> {
  __device__ __forceinline__ static float f32(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half of(float v) { return __float2half_rn(v); }
};
template <>
struct Cvt<__nv_bfloat16> {
  __device__ __forceinline__ static float f32(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 of(float v) { return __float2bfloat16_rn(v); }
};

}  // namespace cuda_common
}  // namespace ircore_vllm_c

// For the bindings (the sources that include torch's headers): runs the statements with T the
// CUDA type of the scalar type st (float32, float16 or bfloat16; the checks refuse the others).
#define IRC_CUDA_DISPATCH(st, ...)         \
  switch (st) {                            \
    case at::ScalarType::Half: {           \
      using T = __half;                    \
      __VA_ARGS__;                         \
      break;                               \
    }                                      \
    case at::ScalarType::BFloat16: {       \
      using T = __nv_bfloat16;             \
      __VA_ARGS__;                         \
      break;                               \
    }                                      \
    default: {                             \
      using T = float;                     \
      __VA_ARGS__;                         \
      break;                               \
    }                                      \
  }
