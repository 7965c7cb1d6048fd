// The CPU kernel of block_scaled_mm_fp8 (ircore/ops/_scaled_mm.py, argument for argument), as the
// op block_scaled_mm_fp8_cpu: the schema, defined in the library every machine loads, and its CPU
// binding. Another name than the op's, since the implementation ircore registers is
// scaled_mm.py's function (this kernel on the CPU, torch._scaled_mm on CUDA), for which ircore
// defines torch.ops.ircore_vllm_c.block_scaled_mm_fp8 itself. The loops and the arithmetic are
// cpu_fp8_mm_kernels.cpp (cpu_fp8_mm.h).
//
// Where the native dequantizes the whole weight on every call (a [N, K] fp32 temporary) and
// multiplies through the BLAS, this widens the activations once, then each task computes the
// output columns of tiles of kTileRows weight rows for every activation row: with few rows
// straight from the weight's bytes, else from the tile widened into a buffer kept in L2. Tasks
// split the output columns (at::parallel_for over tiles); every output element's sums have one
// order, so the bits depend on neither M, the row's place nor the thread count (the provider
// claims batch invariance on the CPU).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "cpu_fp8_mm.h"
#include "cpu_kernels.h"

namespace ircore_vllm_c {
namespace {

using at::Tensor;

// Weight rows widened per task: 16 rows of K = 4096 are 256 KiB of fp32, within a core's L2.
constexpr int64_t kTileRows = 16;
// Multiply-adds below which a task is not worth a thread handoff.
constexpr int64_t kMinMacsPerTask = int64_t{1} << 18;

Tensor block_scaled_mm_fp8(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_a,
                           const Tensor& scale_b, c10::IntArrayRef block_size,
                           at::ScalarType out_dtype) {
  const char* op = "ircore_vllm_c.block_scaled_mm_fp8_cpu";
  TORCH_CHECK(a_in.device().is_cpu() && b_in.device().is_cpu() && scale_a.device().is_cpu() &&
                  scale_b.device().is_cpu(),
              op, ": expected CPU tensors");
  const auto fp8 = a_in.scalar_type();
  TORCH_CHECK(fp8 == at::ScalarType::Float8_e4m3fn || fp8 == at::ScalarType::Float8_e4m3fnuz, op,
              ": a must be torch.float8_e4m3fn or float8_e4m3fnuz");
  TORCH_CHECK(b_in.scalar_type() == fp8, op, ": b must have a's dtype");
  TORCH_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.size(1) == b_in.size(1), op,
              ": expected a [M, K] and b [N, K]");
  TORCH_CHECK(block_size.size() == 2 && block_size[0] >= 1 && block_size[1] >= 1, op,
              ": block_size must be [block_n, block_k] of positive ints");
  TORCH_CHECK(out_dtype == at::ScalarType::Float || out_dtype == at::ScalarType::Half ||
                  out_dtype == at::ScalarType::BFloat16,
              op, ": out_dtype must be float32, float16 or bfloat16");
  const int64_t m = a_in.size(0), k = a_in.size(1), n = b_in.size(0);
  const int64_t bn = block_size[0], bk = block_size[1];
  const int64_t groups = (k + bk - 1) / bk;
  TORCH_CHECK(scale_a.scalar_type() == at::ScalarType::Float &&
                  scale_b.scalar_type() == at::ScalarType::Float && scale_a.dim() == 2 &&
                  scale_b.dim() == 2 && scale_a.size(0) == m && scale_a.size(1) == groups &&
                  scale_b.size(0) == (n + bn - 1) / bn && scale_b.size(1) == groups,
              op, ": scales must be float32 [M, ceil(K / block_k)] and "
                  "[ceil(N / block_n), ceil(K / block_k)]");
  Tensor out = at::empty({m, n}, a_in.options().dtype(at::ScalarType::Float));
  if (m == 0 || n == 0) return out.to(out_dtype);
  const cpu::Isa isa = cpu::selected_isa();
  const bool fnuz = fp8 == at::ScalarType::Float8_e4m3fnuz;
  const Tensor a = a_in.contiguous(), b = b_in.contiguous();
  const int64_t kp = cpu::fp8_mm_group_width(bk);
  const int64_t kpad = groups * kp;

  // the activations, widened once (padded per group)
  Tensor af = at::empty({m, std::max<int64_t>(kpad, 1)}, out.options());
  const auto* ap = static_cast<const uint8_t*>(a.data_ptr());
  const auto* bp = static_cast<const uint8_t*>(b.data_ptr());
  float* afp = af.data_ptr<float>();
  const int64_t row_grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(k, 1));
  at::parallel_for(0, m, row_grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      cpu::fp8_widen_row(isa, fnuz, ap + r * k, k, bk, afp + r * kpad);
    }
  });

  cpu::Fp8MmTile base{};
  base.a = afp;
  base.m = m;
  base.k = k;
  base.bk = bk;
  base.bn = bn;
  base.groups = groups;
  base.kp = kp;
  base.sa = scale_a.data_ptr<float>();
  base.sa0 = scale_a.stride(0);
  base.sa1 = scale_a.stride(1);
  base.sb = scale_b.data_ptr<float>();
  base.sb0 = scale_b.stride(0);
  base.sb1 = scale_b.stride(1);
  base.out_stride = n;
  float* out_p = out.data_ptr<float>();
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t macs_per_tile = std::max<int64_t>(1, m * kpad * kTileRows);
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerTask / macs_per_tile);
  at::parallel_for(0, tiles, grain, [&](int64_t t0, int64_t t1) {
    // the widened tile (an odd tile's last row twice, as the AVX-512 path pairs rows), one row
    const auto row_floats = static_cast<size_t>(std::max<int64_t>(kpad, 1));
    std::unique_ptr<float[]> buf(new float[(kTileRows + 2) * row_floats]);
    cpu::Fp8MmTile t = base;
    t.buf = buf.get();
    t.row = buf.get() + (kTileRows + 1) * row_floats;
    std::unique_ptr<float[]> tot(new float[static_cast<size_t>(m * (kTileRows + 1) / 2 * 16)]);
    t.tot = tot.get();
    for (int64_t i = t0; i < t1; ++i) {
      t.n0 = i * kTileRows;
      t.nt = std::min(kTileRows, n - t.n0);
      t.b = bp + t.n0 * k;
      t.out = out_p + t.n0;
      cpu::fp8_mm_tile(isa, fnuz, t);
    }
  });
  return out_dtype == at::ScalarType::Float ? out : out.to(out_dtype);
}

}  // namespace
}  // namespace ircore_vllm_c

TORCH_LIBRARY_FRAGMENT(ircore_vllm_c, m) {
  m.def(
      "block_scaled_mm_fp8_cpu(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, "
      "int[] block_size, ScalarType out_dtype) -> Tensor");
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CPU, m) {
  m.impl("block_scaled_mm_fp8_cpu", &ircore_vllm_c::block_scaled_mm_fp8);
}
