// Argument checks shared by the CPU and CUDA bindings, so both devices accept and reject exactly
// the same calls with the same messages. Built by the host C++ compiler into each library (see
// ops_common.h for why they are not inline).
#include <string>

#include "ops_common.h"

namespace ircore_vllm_c {

// Numbers in messages are formatted here, never by std::ostream: on the H200 image (torch
// 2.11.0+cu130) inserting a number into the stream TORCH_CHECK builds crashed inside extension
// code, CPU and CUDA libraries alike (libstdc++ locale facets); strings are inserted safely.
std::string num(int64_t v) { return std::to_string(v); }

std::string dims(c10::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(sizes[i]);
  }
  return out + "]";
}

void check_x(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1, "ircore_vllm_c.", op, ": x must have at least one dimension");
  TORCH_CHECK(is_supported_dtype(x.scalar_type()), "ircore_vllm_c.", op,
              ": x must be float32, float16 or bfloat16, got ", x.scalar_type());
}

// Checks the norm arguments; returns the variance size and the weight made contiguous
// (undefined when there is no weight).
int64_t check_norm_args(const char* op, const at::Tensor& x,
                               const std::optional<at::Tensor>& weight,
                               std::optional<int64_t> variance_size, at::Tensor& w_out) {
  check_x(op, x);
  const int64_t hidden = x.size(-1);
  const int64_t vs = variance_size.has_value() ? *variance_size : hidden;
  TORCH_CHECK(vs >= 1 && vs <= hidden, "ircore_vllm_c.", op, ": variance_size must be in [1, ",
              num(hidden), "], got ", num(vs));
  if (weight.has_value() && weight->defined()) {
    const at::Tensor& w = *weight;
    TORCH_CHECK(w.scalar_type() == x.scalar_type() || w.scalar_type() == at::ScalarType::Float,
                "ircore_vllm_c.", op, ": weight dtype must be x's (", x.scalar_type(),
                ") or float32, got ", w.scalar_type());
    TORCH_CHECK(w.dim() == 1 && w.size(0) == hidden, "ircore_vllm_c.", op,
                ": weight must have shape [", num(hidden), "], got ", dims(w.sizes()));
    TORCH_CHECK(w.device() == x.device(), "ircore_vllm_c.", op, ": weight is on ", w.device(),
                ", x on ", x.device());
    w_out = w.contiguous();
  } else {
    w_out = at::Tensor();
  }
  return vs;
}

int64_t check_fused_add_args(const at::Tensor& x, const at::Tensor& residual,
                             const std::optional<at::Tensor>& weight,
                             std::optional<int64_t> variance_size, at::Tensor& w_out) {
  const char* op = "fused_add_rms_norm";
  TORCH_CHECK(residual.sizes() == x.sizes(), "ircore_vllm_c.", op,
              ": residual must have the shape of x ", dims(x.sizes()), ", got ",
              dims(residual.sizes()));
  TORCH_CHECK(residual.scalar_type() == x.scalar_type(), "ircore_vllm_c.", op,
              ": residual dtype must equal x dtype (", x.scalar_type(), "), got ",
              residual.scalar_type());
  TORCH_CHECK(residual.device() == x.device(), "ircore_vllm_c.", op, ": residual is on ",
              residual.device(), ", x on ", x.device());
  return check_norm_args(op, x, weight, variance_size, w_out);
}

void check_silu_args(const at::Tensor& x) {
  check_x("silu_and_mul", x);
  TORCH_CHECK(x.size(-1) % 2 == 0,
              "ircore_vllm_c.silu_and_mul: the last dimension of x must be even, got ",
              num(x.size(-1)));
}

int64_t check_gated_args(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& weight,
                         std::optional<int64_t> group_size, at::Tensor& w_out) {
  const char* op = "rms_norm_gated";
  check_norm_args(op, x, weight, std::nullopt, w_out);
  TORCH_CHECK(gate.sizes() == x.sizes() && gate.scalar_type() == x.scalar_type() &&
                  gate.device() == x.device(),
              "ircore_vllm_c.rms_norm_gated: gate must have x's shape ", dims(x.sizes()),
              ", dtype and device, got ", dims(gate.sizes()), " ", gate.scalar_type());
  const int64_t hidden = x.size(-1);
  const int64_t group = group_size.has_value() ? *group_size : hidden;
  TORCH_CHECK(group >= 1 && group <= hidden && hidden % group == 0,
              "ircore_vllm_c.rms_norm_gated: group_size must divide ", num(hidden), ", got ",
              num(group));
  return group;
}

void check_layer_norm_args(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, at::Tensor& w_out,
                           at::Tensor& b_out) {
  check_x("layer_norm", x);
  const int64_t hidden = x.size(-1);
  const std::optional<at::Tensor>* args[2] = {&weight, &bias};
  at::Tensor* outs[2] = {&w_out, &b_out};
  const char* names[2] = {"weight", "bias"};
  for (int i = 0; i < 2; ++i) {
    const auto& t = *args[i];
    if (t.has_value() && t->defined()) {
      TORCH_CHECK(t->scalar_type() == x.scalar_type() && t->dim() == 1 && t->size(0) == hidden &&
                      t->device() == x.device(),
                  "ircore_vllm_c.layer_norm: ", names[i], " must be ", x.scalar_type(), " [",
                  num(hidden), "] on x's device, got ", t->scalar_type(), " ", dims(t->sizes()));
      *outs[i] = t->contiguous();
    } else {
      *outs[i] = at::Tensor();
    }
  }
}

// `out` of an out-variant op: contiguous, of the result's shape, x's dtype and device, and not
// overlapping x.
void check_out(const char* op, const at::Tensor& out, const at::Tensor& x,
                      c10::IntArrayRef sizes) {
  TORCH_CHECK(out.sizes() == sizes, "ircore_vllm_c.", op, "_out: out must have shape ",
              dims(sizes), ", got ", dims(out.sizes()));
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.device() == x.device(),
              "ircore_vllm_c.", op, "_out: out must be ", x.scalar_type(), " on ", x.device());
  TORCH_CHECK(out.is_contiguous(), "ircore_vllm_c.", op, "_out: out must be contiguous");
}

void check_cuda(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cuda(), "ircore_vllm_c.", op, ": expected a CUDA tensor, got ",
              x.device());
}

void check_sizes(const char* op, int64_t hidden, int64_t rows) {
  TORCH_CHECK(hidden < (int64_t{1} << 30), "ircore_vllm_c.", op, ": hidden size ", num(hidden),
              " too large");
  TORCH_CHECK(rows < (int64_t{1} << 31) - 1, "ircore_vllm_c.", op, ": too many rows (", num(rows),
              ")");
}

}  // namespace ircore_vllm_c
