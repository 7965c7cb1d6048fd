// CPU bindings of the RoPE ops (schemas defined here, in this provider's namespace): each op is
// in place, as the ircore op's in-place schema says (ircore clones for functional calls).
// Tokens are split across threads; activations whose token dims do not collapse to one stride
// (or whose channels are not unit-stride) run on a contiguous copy written back at the end.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <string>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_rope.h"
#include "ops_common.h"
#include "rope_common.h"

namespace ircore_vllm_c {
namespace {

// Tokens per task: about 16K elements of work each (a thread handoff costs more below that).
int64_t grain_tokens(int64_t elems_per_token) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(elems_per_token, 1));
}

void check_on_cpu(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu(), "ircore_vllm_c.", op, ": expected CPU tensors, got ",
              x.device());
}

// Every cache row read (positions, plus offsets) exists: a wrong position would read outside
// the cache. One pass over T int64s.
void check_rows(const char* op, const int64_t* pos, const int64_t* off, int64_t tokens,
                int64_t rows) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t r = pos[t] + (off != nullptr ? off[t] : 0);
    TORCH_CHECK(r >= 0 && r < rows, "ircore_vllm_c.", op, ": position ", std::to_string(r),
                " (token ", std::to_string(t), ") is outside cos_sin_cache's ",
                std::to_string(rows), " rows");
  }
}

void rope_cpu(const char* op, const at::Tensor& positions, at::Tensor& query, at::Tensor* key,
              int64_t head_size, int64_t rotary_dim, const at::Tensor& cache, bool neox,
              const std::optional<at::Tensor>& offsets, const std::string& format, bool inverse,
              int64_t rope_dim_offset) {
  check_on_cpu(op, query);
  const at::Tensor no_key;
  const bool with_offsets = check_rope_args(op, positions, query, key ? *key : no_key, head_size,
                                            rotary_dim, cache, offsets, format, rope_dim_offset);
  const int64_t tokens = positions.numel();
  if (tokens == 0) return;
  const at::Tensor pos = positions.reshape(-1).contiguous();
  const at::Tensor off = with_offsets ? offsets->reshape(-1).contiguous() : at::Tensor();
  const at::Tensor c = cache.stride(1) == 1 ? cache : cache.contiguous();
  check_rows(op, pos.data_ptr<int64_t>(), with_offsets ? off.data_ptr<int64_t>() : nullptr,
             tokens, c.size(0));
  cpu::RopeParams p;
  p.dt = cpu_dtype(query.scalar_type());
  p.cdt = cpu_dtype(c.scalar_type());
  p.n0 = tokens;
  p.n1 = 1;
  p.positions = pos.data_ptr<int64_t>();
  p.offsets = with_offsets ? off.data_ptr<int64_t>() : nullptr;
  p.cache = c.data_ptr();
  p.cache_stride = c.stride(0);
  p.rotary_dim = rotary_dim;
  p.rot_offset = rope_dim_offset;
  p.neox = neox;
  p.inverse = inverse;
  at::Tensor* xs[2] = {&query, key};
  TokenHeadsWork work[2];
  int64_t heads = 0;
  p.nx = key ? 2 : 1;
  for (int i = 0; i < p.nx; ++i) {
    work[i] = token_heads_work(*xs[i], tokens, head_size);
    p.x[i] = {work[i].t.data_ptr(), work[i].view.token_stride, 0, work[i].view.heads,
              work[i].view.head_stride};
    heads += work[i].view.heads;
  }
  const cpu::Isa isa = cpu::selected_isa();
  at::parallel_for(0, tokens, grain_tokens(heads * rotary_dim), [&](int64_t b, int64_t e) {
    cpu::rope_tokens(isa, p, b, e);
  });
  for (int i = 0; i < p.nx; ++i) copy_back(*xs[i], work[i].t);
}

void rotary_embedding_cpu(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                          int64_t head_size, int64_t rotary_dim, const at::Tensor& cache,
                          bool is_neox_style, const std::optional<at::Tensor>& offsets,
                          const std::string& format, bool inverse, int64_t rope_dim_offset) {
  rope_cpu("rotary_embedding", positions, query, &key, head_size, rotary_dim, cache,
           is_neox_style, offsets, format, inverse, rope_dim_offset);
}

void rotary_embedding_query_only_cpu(const at::Tensor& positions, at::Tensor& query,
                                     int64_t head_size, int64_t rotary_dim,
                                     const at::Tensor& cache, bool is_neox_style,
                                     const std::optional<at::Tensor>& offsets,
                                     const std::string& format, bool inverse,
                                     int64_t rope_dim_offset) {
  rope_cpu("rotary_embedding_query_only", positions, query, nullptr, head_size, rotary_dim, cache,
           is_neox_style, offsets, format, inverse, rope_dim_offset);
}

void rotary_pos_emb_cpu(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                        const at::Tensor& sin, int64_t unsqueeze_dim) {
  check_on_cpu("rotary_pos_emb", q);
  const int64_t u = check_pos_emb_args(q, k, cos, sin, unsqueeze_dim);
  int64_t a = 0, b = 0;
  token_axes(u, a, b);
  // cos/sin: unit-stride rows, broadcast over the token grid (stride 0 where they have size 1)
  const at::Tensor cs = cos.contiguous();
  const at::Tensor sn = sin.contiguous();
  at::Tensor* xs[2] = {&q, &k};
  at::Tensor work[2];
  for (int i = 0; i < 2; ++i) work[i] = xs[i]->stride(3) == 1 ? *xs[i] : xs[i]->contiguous();
  // q and k share their token grid (HF's case): one pass, cos/sin widened once per token; else
  // (a broadcast that gives them different grids) one pass each.
  const bool shared = q.size(a) == k.size(a) && q.size(b) == k.size(b);
  const cpu::Isa isa = cpu::selected_isa();
  for (int first = 0; first < 2; first += shared ? 2 : 1) {
    const at::Tensor& g = work[first];
    const at::Tensor wide = cs.unsqueeze(u).expand(g.sizes());
    cpu::RopeParams p;
    p.dt = cpu_dtype(q.scalar_type());
    p.cdt = cpu_dtype(cs.scalar_type());
    p.n0 = g.size(a);
    p.n1 = g.size(b);
    p.nx = shared ? 2 : 1;
    int64_t heads = 0;
    for (int i = 0; i < p.nx; ++i) {
      const at::Tensor& w = work[first + i];
      p.x[i] = {w.data_ptr(), w.stride(a), w.stride(b), w.size(u), w.stride(u)};
      heads += w.size(u);
    }
    p.cos = cs.data_ptr();
    p.sin = sn.data_ptr();
    p.c0 = wide.stride(a);
    p.c1 = wide.stride(b);
    p.rotary_dim = q.size(3);
    p.neox = true;
    if (p.n0 * p.n1 == 0 || heads == 0) continue;
    at::parallel_for(0, p.n0 * p.n1, grain_tokens(heads * p.rotary_dim),
                     [&](int64_t s, int64_t e) { cpu::rope_tokens(isa, p, s, e); });
  }
  for (int i = 0; i < 2; ++i) copy_back(*xs[i], work[i]);
}

void fused_qk_norm_rope_cpu(at::Tensor& qkv, int64_t heads_q, int64_t heads_k, int64_t heads_v,
                            int64_t head_dim, double eps, const at::Tensor& q_weight,
                            const at::Tensor& k_weight, const at::Tensor& cache, bool is_neox,
                            const at::Tensor& position_ids) {
  const char* op = "fused_qk_norm_rope";
  check_on_cpu(op, qkv);
  check_qk_norm_rope_args(qkv, heads_q, heads_k, heads_v, head_dim, q_weight, k_weight, cache,
                          position_ids);
  if (qkv.numel() == 0) return;
  at::Tensor work;
  const Rows rows = writable_rows_of(qkv, work);
  const at::Tensor pos = position_ids.reshape(-1).contiguous();
  const at::Tensor c = cache.stride(1) == 1 ? cache : cache.contiguous();
  check_rows(op, pos.data_ptr<int64_t>(), nullptr, rows.rows, c.size(0));
  const at::Tensor wq = q_weight.to(at::ScalarType::Float).contiguous();
  const at::Tensor wk = k_weight.to(at::ScalarType::Float).contiguous();
  const cpu::Isa isa = cpu::selected_isa();
  const cpu::DType dt = cpu_dtype(qkv.scalar_type());
  const cpu::DType cdt = cpu_dtype(c.scalar_type());
  void* data = work.data_ptr();
  const int64_t stride = rows.stride;
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows.rows, grain_tokens((heads_q + heads_k) * head_dim * 2),
                   [&](int64_t b, int64_t end) {
                     cpu::qk_norm_rope_rows(isa, dt, cdt, data, stride, heads_q, heads_k,
                                            head_dim, e, wq.data_ptr<float>(),
                                            wk.data_ptr<float>(), c.data_ptr(), c.stride(0),
                                            pos.data_ptr<int64_t>(), is_neox, b, end);
                   });
  copy_back(qkv, work);
}

}  // namespace
}  // namespace ircore_vllm_c

// The in-place schemas of the ircore ops (Tensor(a!) for each in-place argument, returning
// nothing: ircore returns those arguments as the outputs).
TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def(
      "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!) key, int head_size, "
      "int rotary_dim, Tensor cos_sin_cache, bool is_neox_style, Tensor? offsets=None, "
      "str cos_sin_format=\"standard\", bool inverse=False, int rope_dim_offset=0) -> ()");
  m.def(
      "rotary_embedding_query_only(Tensor positions, Tensor(a!) query, int head_size, "
      "int rotary_dim, Tensor cos_sin_cache, bool is_neox_style, Tensor? offsets=None, "
      "str cos_sin_format=\"standard\", bool inverse=False, int rope_dim_offset=0) -> ()");
  m.def(
      "rotary_pos_emb(Tensor(a!) q, Tensor(b!) k, Tensor cos, Tensor sin, int unsqueeze_dim=1) "
      "-> ()");
  m.def(
      "fused_qk_norm_rope(Tensor(a!) qkv, int num_heads_q, int num_heads_k, int num_heads_v, "
      "int head_dim, float eps, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, "
      "bool is_neox, Tensor position_ids) -> ()");
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CPU, m) {
  m.impl("rotary_embedding", &ircore_vllm_c::rotary_embedding_cpu);
  m.impl("rotary_embedding_query_only", &ircore_vllm_c::rotary_embedding_query_only_cpu);
  m.impl("rotary_pos_emb", &ircore_vllm_c::rotary_pos_emb_cpu);
  m.impl("fused_qk_norm_rope", &ircore_vllm_c::fused_qk_norm_rope_cpu);
}
