// CUDA bindings of the fp8 quant ops and the fused norm/activation + quant ops (schemas in
// cpu_quant.cpp): the checks the kernels need on top of the core's, the outputs in the layouts
// the ops promise, then the launches of cuda_quant.cu on the current stream. Built by the host
// C++ compiler into the CUDA library (torch's CUDA headers here, none in the .cu). Inputs whose
// rows do not share one stride are read from a contiguous copy.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_quant.h"
#include "ops_common.h"
#include "quant_common.h"

namespace ircore_vllm_c {
namespace cuda_quant {
namespace {

using at::Tensor;
using OptT = std::optional<Tensor>;

QDType qdtype(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Half:
      return QDType::kHalf;
    case at::ScalarType::BFloat16:
      return QDType::kBFloat16;
    default:
      return QDType::kFloat;
  }
}

// 448 and 1 / (448 * 512), ircore's fp8_max / min_scale for e4m3fn (the only dtype taken).
constexpr float kFp8Max = 448.0f;
constexpr double kMinScale = 1.0 / (448.0 * 512.0);

void check_common(const char* op, const Tensor& x, at::ScalarType fp8_dtype, int64_t k,
                  bool row_in_smem) {
  TORCH_CHECK(x.device().is_cuda(), "ircore_vllm_c.", op, ": expected CUDA tensors, got ",
              x.device().str());
  TORCH_CHECK(is_supported_dtype(x.scalar_type()), "ircore_vllm_c.", op,
              ": x must be float32, float16 or bfloat16");
  TORCH_CHECK(x.dim() >= 2 && k > 0, "ircore_vllm_c.", op,
              ": x must have at least 2 dimensions and a non-empty last one");
  TORCH_CHECK(fp8_dtype == at::ScalarType::Float8_e4m3fn, "ircore_vllm_c.", op,
              ": only torch.float8_e4m3fn is computed here (e4m3fnuz runs native: the predicate "
              "declines it)");
  const int64_t bytes = k * static_cast<int64_t>(x.element_size());
  TORCH_CHECK(!row_in_smem || bytes <= kMaxRowBytes, "ircore_vllm_c.", op, ": a row of ",
              num(bytes), " bytes is over the ", num(kMaxRowBytes),
              " bytes of shared memory this kernel keeps it in (the predicate declines it)");
  const int64_t rows = k ? x.numel() / x.size(-1) : 0;
  TORCH_CHECK(rows < (int64_t{1} << 31) - 1 && k < (int64_t{1} << 30), "ircore_vllm_c.", op,
              ": too many rows or too long a row for one launch");
}

struct Prepared {
  QuantLaunch l{};
  Tensor keep[6];  // what the launch points into
};

// The launch for x (rows of x's last dimension, k quantised values each), its source filled in.
void set_source(Prepared& p, const char* op, QSource src, const Tensor& x, const Tensor* residual,
                const OptT& weight, double eps, at::ScalarType fp8_dtype) {
  const int64_t k = src == QSource::kSilu ? x.size(-1) / 2 : x.size(-1);
  check_common(op, x, fp8_dtype, k, src != QSource::kPlain);
  QuantLaunch& l = p.l;
  const Rows xr = rows_of(x, p.keep[0]);
  l.dtype = qdtype(x.scalar_type());
  l.source = src;
  l.rows = x.numel() / x.size(-1);
  l.k = k;
  l.x = p.keep[0].data_ptr();
  l.x_stride = xr.stride;
  l.fp8_max = kFp8Max;
  l.min_scale = static_cast<float>(kMinScale);
  l.eps = static_cast<float>(eps);
  l.m_rows = x.size(-2) > 0 ? x.size(-2) : 1;
  if (residual != nullptr) {
    const Rows rr = rows_of(*residual, p.keep[1]);
    l.residual = p.keep[1].data_ptr();
    l.r_stride = rr.stride;
    p.keep[2] = at::empty(x.sizes(), x.options());  // the residual output, contiguous
    l.res_out = p.keep[2].data_ptr();
  }
  if (weight && weight->defined()) {
    Tensor w = *weight;
    if (w.scalar_type() != x.scalar_type() && w.scalar_type() != at::ScalarType::Float) {
      w = w.to(at::ScalarType::Float);
    }
    p.keep[3] = w.contiguous();
    l.weight = p.keep[3].data_ptr();
    l.weight_f32 = p.keep[3].scalar_type() == at::ScalarType::Float;
  }
}

void launch(const Prepared& p, const Tensor& x) {
  C10_CUDA_CHECK(launch_quant(p.l, c10::cuda::getCurrentCUDAStream(x.get_device()).stream()));
}

// ------------------------------------------------------------------ static
Tensor static_impl(const char* op, QSource src, const Tensor& x, const Tensor* residual,
                   const OptT& weight, double eps, const Tensor& scale, at::ScalarType fp8_dtype,
                   std::optional<int64_t> padding, Tensor* res_out) {
  const c10::cuda::CUDAGuard guard(x.device());
  Prepared p;
  set_source(p, op, src, x, residual, weight, eps, fp8_dtype);
  QuantLaunch& l = p.l;
  // vLLM's _prep_static_scale: one element -> (1, 1); 1-D of length k -> (1, k); other 1-D ->
  // (L, 1); 2-D as given. Each size 1 or dividing (M, k) (the core checked it).
  Tensor s = scale.to(at::ScalarType::Float);
  if (s.numel() == 1) {
    s = s.reshape({1, 1});
  } else if (s.dim() == 1) {
    s = s.size(0) == l.k ? s.unsqueeze(0) : s.unsqueeze(1);
  }
  TORCH_CHECK(s.dim() == 2 && l.m_rows % s.size(0) == 0 && l.k % s.size(1) == 0,
              "ircore_vllm_c.", op, ": scale does not broadcast over x's last two dimensions");
  p.keep[4] = s.contiguous();
  l.mode = QMode::kStatic;
  l.scale = p.keep[4].data_ptr<float>();
  l.sa = s.size(0);
  l.sb = s.size(1);
  Tensor q = new_q(x, l.k, at::ScalarType::Float8_e4m3fn, padding);
  l.q = static_cast<uint8_t*>(q.data_ptr());
  launch(p, x);
  if (res_out) *res_out = p.keep[2];
  return q;
}

// ------------------------------------------------------------------ dynamic (per token / tensor)
std::tuple<Tensor, Tensor, Tensor> dynamic_impl(const char* op, QSource src, const Tensor& x,
                                                const Tensor* residual, const OptT& weight,
                                                double eps, bool per_token,
                                                at::ScalarType fp8_dtype, const OptT& scale_ub,
                                                std::optional<int64_t> padding) {
  const c10::cuda::CUDAGuard guard(x.device());
  Prepared p;
  set_source(p, op, src, x, residual, weight, eps, fp8_dtype);
  QuantLaunch& l = p.l;
  Tensor q = new_q(x, l.k, at::ScalarType::Float8_e4m3fn, padding);
  l.q = static_cast<uint8_t*>(q.data_ptr());
  TORCH_CHECK(per_token || l.rows > 0, "ircore_vllm_c.", op,
              ": a per-tensor scale needs at least one row");
  Tensor scale = dynamic_scale_out(x, per_token);
  l.scales = scale.data_ptr<float>();
  if (per_token || l.rows == 1) {
    // One row per tensor: its amax is the tensor's, so the per-token launch (one kernel, its scale
    // written at index 0) gives the two-launch path's bits; scale_ub applies per token only.
    l.mode = QMode::kToken;
    if (per_token && scale_ub && scale_ub->defined()) {
      p.keep[4] = scale_ub->to(at::ScalarType::Float).reshape({1}).contiguous();
      l.scale_ub = p.keep[4].data_ptr<float>();
    }
    launch(p, x);
  } else {
    p.keep[5] = at::empty({1}, scale.options());
    l.amax = p.keep[5].data_ptr<float>();
    l.mode = QMode::kAmax;  // every row's amax (and the residual) first
    launch(p, x);
    l.mode = QMode::kTensor;
    if (src == QSource::kAddNorm) {  // then the norm of the residual just written
      l.source = QSource::kNorm;
      l.x = l.res_out;
      l.x_stride = l.k;
    }
    launch(p, x);
  }
  return {q, scale, p.keep[2]};
}

// ------------------------------------------------------------------ group
std::tuple<Tensor, Tensor, Tensor> group_impl(const char* op, QSource src, const Tensor& x,
                                              const Tensor* residual, const OptT& weight,
                                              double eps, c10::IntArrayRef group_shape,
                                              bool column_major, bool use_ue8m0,
                                              at::ScalarType fp8_dtype, int64_t scale_alignment) {
  const c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(!group_shape.empty() && group_shape.back() >= 1, "ircore_vllm_c.", op,
              ": group_shape must end in a group size >= 1");
  Prepared p;
  set_source(p, op, src, x, residual, weight, eps, fp8_dtype);
  QuantLaunch& l = p.l;
  const int64_t g = group_shape.back();
  const int64_t groups = (l.k + g - 1) / g;
  const int64_t m = l.m_rows;
  auto [scales, col] = group_scales_out(x, m, groups, column_major, scale_alignment);
  Tensor q = new_q(x, l.k, at::ScalarType::Float8_e4m3fn, std::nullopt);
  l.q = static_cast<uint8_t*>(q.data_ptr());
  l.mode = QMode::kGroup;
  set_group_fields(l, scales, g, groups, column_major, use_ue8m0, col);
  launch(p, x);
  return {q, scales, p.keep[2]};
}

using QuantSource = QSource;
#include "quant_op_bindings.inc"  // the twelve ops' bindings, shared with the other device's

}  // namespace
}  // namespace cuda_quant
}  // namespace ircore_vllm_c

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) { IRC_QUANT_OP_IMPLS(m, ircore_vllm_c::cuda_quant); }
