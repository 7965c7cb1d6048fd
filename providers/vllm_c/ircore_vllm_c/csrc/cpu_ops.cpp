// The op schemas (this provider's own namespace, torch.ops.ircore_vllm_c) and their CPU kernels.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cpu_activation.h"
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "ops_common.h"

namespace ircore_vllm_c {
namespace {

// Rows below this many elements per task are not worth a thread handoff.
constexpr int64_t kMinElemsPerTask = 16384;

std::atomic<int> g_isa{-1};  // -1: best_isa()
// Outputs at least this large are written with non-temporal stores (0: never), by the out
// variants only: a functional op's output that large is fresh memory, where streaming stores
// measured slower (the page faults dominate and the kernel zeroes each page through the cache).
std::atomic<int64_t> g_stream_bytes{int64_t{32} << 20};

bool use_stream(const at::Tensor& out) {
  const int64_t t = g_stream_bytes.load(std::memory_order_relaxed);
  return t > 0 && static_cast<int64_t>(out.nbytes()) >= t;
}

cpu::Isa current_isa() {
  const int v = g_isa.load(std::memory_order_relaxed);
  return v < 0 ? cpu::best_isa() : static_cast<cpu::Isa>(v);
}

// New outputs from 32 MB up come straight from mmap (glibc's largest mmap threshold), as fresh
// pages: ask for transparent huge pages (where THP is in "madvise" mode) so that first touch
// costs a few 2 MB faults instead of thousands of 4 KB ones (measured: ~1.8x faster at
// 4096 x 4096). Advisory only; errors are ignored. Smaller outputs reuse heap pages.
constexpr int64_t kHugePageBytes = int64_t{2} << 20;
constexpr int64_t kFreshPagesBytes = int64_t{32} << 20;

at::Tensor new_output(c10::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor out = at::empty(sizes, options);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const int64_t n = static_cast<int64_t>(out.nbytes());
  if (n >= kFreshPagesBytes) {
    const auto p = reinterpret_cast<uintptr_t>(out.data_ptr());
    const uintptr_t begin = (p + kHugePageBytes - 1) & ~static_cast<uintptr_t>(kHugePageBytes - 1);
    const uintptr_t end = (p + n) & ~static_cast<uintptr_t>(kHugePageBytes - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
#endif
  return out;
}

int64_t grain_rows(int64_t hidden) {
  return std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(hidden, 1));
}

void check_cpu(const char* op, const at::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu(), "ircore_vllm_c.", op, ": expected a CPU tensor, got ",
              x.device());
}

void rms_norm_into(at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                   double epsilon, std::optional<int64_t> variance_size, bool allow_stream) {
  check_cpu("rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_norm_args("rms_norm", x, weight, variance_size, w);
  check_out("rms_norm", out, x, x.sizes());
  if (x.numel() == 0) return;
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const int64_t hidden = x.size(-1);
  const cpu::Isa isa = current_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  void* o = out.data_ptr();
  const void* i = xin.data_ptr();
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  const cpu::DType wdt = w.defined() ? cpu_dtype(w.scalar_type()) : dt;
  const int64_t stride = rows.stride;
  const float eps = static_cast<float>(epsilon);
  const bool stream = allow_stream && use_stream(out);
  at::parallel_for(0, rows.rows, grain_rows(hidden), [&](int64_t b, int64_t e) {
    cpu::rms_norm_rows(isa, dt, wdt, o, hidden, i, stride, wp, hidden, vs, eps, b, e, stream);
  });
}

void rms_norm_out_cpu(at::Tensor& out, const at::Tensor& x,
                      const std::optional<at::Tensor>& weight, double epsilon,
                      std::optional<int64_t> variance_size) {
  rms_norm_into(out, x, weight, epsilon, variance_size, /*allow_stream=*/true);
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                        double epsilon, std::optional<int64_t> variance_size) {
  check_x("rms_norm", x);
  at::Tensor out = new_output(x.sizes(), x.options());
  rms_norm_into(out, x, weight, epsilon, variance_size, /*allow_stream=*/false);
  return out;
}

void fused_add_rms_norm_cpu(at::Tensor& x, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight, double epsilon,
                            std::optional<int64_t> variance_size) {
  check_cpu("fused_add_rms_norm", x);
  at::Tensor w;
  const int64_t vs = check_fused_add_args(x, residual, weight, variance_size, w);
  if (x.numel() == 0) return;
  // Layouts that are not plain rows run on contiguous copies, copied back at the end.
  at::Tensor xw, rw;
  const Rows xr = writable_rows_of(x, xw);
  const Rows rr = writable_rows_of(residual, rw);
  const int64_t hidden = x.size(-1);
  const cpu::Isa isa = current_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  void* xp = xw.data_ptr();
  void* rp = rw.data_ptr();
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  const cpu::DType wdt = w.defined() ? cpu_dtype(w.scalar_type()) : dt;
  const int64_t xs = xr.stride;
  const int64_t rs = rr.stride;
  const float eps = static_cast<float>(epsilon);
  at::parallel_for(0, xr.rows, grain_rows(hidden), [&](int64_t b, int64_t e) {
    cpu::fused_add_rms_norm_rows(isa, dt, wdt, xp, xs, rp, rs, wp, hidden, vs, eps, b, e);
  });
  copy_back(x, xw);
  copy_back(residual, rw);
}

void silu_and_mul_into(at::Tensor& out, const at::Tensor& x, bool allow_stream) {
  check_cpu("silu_and_mul", x);
  check_silu_args(x);
  check_out("silu_and_mul", out, x, silu_out_sizes(x));
  if (out.numel() == 0) return;
  const int64_t d = x.size(-1) / 2;
  at::Tensor xin;
  const Rows rows = rows_of(x, xin);
  const cpu::Isa isa = current_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  void* o = out.data_ptr();
  const void* i = xin.data_ptr();
  const int64_t stride = rows.stride;
  const bool stream = allow_stream && use_stream(out);
  at::parallel_for(0, rows.rows, grain_rows(2 * d), [&](int64_t b, int64_t e) {
    cpu::silu_and_mul_rows(isa, dt, o, d, i, stride, d, b, e, stream);
  });
}

void silu_and_mul_out_cpu(at::Tensor& out, const at::Tensor& x) {
  silu_and_mul_into(out, x, /*allow_stream=*/true);
}

at::Tensor silu_and_mul_cpu(const at::Tensor& x) {
  check_silu_args(x);
  at::Tensor out = new_output(silu_out_sizes(x), x.options());
  silu_and_mul_into(out, x, /*allow_stream=*/false);
  return out;
}

at::Tensor rms_norm_gated_cpu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& weight,
                              double epsilon, std::optional<int64_t> group_size,
                              bool norm_before_gate, bool round_normalized) {
  check_x("rms_norm_gated", x);
  check_cpu("rms_norm_gated", x);
  at::Tensor w;
  const int64_t group = check_gated_args(x, gate, weight, group_size, w);
  at::Tensor out = new_output(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  at::Tensor xin, gin;
  const Rows xr = rows_of(x, xin);
  const Rows gr = rows_of(gate, gin);
  const int64_t hidden = x.size(-1);
  const cpu::Isa isa = current_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  const cpu::DType wdt = cpu_dtype(w.scalar_type());
  void* o = out.data_ptr();
  const void* xp = xin.data_ptr();
  const void* gp = gin.data_ptr();
  const void* wp = w.data_ptr();
  const float eps = static_cast<float>(epsilon);
  at::parallel_for(0, xr.rows, grain_rows(hidden), [&](int64_t b, int64_t e) {
    cpu::rms_norm_gated_rows(isa, dt, wdt, o, hidden, xp, xr.stride, gp, gr.stride, wp, hidden,
                             group, eps, norm_before_gate, round_normalized, b, e);
  });
  return out;
}

at::Tensor layer_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, double epsilon) {
  check_x("layer_norm", x);
  check_cpu("layer_norm", x);
  at::Tensor w, bt;
  check_layer_norm_args(x, weight, bias, w, bt);
  at::Tensor out = new_output(x.sizes(), x.options());
  if (x.numel() == 0) return out;
  at::Tensor xin;
  const Rows xr = rows_of(x, xin);
  const int64_t hidden = x.size(-1);
  const cpu::Isa isa = current_isa();
  const cpu::DType dt = cpu_dtype(x.scalar_type());
  void* o = out.data_ptr();
  const void* xp = xin.data_ptr();
  const void* wp = w.defined() ? w.data_ptr() : nullptr;
  const void* bp = bt.defined() ? bt.data_ptr() : nullptr;
  const float eps = static_cast<float>(epsilon);
  at::parallel_for(0, xr.rows, grain_rows(hidden), [&](int64_t b, int64_t e) {
    cpu::layer_norm_rows(isa, dt, o, hidden, xp, xr.stride, wp, bp, hidden, eps, b, e);
  });
  return out;
}

// Test and benchmark hook: force the CPU ISA ("scalar", "avx2", "avx512", "avx512bf16";
// "auto" = best).
// Returns the previous choice.
std::string set_cpu_isa(const std::string& name) {
  const std::string prev = cpu::isa_name(current_isa());
  int v;
  if (name == "auto" || name.empty()) {
    v = -1;
  } else if (name == "scalar") {
    v = static_cast<int>(cpu::Isa::kScalar);
  } else if (name == "avx2") {
    v = static_cast<int>(cpu::Isa::kAvx2);
  } else if (name == "avx512") {
    v = static_cast<int>(cpu::Isa::kAvx512);
  } else if (name == "avx512bf16") {
    v = static_cast<int>(cpu::Isa::kAvx512Bf16);
  } else {
    TORCH_CHECK(false, "ircore_vllm_c._set_cpu_isa: unknown ISA '", name,
                "' (expected auto, scalar, avx2, avx512 or avx512bf16)");
  }
  TORCH_CHECK(v < 0 || cpu::isa_supported(static_cast<cpu::Isa>(v)),
              "ircore_vllm_c._set_cpu_isa: this CPU does not support ", name);
  g_isa.store(v, std::memory_order_relaxed);
  return prev;
}

// Tuning hook: outputs of at least `bytes` use non-temporal stores (0: never). Returns the
// previous threshold.
int64_t set_cpu_stream_bytes(int64_t bytes) {
  TORCH_CHECK(bytes >= 0, "ircore_vllm_c._set_cpu_stream_bytes: bytes must be >= 0");
  return g_stream_bytes.exchange(bytes);
}

}  // namespace

cpu::Isa cpu::selected_isa() { return current_isa(); }  // for the gated activations' file
}  // namespace ircore_vllm_c

TORCH_LIBRARY(ircore_vllm_c, m) {
  m.def("rms_norm(Tensor x, Tensor? weight, float epsilon, int? variance_size=None) -> Tensor");
  m.def(
      "fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor? weight, float epsilon, "
      "int? variance_size=None) -> ()");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def(
      "rms_norm_gated(Tensor x, Tensor gate, Tensor weight, float epsilon, int? group_size=None, "
      "bool norm_before_gate=False, bool round_normalized=False) -> Tensor");
  m.def("layer_norm(Tensor x, Tensor? weight, Tensor? bias, float epsilon) -> Tensor");
  // Out variants (a contiguous `out` of the result's shape and dtype): for callers that reuse
  // buffers, and for kernel-to-kernel comparisons with vLLM's out-style ops.
  m.def(
      "rms_norm_out(Tensor(a!) out, Tensor x, Tensor? weight, float epsilon, "
      "int? variance_size=None) -> ()");
  m.def("silu_and_mul_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("_set_cpu_isa(str isa) -> str", &ircore_vllm_c::set_cpu_isa);
  m.def("_set_cpu_stream_bytes(int bytes) -> int", &ircore_vllm_c::set_cpu_stream_bytes);
}

TORCH_LIBRARY_IMPL(ircore_vllm_c, CPU, m) {
  m.impl("rms_norm", &ircore_vllm_c::rms_norm_cpu);
  m.impl("fused_add_rms_norm", &ircore_vllm_c::fused_add_rms_norm_cpu);
  m.impl("silu_and_mul", &ircore_vllm_c::silu_and_mul_cpu);
  m.impl("rms_norm_gated", &ircore_vllm_c::rms_norm_gated_cpu);
  m.impl("layer_norm", &ircore_vllm_c::layer_norm_cpu);
  m.impl("rms_norm_out", &ircore_vllm_c::rms_norm_out_cpu);
  m.impl("silu_and_mul_out", &ircore_vllm_c::silu_and_mul_out_cpu);
}
