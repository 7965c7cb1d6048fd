// Host stand-ins for the CUDA built-ins cuda_rope.cu uses, for tools/emulate_cuda_rope.py: block
// and thread indices as thread-locals, a launch that runs each block's warps in turn with one host
// thread per lane (a barrier per warp makes __shfl_xor_sync exact), and the intrinsics as their
// IEEE host equivalents. Included after the CUDA headers, before the kernels.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
struct EmuIdx { unsigned x = 0, y = 0, z = 0; };
inline thread_local EmuIdx emu_tid, emu_bid;
inline EmuIdx emu_bdim;
struct EmuWarp {
  explicit EmuWarp(int n) : bar(n) {}
  std::barrier<> bar;
  float vals[32];
};
inline thread_local EmuWarp* emu_warp = nullptr;
inline thread_local int emu_lane = 0;
inline float __shfl_xor_sync(unsigned, float v, int o) {
  emu_warp->vals[emu_lane] = v;
  emu_warp->bar.arrive_and_wait();
  float r = emu_warp->vals[emu_lane ^ o];
  emu_warp->bar.arrive_and_wait();
  return r;
}
#define __launch_bounds__(...)
#define cudaGetLastError() cudaSuccess
#define threadIdx emu_tid
#define blockIdx emu_bid
#define blockDim emu_bdim
#define __fmaf_rn(a, b, c) std::fma((float)(a), (float)(b), (float)(c))
#define __fmul_rn(a, b) ((float)(a) * (float)(b))
template <class F>
void emu_launch(dim3 grid, dim3 block, F f) {
  emu_bdim = {block.x, block.y, block.z};
  const int n = block.x * block.y * block.z;
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx)
      for (int w0 = 0; w0 < n; w0 += 32) {
        const int cnt = std::min(32, n - w0);
        EmuWarp warp(cnt);
        std::vector<std::thread> ts;
        for (int l = 0; l < cnt; ++l) {
          ts.emplace_back([&, l] {
            const unsigned lin = w0 + l;
            emu_tid = {lin % block.x, (lin / block.x) % block.y, 0};
            emu_bid = {bx, by, 0};
            emu_lane = l;
            emu_warp = &warp;
            f();
          });
        }
        for (auto& t : ts) t.join();
      }
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int min(int a, int b) { return a < b ? a : b; }
