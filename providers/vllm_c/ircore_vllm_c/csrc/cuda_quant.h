// The launcher of the CUDA fp8 quant kernels (cuda_quant.cu), called by their torch bindings
// (cuda_quant_ops.cpp): plain structs, no torch header, so the kernel file compiles quickly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ircore_vllm_c {
namespace cuda_quant {

enum class QDType : int { kFloat = 0, kHalf = 1, kBFloat16 = 2 };

// Where a row's values come from: x itself; rms_norm(x); rms_norm(x + residual) (the sum, rounded
// to x's dtype, written to res_out); silu(x[:, :k]) * x[:, k:].
enum class QSource : int { kPlain = 0, kNorm = 1, kAddNorm = 2, kSilu = 3 };

// What is done with them: a static scale; a per-row dynamic scale; per-group scales; the
// per-tensor amax only (atomicMax into amax); quantise by the per-tensor scale from amax.
enum class QMode : int { kStatic = 0, kToken = 1, kGroup = 2, kAmax = 3, kTensor = 4 };

struct QuantLaunch {
  QDType dtype;
  QSource source;
  QMode mode;
  int64_t rows, k;  // k: the quantised row's length (half of x's for kSilu)
  const void* x;
  int64_t x_stride;
  const void* residual;  // kAddNorm
  int64_t r_stride;
  void* res_out;  // kAddNorm: contiguous rows of k
  const void* weight;  // norm weight (nullptr: none), of x's dtype or float32
  bool weight_f32;
  float eps;
  uint8_t* q;  // contiguous rows of k fp8 (e4m3fn) bytes
  float fp8_max, min_scale;
  // kStatic: fp32 scale (sa, sb) broadcast over (m, k): m = row % m_rows
  const float* scale;
  int64_t sa, sb, m_rows;
  // kToken: scales[row]; scale_ub (nullptr: none); kTensor: scales[0]
  float* scales;
  const float* scale_ub;
  // kGroup: group g, groups G; scale of (row, j) at scales + (row / m_rows) * batch_stride
  // + (column_major ? j * col_stride + row % m_rows : (row % m_rows) * G + j)
  int64_t group, groups, col_stride, batch_stride;
  bool column_major, ue8m0;
  float* amax;  // kAmax / kTensor: one float (zeroed by the launcher for kAmax)
};

// The launch of a row (a function of the row length k, the group size g, the elements per 16-byte
// chunk n and the chunks a lane keeps in registers, never of the batch): threads per block; the
// team width (lanes per group in group mode, else the block); whether groups hold whole chunks;
// whether every unit fits its team's registers in one pass (the row read once).
// Threads per block at most (the kernels' launch bound: up to 128 registers per thread).
constexpr int kMaxThreads = 512;

struct QuantShape {
  int threads, team;
  bool whole_chunks, resident;
};

inline QuantShape plan_quant(bool grouped, int64_t k, int64_t g, int n, int slots) {
  auto warps = [](int64_t t) {
    return t < 32 ? 32 : (t > kMaxThreads ? kMaxThreads : (t + 31) / 32 * 32);
  };
  if (!grouped) {
    const int64_t chunks = (k + n - 1) / n;
    const int threads = static_cast<int>(warps((chunks + slots - 1) / slots));
    return {threads, threads, true, chunks <= int64_t{threads} * slots};
  }
  const int64_t per_group = (g + n - 1) / n, groups = (k + g - 1) / g;
  int w = 1;  // the narrowest power-of-two team whose registers hold a group
  while (w < 32 && w * slots < per_group) w <<= 1;
  const int threads = static_cast<int>(warps(groups * w));
  return {threads, w, g % n == 0, per_group <= w * slots && groups * w <= threads};
}

cudaError_t launch_quant(const QuantLaunch& l, cudaStream_t stream);

// Dynamic shared memory one row needs (0 for kPlain and for rows held in registers): the
// launcher's and the predicates' limit.
constexpr int64_t kMaxRowBytes = 96 * 1024;

}  // namespace cuda_quant
}  // namespace ircore_vllm_c
