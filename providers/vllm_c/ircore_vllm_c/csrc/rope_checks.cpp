// RoPE argument checks and layouts shared by the CPU and CUDA bindings (see rope_common.h).
// Numbers are formatted by num and dims (ops_common.h), never inserted into TORCH_CHECK's stream
// (see checks.cpp for why).
#include <c10/util/Exception.h>

#include "ops_common.h"
#include "rope_common.h"

namespace ircore_vllm_c {

namespace {

int64_t prod(c10::IntArrayRef sizes, int64_t end) {
  int64_t p = 1;
  for (int64_t d = 0; d < end; ++d) p *= sizes[d];
  return p;
}

void check_float_tensor(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(is_supported_dtype(t.scalar_type()), "ircore_vllm_c.", op, ": ", name,
              " must be float32, float16 or bfloat16, got ", t.scalar_type());
}

// cos/sin (a cache or HF's cos/sin) in float32 or the activations' dtype: the kernels' pairs.
void check_cos_sin_dtype(const char* op, const char* name, const at::Tensor& t,
                         const at::Tensor& x) {
  TORCH_CHECK(t.scalar_type() == at::ScalarType::Float || t.scalar_type() == x.scalar_type(),
              "ircore_vllm_c.", op, ": ", name, " must be float32 or the activations' dtype (",
              x.scalar_type(), "), got ", t.scalar_type());
}

void check_index_tensor(const char* op, const char* name, const at::Tensor& t, int64_t tokens,
                        const at::Tensor& like) {
  TORCH_CHECK(t.scalar_type() == at::ScalarType::Long, "ircore_vllm_c.", op, ": ", name,
              " must be int64, got ", t.scalar_type());
  TORCH_CHECK(t.numel() == tokens, "ircore_vllm_c.", op, ": ", name, " must hold ", num(tokens),
              " elements (one per token), got ", num(t.numel()));
  TORCH_CHECK(t.device() == like.device(), "ircore_vllm_c.", op, ": ", name, " is on ",
              t.device(), ", the activations on ", like.device());
}

}  // namespace

std::optional<TokenHeads> as_token_heads(const at::Tensor& x, int64_t tokens, int64_t head_size) {
  const int64_t nd = x.dim();
  if (nd == 0 || head_size <= 0) return std::nullopt;
  const int64_t last = x.size(nd - 1);
  if (last > 1 && x.stride(nd - 1) != 1) return std::nullopt;
  if (last % head_size == 0 && last > 0 && prod(x.sizes(), nd - 1) == tokens) {
    const auto s = flat_stride(x, nd - 1);
    if (!s) return std::nullopt;
    return TokenHeads{*s, last / head_size, head_size};
  }
  if (nd >= 2 && last == head_size && prod(x.sizes(), nd - 2) == tokens) {
    const auto s = flat_stride(x, nd - 2);
    if (!s) return std::nullopt;
    return TokenHeads{*s, x.size(nd - 2), x.stride(nd - 2)};
  }
  return std::nullopt;
}

bool check_rope_args(const char* op, const at::Tensor& positions, const at::Tensor& query,
                     const at::Tensor& key, int64_t head_size, int64_t rotary_dim,
                     const at::Tensor& cache, const std::optional<at::Tensor>& offsets,
                     const std::string& format, int64_t rope_dim_offset) {
  TORCH_CHECK(format == "standard" || format == "deepseek", "ircore_vllm_c.", op,
              ": cos_sin_format must be 'standard' or 'deepseek', got '", format, "'");
  TORCH_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "ircore_vllm_c.", op,
              ": rotary_dim must be a positive even int, got ", num(rotary_dim));
  TORCH_CHECK(rope_dim_offset >= 0 && rope_dim_offset + rotary_dim <= head_size, "ircore_vllm_c.",
              op, ": rope_dim_offset (", num(rope_dim_offset), ") + rotary_dim (", num(rotary_dim),
              ") must fit in head_size (", num(head_size), ")");
  check_float_tensor(op, "query", query);
  const int64_t tokens = positions.numel();
  check_index_tensor(op, "positions", positions, tokens, query);
  const at::Tensor* xs[2] = {&query, &key};
  const char* names[2] = {"query", "key"};
  for (int i = 0; i < 2; ++i) {
    const at::Tensor& x = *xs[i];
    if (!x.defined()) continue;
    TORCH_CHECK(x.scalar_type() == query.scalar_type() && x.device() == query.device(),
                "ircore_vllm_c.", op, ": key must have query's dtype and device");
    const int64_t nd = x.dim();
    const int64_t last = nd ? x.size(nd - 1) : 0;
    const bool flat = last > 0 && last % head_size == 0 && prod(x.sizes(), nd - 1) == tokens;
    const bool split = nd >= 2 && last == head_size && prod(x.sizes(), nd - 2) == tokens;
    TORCH_CHECK(flat || split, "ircore_vllm_c.", op, ": ", names[i], " must be [*, heads * ",
                num(head_size), "] or [*, heads, ", num(head_size), "] with * holding the ",
                num(tokens), " tokens, got ", dims(x.sizes()));
  }
  check_cos_sin_dtype(op, "cos_sin_cache", cache, query);
  TORCH_CHECK(cache.dim() == 2 && cache.size(1) == rotary_dim, "ircore_vllm_c.", op,
              ": cos_sin_cache must be [max_position, ", num(rotary_dim), "], got ",
              dims(cache.sizes()));
  TORCH_CHECK(cache.device() == query.device(), "ircore_vllm_c.", op,
              ": cos_sin_cache is on ", cache.device(), ", query on ", query.device());
  const bool with_offsets = offsets.has_value() && offsets->defined();
  if (with_offsets) {
    TORCH_CHECK(format == "deepseek", "ircore_vllm_c.", op,
                ": offsets are read only with cos_sin_format='deepseek'");
    check_index_tensor(op, "offsets", *offsets, tokens, query);
  }
  return with_offsets;
}

int64_t check_pos_emb_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                           const at::Tensor& sin, int64_t unsqueeze_dim) {
  const char* op = "rotary_pos_emb";
  check_float_tensor(op, "q", q);
  check_cos_sin_dtype(op, "cos", cos, q);
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && sin.scalar_type() == cos.scalar_type(),
              "ircore_vllm_c.rotary_pos_emb: k must have q's dtype and sin cos's");
  TORCH_CHECK(k.device() == q.device() && cos.device() == q.device() && sin.device() == q.device(),
              "ircore_vllm_c.rotary_pos_emb: q, k, cos and sin must be on one device");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && cos.dim() == 3 && sin.sizes() == cos.sizes(),
              "ircore_vllm_c.rotary_pos_emb: expected 4-D q and k and 3-D cos and sin of one shape, "
              "got q ", dims(q.sizes()), ", k ", dims(k.sizes()), ", cos ", dims(cos.sizes()),
              ", sin ", dims(sin.sizes()));
  const int64_t u = unsqueeze_dim < 0 ? unsqueeze_dim + 4 : unsqueeze_dim;
  TORCH_CHECK(u >= 0 && u <= 2, "ircore_vllm_c.rotary_pos_emb: unsqueeze_dim must name a head axis "
              "of q (0, 1 or 2, or -4 to -2), got ", num(unsqueeze_dim));
  const int64_t d = q.size(3);
  TORCH_CHECK(d > 0 && d % 2 == 0 && k.size(3) == d && cos.size(2) == d,
              "ircore_vllm_c.rotary_pos_emb: q, k, cos and sin must share an even last dimension, "
              "got q ", dims(q.sizes()), ", k ", dims(k.sizes()), ", cos ", dims(cos.sizes()));
  const auto wide = cos.unsqueeze(u).sizes();
  const at::Tensor* xs[2] = {&q, &k};
  for (const at::Tensor* x : xs) {
    for (int64_t d = 0; d < 3; ++d) {
      TORCH_CHECK(wide[d] == 1 || wide[d] == x->size(d), "ircore_vllm_c.rotary_pos_emb: cos ",
                  dims(cos.sizes()), " unsqueezed at ", num(u), " does not broadcast to ",
                  dims(x->sizes()));
    }
  }
  return u;
}

void check_qk_norm_rope_args(const at::Tensor& qkv, int64_t heads_q, int64_t heads_k,
                             int64_t heads_v, int64_t head_dim, const at::Tensor& q_weight,
                             const at::Tensor& k_weight, const at::Tensor& cache,
                             const at::Tensor& positions) {
  const char* op = "fused_qk_norm_rope";
  check_float_tensor(op, "qkv", qkv);
  TORCH_CHECK(heads_q > 0 && heads_k > 0 && heads_v >= 0, "ircore_vllm_c.", op,
              ": expected num_heads_q, num_heads_k > 0 and num_heads_v >= 0");
  TORCH_CHECK(head_dim > 0 && head_dim % 2 == 0, "ircore_vllm_c.", op,
              ": head_dim must be a positive even int, got ", num(head_dim));
  const int64_t width = (heads_q + heads_k + heads_v) * head_dim;
  TORCH_CHECK(qkv.dim() >= 1 && qkv.size(-1) == width, "ircore_vllm_c.", op,
              ": qkv must be [*, ", num(width), "], got ", dims(qkv.sizes()));
  const at::Tensor* ws[2] = {&q_weight, &k_weight};
  for (const at::Tensor* w : ws) {
    check_float_tensor(op, "q_weight/k_weight", *w);
    TORCH_CHECK(w->dim() == 1 && w->size(0) == head_dim && w->device() == qkv.device(),
                "ircore_vllm_c.", op, ": q_weight and k_weight must be [", num(head_dim),
                "] on qkv's device, got ", dims(w->sizes()));
  }
  check_cos_sin_dtype(op, "cos_sin_cache", cache, qkv);
  TORCH_CHECK(cache.dim() == 2 && cache.size(1) == head_dim && cache.device() == qkv.device(),
              "ircore_vllm_c.", op, ": cos_sin_cache must be [max_position, ", num(head_dim),
              "] on qkv's device, got ", dims(cache.sizes()));
  check_index_tensor(op, "position_ids", positions, qkv.numel() / width, qkv);
}

}  // namespace ircore_vllm_c
