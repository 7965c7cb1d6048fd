// CPU kernels of the fp8 quant ops and the fused norm/activation + quant ops whose schemas
// cpu_quant.cpp defines (the CUDA ones are cuda_quant.cu): one pass over each row where the
// natives (ircore/ops/_quant.py, _norm_quant.py) chain several torch ops over the whole tensor.
//
// Each row is computed by one thread, start to end (at::parallel_for over rows): a row's bits
// never depend on the batch or the thread count. The source of a row is x's row itself, or
// computed into a row buffer of x's dtype by this provider's own row kernels (cpu_kernels.h:
// rms_norm; fused_add_rms_norm, whose sum, rounded to x's dtype, is the residual output;
// silu_and_mul), so rounded to x's dtype exactly where the op's native rounds. Then it is
// quantised (cpu_quant_rows.cpp): a static scale (x * (1/s), vLLM's broadcast forms), one
// dynamic scale per row, per-group scales (x / s; use_ue8m0 rounds up to a power of two exactly,
// by frexp), or per tensor in two passes (every row's amax, their max in row order, then
// quantise). Every value is clamped to +-fp8_max (448 e4m3fn, 224 e4m3fnuz) before its cast, a
// NaN kept; amaxes propagate NaN as torch's amax.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_quant_rows.h"
#include "ops_common.h"
#include "quant_common.h"

namespace ircore_vllm_c {
namespace cpu_quant {
namespace {

using at::Tensor;
using OptT = std::optional<Tensor>;

// Rows below this many elements per task are not worth a thread handoff (as cpu_ops.cpp).
constexpr int64_t kMinElemsPerTask = 16384;

enum class Source { kPlain, kNorm, kAddNorm, kSilu };
enum class Mode { kStatic, kToken, kTensor, kGroup };

inline float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

struct Args {
  cpu::Isa isa;
  cpu::DType dt, wdt;
  int64_t esize;  // bytes per element of x
  bool fnuz;
  Source source;
  Mode mode;
  int64_t rows, k, m_rows;
  const char* x;
  int64_t x_stride;  // elements
  const char* residual;
  int64_t r_stride;
  char* res_out;  // contiguous rows of k (kAddNorm)
  const void* weight;  // nullptr: none; of wdt
  float eps;
  uint8_t* q;  // contiguous rows of k
  float fp8_max, min_scale;
  const float* inv;  // kStatic: 1/scale expanded to (sa, k) (nullptr: one scale, inv0)
  float inv0;
  int64_t sa;
  float* scales;  // kToken: one per row; kTensor: one; kGroup: see below
  const float* scale_ub;
  // kGroup: scale of (row, j) at scales + (row / m_rows) * batch_stride
  // + (column_major ? j * col_stride + row % m_rows : (row % m_rows) * groups + j)
  int64_t group, groups, col_stride, batch_stride;
  bool column_major, ue8m0;
};

// The dynamic scale of an amax, in fp32 as the natives: amax / fp8_max, rounded up to a power
// of two with ue8m0 (exactly: frexp's mantissa, as _quant.pow2_ceil; 0, NaN and inf kept), then
// floored at min_scale (a NaN stays NaN).
inline float dyn_scale(float amax, const Args& a, bool ue8m0) {
  float s = amax / a.fp8_max;
  if (ue8m0 && std::isfinite(s)) {
    int e;
    const float mant = std::frexp(s, &e);
    if (mant > 0.5f) s = std::ldexp(1.0f, e);
  }
  return s < a.min_scale ? a.min_scale : s;
}

// The row to quantise: x's row (kPlain), else computed into buf (k elements of x's dtype).
const char* source_row(const Args& a, int64_t row, char* buf) {
  const int64_t k = a.k;
  const char* x = a.x + row * a.x_stride * a.esize;
  switch (a.source) {
    case Source::kPlain:
      return x;
    case Source::kNorm:
      cpu::rms_norm_rows(a.isa, a.dt, a.wdt, buf, k, x, a.x_stride, a.weight, k, k, a.eps, 0, 1,
                         false);
      return buf;
    case Source::kAddNorm: {
      char* res = a.res_out + row * k * a.esize;
      std::memcpy(buf, x, k * a.esize);
      std::memcpy(res, a.residual + row * a.r_stride * a.esize, k * a.esize);
      cpu::fused_add_rms_norm_rows(a.isa, a.dt, a.wdt, buf, k, res, k, a.weight, k, k, a.eps, 0,
                                   1);
      return buf;
    }
    default:
      cpu::silu_and_mul_rows(a.isa, a.dt, buf, k, x, a.x_stride, k, 0, 1, false);
      return buf;
  }
}

// Quantises one row y (k values of x's dtype) by its mode; `tensor_scale`: kTensor's scale.
void quant_row(const Args& a, int64_t row, const char* y, float tensor_scale) {
  const int64_t k = a.k;
  uint8_t* q = a.q + row * k;
  if (a.mode == Mode::kGroup) {
    const int64_t rm = row % a.m_rows;
    const int64_t base = (row / a.m_rows) * a.batch_stride;
    for (int64_t gi = 0; gi < a.groups; ++gi) {
      const int64_t g0 = gi * a.group;
      const int64_t n = std::min(a.group, k - g0);
      const char* yg = y + g0 * a.esize;
      const float s = dyn_scale(float_of(cpu::quant_amax_bits(a.isa, a.dt, yg, n)), a, a.ue8m0);
      a.scales[base + (a.column_major ? gi * a.col_stride + rm : rm * a.groups + gi)] = s;
      cpu::quant_fp8(a.isa, a.dt, a.fnuz, yg, n, s, true, nullptr, a.fp8_max, q + g0);  // divides
    }
  } else if (a.mode == Mode::kStatic) {
    const float* inv = nullptr;
    if (a.inv != nullptr) inv = a.inv + (a.sa == 1 ? 0 : (row % a.m_rows) / (a.m_rows / a.sa)) * k;
    cpu::quant_fp8(a.isa, a.dt, a.fnuz, y, k, a.inv0, false, inv, a.fp8_max, q);
  } else {
    float s = tensor_scale;
    if (a.mode == Mode::kToken) {
      float amax = float_of(cpu::quant_amax_bits(a.isa, a.dt, y, k));
      if (a.scale_ub != nullptr && amax > *a.scale_ub) amax = *a.scale_ub;
      s = dyn_scale(amax, a, false);
      a.scales[row] = s;
    }
    cpu::quant_fp8(a.isa, a.dt, a.fnuz, y, k, 1.0f / s, false, nullptr, a.fp8_max, q);
  }
}

void run(const Args& a) {
  if (a.rows == 0) return;
  const int64_t k = a.k;
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(k, 1));
  const size_t row_bytes = static_cast<size_t>(k * a.esize);
  if (a.mode != Mode::kTensor) {
    at::parallel_for(0, a.rows, grain, [&](int64_t b, int64_t e) {
      std::vector<char> buf(a.source == Source::kPlain ? 0 : row_bytes);
      for (int64_t r = b; r < e; ++r) quant_row(a, r, source_row(a, r, buf.data()), 0.0f);
    });
    return;
  }
  // per tensor: every row's source (kept, unless it is x itself) and amax, the max over the rows
  // in row order, then quantise
  const bool keep = a.source != Source::kPlain;
  std::vector<char> all(keep ? static_cast<size_t>(a.rows) * row_bytes : 0);
  std::vector<uint32_t> amax(static_cast<size_t>(a.rows));
  at::parallel_for(0, a.rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const char* y = source_row(a, r, keep ? all.data() + r * row_bytes : nullptr);
      amax[r] = cpu::quant_amax_bits(a.isa, a.dt, y, k);
    }
  });
  uint32_t mx = 0;
  for (uint32_t v : amax) mx = std::max(mx, v);
  const float s = dyn_scale(float_of(mx), a, false);
  a.scales[0] = s;
  at::parallel_for(0, a.rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const char* y = keep ? all.data() + r * row_bytes : a.x + r * a.x_stride * a.esize;
      quant_row(a, r, y, s);
    }
  });
}

// ------------------------------------------------------------------ bindings
struct Prepared {
  Args a{};
  Tensor keep[5];  // what the kernel points into
};

void set_source(Prepared& p, const char* op, Source src, const Tensor& x, const Tensor* residual,
                const OptT& weight, double eps, at::ScalarType fp8_dtype) {
  TORCH_CHECK(x.device().is_cpu(), "ircore_vllm_c.", op, ": expected CPU tensors, got ",
              x.device().str());
  TORCH_CHECK(is_supported_dtype(x.scalar_type()), "ircore_vllm_c.", op,
              ": x must be float32, float16 or bfloat16");
  TORCH_CHECK(x.dim() >= 2 && x.size(-1) > 0, "ircore_vllm_c.", op,
              ": x must have at least 2 dimensions and a non-empty last one");
  TORCH_CHECK(src != Source::kSilu || x.size(-1) % 2 == 0, "ircore_vllm_c.", op,
              ": x's last dimension must be even ([gate, up])");
  TORCH_CHECK(fp8_dtype == at::ScalarType::Float8_e4m3fn ||
                  fp8_dtype == at::ScalarType::Float8_e4m3fnuz,
              "ircore_vllm_c.", op, ": fp8_dtype must be torch.float8_e4m3fn or float8_e4m3fnuz");
  Args& a = p.a;
  a.isa = cpu::selected_isa();
  a.dt = cpu_dtype(x.scalar_type());
  a.wdt = a.dt;
  a.esize = x.element_size();
  a.source = src;
  a.k = src == Source::kSilu ? x.size(-1) / 2 : x.size(-1);
  a.rows = x.numel() / x.size(-1);
  a.m_rows = x.size(-2) > 0 ? x.size(-2) : 1;
  const bool fnuz = fp8_dtype == at::ScalarType::Float8_e4m3fnuz;
  a.fnuz = fnuz;
  a.fp8_max = fnuz ? 224.0f : 448.0f;  // ircore's fp8_max (vLLM's 224 for e4m3fnuz)
  a.min_scale = static_cast<float>(1.0 / (static_cast<double>(a.fp8_max) * 512.0));
  a.eps = static_cast<float>(eps);
  const Rows xr = rows_of(x, p.keep[0]);
  a.x = static_cast<const char*>(p.keep[0].data_ptr());
  a.x_stride = xr.stride;
  if (residual != nullptr) {
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == x.scalar_type() &&
                    residual->device().is_cpu(),
                "ircore_vllm_c.", op, ": x_residual must be a CPU tensor of x's shape and dtype");
    const Rows rr = rows_of(*residual, p.keep[1]);
    a.residual = static_cast<const char*>(p.keep[1].data_ptr());
    a.r_stride = rr.stride;
    p.keep[2] = at::empty(x.sizes(), x.options());  // the residual output, contiguous
    a.res_out = static_cast<char*>(p.keep[2].data_ptr());
  }
  if (weight && weight->defined()) {
    TORCH_CHECK(weight->numel() == a.k, "ircore_vllm_c.", op, ": weight must have ", num(a.k),
                " elements (x's last dimension)");
    // of x's dtype as given, any other float dtype in fp32 (the native's weight.float())
    const bool same = weight->scalar_type() == x.scalar_type();
    p.keep[3] = (same ? *weight : weight->to(at::ScalarType::Float)).contiguous();
    a.wdt = same ? a.dt : cpu::DType::kFloat;
    a.weight = p.keep[3].data_ptr();
  }
}

// ------------------------------------------------------------------ static
Tensor static_impl(const char* op, Source src, const Tensor& x, const Tensor* residual,
                   const OptT& weight, double eps, const Tensor& scale, at::ScalarType fp8_dtype,
                   std::optional<int64_t> padding, Tensor* res_out) {
  Prepared p;
  set_source(p, op, src, x, residual, weight, eps, fp8_dtype);
  Args& a = p.a;
  // vLLM's _prep_static_scale: one element -> (1, 1); 1-D of length k -> (1, k); other 1-D ->
  // (L, 1); 2-D as given. Each size 1 or dividing (M, k) (the core checked it).
  Tensor s = scale.to(at::ScalarType::Float);
  if (s.numel() == 1) {
    s = s.reshape({1, 1});
  } else if (s.dim() == 1) {
    s = s.size(0) == a.k ? s.unsqueeze(0) : s.unsqueeze(1);
  }
  TORCH_CHECK(s.dim() == 2 && s.size(0) > 0 && s.size(1) > 0 && a.m_rows % s.size(0) == 0 &&
                  a.k % s.size(1) == 0,
              "ircore_vllm_c.", op, ": scale does not broadcast over x's last two dimensions");
  a.mode = Mode::kStatic;
  a.sa = s.size(0);
  if (s.numel() == 1) {
    a.inv0 = 1.0f / s.item<float>();  // the native's scale.reciprocal(), in fp32
  } else {  // 1 / scale per (row group, element): (sa, k)
    p.keep[4] = s.reciprocal().repeat_interleave(a.k / s.size(1), 1).expand({a.sa, a.k}).contiguous();
    a.inv = p.keep[4].data_ptr<float>();
  }
  Tensor q = new_q(x, a.k, fp8_dtype, padding);
  a.q = static_cast<uint8_t*>(q.data_ptr());
  run(a);
  if (res_out) *res_out = p.keep[2];
  return q;
}

// ------------------------------------------------------------------ dynamic (per token / tensor)
std::tuple<Tensor, Tensor, Tensor> dynamic_impl(const char* op, Source src, const Tensor& x,
                                                const Tensor* residual, const OptT& weight,
                                                double eps, bool per_token,
                                                at::ScalarType fp8_dtype, const OptT& scale_ub,
                                                std::optional<int64_t> padding) {
  Prepared p;
  set_source(p, op, src, x, residual, weight, eps, fp8_dtype);
  Args& a = p.a;
  Tensor q = new_q(x, a.k, fp8_dtype, padding);
  a.q = static_cast<uint8_t*>(q.data_ptr());
  TORCH_CHECK(per_token || a.rows > 0, "ircore_vllm_c.", op,
              ": a per-tensor scale needs at least one row");
  Tensor scale = dynamic_scale_out(x, per_token);
  if (per_token) {
    a.mode = Mode::kToken;
    if (scale_ub && scale_ub->defined()) {
      p.keep[4] = scale_ub->to(at::ScalarType::Float).reshape({1}).contiguous();
      a.scale_ub = p.keep[4].data_ptr<float>();
    }
  } else {
    a.mode = Mode::kTensor;
  }
  a.scales = scale.data_ptr<float>();
  run(a);
  return {q, scale, p.keep[2]};
}

// ------------------------------------------------------------------ group
std::tuple<Tensor, Tensor, Tensor> group_impl(const char* op, Source src, const Tensor& x,
                                              const Tensor* residual, const OptT& weight,
                                              double eps, c10::IntArrayRef group_shape,
                                              bool column_major, bool use_ue8m0,
                                              at::ScalarType fp8_dtype, int64_t scale_alignment) {
  TORCH_CHECK(!group_shape.empty() && group_shape.back() >= 1, "ircore_vllm_c.", op,
              ": group_shape must end in a group size >= 1");
  Prepared p;
  set_source(p, op, src, x, residual, weight, eps, fp8_dtype);
  Args& a = p.a;
  const int64_t g = group_shape.back();
  const int64_t groups = (a.k + g - 1) / g;
  const int64_t m = a.m_rows;
  auto [scales, col] = group_scales_out(x, m, groups, column_major, scale_alignment);
  Tensor q = new_q(x, a.k, fp8_dtype, std::nullopt);
  a.q = static_cast<uint8_t*>(q.data_ptr());
  a.mode = Mode::kGroup;
  set_group_fields(a, scales, g, groups, column_major, use_ue8m0, col);
  run(a);
  return {q, scales, p.keep[2]};
}

using QuantSource = Source;
#include "quant_op_bindings.inc"  // the twelve ops' bindings, shared with the other device's

}  // namespace
}  // namespace cpu_quant
}  // namespace ircore_vllm_c

TORCH_LIBRARY_IMPL(ircore_vllm_c, CPU, m) { IRC_QUANT_OP_IMPLS(m, ircore_vllm_c::cpu_quant); }
