// The gated activations' op schemas (a fragment of this provider's namespace, torch.ops.ircore_vllm_c)
// and their CPU kernels: gelu_and_mul, mul_and_silu, fatrelu_and_mul, swigluoai_and_mul. Each reads
// rows of one row stride directly and any other layout through a contiguous copy (as
// silu_and_mul), computes in fp32 and rounds once to x's dtype; AVX2 and AVX-512 copies of the
// row kernels (cpu_activation_isa.inc) are picked at run time as the other ops' are.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <string>

#include "act_common.h"
#include "cpu_activation.h"
#include "cpu_common.h"
#include "ops_common.h"

namespace ircore_vllm_c {
namespace {

// As cpu_ops.cpp's: rows below this many elements per task are not worth a thread handoff.
constexpr int64_t kMinElemsPerTask = 16384;

// Runs `body(out_ptr, in_ptr, in_stride, d, begin, end)` over the rows of x (a contiguous copy
// when x is not rows of one stride) into a new output of x's shape with the last dim halved.
template <class Body>
at::Tensor run_rows(const char* op, const at::Tensor& x, Body body) {
  check_act_args(op, x);
  TORCH_CHECK(x.device().is_cpu(), "ircore_vllm_c.", op, ": expected a CPU tensor, got ", x.device());
  at::Tensor out = at::empty(half_last_dim(x), x.options());
  if (out.numel() == 0) return out;
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const int64_t d = x.size(-1) / 2;
  void* o = out.data_ptr();
  const void* i = xin.data_ptr();
  const int64_t stride = rows.stride;
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(2 * d, 1));
  at::parallel_for(0, rows.rows, grain, [&](int64_t b, int64_t e) { body(o, i, stride, d, b, e); });
  return out;
}

at::Tensor gated_cpu(const char* op, const at::Tensor& x, GatedAct act, float param) {
  const cpu::Isa isa = cpu::selected_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  return run_rows(op, x, [&](void* o, const void* i, int64_t s, int64_t d, int64_t b, int64_t e) {
    cpu::gated_act_rows(isa, dt, act, param, o, d, i, s, d, b, e);
  });
}

at::Tensor gelu_and_mul_cpu(const at::Tensor& x, const std::string& approximate) {
  return gated_cpu("gelu_and_mul", x, gelu_mode(approximate), 0.0f);
}

at::Tensor mul_and_silu_cpu(const at::Tensor& x) {
  return gated_cpu("mul_and_silu", x, GatedAct::kMulSilu, 0.0f);
}

at::Tensor fatrelu_and_mul_cpu(const at::Tensor& x, double threshold) {
  return gated_cpu("fatrelu_and_mul", x, GatedAct::kFatrelu, static_cast<float>(threshold));
}

at::Tensor swigluoai_and_mul_cpu(const at::Tensor& x, double alpha, double limit) {
  check_swiglu_params(alpha, limit);
  const cpu::Isa isa = cpu::selected_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  const float a = static_cast<float>(alpha);
  const float l = static_cast<float>(limit);
  return run_rows("swigluoai_and_mul", x,
                  [&](void* o, const void* i, int64_t s, int64_t d, int64_t b, int64_t e) {
                    cpu::swigluoai_rows(isa, dt, a, l, o, d, i, s, d, b, e);
                  });
}

}  // namespace
}  // namespace ircore_vllm_c

TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def("gelu_and_mul(Tensor x, str approximate=\"none\") -> Tensor");
  m.def("mul_and_silu(Tensor x) -> Tensor");
  m.def("fatrelu_and_mul(Tensor x, float threshold=0.0) -> Tensor");
  m.def("swigluoai_and_mul(Tensor x, float alpha=1.702, float limit=7.0) -> Tensor");
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CPU, m) {
  m.impl("gelu_and_mul", &ircore_vllm_c::gelu_and_mul_cpu);
  m.impl("mul_and_silu", &ircore_vllm_c::mul_and_silu_cpu);
  m.impl("fatrelu_and_mul", &ircore_vllm_c::fatrelu_and_mul_cpu);
  m.impl("swigluoai_and_mul", &ircore_vllm_c::swigluoai_and_mul_cpu);
}
