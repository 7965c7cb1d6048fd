// CUDA kernels for the ops declared in cpu_ops.cpp (this library is loaded after that one).
//
// Norms: each row is handled by `tpr` threads (a power of two up to 32, so several rows share a
// block, or a multiple of 32 up to 1024); each thread keeps NV 16-byte vectors of the row in
// registers, so x (and the residual) are read from global memory once; a group of tpr threads
// may take ROWS rows at once (more loads in flight per thread, the weight read once for them).
// fp32 accumulation, warp shuffles, then one shared-memory step across the warps of a row.
// Rows too long for registers (or misaligned ones, with 1-element "vectors") use the same
// scheme with more work per thread, or a two-pass loop kernel that re-reads the row from L2.
//
// Only c10/cuda headers are used (no ATen/cuda/CUDAContext.h): those need cuBLAS/cuSPARSE
// headers that a bare toolkit may lack.
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
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops_common.h"
#include "cuda_common.cuh"

namespace ircore_vllm_c {
namespace cuda {

// ------------------------------------------------------------------------------------------
// Element conversions (torch builds with __CUDA_NO_HALF_CONVERSIONS__: all explicit).

using cuda_common::Cvt;

// N elements loaded and stored as one access (16 bytes when N * sizeof(T) == 16).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <class T, int N>
__device__ __forceinline__ Vec<T, N> vload(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <class T, int N>
__device__ __forceinline__ void vstore(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// N elements of T held in registers as 32-bit words (16-bit types two to a word). Element
// arrays of 16-bit types get one register per element from the compiler; words keep a
// 16-byte vector in four, which is what lets several rows' vectors stay in registers.
template <class T, int N>
struct Pk {
  static constexpr int kWords = sizeof(T) * N >= 4 ? static_cast<int>(sizeof(T) * N / 4) : 1;
  uint32_t w[kWords];
};

template <class T, int N>
__device__ __forceinline__ Pk<T, N> pload(const T* p) {
  Pk<T, N> r;
  if constexpr (sizeof(T) * N >= 4) {
    constexpr int W = Pk<T, N>::kWords;
    const Vec<uint32_t, W> v = *reinterpret_cast<const Vec<uint32_t, W>*>(p);
#pragma unroll
    for (int i = 0; i < W; ++i) r.w[i] = v.v[i];
  } else {
    r.w[0] = *reinterpret_cast<const uint16_t*>(p);
  }
  return r;
}

template <class T, int N>
__device__ __forceinline__ void pstore(T* p, const Pk<T, N>& r) {
  if constexpr (sizeof(T) * N >= 4) {
    constexpr int W = Pk<T, N>::kWords;
    Vec<uint32_t, W> v;
#pragma unroll
    for (int i = 0; i < W; ++i) v.v[i] = r.w[i];
    *reinterpret_cast<Vec<uint32_t, W>*>(p) = v;
  } else {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(r.w[0]);
  }
}

// Element i as float.
template <class T, int N>
__device__ __forceinline__ float pget(const Pk<T, N>& r, int i) {
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(r.w[i]);
  } else {
    const uint32_t w = r.w[i / 2];
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      return __uint_as_float((i & 1) ? (w & 0xffff0000u) : (w << 16));
    } else {
      return __half2float(__ushort_as_half(static_cast<unsigned short>((i & 1) ? (w >> 16) : w)));
    }
  }
}

// Two floats rounded to T, as one word (a in the low half).
template <class T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    memcpy(&u, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(a, b);
    memcpy(&u, &h, 4);
  }
  return u;
}

// f rounded to T.
template <class T, int N>
__device__ __forceinline__ Pk<T, N> ppack(const float (&f)[N]) {
  Pk<T, N> r;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) r.w[i] = __float_as_uint(f[i]);
  } else if constexpr (N == 1) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      r.w[0] = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
    } else {
      r.w[0] = __half_as_ushort(__float2half_rn(f[0]));
    }
  } else {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) r.w[i] = pack2<T>(f[2 * i], f[2 * i + 1]);
  }
  return r;
}

// a + b rounded to T, element-wise, in T's own arithmetic: packed fp16 / bf16 adds (two
// elements an instruction) for the fused residual sum. The same result as adding in fp32 and
// rounding once: fp32 carries p >= 2q + 2 bits for a q-bit 16-bit type, which makes the
// second rounding innocuous (Figueroa, "When is double rounding innocuous?", 1995). At decode
// sizes a few rows' instruction latency, not bandwidth, sets the time.
template <class T, int N>
__device__ __forceinline__ Pk<T, N> padd(const Pk<T, N>& a, const Pk<T, N>& b) {
  Pk<T, N> r;
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < N; ++i) r.w[i] = __float_as_uint(__uint_as_float(a.w[i]) + __uint_as_float(b.w[i]));
  } else if constexpr (sizeof(T) * N >= 4) {
    using T2 = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
#pragma unroll
    for (int i = 0; i < Pk<T, N>::kWords; ++i) {
      T2 x, y;
      memcpy(&x, &a.w[i], 4);
      memcpy(&y, &b.w[i], 4);
      const T2 z = __hadd2(x, y);
      memcpy(&r.w[i], &z, 4);
    }
  } else {
    float f[1] = {pget(a, 0) + pget(b, 0)};
    r = ppack<T, N>(f);
  }
  return r;
}

// Sum of squares of the elements of v (elements first .. first + N - 1 of its row) that lie
// before var_size: the range test once per vector, per element only in the one vector that
// straddles var_size (variance_size < hidden).
template <class T, int N>
__device__ __forceinline__ float psum_sq(const Pk<T, N>& v, int first, int var_size) {
  float a = 0.0f;
  if (first + N <= var_size) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float f = pget(v, i);
      a += f * f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float f = pget(v, i);
      a += first + i < var_size ? f * f : 0.0f;
    }
  }
  return a;
}

// ------------------------------------------------------------------------------------------
// Programmatic dependent launch (PDL, sm_90+). Every kernel here is launched with the stream
// serialization attribute where the GPU has it (see launch_kernel): each waits with pdl_wait
// before its first global access and releases the next with pdl_launch_dependents
// (cuda_common.cuh says why).

using cuda_common::pdl_launch_dependents;
using cuda_common::pdl_wait;

// ------------------------------------------------------------------------------------------
// Norm kernels.

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
  int tpr;             // threads per row
  int rows_per_block;  // blockDim.x / tpr: thread groups per block (each handles ROWS rows)
};

// Sums of v[r] over the `tpr` threads of each row group, for ROWS rows at once (the shuffles
// interleaved, one barrier); every thread of the block must call it.
template <int ROWS>
__device__ __forceinline__ void row_sums(float (&v)[ROWS], int tpr) {
  if (tpr <= 32) {
    for (int o = tpr >> 1; o > 0; o >>= 1) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
    }
    return;
  }
  __shared__ float red[ROWS][32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
  }
  const int warp = threadIdx.x >> 5;
  const int wl = threadIdx.x & 31;
  if (wl == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) red[r][warp] = v[r];
  }
  __syncthreads();
  const int wpr = tpr >> 5;
  const int first = (threadIdx.x / tpr) * wpr;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) v[r] = wl < wpr ? red[r][first + wl] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
  }
}

__device__ __forceinline__ float row_sum(float v, int tpr) {
  float a[1] = {v};
  row_sums<1>(a, tpr);
  return a[0];
}

// Register-resident rows. A block is rows_per_block groups of tpr threads; each group handles
// ROWS rows: row r of group g in block b is (b * ROWS + r) * rows_per_block + g. Thread `lane`
// of a group holds vectors lane + k * tpr (k < NV) of each of its rows, so NV * ROWS
// independent 16-byte loads of x are in flight per thread (twice that for fused), and the
// weight vectors are loaded once for the ROWS rows. Rows interleaved across the groups of a
// block rather than adjacent per group: with tpr < 32 a warp holds several groups, and each of
// its load instructions still reads consecutive rows (one contiguous span); the block as a
// whole reads ROWS * rows_per_block consecutive rows either way.
//
// Threads per block a kernel is compiled for: 1024 for one vector of one row per thread, 512
// otherwise (room for the registers: up to 82 for NV 4, fused, fp32 weight). MINB, the
// sweep's `minb`: 1 = that bound alone; 2, 3, 4 = registers for at least that many 512-thread
// blocks per SM (1024, 1536, 2048 threads: at most 64, 40, 32 registers). More resident threads
// means more loads in flight per SM, which is what the bandwidth regime is short of.
__host__ __device__ constexpr int norm_max_threads(int nv, int rows) {
  return nv * rows == 1 ? 1024 : 512;
}
__host__ __device__ constexpr int norm_min_blocks(int nv, int rows, int minb) {
  return minb <= 1 ? 0 : minb * 512 / norm_max_threads(nv, rows);  // 0: no minimum
}

template <class T, class WT, int VEC, int NV, int ROWS, int MINB, bool FUSED>
__global__ void __launch_bounds__(norm_max_threads(NV, ROWS), norm_min_blocks(NV, ROWS, MINB))
    norm_reg_kernel(const NormParams<T, WT> p) {
  using P = Pk<T, VEC>;
  using PW = Pk<WT, VEC>;
  const int tpr = p.tpr;
  const int rpb = p.rows_per_block;
  const int lane = threadIdx.x % tpr;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rpb * ROWS + threadIdx.x / tpr;
  const int nvec = p.hidden / VEC;
  pdl_wait();
  bool active[ROWS];  // a prefix: the tail block may lack the group's later rows
#pragma unroll
  for (int r = 0; r < ROWS; ++r) active[r] = row0 + static_cast<int64_t>(r) * rpb < p.rows;

  P xv[ROWS][NV];
  PW wv[NV];
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
  if (active[0]) {
    P rv[FUSED ? ROWS : 1][FUSED ? NV : 1];
    // All loads first, so they are in flight together: x (and the residual) of every row, and
    // the weight, once for all the rows.
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (!active[r]) continue;
      const int64_t row = row0 + static_cast<int64_t>(r) * rpb;
      const T* xrow = p.in + row * p.in_stride;
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int vi = lane + k * tpr;
        if (vi < nvec) {
          xv[r][k] = pload<T, VEC>(xrow + vi * VEC);
          if constexpr (FUSED) rv[r][k] = pload<T, VEC>(p.res + row * p.res_stride + vi * VEC);
          if (r == 0 && p.w != nullptr) wv[k] = pload<WT, VEC>(p.w + vi * VEC);
        }
      }
    }
    pdl_launch_dependents();
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (!active[r]) continue;
      const int64_t row = row0 + static_cast<int64_t>(r) * rpb;
#pragma unroll
      for (int k = 0; k < NV; ++k) {
        const int vi = lane + k * tpr;
        if (vi < nvec) {
          if constexpr (FUSED) {
            xv[r][k] = padd(xv[r][k], rv[r][k]);
            pstore<T, VEC>(p.res + row * p.res_stride + vi * VEC, xv[r][k]);
          }
          acc[r] += psum_sq(xv[r][k], vi * VEC, p.var_size);
        }
      }
    }
  }
  row_sums<ROWS>(acc, tpr);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (!active[r]) continue;
    const int64_t row = row0 + static_cast<int64_t>(r) * rpb;
    const float inv = rsqrtf(acc[r] / static_cast<float>(p.var_size) + p.eps);
    T* orow = p.out + row * p.out_stride;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int vi = lane + k * tpr;
      if (vi < nvec) {
        float o[VEC];
        if (p.w != nullptr) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) o[i] = pget(xv[r][k], i) * inv * pget(wv[k], i);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) o[i] = pget(xv[r][k], i) * inv;
        }
        pstore<T, VEC>(orow + vi * VEC, ppack<T, VEC>(o));
      }
    }
  }
}

// Any row length: one row per block, two passes (the second re-reads the row, from L2).
template <class T, class WT, int VEC, bool FUSED>
__global__ void __launch_bounds__(1024) norm_loop_kernel(const NormParams<T, WT> p) {
  using P = Pk<T, VEC>;
  using PW = Pk<WT, VEC>;
  const int64_t row = blockIdx.x;
  const int nvec = p.hidden / VEC;
  const T* xrow = p.in + row * p.in_stride;
  T* rrow = FUSED ? p.res + row * p.res_stride : nullptr;
  pdl_wait();
  float acc = 0.0f;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    P x = pload<T, VEC>(xrow + vi * VEC);
    if constexpr (FUSED) {
      x = padd(x, pload<T, VEC>(rrow + vi * VEC));
      pstore<T, VEC>(rrow + vi * VEC, x);
    }
    acc += psum_sq(x, vi * VEC, p.var_size);
  }
  pdl_launch_dependents();
  const float ss = row_sum(acc, blockDim.x);
  const float inv = rsqrtf(ss / static_cast<float>(p.var_size) + p.eps);
  const T* src = FUSED ? rrow : xrow;
  T* orow = p.out + row * p.out_stride;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    const P x = pload<T, VEC>(src + vi * VEC);
    float o[VEC];
    if (p.w != nullptr) {
      const PW w = pload<WT, VEC>(p.w + vi * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) o[i] = pget(x, i) * inv * pget(w, i);
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) o[i] = pget(x, i) * inv;
    }
    pstore<T, VEC>(orow + vi * VEC, ppack<T, VEC>(o));
  }
}

// ------------------------------------------------------------------------------------------
// Launch configuration.

// The register-resident variants (nv, rows, minb) compiled for 16-byte vectors; the element-wise
// path (misaligned rows) has those with rows 1 and minb 1. Registers from ptxas -v (sm_90,
// nvcc 13.0; tools/check_cuda_compile.py -v), rms_norm / fused_add_rms_norm, bf16 x and weight;
// resident threads per SM in brackets (512-thread blocks). None spills except where noted.
// Bounds that changed nothing, or only spilled, are left out: nv1 rows1 minb4 (no fewer registers),
// nv2 rows1 minb4 (fused spills), nv1 rows4 minb3 and nv2 rows2 minb3 (spill).
struct NormVariant {
  int nv;
  int rows;
  int minb;
};
constexpr NormVariant kNormVariants[] = {
    {1, 1, 1},  // 30 / 30 [2048]
    {1, 2, 1},  // 39 / 40 [1536]
    {1, 2, 4},  // 32 / 32 [2048]; fused spills (32 B), so does an fp32 weight (8 B)
    {1, 4, 1},  // 56 / 56 [1024]
    {2, 1, 1},  // 32 / 40 [2048 / 1536]
    {2, 1, 3},  // 40 / 40 [1536]; fused with an fp32 weight spills (40 B)
    {2, 2, 1},  // 54 / 56 [1024]
    {4, 1, 1},  // 56 / 64 [1024]
};
constexpr int kNumNormVariants = static_cast<int>(sizeof(kNormVariants) / sizeof(kNormVariants[0]));

// Each (nv, rows) listed has minb 1, and each nv rows 1 (the fallbacks of find_norm_variant).
constexpr bool norm_variants_ok() {
  for (const NormVariant& a : kNormVariants) {
    int ones = 0, base = 0;
    for (const NormVariant& b : kNormVariants) {
      ones += b.nv == a.nv && b.rows == a.rows && b.minb == 1;
      base += b.nv == a.nv && b.rows == 1 && b.minb == 1;
    }
    if (ones != 1 || base != 1 || a.minb < 1 || a.minb > 4) return false;
  }
  return true;
}
static_assert(norm_variants_ok(), "kNormVariants");

struct NormConfig {
  int nv;       // vectors per thread: 1, 2 or 4; 0 = the loop kernel
  int tpr;      // threads per row
  int block;    // threads per block
  int rows;     // rows per thread group: 1, 2 or 4
  int minb;     // register bound, as in norm_min_blocks
  int variant;  // index in kNormVariants (-1: the loop kernel)
};

// Forced configuration for tuning sweeps (0 = automatic, per knob), set by _cuda_set_norm_config.
std::atomic<int> g_force_nv{0};
std::atomic<int> g_force_tpr{0};
std::atomic<int> g_force_block{0};
std::atomic<int> g_force_rows{0};
std::atomic<int> g_force_minb{0};
// The configuration of the latest norm launch (packed), for _cuda_last_norm_config.
std::atomic<uint64_t> g_last_config{0};

constexpr int kMaxNV = 4;

int round_tpr(int t) {  // power of two up to 32, multiple of 32 above
  if (t <= 1) return 1;
  if (t <= 32) {
    int p = 1;
    while (p < t) p <<= 1;
    return p;
  }
  return std::min(1024, (t + 31) / 32 * 32);
}

// A device attribute, read once per device.
template <cudaDeviceAttr kAttr>
int device_attribute(int device) {
  static std::atomic<int> cache[64];
  if (device < 0 || device >= 64) device = 0;
  int v = cache[device].load(std::memory_order_relaxed);
  if (v == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&v, kAttr, device));
    cache[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

int sm_count(int device) { return device_attribute<cudaDevAttrMultiProcessorCount>(device); }

// PDL for this process's launches: -1 = not read yet (IRCORE_VLLM_C_PDL; "0" or "" = off), 0 = off,
// 1 = on where the GPU has it (compute capability 9.0 and later). _cuda_set_pdl changes it.
std::atomic<int> g_pdl{-1};

int pdl_mode() {
  int mode = g_pdl.load(std::memory_order_relaxed);
  if (mode < 0) {
    const char* env = std::getenv("IRCORE_VLLM_C_PDL");
    int read = (env != nullptr && (env[0] == '\0' || std::strcmp(env, "0") == 0)) ? 0 : 1;
    g_pdl.compare_exchange_strong(mode, read, std::memory_order_relaxed);
    mode = g_pdl.load(std::memory_order_relaxed);
  }
  return mode;
}

// Whether launches on `device` carry the PDL attribute.
bool use_pdl(int device) {
  return pdl_mode() != 0 && device_attribute<cudaDevAttrComputeCapabilityMajor>(device) >= 9;
}

// Where and how a binding's kernels are launched.
struct Launch {
  cudaStream_t stream;
  int sms;   // multiprocessors of the device
  bool pdl;  // programmatic dependent launch (see pdl_wait)
};

Launch launch_on(const at::Tensor& x) {
  const int device = x.device().index();
  return {c10::cuda::getCurrentCUDAStream(device).stream(), sm_count(device), use_pdl(device)};
}

// One launch path for every kernel: cudaLaunchKernelEx, with the PDL attribute when enabled.
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

// The compiled variant for nv vectors per thread nearest to `rows` and `minb` from below (rows
// drop to 1 where tpr exceeds the kernel's thread bound). minb 0: automatic, 4 for rms_norm with
// two rows of one vector and a weight of x's dtype or none (the bound that does not spill there:
// 2048 threads per SM instead of 1536), else 1. wide: 16-byte vectors, else rows 1 and minb 1.
int find_norm_variant(int nv, int rows, int minb, int tpr, bool wide, bool fused, bool w32) {
  if (!wide) rows = minb = 1;
  if (minb <= 0) minb = nv == 1 && rows == 2 && !fused && !w32 ? 4 : 1;
  int best = -1;
  for (int i = 0; i < kNumNormVariants; ++i) {
    const NormVariant& v = kNormVariants[i];
    if (v.nv != nv || v.rows > rows || v.minb > minb) continue;
    if (tpr > norm_max_threads(v.nv, v.rows)) continue;
    if (best < 0 || v.rows > kNormVariants[best].rows ||
        (v.rows == kNormVariants[best].rows && v.minb > kNormVariants[best].minb)) {
      best = i;
    }
  }
  return best;
}

// w32: an fp32 weight with 16-bit x.
NormConfig pick_norm_config(int64_t rows, int nvec, int sms, bool fused, bool wide, bool w32) {
  NormConfig c{1, 1, 256, 1, 1, -1};
  // Latency regime (all rows in one wave) or bandwidth regime.
  const bool one_wave = rows * static_cast<int64_t>(nvec) <= static_cast<int64_t>(sms) * 2048;
  const int frows = g_force_rows.load(std::memory_order_relaxed);
  int want_rows = frows > 0 ? frows : 1;
  const int fnv = g_force_nv.load(std::memory_order_relaxed);
  if (fnv > 0 || g_force_tpr.load(std::memory_order_relaxed) > 0) {
    c.nv = fnv > 0 ? fnv : 1;
    const int ftpr = g_force_tpr.load(std::memory_order_relaxed);
    c.tpr = ftpr > 0 ? round_tpr(ftpr) : round_tpr((nvec + c.nv - 1) / c.nv);
    // Does not fit (or over the kernel's thread limit): loop kernel.
    if (static_cast<int64_t>(c.tpr) * c.nv < nvec || (c.nv > 1 && c.tpr > 512)) c.nv = 0;
  } else {
    // One 16-byte vector per thread and as many threads per row as the row has vectors: measured
    // on the H200 (bench_gpu.py --sweep), this beat two or four vectors per thread at
    // every T x H from 1x4096 to 32768x8192 (bf16), by up to 1.6x for fused_add_rms_norm at 8192
    // rows -- when two vectors per thread took 52-66 registers (1024 threads per SM), before
    // the packed registers (Pk). More vectors per thread only where the row needs it.
    int nv = 1;
    while (nv <= kMaxNV && (nvec + nv - 1) / nv > (nv == 1 ? 1024 : 512)) nv *= 2;
    if (nv > kMaxNV) {
      c.nv = 0;
    } else {
      c.nv = nv;
      // More 16-byte loads in flight per thread, from the H200 sweep (bench_gpu.py --sweep,
      // bf16, with packed registers): at mid sizes (up to ~8 waves of vectors, e.g.
      // 1024 rows) four vectors per thread: rms_norm 1024x8192 7.84 vs 8.18 us, fused 1024x4096
      // 6.51 vs 7.30 us. In the bandwidth regime rms_norm takes two (8192x4096: 34.3 vs 43.6 us
      // with one; one load of x in flight per thread left HBM latency uncovered, 64-76% of copy
      // bandwidth), while fused_add_rms_norm (x and the residual: two streams) keeps one.
      const bool mid = rows * static_cast<int64_t>(nvec) <= static_cast<int64_t>(sms) * 2048 * 8;
      if (one_wave && wide && frows == 0 && nv == 1 && nvec >= 512) {
        // Latency regime (decode), from the H200 sweep with PDL (bench_gpu.py --sweep --pdl
        // both, bf16, H 4096 / 8192, T 1-128): two vectors per thread, half the
        // threads (a shorter cross-warp reduction) beat one per thread at every size, by
        // 0.01-0.07 us at 4096 and 0.15-0.20 us at 8192 (rms_norm 128x8192: 2.43 vs 2.61 us).
        c.nv = nv = 2;
      } else if (!one_wave && wide && frows == 0 && nv == 1) {
        if (mid && nvec >= 256 && !fused && nvec <= 512) {
          // rms_norm at 1024x4096: two vectors of one row per thread. H200 sweeps (bench_gpu.py
          // --sweep): 4.00 us against 4.26 with four vectors (before the packed residual add and
          // the per-vector variance test); with them, one row beat two rows of two vectors by
          // 4-6% (bf16 3.89 vs 4.06 us, fp16 3.95 vs 4.19).
          // fused_add_rms_norm keeps four vectors (6.22 us, within 0.02 of the best there).
          c.nv = nv = 2;
        } else if (mid && nvec >= 256) {
          c.nv = nv = 4;
        } else if (!fused) {
          c.nv = nv = 2;
        }
      }
      c.tpr = round_tpr((nvec + nv - 1) / nv);
    }
  }
  if (c.nv == 0) {  // one row per block; a forced tpr (the sweep's loop configs) is kept
    const int ftpr = g_force_tpr.load(std::memory_order_relaxed);
    c.tpr = std::min(1024, round_tpr(std::max(32, ftpr > 0 ? ftpr : nvec / 4)));
    c.block = c.tpr;
    return c;
  }
  c.variant = find_norm_variant(c.nv, want_rows, g_force_minb.load(std::memory_order_relaxed),
                                c.tpr, wide, fused, w32);
  c.rows = kNormVariants[c.variant].rows;
  c.minb = kNormVariants[c.variant].minb;
  // Latency regime: small blocks spread rows over SMs. Mid sizes: 256 (rms_norm) / 512 (fused).
  // Bandwidth regime: the sweep's best at 8192+ rows: 1024-thread blocks for fused_add_rms_norm,
  // 512 for rms_norm; variants past one vector of one row stop at 512.
  const int fblock = g_force_block.load(std::memory_order_relaxed);
  const bool mid = rows * static_cast<int64_t>(nvec) <= static_cast<int64_t>(sms) * 2048 * 8;
  const int want = fblock > 0 ? fblock
                   : one_wave ? 256
                   : mid      ? (fused ? 512 : 256)
                              : (fused ? 1024 : 512);
  c.block = std::max(1, want / c.tpr) * c.tpr;
  // Few rows: do not make blocks with many idle groups.
  const int64_t groups = (rows + c.rows - 1) / c.rows;
  if (groups < c.block / c.tpr) c.block = static_cast<int>(std::max<int64_t>(groups, 1)) * c.tpr;
  c.block = (c.block + 31) / 32 * 32;
  const int max_block = norm_max_threads(c.nv, c.rows);
  if (c.block > max_block) c.block = std::max(1, max_block / c.tpr) * c.tpr;
  return c;
}

template <class T, class WT, int VEC, bool FUSED, int I = 0>
void launch_norm_variant(int variant, const NormParams<T, WT>& p, unsigned grid, int block,
                         const Launch& l) {
  if constexpr (I < kNumNormVariants) {
    constexpr NormVariant v = kNormVariants[I];
    if constexpr (VEC * sizeof(T) == 16 || (v.rows == 1 && v.minb == 1)) {
      if (variant == I) {
        launch_kernel(norm_reg_kernel<T, WT, VEC, v.nv, v.rows, v.minb, FUSED>, grid, block, l, p);
        return;
      }
    }
    launch_norm_variant<T, WT, VEC, FUSED, I + 1>(variant, p, grid, block, l);
  } else {
    TORCH_CHECK(false, "ircore_vllm_c: no norm kernel variant ", variant);
  }
}

template <class T, class WT, int VEC, bool FUSED>
void launch_norm_vec(NormParams<T, WT> p, const Launch& l) {
  constexpr bool kWide = VEC * sizeof(T) == 16;
  const int nvec = p.hidden / VEC;
  const NormConfig c = pick_norm_config(p.rows, nvec, l.sms, FUSED, kWide, sizeof(WT) > sizeof(T));
  using U = uint64_t;
  g_last_config.store(U(c.nv) | U(c.tpr) << 8 | U(c.block) << 20 | U(c.rows) << 32 |
                          U(c.minb) << 40 | U(VEC) << 48,
                      std::memory_order_relaxed);
  p.tpr = c.tpr;
  if (c.nv == 0) {
    p.rows_per_block = 1;
    launch_kernel(norm_loop_kernel<T, WT, VEC, FUSED>, static_cast<unsigned>(p.rows), c.block, l, p);
  } else {
    p.rows_per_block = c.block / c.tpr;
    const int64_t per_block = static_cast<int64_t>(p.rows_per_block) * c.rows;
    const unsigned grid = static_cast<unsigned>((p.rows + per_block - 1) / per_block);
    launch_norm_variant<T, WT, VEC, FUSED>(c.variant, p, grid, c.block, l);
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline bool aligned(const void* p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) % n) == 0; }

template <class T, class WT, bool FUSED>
void launch_norm(const NormParams<T, WT>& p, const Launch& l) {
  constexpr int kVec = 16 / sizeof(T);
  // An fp32 weight with 16-bit x is read as 32-byte vectors: it needs 32-byte alignment.
  const bool vec_ok = p.hidden % kVec == 0 && aligned16(p.out) && aligned16(p.in) &&
                      (p.w == nullptr || aligned(p.w, sizeof(WT) * kVec)) &&
                      (p.out_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
                      (p.in_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
                      (!FUSED || (aligned16(p.res) &&
                                  (p.res_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0));
  if (vec_ok) {
    launch_norm_vec<T, WT, kVec, FUSED>(p, l);
  } else {
    launch_norm_vec<T, WT, 1, FUSED>(p, l);
  }
}

// ------------------------------------------------------------------------------------------
// silu_and_mul: one VEC-element vector pair per thread over the flattened [rows, d / VEC].

template <class T>
__device__ __forceinline__ float silu(float x) {
  if constexpr (sizeof(T) == 4) {
    return x / (1.0f + expf(-x));
  } else {  // 16-bit outputs: the fast intrinsics are far below their rounding error
    return __fdividef(x, 1.0f + __expf(-x));
  }
}

template <class T, int VEC, class I>
__global__ void __launch_bounds__(256)
    silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t in_stride, I rows,
                        I dv, int64_t d) {
  using C = Cvt<T>;
  using V = Vec<T, VEC>;
  const I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + threadIdx.x;
  pdl_wait();
  if (i >= rows * dv) return;
  const I r = i / dv;
  const I c = i - r * dv;
  const T* a = in + static_cast<int64_t>(r) * in_stride + static_cast<int64_t>(c) * VEC;
  const V va = vload<T, VEC>(a);
  const V vb = vload<T, VEC>(a + d);
  pdl_launch_dependents();
  V o;
#pragma unroll
  for (int k = 0; k < VEC; ++k) o.v[k] = C::of(silu<T>(C::f32(va.v[k])) * C::f32(vb.v[k]));
  vstore<T, VEC>(out + static_cast<int64_t>(r) * d + static_cast<int64_t>(c) * VEC, o);
}

template <class T, int VEC>
void launch_silu_vec(T* out, const T* in, int64_t in_stride, int64_t rows, int64_t d,
                     const Launch& l) {
  const int64_t dv = d / VEC;
  const int64_t total = rows * dv;
  constexpr int kBlock = 256;
  const int64_t grid = (total + kBlock - 1) / kBlock;
  TORCH_CHECK(grid < (int64_t{1} << 31), "ircore_vllm_c.silu_and_mul: input too large");
  const auto g = static_cast<unsigned>(grid);
  if (total + kBlock < (int64_t{1} << 31)) {
    launch_kernel(silu_and_mul_kernel<T, VEC, uint32_t>, g, kBlock, l, out, in, in_stride,
                  static_cast<uint32_t>(rows), static_cast<uint32_t>(dv), d);
  } else {
    launch_kernel(silu_and_mul_kernel<T, VEC, int64_t>, g, kBlock, l, out, in, in_stride, rows,
                  dv, d);
  }
}

// ------------------------------------------------------------------------------------------
// rms_norm_gated and layer_norm: one block per row (per group of a row for rms_norm_gated),
// passes over the row re-reading it from L2, as norm_loop_kernel; VEC-element vectors where the
// row, its pointers and strides allow, else element-wise. A first form, not yet tuned: no
// register-resident or multi-row variants.

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

template <class T>
__device__ __forceinline__ float round_to(float v) {
  return Cvt<T>::f32(Cvt<T>::of(v));
}

template <class T, class WT, int VEC, bool NBG, bool ROUND>
__global__ void __launch_bounds__(1024) rms_norm_gated_kernel(const GatedParams<T, WT> p) {
  using P = Pk<T, VEC>;
  using PW = Pk<WT, VEC>;
  const int64_t row = blockIdx.x / p.n_groups;
  const int c0 = static_cast<int>(blockIdx.x % p.n_groups) * p.group;
  const int nvec = p.group / VEC;
  const T* x = p.in + row * p.in_stride + c0;
  const T* g = p.gate + row * p.gate_stride + c0;
  pdl_wait();
  float acc = 0.0f;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    const P xv = pload<T, VEC>(x + vi * VEC);
    if constexpr (NBG) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc += pget(xv, i) * pget(xv, i);
    } else {
      const P gv = pload<T, VEC>(g + vi * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float v = pget(xv, i) * silu<float>(pget(gv, i));
        acc += v * v;
      }
    }
  }
  pdl_launch_dependents();
  const float inv = rsqrtf(row_sum(acc, blockDim.x) / static_cast<float>(p.group) + p.eps);
  T* o = p.out + row * p.hidden + c0;
  const WT* w = p.w + c0;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    const P xv = pload<T, VEC>(x + vi * VEC);
    const P gv = pload<T, VEC>(g + vi * VEC);
    const PW wv = pload<WT, VEC>(w + vi * VEC);
    float out[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float s = silu<float>(pget(gv, i));
      float y = (NBG ? pget(xv, i) : pget(xv, i) * s) * inv;
      if constexpr (ROUND) {
        y = round_to<T>(y) * pget(wv, i);
        if constexpr (NBG) y = round_to<T>(y) * s;
      } else {
        y = y * pget(wv, i);
        if constexpr (NBG) y = y * s;
      }
      out[i] = y;
    }
    pstore<T, VEC>(o + vi * VEC, ppack<T, VEC>(out));
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

// Three passes: the mean, the variance of x - mean (precise where it is small against mean^2),
// the output.
template <class T, int VEC>
__global__ void __launch_bounds__(1024) layer_norm_kernel(const LayerNormParams<T> p) {
  using P = Pk<T, VEC>;
  const int64_t row = blockIdx.x;
  const int nvec = p.hidden / VEC;
  const T* x = p.in + row * p.in_stride;
  const float n = static_cast<float>(p.hidden);
  pdl_wait();
  float acc = 0.0f;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    const P xv = pload<T, VEC>(x + vi * VEC);
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc += pget(xv, i);
  }
  pdl_launch_dependents();
  const float mean = row_sum(acc, blockDim.x) / n;
  __syncthreads();  // row_sum's shared scratch is used again below
  acc = 0.0f;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    const P xv = pload<T, VEC>(x + vi * VEC);
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float d = pget(xv, i) - mean;
      acc += d * d;
    }
  }
  const float inv = rsqrtf(row_sum(acc, blockDim.x) / n + p.eps);
  T* o = p.out + row * p.hidden;
  for (int vi = threadIdx.x; vi < nvec; vi += blockDim.x) {
    const P xv = pload<T, VEC>(x + vi * VEC);
    float out[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = (pget(xv, i) - mean) * inv;
    if (p.w != nullptr) {
      const P wv = pload<T, VEC>(p.w + vi * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] *= pget(wv, i);
    }
    if (p.b != nullptr) {
      const P bv = pload<T, VEC>(p.b + vi * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] += pget(bv, i);
    }
    pstore<T, VEC>(o + vi * VEC, ppack<T, VEC>(out));
  }
}

// Threads for a row of `n` elements in VEC-element vectors: a multiple of 32 up to 1024, about
// four vectors per thread (row_sum needs a power of two up to 32 or a multiple of 32).
inline int row_block(int64_t n, int vec) {
  const int64_t vecs = (n + vec - 1) / vec;
  const int64_t t = std::min<int64_t>(1024, std::max<int64_t>(32, (vecs + 3) / 4));
  return static_cast<int>((t + 31) / 32 * 32);
}

template <class T, class WT, int VEC>
void launch_gated_vec(const GatedParams<T, WT>& p, int64_t rows, bool nbg, bool round,
                      const Launch& l) {
  const unsigned grid = static_cast<unsigned>(rows * p.n_groups);
  const int block = row_block(p.group, VEC);
  if (nbg) {
    if (round) {
      launch_kernel(rms_norm_gated_kernel<T, WT, VEC, true, true>, grid, block, l, p);
    } else {
      launch_kernel(rms_norm_gated_kernel<T, WT, VEC, true, false>, grid, block, l, p);
    }
  } else if (round) {
    launch_kernel(rms_norm_gated_kernel<T, WT, VEC, false, true>, grid, block, l, p);
  } else {
    launch_kernel(rms_norm_gated_kernel<T, WT, VEC, false, false>, grid, block, l, p);
  }
}

// ------------------------------------------------------------------------------------------
// Op bindings.

void rms_norm_out_cuda(at::Tensor& out, const at::Tensor& x,
                       const std::optional<at::Tensor>& weight, double epsilon,
                       std::optional<int64_t> variance_size) {
  check_cuda("rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_norm_args("rms_norm", x, weight, variance_size, w);
  check_out("rms_norm", out, x, x.sizes());
  if (x.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const int64_t hidden = x.size(-1);
  check_sizes("rms_norm", hidden, rows.rows);
  const Launch l = launch_on(x);
  const bool fp32_weight = w.defined() && w.scalar_type() != x.scalar_type();
  IRC_CUDA_DISPATCH(x.scalar_type(), {
    auto run = [&](auto* wtag) {
      using WT = std::remove_pointer_t<decltype(wtag)>;
      NormParams<T, WT> p{};
      p.out = static_cast<T*>(out.data_ptr());
      p.out_stride = hidden;
      p.in = static_cast<const T*>(xin.data_ptr());
      p.in_stride = rows.stride;
      p.w = w.defined() ? static_cast<const WT*>(w.data_ptr()) : nullptr;
      p.hidden = static_cast<int>(hidden);
      p.var_size = static_cast<int>(vs);
      p.eps = static_cast<float>(epsilon);
      p.rows = rows.rows;
      launch_norm<T, WT, false>(p, l);
    };
    if (fp32_weight) {
      run(static_cast<float*>(nullptr));
    } else {
      run(static_cast<T*>(nullptr));
    }
  })
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                         double epsilon, std::optional<int64_t> variance_size) {
  check_x("rms_norm", x);
  at::Tensor out = at::empty(x.sizes(), x.options());
  rms_norm_out_cuda(out, x, weight, epsilon, variance_size);
  return out;
}

void fused_add_rms_norm_cuda(at::Tensor& x, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight, double epsilon,
                             std::optional<int64_t> variance_size) {
  check_cuda("fused_add_rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_fused_add_args(x, residual, weight, variance_size, w);
  if (x.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xw, rw;
  const Rows xr = writable_rows_of(x, xw);
  const Rows rr = writable_rows_of(residual, rw);
  const int64_t hidden = x.size(-1);
  check_sizes("fused_add_rms_norm", hidden, xr.rows);
  const Launch l = launch_on(x);
  const bool fp32_weight = w.defined() && w.scalar_type() != x.scalar_type();
  IRC_CUDA_DISPATCH(x.scalar_type(), {
    auto run = [&](auto* wtag) {
      using WT = std::remove_pointer_t<decltype(wtag)>;
      NormParams<T, WT> p{};
      p.out = static_cast<T*>(xw.data_ptr());
      p.out_stride = xr.stride;
      p.in = p.out;
      p.in_stride = xr.stride;
      p.res = static_cast<T*>(rw.data_ptr());
      p.res_stride = rr.stride;
      p.w = w.defined() ? static_cast<const WT*>(w.data_ptr()) : nullptr;
      p.hidden = static_cast<int>(hidden);
      p.var_size = static_cast<int>(vs);
      p.eps = static_cast<float>(epsilon);
      p.rows = xr.rows;
      launch_norm<T, WT, true>(p, l);
    };
    if (fp32_weight) {
      run(static_cast<float*>(nullptr));
    } else {
      run(static_cast<T*>(nullptr));
    }
  })
  copy_back(x, xw);
  copy_back(residual, rw);
}

void silu_and_mul_out_cuda(at::Tensor& out, const at::Tensor& x) {
  check_cuda("silu_and_mul", x);
  check_silu_args(x);
  check_out("silu_and_mul", out, x, silu_out_sizes(x));
  if (out.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t d = x.size(-1) / 2;
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const Launch l = launch_on(x);
  IRC_CUDA_DISPATCH(x.scalar_type(), {
    constexpr int kVec = 16 / sizeof(T);
    T* o = static_cast<T*>(out.data_ptr());
    const T* i = static_cast<const T*>(xin.data_ptr());
    const bool vec_ok = d % kVec == 0 && aligned16(o) && aligned16(i) &&
                        (rows.stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    if (vec_ok) {
      launch_silu_vec<T, kVec>(o, i, rows.stride, rows.rows, d, l);
    } else {
      launch_silu_vec<T, 1>(o, i, rows.stride, rows.rows, d, l);
    }
  })
}

at::Tensor silu_and_mul_cuda(const at::Tensor& x) {
  check_silu_args(x);
  at::Tensor out = at::empty(silu_out_sizes(x), x.options());
  silu_and_mul_out_cuda(out, x);
  return out;
}

at::Tensor rms_norm_gated_cuda(const at::Tensor& x, const at::Tensor& gate,
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
  at::Tensor xin, gin;
  const Rows xr = rows_of(x, xin);
  const Rows gr = rows_of(gate, gin);
  const int64_t hidden = x.size(-1);
  check_sizes("rms_norm_gated", hidden, xr.rows * (hidden / group));
  const Launch l = launch_on(x);
  const bool fp32_weight = w.scalar_type() != x.scalar_type();
  IRC_CUDA_DISPATCH(x.scalar_type(), {
    auto run = [&](auto* wtag) {
      using WT = std::remove_pointer_t<decltype(wtag)>;
      constexpr int kVec = 16 / sizeof(T);
      GatedParams<T, WT> p{};
      p.out = static_cast<T*>(out.data_ptr());
      p.in = static_cast<const T*>(xin.data_ptr());
      p.in_stride = xr.stride;
      p.gate = static_cast<const T*>(gin.data_ptr());
      p.gate_stride = gr.stride;
      p.w = static_cast<const WT*>(w.data_ptr());
      p.hidden = static_cast<int>(hidden);
      p.group = static_cast<int>(group);
      p.n_groups = static_cast<int>(hidden / group);
      p.eps = static_cast<float>(epsilon);
      const bool vec_ok = group % kVec == 0 && aligned16(p.out) && aligned16(p.in) &&
                          aligned16(p.gate) && aligned(p.w, sizeof(WT) * kVec) &&
                          (p.in_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0 &&
                          (p.gate_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
      if (vec_ok) {
        launch_gated_vec<T, WT, kVec>(p, xr.rows, norm_before_gate, round_normalized, l);
      } else {
        launch_gated_vec<T, WT, 1>(p, xr.rows, norm_before_gate, round_normalized, l);
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

at::Tensor layer_norm_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, double epsilon) {
  check_x("layer_norm", x);
  check_cuda("layer_norm", x);
  at::Tensor w, b;
  check_layer_norm_args(x, weight, bias, w, b);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin;
  const Rows xr = rows_of(x, xin);
  const int64_t hidden = x.size(-1);
  check_sizes("layer_norm", hidden, xr.rows);
  const Launch l = launch_on(x);
  IRC_CUDA_DISPATCH(x.scalar_type(), {
    constexpr int kVec = 16 / sizeof(T);
    LayerNormParams<T> p{};
    p.out = static_cast<T*>(out.data_ptr());
    p.in = static_cast<const T*>(xin.data_ptr());
    p.in_stride = xr.stride;
    p.w = w.defined() ? static_cast<const T*>(w.data_ptr()) : nullptr;
    p.b = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    p.hidden = static_cast<int>(hidden);
    p.eps = static_cast<float>(epsilon);
    const bool vec_ok = hidden % kVec == 0 && aligned16(p.out) && aligned16(p.in) &&
                        (p.w == nullptr || aligned16(p.w)) && (p.b == nullptr || aligned16(p.b)) &&
                        (p.in_stride * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    const unsigned grid = static_cast<unsigned>(xr.rows);
    if (vec_ok) {
      launch_kernel(layer_norm_kernel<T, kVec>, grid, row_block(hidden, kVec), l, p);
    } else {
      launch_kernel(layer_norm_kernel<T, 1>, grid, row_block(hidden, 1), l, p);
    }
  })
  return out;
}

// Tuning hooks: force the norm launch configuration (0 = automatic, per knob) for sweeps on new
// GPUs; read back what the latest norm launch used.
void set_norm_config(int64_t nv, int64_t tpr, int64_t block, int64_t rows, int64_t minb) {
  TORCH_CHECK(nv == 0 || nv == 1 || nv == 2 || nv == 4,
              "ircore_vllm_c._cuda_set_norm_config: nv must be 0, 1, 2 or 4");
  TORCH_CHECK(tpr >= 0 && tpr <= 1024 && block >= 0 && block <= 1024,
              "ircore_vllm_c._cuda_set_norm_config: tpr and block must be in [0, 1024]");
  TORCH_CHECK(rows == 0 || rows == 1 || rows == 2 || rows == 4,
              "ircore_vllm_c._cuda_set_norm_config: rows must be 0, 1, 2 or 4");
  TORCH_CHECK(minb >= 0 && minb <= 4,
              "ircore_vllm_c._cuda_set_norm_config: minb must be in [0, 4]");
  g_force_nv.store(static_cast<int>(nv));
  g_force_tpr.store(static_cast<int>(tpr));
  g_force_block.store(static_cast<int>(block));
  g_force_rows.store(static_cast<int>(rows));
  g_force_minb.store(static_cast<int>(minb));
}

// PDL for this process's launches (A/B runs): 0 = off, 1 = on where the GPU has it, -1 = as
// IRCORE_VLLM_C_PDL says. Returns whether launches on `device` now use it.
bool set_pdl(int64_t mode, int64_t device) {
  TORCH_CHECK(mode >= -1 && mode <= 1, "ircore_vllm_c._cuda_set_pdl: mode must be -1, 0 or 1");
  g_pdl.store(static_cast<int>(mode));
  return use_pdl(static_cast<int>(device));
}

// [nv (0: loop kernel), tpr, block, rows, minb, elements per vector] of the latest norm launch
// in this process (all 0 before the first).
std::vector<int64_t> last_norm_config() {
  const uint64_t v = g_last_config.load(std::memory_order_relaxed);
  return {static_cast<int64_t>(v & 0xff),         static_cast<int64_t>((v >> 8) & 0xfff),
          static_cast<int64_t>((v >> 20) & 0xfff), static_cast<int64_t>((v >> 32) & 0xff),
          static_cast<int64_t>((v >> 40) & 0xff),  static_cast<int64_t>((v >> 48) & 0xff)};
}

}  // namespace cuda
}  // namespace ircore_vllm_c

TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def("_cuda_set_norm_config(int nv, int tpr, int block, int rows=0, int minb=0) -> ()",
        &ircore_vllm_c::cuda::set_norm_config);
  m.def("_cuda_last_norm_config() -> int[]", &ircore_vllm_c::cuda::last_norm_config);
  m.def("_cuda_set_pdl(int mode, int device=0) -> bool", &ircore_vllm_c::cuda::set_pdl);
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) {
  m.impl("rms_norm", &ircore_vllm_c::cuda::rms_norm_cuda);
  m.impl("fused_add_rms_norm", &ircore_vllm_c::cuda::fused_add_rms_norm_cuda);
  m.impl("silu_and_mul", &ircore_vllm_c::cuda::silu_and_mul_cuda);
  m.impl("rms_norm_out", &ircore_vllm_c::cuda::rms_norm_out_cuda);
  m.impl("silu_and_mul_out", &ircore_vllm_c::cuda::silu_and_mul_out_cuda);
  m.impl("rms_norm_gated", &ircore_vllm_c::cuda::rms_norm_gated_cuda);
  m.impl("layer_norm", &ircore_vllm_c::cuda::layer_norm_cuda);
}
