// The loops of the CPU block-scaled fp8 matmul (cpu_fp8_mm_kernels.cpp), free of torch headers
// (see cpu_kernels.h: the AVX2 copy must not compile any inline torch function). The binding and
// the threads are cpu_fp8_mm.cpp.
//
// The operands are widened to fp32 exactly (every e4m3 value is an fp32 value) into rows padded
// per K group: group g of a row occupies [g * kp, g * kp + bk) of the padded row, zeros up to
// (g + 1) * kp, kp = bk rounded up to 8. Each output element then sums, group after group, eight
// lanes of fp32 FMAs over its group's padded columns (lane j: columns j, j + 8, ...), scales the
// eight lane sums by scale_a[m, g] * scale_b[n / bn, g] into eight running totals (one FMA each),
// and adds the totals in one fixed tree. The scalar copy computes the same lanes with fmaf, the
// vector copies with FMA instructions, so every copy gives the same bits, and no result depends on
// M, on the row's place or on the threads.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace ircore_vllm_c {
namespace cpu {

// The padded width of a K group (bk rounded up to the 8 lanes).
inline int64_t fp8_mm_group_width(int64_t bk) { return (bk + 7) / 8 * 8; }

// Widens k fp8 bytes (fnuz: e4m3fnuz, else e4m3fn; NaN encodings to NaN) into `dst`, laid out in
// groups of bk values padded with zeros to kp = fp8_mm_group_width(bk) each (groups * kp floats).
void fp8_widen_row(Isa isa, bool fnuz, const uint8_t* src, int64_t k, int64_t bk, float* dst);

// One task's share: the output columns [n0, n0 + nt) of every row.
struct Fp8MmTile {
  const float* a;  // the widened activations [m, groups * kp] (fp8_widen_row)
  int64_t m;
  const uint8_t* b;  // the fp8 weight rows n0 .. n0 + nt - 1, each k bytes, contiguous
  int64_t k, bk, bn, groups, kp, nt, n0;
  const float* sa;  // scale of (row i, group g): sa[i * sa0 + g * sa1]
  int64_t sa0, sa1;
  const float* sb;  // scale of (column n, group g): sb[(n / bn) * sb0 + g * sb1]
  int64_t sb0, sb1;
  float* out;  // column n0 of row 0; rows out_stride apart
  int64_t out_stride;
  float* buf;  // room for (nt + 1) * groups * kp floats: the widened weight rows, where used
  float* row;  // room for groups * kp floats: one widened row, where used
  float* tot;  // room for m * (nt + 1) / 2 * 16 floats: running totals, where used
};

// Computes a tile. Few rows read the weight's bytes as they go (widened on the fly); more rows
// widen the tile's weight rows into buf once and read them from there: the same values and sums,
// so the same bits either way.
void fp8_mm_tile(Isa isa, bool fnuz, const Fp8MmTile& t);

}  // namespace cpu
}  // namespace ircore_vllm_c
