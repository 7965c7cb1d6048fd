// CPU RoPE kernels: one copy per ISA (scalar, AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ), chosen at run
// time by the same Isa as the other CPU kernels. No torch header here (see cpu_kernels.h). The
// vector primitives are the few RoPE needs, kept in this file so that it builds on its own.
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_rope.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define IRC_ROPE_X86 1
#endif

namespace ircore_vllm_c {
namespace cpu {
namespace rope {

struct f16 {
  uint16_t x;
};
struct bf16 {
  uint16_t x;
};

inline float bits_f32(uint32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof(f));
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, sizeof(w));
  return w;
}
// IEEE half <-> float, round to nearest even (as c10::Half).
inline float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
  return bits_f32(sign | (two_w < (1u << 27) ? f32_bits(denormalized) : f32_bits(normalized)));
}
inline uint16_t float_to_half(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_f32((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
inline float bf16_to_float(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = f32_bits(f);
  return static_cast<uint16_t>((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);
}

inline float to_f32(float v) { return v; }
inline float to_f32(f16 v) { return half_to_float(v.x); }
inline float to_f32(bf16 v) { return bf16_to_float(v.x); }
template <class T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline f16 from_f32<f16>(float v) {
  return f16{float_to_half(v)};
}
template <>
inline bf16 from_f32<bf16>(float v) {
  return bf16{float_to_bf16(v)};
}

// ---------------------------------------------------------------------------------------------
namespace scalar {
#define ISA_FN
#define ISA_INLINE inline
using V = float;
constexpr int W = 1;
ISA_INLINE V vzero() { return 0.0f; }
ISA_INLINE V vset1(float a) { return a; }
ISA_INLINE V vadd(V a, V b) { return a + b; }
ISA_INLINE V vmul(V a, V b) { return a * b; }
ISA_INLINE V vfma(V a, V b, V c) { return std::fma(a, b, c); }
ISA_INLINE V vfms(V a, V b, V c) { return std::fma(a, b, -c); }
ISA_INLINE float vhsum(V a) { return a; }
ISA_INLINE V vswap_pairs(V a) { return a; }  // unused: W == 1
template <class T>
struct L {
  static V load(const T* p) { return to_f32(*p); }
  static void store(T* p, V v) { *p = from_f32<T>(v); }
};
#include "cpu_rope_isa.inc"
#undef ISA_FN
#undef ISA_INLINE
}  // namespace scalar

#ifdef IRC_ROPE_X86
// ---------------------------------------------------------------------------------------------
namespace avx2 {
#define ISA_FN __attribute__((target("avx2,fma,f16c")))
#define ISA_INLINE ISA_FN __attribute__((always_inline)) inline
using V = __m256;
constexpr int W = 8;
ISA_INLINE V vzero() { return _mm256_setzero_ps(); }
ISA_INLINE V vset1(float a) { return _mm256_set1_ps(a); }
ISA_INLINE V vadd(V a, V b) { return _mm256_add_ps(a, b); }
ISA_INLINE V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
ISA_INLINE V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
ISA_INLINE V vfms(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }
ISA_INLINE V vswap_pairs(V a) { return _mm256_permute_ps(a, 0xB1); }
ISA_INLINE float vhsum(V a) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  return _mm_cvtss_f32(_mm_add_ss(s, sh));
}
template <class T>
struct L;
template <>
struct L<float> {
  ISA_INLINE static V load(const float* p) { return _mm256_loadu_ps(p); }
  ISA_INLINE static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};
template <>
struct L<bf16> {
  ISA_INLINE static V load(const bf16* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  ISA_INLINE static void store(bf16* p, V v) {  // round to nearest even, NaN -> 0x7FC0 (as c10)
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};
template <>
struct L<f16> {
  ISA_INLINE static V load(const f16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  ISA_INLINE static void store(f16* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
#include "cpu_rope_isa.inc"
#undef ISA_FN
#undef ISA_INLINE
}  // namespace avx2

// ---------------------------------------------------------------------------------------------
namespace avx512 {
#define ISA_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define ISA_INLINE ISA_FN __attribute__((always_inline)) inline
using V = __m512;
constexpr int W = 16;
ISA_INLINE V vzero() { return _mm512_setzero_ps(); }
ISA_INLINE V vset1(float a) { return _mm512_set1_ps(a); }
ISA_INLINE V vadd(V a, V b) { return _mm512_add_ps(a, b); }
ISA_INLINE V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
ISA_INLINE V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
ISA_INLINE V vfms(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }
ISA_INLINE V vswap_pairs(V a) { return _mm512_permute_ps(a, 0xB1); }
ISA_INLINE float vhsum(V a) { return _mm512_reduce_add_ps(a); }
template <class T>
struct L;
template <>
struct L<float> {
  ISA_INLINE static V load(const float* p) { return _mm512_loadu_ps(p); }
  ISA_INLINE static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
};
template <>
struct L<bf16> {
  ISA_INLINE static V load(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  ISA_INLINE static void store(bf16* p, V v) {  // round to nearest even, NaN -> 0x7FC0
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }
};
template <>
struct L<f16> {
  ISA_INLINE static V load(const f16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  ISA_INLINE static void store(f16* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
#include "cpu_rope_isa.inc"
#undef ISA_FN
#undef ISA_INLINE
}  // namespace avx512
#endif  // IRC_ROPE_X86

// ---------------------------------------------------------------------------------------------
// Dispatch: ISA (AVX-512 with BF16 runs the plain AVX-512 copy), then the activations' dtype T
// and cos/sin's dtype CT: float32 or T (the bindings refuse others), 5 pairs per ISA.

#define IRC_ROPE_TYPE(dt, NAME, ...) \
  switch (dt) {                      \
    case DType::kHalf: {             \
      using NAME = f16;              \
      __VA_ARGS__;                   \
      break;                         \
    }                                \
    case DType::kBFloat16: {         \
      using NAME = bf16;             \
      __VA_ARGS__;                   \
      break;                         \
    }                                \
    default: {                       \
      using NAME = float;            \
      __VA_ARGS__;                   \
      break;                         \
    }                                \
  }

#define IRC_ROPE_CT(cdt, ...)  \
  if (cdt == DType::kFloat) {    \
    using CT = float;            \
    __VA_ARGS__;                 \
  } else {                       \
    using CT = T;                \
    __VA_ARGS__;                 \
  }

#ifdef IRC_ROPE_X86
#define IRC_ROPE_ISA(isa, ...)             \
  switch (isa) {                           \
    case Isa::kAvx512Bf16:                 \
    case Isa::kAvx512: {                   \
      namespace ns = avx512;               \
      __VA_ARGS__;                         \
      break;                               \
    }                                      \
    case Isa::kAvx2: {                     \
      namespace ns = avx2;                 \
      __VA_ARGS__;                         \
      break;                               \
    }                                      \
    default: {                             \
      namespace ns = scalar;               \
      __VA_ARGS__;                         \
    }                                      \
  }
#else
#define IRC_ROPE_ISA(isa, ...) \
  {                            \
    namespace ns = scalar;     \
    __VA_ARGS__;               \
  }
#endif

}  // namespace rope

void rope_tokens(Isa isa, const RopeParams& p, int64_t begin, int64_t end) {
  using namespace rope;
  IRC_ROPE_ISA(isa, IRC_ROPE_TYPE(p.dt, T, IRC_ROPE_CT(p.cdt, ns::rope_tokens_t<T, CT>(p, begin, end))))
}

void qk_norm_rope_rows(Isa isa, DType dt, DType cdt, void* qkv, int64_t stride, int64_t heads_q,
                       int64_t heads_k, int64_t head_dim, float eps, const float* wq,
                       const float* wk, const void* cache, int64_t cache_stride,
                       const int64_t* positions, bool neox, int64_t begin, int64_t end) {
  using namespace rope;
  IRC_ROPE_ISA(isa, IRC_ROPE_TYPE(dt, T, IRC_ROPE_CT(cdt, ns::qk_norm_rope_rows_t<T, CT>(
                                                        static_cast<T*>(qkv), stride, heads_q,
                                                        heads_k, head_dim, eps, wq, wk,
                                                        static_cast<const CT*>(cache),
                                                        cache_stride, positions, neox, begin,
                                                        end))))
}

}  // namespace cpu
}  // namespace ircore_vllm_c
