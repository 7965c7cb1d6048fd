// Argument checks and row views shared by the CPU and CUDA bindings, so both devices accept and
// reject exactly the same calls with the same messages.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>
#include <vector>

namespace ircore_vllm_c {

// A tensor seen as `rows` rows of its last dimension, row r starting at data + r * stride.
struct Rows {
  int64_t rows;
  int64_t stride;
};

// The stride that steps through dims [0, end) of x as one flat index, when they chain (size-1
// dims ignored); nullopt when they do not; `none` when every one of them has size 1.
inline std::optional<int64_t> flat_stride(const at::Tensor& x, int64_t end, int64_t none = 0) {
  int64_t stride = none;
  int64_t expected = 0;
  bool have = false;
  for (int64_t d = end - 1; d >= 0; --d) {
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
  }
  return stride;
}

// The row view of x, or nullopt when x is not [rows, hidden] with a unit last stride and one
// row stride (leading dimensions collapse into rows when their strides chain; size-1 dims are
// ignored). Rows may overlap (stride < hidden, e.g. expanded tensors): fine for reading.
inline std::optional<Rows> as_rows(const at::Tensor& x) {
  const int64_t nd = x.dim();
  const int64_t hidden = x.size(nd - 1);
  if (hidden > 1 && x.stride(nd - 1) != 1) return std::nullopt;
  const auto stride = flat_stride(x, nd - 1, hidden);
  if (!stride) return std::nullopt;
  int64_t rows = 1;
  for (int64_t d = 0; d < nd - 1; ++d) rows *= x.size(d);
  return Rows{rows, *stride};
}

// As as_rows, but also requires rows not to overlap, so the view can be written in place.
inline std::optional<Rows> as_writable_rows(const at::Tensor& x) {
  auto r = as_rows(x);
  if (r && r->rows > 1 && r->stride < x.size(-1)) return std::nullopt;
  return r;
}

// t as rows: t itself where `view` (as_rows or as_writable_rows) takes its layout, else a
// contiguous copy. `holder` is set to the tensor the rows belong to (t or the copy): the kernel
// uses holder's data, which it keeps alive.
inline Rows rows_or_copy(const at::Tensor& t, at::Tensor& holder,
                         std::optional<Rows> (*view)(const at::Tensor&)) {
  holder = t;
  auto rows = view(holder);
  if (!rows) {
    holder = t.contiguous();
    rows = as_rows(holder);
  }
  return *rows;
}

// The rows a kernel reads.
inline Rows rows_of(const at::Tensor& t, at::Tensor& holder) {
  return rows_or_copy(t, holder, as_rows);
}

// The rows a kernel writes in place: where `holder` is a copy, copy_back(t, holder) writes the
// result into t after the kernel.
inline Rows writable_rows_of(const at::Tensor& t, at::Tensor& holder) {
  return rows_or_copy(t, holder, as_writable_rows);
}

inline void copy_back(at::Tensor& t, const at::Tensor& holder) {
  if (!holder.is_same(t)) t.copy_(holder);
}

inline bool is_supported_dtype(at::ScalarType t) {
  return t == at::ScalarType::Float || t == at::ScalarType::Half ||
         t == at::ScalarType::BFloat16;
}

// A number, and sizes as "[a, b]", for messages: TORCH_CHECK gets strings, never numbers to
// insert into its stream (checks.cpp says why).
std::string num(int64_t v);
std::string dims(c10::IntArrayRef sizes);

// Argument checks (defined in checks.cpp, where their messages are formatted without
// std::ostream number insertion: see there).
void check_x(const char* op, const at::Tensor& x);
// Checks the norm arguments; returns the variance size and the weight made contiguous
// (undefined when there is no weight).
int64_t check_norm_args(const char* op, const at::Tensor& x,
                        const std::optional<at::Tensor>& weight,
                        std::optional<int64_t> variance_size, at::Tensor& w_out);
// fused_add_rms_norm, after the device check: residual like x, then check_norm_args (returns
// the variance size; w_out as there).
int64_t check_fused_add_args(const at::Tensor& x, const at::Tensor& residual,
                             const std::optional<at::Tensor>& weight,
                             std::optional<int64_t> variance_size, at::Tensor& w_out);
void check_silu_args(const at::Tensor& x);
// rms_norm_gated: gate like x, the weight as check_norm_args's; returns the group size (hidden
// when group_size is None) and the weight made contiguous.
int64_t check_gated_args(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& weight,
                         std::optional<int64_t> group_size, at::Tensor& w_out);
// layer_norm: weight and bias (each optional) 1-D of size hidden, of x's dtype, on x's device;
// returned contiguous (undefined when absent).
void check_layer_norm_args(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& bias, at::Tensor& w_out,
                           at::Tensor& b_out);
// `out` of an out-variant op: contiguous, of the result's shape, x's dtype and device.
void check_out(const char* op, const at::Tensor& out, const at::Tensor& x,
               c10::IntArrayRef sizes);
void check_cuda(const char* op, const at::Tensor& x);
void check_sizes(const char* op, int64_t hidden, int64_t rows);

inline std::vector<int64_t> silu_out_sizes(const at::Tensor& x) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() /= 2;
  return sizes;
}

}  // namespace ircore_vllm_c
