// Torch bindings of the batch-invariant CUDA norms (cuda_norm_invariant.cu, through the launchers
// of cuda_norm_invariant.h): the ops `<op>_invariant`, with the default ops' schemas
// (cpu_ops.cpp), checks and row views (ops_common.h), which batch-invariant mode runs on CUDA
// tensors (impls.py). Why those launches are invariant: cuda_norm_invariant.cu.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "cuda_norm_invariant.h"
#include "ops_common.h"

namespace ircore_vllm_c {
namespace cuda {
bool use_pdl(int device);  // cuda_ops.cu: IRCORE_VLLM_C_PDL / _cuda_set_pdl, compute capability
}  // namespace cuda

namespace cuda_inv {
namespace {

InvDType inv_dtype(at::ScalarType t) {
  return t == at::ScalarType::Half       ? InvDType::kHalf
         : t == at::ScalarType::BFloat16 ? InvDType::kBFloat16
                                         : InvDType::kFloat;
}

cudaStream_t stream_of(const at::Tensor& x) {
  return c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
}

}  // namespace

at::Tensor rms_norm_invariant_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                   double epsilon, std::optional<int64_t> variance_size) {
  check_x("rms_norm", x);
  check_cuda("rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_norm_args("rms_norm", x, weight, variance_size, w);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const int64_t hidden = x.size(-1);
  check_sizes("rms_norm", hidden, rows.rows);
  InvRmsLaunch l{};
  l.dtype = inv_dtype(x.scalar_type());
  l.fused = false;
  l.out = out.data_ptr();
  l.out_stride = hidden;
  l.in = xin.data_ptr();
  l.in_stride = rows.stride;
  l.w = w.defined() ? w.data_ptr() : nullptr;
  l.w32 = w.defined() && w.scalar_type() != x.scalar_type();
  l.hidden = static_cast<int>(hidden);
  l.var_size = static_cast<int>(vs);
  l.eps = static_cast<float>(epsilon);
  l.rows = rows.rows;
  l.pdl = cuda::use_pdl(x.device().index());
  C10_CUDA_CHECK(launch_rms_norm(l, stream_of(x)));
  return out;
}

void fused_add_rms_norm_invariant_cuda(at::Tensor& x, at::Tensor& residual,
                                       const std::optional<at::Tensor>& weight, double epsilon,
                                       std::optional<int64_t> variance_size) {
  check_cuda("fused_add_rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_fused_add_args(x, residual, weight, variance_size, w);
  if (x.numel() == 0) return;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xw, rw;
  const Rows xr = writable_rows_of(x, xw);
  const Rows rr = writable_rows_of(residual, rw);
  const int64_t hidden = x.size(-1);
  check_sizes("fused_add_rms_norm", hidden, xr.rows);
  InvRmsLaunch l{};
  l.dtype = inv_dtype(x.scalar_type());
  l.fused = true;
  l.out = xw.data_ptr();
  l.out_stride = xr.stride;
  l.in = l.out;
  l.in_stride = xr.stride;
  l.res = rw.data_ptr();
  l.res_stride = rr.stride;
  l.w = w.defined() ? w.data_ptr() : nullptr;
  l.w32 = w.defined() && w.scalar_type() != x.scalar_type();
  l.hidden = static_cast<int>(hidden);
  l.var_size = static_cast<int>(vs);
  l.eps = static_cast<float>(epsilon);
  l.rows = xr.rows;
  l.pdl = cuda::use_pdl(x.device().index());
  C10_CUDA_CHECK(launch_rms_norm(l, stream_of(x)));
  copy_back(x, xw);
  copy_back(residual, rw);
}

at::Tensor rms_norm_gated_invariant_cuda(const at::Tensor& x, const at::Tensor& gate,
                                         const at::Tensor& weight, double epsilon,
                                         std::optional<int64_t> group_size, bool norm_before_gate,
                                         bool round_normalized) {
  check_x("rms_norm_gated", x);
  check_cuda("rms_norm_gated", x);
  at::Tensor w;
  const int64_t group = check_gated_args(x, gate, weight, group_size, w);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin, gin;
  const Rows xr = rows_of(x, xin);
  const Rows gr = rows_of(gate, gin);
  const int64_t hidden = x.size(-1);
  check_sizes("rms_norm_gated", hidden, xr.rows * (hidden / group));
  InvGatedLaunch l{};
  l.dtype = inv_dtype(x.scalar_type());
  l.out = out.data_ptr();
  l.in = xin.data_ptr();
  l.in_stride = xr.stride;
  l.gate = gin.data_ptr();
  l.gate_stride = gr.stride;
  l.w = w.data_ptr();
  l.w32 = w.scalar_type() != x.scalar_type();
  l.hidden = static_cast<int>(hidden);
  l.group = static_cast<int>(group);
  l.rows = xr.rows;
  l.eps = static_cast<float>(epsilon);
  l.norm_before_gate = norm_before_gate;
  l.round_normalized = round_normalized;
  l.pdl = cuda::use_pdl(x.device().index());
  C10_CUDA_CHECK(launch_gated(l, stream_of(x)));
  return out;
}

at::Tensor layer_norm_invariant_cuda(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                     const std::optional<at::Tensor>& bias, double epsilon) {
  check_x("layer_norm", x);
  check_cuda("layer_norm", x);
  at::Tensor w, b;
  check_layer_norm_args(x, weight, bias, w, b);
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor xin;
  const Rows xr = rows_of(x, xin);
  const int64_t hidden = x.size(-1);
  check_sizes("layer_norm", hidden, xr.rows);
  InvLayerNormLaunch l{};
  l.dtype = inv_dtype(x.scalar_type());
  l.out = out.data_ptr();
  l.in = xin.data_ptr();
  l.in_stride = xr.stride;
  l.w = w.defined() ? w.data_ptr() : nullptr;
  l.b = b.defined() ? b.data_ptr() : nullptr;
  l.hidden = static_cast<int>(hidden);
  l.rows = xr.rows;
  l.eps = static_cast<float>(epsilon);
  l.pdl = cuda::use_pdl(x.device().index());
  C10_CUDA_CHECK(launch_layer_norm(l, stream_of(x)));
  return out;
}

// [nv (0: the two-pass kernel), tpr, block] of the invariant rms_norm (fused: fused_add_rms_norm)
// launch for a row of `hidden` elements of `dtype`: for tests and benchmarks. It takes no row
// count: the launch does not depend on one.
std::vector<int64_t> invariant_norm_config(int64_t hidden, at::ScalarType dtype, bool fused) {
  TORCH_CHECK(hidden >= 1 && hidden < (int64_t{1} << 30),
              "ircore_vllm_c._cuda_invariant_norm_config: hidden must be in [1, 2**30)");
  const int elem = dtype == at::ScalarType::Float ? 4 : 2;
  const InvNormConfig c = inv_norm_config(static_cast<int>(hidden), 16 / elem, fused);
  return {c.nv, c.tpr, c.block};
}

}  // namespace cuda_inv
}  // namespace ircore_vllm_c

// The schemas: the default ops' (cpu_ops.cpp), so each is a drop-in for its op.
TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def(
      "rms_norm_invariant(Tensor x, Tensor? weight, float epsilon, int? variance_size=None) -> "
      "Tensor");
  m.def(
      "fused_add_rms_norm_invariant(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, "
      "float epsilon, int? variance_size=None) -> ()");
  m.def(
      "rms_norm_gated_invariant(Tensor x, Tensor gate, Tensor weight, float epsilon, "
      "int? group_size=None, bool norm_before_gate=False, bool round_normalized=False) -> Tensor");
  m.def("layer_norm_invariant(Tensor x, Tensor? weight, Tensor? bias, float epsilon) -> Tensor");
  m.def("_cuda_invariant_norm_config(int hidden, ScalarType dtype, bool fused=False) -> int[]",
        &ircore_vllm_c::cuda_inv::invariant_norm_config);
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CUDA, m) {
  m.impl("rms_norm_invariant", &ircore_vllm_c::cuda_inv::rms_norm_invariant_cuda);
  m.impl("fused_add_rms_norm_invariant",
         &ircore_vllm_c::cuda_inv::fused_add_rms_norm_invariant_cuda);
  m.impl("rms_norm_gated_invariant", &ircore_vllm_c::cuda_inv::rms_norm_gated_invariant_cuda);
  m.impl("layer_norm_invariant", &ircore_vllm_c::cuda_inv::layer_norm_invariant_cuda);
}
