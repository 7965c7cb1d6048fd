// CUDA bindings of the RoPE ops (schemas in cpu_rope.cpp): argument checks and layouts shared
// with the CPU (rope_checks.cpp), then one launch of a kernel in cuda_rope.cu on the current
// stream. Built by the host C++ compiler into the CUDA library (torch's CUDA headers here, none
// in the .cu). Activations whose token dims do not collapse to one stride run on a contiguous
// copy written back at the end; positions are not checked against the cache (that needs a host
// sync: as vLLM's kernel).
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <string>

#include "cuda_rope.h"
#include "ops_common.h"
#include "rope_common.h"

namespace ircore_vllm_c {
namespace cuda_rope {
namespace {

RopeDType rope_dtype(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Half:
      return RopeDType::kHalf;
    case at::ScalarType::BFloat16:
      return RopeDType::kBFloat16;
    default:
      return RopeDType::kFloat;
  }
}

void check_on_cuda(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cuda(), "ircore_vllm_c.", op, ": expected CUDA tensors, got ",
              x.device());
}

void check_launch_sizes(int64_t tokens, int64_t pairs) {
  TORCH_CHECK(tokens < (int64_t{1} << 31) - 1 && pairs < (int64_t{1} << 31) - 1,
              "ircore_vllm_c: too many tokens or heads for one launch");
}

void rope_cuda(const char* op, const at::Tensor& positions, at::Tensor& query, at::Tensor* key,
               int64_t head_size, int64_t rotary_dim, const at::Tensor& cache, bool neox,
               const std::optional<at::Tensor>& offsets, const std::string& format, bool inverse,
               int64_t rope_dim_offset) {
  check_on_cuda(op, query);
  const at::Tensor no_key;
  const bool with_offsets = check_rope_args(op, positions, query, key ? *key : no_key, head_size,
                                            rotary_dim, cache, offsets, format, rope_dim_offset);
  const int64_t tokens = positions.numel();
  if (tokens == 0) return;
  const c10::cuda::CUDAGuard guard(query.device());
  const at::Tensor pos = positions.reshape(-1).contiguous();
  const at::Tensor off = with_offsets ? offsets->reshape(-1).contiguous() : at::Tensor();
  const at::Tensor c = cache.stride(1) == 1 ? cache : cache.contiguous();
  at::Tensor* xs[2] = {&query, key};
  TokenHeadsWork work[2];
  RopeLaunch l{};
  l.dtype = rope_dtype(query.scalar_type());
  l.cache_fp32 = c.scalar_type() == at::ScalarType::Float;
  l.nx = key ? 2 : 1;
  for (int i = 0; i < l.nx; ++i) {
    work[i] = token_heads_work(*xs[i], tokens, head_size);
    l.x[i] = {work[i].t.data_ptr(), work[i].view.token_stride, 0, work[i].view.head_stride,
              work[i].view.heads};
    l.pairs += work[i].view.heads * (rotary_dim / 2);
  }
  l.tokens = tokens;
  l.n1 = 1;
  l.positions = pos.data_ptr<int64_t>();
  l.offsets = with_offsets ? off.data_ptr<int64_t>() : nullptr;
  l.cache = c.data_ptr();
  l.cache_stride = c.stride(0);
  l.rotary_dim = rotary_dim;
  l.rot_offset = rope_dim_offset;
  l.neox = neox;
  l.inverse = inverse;
  check_launch_sizes(l.tokens, l.pairs);
  C10_CUDA_CHECK(launch_rope(l, c10::cuda::getCurrentCUDAStream(query.get_device()).stream()));
  for (int i = 0; i < l.nx; ++i) copy_back(*xs[i], work[i].t);
}

void rotary_embedding_cuda(const at::Tensor& positions, at::Tensor& query, at::Tensor& key,
                           int64_t head_size, int64_t rotary_dim, const at::Tensor& cache,
                           bool is_neox_style, const std::optional<at::Tensor>& offsets,
                           const std::string& format, bool inverse, int64_t rope_dim_offset) {
  rope_cuda("rotary_embedding", positions, query, &key, head_size, rotary_dim, cache,
            is_neox_style, offsets, format, inverse, rope_dim_offset);
}

void rotary_embedding_query_only_cuda(const at::Tensor& positions, at::Tensor& query,
                                      int64_t head_size, int64_t rotary_dim,
                                      const at::Tensor& cache, bool is_neox_style,
                                      const std::optional<at::Tensor>& offsets,
                                      const std::string& format, bool inverse,
                                      int64_t rope_dim_offset) {
  rope_cuda("rotary_embedding_query_only", positions, query, nullptr, head_size, rotary_dim,
            cache, is_neox_style, offsets, format, inverse, rope_dim_offset);
}

void rotary_pos_emb_cuda(at::Tensor& q, at::Tensor& k, const at::Tensor& cos,
                         const at::Tensor& sin, int64_t unsqueeze_dim) {
  check_on_cuda("rotary_pos_emb", q);
  const int64_t u = check_pos_emb_args(q, k, cos, sin, unsqueeze_dim);
  int64_t ax = 0, bx = 0;
  token_axes(u, ax, bx);
  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  const at::Tensor cs = cos.contiguous();
  const at::Tensor sn = sin.contiguous();
  at::Tensor* xs[2] = {&q, &k};
  at::Tensor work[2];
  for (int i = 0; i < 2; ++i) work[i] = xs[i]->stride(3) == 1 ? *xs[i] : xs[i]->contiguous();
  // q and k share their token grid (HF's case): one launch; else one each.
  const bool shared = q.size(ax) == k.size(ax) && q.size(bx) == k.size(bx);
  const int64_t d = q.size(3);
  for (int first = 0; first < 2; first += shared ? 2 : 1) {
    const at::Tensor& g = work[first];
    const at::Tensor wide = cs.unsqueeze(u).expand(g.sizes());
    RopeLaunch l{};
    l.dtype = rope_dtype(q.scalar_type());
    l.cache_fp32 = cs.scalar_type() == at::ScalarType::Float;
    l.nx = shared ? 2 : 1;
    for (int i = 0; i < l.nx; ++i) {
      const at::Tensor& w = work[first + i];
      l.x[i] = {w.data_ptr(), w.stride(ax), w.stride(bx), w.stride(u), w.size(u)};
      l.pairs += w.size(u) * (d / 2);
    }
    l.tokens = g.size(ax) * g.size(bx);
    l.n1 = g.size(bx);
    l.cos = cs.data_ptr();
    l.sin = sn.data_ptr();
    l.c0 = wide.stride(ax);
    l.c1 = wide.stride(bx);
    l.rotary_dim = d;
    l.neox = true;
    if (l.tokens == 0 || l.pairs == 0) continue;
    check_launch_sizes(l.tokens, l.pairs);
    C10_CUDA_CHECK(launch_rope(l, stream));
  }
  for (int i = 0; i < 2; ++i) copy_back(*xs[i], work[i]);
}

void fused_qk_norm_rope_cuda(at::Tensor& qkv, int64_t heads_q, int64_t heads_k, int64_t heads_v,
                             int64_t head_dim, double eps, const at::Tensor& q_weight,
                             const at::Tensor& k_weight, const at::Tensor& cache, bool is_neox,
                             const at::Tensor& position_ids) {
  const char* op = "fused_qk_norm_rope";
  check_on_cuda(op, qkv);
  check_qk_norm_rope_args(qkv, heads_q, heads_k, heads_v, head_dim, q_weight, k_weight, cache,
                          position_ids);
  if (qkv.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(qkv.device());
  at::Tensor work;
  const Rows rows = writable_rows_of(qkv, work);
  const at::Tensor pos = position_ids.reshape(-1).contiguous();
  const at::Tensor c = cache.stride(1) == 1 ? cache : cache.contiguous();
  const at::Tensor wq = q_weight.to(at::ScalarType::Float).contiguous();
  const at::Tensor wk = k_weight.to(at::ScalarType::Float).contiguous();
  QkNormRopeLaunch l{};
  l.dtype = rope_dtype(qkv.scalar_type());
  l.cache_fp32 = c.scalar_type() == at::ScalarType::Float;
  l.qkv = work.data_ptr();
  l.stride = rows.stride;
  l.rows = rows.rows;
  l.heads_q = heads_q;
  l.heads_k = heads_k;
  l.head_dim = head_dim;
  l.eps = static_cast<float>(eps);
  l.wq = wq.data_ptr<float>();
  l.wk = wk.data_ptr<float>();
  l.cache = c.data_ptr();
  l.cache_stride = c.stride(0);
  l.positions = pos.data_ptr<int64_t>();
  l.neox = is_neox;
  TORCH_CHECK(l.rows * (heads_q + heads_k) * 32 / 128 < (int64_t{1} << 31) - 1,
              "ircore_vllm_c.fused_qk_norm_rope: too many rows for one launch");
  C10_CUDA_CHECK(launch_qk_norm_rope(l, c10::cuda::getCurrentCUDAStream(qkv.get_device()).stream()));
  copy_back(qkv, work);
}

}  // namespace
}  // namespace cuda_rope
}  // namespace ircore_vllm_c

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) {
  m.impl("rotary_embedding", &ircore_vllm_c::cuda_rope::rotary_embedding_cuda);
  m.impl("rotary_embedding_query_only", &ircore_vllm_c::cuda_rope::rotary_embedding_query_only_cuda);
  m.impl("rotary_pos_emb", &ircore_vllm_c::cuda_rope::rotary_pos_emb_cuda);
  m.impl("fused_qk_norm_rope", &ircore_vllm_c::cuda_rope::fused_qk_norm_rope_cuda);
}
