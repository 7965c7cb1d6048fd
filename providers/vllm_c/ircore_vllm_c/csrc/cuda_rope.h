// The launchers of the CUDA RoPE kernels (cuda_rope.cu), called by their torch bindings
// (cuda_rope_ops.cpp): plain structs, no torch header, so the kernel file compiles quickly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ircore_vllm_c {
namespace cuda_rope {

enum class RopeDType : int { kFloat = 0, kHalf = 1, kBFloat16 = 2 };

// One activation: head h of token (i, j) at data + i * s0 + j * s1 + h * head_stride (elements).
struct RopeActivation {
  void* data;
  int64_t s0, s1, head_stride, heads;
};

struct RopeLaunch {
  RopeDType dtype;
  bool cache_fp32;  // cos/sin (cache or HF's) in float32; else in the activations' dtype
  RopeActivation x[2];
  int nx;
  int64_t tokens, n1;  // token k is (k / n1, k % n1)
  int64_t pairs;       // rotated pairs per token, over every head of every activation
  // cache mode (positions != nullptr): row positions[k] (+ offsets[k]) of cache, cos in the first
  // rotary_dim / 2 columns, sin in the rest; HF mode: rotary_dim values of cos and of sin at
  // cos/sin + i * c0 + j * c1
  const int64_t* positions;
  const int64_t* offsets;
  const void* cache;
  int64_t cache_stride;
  const void* cos;
  const void* sin;
  int64_t c0, c1;
  int64_t rotary_dim, rot_offset;
  bool neox, inverse;
};

struct QkNormRopeLaunch {
  RopeDType dtype;
  bool cache_fp32;
  void* qkv;
  int64_t stride, rows, heads_q, heads_k, head_dim;
  float eps;
  const float* wq;
  const float* wk;
  const void* cache;
  int64_t cache_stride;
  const int64_t* positions;
  bool neox;
};

cudaError_t launch_rope(const RopeLaunch& l, cudaStream_t stream);
cudaError_t launch_qk_norm_rope(const QkNormRopeLaunch& l, cudaStream_t stream);

}  // namespace cuda_rope
}  // namespace ircore_vllm_c
