// CUDA kernels of the RoPE ops whose schemas cpu_rope.cpp defines (this library is loaded after
// the CPU one): rotary_embedding, rotary_embedding_query_only, rotary_pos_emb (HF form) and
// fused_qk_norm_rope, all in place.
//
// RoPE: one block per token (vLLM's layout), its threads over (activation, head, rotated pair);
// cos/sin read in the cache's (or HF cos/sin's) own dtype, fp32 math, one rounding per output.
// Heads are head_stride apart and tokens token-stride apart, so views of a qkv buffer and HF's
// transposed (B, H, S, D) q/k are rotated where they lie. fused_qk_norm_rope: one warp per
// (token, q-or-k head): the sum of squares reduced across the warp, then each lane normalises
// and rotates its own pairs (read, then written by the same lane: in place is safe).
// Plain launches on the current stream; each kernel waits on griddepcontrol before touching
// memory, so a later PDL launch mode is safe. Compile-checked for sm_90, not yet run on a GPU.
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstdint>
#include <string>

#include "ops_common.h"
#include "rope_common.h"

namespace ircore_vllm_c {
namespace cuda_rope {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <class T>
struct Cvt;
template <>
struct Cvt<float> {
  __device__ __forceinline__ static float f32(float v) { return v; }
  __device__ __forceinline__ static float of(float v) { return v; }
};
template <>
struct Cvt<__half> {
  __device__ __forceinline__ static float f32(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half of(float v) { return __float2half_rn(v); }
};
template <>
struct Cvt<__nv_bfloat16> {
  __device__ __forceinline__ static float f32(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 of(float v) { return __float2bfloat16_rn(v); }
};

// One activation: head h of token (i, j) at data + i * s0 + j * s1 + h * hs.
template <class T>
struct Act {
  T* data;
  int64_t s0, s1, hs;
  int heads;
};

template <class T, class CT>
struct RopeArgs {
  Act<T> x[2];
  int nx;
  int64_t n1;  // tokens are (k / n1, k % n1)
  // cache mode (pos != nullptr): row pos[k] (+ off[k]) of cache; HF mode: cos/sin + i*c0 + j*c1
  const int64_t* pos;
  const int64_t* off;
  const CT* cache;
  int64_t cache_stride;
  const CT* cos;
  const CT* sin;
  int64_t c0, c1;
  int rd, rot_offset;
  bool inverse;
};

// Rotates pair p of one head: neox (p, p + half) or gptj (2p, 2p + 1).
template <class T, class CT, bool NEOX>
__device__ __forceinline__ void rotate_pair(T* head, int p, int half, const CT* cs, const CT* sn,
                                            bool hf, float sign) {
  using C = Cvt<T>;
  using CC = Cvt<CT>;
  const int i0 = NEOX ? p : 2 * p;
  const int i1 = NEOX ? p + half : 2 * p + 1;
  const float x1 = C::f32(head[i0]);
  const float x2 = C::f32(head[i1]);
  // HF (neox only): each half has its own cos/sin; a vLLM cache row has one per pair.
  const float c1 = CC::f32(cs[p]);
  const float s1 = sign * CC::f32(sn[p]);
  const float c2 = hf ? CC::f32(cs[half + p]) : c1;
  const float s2 = hf ? CC::f32(sn[half + p]) : s1;
  head[i0] = C::of(x1 * c1 - x2 * s1);
  head[i1] = C::of(x2 * c2 + x1 * s2);
}

template <class T, class CT, bool NEOX>
__global__ void __launch_bounds__(256) rope_kernel(const RopeArgs<T, CT> a) {
  pdl_wait();
  const int64_t k = blockIdx.x;
  const int64_t i = k / a.n1;
  const int64_t j = k - i * a.n1;
  const bool hf = a.pos == nullptr;
  const CT* cs;
  const CT* sn;
  if (hf) {
    cs = a.cos + i * a.c0 + j * a.c1;
    sn = a.sin + i * a.c0 + j * a.c1;
  } else {
    const int64_t row = a.pos[k] + (a.off != nullptr ? a.off[k] : 0);
    cs = a.cache + row * a.cache_stride;
    sn = cs + a.rd / 2;
  }
  const float sign = a.inverse ? -1.0f : 1.0f;
  const int half = a.rd / 2;
  const int n0 = a.x[0].heads * half;
  const int total = n0 + (a.nx > 1 ? a.x[1].heads * half : 0);
  for (int t = threadIdx.x; t < total; t += blockDim.x) {
    const int which = t < n0 ? 0 : 1;
    const int r = t - which * n0;
    const int h = r / half;
    const int p = r - h * half;
    const Act<T>& x = a.x[which];
    T* head = x.data + i * x.s0 + j * x.s1 + h * x.hs + a.rot_offset;
    rotate_pair<T, CT, NEOX>(head, p, half, cs, sn, hf, sign);
  }
  pdl_launch_dependents();
}

template <class T, class CT, bool NEOX>
__global__ void __launch_bounds__(256)
    qk_norm_rope_kernel(T* __restrict__ qkv, int64_t stride, int64_t rows, int heads_q,
                        int heads_k, int d, float eps, const float* __restrict__ wq,
                        const float* __restrict__ wk, const CT* __restrict__ cache,
                        int64_t cache_stride, const int64_t* __restrict__ pos) {
  using C = Cvt<T>;
  using CC = Cvt<CT>;
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int heads = heads_q + heads_k;
  if (item < rows * heads) {
    const int64_t r = item / heads;
    const int h = static_cast<int>(item - r * heads);
    T* x = qkv + r * stride + static_cast<int64_t>(h) * d;
    const float* w = h < heads_q ? wq : wk;
    float ss = 0.0f;
    for (int c = lane; c < d; c += 32) {
      const float v = C::f32(x[c]);
      ss = fmaf(v, v, ss);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
    const int half = d / 2;
    const CT* cs = cache + pos[r] * cache_stride;
    for (int p = lane; p < half; p += 32) {
      const int i0 = NEOX ? p : 2 * p;
      const int i1 = NEOX ? p + half : 2 * p + 1;
      const float x1 = C::f32(x[i0]) * inv * w[i0];
      const float x2 = C::f32(x[i1]) * inv * w[i1];
      const float c = CC::f32(cs[p]);
      const float s = CC::f32(cs[half + p]);
      x[i0] = C::of(x1 * c - x2 * s);
      x[i1] = C::of(x2 * c + x1 * s);
    }
  }
  pdl_launch_dependents();
}

#define IRC_ROPE_CUDA_TYPE(st, NAME, ...) \
  switch (st) {                           \
    case at::ScalarType::Half: {          \
      using NAME = __half;                \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
    case at::ScalarType::BFloat16: {      \
      using NAME = __nv_bfloat16;         \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
    default: {                            \
      using NAME = float;                 \
      __VA_ARGS__;                        \
      break;                              \
    }                                     \
  }

constexpr int kBlock = 256;

// Threads per token block: the pairs of every head, rounded up to a warp, at most kBlock.
int block_for(int64_t pairs) {
  const int64_t t = (pairs + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > kBlock ? kBlock : t));
}

void check_on_cuda(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cuda(), "ircore_vllm_c.", op, ": expected CUDA tensors, got ",
              x.device());
}

// One launch of rope_kernel over `tokens` tokens (grid.x: up to 2^31 - 1).
template <class T, class CT>
void launch_rope(const RopeArgs<T, CT>& a, bool neox, int64_t tokens, int64_t pairs,
                 cudaStream_t stream) {
  TORCH_CHECK(tokens < (int64_t{1} << 31) - 1 && pairs < (int64_t{1} << 31) - 1,
              "ircore_vllm_c: too many tokens or heads for one launch");
  const dim3 grid(static_cast<unsigned>(tokens));
  if (neox) {
    rope_kernel<T, CT, true><<<grid, block_for(pairs), 0, stream>>>(a);
  } else {
    rope_kernel<T, CT, false><<<grid, block_for(pairs), 0, stream>>>(a);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct Work {
  at::Tensor t;
  TokenHeads view;
};

Work token_heads_work(const at::Tensor& x, int64_t tokens, int64_t head_size) {
  if (auto v = as_token_heads(x, tokens, head_size)) return {x, *v};
  at::Tensor c = x.contiguous();
  return {c, *as_token_heads(c, tokens, head_size)};
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
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(query.get_device()).stream();
  const at::Tensor pos = positions.reshape(-1).contiguous();
  const at::Tensor off = with_offsets ? offsets->reshape(-1).contiguous() : at::Tensor();
  const at::Tensor c = cache.stride(1) == 1 ? cache : cache.contiguous();
  at::Tensor* xs[2] = {&query, key};
  Work work[2];
  const int nx = key ? 2 : 1;
  int64_t pairs = 0;
  for (int i = 0; i < nx; ++i) {
    work[i] = token_heads_work(*xs[i], tokens, head_size);
    pairs += work[i].view.heads * (rotary_dim / 2);
  }
  IRC_ROPE_CUDA_TYPE(query.scalar_type(), T, IRC_ROPE_CUDA_TYPE(c.scalar_type(), CT, {
    RopeArgs<T, CT> a{};
    for (int i = 0; i < nx; ++i) {
      a.x[i] = {static_cast<T*>(work[i].t.data_ptr()), work[i].view.token_stride, 0,
                work[i].view.head_stride, static_cast<int>(work[i].view.heads)};
    }
    a.nx = nx;
    a.n1 = 1;
    a.pos = pos.data_ptr<int64_t>();
    a.off = with_offsets ? off.data_ptr<int64_t>() : nullptr;
    a.cache = static_cast<const CT*>(c.data_ptr());
    a.cache_stride = c.stride(0);
    a.rd = static_cast<int>(rotary_dim);
    a.rot_offset = static_cast<int>(rope_dim_offset);
    a.inverse = inverse;
    launch_rope(a, neox, tokens, pairs, stream);
  }))
  for (int i = 0; i < nx; ++i) {
    if (!work[i].t.is_same(*xs[i])) xs[i]->copy_(work[i].t);
  }
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
  const bool shared = q.size(ax) == k.size(ax) && q.size(bx) == k.size(bx);
  const int64_t d = q.size(3);
  for (int first = 0; first < 2; first += shared ? 2 : 1) {
    const at::Tensor& g = work[first];
    const at::Tensor wide = cs.unsqueeze(u).expand(g.sizes());
    const int nx = shared ? 2 : 1;
    const int64_t tokens = g.size(ax) * g.size(bx);
    int64_t pairs = 0;
    for (int i = 0; i < nx; ++i) pairs += work[first + i].size(u) * (d / 2);
    if (tokens == 0 || pairs == 0) continue;
    IRC_ROPE_CUDA_TYPE(q.scalar_type(), T, IRC_ROPE_CUDA_TYPE(cs.scalar_type(), CT, {
      RopeArgs<T, CT> a{};
      for (int i = 0; i < nx; ++i) {
        const at::Tensor& w = work[first + i];
        a.x[i] = {static_cast<T*>(w.data_ptr()), w.stride(ax), w.stride(bx), w.stride(u),
                  static_cast<int>(w.size(u))};
      }
      a.nx = nx;
      a.n1 = g.size(bx);
      a.cos = static_cast<const CT*>(cs.data_ptr());
      a.sin = static_cast<const CT*>(sn.data_ptr());
      a.c0 = wide.stride(ax);
      a.c1 = wide.stride(bx);
      a.rd = static_cast<int>(d);
      launch_rope(a, true, tokens, pairs, stream);
    }))
  }
  for (int i = 0; i < 2; ++i) {
    if (!work[i].is_same(*xs[i])) xs[i]->copy_(work[i]);
  }
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
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(qkv.get_device()).stream();
  at::Tensor work = qkv;
  auto rows = as_writable_rows(work);
  if (!rows) {
    work = qkv.contiguous();
    rows = as_rows(work);
  }
  const at::Tensor pos = position_ids.reshape(-1).contiguous();
  const at::Tensor c = cache.stride(1) == 1 ? cache : cache.contiguous();
  const at::Tensor wq = q_weight.to(at::ScalarType::Float).contiguous();
  const at::Tensor wk = k_weight.to(at::ScalarType::Float).contiguous();
  const int64_t items = rows->rows * (heads_q + heads_k);
  const int64_t blocks = (items * 32 + kBlock - 1) / kBlock;
  TORCH_CHECK(blocks < (int64_t{1} << 31) - 1, "ircore_vllm_c.fused_qk_norm_rope: too many rows");
  IRC_ROPE_CUDA_TYPE(qkv.scalar_type(), T, IRC_ROPE_CUDA_TYPE(c.scalar_type(), CT, {
    auto kernel = is_neox ? qk_norm_rope_kernel<T, CT, true> : qk_norm_rope_kernel<T, CT, false>;
    kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
        static_cast<T*>(work.data_ptr()), rows->stride, rows->rows, static_cast<int>(heads_q),
        static_cast<int>(heads_k), static_cast<int>(head_dim), static_cast<float>(eps),
        wq.data_ptr<float>(), wk.data_ptr<float>(), static_cast<const CT*>(c.data_ptr()),
        c.stride(0), pos.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }))
  if (!work.is_same(qkv)) qkv.copy_(work);
}

}  // namespace cuda_rope
}  // namespace ircore_vllm_c

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) {
  m.impl("rotary_embedding", &ircore_vllm_c::cuda_rope::rotary_embedding_cuda);
  m.impl("rotary_embedding_query_only", &ircore_vllm_c::cuda_rope::rotary_embedding_query_only_cuda);
  m.impl("rotary_pos_emb", &ircore_vllm_c::cuda_rope::rotary_pos_emb_cuda);
  m.impl("fused_qk_norm_rope", &ircore_vllm_c::cuda_rope::fused_qk_norm_rope_cuda);
}
