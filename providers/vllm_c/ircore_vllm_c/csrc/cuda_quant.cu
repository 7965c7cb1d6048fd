// CUDA kernels of the fp8 (e4m3fn) quant ops and the fused norm/activation + quant ops whose
// schemas cpu_quant.cpp defines. Kernels and their launcher only, with no torch header, so nvcc
// compiles this file in seconds; the torch bindings (checks, layouts, outputs) are
// cuda_quant_ops.cpp.
//
// One kernel per (dtype, source): one block per row, its threads over 16-byte chunks of the row
// (vector loads and stores where every row is aligned, element-wise otherwise), fp32 math, the
// threads per block fixed by the row length (a row's bits never depend on the batch). The source
// (x; rms_norm(x); rms_norm(x + residual); silu(a) * b) is computed once into shared memory,
// rounded to x's dtype where the op's native rounds, then quantised from there: a static scale
// (x * (1/s)), one dynamic scale per row (block amax), per-group scales (one warp per group), or
// per tensor in two launches (block amax + atomicMax on the float bits, then quantise). The
// amax is a max over the bits of |v|, so a NaN propagates as in torch's amax. Every value is
// clamped to +-fp8_max before its cast (a NaN stays NaN; the cast saturates finite values only).
// Each kernel waits on griddepcontrol before touching memory and releases its dependents at the
// end (PDL-safe, as the other kernels). Compile-checked for sm_90, not yet run on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_quant.h"
#include "cuda_common.cuh"

namespace ircore_vllm_c {
namespace cuda_quant {

using cuda_common::pdl_launch_dependents;
using cuda_common::pdl_wait;

using cuda_common::Cvt;

// Elements per 16-byte chunk.
template <class T>
struct Chunk {
  static constexpr int N = 16 / sizeof(T);
};

// Loads elements [i, i + N) of p as float (vec: one 16-byte load; else element-wise, 0 past end).
template <class T>
__device__ __forceinline__ void load_chunk(const T* p, int64_t i, int64_t end, bool vec,
                                           float (&v)[Chunk<T>::N]) {
  constexpr int N = Chunk<T>::N;
  if (vec) {
    const uint4 u = *reinterpret_cast<const uint4*>(p + i);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = Cvt<T>::f32(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = i + j < end ? Cvt<T>::f32(p[i + j]) : 0.0f;
  }
}

// Rounds v to T and stores it at p[i, i + N), and returns the rounded values in v.
template <class T>
__device__ __forceinline__ void store_chunk(T* p, int64_t i, int64_t end, bool vec,
                                            float (&v)[Chunk<T>::N]) {
  constexpr int N = Chunk<T>::N;
  if (vec) {
    uint4 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      e[j] = Cvt<T>::of(v[j]);
      v[j] = Cvt<T>::f32(e[j]);
    }
    *reinterpret_cast<uint4*>(p + i) = u;
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const T t = Cvt<T>::of(v[j]);
      v[j] = Cvt<T>::f32(t);
      if (i + j < end) p[i + j] = t;
    }
  }
}

// clamp(v, +-m) then the e4m3fn cast; NaN stays NaN (torch's clamp), as the native.
__device__ __forceinline__ uint8_t to_fp8(float v, float m) {
  const float c = v != v ? v : fminf(fmaxf(v, -m), m);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3));
}

template <int N>
__device__ __forceinline__ void store_fp8(uint8_t* q, int64_t i, int64_t end, bool vec,
                                          const uint8_t (&b)[N]) {
  if (vec) {
    if constexpr (N == 8) {
      uint2 u;
      uint8_t* e = reinterpret_cast<uint8_t*>(&u);
#pragma unroll
      for (int j = 0; j < N; ++j) e[j] = b[j];
      *reinterpret_cast<uint2*>(q + i) = u;
    } else {
      uint32_t u;
      uint8_t* e = reinterpret_cast<uint8_t*>(&u);
#pragma unroll
      for (int j = 0; j < N; ++j) e[j] = b[j];
      *reinterpret_cast<uint32_t*>(q + i) = u;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (i + j < end) q[i + j] = b[j];
    }
  }
}

// |v| as ordered bits: max over them is the amax, NaN (above +inf) propagating.
__device__ __forceinline__ unsigned abs_bits(float v) { return __float_as_uint(fabsf(v)); }

__device__ __forceinline__ unsigned warp_max(unsigned v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block reductions (every thread gets the result); red holds 32 words.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ unsigned block_max(unsigned v, unsigned* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0u;
  return warp_max(v);
}

// 2^ceil(log2(s)) for s >= 0, exactly, by the exponent (as the natives' _quant.pow2_ceil): log2f
// is documented to 1 ulp, and one ulp high turns an exact power of two into the next. 0, NaN
// and inf are kept.
__device__ __forceinline__ float pow2_ceil(float s) {
  if (!(s > 0.0f) || isinf(s)) return s;
  int e;
  const float m = frexpf(s, &e);  // s = m * 2^e, m in [0.5, 1)
  return m == 0.5f ? s : ldexpf(1.0f, e);
}

// The dynamic scale of an amax, in fp32 as the natives: amax / fp8_max, rounded up to a power
// of two (ue8m0), then floored at min_scale (a NaN stays NaN).
__device__ __forceinline__ float dyn_scale(float amax, const QuantLaunch& l, bool ue8m0) {
  float s = amax / l.fp8_max;
  if (ue8m0) s = pow2_ceil(s);
  return s < l.min_scale ? l.min_scale : s;
}

template <class T, QSource S>
__global__ void __launch_bounds__(1024) quant_kernel(const QuantLaunch l, bool vec) {
  using C = Cvt<T>;
  constexpr int N = Chunk<T>::N;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float red[32];
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int64_t k = l.k;
  const int64_t step = static_cast<int64_t>(blockDim.x) * N;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * N;
  const T* y;  // the row to quantise: x's row (kPlain) or the computed one in shared memory
  if constexpr (S == QSource::kPlain) {
    y = static_cast<const T*>(l.x) + row * l.x_stride;
  } else {
    T* ys = reinterpret_cast<T*>(smem_raw);
    const T* x = static_cast<const T*>(l.x) + row * l.x_stride;
    if constexpr (S == QSource::kSilu) {
      for (int64_t i = first; i < k; i += step) {
        float a[N], b[N];
        load_chunk<T>(x, i, k, vec, a);
        load_chunk<T>(x + k, i, k, vec, b);
#pragma unroll
        for (int j = 0; j < N; ++j) a[j] = a[j] / (1.0f + expf(-a[j])) * b[j];
        store_chunk<T>(ys, i, k, vec, a);
      }
    } else {
      float ss = 0.0f;
      for (int64_t i = first; i < k; i += step) {
        float v[N];
        load_chunk<T>(x, i, k, vec, v);
        if constexpr (S == QSource::kAddNorm) {
          float r[N];
          load_chunk<T>(static_cast<const T*>(l.residual) + row * l.r_stride, i, k, vec, r);
#pragma unroll
          for (int j = 0; j < N; ++j) v[j] += r[j];
          store_chunk<T>(static_cast<T*>(l.res_out) + row * k, i, k, vec, v);
        }
        store_chunk<T>(ys, i, k, vec, v);  // (exact: v is of T already)
#pragma unroll
        for (int j = 0; j < N; ++j) ss = fmaf(v[j], v[j], ss);
      }
      ss = block_sum(ss, red);
      const float inv = rsqrtf(ss / static_cast<float>(k) + l.eps);
      for (int64_t i = first; i < k; i += step) {  // this thread's own elements: no sync needed
        float v[N];
        load_chunk<T>(ys, i, k, vec, v);
        if (l.weight == nullptr) {
#pragma unroll
          for (int j = 0; j < N; ++j) v[j] = v[j] * inv;
        } else if (l.weight_f32) {
          const float* wf = static_cast<const float*>(l.weight);
#pragma unroll
          for (int j = 0; j < N; ++j) v[j] = v[j] * inv * (i + j < k ? wf[i + j] : 0.0f);
        } else {
          float w[N];
          load_chunk<T>(static_cast<const T*>(l.weight), i, k, vec, w);
#pragma unroll
          for (int j = 0; j < N; ++j) v[j] = v[j] * inv * w[j];
        }
        store_chunk<T>(ys, i, k, vec, v);
      }
    }
    __syncthreads();
    y = ys;
  }
  uint8_t* q = l.q + row * k;
  const float m = l.fp8_max;
  if (l.mode == QMode::kGroup) {
    const int lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5;
    const int64_t g = l.group;
    const bool gvec = vec && g % N == 0;
    const int64_t rm = row % l.m_rows;
    for (int64_t gi = threadIdx.x >> 5; gi < l.groups; gi += nw) {
      const int64_t g0 = gi * g;
      const int64_t g1 = g0 + g < k ? g0 + g : k;
      unsigned amax = 0u;
      for (int64_t i = g0 + lane * N; i < g1; i += 32 * N) {
        float v[N];
        load_chunk<T>(y, i, g1, gvec, v);
#pragma unroll
        for (int j = 0; j < N; ++j) amax = max(amax, abs_bits(v[j]));
      }
      const float s = dyn_scale(__uint_as_float(warp_max(amax)), l, l.ue8m0);
      if (lane == 0) {
        const int64_t at = l.column_major
                               ? (row / l.m_rows) * l.batch_stride + gi * l.col_stride + rm
                               : row * l.groups + gi;
        l.scales[at] = s;
      }
      for (int64_t i = g0 + lane * N; i < g1; i += 32 * N) {
        float v[N];
        uint8_t b[N];
        load_chunk<T>(y, i, g1, gvec, v);
#pragma unroll
        for (int j = 0; j < N; ++j) b[j] = to_fp8(v[j] / s, m);  // the group op divides
        store_fp8<N>(q, i, g1, gvec, b);
      }
    }
  } else if (l.mode == QMode::kStatic) {
    const int64_t rm = row % l.m_rows;
    const float* srow = l.scale + (l.sa == 1 ? 0 : rm / (l.m_rows / l.sa)) * l.sb;
    const int64_t gk = k / l.sb;
    const float inv0 = 1.0f / srow[0];
    for (int64_t i = first; i < k; i += step) {
      float v[N];
      uint8_t b[N];
      load_chunk<T>(y, i, k, vec, v);
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const float inv = l.sb == 1 ? inv0 : 1.0f / srow[(i + j < k ? i + j : k - 1) / gk];
        b[j] = to_fp8(v[j] * inv, m);
      }
      store_fp8<N>(q, i, k, vec, b);
    }
  } else {
    unsigned amax = 0u;
    if (l.mode != QMode::kTensor) {
      for (int64_t i = first; i < k; i += step) {
        float v[N];
        load_chunk<T>(y, i, k, vec, v);
#pragma unroll
        for (int j = 0; j < N; ++j) amax = max(amax, abs_bits(v[j]));
      }
      amax = block_max(amax, reinterpret_cast<unsigned*>(red));
    }
    if (l.mode == QMode::kAmax) {
      if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(l.amax), amax);
    } else {
      float a = l.mode == QMode::kTensor ? *l.amax : __uint_as_float(amax);
      if (l.mode == QMode::kToken && l.scale_ub != nullptr) {
        const float ub = *l.scale_ub;
        a = a > ub ? ub : a;
      }
      const float s = dyn_scale(a, l, false);
      if (threadIdx.x == 0 && (l.mode == QMode::kToken || row == 0)) {
        l.scales[l.mode == QMode::kToken ? row : 0] = s;
      }
      const float inv = 1.0f / s;
      for (int64_t i = first; i < k; i += step) {
        float v[N];
        uint8_t b[N];
        load_chunk<T>(y, i, k, vec, v);
#pragma unroll
        for (int j = 0; j < N; ++j) b[j] = to_fp8(v[j] * inv, m);
        store_fp8<N>(q, i, k, vec, b);
      }
    }
  }
  pdl_launch_dependents();
}

// Threads per row block: the row's 16-byte chunks rounded up to a warp, 64..1024 (a function of
// the row length alone).
template <class T>
int threads_for(int64_t k) {
  const int64_t chunks = (k + Chunk<T>::N - 1) / Chunk<T>::N;
  const int64_t t = (chunks + 31) / 32 * 32;
  return static_cast<int>(t < 64 ? 64 : (t > 1024 ? 1024 : t));
}

bool aligned(const void* p, int64_t stride_elems, int64_t elem_bytes) {
  return (reinterpret_cast<uintptr_t>(p) % 16 == 0) && (stride_elems * elem_bytes) % 16 == 0;
}

template <class T, QSource S>
cudaError_t launch_t(const QuantLaunch& l, cudaStream_t stream) {
  constexpr int64_t E = sizeof(T);
  // 16-byte chunks: every row of every operand starts 16-byte aligned and holds whole chunks.
  bool vec = l.k % Chunk<T>::N == 0 && aligned(l.x, l.x_stride, E);
  if (S == QSource::kSilu) vec = vec && aligned(static_cast<const T*>(l.x) + l.k, l.x_stride, E);
  if (S == QSource::kAddNorm) {
    vec = vec && aligned(l.residual, l.r_stride, E) && aligned(l.res_out, l.k, E);
  }
  if (S != QSource::kPlain && l.weight != nullptr && !l.weight_f32) {
    vec = vec && aligned(l.weight, 0, E);
  }
  const size_t smem = S == QSource::kPlain ? 0 : static_cast<size_t>(l.k * E);
  auto kernel = quant_kernel<T, S>;
  if (smem > 48 * 1024) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  if (l.mode == QMode::kAmax) {
    const cudaError_t err = cudaMemsetAsync(l.amax, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
  }
  kernel<<<dim3(static_cast<unsigned>(l.rows)), threads_for<T>(l.k), smem, stream>>>(l, vec);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_dtype(const QuantLaunch& l, cudaStream_t stream) {
  switch (l.source) {
    case QSource::kNorm:
      return launch_t<T, QSource::kNorm>(l, stream);
    case QSource::kAddNorm:
      return launch_t<T, QSource::kAddNorm>(l, stream);
    case QSource::kSilu:
      return launch_t<T, QSource::kSilu>(l, stream);
    default:
      return launch_t<T, QSource::kPlain>(l, stream);
  }
}

cudaError_t launch_quant(const QuantLaunch& l, cudaStream_t stream) {
  if (l.rows == 0) return cudaSuccess;
  switch (l.dtype) {
    case QDType::kHalf:
      return launch_dtype<__half>(l, stream);
    case QDType::kBFloat16:
      return launch_dtype<__nv_bfloat16>(l, stream);
    default:
      return launch_dtype<float>(l, stream);
  }
}

}  // namespace cuda_quant
}  // namespace ircore_vllm_c
