// CUDA kernels of the RoPE ops whose schemas cpu_rope.cpp defines: rotary_embedding,
// rotary_embedding_query_only, rotary_pos_emb (HF form) and fused_qk_norm_rope, all in place.
// Kernels and their launchers only, with no torch header, so nvcc compiles this file in seconds;
// the torch bindings (argument checks, layouts, the dispatcher registration) are
// cuda_rope_ops.cpp, built by the host compiler into the same library.
//
// RoPE: one block per token (vLLM's layout), its threads over (activation, head, rotated pair);
// cos/sin read in the cache's (or HF cos/sin's) own dtype (float32 or the activations'), fp32
// math, one rounding per output. The style is a run-time flag (one kernel per dtype pair: 5
// pairs x 2 kernels). Heads are head_stride apart and tokens token-stride apart, so views of a
// qkv buffer and HF's transposed (B, H, S, D) q/k are rotated where they lie.
// fused_qk_norm_rope: one warp per (token, q-or-k head): the sum of squares reduced across the
// warp, then each lane normalises and rotates its own pairs (read, then written by the same
// lane: in place is safe).
// Plain launches on the given stream; each kernel waits on griddepcontrol before touching
// memory, so a later PDL launch mode is safe. Compile-checked for sm_90, not yet run on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_rope.h"

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
  bool neox, inverse;
};

// Rotates pair p of one head: neox (p, p + half) or gptj (2p, 2p + 1).
template <class T, class CT>
__device__ __forceinline__ void rotate_pair(T* head, int p, int half, const CT* cs, const CT* sn,
                                            bool neox, bool hf, float sign) {
  using C = Cvt<T>;
  using CC = Cvt<CT>;
  const int i0 = neox ? p : 2 * p;
  const int i1 = neox ? p + half : 2 * p + 1;
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

template <class T, class CT>
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
    rotate_pair<T, CT>(head, p, half, cs, sn, a.neox, hf, sign);
  }
  pdl_launch_dependents();
}

template <class T, class CT>
__global__ void __launch_bounds__(256)
    qk_norm_rope_kernel(T* __restrict__ qkv, int64_t stride, int64_t rows, int heads_q,
                        int heads_k, int d, float eps, const float* __restrict__ wq,
                        const float* __restrict__ wk, const CT* __restrict__ cache,
                        int64_t cache_stride, const int64_t* __restrict__ pos, bool neox) {
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
      const int i0 = neox ? p : 2 * p;
      const int i1 = neox ? p + half : 2 * p + 1;
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

constexpr int kBlock = 256;

// Threads per token block: the pairs of every head, rounded up to a warp, at most kBlock.
int block_for(int64_t pairs) {
  const int64_t t = (pairs + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : (t > kBlock ? kBlock : t));
}

template <class T, class CT>
void rope_launch_t(const RopeLaunch& l, cudaStream_t stream) {
  RopeArgs<T, CT> a{};
  for (int i = 0; i < l.nx; ++i) {
    a.x[i] = {static_cast<T*>(l.x[i].data), l.x[i].s0, l.x[i].s1, l.x[i].head_stride,
              static_cast<int>(l.x[i].heads)};
  }
  a.nx = l.nx;
  a.n1 = l.n1;
  a.pos = l.positions;
  a.off = l.offsets;
  a.cache = static_cast<const CT*>(l.cache);
  a.cache_stride = l.cache_stride;
  a.cos = static_cast<const CT*>(l.cos);
  a.sin = static_cast<const CT*>(l.sin);
  a.c0 = l.c0;
  a.c1 = l.c1;
  a.rd = static_cast<int>(l.rotary_dim);
  a.rot_offset = static_cast<int>(l.rot_offset);
  a.neox = l.neox;
  a.inverse = l.inverse;
  rope_kernel<T, CT><<<dim3(static_cast<unsigned>(l.tokens)), block_for(l.pairs), 0, stream>>>(a);
}

template <class T, class CT>
void qk_launch_t(const QkNormRopeLaunch& l, cudaStream_t stream) {
  const int64_t blocks = (l.rows * (l.heads_q + l.heads_k) * 32 + kBlock - 1) / kBlock;
  qk_norm_rope_kernel<T, CT><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      static_cast<T*>(l.qkv), l.stride, l.rows, static_cast<int>(l.heads_q),
      static_cast<int>(l.heads_k), static_cast<int>(l.head_dim), l.eps, l.wq, l.wk,
      static_cast<const CT*>(l.cache), l.cache_stride, l.positions, l.neox);
}

// T from the activations' dtype, CT float32 or T (the bindings refuse other pairs).
#define IRC_ROPE_LAUNCH(FN, l, stream)                                                  \
  switch (l.dtype) {                                                                      \
    case RopeDType::kHalf:                                                                \
      l.cache_fp32 ? FN<__half, float>(l, stream) : FN<__half, __half>(l, stream);        \
      break;                                                                              \
    case RopeDType::kBFloat16:                                                            \
      l.cache_fp32 ? FN<__nv_bfloat16, float>(l, stream)                                 \
                   : FN<__nv_bfloat16, __nv_bfloat16>(l, stream);                         \
      break;                                                                              \
    default:                                                                              \
      FN<float, float>(l, stream);                                                        \
  }

cudaError_t launch_rope(const RopeLaunch& l, cudaStream_t stream) {
  IRC_ROPE_LAUNCH(rope_launch_t, l, stream)
  return cudaGetLastError();
}

cudaError_t launch_qk_norm_rope(const QkNormRopeLaunch& l, cudaStream_t stream) {
  IRC_ROPE_LAUNCH(qk_launch_t, l, stream)
  return cudaGetLastError();
}

}  // namespace cuda_rope
}  // namespace ircore_vllm_c
