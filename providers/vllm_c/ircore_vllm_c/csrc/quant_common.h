// Host-side pieces of the fp8 quant bindings that the CPU and CUDA files share.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include <optional>
#include <utility>
#include <vector>

namespace ircore_vllm_c {

// The quantised output: x's shape with last dimension k, dimension 0 grown to `padding` rows
// (num_token_padding) when that is more, the padding rows zeroed (+0 in both fp8 formats).
inline at::Tensor new_q(const at::Tensor& x, int64_t k, at::ScalarType fp8_dtype,
                        std::optional<int64_t> padding) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = k;
  if (padding && *padding > sizes[0]) sizes[0] = *padding;
  at::Tensor q = at::empty(sizes, x.options().dtype(fp8_dtype));
  if (q.size(0) > x.size(0)) q.narrow(0, x.size(0), q.size(0) - x.size(0)).view(at::kByte).zero_();
  return q;
}

// The scales of a group quant op, allocated in the layout the call asks for (the natives'
// layout_scales): row-major x.shape[:-1] + (groups,); column-major, strides (..., 1, M); with
// scale_alignment > 1 on 2-D x, column-major with the column stride M rounded up to a multiple
// of 16 / scale_alignment (DeepGEMM's TMA alignment). Returns the tensor and the column stride
// the kernels address it by (m unless aligned). m is the kernels' M, at least 1 for their row
// arithmetic; the aligned layout takes x's own M, so no rows give (0, groups), as the fake says.
inline std::pair<at::Tensor, int64_t> group_scales_out(const at::Tensor& x, int64_t m,
                                                       int64_t groups, bool column_major,
                                                       int64_t scale_alignment) {
  std::vector<int64_t> ss(x.sizes().begin(), x.sizes().end());
  ss.back() = groups;
  const auto fopt = x.options().dtype(at::ScalarType::Float);
  if (!column_major) return {at::empty(ss, fopt), m};
  if (scale_alignment > 1 && x.dim() == 2) {
    const int64_t rows = x.size(0);
    const int64_t step = 16 / scale_alignment;
    const int64_t col = (rows + step - 1) / step * step;  // the native's tma_aligned(M)
    return {at::empty_strided({rows, groups}, {1, col}, fopt), col};
  }
  std::swap(ss[ss.size() - 1], ss[ss.size() - 2]);
  return {at::empty(ss, fopt).transpose(-2, -1), m};  // strides (..., 1, M)
}

// The dynamic ops' scale: x.shape[:-1] + (1,) per token, (1,) per tensor.
inline at::Tensor dynamic_scale_out(const at::Tensor& x, bool per_token) {
  const auto fopt = x.options().dtype(at::ScalarType::Float);
  if (!per_token) return at::empty({1}, fopt);
  std::vector<int64_t> ss(x.sizes().begin(), x.sizes().end());
  ss.back() = 1;
  return at::empty(ss, fopt);
}

// The group mode's fields of a kernel's arguments (the CPU kernels' Args and the CUDA launch's
// QuantLaunch name them alike): scales from group_scales_out with its column stride.
template <class L>
void set_group_fields(L& l, const at::Tensor& scales, int64_t group, int64_t groups,
                      bool column_major, bool ue8m0, int64_t col_stride) {
  l.scales = scales.data_ptr<float>();
  l.group = group;
  l.groups = groups;
  l.column_major = column_major;
  l.ue8m0 = ue8m0;
  l.col_stride = col_stride;
  l.batch_stride = groups * col_stride;
}

}  // namespace ircore_vllm_c
