// RoPE kernels for the CPU (rotary_embedding, rotary_embedding_query_only, rotary_pos_emb,
// fused_qk_norm_rope), free of torch headers like cpu_kernels.h: cpu_rope_kernels.cpp compiles
// one copy per ISA (scalar, AVX2, AVX-512) with function-level target attributes; the bindings
// (cpu_rope.cpp) parallelise over tokens and call rope_tokens / qk_norm_rope_rows.
//
// Numerics: cos/sin are read in the cache's (or HF cos/sin's) own dtype (float32, or the
// activations' dtype) and widened to fp32,
// every product and sum is fp32, and each output is rounded once to the activations' dtype.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace ircore_vllm_c {
namespace cpu {

// One activation (query, key or HF's q/k) rotated in place, over the tokens of a grid [n0, n1]
// (RopeParams; n1 = 1 for vLLM's flat tokens) with `heads` heads each: head h of token (i, j)
// starts at data + i * s0 + j * s1 + h * head_stride (elements); channels are unit-stride.
struct RopeActivation {
  void* data = nullptr;
  int64_t s0 = 0, s1 = 0;
  int64_t heads = 0, head_stride = 0;
};

struct RopeParams {
  DType dt = DType::kFloat;   // the activations'
  DType cdt = DType::kFloat;  // cos/sin's (the cache's, or HF cos/sin's): kFloat or dt
  int64_t n0 = 0, n1 = 1;  // the token grid, shared by the activations
  RopeActivation x[2];
  int nx = 1;
  // Cos/sin source, one of two:
  // - a vLLM cache (positions != nullptr): token t reads row positions[t] (+ offsets[t]) of
  //   `cache` (row stride cache_stride): cos in its first rotary_dim / 2 columns, sin in the
  //   rest; both halves of a neox head use the same cos/sin.
  // - HF's cos and sin (positions == nullptr): token (i, j) reads rotary_dim values of each at
  //   cos/sin + i * c0 + j * c1 (first and second halves used for their own channels).
  const int64_t* positions = nullptr;
  const int64_t* offsets = nullptr;
  const void* cache = nullptr;
  int64_t cache_stride = 0;
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t c0 = 0, c1 = 0;
  int64_t rotary_dim = 0, rot_offset = 0;
  bool neox = true, inverse = false;
};

// Rotates tokens [begin, end) of the flat grid (token k is (k / n1, k % n1)) of every activation.
void rope_tokens(Isa isa, const RopeParams& p, int64_t begin, int64_t end);

// fused_qk_norm_rope on rows [begin, end) of a packed qkv (row stride `stride`), in place: each of
// the first heads_q + heads_k heads of head_dim is RMS-normalised (fp32, weights wq / wk given in
// fp32), then rotated by cache row positions[r] (rotary_dim = head_dim), then rounded once.
void qk_norm_rope_rows(Isa isa, DType dt, DType cdt, void* qkv, int64_t stride, int64_t heads_q,
                       int64_t heads_k, int64_t head_dim, float eps, const float* wq,
                       const float* wk, const void* cache, int64_t cache_stride,
                       const int64_t* positions, bool neox, int64_t begin, int64_t end);

}  // namespace cpu
}  // namespace ircore_vllm_c
