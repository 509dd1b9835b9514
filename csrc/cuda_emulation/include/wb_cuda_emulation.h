// Force-included (g++ -include) when a .cu file is compiled as C++ for the CPU emulation.
// See ../README.md. Kernels become ordinary functions; a launch runs them for each thread in turn.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
};

namespace wb_emulation {
inline thread_local dim3 blockIdx, blockDim, threadIdx, gridDim;

// Runs body() once per (block, thread) of a 1-D grid, as the real launch would run the kernel.
template <typename Grid, typename Block, typename Body>
void launch(Grid grid, Block block, std::size_t /*shared_bytes*/, void* /*stream*/, Body body) {
  // The limits a real launch enforces (cudaErrorInvalidConfiguration).
  TORCH_CHECK(static_cast<int64_t>(grid) > 0 && static_cast<int64_t>(grid) <= 2147483647 &&
                  static_cast<int64_t>(block) > 0 && static_cast<int64_t>(block) <= 1024,
              "CUDA error: invalid configuration argument (emulated launch with grid ", grid, " and block ", block,
              ")");
  gridDim.x = static_cast<unsigned>(grid);
  blockDim.x = static_cast<unsigned>(block);
  for (unsigned b = 0; b < gridDim.x; ++b) {
    for (unsigned t = 0; t < blockDim.x; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      body();
    }
  }
}
}  // namespace wb_emulation

using wb_emulation::blockDim;
using wb_emulation::blockIdx;
using wb_emulation::gridDim;
using wb_emulation::threadIdx;

// The one native atomic the workbook's kernels call directly.
inline long long atomicMin(long long* address, long long value) {
  const long long old = *address;
  if (value < old) *address = value;
  return old;
}
