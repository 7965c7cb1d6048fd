// CUDA kernels of the fp8 (e4m3fn) quant ops and the fused norm/activation + quant ops whose
// schemas cpu_quant.cpp defines. Kernels and their launcher only, with no torch header, so nvcc
// compiles this file in seconds; the torch bindings (checks, layouts, outputs) are
// cuda_quant_ops.cpp.
//
// One kernel per (dtype, source), one block per row. The row is cut into units, each handled by
// a team of W lanes: the whole row by the whole block (static, per-token and per-tensor scales),
// or one group by a sub-warp of W = 1..32 lanes, 32 / W groups per warp (group scales). A lane
// holds up to kSlots 16-byte chunks of its unit in registers (chunks lane, lane + W, ...: the
// team's loads coalesce), issued together, so each thread has several loads in flight. The plan
// (W, threads per block, whether the row fits the registers) is a function of the row length,
// group size and dtype alone: a row's bits never depend on the batch. Where the row fits
// ("resident"), it is read from global memory once: the source (x; rms_norm(x); rms_norm(x +
// residual); silu(a) * b) is computed into the registers, rounded to x's dtype where the op's
// native rounds (so the registers hold values of x's dtype, 16 bytes per chunk), then the amax
// (a register pass and a shuffle / block reduction) and the quantisation read the same
// registers. Longer rows (or groups over W * kSlots chunks, or more groups than one pass of the
// block's teams) are read twice, the fused sources through shared memory as before. Modes: a
// static scale (x * (1/s), the scale column found once per chunk where a chunk lies in one
// column), one dynamic scale per row (block amax), per-group scales (y / s), or per tensor in two
// launches (block amax + atomicMax on the float bits, then quantise). The amax is a max over the
// bits of |v|, so a NaN propagates as in torch's amax. Every value is clamped to +-fp8_max before
// its cast (a NaN stays NaN; the cast saturates finite values only). Each kernel waits on
// griddepcontrol before touching memory and releases its dependents at the end (PDL-safe, as the
// other kernels). Compile-checked for sm_90 and run on the host by tools/emulate_cuda_quant.py;
// this design has not yet run on a GPU.
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

// Chunks a lane keeps in registers (16 bytes each, of x's dtype): the loads in flight per thread.
constexpr int kSlots = 4;

// A chunk of N values of T packed in 16 bytes (4 registers): what a lane keeps of its unit.
using Pack = uint4;

template <class T>
__device__ __forceinline__ T elem(const Pack& u, int j) {
  return reinterpret_cast<const T*>(&u)[j];
}

// Loads elements [i, i + N) of p (vec: one 16-byte load; else element-wise, 0 past end).
template <class T>
__device__ __forceinline__ Pack load_pack(const T* p, int i, int end, bool vec) {
  if (vec) return *reinterpret_cast<const Pack*>(p + i);
  Pack u;
  T* t = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int j = 0; j < Chunk<T>::N; ++j) t[j] = i + j < end ? p[i + j] : Cvt<T>::of(0.0f);
  return u;
}

// Stores u at p[i, min(i + N, end)).
template <class T>
__device__ __forceinline__ void store_pack(T* p, int i, int end, bool vec, const Pack& u) {
  if (vec) {
    *reinterpret_cast<Pack*>(p + i) = u;
  } else {
#pragma unroll
    for (int j = 0; j < Chunk<T>::N; ++j) {
      if (i + j < end) p[i + j] = elem<T>(u, j);
    }
  }
}

// Loads elements [i, i + N) of p as float (0 past end when element-wise).
template <class T>
__device__ __forceinline__ void load_chunk(const T* p, int i, int end, bool vec,
                                           float (&v)[Chunk<T>::N]) {
  const Pack u = load_pack<T>(p, i, end, vec);
#pragma unroll
  for (int j = 0; j < Chunk<T>::N; ++j) v[j] = Cvt<T>::f32(elem<T>(u, j));
}

// v rounded to T (one rounding, to nearest even), packed.
template <class T>
__device__ __forceinline__ Pack round_pack(const float (&v)[Chunk<T>::N]) {
  Pack u;
  T* t = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int j = 0; j < Chunk<T>::N; ++j) t[j] = Cvt<T>::of(v[j]);
  return u;
}

// clamp(v, +-m) then the e4m3fn cast; NaN stays NaN (torch's clamp), as the native.
__device__ __forceinline__ uint8_t to_fp8(float v, float m) {
  const float c = v != v ? v : fminf(fmaxf(v, -m), m);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3));
}

template <int N>
__device__ __forceinline__ void store_fp8(uint8_t* q, int i, int end, bool vec,
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

// |v| as ordered bits: max over them is the amax, NaN (above +inf) propagating. Elements at or
// past end are not part of the unit.
template <class T>
__device__ __forceinline__ unsigned chunk_amax(const Pack& e, int i, int end, unsigned a) {
#pragma unroll
  for (int j = 0; j < Chunk<T>::N; ++j) {
    if (i + j < end) a = max(a, __float_as_uint(fabsf(Cvt<T>::f32(elem<T>(e, j)))));
  }
  return a;
}

__device__ __forceinline__ unsigned warp_max(unsigned v, int width) {
  for (int o = width >> 1; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
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
  v = warp_max(v, 32);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0u;
  return warp_max(v, 32);
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

// The launch's shape, fixed by the row length, group size, dtype and alignment (cuda_quant.h's
// plan_quant computes it on the host).
struct Plan {
  int W;          // team width: lanes per group (group mode); the block's threads otherwise
  bool vec;       // 16-byte loads and stores (every row aligned, units of whole chunks)
  bool resident;  // every unit fits its team's registers in one pass: the row is read once
};

// This thread's place: units [0, units) of len elements (groups, or the row as one unit), unit
// u handled by team u % teams, lane `lane` of W; its chunks in a unit start at u * len +
// (lane + s * W) * N, s = 0, 1, ... (positions within a row fit an int: the bindings bound k).
struct Team {
  int len, units, W, lane, team, teams;
};

__device__ __forceinline__ Team team_of(const QuantLaunch& l, const Plan& p) {
  const int t = static_cast<int>(threadIdx.x), k = static_cast<int>(l.k);
  if (l.mode == QMode::kGroup) {
    return {static_cast<int>(l.group < l.k ? l.group : l.k), static_cast<int>(l.groups), p.W,
            t % p.W, t / p.W, static_cast<int>(blockDim.x) / p.W};
  }
  return {k, 1, static_cast<int>(blockDim.x), t, 0, 1};
}

// Where this lane's chunks of unit u start, and where the unit ends; a unit past the last one
// is empty (0, 0: no product u * len past the row, which could overflow).
struct Span {
  int first, end;
};
template <int N>
__device__ __forceinline__ Span span_of(const Team& tm, int u, int k) {
  if (u >= tm.units) return {0, 0};
  const int u0 = u * tm.len;
  return {u0 + tm.lane * N, k - u0 < tm.len ? k : u0 + tm.len};
}

// Calls f(i, end) for every chunk of this thread, all units, all passes (the non-resident path).
template <int N, class F>
__device__ __forceinline__ void for_each_chunk(const Team& tm, int k, F&& f) {
  for (int u = tm.team; u < tm.units; u += tm.teams) {
    const Span sp = span_of<N>(tm, u, k);
    for (int i = sp.first; i < sp.end; i += tm.W * N) f(i, sp.end);
  }
}

// The source's chunk at [i, end) before the norm: x; x + residual (rounded, written to res_out);
// silu(a) * b (rounded). Adds its squares to ss (the norm sources).
template <class T, QSource S>
__device__ __forceinline__ Pack source_chunk(const QuantLaunch& l, int64_t row, const T* x, int i,
                                             int end, bool vec, float& ss) {
  constexpr int N = Chunk<T>::N;
  if constexpr (S == QSource::kSilu) {
    float a[N], b[N];
    load_chunk<T>(x, i, end, vec, a);
    load_chunk<T>(x + l.k, i, end, vec, b);
#pragma unroll
    for (int j = 0; j < N; ++j) a[j] = a[j] / (1.0f + expf(-a[j])) * b[j];
    return round_pack<T>(a);
  } else {
    Pack e = load_pack<T>(x, i, end, vec);
    if constexpr (S == QSource::kAddNorm) {
      float v[N], r[N];
      load_chunk<T>(static_cast<const T*>(l.residual) + row * l.r_stride, i, end, vec, r);
#pragma unroll
      for (int j = 0; j < N; ++j) v[j] = Cvt<T>::f32(elem<T>(e, j)) + r[j];
      e = round_pack<T>(v);
      store_pack<T>(static_cast<T*>(l.res_out) + row * l.k, i, end, vec, e);
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float v = Cvt<T>::f32(elem<T>(e, j));
      ss = fmaf(v, v, ss);
    }
    return e;
  }
}

// The norm of a chunk: round(e * inv [* weight]).
template <class T>
__device__ __forceinline__ Pack norm_chunk(const QuantLaunch& l, int i, int end, bool vec,
                                           float inv, const Pack& e) {
  constexpr int N = Chunk<T>::N;
  float v[N];
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = Cvt<T>::f32(elem<T>(e, j));
  if (l.weight == nullptr) {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = v[j] * inv;
  } else if (l.weight_f32) {
    const float* wf = static_cast<const float*>(l.weight);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = v[j] * inv * (i + j < end ? wf[i + j] : 0.0f);
  } else {
    float w[N];
    load_chunk<T>(static_cast<const T*>(l.weight), i, end, vec, w);
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = v[j] * inv * w[j];
  }
  return round_pack<T>(v);
}

// How a unit's values become fp8: y / s (group), y * (1/s) (per token / tensor), or y * (1/s)
// by each element's static scale column (cols: more than one column; gk elements each).
struct Scaler {
  float s;            // the scale (group) or its inverse (token, tensor, one static column)
  bool divide, cols;
  const float* srow;  // static: this row's scale columns
  int gk;
};

template <class T>
__device__ __forceinline__ void quant_chunk(const Pack& e, uint8_t* q, int i, int end, bool vec,
                                            const Scaler& sc, float m) {
  constexpr int N = Chunk<T>::N;
  uint8_t b[N];
  if (sc.divide) {
#pragma unroll
    for (int j = 0; j < N; ++j) b[j] = to_fp8(Cvt<T>::f32(elem<T>(e, j)) / sc.s, m);  // the group op divides
  } else if (!sc.cols || sc.gk % N == 0) {  // the chunk lies in one column (static scales use
                                            // the row's layout: chunks start at multiples of N)
    const float inv = sc.cols ? 1.0f / sc.srow[i / sc.gk] : sc.s;
#pragma unroll
    for (int j = 0; j < N; ++j) b[j] = to_fp8(Cvt<T>::f32(elem<T>(e, j)) * inv, m);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const float inv = 1.0f / sc.srow[(i + j < end ? i + j : end - 1) / sc.gk];
      b[j] = to_fp8(Cvt<T>::f32(elem<T>(e, j)) * inv, m);
    }
  }
  store_fp8<N>(q, i, end, vec, b);
}

template <class T, QSource S>
__global__ void __launch_bounds__(kMaxThreads, 1) quant_kernel(const QuantLaunch l, const Plan p) {
  constexpr int N = Chunk<T>::N;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float red[32];
  pdl_wait();
  const int64_t row = blockIdx.x;
  const int k = static_cast<int>(l.k);
  const bool vec = p.vec;
  const Team tm = team_of(l, p);
  const int step = tm.W * N;  // between a lane's chunks of one unit
  const T* x = static_cast<const T*>(l.x) + row * l.x_stride;
  const T* y = x;  // the values to quantise when not resident: x's row or shared memory
  Pack e[kSlots];  // resident: this lane's chunks of its unit
  // Resident: units <= teams, so this thread has at most one unit (u = team) and one pass.
  const Span rs = span_of<N>(tm, tm.team, k);
  const int rfirst = rs.first, ru1 = rs.end;
  if constexpr (S != QSource::kPlain) {
    constexpr bool norm = S != QSource::kSilu;
    float ss = 0.0f;
    if (p.resident) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = rfirst + s * step;
        if (i < ru1) e[s] = source_chunk<T, S>(l, row, x, i, ru1, vec, ss);
      }
      if constexpr (norm) {
        const float inv = rsqrtf(block_sum(ss, red) / static_cast<float>(k) + l.eps);
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
          const int i = rfirst + s * step;
          if (i < ru1) e[s] = norm_chunk<T>(l, i, ru1, vec, inv, e[s]);
        }
      }
    } else {  // the row through shared memory, in this thread's own chunks (no sync between)
      T* ys = reinterpret_cast<T*>(smem_raw);
      for_each_chunk<N>(tm, k, [&](int i, int end) {
        store_pack<T>(ys, i, end, vec, source_chunk<T, S>(l, row, x, i, end, vec, ss));
      });
      if constexpr (norm) {
        const float inv = rsqrtf(block_sum(ss, red) / static_cast<float>(k) + l.eps);
        for_each_chunk<N>(tm, k, [&](int i, int end) {
          store_pack<T>(ys, i, end, vec, norm_chunk<T>(l, i, end, vec, inv, load_pack<T>(ys, i, end, vec)));
        });
      }
      __syncthreads();
      y = ys;
    }
  } else if (p.resident) {  // all loads of the row issued before any use
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      const int i = rfirst + s * step;
      if (i < ru1) e[s] = load_pack<T>(x, i, ru1, vec);
    }
  }
  uint8_t* q = l.q + row * l.k;
  const float m = l.fp8_max;
  const int64_t rm = row % l.m_rows;
  // Unit batches: every thread runs every batch (the reductions are collective); a team past the
  // last unit has an empty one.
  for (int b0 = 0; b0 < tm.units; b0 += tm.teams) {
    const int u = b0 + tm.team;
    const Span sp = span_of<N>(tm, u, k);
    const int first = sp.first, u1 = sp.end;
    Scaler sc{0.0f, false, false, nullptr, 1};
    if (l.mode == QMode::kStatic) {
      sc.srow = l.scale + (l.sa == 1 ? 0 : rm / (l.m_rows / l.sa)) * l.sb;
      sc.cols = l.sb > 1;
      sc.gk = static_cast<int>(l.k / l.sb);
      sc.s = 1.0f / sc.srow[0];
    } else {
      unsigned amax = 0u;
      if (l.mode != QMode::kTensor) {
        if (p.resident) {
#pragma unroll
          for (int s = 0; s < kSlots; ++s) {
            const int i = first + s * step;
            if (i < u1) amax = chunk_amax<T>(e[s], i, u1, amax);
          }
        } else {
          for (int i = first; i < u1; i += step) amax = chunk_amax<T>(load_pack<T>(y, i, u1, vec), i, u1, amax);
        }
        amax = l.mode == QMode::kGroup ? warp_max(amax, tm.W)
                                       : block_max(amax, reinterpret_cast<unsigned*>(red));
      }
      if (l.mode == QMode::kAmax) {
        if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned*>(l.amax), amax);
        break;  // (one unit: the row)
      }
      if (l.mode == QMode::kGroup) {
        sc.s = dyn_scale(__uint_as_float(amax), l, l.ue8m0);
        sc.divide = true;
        if (tm.lane == 0 && u < tm.units) {
          const int64_t at = l.column_major
                                 ? (row / l.m_rows) * l.batch_stride + u * l.col_stride + rm
                                 : row * l.groups + u;
          l.scales[at] = sc.s;
        }
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
        sc.s = 1.0f / s;
      }
    }
    if (p.resident) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const int i = first + s * step;
        if (i < u1) quant_chunk<T>(e[s], q, i, u1, vec, sc, m);
      }
    } else {
      for (int i = first; i < u1; i += step) quant_chunk<T>(load_pack<T>(y, i, u1, vec), q, i, u1, vec, sc, m);
    }
  }
  pdl_launch_dependents();
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
  const QuantShape sh = plan_quant(l.mode == QMode::kGroup, l.k, l.group, Chunk<T>::N, kSlots);
  const Plan p{sh.team, vec && sh.whole_chunks, sh.resident};
  const size_t smem = S == QSource::kPlain || p.resident ? 0 : static_cast<size_t>(l.k * E);
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
  kernel<<<dim3(static_cast<unsigned>(l.rows)), sh.threads, smem, stream>>>(l, p);
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
