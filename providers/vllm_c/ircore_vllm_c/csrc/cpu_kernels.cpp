// CPU row kernels: one copy per ISA (scalar, AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ), chosen at run
// time. No torch header is included here on purpose (see cpu_kernels.h).
#include "cpu_kernels.h"
#include "cpu_activation.h"  // the gated activations: cpu_activation_*.inc

#include <cmath>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
// GCC's own AVX-512 intrinsic headers trip this warning (_mm512_undefined_ps).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define IRC_X86 1
#endif

namespace ircore_vllm_c {
namespace cpu {

// fused_add_rms_norm pipelines its rows (row r's second pass inside row r + 1's first: see
// fused_add_rms_norm_rows_t) when one task's rows (a thread's share) of x and residual together
// exceed this many bytes. Below it they stay in L2, and the plain order (each row's two passes
// back to back) keeps the row's residual in L1 for the second pass, which the pipelined order
// cannot (its working set is five rows). Crossover measured on a Xeon with a 2 MB L2 (hidden
// 4096, fp32 and bf16, 1 and 2 threads): plain wins at 2 MB per task, pipelined from 2.5 MB.
constexpr int64_t kFusedPipelineBytes = int64_t{2} << 20;

namespace {

// Storage types for the 16-bit floats (bit patterns, converted by hand or by intrinsics).
struct f16 {
  uint16_t x;
};
struct bf16 {
  uint16_t x;
};

inline float f32_from_bits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, sizeof(f));
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, sizeof(w));
  return w;
}

// IEEE half <-> float, round to nearest even (the FP16 library's algorithm, as in c10::Half).
inline float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? f32_to_bits(denormalized) : f32_to_bits(normalized));
  return f32_from_bits(result);
}
inline uint16_t float_to_half(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = f32_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
inline float bf16_to_float(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = f32_to_bits(f);
  return static_cast<uint16_t>((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Scalar: portable fallback (any CPU, and the reference for the vector paths in tests).
namespace scalar {
#define ISA_FN
#define ISA_INLINE inline
using V = float;
constexpr int W = 1;
ISA_INLINE V vzero() { return 0.0f; }
ISA_INLINE V vset1(float a) { return a; }
ISA_INLINE V vadd(V a, V b) { return a + b; }
ISA_INLINE V vmul(V a, V b) { return a * b; }
ISA_INLINE V vdiv(V a, V b) { return a / b; }
ISA_INLINE V vfma(V a, V b, V c) { return a * b + c; }
ISA_INLINE V vneg(V a) { return -a; }
ISA_INLINE float vhsum(V a) { return a; }
ISA_INLINE V vexp(V a) { return std::exp(a); }
ISA_INLINE void vsfence() {}

template <class T>
struct L;
template <>
struct L<float> {
  static V load(const float* p) { return *p; }
  static V load_n(const float* p, int) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static void stream(float* p, V v) { *p = v; }
  static void store_n(float* p, V v, int) { *p = v; }
  static V store_round(float* p, V v) { return *p = v; }
  static V store_round_n(float* p, V v, int) { return *p = v; }
};
template <>
struct L<f16> {
  static V load(const f16* p) { return half_to_float(p->x); }
  static V load_n(const f16* p, int) { return load(p); }
  static void store(f16* p, V v) { p->x = float_to_half(v); }
  static void stream(f16* p, V v) { store(p, v); }
  static void store_n(f16* p, V v, int) { store(p, v); }
  static V store_round(f16* p, V v) {
    p->x = float_to_half(v);
    return half_to_float(p->x);
  }
  static V store_round_n(f16* p, V v, int) { return store_round(p, v); }
};
template <>
struct L<bf16> {
  static V load(const bf16* p) { return bf16_to_float(p->x); }
  static V load_n(const bf16* p, int) { return load(p); }
  static void store(bf16* p, V v) { p->x = float_to_bf16(v); }
  static void stream(bf16* p, V v) { store(p, v); }
  static void store_n(bf16* p, V v, int) { store(p, v); }
  static V store_round(bf16* p, V v) {
    p->x = float_to_bf16(v);
    return bf16_to_float(p->x);
  }
  static V store_round_n(bf16* p, V v, int) { return store_round(p, v); }
};

#include "cpu_kernels_isa.inc"
#include "cpu_activation_isa.inc"

#undef ISA_FN
#undef ISA_INLINE
}  // namespace scalar

#ifdef IRC_X86
// ---------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C: 8 floats per vector.
namespace avx2 {
#define ISA_FN __attribute__((target("avx2,fma,f16c")))
#define ISA_INLINE ISA_FN __attribute__((always_inline)) inline
using V = __m256;
constexpr int W = 8;
ISA_INLINE V vzero() { return _mm256_setzero_ps(); }
ISA_INLINE V vset1(float a) { return _mm256_set1_ps(a); }
ISA_INLINE V vadd(V a, V b) { return _mm256_add_ps(a, b); }
ISA_INLINE V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
ISA_INLINE V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
ISA_INLINE V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
ISA_INLINE V vneg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
ISA_INLINE float vhsum(V a) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  return _mm_cvtss_f32(_mm_add_ss(s, sh));
}
// Cephes expf: |rel err| ~ 1 ulp on [-88, 88]; saturates to 0 / inf outside.
ISA_INLINE V vexp(V x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-88.3762626647949f)),
                    _mm256_set1_ps(88.3762626647950f));
  V fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  V y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
  return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
}
ISA_INLINE void vsfence() { _mm_sfence(); }
ISA_INLINE __m256i tailmask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
ISA_INLINE __m128i load16_n(const void* p, int n) {
  alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, static_cast<size_t>(n) * 2);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
}
ISA_INLINE void store16_n(void* p, __m128i v, int n) {
  alignas(16) uint16_t buf[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), v);
  std::memcpy(p, buf, static_cast<size_t>(n) * 2);
}

template <class T>
struct L;
template <>
struct L<float> {
  ISA_INLINE static V load(const float* p) { return _mm256_loadu_ps(p); }
  ISA_INLINE static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, tailmask(n)); }
  ISA_INLINE static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  ISA_INLINE static void stream(float* p, V v) { _mm256_stream_ps(p, v); }
  ISA_INLINE static void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, tailmask(n), v); }
  ISA_INLINE static V store_round(float* p, V v) {
    store(p, v);
    return v;
  }
  ISA_INLINE static V store_round_n(float* p, V v, int n) {
    store_n(p, v, n);
    return v;
  }
};
struct Half16 {  // shared load/store plumbing for the two 16-bit types
  ISA_INLINE static __m128i ld(const void* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  ISA_INLINE static void st(void* p, __m128i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  }
  ISA_INLINE static void nt(void* p, __m128i v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), v);
  }
};
template <>
struct L<bf16> {
  ISA_INLINE static V cvt(__m128i h) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  ISA_INLINE static __m128i pack(V v) {  // round to nearest even, NaN -> 0x7FC0 (as c10)
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(p);
  }
  ISA_INLINE static V load(const bf16* p) { return cvt(Half16::ld(p)); }
  ISA_INLINE static V load_n(const bf16* p, int n) { return cvt(load16_n(p, n)); }
  ISA_INLINE static void store(bf16* p, V v) { Half16::st(p, pack(v)); }
  ISA_INLINE static void stream(bf16* p, V v) { Half16::nt(p, pack(v)); }
  ISA_INLINE static void store_n(bf16* p, V v, int n) { store16_n(p, pack(v), n); }
  ISA_INLINE static V store_round(bf16* p, V v) {
    const __m128i h = pack(v);
    Half16::st(p, h);
    return cvt(h);
  }
  ISA_INLINE static V store_round_n(bf16* p, V v, int n) {
    const __m128i h = pack(v);
    store16_n(p, h, n);
    return cvt(h);
  }
};
template <>
struct L<f16> {
  ISA_INLINE static V cvt(__m128i h) { return _mm256_cvtph_ps(h); }
  ISA_INLINE static __m128i pack(V v) {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  ISA_INLINE static V load(const f16* p) { return cvt(Half16::ld(p)); }
  ISA_INLINE static V load_n(const f16* p, int n) { return cvt(load16_n(p, n)); }
  ISA_INLINE static void store(f16* p, V v) { Half16::st(p, pack(v)); }
  ISA_INLINE static void stream(f16* p, V v) { Half16::nt(p, pack(v)); }
  ISA_INLINE static void store_n(f16* p, V v, int n) { store16_n(p, pack(v), n); }
  ISA_INLINE static V store_round(f16* p, V v) {
    const __m128i h = pack(v);
    Half16::st(p, h);
    return cvt(h);
  }
  ISA_INLINE static V store_round_n(f16* p, V v, int n) {
    const __m128i h = pack(v);
    store16_n(p, h, n);
    return cvt(h);
  }
};

#include "cpu_kernels_isa.inc"
#include "cpu_activation_isa.inc"

#undef ISA_FN
#undef ISA_INLINE
}  // namespace avx2

// ---------------------------------------------------------------------------------------------
// AVX-512 (F, BW, VL, DQ), and the same with AVX512-BF16 conversions.
namespace avx512 {
#define ISA_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#include "cpu_avx512.inc"
#undef ISA_FN
}  // namespace avx512

namespace avx512bf16 {
#define IRC_AVX512_BF16 1
#define ISA_FN \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
#include "cpu_avx512.inc"
#undef ISA_FN
#undef IRC_AVX512_BF16
}  // namespace avx512bf16
#endif  // IRC_X86

// ---------------------------------------------------------------------------------------------
// Dispatch.

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return true;
#ifdef IRC_X86
    case Isa::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::kAvx512Bf16:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512bf16") && isa_supported(Isa::kAvx512);
    case Isa::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             isa_supported(Isa::kAvx2);
#endif
    default:
      return false;
  }
}

Isa best_isa() {
  static const Isa best = [] {
    if (isa_supported(Isa::kAvx512Bf16)) return Isa::kAvx512Bf16;
    if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
    if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return best;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

// Calls NS::FN<T>(args...) with T picked from dt; pointers are cast by the caller's lambda.
#define IRC_DISPATCH_ISA(isa, BODY)                 \
  switch (isa) {                                    \
    IRC_X86_CASES(BODY)                             \
    default: {                                      \
      namespace ns = scalar;                        \
      BODY;                                         \
    }                                               \
  }
#ifdef IRC_X86
#define IRC_X86_CASES(BODY)   \
  case Isa::kAvx512Bf16: {    \
    namespace ns = avx512bf16; \
    BODY;                     \
    break;                    \
  }                           \
  case Isa::kAvx512: {        \
    namespace ns = avx512;    \
    BODY;                     \
    break;                    \
  }                           \
  case Isa::kAvx2: {          \
    namespace ns = avx2;      \
    BODY;                     \
    break;                    \
  }
#else
#define IRC_X86_CASES(BODY)
#endif

#define IRC_DISPATCH_DT(dt, BODY)   \
  switch (dt) {                     \
    case DType::kHalf: {            \
      using T = f16;                \
      BODY;                         \
      break;                        \
    }                               \
    case DType::kBFloat16: {        \
      using T = bf16;               \
      BODY;                         \
      break;                        \
    }                               \
    default: {                      \
      using T = float;              \
      BODY;                         \
      break;                        \
    }                               \
  }

// The weight is x's dtype, or float32 (wdt); a null weight takes the first form.
#define IRC_DISPATCH_WT(dt, wdt, FN, ...)                        \
  IRC_DISPATCH_DT(dt, {                                          \
    if (wdt == DType::kFloat && dt != DType::kFloat) {           \
      using WT = float;                                          \
      FN;                                                        \
    } else {                                                     \
      using WT = T;                                              \
      FN;                                                        \
    }                                                            \
  })

void rms_norm_rows(Isa isa, DType dt, DType wdt, void* out, int64_t out_stride, const void* in,
                   int64_t in_stride, const void* weight, int64_t hidden, int64_t variance_size,
                   float eps, int64_t begin, int64_t end, bool stream) {
  IRC_DISPATCH_ISA(isa, IRC_DISPATCH_WT(dt, wdt, (ns::rms_norm_rows_t<T, WT>(
                                                     static_cast<T*>(out), out_stride,
                                                     static_cast<const T*>(in), in_stride,
                                                     static_cast<const WT*>(weight), hidden,
                                                     variance_size, eps, begin, end, stream))))
}

void fused_add_rms_norm_rows(Isa isa, DType dt, DType wdt, void* x, int64_t x_stride,
                             void* residual, int64_t res_stride, const void* weight,
                             int64_t hidden, int64_t variance_size, float eps, int64_t begin,
                             int64_t end) {
  IRC_DISPATCH_ISA(isa, IRC_DISPATCH_WT(dt, wdt, (ns::fused_add_rms_norm_rows_t<T, WT>(
                                                     static_cast<T*>(x), x_stride,
                                                     static_cast<T*>(residual), res_stride,
                                                     static_cast<const WT*>(weight), hidden,
                                                     variance_size, eps, begin, end))))
}

void silu_and_mul_rows(Isa isa, DType dt, void* out, int64_t out_stride, const void* in,
                       int64_t in_stride, int64_t d, int64_t begin, int64_t end,
                       bool stream) {
  IRC_DISPATCH_ISA(isa, IRC_DISPATCH_DT(dt, ns::silu_and_mul_rows_t<T>(
                                                static_cast<T*>(out), out_stride,
                                                static_cast<const T*>(in), in_stride, d, begin,
                                                end, stream)))
}

void rms_norm_gated_rows(Isa isa, DType dt, DType wdt, void* out, int64_t out_stride,
                         const void* in, int64_t in_stride, const void* gate, int64_t gate_stride,
                         const void* weight, int64_t hidden, int64_t group, float eps,
                         bool norm_before_gate, bool round_normalized, int64_t begin,
                         int64_t end) {
  IRC_DISPATCH_ISA(isa, IRC_DISPATCH_WT(dt, wdt, (ns::rms_norm_gated_rows_t<T, WT>(
                                                     static_cast<T*>(out), out_stride,
                                                     static_cast<const T*>(in), in_stride,
                                                     static_cast<const T*>(gate), gate_stride,
                                                     static_cast<const WT*>(weight), hidden, group,
                                                     eps, norm_before_gate, round_normalized,
                                                     begin, end))))
}

void layer_norm_rows(Isa isa, DType dt, void* out, int64_t out_stride, const void* in,
                     int64_t in_stride, const void* weight, const void* bias, int64_t hidden,
                     float eps, int64_t begin, int64_t end) {
  IRC_DISPATCH_ISA(isa, IRC_DISPATCH_DT(dt, ns::layer_norm_rows_t<T>(
                                                static_cast<T*>(out), out_stride,
                                                static_cast<const T*>(in), in_stride,
                                                static_cast<const T*>(weight),
                                                static_cast<const T*>(bias), hidden, eps, begin,
                                                end)))
}

#include "cpu_activation_dispatch.inc"

}  // namespace cpu
}  // namespace ircore_vllm_c
