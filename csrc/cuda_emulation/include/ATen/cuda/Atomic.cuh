// CPU-emulation stand-in for ATen/cuda/Atomic.cuh: threads run one at a time, so a plain
// read-modify-write is atomic. Min/max keep ATen's NaN rule (a NaN in memory stays; a NaN value wins).
#pragma once
#include <ATen/NumericUtils.h>

#include <algorithm>

template <typename T>
inline void gpuAtomicAdd(T* address, T value) {
  *address = static_cast<T>(*address + value);
}

template <typename T>
inline T gpuAtomicMin(T* address, T value) {
  const T old = *address;
  *address = at::_isnan(old) ? old : (at::_isnan(value) ? value : std::min<T>(old, value));
  return old;
}

template <typename T>
inline T gpuAtomicMax(T* address, T value) {
  const T old = *address;
  *address = at::_isnan(old) ? old : (at::_isnan(value) ? value : std::max<T>(old, value));
  return old;
}
