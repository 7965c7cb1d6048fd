// RoPE argument checks and layouts shared by the CPU and CUDA bindings (cpu_rope.cpp,
// cuda_rope.cu), so both devices accept and reject the same calls with the same messages.
// The checks are defined in rope_checks.cpp (built into each library, as checks.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

namespace ircore_vllm_c {

// An activation of rotary_embedding seen as [tokens, heads, head_size]: tokens one stride apart,
// heads head_stride apart, channels unit-stride.
struct TokenHeads {
  int64_t token_stride;
  int64_t heads;
  int64_t head_stride;
};

// The view above of x ([*, heads * head_size] or [*, heads, head_size] with * holding `tokens`,
// read as the op reads it), or nullopt when x's layout has no such view (the binding then runs
// on a contiguous copy and copies the result back).
std::optional<TokenHeads> as_token_heads(const at::Tensor& x, int64_t tokens, int64_t head_size);

// x as the kernel reads it: x itself where as_token_heads takes its layout, else a contiguous
// copy (copy_back, ops_common.h, writes it into x after the kernel), with the layout.
struct TokenHeadsWork {
  at::Tensor t;
  TokenHeads view;
};

inline TokenHeadsWork token_heads_work(const at::Tensor& x, int64_t tokens, int64_t head_size) {
  if (auto v = as_token_heads(x, tokens, head_size)) return {x, *v};
  at::Tensor c = x.contiguous();
  return {c, *as_token_heads(c, tokens, head_size)};
}

// rotary_embedding / rotary_embedding_query_only (key may be undefined): everything but the
// positions' values. Returns whether the cos/sin rows read positions + offsets (deepseek).
bool check_rope_args(const char* op, const at::Tensor& positions, const at::Tensor& query,
                     const at::Tensor& key, int64_t head_size, int64_t rotary_dim,
                     const at::Tensor& cache, const std::optional<at::Tensor>& offsets,
                     const std::string& format, int64_t rope_dim_offset);

// rotary_pos_emb (HF form): q, k 4-D with a unit-stride last dimension D (even), cos/sin 3-D
// [*, *, D] broadcasting to each once unsqueezed at unsqueeze_dim, which is 0, 1 or 2 after
// normalisation (returned).
int64_t check_pos_emb_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                           const at::Tensor& sin, int64_t unsqueeze_dim);

void check_qk_norm_rope_args(const at::Tensor& qkv, int64_t heads_q, int64_t heads_k,
                             int64_t heads_v, int64_t head_dim, const at::Tensor& q_weight,
                             const at::Tensor& k_weight, const at::Tensor& cache,
                             const at::Tensor& positions);

// The two token axes of a 4-D q/k whose head axis is `u` (0, 1 or 2).
inline void token_axes(int64_t u, int64_t& a, int64_t& b) {
  a = u == 0 ? 1 : 0;
  b = u == 2 ? 1 : 2;
}

}  // namespace ircore_vllm_c
