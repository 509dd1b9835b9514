// CPU-emulation stand-in for c10/cuda/CUDAGuard.h (see csrc/cuda_emulation/README.md).
#pragma once
#include <c10/core/Device.h>
#include <c10/util/Optional.h>

namespace c10::cuda {
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
  explicit CUDAGuard(c10::DeviceIndex) {}
};
struct OptionalCUDAGuard {
  OptionalCUDAGuard() = default;
  explicit OptionalCUDAGuard(std::optional<c10::Device>) {}
};
}  // namespace c10::cuda
