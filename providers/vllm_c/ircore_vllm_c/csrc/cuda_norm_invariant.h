// The launchers of the batch-invariant CUDA norms (cuda_norm_invariant.cu), called by their torch
// bindings (cuda_norm_invariant_ops.cpp): plain structs, no torch header, so the kernel file
// compiles quickly (as cuda_rope.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ircore_vllm_c {
namespace cuda_inv {

enum class InvDType : int { kFloat = 0, kHalf = 1, kBFloat16 = 2 };

// rms_norm (fused false: out and in separate) and fused_add_rms_norm (in place: out == in, the
// residual read and overwritten with x + residual). Pointers of `dtype`; the weight of `dtype` or,
// with w32, float (may be null).
struct InvRmsLaunch {
  InvDType dtype;
  bool fused;
  void* out;
  int64_t out_stride;
  const void* in;
  int64_t in_stride;
  void* res;
  int64_t res_stride;
  const void* w;
  bool w32;
  int hidden;
  int var_size;
  float eps;
  int64_t rows;
  bool pdl;
};

// rms_norm_gated: out contiguous rows of `hidden`; groups of `group` elements (hidden: per row).
struct InvGatedLaunch {
  InvDType dtype;
  void* out;
  const void* in;
  int64_t in_stride;
  const void* gate;
  int64_t gate_stride;
  const void* w;
  bool w32;
  int hidden;
  int group;
  int64_t rows;
  float eps;
  bool norm_before_gate;
  bool round_normalized;
  bool pdl;
};

// layer_norm: out contiguous rows of `hidden`; weight and bias of `dtype` (either may be null).
struct InvLayerNormLaunch {
  InvDType dtype;
  void* out;
  const void* in;
  int64_t in_stride;
  const void* w;
  const void* b;
  int hidden;
  int64_t rows;
  float eps;
  bool pdl;
};

// The rms_norm / fused_add_rms_norm launch for a row of `hidden` elements in `vec`-element
// chunks: chunks per thread (0: the two-pass kernel), threads per row, threads per block.
struct InvNormConfig {
  int nv;
  int tpr;
  int block;
};

InvNormConfig inv_norm_config(int hidden, int vec, bool fused);
cudaError_t launch_rms_norm(const InvRmsLaunch& l, cudaStream_t stream);
cudaError_t launch_gated(const InvGatedLaunch& l, cudaStream_t stream);
cudaError_t launch_layer_norm(const InvLayerNormLaunch& l, cudaStream_t stream);

}  // namespace cuda_inv
}  // namespace ircore_vllm_c
