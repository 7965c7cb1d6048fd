// Cases for tools/emulate_cuda_rope.py: every path of the CUDA RoPE kernels (vector and scalar,
// cache and HF, few tokens (heads split over blocks) and many, partial rotary with offsets,
// inverse, deepseek offsets, fp32 cache; fused_qk_norm_rope's lane groups of 1-32 lanes with
// 16-byte or element accesses and its warp kernel) against a float64 reference written here from
// the ops' semantics; whole buffers compared, so untouched channels and padding are checked too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <random>
#include <cstring>
#include "rope_emu.cpp"  // cuda_rope.cu as emulate_cuda_rope.py rewrites it
using namespace ircore_vllm_c::cuda_rope;
template <class U> float tf(U v);
template <> float tf(float v) { return v; }
template <> float tf(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class U> U fromf(float v);
template <> float fromf(float v) { return v; }
template <> __nv_bfloat16 fromf(float v) { return __float2bfloat16_rn(v); }
std::mt19937 rng(1);
float rnd() { return std::uniform_real_distribution<float>(-1, 1)(rng); }
int fails = 0;
template <class T>
void cmp(const char* label, const std::vector<T>& got, const std::vector<double>& want, double tol) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = tf(got[i]);
    if (std::fabs(g - want[i]) > tol * (1 + std::fabs(want[i]))) {
      if (bad < 3) printf("  %s: [%zu] got %g want %g\n", label, i, g, want[i]);
      ++bad;
    }
  }
  if (bad) { ++fails; printf("FAIL %s (%d bad)\n", label, bad); } else printf("ok %s\n", label);
}
// cache mode: q [tokens, tstride] with heads hq of head_size at offset shift; k likewise
template <class T, class CT>
void test_cache(const char* label, int tokens, int head, int rd, int off, bool neox, int hq, int hk,
                int shift, bool inverse, bool offsets) {
  const int rows = 50, half = rd / 2;
  int ts[2] = {hq * head + 2 * shift, hk * head + 2 * shift};
  std::vector<T> x[2];
  std::vector<double> ref[2];
  std::vector<CT> cache(rows * rd);
  for (auto& c : cache) c = fromf<CT>(rnd());
  std::vector<int64_t> pos(tokens), ofs(tokens);
  for (int t = 0; t < tokens; ++t) { pos[t] = rng() % (rows / 2); ofs[t] = rng() % (rows / 2); }
  RopeLaunch l{};
  l.dtype = sizeof(T) == 4 ? RopeDType::kFloat : RopeDType::kBFloat16;
  l.cache_fp32 = sizeof(CT) == 4;
  l.nx = hk ? 2 : 1;
  int heads[2] = {hq, hk};
  for (int a = 0; a < l.nx; ++a) {
    x[a].resize((size_t)tokens * ts[a] + 8);
    for (auto& v : x[a]) v = fromf<T>(rnd());
    ref[a].resize(x[a].size());
    for (size_t i = 0; i < x[a].size(); ++i) ref[a][i] = tf(x[a][i]);
    l.x[a] = {x[a].data() + shift, ts[a], 0, head, heads[a]};
    l.pairs += heads[a] * half;
    for (int t = 0; t < tokens; ++t)
      for (int h = 0; h < heads[a]; ++h) {
        size_t b = (size_t)t * ts[a] + shift + h * head + off;
        int64_t row = pos[t] + (offsets ? ofs[t] : 0);
        for (int p = 0; p < half; ++p) {
          double c = tf(cache[row * rd + p]), s = tf(cache[row * rd + half + p]) * (inverse ? -1 : 1);
          size_t i0 = b + (neox ? p : 2 * p), i1 = b + (neox ? p + half : 2 * p + 1);
          double x0 = tf(x[a][i0]), x1 = tf(x[a][i1]);
          ref[a][i0] = x0 * c - x1 * s;
          ref[a][i1] = x1 * c + x0 * s;
        }
      }
  }
  l.tokens = tokens; l.n1 = 1;
  l.positions = pos.data(); l.offsets = offsets ? ofs.data() : nullptr;
  l.cache = cache.data(); l.cache_stride = rd;
  l.rotary_dim = rd; l.rot_offset = off; l.neox = neox; l.inverse = inverse;
  printf("%s: vectorizable=%d\n", label, (int)rope_vectorizable<T, CT>(l));
  launch_rope(l, nullptr);
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-2;
  for (int a = 0; a < l.nx; ++a) cmp(label, x[a], ref[a], tol);
}
// HF: q (B, H, S, D) as transposed views of (B, S, H*D + shift)
template <class T>
void test_hf(const char* label, int B, int S, int d, int hq, int hk, int shift) {
  const int half = d / 2;
  std::vector<T> cs((size_t)B * S * d), sn(cs.size());
  for (auto& v : cs) v = fromf<T>(rnd());
  for (auto& v : sn) v = fromf<T>(rnd());
  RopeLaunch l{};
  l.dtype = sizeof(T) == 4 ? RopeDType::kFloat : RopeDType::kBFloat16;
  l.cache_fp32 = sizeof(T) == 4;
  l.nx = 2;
  int heads[2] = {hq, hk};
  std::vector<T> x[2];
  std::vector<double> ref[2];
  for (int a = 0; a < 2; ++a) {
    int64_t row = heads[a] * d + shift;
    x[a].resize((size_t)B * S * row + 8);
    for (auto& v : x[a]) v = fromf<T>(rnd());
    ref[a].resize(x[a].size());
    for (size_t i = 0; i < x[a].size(); ++i) ref[a][i] = tf(x[a][i]);
    l.x[a] = {x[a].data() + shift, S * row, row, d, heads[a]};
    l.pairs += heads[a] * half;
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < heads[a]; ++h) {
          size_t base = (size_t)(b * S + s) * row + shift + h * d;
          const T* c = cs.data() + (size_t)(b * S + s) * d;
          const T* n = sn.data() + (size_t)(b * S + s) * d;
          for (int p = 0; p < half; ++p) {
            double x0 = tf(x[a][base + p]), x1 = tf(x[a][base + half + p]);
            ref[a][base + p] = x0 * tf(c[p]) - x1 * tf(n[p]);
            ref[a][base + half + p] = x1 * tf(c[half + p]) + x0 * tf(n[half + p]);
          }
        }
  }
  l.tokens = B * S; l.n1 = S;
  l.cos = cs.data(); l.sin = sn.data(); l.c0 = S * d; l.c1 = d;
  l.rotary_dim = d; l.neox = true;
  printf("%s: vectorizable=%d\n", label, (int)rope_vectorizable<T, T>(l));
  launch_rope(l, nullptr);
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-2;
  for (int a = 0; a < 2; ++a) cmp(label, x[a], ref[a], tol);
}
template <class T, class CT>
void test_qk(const char* label, int rows, int d, int hq, int hk, int hv, bool neox, int shift) {
  const int half = d / 2, width = (hq + hk + hv) * d, stride = width + 2 * shift, crow = 40;
  std::vector<T> x((size_t)rows * stride + 8);
  for (auto& v : x) v = fromf<T>(2 * rnd());
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = tf(x[i]);
  std::vector<float> wq(d), wk(d);
  for (auto& v : wq) v = 1 + 0.1f * rnd();
  for (auto& v : wk) v = 1 + 0.1f * rnd();
  std::vector<CT> cache(crow * d);
  for (auto& v : cache) v = fromf<CT>(rnd());
  std::vector<int64_t> pos(rows);
  for (auto& p : pos) p = rng() % crow;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < hq + hk; ++h) {
      size_t b = (size_t)r * stride + shift + h * d;
      double ss = 0;
      for (int c = 0; c < d; ++c) ss += ref[b + c] * ref[b + c];
      double inv = 1 / std::sqrt(ss / d + 1e-6);
      const float* w = h < hq ? wq.data() : wk.data();
      std::vector<double> y(d);
      for (int c = 0; c < d; ++c) y[c] = ref[b + c] * inv * w[c];
      for (int p = 0; p < half; ++p) {
        double c = tf(cache[pos[r] * d + p]), s = tf(cache[pos[r] * d + half + p]);
        int i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
        ref[b + i0] = y[i0] * c - y[i1] * s;
        ref[b + i1] = y[i1] * c + y[i0] * s;
      }
    }
  QkNormRopeLaunch l{};
  l.dtype = sizeof(T) == 4 ? RopeDType::kFloat : RopeDType::kBFloat16;
  l.cache_fp32 = sizeof(CT) == 4;
  l.qkv = x.data() + shift; l.stride = stride; l.rows = rows;
  l.heads_q = hq; l.heads_k = hk; l.head_dim = d; l.eps = 1e-6f;
  l.wq = wq.data(); l.wk = wk.data(); l.cache = cache.data(); l.cache_stride = d;
  l.positions = pos.data(); l.neox = neox;
  printf("%s: group lg=%d vec=%d\n", label, qk_group_lanes_log2<T>(d), (int)qk_vectorizable<T, CT>(l));
  launch_qk_norm_rope(l, nullptr);
  cmp(label, x, ref, sizeof(T) == 4 ? 1e-5 : 2e-2);
}
int main() {
  using bf = __nv_bfloat16;
  test_cache<bf, bf>("vec neox bf16 T1 H20+5", 1, 128, 128, 0, true, 20, 5, 0, false, false);
  test_cache<bf, bf>("vec neox bf16 T600 (no split)", 600, 128, 128, 0, true, 20, 5, 0, false, false);
  test_cache<bf, float>("vec gptj off32 fp32cache T3", 3, 128, 64, 32, false, 20, 5, 0, false, false);
  test_cache<bf, float>("vec gptj off32 fp32cache T600", 600, 128, 64, 32, false, 20, 5, 0, false, false);
  test_cache<float, float>("vec neox f32 deepseek inverse qonly T700", 700, 64, 64, 0, true, 20, 0, 0, true, true);
  test_cache<float, float>("vec neox f32 rd2048 T3", 3, 2048, 2048, 0, true, 2, 1, 0, false, false);
  test_cache<float, float>("vec neox f32 rd2048 T2800", 2800, 2048, 2048, 0, true, 2, 1, 0, false, false);
  test_cache<bf, bf>("scalar shifted neox bf16 T1", 1, 128, 128, 0, true, 20, 5, 1, false, false);
  test_cache<bf, bf>("scalar shifted neox bf16 T700", 700, 128, 128, 0, true, 20, 5, 1, false, false);
  test_cache<float, float>("scalar rd258 gptj f32 T2800", 2800, 258, 258, 0, false, 2, 1, 0, false, false);
  test_cache<bf, bf>("scalar rd20 off8 neox bf16 T7", 7, 80, 20, 8, true, 3, 1, 0, false, false);
  test_cache<bf, bf>("scalar rd20 off30 gptj bf16 T7", 7, 80, 20, 30, false, 3, 1, 0, true, true);
  test_hf<bf>("hf vec bf16 S1", 1, 1, 128, 8, 2, 0);
  test_hf<bf>("hf vec bf16 B2 S5000", 2, 4200, 128, 8, 2, 0);
  test_hf<bf>("hf scalar bf16 B2 S5", 2, 5, 128, 8, 2, 1);
  test_hf<float>("hf vec f32 d64 B2 S5", 2, 5, 64, 4, 2, 0);
  for (int neox = 0; neox < 2; ++neox) {
    test_qk<bf, bf>(neox ? "qk neox vec d128 bf16" : "qk gptj vec d128 bf16", 5, 128, 4, 2, 2, neox, 0);
    test_qk<float, float>(neox ? "qk neox vec d128 f32" : "qk gptj vec d128 f32", 5, 128, 4, 2, 2, neox, 0);
    test_qk<bf, float>(neox ? "qk neox vec d512 bf16" : "qk gptj vec d512 bf16", 3, 512, 2, 1, 1, neox, 0);
    test_qk<bf, bf>(neox ? "qk neox elem d128 bf16" : "qk gptj elem d128 bf16", 5, 128, 4, 2, 2, neox, 1);
    test_qk<bf, bf>(neox ? "qk neox vec d16 bf16" : "qk gptj vec d16 bf16", 7, 16, 3, 1, 1, neox, 0);
    test_qk<bf, bf>(neox ? "qk neox warp d96 bf16" : "qk gptj warp d96 bf16", 5, 96, 4, 2, 2, neox, 0);
  }
  printf("%s\n", fails ? "FAILURES" : "ALL OK");
  return fails != 0;
}
