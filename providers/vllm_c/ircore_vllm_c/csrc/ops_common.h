// Argument checks and row views shared by the CPU and CUDA bindings, so both devices accept and
// reject exactly the same calls with the same messages.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <vector>

namespace ircore_vllm_c {

// A tensor seen as `rows` rows of its last dimension, row r starting at data + r * stride.
struct Rows {
  int64_t rows;
  int64_t stride;
};

// The row view of x, or nullopt when x is not [rows, hidden] with a unit last stride and one
// row stride (leading dimensions collapse into rows when their strides chain; size-1 dims are
// ignored). Rows may overlap (stride < hidden, e.g. expanded tensors): fine for reading.
inline std::optional<Rows> as_rows(const at::Tensor& x) {
  const int64_t nd = x.dim();
  const int64_t hidden = x.size(nd - 1);
  if (hidden > 1 && x.stride(nd - 1) != 1) return std::nullopt;
  int64_t rows = 1;
  int64_t stride = hidden;
  int64_t expected = 0;
  bool have = false;
  for (int64_t d = nd - 2; d >= 0; --d) {
    const int64_t size = x.size(d);
    if (size == 1) continue;
    if (!have) {
      stride = x.stride(d);
      expected = stride * size;
      have = true;
    } else {
      if (x.stride(d) != expected) return std::nullopt;
      expected *= size;
    }
    rows *= size;
  }
  return Rows{rows, stride};
}

// As as_rows, but also requires rows not to overlap, so the view can be written in place.
inline std::optional<Rows> as_writable_rows(const at::Tensor& x) {
  auto r = as_rows(x);
  if (r && r->rows > 1 && r->stride < x.size(-1)) return std::nullopt;
  return r;
}

inline bool is_supported_dtype(at::ScalarType t) {
  return t == at::ScalarType::Float || t == at::ScalarType::Half ||
         t == at::ScalarType::BFloat16;
}

inline void check_x(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1, "ircore_vllm_c.", op, ": x must have at least one dimension");
  TORCH_CHECK(is_supported_dtype(x.scalar_type()), "ircore_vllm_c.", op,
              ": x must be float32, float16 or bfloat16, got ", x.scalar_type());
}

// Checks the norm arguments; returns the variance size and the weight made contiguous
// (undefined when there is no weight).
inline int64_t check_norm_args(const char* op, const at::Tensor& x,
                               const std::optional<at::Tensor>& weight,
                               std::optional<int64_t> variance_size, at::Tensor& w_out) {
  check_x(op, x);
  const int64_t hidden = x.size(-1);
  const int64_t vs = variance_size.has_value() ? *variance_size : hidden;
  TORCH_CHECK(vs >= 1 && vs <= hidden, "ircore_vllm_c.", op, ": variance_size must be in [1, ",
              hidden, "], got ", vs);
  if (weight.has_value() && weight->defined()) {
    const at::Tensor& w = *weight;
    TORCH_CHECK(w.scalar_type() == x.scalar_type() || w.scalar_type() == at::ScalarType::Float,
                "ircore_vllm_c.", op, ": weight dtype must be x's (", x.scalar_type(),
                ") or float32, got ", w.scalar_type());
    TORCH_CHECK(w.dim() == 1 && w.size(0) == hidden, "ircore_vllm_c.", op,
                ": weight must have shape [", hidden, "], got ", w.sizes());
    TORCH_CHECK(w.device() == x.device(), "ircore_vllm_c.", op, ": weight is on ", w.device(),
                ", x on ", x.device());
    w_out = w.contiguous();
  } else {
    w_out = at::Tensor();
  }
  return vs;
}

inline void check_residual(const char* op, const at::Tensor& x, const at::Tensor& residual) {
  TORCH_CHECK(residual.sizes() == x.sizes(), "ircore_vllm_c.", op,
              ": residual must have the shape of x ", x.sizes(), ", got ", residual.sizes());
  TORCH_CHECK(residual.scalar_type() == x.scalar_type(), "ircore_vllm_c.", op,
              ": residual dtype must equal x dtype (", x.scalar_type(), "), got ",
              residual.scalar_type());
  TORCH_CHECK(residual.device() == x.device(), "ircore_vllm_c.", op, ": residual is on ",
              residual.device(), ", x on ", x.device());
}

inline void check_silu_args(const at::Tensor& x) {
  check_x("silu_and_mul", x);
  TORCH_CHECK(x.size(-1) % 2 == 0,
              "ircore_vllm_c.silu_and_mul: the last dimension of x must be even, got ",
              x.size(-1));
}

inline std::vector<int64_t> silu_out_sizes(const at::Tensor& x) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() /= 2;
  return sizes;
}

// `out` of an out-variant op: contiguous, of the result's shape, x's dtype and device, and not
// overlapping x.
inline void check_out(const char* op, const at::Tensor& out, const at::Tensor& x,
                      c10::IntArrayRef sizes) {
  TORCH_CHECK(out.sizes() == sizes, "ircore_vllm_c.", op, "_out: out must have shape ", sizes,
              ", got ", out.sizes());
  TORCH_CHECK(out.scalar_type() == x.scalar_type() && out.device() == x.device(),
              "ircore_vllm_c.", op, "_out: out must be ", x.scalar_type(), " on ", x.device());
  TORCH_CHECK(out.is_contiguous(), "ircore_vllm_c.", op, "_out: out must be contiguous");
}

}  // namespace ircore_vllm_c
