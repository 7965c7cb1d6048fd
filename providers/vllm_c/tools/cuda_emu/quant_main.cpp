// Cases for tools/emulate_cuda_quant.py: every mode (static per tensor / channel / column groups /
// token groups, dynamic per token with and without scale_ub, per tensor in two launches, groups
// with row-major, column-major and TMA-strided scales, ue8m0) and source (x, rms_norm with a weight
// of x's dtype, float32 or none, the fused add, silu_and_mul) over row lengths and group sizes that
// take each path of the kernel (one chunk; resident rows of 32..512 threads; rows past the
// registers; element-wise rows; groups of 1..32 lanes, ragged, of partial chunks, past the
// registers, more than one pass of teams) against a reference written here from the ops'
// semantics. Inputs are multiples of 1/4 of small size, so every sum of squares is exact in any
// order and the comparison is bit for bit: the quantised bytes (and that nothing past a row is
// written), the scales, the residual.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdio>
#include <random>
#include <string>
#include "quant_emu.cpp"  // cuda_quant.cu as emulate_cuda_quant.py rewrites it
using namespace ircore_vllm_c::cuda_quant;
using ircore_vllm_c::cuda_common::Cvt;

std::mt19937 rng(1);
int fails = 0, cases = 0;

template <class T>
T of(float v) { return Cvt<T>::of(v); }
template <class T>
float f32(T v) { return Cvt<T>::f32(v); }
template <class T> QDType qd();
template <> QDType qd<float>() { return QDType::kFloat; }
template <> QDType qd<__half>() { return QDType::kHalf; }
template <> QDType qd<__nv_bfloat16>() { return QDType::kBFloat16; }

float quarter() { return static_cast<float>(std::uniform_int_distribution<int>(-32, 32)(rng)) / 4; }

uint8_t fp8(float v) {
  const float c = v != v ? v : std::fmin(std::fmax(v, -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(c, __NV_SATFINITE, __NV_E4M3));
}
float pow2c(float s) {
  if (!(s > 0.0f) || std::isinf(s)) return s;
  int e;
  const float m = std::frexp(s, &e);
  return m == 0.5f ? s : std::ldexp(1.0f, e);
}
constexpr float kMin = static_cast<float>(1.0 / (448.0 * 512.0));
float dscale(float amax, bool ue8m0) {
  float s = amax / 448.0f;
  if (ue8m0) s = pow2c(s);
  return s < kMin ? kMin : s;
}

struct Opts {
  QSource src = QSource::kPlain;
  QMode mode = QMode::kToken;
  int rows = 3, k = 256, group = 128, pad = 0;  // pad: extra elements per x row (odd: element-wise)
  int weight = 1;                                // 0 none, 1 x's dtype, 2 float32
  bool ub = false, column_major = false, ue8m0 = false;
  int col_extra = 0;  // TMA alignment: the scale column stride rows + col_extra
  int sa = 1, sb = 1;  // static scale shape over (rows, k)
};

template <class T>
void run(const std::string& label, Opts o) {
  ++cases;
  const int R = o.rows, k = o.k, xk = o.src == QSource::kSilu ? 2 * k : k, xs = xk + o.pad;
  std::vector<T> x(static_cast<size_t>(R) * xs + 8), res(static_cast<size_t>(R) * (k + o.pad) + 8), w(k);
  std::vector<float> wf(k);
  for (auto& v : x) v = of<T>(quarter());
  for (auto& v : res) v = of<T>(quarter());
  for (int i = 0; i < k; ++i) {
    wf[i] = 1.0f + static_cast<float>(std::uniform_int_distribution<int>(-4, 4)(rng)) / 8;
    w[i] = of<T>(wf[i]);
  }
  // reference source values, rounded to T as the kernel
  std::vector<float> y(static_cast<size_t>(R) * k);
  std::vector<T> rout_ref(static_cast<size_t>(R) * k);
  for (int r = 0; r < R; ++r) {
    float ss = 0;
    for (int i = 0; i < k; ++i) {
      float v;
      if (o.src == QSource::kSilu) {
        const float a = f32(x[r * xs + i]), b = f32(x[r * xs + k + i]);
        v = f32(of<T>(a / (1.0f + expf(-a)) * b));
      } else {
        v = f32(x[r * xs + i]);
        if (o.src == QSource::kAddNorm) {
          v = f32(of<T>(v + f32(res[r * (k + o.pad) + i])));
          rout_ref[r * k + i] = of<T>(v);
        }
      }
      y[r * k + i] = v;
      ss += v * v;  // exact: multiples of 1/16, far below 2^24
    }
    if (o.src == QSource::kNorm || o.src == QSource::kAddNorm) {
      const float inv = rsqrtf(ss / static_cast<float>(k) + 1e-6f);
      for (int i = 0; i < k; ++i) {
        float v = y[r * k + i] * inv;
        if (o.weight) v = v * (o.weight == 2 ? wf[i] : f32(w[i]));
        y[r * k + i] = f32(of<T>(v));
      }
    }
  }
  const int G = (k + o.group - 1) / o.group, col = R + o.col_extra;
  std::vector<uint8_t> qref(static_cast<size_t>(R) * k);
  std::vector<float> sref(o.mode == QMode::kGroup ? static_cast<size_t>(G) * col + R * G : R, -7.0f);
  std::vector<float> sscale(static_cast<size_t>(o.sa) * o.sb);
  for (auto& v : sscale) v = 0.01f * static_cast<float>(std::uniform_int_distribution<int>(1, 100)(rng));
  const float ubv = 0.5f;
  float tamax = 0;
  for (float v : y) tamax = std::fmax(tamax, std::fabs(v));
  for (int r = 0; r < R; ++r) {
    const float* yr = &y[r * k];
    if (o.mode == QMode::kGroup) {
      for (int g = 0; g < G; ++g) {
        float a = 0;
        const int g1 = std::min(k, (g + 1) * o.group);
        for (int i = g * o.group; i < g1; ++i) a = std::fmax(a, std::fabs(yr[i]));
        const float s = dscale(a, o.ue8m0);
        sref[o.column_major ? g * col + r : r * G + g] = s;
        for (int i = g * o.group; i < g1; ++i) qref[r * k + i] = fp8(yr[i] / s);
      }
    } else if (o.mode == QMode::kStatic) {
      const float* srow = &sscale[(o.sa == 1 ? 0 : r / (R / o.sa)) * o.sb];
      for (int i = 0; i < k; ++i) qref[r * k + i] = fp8(yr[i] * (1.0f / srow[i / (k / o.sb)]));
    } else {
      float a = tamax;
      if (o.mode == QMode::kToken) {
        a = 0;
        for (int i = 0; i < k; ++i) a = std::fmax(a, std::fabs(yr[i]));
        if (o.ub) a = a > ubv ? ubv : a;
      }
      const float s = dscale(a, false);
      sref[o.mode == QMode::kToken ? r : 0] = s;
      for (int i = 0; i < k; ++i) qref[r * k + i] = fp8(yr[i] * (1.0f / s));
    }
  }
  // the launch, as the bindings set it
  std::vector<uint8_t> q(static_cast<size_t>(R) * k + 64, 0xA5);
  std::vector<float> sc(sref.size(), -7.0f);
  std::vector<T> rout(static_cast<size_t>(R) * k + 8);
  float amax = 0, ub = ubv;
  QuantLaunch l{};
  l.dtype = qd<T>();
  l.source = o.src;
  l.mode = o.mode == QMode::kTensor ? QMode::kAmax : o.mode;
  l.rows = R;
  l.k = k;
  l.x = x.data();
  l.x_stride = xs;
  l.residual = res.data();
  l.r_stride = k + o.pad;
  l.res_out = rout.data();
  l.weight = o.weight == 0 ? nullptr : (o.weight == 2 ? static_cast<const void*>(wf.data()) : w.data());
  l.weight_f32 = o.weight == 2;
  l.eps = 1e-6f;
  l.q = q.data();
  l.fp8_max = 448.0f;
  l.min_scale = kMin;
  l.scale = sscale.data();
  l.sa = o.sa;
  l.sb = o.sb;
  l.m_rows = R;
  l.scales = sc.data();
  l.scale_ub = o.ub ? &ub : nullptr;
  l.group = o.group;
  l.groups = G;
  l.col_stride = o.column_major ? col : G;
  l.batch_stride = static_cast<int64_t>(G) * l.col_stride;
  l.column_major = o.column_major;
  l.ue8m0 = o.ue8m0;
  l.amax = &amax;
  launch_quant(l, nullptr);
  if (o.mode == QMode::kTensor) {
    l.mode = QMode::kTensor;
    if (o.src == QSource::kAddNorm) {
      l.source = QSource::kNorm;
      l.x = l.res_out;
      l.x_stride = k;
    }
    launch_quant(l, nullptr);
  }
  int bad = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const int want = i < qref.size() ? qref[i] : 0xA5;
    if (q[i] != want && bad++ < 3) printf("  %s: q[%zu] = %d, want %d\n", label.c_str(), i, q[i], want);
  }
  const size_t ns = o.mode == QMode::kStatic ? 0 : (o.mode == QMode::kTensor ? 1 : sref.size());
  for (size_t i = 0; i < ns; ++i) {
    if (std::memcmp(&sc[i], &sref[i], 4) != 0 && bad++ < 3) {
      printf("  %s: scale[%zu] = %g, want %g\n", label.c_str(), i, sc[i], sref[i]);
    }
  }
  if (o.src == QSource::kAddNorm) {
    for (size_t i = 0; i < rout_ref.size(); ++i) {
      if (std::memcmp(&rout[i], &rout_ref[i], sizeof(T)) != 0 && bad++ < 3) printf("  %s: residual[%zu]\n", label.c_str(), i);
    }
  }
  if (bad) {
    ++fails;
    printf("FAIL %s (%d bad)\n", label.c_str(), bad);
  }
}

const char* src_name(QSource s) {
  return s == QSource::kPlain ? "x" : s == QSource::kNorm ? "norm" : s == QSource::kAddNorm ? "addnorm" : "silu";
}

// Every source in every row mode at row length k (pad: extra elements per row).
template <class T>
void rows(const char* dt, int k, int pad, int gk) {
  for (QSource s : {QSource::kPlain, QSource::kNorm, QSource::kAddNorm, QSource::kSilu}) {
    const std::string b = std::string(dt) + " " + src_name(s) + " k=" + std::to_string(k) + " pad=" + std::to_string(pad);
    Opts o;
    o.src = s;
    o.k = k;
    o.pad = pad;
    o.mode = QMode::kStatic;
    run<T>(b + " static tensor", o);
    o.sb = k;
    o.weight = 2;
    run<T>(b + " static channel w32", o);
    o.sb = k / gk;
    o.sa = 3;
    o.weight = 0;
    run<T>(b + " static token x column groups", o);
    o = Opts{};
    o.src = s;
    o.k = k;
    o.pad = pad;
    o.mode = QMode::kToken;
    run<T>(b + " token", o);
    o.ub = true;
    run<T>(b + " token ub", o);
    o.ub = false;
    o.mode = QMode::kTensor;
    run<T>(b + " tensor", o);
  }
}

// Every source in the group modes at row length k, group g.
template <class T>
void groups(const char* dt, int k, int g, int pad) {
  for (QSource s : {QSource::kPlain, QSource::kNorm, QSource::kAddNorm, QSource::kSilu}) {
    const std::string b = std::string(dt) + " " + src_name(s) + " k=" + std::to_string(k) + " g=" + std::to_string(g) + " pad=" + std::to_string(pad);
    Opts o;
    o.src = s;
    o.k = k;
    o.group = g;
    o.pad = pad;
    o.mode = QMode::kGroup;
    run<T>(b + " row-major", o);
    o.column_major = true;
    o.ue8m0 = true;
    run<T>(b + " column-major ue8m0", o);
    o.col_extra = 3;
    o.ue8m0 = false;
    o.weight = 2;
    run<T>(b + " column-major TMA", o);
  }
}

// argv[1] == "quick": one case per path (the test suite's run, a few seconds); else all.
int main(int argc, char** argv) {
  using bf = __nv_bfloat16;
  if (argc > 1 && std::string(argv[1]) == "quick") {
    rows<bf>("bf16", 1003, 0, 17);     // resident, element-wise
    groups<bf>("bf16", 1000, 128, 0);  // 4-lane teams, ragged last group
    groups<bf>("bf16", 1000, 100, 0);  // partial chunks
    // past the registers (two passes; the fused sources through shared memory), 512 threads:
    // a few modes only (each such block is 512 host threads)
    Opts o;
    o.rows = 2;
    o.k = 8196;
    o.pad = 2;
    for (QSource s : {QSource::kPlain, QSource::kNorm, QSource::kAddNorm, QSource::kSilu}) {
      o.src = s;
      o.mode = s == QSource::kAddNorm ? QMode::kTensor : QMode::kToken;
      run<float>(std::string("fp32 k=8196 ") + src_name(s), o);
    }
    o = Opts{};
    o.rows = 2;
    o.mode = QMode::kGroup;
    o.src = QSource::kAddNorm;
    o.k = 4096;
    o.group = 1024;  // groups past the registers
    run<float>("fp32 addnorm k=4096 g=1024", o);
    o.k = 9600;
    o.group = 16;  // one-lane teams, two passes of teams
    o.column_major = true;
    run<__nv_bfloat16>("bf16 addnorm k=9600 g=16 column-major", o);
    printf("%d of %d cases failed\n", fails, cases);
    return fails ? 1 : 0;
  }
  // rows: one chunk; resident at 32, 128, 512 threads; past the registers (two passes, shared
  // memory for the fused sources); element-wise (odd pad or k)
  rows<bf>("bf16", 8, 0, 4);
  rows<bf>("bf16", 1000, 0, 100);
  rows<bf>("bf16", 1003, 0, 17);
  rows<bf>("bf16", 4096, 8, 512);
  rows<bf>("bf16", 4096, 1, 512);
  rows<bf>("bf16", 16384, 0, 1024);
  rows<bf>("bf16", 16392, 0, 8);
  rows<__half>("fp16", 1000, 0, 100);
  rows<float>("fp32", 1000, 4, 100);
  rows<float>("fp32", 8192, 0, 64);
  rows<float>("fp32", 8196, 2, 4);
  // groups: 1..32 lanes, ragged, partial chunks, past the registers, several passes of teams
  groups<bf>("bf16", 4096, 128, 0);
  groups<bf>("bf16", 1000, 128, 0);
  groups<bf>("bf16", 1003, 128, 0);
  groups<bf>("bf16", 1000, 100, 0);
  groups<bf>("bf16", 100, 3, 0);
  groups<bf>("bf16", 512, 8, 8);
  groups<bf>("bf16", 4096, 2048, 0);
  groups<bf>("bf16", 9600, 16, 0);
  groups<bf>("bf16", 19200, 64, 0);
  groups<__half>("fp16", 1024, 128, 1);
  groups<float>("fp32", 4096, 128, 0);
  groups<float>("fp32", 1000, 128, 4);
  groups<float>("fp32", 4096, 1024, 0);
  printf("%d of %d cases failed\n", fails, cases);
  return fails ? 1 : 0;
}
