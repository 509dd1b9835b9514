// CPU-emulation stand-in for c10/cuda/CUDAStream.h (see csrc/cuda_emulation/README.md).
#pragma once
#include <c10/core/Device.h>

using cudaStream_t = void*;

namespace c10::cuda {
struct CUDAStream {
  operator cudaStream_t() const { return nullptr; }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) {
  return {};
}
}  // namespace c10::cuda
