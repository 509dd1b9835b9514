// Force-included (g++ -include) when a .cu file is compiled as C++ for the CPU emulation.
// See ../README.md. Kernels become ordinary functions; a launch runs them for each thread in turn.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
};

namespace wb_emulation {
inline thread_local dim3 blockIdx, blockDim, threadIdx, gridDim;

// The stream c10::cuda::getCurrentCUDAStream() hands out here: an address no other stream has.
inline void* current_stream() {
  static char marker;
  return &marker;
}

// What a launch was: its shape, and whether C10_CUDA_KERNEL_LAUNCH_CHECK() came after it (before the
// next launch). The last launches of this thread are kept for a check to read (`launches()`).
struct Launch {
  int64_t grid, block;
  bool checked;
};
inline std::vector<Launch>& launches() {
  static thread_local std::vector<Launch> log;
  return log;
}
inline void launch_checked() {
  if (!launches().empty()) launches().back().checked = true;
}

inline void* stream_pointer(void* stream) {
  return stream;
}
inline void* stream_pointer(std::nullptr_t) {
  return nullptr;
}
template <typename Integer, typename = std::enable_if_t<std::is_integral_v<Integer>>>
void* stream_pointer(Integer stream) {  // a literal 0: the default stream
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(stream));
}

// Runs body() once per (block, thread) of a 1-D grid, as the real launch would run the kernel, after
// the checks a real launch makes (cudaErrorInvalidConfiguration) and two it does not make: the
// kernel must go to the current stream, and the launch before it must have been checked.
template <typename Grid, typename Block, typename Body>
void launch_on(Grid grid, Block block, void* stream, Body body) {
  TORCH_CHECK(static_cast<int64_t>(grid) > 0 && static_cast<int64_t>(grid) <= 2147483647 &&
                  static_cast<int64_t>(block) > 0 && static_cast<int64_t>(block) <= 1024,
              "CUDA error: invalid configuration argument (emulated launch with grid ", grid, " and block ", block,
              ")");
  TORCH_CHECK(stream == current_stream(), "a kernel was launched on ",
              stream == nullptr ? "the default stream (stream 0)" : "a stream that is not the current one",
              ", so it is not ordered after the work that produced its inputs (CUDA emulation): launch on "
              "c10::cuda::getCurrentCUDAStream(), as the 4th launch argument: kernel<<<blocks, threads, 0, stream>>>");
  std::vector<Launch>& log = launches();
  TORCH_CHECK(log.empty() || log.back().checked,
              "a kernel launch was not followed by C10_CUDA_KERNEL_LAUNCH_CHECK() before the next launch (CUDA "
              "emulation): without it a failed launch goes unnoticed until some later CUDA call");
  if (log.size() >= 64) log.erase(log.begin());
  log.push_back({static_cast<int64_t>(grid), static_cast<int64_t>(block), false});
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

// The forms of kernel<<<grid, block[, shared[, stream]]>>>(args), rewritten by workbook/ops/cuda_emulation.py.
template <typename Grid, typename Block, typename Body>
void launch(Grid grid, Block block, Body body) {
  launch_on(grid, block, nullptr, body);
}
template <typename Grid, typename Block, typename Body>
void launch(Grid grid, Block block, std::size_t /*shared_bytes*/, Body body) {
  launch_on(grid, block, nullptr, body);
}
template <typename Grid, typename Block, typename Stream, typename Body>
void launch(Grid grid, Block block, std::size_t /*shared_bytes*/, Stream stream, Body body) {
  launch_on(grid, block, stream_pointer(stream), body);
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
