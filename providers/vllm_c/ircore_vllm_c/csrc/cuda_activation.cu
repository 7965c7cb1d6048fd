// CUDA kernels of the gated activations declared in cpu_activation.cpp (gelu_and_mul,
// mul_and_silu, fatrelu_and_mul, swigluoai_and_mul); this library is loaded after that one.
//
// One thread per VEC-element output vector over the flattened [rows, d / VEC]: 16-byte loads of
// the two halves (or of 2 * VEC interleaved elements for swigluoai_and_mul) where the row, its
// pointers and stride allow, else element-wise. fp32 math, one rounding to T. Plain launches on
// the current stream (no PDL yet: a first form, compile-checked for sm_90, not yet run on a GPU).
// Only c10/cuda headers, as cuda_ops.cu (whose helpers live in its own translation unit: the
// small ones needed here are repeated in a namespace of their own).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstdint>
#include <string>

#include "act_common.h"
#include "ops_common.h"
#include "cuda_common.cuh"

namespace ircore_vllm_c {
namespace cuda_act {

using cuda_common::Cvt;

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// gelu(a) * b and friends, in fp32 (a: first half, b: second half).
template <GatedAct ACT>
__device__ __forceinline__ float act(float a, float b, float param) {
  // The GELUs in torch's own form, 0.5 a (1 + erf or tanh): exactly 0 where erf/tanh reach -1,
  // so that 0 * inf is NaN as in native (and vLLM's kernels use the same forms).
  if constexpr (ACT == GatedAct::kGeluErf) {
    return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f)) * b;
  } else if constexpr (ACT == GatedAct::kGeluTanh) {
    const float u = 0.79788456080286536f * a * (1.0f + 0.044715f * a * a);
    return 0.5f * a * (1.0f + tanhf(u)) * b;
  } else if constexpr (ACT == GatedAct::kMulSilu) {
    return a * (b / (1.0f + expf(-b)));
  } else {
    return (a <= param ? 0.0f : a) * b;  // F.threshold: NaN a stays NaN
  }
}

template <class T, int VEC, GatedAct ACT>
__global__ void __launch_bounds__(256)
    gated_act_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t in_stride,
                     int64_t rows, int64_t dv, int64_t d, float param) {
  using C = Cvt<T>;
  using V = Vec<T, VEC>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * dv) return;
  const int64_t r = i / dv;
  const int64_t c = (i - r * dv) * VEC;
  const T* a = in + r * in_stride + c;
  const V va = *reinterpret_cast<const V*>(a);
  const V vb = *reinterpret_cast<const V*>(a + d);
  V o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) o.v[k] = C::of(act<ACT>(C::f32(va.v[k]), C::f32(vb.v[k]), param));
  *reinterpret_cast<V*>(out + r * d + c) = o;
}

template <class T, int VEC>
__global__ void __launch_bounds__(256)
    swigluoai_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t in_stride, int64_t rows,
                     int64_t dv, int64_t d, float alpha, float limit) {
  using C = Cvt<T>;
  using V = Vec<T, VEC>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * dv) return;
  const int64_t r = i / dv;
  const int64_t c = (i - r * dv) * VEC;
  const T* x = in + r * in_stride + 2 * c;
  const V v0 = *reinterpret_cast<const V*>(x);
  const V v1 = *reinterpret_cast<const V*>(x + VEC);
  V o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const T gt = 2 * k < VEC ? v0.v[2 * k] : v1.v[2 * k - VEC];
    const T ut = 2 * k + 1 < VEC ? v0.v[2 * k + 1] : v1.v[2 * k + 1 - VEC];
    const float gf = C::f32(gt);
    const float uf = C::f32(ut);
    const float g = gf > limit ? limit : gf;  // as torch's clamp: NaN stays NaN
    const float u = uf > limit ? limit : (uf < -limit ? -limit : uf);
    o.v[k] = C::of((u + 1.0f) * (g / (1.0f + expf(-alpha * g))));
  }
  *reinterpret_cast<V*>(out + r * d + c) = o;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Runs launch(T*, const T*, in_stride, rows, d, vec_ok, stream) over x's rows (a contiguous copy
// when x is not rows of one stride), into a new output with the last dim halved.
template <class Launch>
at::Tensor run_rows(const char* op, const at::Tensor& x, Launch launch) {
  check_act_args(op, x);
  check_cuda(op, x);
  at::Tensor out = at::empty(half_last_dim(x), x.options());
  if (out.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const int64_t d = x.size(-1) / 2;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  IRC_CUDA_DISPATCH(x.scalar_type(), {
    T* o = static_cast<T*>(out.data_ptr());
    const T* i = static_cast<const T*>(xin.data_ptr());
    constexpr int kVec = 16 / sizeof(T);
    const bool vec_ok = d % kVec == 0 && aligned16(o) && aligned16(i) &&
                        (rows.stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    launch(o, i, rows.stride, rows.rows, d, vec_ok, stream);
  })
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

constexpr int kBlock = 256;

inline unsigned grid_of(int64_t total) {
  const int64_t grid = (total + kBlock - 1) / kBlock;
  TORCH_CHECK(grid < (int64_t{1} << 31), "ircore_vllm_c: gated activation input too large");
  return static_cast<unsigned>(grid);
}

template <GatedAct ACT>
at::Tensor gated_cuda(const char* op, const at::Tensor& x, float param) {
  return run_rows(op, x, [&](auto* o, const auto* i, int64_t s, int64_t rows, int64_t d, bool vec_ok,
                             cudaStream_t stream) {
    using T = std::remove_pointer_t<decltype(o)>;
    constexpr int kVec = 16 / sizeof(T);
    if (vec_ok) {
      const int64_t dv = d / kVec;
      gated_act_kernel<T, kVec, ACT><<<grid_of(rows * dv), kBlock, 0, stream>>>(o, i, s, rows, dv, d, param);
    } else {
      gated_act_kernel<T, 1, ACT><<<grid_of(rows * d), kBlock, 0, stream>>>(o, i, s, rows, d, d, param);
    }
  });
}

at::Tensor gelu_and_mul_cuda(const at::Tensor& x, const std::string& approximate) {
  if (gelu_mode(approximate) == GatedAct::kGeluTanh) {
    return gated_cuda<GatedAct::kGeluTanh>("gelu_and_mul", x, 0.0f);
  }
  return gated_cuda<GatedAct::kGeluErf>("gelu_and_mul", x, 0.0f);
}

at::Tensor mul_and_silu_cuda(const at::Tensor& x) {
  return gated_cuda<GatedAct::kMulSilu>("mul_and_silu", x, 0.0f);
}

at::Tensor fatrelu_and_mul_cuda(const at::Tensor& x, double threshold) {
  return gated_cuda<GatedAct::kFatrelu>("fatrelu_and_mul", x, static_cast<float>(threshold));
}

at::Tensor swigluoai_and_mul_cuda(const at::Tensor& x, double alpha, double limit) {
  check_swiglu_params(alpha, limit);
  const float a = static_cast<float>(alpha);
  const float l = static_cast<float>(limit);
  return run_rows("swigluoai_and_mul", x,
                  [&](auto* o, const auto* i, int64_t s, int64_t rows, int64_t d, bool vec_ok,
                      cudaStream_t stream) {
                    using T = std::remove_pointer_t<decltype(o)>;
                    constexpr int kVec = 16 / sizeof(T);
                    if (vec_ok) {  // 2 * d % (2 * kVec) == 0 and 16-byte rows: both loads aligned
                      const int64_t dv = d / kVec;
                      swigluoai_kernel<T, kVec><<<grid_of(rows * dv), kBlock, 0, stream>>>(
                          o, i, s, rows, dv, d, a, l);
                    } else {
                      swigluoai_kernel<T, 1><<<grid_of(rows * d), kBlock, 0, stream>>>(
                          o, i, s, rows, d, d, a, l);
                    }
                  });
}

}  // namespace cuda_act
}  // namespace ircore_vllm_c

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) {
  m.impl("gelu_and_mul", &ircore_vllm_c::cuda_act::gelu_and_mul_cuda);
  m.impl("mul_and_silu", &ircore_vllm_c::cuda_act::mul_and_silu_cuda);
  m.impl("fatrelu_and_mul", &ircore_vllm_c::cuda_act::fatrelu_and_mul_cuda);
  m.impl("swigluoai_and_mul", &ircore_vllm_c::cuda_act::swigluoai_and_mul_cuda);
}
