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
// No torch header here (as cuda_rope.cu): the torch bindings are in cuda_norm_invariant_ops.cpp,
// through the launchers of cuda_norm_invariant.h. The small helpers needed here are repeated from
// cuda_ops.cu in a namespace of their own (that file's live in its translation unit).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_norm_invariant.h"
#include "cuda_common.cuh"

namespace ircore_vllm_c {
namespace cuda_inv {

using cuda_common::Cvt;

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

// The weight: x's dtype or, with 16-bit x, float (a flag, not a template parameter: half the
// kernels to compile, one uniform branch per chunk). `off`: the first element of the span.
struct WeightRef {
  const void* w;  // may be null (rms_norm, fused_add_rms_norm, layer_norm)
  bool w32;       // float elements; else x's dtype
};

template <class T, int N>
__device__ __forceinline__ bool weight_vec_ok(const WeightRef& w, int off, int n) {
  return w.w32 ? vec_ok<float, N>(static_cast<const float*>(w.w) + off, n)
               : vec_ok<T, N>(static_cast<const T*>(w.w) + off, n);
}

template <class T, int N>
__device__ __forceinline__ void load_weight(const WeightRef& w, int off, int c, int n, bool vec,
                                            float (&f)[N]) {
  if (w.w32) {
    load_chunk<float, N>(static_cast<const float*>(w.w) + off, c, n, vec, f);
  } else {
    load_chunk<T, N>(static_cast<const T*>(w.w) + off, c, n, vec, f);
  }
}

// PDL (sm_90+), as in cuda_ops.cu (cuda_common.cuh).
using cuda_common::pdl_launch_dependents;
using cuda_common::pdl_wait;

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

template <class T>
struct NormParams {
  T* out;  // rms_norm: the output; fused: x (written in place)
  int64_t out_stride;
  const T* in;  // rms_norm: the input; fused: x (== out)
  int64_t in_stride;
  T* res;  // fused only: the residual (read, then overwritten with x + residual)
  int64_t res_stride;
  WeightRef w;  // w.w may be null; x's dtype or float
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
template <class T, int NV, bool FUSED>
__global__ void __launch_bounds__(inv_max_threads(NV)) inv_norm_kernel(const NormParams<T> p) {
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
  const bool vw = p.w.w != nullptr && weight_vec_ok<T, VEC>(p.w, 0, n);
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    const int c = lane + k * tpr;
    if (c < nchunk) {
      float o[VEC];
      if (p.w.w != nullptr) {
        float wf[VEC];
        load_weight<T, VEC>(p.w, 0, c, n, vw, wf);
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
template <class T, bool FUSED>
__global__ void __launch_bounds__(1024) inv_norm_loop_kernel(const NormParams<T> p) {
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
  const bool vw = p.w.w != nullptr && weight_vec_ok<T, VEC>(p.w, 0, n);
  for (int c = threadIdx.x; c < nchunk; c += tpr) {
    float f[VEC], o[VEC];
    load_chunk<T, VEC>(src, c, n, vs, f);
    if (p.w.w != nullptr) {
      float wf[VEC];
      load_weight<T, VEC>(p.w, 0, c, n, vw, wf);
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

// pick_norm_config's choice in the bandwidth regime (many rows): one chunk per thread, as many
// threads as the row has chunks, doubling the chunks per thread past 1024 (then 512) threads;
// rms_norm two chunks per thread where one would do (one load of x in flight per thread leaves
// HBM latency uncovered; fused_add_rms_norm has two streams and keeps one); 512-thread blocks
// for rms_norm and for more than one chunk per thread, 1024 for fused_add_rms_norm.
InvNormConfig inv_norm_config(int hidden, int vec, bool fused) {
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

template <class T>
struct GatedParams {
  T* out;  // contiguous rows of `hidden`
  const T* in;
  int64_t in_stride;
  const T* gate;
  int64_t gate_stride;
  WeightRef w;
  int hidden;
  int group;
  int n_groups;
  float eps;
};

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

template <class T, bool NBG, bool ROUND>
__global__ void __launch_bounds__(1024) inv_gated_kernel(const GatedParams<T> p) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t row = blockIdx.x / p.n_groups;
  const int c0 = static_cast<int>(blockIdx.x % p.n_groups) * p.group;
  const int n = p.group;
  const int nchunk = (n + VEC - 1) / VEC;
  const int nt = static_cast<int>(blockDim.x);
  const T* x = p.in + row * p.in_stride + c0;
  const T* g = p.gate + row * p.gate_stride + c0;
  T* o = p.out + row * p.hidden + c0;
  const bool vx = vec_ok<T, VEC>(x, n);
  const bool vg = vec_ok<T, VEC>(g, n);
  const bool vo = vec_ok<T, VEC>(o, n);
  const bool vw = weight_vec_ok<T, VEC>(p.w, c0, n);
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
    load_weight<T, VEC>(p.w, c0, c, n, vw, wf);
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

// One launch path for every kernel, as cuda_ops.cu: cudaLaunchKernelEx, with the PDL attribute
// when enabled.
template <class... KArgs, class... Args>
cudaError_t launch_kernel(void (*kernel)(KArgs...), unsigned grid, int block, cudaStream_t stream,
                          bool pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

template <class T, bool FUSED>
cudaError_t launch_inv_norm(const InvRmsLaunch& l, cudaStream_t stream) {
  NormParams<T> p{};
  p.out = static_cast<T*>(l.out);
  p.out_stride = l.out_stride;
  p.in = static_cast<const T*>(l.in);
  p.in_stride = l.in_stride;
  p.res = static_cast<T*>(l.res);
  p.res_stride = l.res_stride;
  p.w = {l.w, l.w32};
  p.hidden = l.hidden;
  p.var_size = l.var_size;
  p.eps = l.eps;
  p.rows = l.rows;
  const InvNormConfig c = inv_norm_config(p.hidden, 16 / sizeof(T), FUSED);
  p.tpr = c.tpr;
  if (c.nv == 0) {
    p.rows_per_block = 1;
    return launch_kernel(inv_norm_loop_kernel<T, FUSED>, static_cast<unsigned>(p.rows), c.block,
                         stream, l.pdl, p);
  }
  // block is a multiple of tpr: tpr <= 32 divides the 32-rounded block (a power of two), and
  // past 32 the block is tpr times a count.
  p.rows_per_block = c.block / c.tpr;
  const unsigned grid = static_cast<unsigned>((p.rows + p.rows_per_block - 1) / p.rows_per_block);
  if (c.nv == 1) return launch_kernel(inv_norm_kernel<T, 1, FUSED>, grid, c.block, stream, l.pdl, p);
  if (c.nv == 2) return launch_kernel(inv_norm_kernel<T, 2, FUSED>, grid, c.block, stream, l.pdl, p);
  return launch_kernel(inv_norm_kernel<T, 4, FUSED>, grid, c.block, stream, l.pdl, p);
}

template <class T>
cudaError_t launch_rms_norm_t(const InvRmsLaunch& l, cudaStream_t stream) {
  return l.fused ? launch_inv_norm<T, true>(l, stream) : launch_inv_norm<T, false>(l, stream);
}

template <class T>
cudaError_t launch_gated_t(const InvGatedLaunch& l, cudaStream_t stream) {
  GatedParams<T> p{};
  p.out = static_cast<T*>(l.out);
  p.in = static_cast<const T*>(l.in);
  p.in_stride = l.in_stride;
  p.gate = static_cast<const T*>(l.gate);
  p.gate_stride = l.gate_stride;
  p.w = {l.w, l.w32};
  p.hidden = l.hidden;
  p.group = l.group;
  p.n_groups = l.hidden / l.group;
  p.eps = l.eps;
  const unsigned grid = static_cast<unsigned>(l.rows * p.n_groups);
  const int block = row_block(l.group, 16 / sizeof(T));
  if (l.norm_before_gate) {
    return l.round_normalized
               ? launch_kernel(inv_gated_kernel<T, true, true>, grid, block, stream, l.pdl, p)
               : launch_kernel(inv_gated_kernel<T, true, false>, grid, block, stream, l.pdl, p);
  }
  return l.round_normalized
             ? launch_kernel(inv_gated_kernel<T, false, true>, grid, block, stream, l.pdl, p)
             : launch_kernel(inv_gated_kernel<T, false, false>, grid, block, stream, l.pdl, p);
}

template <class T>
cudaError_t launch_layer_norm_t(const InvLayerNormLaunch& l, cudaStream_t stream) {
  LayerNormParams<T> p{};
  p.out = static_cast<T*>(l.out);
  p.in = static_cast<const T*>(l.in);
  p.in_stride = l.in_stride;
  p.w = static_cast<const T*>(l.w);
  p.b = static_cast<const T*>(l.b);
  p.hidden = l.hidden;
  p.eps = l.eps;
  return launch_kernel(inv_layer_norm_kernel<T>, static_cast<unsigned>(l.rows),
                       row_block(l.hidden, 16 / sizeof(T)), stream, l.pdl, p);
}

cudaError_t launch_rms_norm(const InvRmsLaunch& l, cudaStream_t stream) {
  switch (l.dtype) {
    case InvDType::kHalf:
      return launch_rms_norm_t<__half>(l, stream);
    case InvDType::kBFloat16:
      return launch_rms_norm_t<__nv_bfloat16>(l, stream);
    default:
      return launch_rms_norm_t<float>(l, stream);
  }
}

cudaError_t launch_gated(const InvGatedLaunch& l, cudaStream_t stream) {
  switch (l.dtype) {
    case InvDType::kHalf:
      return launch_gated_t<__half>(l, stream);
    case InvDType::kBFloat16:
      return launch_gated_t<__nv_bfloat16>(l, stream);
    default:
      return launch_gated_t<float>(l, stream);
  }
}

cudaError_t launch_layer_norm(const InvLayerNormLaunch& l, cudaStream_t stream) {
  switch (l.dtype) {
    case InvDType::kHalf:
      return launch_layer_norm_t<__half>(l, stream);
    case InvDType::kBFloat16:
      return launch_layer_norm_t<__nv_bfloat16>(l, stream);
    default:
      return launch_layer_norm_t<float>(l, stream);
  }
}

}  // namespace cuda_inv
}  // namespace ircore_vllm_c
