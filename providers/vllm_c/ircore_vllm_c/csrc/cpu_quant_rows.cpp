// The fp8 quantisation loops of the CPU quant kernels (bindings: cpu_quant_kernels.cpp): a
// portable copy and an AVX2 copy, chosen by the Isa the other CPU kernels use. No torch header
// here (cpu_kernels.h says why). The fp8 encodings are computed branch-free from the fp32 bits:
// round to nearest even at 3 mantissa bits (normal) or at the subnormal step (2^-9 e4m3fn,
// 2^-10 e4m3fnuz) by an fp32 add; NaN -> 0x7f | sign (e4m3fn), 0x80 (e4m3fnuz, which has no -0).
// The values are clamped to +-fp8_max first, so no finite value overflows.
#include "cpu_quant_rows.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define IRC_QUANT_X86 1
#endif

namespace ircore_vllm_c {
namespace cpu {
namespace {

inline uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
inline float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

inline float half_to_f32(uint16_t h) {  // IEEE binary16 -> fp32, exact
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) {  // zero or subnormal: m * 2^-24
    const float v = static_cast<float>(m) * float_of(0x33800000u);
    return float_of(sign | bits_of(v));
  }
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

inline float load1(DType dt, const void* y, int64_t i) {
  switch (dt) {
    case DType::kHalf:
      return half_to_f32(static_cast<const uint16_t*>(y)[i]);
    case DType::kBFloat16:
      return float_of(static_cast<uint32_t>(static_cast<const uint16_t*>(y)[i]) << 16);
    default:
      return static_cast<const float*>(y)[i];
  }
}

inline uint8_t fp8_of(float v, float m, bool fnuz) {
  const float c = v != v ? v : std::min(std::max(v, -m), m);
  const uint32_t b = bits_of(c);
  const uint32_t sign = (b >> 24) & 0x80u;
  const uint32_t a = b & 0x7fffffffu;
  const uint32_t bias = fnuz ? 119u : 120u;
  const uint32_t nrm = ((a + ((a >> 20) & 1u) + 0x7ffffu) >> 20) - (bias << 3);
  const float magic = fnuz ? 8192.0f : 16384.0f;
  const uint32_t sub = bits_of(float_of(a) + magic) - bits_of(magic);
  uint32_t r = a < ((bias + 1u) << 23) ? sub : nrm;
  if (fnuz) return static_cast<uint8_t>(a > 0x7f800000u ? 0x80u : (r == 0 ? 0u : r | sign));
  return static_cast<uint8_t>((a > 0x7f800000u ? 0x7fu : r) | sign);
}

uint32_t amax_scalar(DType dt, const void* y, int64_t n) {
  uint32_t r = 0;
  for (int64_t i = 0; i < n; ++i) r = std::max(r, bits_of(load1(dt, y, i)) & 0x7fffffffu);
  return r;
}

void quant_scalar(DType dt, bool fnuz, const void* y, int64_t n, float s, bool divide,
                  const float* inv, float m, uint8_t* q, int64_t begin) {
  for (int64_t i = begin; i < n; ++i) {
    const float v = load1(dt, y, i);
    q[i] = fp8_of(inv ? v * inv[i] : (divide ? v / s : v * s), m, fnuz);
  }
}

#ifdef IRC_QUANT_X86
#define ISA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ISA_AVX2_INLINE ISA_AVX2 __attribute__((always_inline)) inline

ISA_AVX2_INLINE __m256 load8(DType dt, const void* y, int64_t i) {
  switch (dt) {
    case DType::kHalf:
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(y) + i)));
    case DType::kBFloat16:
      return _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(
              reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(y) + i))),
          16));
    default:
      return _mm256_loadu_ps(static_cast<const float*>(y) + i);
  }
}

ISA_AVX2 uint32_t amax_avx2(DType dt, const void* y, int64_t n) {
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_max_epu32(acc, _mm256_and_si256(_mm256_castps_si256(load8(dt, y, i)), absmask));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc);
  uint32_t r = 0;
  for (int j = 0; j < 8; ++j) r = std::max(r, lanes[j]);
  for (; i < n; ++i) r = std::max(r, bits_of(load1(dt, y, i)) & 0x7fffffffu);
  return r;
}

// 8 clamped-or-NaN floats -> 8 fp8 bytes at q.
template <bool Fnuz>
ISA_AVX2_INLINE void store8(__m256 v, __m256 m, uint8_t* q) {
  const __m256 c = _mm256_blendv_ps(_mm256_min_ps(_mm256_max_ps(v, -m), m), v,
                                    _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i b = _mm256_castps_si256(c);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(b, 24), _mm256_set1_epi32(0x80));
  const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
  constexpr int bias = Fnuz ? 119 : 120;
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
  const __m256i nrm = _mm256_sub_epi32(
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, lsb), _mm256_set1_epi32(0x7ffff)), 20),
      _mm256_set1_epi32(bias << 3));
  const __m256 magic = _mm256_set1_ps(Fnuz ? 8192.0f : 16384.0f);
  const __m256i sub = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), _mm256_castps_si256(magic));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((bias + 1) << 23), a);
  __m256i r = _mm256_blendv_epi8(nrm, sub, is_sub);
  const __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  if constexpr (Fnuz) {
    const __m256i zero = _mm256_cmpeq_epi32(r, _mm256_setzero_si256());
    r = _mm256_or_si256(r, _mm256_andnot_si256(zero, sign));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x80), is_nan);
  } else {
    r = _mm256_or_si256(_mm256_blendv_epi8(r, _mm256_set1_epi32(0x7f), is_nan), sign);
  }
  const __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(q), _mm_packus_epi16(p16, p16));
}

template <bool Fnuz>
ISA_AVX2 void quant_avx2(DType dt, const void* y, int64_t n, float s, bool divide,
                         const float* inv, float fm, uint8_t* q) {
  const __m256 m = _mm256_set1_ps(fm);
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  if (inv != nullptr) {
    for (; i + 8 <= n; i += 8) {
      store8<Fnuz>(_mm256_mul_ps(load8(dt, y, i), _mm256_loadu_ps(inv + i)), m, q + i);
    }
  } else if (divide) {
    for (; i + 8 <= n; i += 8) store8<Fnuz>(_mm256_div_ps(load8(dt, y, i), sv), m, q + i);
  } else {
    for (; i + 8 <= n; i += 8) store8<Fnuz>(_mm256_mul_ps(load8(dt, y, i), sv), m, q + i);
  }
  quant_scalar(dt, Fnuz, y, n, s, divide, inv, fm, q, i);
}
#endif

}  // namespace

uint32_t quant_amax_bits(Isa isa, DType dt, const void* y, int64_t n) {
#ifdef IRC_QUANT_X86
  if (isa != Isa::kScalar) return amax_avx2(dt, y, n);
#endif
  return amax_scalar(dt, y, n);
}

void quant_fp8(Isa isa, DType dt, bool fnuz, const void* y, int64_t n, float s, bool divide,
               const float* inv, float fp8_max, uint8_t* q) {
#ifdef IRC_QUANT_X86
  if (isa != Isa::kScalar) {
    if (fnuz) return quant_avx2<true>(dt, y, n, s, divide, inv, fp8_max, q);
    return quant_avx2<false>(dt, y, n, s, divide, inv, fp8_max, q);
  }
#endif
  quant_scalar(dt, fnuz, y, n, s, divide, inv, fp8_max, q, 0);
}

}  // namespace cpu
}  // namespace ircore_vllm_c
