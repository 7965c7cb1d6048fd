// The block-scaled fp8 matmul's loops (cpu_fp8_mm.h says the arithmetic): a portable copy, an
// AVX2+FMA+F16C copy and, for the widened-tile path, an AVX-512 copy, chosen by the Isa the other
// CPU kernels use. Every copy computes the same eight lanes per output, so the bits are the same
// on every x86-64 CPU (tested). No torch header.
//
// fp8 -> fp32: the portable copy reads a 256-entry table per format; the vector copies move the
// e4m3 bits into a binary16 (exponent and mantissa shifted into place: e4m3fn's bias 7 and
// e4m3fnuz's 8 are 15 - 8 and 15 - 7, so the half is the value times 2^-8 or 2^-7, subnormals
// included) and convert with F16C. widen8 then multiplies by 256 or 128 (exact) and puts NaN where
// the byte is a NaN encoding (0x7f / 0xff e4m3fn, 0x80 e4m3fnuz); widen8_scaled keeps the power
// of two, undone in the group's scale, and has_nan finds the NaN bytes per group instead.
//
// The AVX2 copy computes a few rows (decode) straight from the weight's bytes, one activation row
// against four weight rows; more rows from the tile's weight rows widened once into the task's
// buffer, three activation rows against four weight rows. The AVX-512 copy of the latter runs four
// rows against four pairs of weight rows, two output columns per 16-lane vector. Every path and
// blocking gives each output the same sums in the same order (cpu_fp8_mm.h).
#include "cpu_fp8_mm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__GNUC__) && !defined(__clang__)
// GCC's own AVX-512 intrinsic headers trip this warning (_mm512_undefined_ps): cpu_kernels.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define IRC_FP8MM_X86 1
#endif

namespace ircore_vllm_c {
namespace cpu {
namespace {

constexpr int kLanes = 8;
constexpr int kCols = 4;  // weight rows per inner step

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

void tile_scalar(bool fnuz, const Fp8MmTile& t) {
  const int64_t kpad = t.groups * t.kp;
  for (int64_t j = 0; j < t.nt; ++j) widen_scalar(fnuz, t.b + j * t.k, t.k, t.bk, t.buf + j * kpad);
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.nt;) {
      const int step = t.nt - j >= kCols ? kCols : 1;
      const float* br[kCols];
      const float* sbr[kCols];
      for (int r = 0; r < step; ++r) {
        br[r] = t.buf + (j + r) * kpad;
        sbr[r] = t.sb + ((t.n0 + j + r) / t.bn) * t.sb0;
      }
      const float* ar = t.a + i * kpad;
      float* o = t.out + i * t.out_stride + j;
      if (step == kCols) {
        dot_scalar<kCols>(ar, br, t.groups, t.kp, t.sa + i * t.sa0, t.sa1, sbr, t.sb1, o);
      } else {
        dot_scalar<1>(ar, br, t.groups, t.kp, t.sa + i * t.sa0, t.sa1, sbr, t.sb1, o);
      }
      j += step;
    }
  }
}

#ifdef IRC_FP8MM_X86
#define ISA_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ISA_AVX2_INLINE ISA_AVX2 __attribute__((always_inline)) inline

// Rows below this many read the weight's bytes directly (each weight byte is then widened once
// per row, against one store and one load per row from the widened tile).
constexpr int64_t kDirectRows = 4;
constexpr int kRows = 3;  // activation rows per inner step of the widened-tile path

template <bool Fnuz>
ISA_AVX2_INLINE __m256 widen8(const uint8_t* p) {
  const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  // the half's bits: (x + (x & 0x80)) << 7 moves the sign to bit 15, exponent and mantissa to
  // bits 13..7
  const __m128i h = _mm_slli_epi16(_mm_add_epi16(x, _mm_and_si128(x, _mm_set1_epi16(0x80))), 7);
  const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(Fnuz ? 128.0f : 256.0f));
  const __m128i nan16 = Fnuz ? _mm_cmpeq_epi16(x, _mm_set1_epi16(0x80))
                             : _mm_cmpeq_epi16(_mm_or_si128(x, _mm_set1_epi16(0x80)),
                                               _mm_set1_epi16(0xff));
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

// MR activation rows against NR widened weight rows. The running totals stay in memory (touched
// once per group), so that the MR x NR lane sums of the inner loop keep the registers.
template <int MR, int NR>
ISA_AVX2_INLINE void dot_avx2(const float* const* a, const float* const* b, int64_t groups,
                              int64_t kp, const float* const* sa, int64_t sa1,
                              const float* const* sb, int64_t sb1, float* const* out) {
  alignas(32) float tot[MR][NR][kLanes] = {};
  for (int64_t g = 0; g < groups; ++g) {
    __m256 part[MR][NR];
    for (int i = 0; i < MR; ++i) {
      for (int r = 0; r < NR; ++r) part[i][r] = _mm256_setzero_ps();
    }
    const int64_t base = g * kp;
    for (int64_t c = base; c < base + kp; c += kLanes) {
      __m256 av[MR];
      for (int i = 0; i < MR; ++i) av[i] = _mm256_loadu_ps(a[i] + c);
      for (int r = 0; r < NR; ++r) {
        const __m256 bv = _mm256_loadu_ps(b[r] + c);
        for (int i = 0; i < MR; ++i) part[i][r] = _mm256_fmadd_ps(av[i], bv, part[i][r]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const float s = sa[i][g * sa1];
      for (int r = 0; r < NR; ++r) {
        const __m256 sr = _mm256_set1_ps(s * sb[r][g * sb1]);
        _mm256_store_ps(tot[i][r], _mm256_fmadd_ps(part[i][r], sr, _mm256_load_ps(tot[i][r])));
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int r = 0; r < NR; ++r) out[i][r] = lane_sum8(_mm256_load_ps(tot[i][r]));
  }
}

// The half-precision form of widen8 without its last two steps: the value times 2^-8 (e4m3fn) or
// 2^-7 (e4m3fnuz), NaN encodings left as finite numbers (has_nan finds them).
ISA_AVX2_INLINE __m256 widen8_scaled(const uint8_t* p) {
  const __m128i x = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(
      _mm_slli_epi16(_mm_add_epi16(x, _mm_and_si128(x, _mm_set1_epi16(0x80))), 7));
}

// Whether n bytes hold a NaN encoding.
template <bool Fnuz>
ISA_AVX2_INLINE bool has_nan(const uint8_t* p, int64_t n) {
  const __m256i hi = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i acc = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    acc = _mm256_or_si256(acc, Fnuz ? _mm256_cmpeq_epi8(x, hi)
                                    : _mm256_cmpeq_epi8(_mm256_or_si256(x, hi),
                                                        _mm256_set1_epi8(static_cast<char>(0xff))));
  }
  bool any = !_mm256_testz_si256(acc, acc);
  for (; i < n; ++i) any |= Fnuz ? p[i] == 0x80 : (p[i] & 0x7f) == 0x7f;
  return any;
}

// One activation row against NR weight rows read as bytes, each widened to its value times 2^-8
// (e4m3fn; 2^-7 e4m3fnuz), an exact power of two carried through every lane sum and undone in
// the group's scale (itself times 2^8, exactly): each product, sum and FMA is that power of two
// times the widened tile's, so the bits are the same (no value here nears fp32's subnormals or
// its overflow). A group holding a NaN byte makes its lane sums NaN, as the NaN itself would.
// The padded columns past a group's last multiple of 8 are skipped (each would add 0 * 0 to a
// lane sum that is never -0: no bit changes); a ragged last chunk is read through zeroed bytes
// (+0, as the widened tile's padding).
template <bool Fnuz, int NR>
ISA_AVX2_INLINE void dot_direct(const float* a, const uint8_t* const* b, const Fp8MmTile& t,
                                const float* sa, const float* const* sb, float* out) {
  const float unscale = Fnuz ? 128.0f : 256.0f;
  __m256 tot[NR];
  for (int r = 0; r < NR; ++r) tot[r] = _mm256_setzero_ps();
  for (int64_t g = 0; g < t.groups; ++g) {
    const int64_t g0 = g * t.bk;
    const int64_t len = t.k - g0 < t.bk ? t.k - g0 : t.bk;
    const int64_t full = len / kLanes * kLanes;
    const float* ag = a + g * t.kp;
    __m256 part[NR];
    for (int r = 0; r < NR; ++r) part[r] = _mm256_setzero_ps();
    for (int64_t c = 0; c < full; c += kLanes) {
      const __m256 av = _mm256_loadu_ps(ag + c);
      for (int r = 0; r < NR; ++r) {
        part[r] = _mm256_fmadd_ps(av, widen8_scaled(b[r] + g0 + c), part[r]);
      }
    }
    if (full < len) {
      const __m256 av = _mm256_loadu_ps(ag + full);
      for (int r = 0; r < NR; ++r) {
        uint8_t tail[kLanes] = {};
        std::memcpy(tail, b[r] + g0 + full, static_cast<size_t>(len - full));
        part[r] = _mm256_fmadd_ps(av, widen8_scaled(tail), part[r]);
      }
    }
    const float s = sa[g * t.sa1];
    for (int r = 0; r < NR; ++r) {
      if (has_nan<Fnuz>(b[r] + g0, len)) {
        part[r] = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
      }
      const float sr = s * sb[r][g * t.sb1];
      tot[r] = _mm256_fmadd_ps(part[r], _mm256_set1_ps(sr * unscale), tot[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = lane_sum8(tot[r]);
}

template <bool Fnuz>
ISA_AVX2 void tile_direct(const Fp8MmTile& t) {
  const int64_t kpad = t.groups * t.kp;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.nt;) {
      const int step = t.nt - j >= kCols ? kCols : 1;
      const uint8_t* br[kCols];
      const float* sbr[kCols];
      for (int r = 0; r < step; ++r) {
        br[r] = t.b + (j + r) * t.k;
        sbr[r] = t.sb + ((t.n0 + j + r) / t.bn) * t.sb0;
      }
      const float* ar = t.a + i * kpad;
      float* o = t.out + i * t.out_stride + j;
      if (step == kCols) {
        dot_direct<Fnuz, kCols>(ar, br, t, t.sa + i * t.sa0, sbr, o);
      } else {
        dot_direct<Fnuz, 1>(ar, br, t, t.sa + i * t.sa0, sbr, o);
      }
      j += step;
    }
  }
}

template <int MR>
ISA_AVX2_INLINE void rows_widened(const Fp8MmTile& t, int64_t i) {
  const int64_t kpad = t.groups * t.kp;
  const float* ar[MR];
  const float* sar[MR];
  float* o[MR];
  for (int64_t j = 0; j < t.nt;) {
    const int step = t.nt - j >= kCols ? kCols : 1;
    for (int q = 0; q < MR; ++q) {
      ar[q] = t.a + (i + q) * kpad;
      sar[q] = t.sa + (i + q) * t.sa0;
      o[q] = t.out + (i + q) * t.out_stride + j;
    }
    const float* br[kCols];
    const float* sbr[kCols];
    for (int r = 0; r < step; ++r) {
      br[r] = t.buf + (j + r) * kpad;
      sbr[r] = t.sb + ((t.n0 + j + r) / t.bn) * t.sb0;
    }
    if (step == kCols) {
      dot_avx2<MR, kCols>(ar, br, t.groups, t.kp, sar, t.sa1, sbr, t.sb1, o);
    } else {
      dot_avx2<MR, 1>(ar, br, t.groups, t.kp, sar, t.sa1, sbr, t.sb1, o);
    }
    j += step;
  }
}

template <bool Fnuz>
ISA_AVX2 void tile_widened(const Fp8MmTile& t) {
  const int64_t kpad = t.groups * t.kp;
  for (int64_t j = 0; j < t.nt; ++j) widen_avx2<Fnuz>(t.b + j * t.k, t.k, t.bk, t.buf + j * kpad);
  int64_t i = 0;
  for (; i + kRows <= t.m; i += kRows) rows_widened<kRows>(t, i);
  for (; i < t.m; ++i) rows_widened<1>(t, i);
}

#define ISA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define ISA_AVX512_INLINE ISA_AVX512 __attribute__((always_inline)) inline

constexpr int kRows512 = 4;   // activation rows per inner step
constexpr int kPairs512 = 4;  // weight row pairs per inner step
// Padded K columns per pass over the rows: the tile's 16 widened rows of them (32 KiB) stay in L1
// while every activation row goes by; whole groups only.
constexpr int64_t kKBlock = 512;

// The AVX-512 form of the widened-tile path, with the AVX2 path's arithmetic: a 16-lane vector
// holds the eight lanes of two output columns (a pair of weight rows, their 8-column chunks
// interleaved in the buffer), each activation chunk broadcast to both halves. Every lane sees the
// same FMAs in the same order as in the 8-lane copies, so the bits are theirs. Groups [g0, g1)
// add to the running totals tot[i] (16 floats per pair), kept in memory between blocks of K.
template <int MR, int NP>
ISA_AVX512_INLINE void dot_avx512(const float* const* a, const float* const* b, int64_t g0,
                                  int64_t g1, int64_t kp, const float* const* sa, int64_t sa1,
                                  const float* const* sb, int64_t sb1, float unscale,
                                  float* const* tot) {
  for (int64_t g = g0; g < g1; ++g) {
    __m512 part[MR][NP];
    for (int i = 0; i < MR; ++i) {
      for (int p = 0; p < NP; ++p) part[i][p] = _mm512_setzero_ps();
    }
    const int64_t base = g * kp;
    for (int64_t c = base; c < base + kp; c += kLanes) {
      __m512 av[MR];
      for (int i = 0; i < MR; ++i) av[i] = _mm512_broadcast_f32x8(_mm256_loadu_ps(a[i] + c));
      for (int p = 0; p < NP; ++p) {
        const __m512 bv = _mm512_loadu_ps(b[p] + 2 * c);
        for (int i = 0; i < MR; ++i) part[i][p] = _mm512_fmadd_ps(av[i], bv, part[i][p]);
      }
    }
    for (int i = 0; i < MR; ++i) {
      const float s = sa[i][g * sa1];
      for (int p = 0; p < NP; ++p) {
        const __m512 sr = _mm512_insertf32x8(_mm512_set1_ps(s * sb[2 * p][g * sb1] * unscale),
                                             _mm256_set1_ps(s * sb[2 * p + 1][g * sb1] * unscale),
                                             1);
        float* tp = tot[i] + p * 2 * kLanes;
        _mm512_storeu_ps(tp, _mm512_fmadd_ps(part[i][p], sr, _mm512_loadu_ps(tp)));
      }
    }
  }
}

// Rows i .. i + MR - 1 against every pair of the tile, groups [g0, g1). An odd tile's last pair
// repeats its last row (its second column is never written out).
template <int MR>
ISA_AVX512_INLINE void rows_pairs(const Fp8MmTile& t, int64_t i, int64_t pairs, int64_t g0,
                                  int64_t g1, float unscale) {
  const int64_t kpad = t.groups * t.kp;
  const float* ar[MR];
  const float* sar[MR];
  for (int q = 0; q < MR; ++q) {
    ar[q] = t.a + (i + q) * kpad;
    sar[q] = t.sa + (i + q) * t.sa0;
  }
  for (int64_t p = 0; p < pairs;) {
    const int np = pairs - p >= kPairs512 ? kPairs512 : 1;
    const float* bp[kPairs512];
    const float* sbr[2 * kPairs512];
    for (int q = 0; q < np; ++q) {
      bp[q] = t.buf + (p + q) * 2 * kpad;
      for (int h = 0; h < 2; ++h) {
        const int64_t col = std::min<int64_t>(2 * (p + q) + h, t.nt - 1);
        sbr[2 * q + h] = t.sb + ((t.n0 + col) / t.bn) * t.sb0;
      }
    }
    float* tot[MR];
    for (int q = 0; q < MR; ++q) tot[q] = t.tot + ((i + q) * pairs + p) * 2 * kLanes;
    if (np == kPairs512) {
      dot_avx512<MR, kPairs512>(ar, bp, g0, g1, t.kp, sar, t.sa1, sbr, t.sb1, unscale, tot);
    } else {
      dot_avx512<MR, 1>(ar, bp, g0, g1, t.kp, sar, t.sa1, sbr, t.sb1, unscale, tot);
    }
    p += np;
  }
}

template <bool Fnuz>
ISA_AVX512 void tile_widened512(const Fp8MmTile& t) {
  const int64_t kpad = t.groups * t.kp;
  const int64_t pairs = (t.nt + 1) / 2;
  // the pairs' rows widened into their interleaved chunks, each value times 2^-8 (2^-7 e4m3fnuz)
  // as in dot_direct (undone in the scales: the same bits); a group holding a NaN byte all NaN
  const float unscale = Fnuz ? 128.0f : 256.0f;
  const __m256 nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  for (int64_t j = 0; j < 2 * pairs; ++j) {
    const uint8_t* src = t.b + std::min<int64_t>(j, t.nt - 1) * t.k;
    float* dst = t.buf + (j / 2) * 2 * kpad + (j % 2) * kLanes;
    for (int64_t g = 0; g < t.groups; ++g) {
      const int64_t g0 = g * t.bk;
      const int64_t len = t.k - g0 < t.bk ? t.k - g0 : t.bk;
      const int64_t full = len / kLanes * kLanes;
      float* dg = dst + 2 * g * t.kp;
      int64_t c = 0;
      if (has_nan<Fnuz>(src + g0, len)) {
        for (; c < t.kp; c += kLanes) _mm256_storeu_ps(dg + 2 * c, nan);
        continue;
      }
      for (; c < full; c += kLanes) _mm256_storeu_ps(dg + 2 * c, widen8_scaled(src + g0 + c));
      if (c < len) {
        uint8_t tail[kLanes] = {};
        std::memcpy(tail, src + g0 + c, static_cast<size_t>(len - c));
        _mm256_storeu_ps(dg + 2 * c, widen8_scaled(tail));
        c += kLanes;
      }
      for (; c < t.kp; c += kLanes) _mm256_storeu_ps(dg + 2 * c, _mm256_setzero_ps());
    }
  }
  std::memset(t.tot, 0, static_cast<size_t>(t.m * pairs * 2 * kLanes) * sizeof(float));
  const int64_t gblock = std::max<int64_t>(1, kKBlock / t.kp);
  for (int64_t g0 = 0; g0 < t.groups; g0 += gblock) {
    const int64_t g1 = std::min(t.groups, g0 + gblock);
    int64_t i = 0;
    for (; i + kRows512 <= t.m; i += kRows512) rows_pairs<kRows512>(t, i, pairs, g0, g1, unscale);
    for (; i < t.m; ++i) rows_pairs<1>(t, i, pairs, g0, g1, unscale);
  }
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t col = 0; col < t.nt; ++col) {
      const float* tp = t.tot + (i * pairs + col / 2) * 2 * kLanes + (col % 2) * kLanes;
      t.out[i * t.out_stride + col] = lane_sum8(_mm256_loadu_ps(tp));
    }
  }
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

void fp8_mm_tile(Isa isa, bool fnuz, const Fp8MmTile& t) {
#ifdef IRC_FP8MM_X86
  if (isa != Isa::kScalar) {
    if (t.m < kDirectRows) return fnuz ? tile_direct<true>(t) : tile_direct<false>(t);
    if (isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16) {
      return fnuz ? tile_widened512<true>(t) : tile_widened512<false>(t);
    }
    return fnuz ? tile_widened<true>(t) : tile_widened<false>(t);
  }
#endif
  tile_scalar(fnuz, t);
}

}  // namespace cpu
}  // namespace ircore_vllm_c
