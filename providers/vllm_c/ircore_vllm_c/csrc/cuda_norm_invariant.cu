// Batch-invariant launches of the CUDA norms (rms_norm, fused_add_rms_norm, rms_norm_gated in
// its per-row and grouped forms, layer_norm): the ops `<op>_invariant`, same schemas as the
// default ones (cpu_ops.cpp), which batch-invariant mode runs on CUDA tensors (impls.py).
//
// Why the default launches are batch-variant: rms_norm / fused_add_rms_norm pick vectors per
// thread, threads per row and rows per block by the row count (cuda_ops.cu, pick_norm_config:
// its latency, mid-size and bandwidth rules), and every norm takes its 16-byte vector path or
// its element-wise path by pointer alignment, which for a row-strided batch differs from row to
// row; each choice changes which thread sums which elements, hence a row's rounding.
//
// Why these are invariant: the launch configuration (vectors per thread NV, threads per row
// tpr, threads per block) is a function of the hidden (or group) size, the dtype and which op
// only -- never of the row count, the row's index or its pointers. Element e of a row always
// belongs to "chunk" e / VEC (VEC = 16 / sizeof(T), whatever the alignment), chunk c to thread
// c % tpr of the row's group, and each thread sums its chunks in increasing c, each chunk's
// elements in increasing e; the group's partial sums are then combined by a fixed xor-shuffle
// tree and, past a warp, the warp sums added in warp order. A chunk is loaded as one 16-byte
// access where the row's pointer allows it and element by element otherwise: the same values
// either way, so the same sums. Rows never share a reduction, and the grid size only decides
// how many groups run, not what any of them computes. Hence each row gives the same bits alone
// or anywhere in any batch, contiguous or strided, eager or replayed from a CUDA graph.
//
// The configuration is the default launch's at large T (the bandwidth regime, which is where
// the cost matters): rms_norm two 16-byte vectors per thread in 512-thread blocks,
// fused_add_rms_norm one in 1024-thread blocks (more where the row needs it, as there), one row
// per thread group; rows past 4 vectors x 512 threads take a two-pass kernel with one row per
// block. rms_norm_gated and layer_norm launch as their default aligned path does (one block per
// row, or per group of a row, of row_block(n, VEC) threads), which depends on the row length only.
// Their cost against the default is measured by benchmarks/batch_invariant_gpu.py.
//
// Only c10/cuda headers, as cuda_ops.cu; the small helpers needed here are repeated in a namespace
// of their own (that file's live in its translation unit), except the PDL switch, shared with it.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "ops_common.h"

namespace ircore_vllm_c {
namespace cuda {
bool use_pdl(int device);  // cuda_ops.cu: IRCORE_VLLM_C_PDL / _cuda_set_pdl, compute capability
}  // namespace cuda

namespace cuda_inv {

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

template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <class T>
__device__ __forceinline__ float round_to(float v) {
  return Cvt<T>::f32(Cvt<T>::of(v));
}

__device__ __forceinline__ bool aligned_to(const void* p, unsigned n) {
  return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0;
}

// Chunk c of a span of n elements at p (elements c * N .. c * N + N - 1) as floats: one N-element
// access where `vec` (the caller's test: n % N == 0 and p aligned to N elements), else element
// by element, zeros past n. The values are the same either way.
template <class S, int N>
__device__ __forceinline__ void load_chunk(const S* p, int c, int n, bool vec, float (&f)[N]) {
  const int e0 = c * N;
  if (vec) {
    const Vec<S, N> v = *reinterpret_cast<const Vec<S, N>*>(p + e0);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = Cvt<S>::f32(v.v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = e0 + i < n ? Cvt<S>::f32(p[e0 + i]) : 0.0f;
  }
}

// f rounded to S into chunk c (elements past n are not written).
template <class S, int N>
__device__ __forceinline__ void store_chunk(S* p, int c, int n, bool vec, const float (&f)[N]) {
  const int e0 = c * N;
  if (vec) {
    Vec<S, N> v;
#pragma unroll
    for (int i = 0; i < N; ++i) v.v[i] = Cvt<S>::of(f[i]);
    *reinterpret_cast<Vec<S, N>*>(p + e0) = v;
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (e0 + i < n) p[e0 + i] = Cvt<S>::of(f[i]);
    }
  }
}

// Whether a span of n elements of S at p is read in N-element accesses.
template <class S, int N>
__device__ __forceinline__ bool vec_ok(const S* p, int n) {
  return n % N == 0 && aligned_to(p, sizeof(S) * N);
}

// PDL (sm_90+), as in cuda_ops.cu: wait for the previous kernel before the first global access,
// let the next one start launching once the loads are issued; no-ops in a plain launch.
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

// The sum of v over the `tpr` threads of each group (tpr a power of two up to 32, or a multiple
// of 32 whose warps are consecutive), the same bits in every thread of the group. Every thread
// of the block calls it (full-warp shuffles). Order fixed by tpr alone: an xor-shuffle tree
// (commutative pairwise adds, so every lane ends with the same value), then the group's warp
// sums added in warp order.
__device__ __forceinline__ float group_sum(float v, int tpr) {
  if (tpr <= 32) {
    for (int o = tpr >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  __shared__ float red[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  const int wpr = tpr >> 5;
  const int first = static_cast<int>(threadIdx.x / tpr) * wpr;
  float s = 0.0f;
  for (int i = 0; i < wpr; ++i) s += red[first + i];
  __syncthreads();  // red is written again by the next call (layer_norm's second sum)
  return s;
}

// ------------------------------------------------------------------------------------------
// rms_norm and fused_add_rms_norm.

template <class T, class WT>
struct NormParams {
  T* out;  // rms_norm: the output; fused: x (written in place)
  int64_t out_stride;
  const T* in;  // rms_norm: the input; fused: x (== out)
  int64_t in_stride;
  T* res;  // fused only: the residual (read, then overwritten with x + residual)
  int64_t res_stride;
  const WT* w;  // may be null; x's dtype or float
  int hidden;
  int var_size;
  float eps;
  int64_t rows;
  int tpr;             // threads per row (a function of hidden, dtype and op only)
  int rows_per_block;  // blockDim.x / tpr
};

__host__ __device__ constexpr int inv_max_threads(int nv) { return nv == 1 ? 1024 : 512; }

// Register-resident: row r is handled by thread group r % rows_per_block of block
// r / rows_per_block; thread `lane` of the group holds chunks lane + k * tpr (k < NV).
template <class T, class WT, int NV, bool FUSED>
__global__ void __launch_bounds__(inv_max_threads(NV)) inv_norm_kernel(const NormParams<T, WT> p) {
  constexpr int VEC = 16 / sizeof(T);
  const int tpr = p.tpr;
  const int lane = static_cast<int>(threadIdx.x) % tpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * p.rows_per_block + threadIdx.x / tpr;
  const bool active = row < p.rows;
  const int n = p.hidden;
  const int nchunk = (n + VEC - 1) / VEC;
  float xf[NV][VEC];
  pdl_wait();
  if (active) {
    const T* xrow = p.in + row * p.in_stride;
    const bool vx = vec_ok<T, VEC>(xrow, n);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int c = lane + k * tpr;
      if (c < nchunk) load_chunk<T, VEC>(xrow, c, n, vx, xf[k]);
    }
    if constexpr (FUSED) {
      T* rrow = p.res + row * p.res_stride;
      const bool vr = vec_ok<T, VEC>(rrow, n);
      float rf[NV][VEC];
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int c = lane + k * tpr;
        if (c < nchunk) load_chunk<T, VEC>(rrow, c, n, vr, rf[k]);
      }
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int c = lane + k * tpr;
        if (c < nchunk) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) xf[k][i] = round_to<T>(xf[k][i] + rf[k][i]);
          store_chunk<T, VEC>(rrow, c, n, vr, xf[k]);
        }
      }
    }
  }
  pdl_launch_dependents();
  float acc = 0.0f;
  if (active) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int c = lane + k * tpr;
      if (c < nchunk) {
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < VEC; ++i) a += c * VEC + i < p.var_size ? xf[k][i] * xf[k][i] : 0.0f;
        acc += a;
      }
    }
  }
  const float ss = group_sum(acc, tpr);
  if (!active) return;
  const float inv = rsqrtf(ss / static_cast<float>(p.var_size) + p.eps);
  T* orow = p.out + row * p.out_stride;
  const bool vo = vec_ok<T, VEC>(orow, n);
  const bool vw = p.w != nullptr && vec_ok<WT, VEC>(p.w, n);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = lane + k * tpr;
    if (c < nchunk) {
      float o[VEC];
      if (p.w != nullptr) {
        float wf[VEC];
        load_chunk<WT, VEC>(p.w, c, n, vw, wf);
#pragma unroll
        for (int i = 0; i < VEC; ++i) o[i] = xf[k][i] * inv * wf[i];
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) o[i] = xf[k][i] * inv;
      }
      store_chunk<T, VEC>(orow, c, n, vo, o);
    }
  }
}

// Long rows: one row per block of tpr threads, thread t taking chunks t, t + tpr, ... in order;
// two passes (the second re-reads the row, or for fused the residual sum it wrote, from L2).
template <class T, class WT, bool FUSED>
__global__ void __launch_bounds__(1024) inv_norm_loop_kernel(const NormParams<T, WT> p) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t row = blockIdx.x;
  const int n = p.hidden;
  const int nchunk = (n + VEC - 1) / VEC;
  const int tpr = static_cast<int>(blockDim.x);
  const T* xrow = p.in + row * p.in_stride;
  T* rrow = FUSED ? p.res + row * p.res_stride : nullptr;
  const bool vx = vec_ok<T, VEC>(xrow, n);
  const bool vr = FUSED && vec_ok<T, VEC>(rrow, n);
  pdl_wait();
  float acc = 0.0f;
  for (int c = threadIdx.x; c < nchunk; c += tpr) {
    float f[VEC];
    load_chunk<T, VEC>(xrow, c, n, vx, f);
    if constexpr (FUSED) {
      float r[VEC];
      load_chunk<T, VEC>(rrow, c, n, vr, r);
#pragma unroll
      for (int i = 0; i < VEC; ++i) f[i] = round_to<T>(f[i] + r[i]);
      store_chunk<T, VEC>(rrow, c, n, vr, f);
    }
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) a += c * VEC + i < p.var_size ? f[i] * f[i] : 0.0f;
    acc += a;
  }
  pdl_launch_dependents();
  const float inv = rsqrtf(group_sum(acc, tpr) / static_cast<float>(p.var_size) + p.eps);
  const T* src = FUSED ? rrow : xrow;
  const bool vs = FUSED ? vr : vx;
  T* orow = p.out + row * p.out_stride;
  const bool vo = vec_ok<T, VEC>(orow, n);
  const bool vw = p.w != nullptr && vec_ok<WT, VEC>(p.w, n);
  for (int c = threadIdx.x; c < nchunk; c += tpr) {
    float f[VEC], o[VEC];
    load_chunk<T, VEC>(src, c, n, vs, f);
    if (p.w != nullptr) {
      float wf[VEC];
      load_chunk<WT, VEC>(p.w, c, n, vw, wf);
#pragma unroll
      for (int i = 0; i < VEC; ++i) o[i] = f[i] * inv * wf[i];
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) o[i] = f[i] * inv;
    }
    store_chunk<T, VEC>(orow, c, n, vo, o);
  }
}

// ------------------------------------------------------------------------------------------
// Launch configuration: hidden size, dtype (vec) and op only.

int round_tpr(int t) {  // power of two up to 32, multiple of 32 above (as cuda_ops.cu)
  if (t <= 1) return 1;
  if (t <= 32) {
    int p = 1;
    while (p < t) p <<= 1;
    return p;
  }
  return std::min(1024, (t + 31) / 32 * 32);
}

struct InvConfig {
  int nv;     // chunks per thread: 1, 2 or 4; 0 = the loop kernel
  int tpr;    // threads per row
  int block;  // threads per block
};

// pick_norm_config's choice in the bandwidth regime (many rows): one chunk per thread, as many
// threads as the row has chunks, doubling the chunks per thread past 1024 (then 512) threads;
// rms_norm two chunks per thread where one would do (one load of x in flight per thread leaves
// HBM latency uncovered; fused_add_rms_norm has two streams and keeps one); 512-thread blocks
// for rms_norm and for more than one chunk per thread, 1024 for fused_add_rms_norm.
InvConfig inv_norm_config(int hidden, int vec, bool fused) {
  const int nchunk = (hidden + vec - 1) / vec;
  int nv = 1;
  while (nv <= 4 && (nchunk + nv - 1) / nv > (nv == 1 ? 1024 : 512)) nv *= 2;
  if (nv > 4) {
    const int t = std::min(1024, round_tpr(std::max(32, nchunk / 4)));
    return {0, t, t};
  }
  if (!fused && nv == 1) nv = 2;
  const int tpr = round_tpr((nchunk + nv - 1) / nv);
  const int want = fused && nv == 1 ? 1024 : 512;
  int block = std::max(1, want / tpr) * tpr;
  block = std::min(block, inv_max_threads(nv) / tpr * tpr);
  return {nv, tpr, (block + 31) / 32 * 32};
}

struct Launch {
  cudaStream_t stream;
  bool pdl;
};

Launch launch_on(const at::Tensor& x) {
  const int device = x.device().index();
  return {c10::cuda::getCurrentCUDAStream(device).stream(), cuda::use_pdl(device)};
}

template <class... KArgs, class... Args>
void launch_kernel(void (*kernel)(KArgs...), unsigned grid, int block, const Launch& l,
                   Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = l.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = l.pdl ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

template <class T, class WT, bool FUSED>
void launch_inv_norm(NormParams<T, WT> p, const Launch& l) {
  const InvConfig c = inv_norm_config(p.hidden, 16 / sizeof(T), FUSED);
  p.tpr = c.tpr;
  if (c.nv == 0) {
    p.rows_per_block = 1;
    launch_kernel(inv_norm_loop_kernel<T, WT, FUSED>, static_cast<unsigned>(p.rows), c.block, l, p);
    return;
  }
  // block is a multiple of tpr: tpr <= 32 divides the 32-rounded block (a power of two), and
  // past 32 the block is tpr times a count.
  p.rows_per_block = c.block / c.tpr;
  const unsigned grid = static_cast<unsigned>((p.rows + p.rows_per_block - 1) / p.rows_per_block);
  if (c.nv == 1) {
    launch_kernel(inv_norm_kernel<T, WT, 1, FUSED>, grid, c.block, l, p);
  } else if (c.nv == 2) {
    launch_kernel(inv_norm_kernel<T, WT, 2, FUSED>, grid, c.block, l, p);
  } else {
    launch_kernel(inv_norm_kernel<T, WT, 4, FUSED>, grid, c.block, l, p);
  }
}

// ------------------------------------------------------------------------------------------
// rms_norm_gated and layer_norm: one block per row (per group of a row for rms_norm_gated) of
// row_block(n, VEC) threads, the default's aligned configuration, with the chunk loads above.

// Threads for a row of n elements in VEC-element chunks: a multiple of 32 up to 1024, about
// four chunks per thread (as cuda_ops.cu's row_block).
inline int row_block(int64_t n, int vec) {
  const int64_t vecs = (n + vec - 1) / vec;
  const int64_t t = std::min<int64_t>(1024, std::max<int64_t>(32, (vecs + 3) / 4));
  return static_cast<int>((t + 31) / 32 * 32);
}

template <class T, class WT>
struct GatedParams {
  T* out;  // contiguous rows of `hidden`
  const T* in;
  int64_t in_stride;
  const T* gate;
  int64_t gate_stride;
  const WT* w;
  int hidden;
  int group;
  int n_groups;
  float eps;
};

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

template <class T, class WT, bool NBG, bool ROUND>
__global__ void __launch_bounds__(1024) inv_gated_kernel(const GatedParams<T, WT> p) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t row = blockIdx.x / p.n_groups;
  const int c0 = static_cast<int>(blockIdx.x % p.n_groups) * p.group;
  const int n = p.group;
  const int nchunk = (n + VEC - 1) / VEC;
  const int nt = static_cast<int>(blockDim.x);
  const T* x = p.in + row * p.in_stride + c0;
  const T* g = p.gate + row * p.gate_stride + c0;
  T* o = p.out + row * p.hidden + c0;
  const WT* w = p.w + c0;
  const bool vx = vec_ok<T, VEC>(x, n);
  const bool vg = vec_ok<T, VEC>(g, n);
  const bool vo = vec_ok<T, VEC>(o, n);
  const bool vw = vec_ok<WT, VEC>(w, n);
  pdl_wait();
  float acc = 0.0f;
  for (int c = threadIdx.x; c < nchunk; c += nt) {
    float xf[VEC];
    load_chunk<T, VEC>(x, c, n, vx, xf);
    float a = 0.0f;
    if constexpr (NBG) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) a += xf[i] * xf[i];
    } else {
      float gf[VEC];
      load_chunk<T, VEC>(g, c, n, vg, gf);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float v = xf[i] * silu_f(gf[i]);
        a += v * v;
      }
    }
    acc += a;  // chunk elements past n are 0 and add 0
  }
  pdl_launch_dependents();
  const float inv = rsqrtf(group_sum(acc, nt) / static_cast<float>(p.group) + p.eps);
  for (int c = threadIdx.x; c < nchunk; c += nt) {
    float xf[VEC], gf[VEC], wf[VEC], out[VEC];
    load_chunk<T, VEC>(x, c, n, vx, xf);
    load_chunk<T, VEC>(g, c, n, vg, gf);
    load_chunk<WT, VEC>(w, c, n, vw, wf);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float s = silu_f(gf[i]);
      float y = (NBG ? xf[i] : xf[i] * s) * inv;
      if constexpr (ROUND) {
        y = round_to<T>(y) * wf[i];
        if constexpr (NBG) y = round_to<T>(y) * s;
      } else {
        y = y * wf[i];
        if constexpr (NBG) y = y * s;
      }
      out[i] = y;
    }
    store_chunk<T, VEC>(o, c, n, vo, out);
  }
}

template <class T>
struct LayerNormParams {
  T* out;  // contiguous rows of `hidden`
  const T* in;
  int64_t in_stride;
  const T* w;  // may be null
  const T* b;  // may be null
  int hidden;
  float eps;
};

// Three passes, as the default: the mean, the variance of x - mean, the output.
template <class T>
__global__ void __launch_bounds__(1024) inv_layer_norm_kernel(const LayerNormParams<T> p) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t row = blockIdx.x;
  const int n = p.hidden;
  const int nchunk = (n + VEC - 1) / VEC;
  const int nt = static_cast<int>(blockDim.x);
  const T* x = p.in + row * p.in_stride;
  T* o = p.out + row * p.hidden;
  const bool vx = vec_ok<T, VEC>(x, n);
  const bool vo = vec_ok<T, VEC>(o, n);
  const bool vw = p.w != nullptr && vec_ok<T, VEC>(p.w, n);
  const bool vb = p.b != nullptr && vec_ok<T, VEC>(p.b, n);
  const float nf = static_cast<float>(n);
  pdl_wait();
  float acc = 0.0f;
  for (int c = threadIdx.x; c < nchunk; c += nt) {
    float xf[VEC];
    load_chunk<T, VEC>(x, c, n, vx, xf);
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) a += xf[i];  // elements past n are 0
    acc += a;
  }
  pdl_launch_dependents();
  const float mean = group_sum(acc, nt) / nf;
  acc = 0.0f;
  for (int c = threadIdx.x; c < nchunk; c += nt) {
    float xf[VEC];
    load_chunk<T, VEC>(x, c, n, vx, xf);
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float d = xf[i] - mean;
      a += c * VEC + i < n ? d * d : 0.0f;
    }
    acc += a;
  }
  const float inv = rsqrtf(group_sum(acc, nt) / nf + p.eps);
  for (int c = threadIdx.x; c < nchunk; c += nt) {
    float xf[VEC], out[VEC];
    load_chunk<T, VEC>(x, c, n, vx, xf);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = (xf[i] - mean) * inv;
    if (p.w != nullptr) {
      float wf[VEC];
      load_chunk<T, VEC>(p.w, c, n, vw, wf);
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] *= wf[i];
    }
    if (p.b != nullptr) {
      float bf[VEC];
      load_chunk<T, VEC>(p.b, c, n, vb, bf);
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] += bf[i];
    }
    store_chunk<T, VEC>(o, c, n, vo, out);
  }
}

// ------------------------------------------------------------------------------------------
// Op bindings: the default ones' checks and row views (cuda_ops.cu), these launches.

#define IRC_INV_DISPATCH(st, ...)          \
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

at::Tensor rms_norm_invariant_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                   double epsilon, std::optional<int64_t> variance_size) {
  check_x("rms_norm", x);
  check_cuda("rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_norm_args("rms_norm", x, weight, variance_size, w);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin = x;
  auto rows = as_rows(xin);
  if (!rows) {
    xin = x.contiguous();
    rows = as_rows(xin);
  }
  const int64_t hidden = x.size(-1);
  check_sizes("rms_norm", hidden, rows->rows);
  const Launch l = launch_on(x);
  const bool fp32_weight = w.defined() && w.scalar_type() != x.scalar_type();
  IRC_INV_DISPATCH(x.scalar_type(), {
    auto run = [&](auto* wtag) {
      using WT = std::remove_pointer_t<decltype(wtag)>;
      NormParams<T, WT> p{};
      p.out = static_cast<T*>(out.data_ptr());
      p.out_stride = hidden;
      p.in = static_cast<const T*>(xin.data_ptr());
      p.in_stride = rows->stride;
      p.w = w.defined() ? static_cast<const WT*>(w.data_ptr()) : nullptr;
      p.hidden = static_cast<int>(hidden);
      p.var_size = static_cast<int>(vs);
      p.eps = static_cast<float>(epsilon);
      p.rows = rows->rows;
      launch_inv_norm<T, WT, false>(p, l);
    };
    if (fp32_weight) {
      run(static_cast<float*>(nullptr));
    } else {
      run(static_cast<T*>(nullptr));
    }
  })
  return out;
}

void fused_add_rms_norm_invariant_cuda(at::Tensor& x, at::Tensor& residual,
                                       const std::optional<at::Tensor>& weight, double epsilon,
                                       std::optional<int64_t> variance_size) {
  check_cuda("fused_add_rms_norm", x);
  check_residual("fused_add_rms_norm", x, residual);
  at::Tensor w;
  const int64_t vs = check_norm_args("fused_add_rms_norm", x, weight, variance_size, w);
  if (x.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xw = x;
  at::Tensor rw = residual;
  auto xr = as_writable_rows(xw);
  auto rr = as_writable_rows(rw);
  if (!xr) {
    xw = x.contiguous();
    xr = as_rows(xw);
  }
  if (!rr) {
    rw = residual.contiguous();
    rr = as_rows(rw);
  }
  const int64_t hidden = x.size(-1);
  check_sizes("fused_add_rms_norm", hidden, xr->rows);
  const Launch l = launch_on(x);
  const bool fp32_weight = w.defined() && w.scalar_type() != x.scalar_type();
  IRC_INV_DISPATCH(x.scalar_type(), {
    auto run = [&](auto* wtag) {
      using WT = std::remove_pointer_t<decltype(wtag)>;
      NormParams<T, WT> p{};
      p.out = static_cast<T*>(xw.data_ptr());
      p.out_stride = xr->stride;
      p.in = p.out;
      p.in_stride = xr->stride;
      p.res = static_cast<T*>(rw.data_ptr());
      p.res_stride = rr->stride;
      p.w = w.defined() ? static_cast<const WT*>(w.data_ptr()) : nullptr;
      p.hidden = static_cast<int>(hidden);
      p.var_size = static_cast<int>(vs);
      p.eps = static_cast<float>(epsilon);
      p.rows = xr->rows;
      launch_inv_norm<T, WT, true>(p, l);
    };
    if (fp32_weight) {
      run(static_cast<float*>(nullptr));
    } else {
      run(static_cast<T*>(nullptr));
    }
  })
  if (!xw.is_same(x)) x.copy_(xw);
  if (!rw.is_same(residual)) residual.copy_(rw);
}

at::Tensor rms_norm_gated_invariant_cuda(const at::Tensor& x, const at::Tensor& gate,
                                         const at::Tensor& weight, double epsilon,
                                         std::optional<int64_t> group_size, bool norm_before_gate,
                                         bool round_normalized) {
  check_x("rms_norm_gated", x);
  check_cuda("rms_norm_gated", x);
  at::Tensor w;
  const int64_t group = check_gated_args(x, gate, weight, group_size, w);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin = x;
  at::Tensor gin = gate;
  auto xr = as_rows(xin);
  auto gr = as_rows(gin);
  if (!xr) {
    xin = x.contiguous();
    xr = as_rows(xin);
  }
  if (!gr) {
    gin = gate.contiguous();
    gr = as_rows(gin);
  }
  const int64_t hidden = x.size(-1);
  check_sizes("rms_norm_gated", hidden, xr->rows * (hidden / group));
  const Launch l = launch_on(x);
  const bool fp32_weight = w.scalar_type() != x.scalar_type();
  IRC_INV_DISPATCH(x.scalar_type(), {
    auto run = [&](auto* wtag) {
      using WT = std::remove_pointer_t<decltype(wtag)>;
      GatedParams<T, WT> p{};
      p.out = static_cast<T*>(out.data_ptr());
      p.in = static_cast<const T*>(xin.data_ptr());
      p.in_stride = xr->stride;
      p.gate = static_cast<const T*>(gin.data_ptr());
      p.gate_stride = gr->stride;
      p.w = static_cast<const WT*>(w.data_ptr());
      p.hidden = static_cast<int>(hidden);
      p.group = static_cast<int>(group);
      p.n_groups = static_cast<int>(hidden / group);
      p.eps = static_cast<float>(epsilon);
      const unsigned grid = static_cast<unsigned>(xr->rows * p.n_groups);
      const int block = row_block(group, 16 / sizeof(T));
      if (norm_before_gate) {
        if (round_normalized) {
          launch_kernel(inv_gated_kernel<T, WT, true, true>, grid, block, l, p);
        } else {
          launch_kernel(inv_gated_kernel<T, WT, true, false>, grid, block, l, p);
        }
      } else if (round_normalized) {
        launch_kernel(inv_gated_kernel<T, WT, false, true>, grid, block, l, p);
      } else {
        launch_kernel(inv_gated_kernel<T, WT, false, false>, grid, block, l, p);
      }
    };
    if (fp32_weight) {
      run(static_cast<float*>(nullptr));
    } else {
      run(static_cast<T*>(nullptr));
    }
  })
  return out;
}

at::Tensor layer_norm_invariant_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                     const std::optional<at::Tensor>& bias, double epsilon) {
  check_x("layer_norm", x);
  check_cuda("layer_norm", x);
  at::Tensor w, b;
  check_layer_norm_args(x, weight, bias, w, b);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin = x;
  auto xr = as_rows(xin);
  if (!xr) {
    xin = x.contiguous();
    xr = as_rows(xin);
  }
  const int64_t hidden = x.size(-1);
  check_sizes("layer_norm", hidden, xr->rows);
  const Launch l = launch_on(x);
  IRC_INV_DISPATCH(x.scalar_type(), {
    LayerNormParams<T> p{};
    p.out = static_cast<T*>(out.data_ptr());
    p.in = static_cast<const T*>(xin.data_ptr());
    p.in_stride = xr->stride;
    p.w = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
    p.b = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    p.hidden = static_cast<int>(hidden);
    p.eps = static_cast<float>(epsilon);
    launch_kernel(inv_layer_norm_kernel<T>, static_cast<unsigned>(xr->rows),
                  row_block(hidden, 16 / sizeof(T)), l, p);
  })
  return out;
}

// [nv (0: the loop kernel), tpr, block] of the invariant rms_norm (fused: fused_add_rms_norm)
// launch for a row of `hidden` elements of `dtype`: for tests and benchmarks, which check that
// it does not depend on the row count (it takes none).
std::vector<int64_t> invariant_norm_config(int64_t hidden, at::ScalarType dtype, bool fused) {
  TORCH_CHECK(hidden >= 1 && hidden < (int64_t{1} << 30),
              "ircore_vllm_c._cuda_invariant_norm_config: hidden must be in [1, 2**30)");
  const int elem = dtype == at::ScalarType::Float ? 4 : 2;
  const InvConfig c = inv_norm_config(static_cast<int>(hidden), 16 / elem, fused);
  return {c.nv, c.tpr, c.block};
}

}  // namespace cuda_inv
}  // namespace ircore_vllm_c

// The schemas: the default ops' (cpu_ops.cpp), so each is a drop-in for its op.
TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def(
      "rms_norm_invariant(Tensor x, Tensor? weight, float epsilon, int? variance_size=None) -> "
      "Tensor");
  m.def(
      "fused_add_rms_norm_invariant(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, "
      "float epsilon, int? variance_size=None) -> ()");
  m.def(
      "rms_norm_gated_invariant(Tensor x, Tensor gate, Tensor weight, float epsilon, "
      "int? group_size=None, bool norm_before_gate=False, bool round_normalized=False) -> Tensor");
  m.def(
      "layer_norm_invariant(Tensor x, Tensor? weight, Tensor? bias, float epsilon) -> Tensor");
  m.def("_cuda_invariant_norm_config(int hidden, ScalarType dtype, bool fused=False) -> int[]",
        &ircore_vllm_c::cuda_inv::invariant_norm_config);
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) {
  m.impl("rms_norm_invariant", &ircore_vllm_c::cuda_inv::rms_norm_invariant_cuda);
  m.impl("fused_add_rms_norm_invariant", &ircore_vllm_c::cuda_inv::fused_add_rms_norm_invariant_cuda);
  m.impl("rms_norm_gated_invariant", &ircore_vllm_c::cuda_inv::rms_norm_gated_invariant_cuda);
  m.impl("layer_norm_invariant", &ircore_vllm_c::cuda_inv::layer_norm_invariant_cuda);
}
