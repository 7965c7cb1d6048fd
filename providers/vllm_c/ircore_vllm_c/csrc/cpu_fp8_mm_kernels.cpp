// The block-scaled fp8 matmul's loops (cpu_fp8_mm.h says the arithmetic): a portable copy and an
// AVX2+FMA+F16C copy, chosen by the Isa the other CPU kernels use (AVX-512 machines run the AVX2
// copy: eight lanes everywhere, so the bits are the same on every x86-64 CPU). No torch header.
//
// fp8 -> fp32: the portable copy reads a 256-entry table per format; the AVX2 copy moves the
// e4m3 bits into a binary16 (exponent and mantissa shifted into place: e4m3fn's bias 7 and
// e4m3fnuz's 8 are 15 - 8 and 15 - 7, so the half is the value times 2^-8 or 2^-7, subnormals
// included), converts with F16C and multiplies by 256 or 128 (exact), then puts NaN where the
// byte is a NaN encoding (0x7f / 0xff e4m3fn, 0x80 e4m3fnuz).
#include "cpu_fp8_mm.h"

#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define IRC_FP8MM_X86 1
#endif

namespace ircore_vllm_c {
namespace cpu {
namespace {

constexpr int kLanes = 8;
constexpr int kCols = 4;  // weight rows per inner step (one activation row against four)

float fp8_value(uint8_t byte, bool fnuz) {
  const int e = (byte >> 3) & 0xf, m = byte & 7;
  if (fnuz ? byte == 0x80 : (byte & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  const int bias = fnuz ? 8 : 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - bias - 3)
                         : std::ldexp(static_cast<float>(8 + m), e - bias - 3);
  return (byte & 0x80) ? -v : v;
}

struct Tables {
  float v[2][256];
  Tables() {
    for (int b = 0; b < 256; ++b) {
      v[0][b] = fp8_value(static_cast<uint8_t>(b), false);
      v[1][b] = fp8_value(static_cast<uint8_t>(b), true);
    }
  }
};

const float* table(bool fnuz) {
  static const Tables t;
  return t.v[fnuz ? 1 : 0];
}

void widen_scalar(bool fnuz, const uint8_t* src, int64_t k, int64_t bk, float* dst) {
  const float* lut = table(fnuz);
  const int64_t kp = fp8_mm_group_width(bk);
  for (int64_t g0 = 0, d = 0; g0 < k; g0 += bk, d += kp) {
    const int64_t len = k - g0 < bk ? k - g0 : bk;
    for (int64_t i = 0; i < len; ++i) dst[d + i] = lut[src[g0 + i]];
    for (int64_t i = len; i < kp; ++i) dst[d + i] = 0.0f;
  }
}

// Eight lanes in the AVX2 copy's order: the halves added, then their halves, then the pair.
inline float lane_sum(const float* t) {
  const float q0 = t[0] + t[4], q1 = t[1] + t[5], q2 = t[2] + t[6], q3 = t[3] + t[7];
  return (q0 + q2) + (q1 + q3);
}

template <int NR>
void dot_scalar(const float* a, const float* const* b, int64_t groups, int64_t kp,
                const float* sa, int64_t sa1, const float* const* sb, int64_t sb1, float* out) {
  float tot[NR][kLanes] = {};
  for (int64_t g = 0; g < groups; ++g) {
    float part[NR][kLanes] = {};
    const int64_t base = g * kp;
    for (int64_t c = base; c < base + kp; c += kLanes) {
      for (int r = 0; r < NR; ++r) {
        for (int j = 0; j < kLanes; ++j) part[r][j] = std::fmaf(a[c + j], b[r][c + j], part[r][j]);
      }
    }
    const float s = sa[g * sa1];
    for (int r = 0; r < NR; ++r) {
      const float sr = s * sb[r][g * sb1];
      for (int j = 0; j < kLanes; ++j) tot[r][j] = std::fmaf(part[r][j], sr, tot[r][j]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = lane_sum(tot[r]);
}

#ifdef IRC_FP8MM_X86
#define ISA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ISA_AVX2_INLINE ISA_AVX2 __attribute__((always_inline)) inline

template <bool Fnuz>
ISA_AVX2_INLINE __m256 widen8(const uint8_t* p) {
  const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i mag = _mm_and_si128(x, _mm_set1_epi16(0x7f));
  const __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7),
                                 _mm_slli_epi16(_mm_and_si128(x, _mm_set1_epi16(0x80)), 8));
  const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(Fnuz ? 128.0f : 256.0f));
  const __m128i nan16 = Fnuz ? _mm_cmpeq_epi16(x, _mm_set1_epi16(0x80))
                             : _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan16));
  return _mm256_blendv_ps(v, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
}

template <bool Fnuz>
ISA_AVX2 void widen_avx2(const uint8_t* src, int64_t k, int64_t bk, float* dst) {
  const float* lut = table(Fnuz);
  const int64_t kp = fp8_mm_group_width(bk);
  for (int64_t g0 = 0, d = 0; g0 < k; g0 += bk, d += kp) {
    const int64_t len = k - g0 < bk ? k - g0 : bk;
    int64_t i = 0;
    for (; i + kLanes <= len; i += kLanes) {
      _mm256_storeu_ps(dst + d + i, widen8<Fnuz>(src + g0 + i));
    }
    for (; i < len; ++i) dst[d + i] = lut[src[g0 + i]];
    for (; i < kp; ++i) dst[d + i] = 0.0f;
  }
}

ISA_AVX2_INLINE float lane_sum8(__m256 t) {
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));  // q0..q3
  const __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));  // q0 + q2, q1 + q3
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

template <int NR>
ISA_AVX2_INLINE void dot_avx2(const float* a, const float* const* b, int64_t groups, int64_t kp,
                              const float* sa, int64_t sa1, const float* const* sb, int64_t sb1,
                              float* out) {
  __m256 tot[NR];
  for (int r = 0; r < NR; ++r) tot[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256 part[NR];
    for (int r = 0; r < NR; ++r) part[r] = _mm256_setzero_ps();
    const int64_t base = g * kp;
    for (int64_t c = base; c < base + kp; c += kLanes) {
      const __m256 av = _mm256_loadu_ps(a + c);
      for (int r = 0; r < NR; ++r) {
        part[r] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b[r] + c), part[r]);
      }
    }
    const float s = sa[g * sa1];
    for (int r = 0; r < NR; ++r) {
      tot[r] = _mm256_fmadd_ps(part[r], _mm256_set1_ps(s * sb[r][g * sb1]), tot[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = lane_sum8(tot[r]);
}
#endif

// One activation row against kCols weight rows at a time (then one by one): the same per-element
// arithmetic either way. A macro, so that each copy's dot products inline into a function of its
// own target.
#define IRC_FP8MM_TILE(DOT)                                                                  \
  const int64_t kpad = groups * kp;                                                          \
  for (int64_t i = 0; i < m; ++i) {                                                          \
    const float* ar = a + i * kpad;                                                          \
    const float* sar = sa + i * sa0;                                                         \
    float* o = out + i * out_stride;                                                         \
    for (int64_t j = 0; j < nt;) {                                                           \
      const int step = nt - j >= kCols ? kCols : 1;                                          \
      const float* br[kCols];                                                                \
      const float* sbr[kCols];                                                               \
      for (int r = 0; r < step; ++r) {                                                       \
        br[r] = b + (j + r) * kpad;                                                          \
        sbr[r] = sb + ((n0 + j + r) / bn) * sb0;                                             \
      }                                                                                      \
      if (step == kCols) {                                                                   \
        DOT<kCols>(ar, br, groups, kp, sar, sa1, sbr, sb1, o + j);                           \
      } else {                                                                               \
        DOT<1>(ar, br, groups, kp, sar, sa1, sbr, sb1, o + j);                               \
      }                                                                                      \
      j += step;                                                                             \
    }                                                                                        \
  }

void tile_scalar(const float* a, int64_t m, const float* b, int64_t nt, int64_t n0,
                 int64_t groups, int64_t kp, int64_t bn, const float* sa, int64_t sa0,
                 int64_t sa1, const float* sb, int64_t sb0, int64_t sb1, float* out,
                 int64_t out_stride) {
  IRC_FP8MM_TILE(dot_scalar)
}

#ifdef IRC_FP8MM_X86
ISA_AVX2 void tile_avx2(const float* a, int64_t m, const float* b, int64_t nt, int64_t n0,
                        int64_t groups, int64_t kp, int64_t bn, const float* sa, int64_t sa0,
                        int64_t sa1, const float* sb, int64_t sb0, int64_t sb1, float* out,
                        int64_t out_stride) {
  IRC_FP8MM_TILE(dot_avx2)
}
#endif

}  // namespace

void fp8_widen_row(Isa isa, bool fnuz, const uint8_t* src, int64_t k, int64_t bk, float* dst) {
#ifdef IRC_FP8MM_X86
  if (isa != Isa::kScalar) {
    if (fnuz) return widen_avx2<true>(src, k, bk, dst);
    return widen_avx2<false>(src, k, bk, dst);
  }
#endif
  widen_scalar(fnuz, src, k, bk, dst);
}

void fp8_mm_tile(Isa isa, const float* a, int64_t m, const float* b, int64_t nt, int64_t n0,
                 int64_t groups, int64_t kp, int64_t bn, const float* sa, int64_t sa0,
                 int64_t sa1, const float* sb, int64_t sb0, int64_t sb1, float* out,
                 int64_t out_stride) {
#ifdef IRC_FP8MM_X86
  if (isa != Isa::kScalar) {
    return tile_avx2(a, m, b, nt, n0, groups, kp, bn, sa, sa0, sa1, sb, sb0, sb1, out, out_stride);
  }
#endif
  tile_scalar(a, m, b, nt, n0, groups, kp, bn, sa, sa0, sa1, sb, sb0, sb1, out, out_stride);
}

}  // namespace cpu
}  // namespace ircore_vllm_c
