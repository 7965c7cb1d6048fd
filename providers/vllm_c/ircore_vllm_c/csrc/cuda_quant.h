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

cudaError_t launch_quant(const QuantLaunch& l, cudaStream_t stream);

// Dynamic shared memory one row needs (0 for kPlain): the launcher's and the predicates' limit.
constexpr int64_t kMaxRowBytes = 96 * 1024;

}  // namespace cuda_quant
}  // namespace ircore_vllm_c
