// CUDA kernels of the RoPE ops whose schemas cpu_rope.cpp defines: rotary_embedding,
// rotary_embedding_query_only, rotary_pos_emb (HF form) and fused_qk_norm_rope, all in place.
// Kernels and their launchers only, with no torch header, so nvcc compiles this file in seconds;
// the torch bindings (argument checks, layouts, the dispatcher registration) are
// cuda_rope_ops.cpp, built by the host compiler into the same library.
//
// RoPE: blocks over (token, chunk of heads), threads over (slot, head row), a slot being P
// consecutive rotated pairs. The vector path (every address 16-byte aligned, checked by the
// launcher: rope_vectorizable) moves 16 bytes per access (P = 8 for 16-bit, 4 for fp32
// activations); the scalar path (odd offsets, strides or rotary dims) one element (P = 1). Each
// thread reads its slot's cos/sin once, in the cache's (or HF cos/sin's) own dtype (float32 or
// the activations'), then rotates that slot of several heads, two loaded before either is
// stored; fp32 math, one rounding per output. Few tokens split each token's heads over blocks
// so the grid fills the SMs; many run one block per token. The style and inverse are run-time
// flags; vector/scalar and cache/HF are template flags (4 kernels per dtype pair). Heads are
// head_stride apart and tokens token-stride apart, so views of a qkv buffer and HF's transposed
// (B, H, S, D) q/k are rotated where they lie.
// fused_qk_norm_rope: for head dims where L = head_dim / 2P is a power of two <= 32, L lanes per
// (token, q-or-k head), each holding P pairs in registers (16-byte loads where aligned, else
// element loads in the same order: the same bits), the sum of squares reduced across the L
// lanes; other head dims: one warp per (token, head), lanes strided over the channels. Either
// way a lane normalises and rotates the pairs it read and writes them back itself (in place is
// safe).
// Plain launches on the given stream; each kernel waits on griddepcontrol before touching
// memory, so a later PDL launch mode is safe. Compile-checked for sm_90; the first version of
// these kernels passed its GPU tests on an H200, this rewrite (vector paths, head split) has not
// yet run on a GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cuda_rope.h"
#include "cuda_common.cuh"

namespace ircore_vllm_c {
namespace cuda_rope {

using cuda_common::pdl_launch_dependents;
using cuda_common::pdl_wait;

using cuda_common::Cvt;

// Up to N elements of U moved in aligned chunks of at most 16 bytes (VEC; the launcher has checked
// every address is 16-byte aligned), or one element at a time. Raw words, bit-cast to U.
template <int B>
struct Word;
template <>
struct Word<2> {
  using type = unsigned short;
};
template <>
struct Word<4> {
  using type = unsigned int;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<16> {
  using type = uint4;
};

template <bool VEC, int N, class U>
__device__ __forceinline__ void load_n(const U* p, U* o) {
  if constexpr (VEC) {
    constexpr int C = N * sizeof(U) > 16 ? 16 / static_cast<int>(sizeof(U)) : N;
    using W = typename Word<C * sizeof(U)>::type;
#pragma unroll
    for (int c = 0; c < N; c += C) {
      const W w = *reinterpret_cast<const W*>(p + c);
      memcpy(&o[c], &w, sizeof(W));
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) o[e] = p[e];
  }
}

template <bool VEC, int N, class U>
__device__ __forceinline__ void store_n(U* p, const U* v) {
  if constexpr (VEC) {
    constexpr int C = N * sizeof(U) > 16 ? 16 / static_cast<int>(sizeof(U)) : N;
    using W = typename Word<C * sizeof(U)>::type;
#pragma unroll
    for (int c = 0; c < N; c += C) {
      W w;
      memcpy(&w, &v[c], sizeof(W));
      *reinterpret_cast<W*>(p + c) = w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) p[e] = v[e];
  }
}

// N values of CT (cos or sin) as fp32, times sign.
template <bool VEC, int N, class CT>
__device__ __forceinline__ void load_f32(const CT* __restrict__ p, float sign, float (&o)[N]) {
  CT t[N];
  load_n<VEC, N>(p, t);
#pragma unroll
  for (int e = 0; e < N; ++e) o[e] = sign * Cvt<CT>::f32(t[e]);
}

// Pairs per slot: 16 bytes of activations per access on the vector path, one pair on the scalar.
template <class T, bool VEC>
constexpr int pairs_per_slot() {
  return VEC ? 16 / static_cast<int>(sizeof(T)) : 1;
}

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
  int heads_per_block;  // blockIdx.y covers heads [y * heads_per_block, + heads_per_block)
  bool neox, inverse;
};

// Block (x, y) = (token, chunk of heads); thread (x, y) = (slot, head row). A slot is P
// consecutive pairs: neox channels [p0, p0 + P) and [half + p0, + P), gptj [2 p0, 2 p0 + 2P).
// Each thread reads its slot's cos/sin once into registers, then rotates that slot of every
// blockDim.y-th head of the chunk (q heads first, then k's), two heads per step: loads, fp32
// math, stores; no division past the token's. Read and written by the same thread, so in place
// is safe.
template <class T, class CT, bool VEC, bool HF>
__global__ void __launch_bounds__(128) rope_kernel(const RopeArgs<T, CT> a) {
  using C = Cvt<T>;
  constexpr int P = pairs_per_slot<T, VEC>();
  pdl_wait();
  const int64_t k = blockIdx.x;
  const int64_t i = k / a.n1;
  const int64_t j = k - i * a.n1;
  const CT* __restrict__ cs;
  const CT* __restrict__ sn;
  if constexpr (HF) {
    cs = a.cos + i * a.c0 + j * a.c1;
    sn = a.sin + i * a.c0 + j * a.c1;
  } else {
    const int64_t row = a.pos[k] + (a.off != nullptr ? a.off[k] : 0);
    cs = a.cache + row * a.cache_stride;
    sn = cs + a.rd / 2;
  }
  const float sign = a.inverse ? -1.0f : 1.0f;
  const int half = a.rd / 2;
  const int slots = half / P;
  const int nh0 = a.x[0].heads;
  const int nh = nh0 + (a.nx > 1 ? a.x[1].heads : 0);
  const int h_begin = static_cast<int>(blockIdx.y) * a.heads_per_block;
  const int h_end = min(nh, h_begin + a.heads_per_block);
  // The token's base in each activation (the second's unused when nx == 1).
  T* const base0 = a.x[0].data + i * a.x[0].s0 + j * a.x[0].s1 + a.rot_offset;
  T* const base1 = a.nx > 1 ? a.x[1].data + i * a.x[1].s0 + j * a.x[1].s1 + a.rot_offset : base0;
  for (int s = threadIdx.x; s < slots; s += blockDim.x) {
    const int p0 = s * P;
    // Kept in their own dtype (fewer registers for 16-bit cos/sin), widened per use. HF (neox
    // only): each half has its own cos/sin; a vLLM cache row has one per pair (c2, s2 unused).
    CT c1[P], s1[P], c2[P], s2[P];
    load_n<VEC, P>(cs + p0, c1);
    load_n<VEC, P>(sn + p0, s1);
    if constexpr (HF) {
      load_n<VEC, P>(cs + half + p0, c2);
      load_n<VEC, P>(sn + half + p0, s2);
    }
    const auto head_at = [&](int h) -> T* {
      return h >= nh0 ? base1 + static_cast<int64_t>(h - nh0) * a.x[1].hs
                      : base0 + static_cast<int64_t>(h) * a.x[0].hs;
    };
    // u, v: the first and second element of each of the slot's P pairs.
    const auto load = [&](const T* head, T (&u)[P], T (&v)[P]) {
      if (a.neox) {
        load_n<VEC, P>(head + p0, u);
        load_n<VEC, P>(head + half + p0, v);
      } else {
        T w[2 * P];
        load_n<VEC, 2 * P>(head + 2 * p0, w);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          u[e] = w[2 * e];
          v[e] = w[2 * e + 1];
        }
      }
    };
    const auto rotate_store = [&](T* head, T (&u)[P], T (&v)[P]) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float x1 = C::f32(u[e]);
        const float x2 = C::f32(v[e]);
        const float ca = Cvt<CT>::f32(c1[e]);
        const float sa = sign * Cvt<CT>::f32(s1[e]);
        const float cb = HF ? Cvt<CT>::f32(c2[e]) : ca;
        const float sb = HF ? sign * Cvt<CT>::f32(s2[e]) : sa;
        // Explicit roundings (no contraction left to the compiler): every instantiation (vector
        // or scalar, split or not) gives the same bits, so the path a layout or a token count
        // picks never changes a result (the RoPE ops' batch-invariance claim).
        u[e] = C::of(__fmaf_rn(x1, ca, __fmul_rn(-x2, sa)));
        v[e] = C::of(__fmaf_rn(x2, cb, __fmul_rn(x1, sb)));
      }
      if (a.neox) {
        store_n<VEC, P>(head + p0, u);
        store_n<VEC, P>(head + half + p0, v);
      } else {
        T w[2 * P];
#pragma unroll
        for (int e = 0; e < P; ++e) {
          w[2 * e] = u[e];
          w[2 * e + 1] = v[e];
        }
        store_n<VEC, 2 * P>(head + 2 * p0, w);
      }
    };
    // Two heads per step, both loaded before either is stored (the stores may alias nothing
    // the compiler can prove, so this is what keeps two loads in flight per thread).
    const int step = static_cast<int>(blockDim.y);
    for (int h = h_begin + static_cast<int>(threadIdx.y); h < h_end; h += 2 * step) {
      const bool two = h + step < h_end;
      T* const hd1 = head_at(h);
      T* const hd2 = two ? head_at(h + step) : hd1;
      T u1[P], v1[P], u2[P], v2[P];
      load(hd1, u1, v1);
      if (two) load(hd2, u2, v2);
      rotate_store(hd1, u1, v1);
      if (two) rotate_store(hd2, u2, v2);
    }
  }
  pdl_launch_dependents();
}

// Warp path (head dims the lane-group kernel does not take): one warp per (token, head), lanes
// strided over the channels; the sum of squares reduced across the warp, then each lane
// normalises and rotates its own pairs (read, then written by the same lane: in place is safe).
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

// Lane-group path, for every head_dim with L = head_dim / 2P a power of two <= 32 (P = 16 bytes
// of activations): a group of L lanes per (token, head) (groups never straddle a warp), each lane
// holding P pairs in registers, read with 16-byte loads (VEC: every address aligned, checked by
// the launcher) or element by element (otherwise: the same lanes, order and roundings, so the
// same bits); the sum of squares reduced across the group with shuffles, then normalised,
// weighted and rotated in registers and stored by the lane that loaded them. Which kernel runs
// (this or the warp one) depends on head_dim and the dtype only, never on the token count or a
// pointer: the batch-invariance claim.
template <class T, class CT, bool VEC>
__global__ void __launch_bounds__(128)
    qk_norm_rope_group_kernel(T* __restrict__ qkv, int64_t stride, int64_t rows, int heads_q,
                            int heads_k, int d, int lanes_log2, float eps,
                            const float* __restrict__ wq, const float* __restrict__ wk,
                            const CT* __restrict__ cache, int64_t cache_stride,
                            const int64_t* __restrict__ pos, bool neox) {
  using C = Cvt<T>;
  constexpr int P = pairs_per_slot<T, true>();
  pdl_wait();
  const int lanes = 1 << lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> lanes_log2;
  const int heads = heads_q + heads_k;
  const bool valid = item < rows * heads;
  const int half = d / 2;
  const int p0 = lane * P;
  int64_t r = 0;
  int h = 0;
  T* x = qkv;
  // Channels of the slot's pairs: neox [p0, + P) and [half + p0, + P); gptj [2 p0, + 2P).
  const int o1 = neox ? p0 : 2 * p0;
  const int o2 = neox ? half + p0 : 2 * p0 + P;
  T a[2 * P];
  float ss = 0.0f;
  if (valid) {
    r = item / heads;
    h = static_cast<int>(item - r * heads);
    x = qkv + r * stride + static_cast<int64_t>(h) * d;
    load_n<VEC, P>(x + o1, a);
    load_n<VEC, P>(x + o2, a + P);
#pragma unroll
    for (int e = 0; e < 2 * P; ++e) {
      const float v = C::f32(a[e]);
      ss = fmaf(v, v, ss);
    }
  }
  // Every lane of the warp takes part (invalid groups add zeros among themselves).
  for (int o = lanes >> 1; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (valid) {
    const float inv = rsqrtf(ss / static_cast<float>(d) + eps);
    const float* __restrict__ w = h < heads_q ? wq : wk;
    // Weights from the same channels as a[] (the first P from o1, the rest from o2).
    float wt[2 * P], c[P], s[P];
    load_n<VEC, P>(w + o1, wt);
    load_n<VEC, P>(w + o2, wt + P);
    const CT* __restrict__ cs = cache + pos[r] * cache_stride;
    load_f32<VEC, P>(cs + p0, 1.0f, c);
    load_f32<VEC, P>(cs + half + p0, 1.0f, s);
    // neox: a[e] and a[P + e] are the pair; gptj: a[2e] and a[2e + 1] (constant indices
    // in both branches, so the arrays stay in registers).
    T out[2 * P];
#pragma unroll
    for (int e = 0; e < P; ++e) {
      if (neox) {
        const float x1 = __fmul_rn(__fmul_rn(C::f32(a[e]), inv), wt[e]);
        const float x2 = __fmul_rn(__fmul_rn(C::f32(a[P + e]), inv), wt[P + e]);
        out[e] = C::of(__fmaf_rn(x1, c[e], __fmul_rn(-x2, s[e])));
        out[P + e] = C::of(__fmaf_rn(x2, c[e], __fmul_rn(x1, s[e])));
      } else {
        const float x1 = __fmul_rn(__fmul_rn(C::f32(a[2 * e]), inv), wt[2 * e]);
        const float x2 = __fmul_rn(__fmul_rn(C::f32(a[2 * e + 1]), inv), wt[2 * e + 1]);
        out[2 * e] = C::of(__fmaf_rn(x1, c[e], __fmul_rn(-x2, s[e])));
        out[2 * e + 1] = C::of(__fmaf_rn(x2, c[e], __fmul_rn(x1, s[e])));
      }
    }
    store_n<VEC, P>(x + o1, out);
    store_n<VEC, P>(x + o2, out + P);
  }
  pdl_launch_dependents();
}

constexpr int kBlock = 256;
constexpr int kRopeThreads = 128;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
// A stride (elements) that only matters when its index varies (count > 1) keeps 16-byte alignment.
bool stride16(int64_t elems, size_t size, int64_t count) {
  return count <= 1 || (elems * static_cast<int64_t>(size)) % 16 == 0;
}

// The vector path's conditions: every slot of P pairs starts 16-byte aligned in the activations
// and in cos/sin (P * sizeof(CT) >= 16, so cos/sin offsets by whole slots stay aligned).
template <class T, class CT>
bool rope_vectorizable(const RopeLaunch& l) {
  constexpr int P = pairs_per_slot<T, true>();
  if ((l.rotary_dim / 2) % P != 0) return false;
  if ((l.rot_offset * static_cast<int64_t>(sizeof(T))) % 16 != 0) return false;
  const int64_t n0 = l.tokens / l.n1;
  for (int i = 0; i < l.nx; ++i) {
    const RopeActivation& x = l.x[i];
    if (!aligned16(x.data) || !stride16(x.s0, sizeof(T), n0) || !stride16(x.s1, sizeof(T), l.n1) ||
        !stride16(x.head_stride, sizeof(T), x.heads))
      return false;
  }
  if (l.positions != nullptr) {
    return aligned16(l.cache) && stride16(l.cache_stride, sizeof(CT), 2);
  }
  return aligned16(l.cos) && aligned16(l.sin) && stride16(l.c0, sizeof(CT), n0) &&
         stride16(l.c1, sizeof(CT), l.n1);
}

template <class T, class CT, bool VEC, bool HF>
void rope_launch_v(const RopeLaunch& l, cudaStream_t stream) {
  constexpr int P = pairs_per_slot<T, VEC>();
  RopeArgs<T, CT> a{};
  int64_t heads = 0;
  for (int i = 0; i < l.nx; ++i) {
    a.x[i] = {static_cast<T*>(l.x[i].data), l.x[i].s0, l.x[i].s1, l.x[i].head_stride,
              static_cast<int>(l.x[i].heads)};
    heads += l.x[i].heads;
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
  if (heads == 0) return;  // nothing to rotate (and a grid of no head chunks is no launch)
  // Threads: the slots of one head across x (looping past kRopeThreads), heads across y.
  const int64_t slots = l.rotary_dim / 2 / P;
  const int bx = static_cast<int>(slots < 1 ? 1 : (slots > kRopeThreads ? kRopeThreads : slots));
  const int by = kRopeThreads / bx;
  // Few tokens: one head per thread row, the heads split over blockIdx.y, so the grid fills the
  // SMs; many: one block per token loops over its heads (cos/sin read once per thread).
  const int64_t row_chunks = (heads + by - 1) / by;
  const bool split = l.tokens * row_chunks <= 8192;
  a.heads_per_block = static_cast<int>(split ? by : heads);
  const unsigned chunks = static_cast<unsigned>(split ? row_chunks : 1);
  rope_kernel<T, CT, VEC, HF>
      <<<dim3(static_cast<unsigned>(l.tokens), chunks), dim3(bx, by), 0, stream>>>(a);
}

template <class T, class CT>
void rope_launch_t(const RopeLaunch& l, cudaStream_t stream) {
  const bool vec = rope_vectorizable<T, CT>(l);
  if (l.positions == nullptr) {
    vec ? rope_launch_v<T, CT, true, true>(l, stream)
        : rope_launch_v<T, CT, false, true>(l, stream);
  } else {
    vec ? rope_launch_v<T, CT, true, false>(l, stream)
        : rope_launch_v<T, CT, false, false>(l, stream);
  }
}

// log2 of the lane-group kernel's lanes per head (from head_dim and the dtype only), or -1
// where it does not apply (the warp kernel runs).
template <class T>
int qk_group_lanes_log2(int64_t head_dim) {
  constexpr int P = pairs_per_slot<T, true>();
  const int64_t half = head_dim / 2;
  if (head_dim % 2 != 0 || half % P != 0) return -1;
  const int64_t lanes = half / P;
  if (lanes > 32 || (lanes & (lanes - 1)) != 0) return -1;
  int lg = 0;
  while ((int64_t{1} << lg) < lanes) ++lg;
  return lg;
}

// The lane-group kernel's 16-byte accesses: every pointer aligned and every row stride too
// (whatever the row count, so a token's path never depends on its batch).
template <class T, class CT>
bool qk_vectorizable(const QkNormRopeLaunch& l) {
  return aligned16(l.qkv) && stride16(l.stride, sizeof(T), 2) && aligned16(l.wq) &&
         aligned16(l.wk) && aligned16(l.cache) && stride16(l.cache_stride, sizeof(CT), 2);
}

template <class T, class CT, bool VEC>
void qk_group_launch(const QkNormRopeLaunch& l, int lg, cudaStream_t stream) {
  const int64_t threads = (l.rows * (l.heads_q + l.heads_k)) << lg;
  const int64_t blocks = (threads + kRopeThreads - 1) / kRopeThreads;
  qk_norm_rope_group_kernel<T, CT, VEC><<<static_cast<unsigned>(blocks), kRopeThreads, 0, stream>>>(
      static_cast<T*>(l.qkv), l.stride, l.rows, static_cast<int>(l.heads_q),
      static_cast<int>(l.heads_k), static_cast<int>(l.head_dim), lg, l.eps, l.wq, l.wk,
      static_cast<const CT*>(l.cache), l.cache_stride, l.positions, l.neox);
}

template <class T, class CT>
void qk_launch_t(const QkNormRopeLaunch& l, cudaStream_t stream) {
  const int lg = qk_group_lanes_log2<T>(l.head_dim);
  if (lg >= 0) {
    qk_vectorizable<T, CT>(l) ? qk_group_launch<T, CT, true>(l, lg, stream)
                              : qk_group_launch<T, CT, false>(l, lg, stream);
    return;
  }
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
