// Row kernels for the CPU ops, free of torch headers.
//
// The implementation file compiles one copy of each kernel per instruction set (scalar, AVX2,
// AVX-512) with function-level target attributes, so one binary runs on any x86-64 CPU and uses
// the widest vectors the CPU has. Keeping torch headers out of that file means no inline torch
// function is ever compiled for a wider ISA than the baseline (which would break other CPUs
// through the linker's choice of one COMDAT copy).
#pragma once

#include <cstdint>

namespace ircore_vllm_c {
namespace cpu {

enum class DType : int { kFloat = 0, kHalf = 1, kBFloat16 = 2 };
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

// The best ISA this CPU (and OS) supports among those compiled in.
Isa best_isa();
// Whether `isa` can run here.
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);
// The ISA the kernels run with now: _set_cpu_isa's choice, else best_isa() (cpu_ops.cpp).
Isa selected_isa();

// All strides and sizes are in elements. Rows [begin, end) are processed.
// weight may be null (no scaling). variance_size in [1, hidden]. `stream`: write the output
// with non-temporal stores (rows starting on a 64-byte boundary), for outputs far larger than
// the caches: saves the read-for-ownership of every output line.
// wdt: the weight's dtype, dt or kFloat.
void rms_norm_rows(Isa isa, DType dt, DType wdt, void* out, int64_t out_stride, const void* in,
                   int64_t in_stride, const void* weight, int64_t hidden,
                   int64_t variance_size, float eps, int64_t begin, int64_t end, bool stream);

// In place: residual <- round(x + residual); x <- rms_norm(residual).
void fused_add_rms_norm_rows(Isa isa, DType dt, DType wdt, void* x, int64_t x_stride, void* residual,
                             int64_t res_stride, const void* weight, int64_t hidden,
                             int64_t variance_size, float eps, int64_t begin, int64_t end);

// out[r, :d] = silu(in[r, :d]) * in[r, d:2d]
void silu_and_mul_rows(Isa isa, DType dt, void* out, int64_t out_stride, const void* in,
                       int64_t in_stride, int64_t d, int64_t begin, int64_t end, bool stream);

// Gated RMSNorm (the op rms_norm_gated): rows of `hidden`, normalised in groups of `group`
// (a divisor of hidden); gate has x's dtype; wdt: the weight's dtype, dt or kFloat.
void rms_norm_gated_rows(Isa isa, DType dt, DType wdt, void* out, int64_t out_stride,
                         const void* in, int64_t in_stride, const void* gate, int64_t gate_stride,
                         const void* weight, int64_t hidden, int64_t group, float eps,
                         bool norm_before_gate, bool round_normalized, int64_t begin, int64_t end);

// LayerNorm of rows of `hidden`; weight and bias (each may be null) of x's dtype.
void layer_norm_rows(Isa isa, DType dt, void* out, int64_t out_stride, const void* in,
                     int64_t in_stride, const void* weight, const void* bias, int64_t hidden,
                     float eps, int64_t begin, int64_t end);

}  // namespace cpu
}  // namespace ircore_vllm_c
