// Block-wide stand-ins on top of emu.h, for tools/emulate_cuda_quant.py: a launch that runs each
// block's threads all at once (one host thread per thread of the block, running the blocks in
// turn), so __syncthreads is a
// barrier over the block and __shfl_xor_sync one over the warp; __shared__ variables become
// statics (one block at a time uses them); the bit casts, atomicMax and the runtime calls the
// quant launcher makes, on the host.
#pragma once
#include <atomic>
#include <cstring>
#include "emu.h"
inline unsigned __float_as_uint(float v) {
  unsigned u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
using std::isinf;
inline std::barrier<>* emu_block_bar = nullptr;
inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
inline unsigned __shfl_xor_sync(unsigned, unsigned v, int o) {
  return __float_as_uint(__shfl_xor_sync(0u, __uint_as_float(v), o));
}
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned atomicMax(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> a(*p);
  unsigned old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
#define cudaMemsetAsync(p, v, n, s) (std::memset((p), (v), (n)), cudaSuccess)
#define cudaFuncSetAttribute(...) cudaSuccess
template <class F>
void emu_launch_block(dim3 grid, int threads, F f) {
  emu_bdim = {static_cast<unsigned>(threads), 1, 1};
  std::barrier<> bar(threads);
  emu_block_bar = &bar;
  std::vector<std::unique_ptr<EmuWarp>> warps;
  for (int w0 = 0; w0 < threads; w0 += 32) warps.push_back(std::make_unique<EmuWarp>(std::min(32, threads - w0)));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {  // one host thread per thread of the block, over the blocks in turn
      emu_tid = {static_cast<unsigned>(t), 0, 0};
      emu_lane = t % 32;
      emu_warp = warps[t / 32].get();
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        emu_bid = {bx, 0, 0};
        f();
        bar.arrive_and_wait();  // the block's shared memory is the next block's
      }
    });
  }
  for (auto& th : ts) th.join();
}
