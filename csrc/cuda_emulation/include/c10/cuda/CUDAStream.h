// CPU-emulation stand-in for c10/cuda/CUDAStream.h (see csrc/cuda_emulation/README.md). The current
// stream is a marker address, so an emulated launch can tell it from the default stream (0) or another.
#pragma once
#include <c10/core/Device.h>

using cudaStream_t = void*;

namespace c10::cuda {
struct CUDAStream {
  cudaStream_t handle = nullptr;
  cudaStream_t stream() const { return handle; }
  operator cudaStream_t() const { return handle; }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) {
  return {wb_emulation::current_stream()};
}
inline CUDAStream getDefaultCUDAStream(c10::DeviceIndex = -1) {
  return {nullptr};
}
inline CUDAStream getStreamFromPool(bool = false, c10::DeviceIndex = -1) {
  static char pool_stream;
  return {&pool_stream};
}
}  // namespace c10::cuda
