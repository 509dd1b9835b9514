// csrc/scatter_stable/cuda/scatter_stable_cuda.cu — the CUDA kernels of the wb_scatter_stable ops.
//
// Contract and schema: ../scatter_stable.cpp; CPU kernel: ../cpu/scatter_stable_cpu.cpp. The kernels and their
// names are those of csrc/scatter/cuda/scatter_cuda.cu (one thread per src element, atomic read-modify-writes
// into the output; min/max in two passes, the value and then the lowest winning position; out-of-range index
// values skipped and the lowest offending position recorded), on the stable ABI:
//   c10::cuda::getCurrentCUDAStream()  -> aoti_torch_get_current_cuda_stream (C shim): launches stay on the
//                                         stream the caller made current (torch.cuda.stream, CUDA graphs)
//   c10::cuda::CUDAGuard               -> torch::stable::accelerator::DeviceGuard
//   C10_CUDA_KERNEL_LAUNCH_CHECK()     -> STD_CUDA_KERNEL_LAUNCH_CHECK()
//   gpuAtomicAdd/Min/Max (ATen/cuda/Atomic.cuh, not in the stable ABI)
//                                      -> atomic_add / atomic_extreme below: native atomics where CUDA has
//                                         them, a compare-and-swap loop otherwise (8- and 16-bit integers,
//                                         float/double min/max)
//   Tensor::fill_(Scalar)              -> fill_kernel (torch::stable::fill_ takes a double, which cannot hold
//                                         the int64 identity of min exactly)
//   Tensor::item<int64_t>()            -> aoti_torch_item_int64 (waits for this stream's kernels)
// The reduction rules (identity, ties, NaN, integer mean, float32 accumulation of 16-bit floats) are the
// host-device functions of ../scatter_stable_reduce_rules.h, shared with the CPU loops.
//
// workbook/diagnostics/cuda_check.py compiles this file as it is, without the build's flags, so the file states its own
// target (the same as setup.py's) and asks for the CUDA part of the C shim (USE_CUDA), unless the build does.
#ifndef TORCH_TARGET_VERSION
#define TORCH_TARGET_VERSION 0x020a000000000000ULL  // the stable ABI of torch 2.10 and later
#endif
#ifndef USE_CUDA
#define USE_CUDA  // declares the CUDA functions of the C shim (aoti_torch_get_current_cuda_stream, ...)
#endif

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/Dispatch_v2.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>

#include "../scatter_stable.h"
#include "../scatter_stable_reduce_rules.h"

namespace wb_scatter_stable {
namespace {

using torch::headeronly::ScalarType;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest

int blocks_for(int64_t elements) {
  return static_cast<int>(std::min<int64_t>((elements + kThreads - 1) / kThreads, kMaxBlocks));
}

// ---- atomics ----------------------------------------------------------------------------------

// *address = update(*address), atomically, for a T of 1, 2, 4 or 8 bytes, as long as `update` says the value
// changes (it returns false to leave memory as it is). 8- and 16-bit values are updated inside the aligned
// 32-bit word that holds them, since compare-and-swap works on 32 and 64 bits.
template <typename T, typename Update>
__device__ void atomic_update(T* address, Update update) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "unsupported size");
  if constexpr (sizeof(T) == 8 || sizeof(T) == 4) {
    using Word = std::conditional_t<sizeof(T) == 8, unsigned long long, unsigned int>;
    Word* word = reinterpret_cast<Word*>(address);
    Word seen = *word, assumed;
    do {
      assumed = seen;
      T value, next;
      memcpy(&value, &assumed, sizeof(T));
      if (!update(value, next)) return;
      Word desired;
      memcpy(&desired, &next, sizeof(T));
      seen = atomicCAS(word, assumed, desired);
    } while (seen != assumed);
  } else {
    const uintptr_t at = reinterpret_cast<uintptr_t>(address);
    unsigned int* word = reinterpret_cast<unsigned int*>(at & ~uintptr_t(3));
    const unsigned int shift = static_cast<unsigned int>(at & 3) * 8;
    const unsigned int mask = ((1u << (8 * sizeof(T))) - 1) << shift;
    unsigned int seen = *word, assumed;
    do {
      assumed = seen;
      const auto bits = static_cast<std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>>((assumed & mask) >> shift);
      T value, next;
      memcpy(&value, &bits, sizeof(T));
      if (!update(value, next)) return;
      std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t> next_bits;
      memcpy(&next_bits, &next, sizeof(T));
      const unsigned int desired = (assumed & ~mask) | (static_cast<unsigned int>(next_bits) << shift);
      seen = atomicCAS(word, assumed, desired);
    } while (seen != assumed);
  }
}

// *address += x. acc_t is never a 16-bit float (those accumulate in float32).
template <typename acc_t>
__device__ __forceinline__ void atomic_add(acc_t* address, acc_t x) {
  if constexpr (std::is_same_v<acc_t, float> || std::is_same_v<acc_t, double> || std::is_same_v<acc_t, int32_t>) {
    atomicAdd(address, x);
  } else if constexpr (std::is_same_v<acc_t, int64_t>) {
    // two's complement: the unsigned sum has the bits of the signed one
    atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(x));
  } else {  // uint8, int8, int16
    atomic_update(address, [x](acc_t value, acc_t& next) {
      next = static_cast<acc_t>(value + x);
      return true;
    });
  }
}

// *address = x if x beats it (the min/max rule of the reduce-rules header, NaN included), atomically.
template <Reduce R, typename acc_t>
__device__ __forceinline__ void atomic_extreme(acc_t* address, acc_t x) {
  atomic_update(address, [x](acc_t value, acc_t& next) {
    if (!beats<R>(x, value)) return false;
    next = x;
    return true;
  });
}

// ---- kernels ----------------------------------------------------------------------------------

// Where src element e = (o, j, i) goes; -1 when its index value is out of range (then recorded).
__device__ __forceinline__ int64_t target(const int64_t* __restrict__ index, const Geometry& g, int64_t e, int64_t& j,
                                          int64_t* bad) {
  const int64_t i = e % g.inner;
  j = (e / g.inner) % g.n;
  const int64_t o = e / (g.inner * g.n);
  const int64_t k = index[o * g.is0 + j * g.is1 + i * g.is2];
  if (k < 0 || k >= g.m) {
    if (bad != nullptr) atomicMin(reinterpret_cast<long long*>(bad), static_cast<long long>(e));
    return -1;
  }
  return (o * g.m + k) * g.inner + i;
}

#define WB_GRID_STRIDE_LOOP(e, count)                                                        \
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (count); \
       e += static_cast<int64_t>(blockDim.x) * gridDim.x)

template <typename acc_t>
__global__ void fill_kernel(acc_t* acc, acc_t value, int64_t numel) {
  WB_GRID_STRIDE_LOOP(p, numel) {
    acc[p] = value;
  }
}

// sum and mean: acc[target] += src[e]; mean also counts.
template <typename scalar_t, typename acc_t, bool kCount>
__global__ void scatter_add_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index, Geometry g,
                                   acc_t* acc, int64_t* count, int64_t* bad) {
  WB_GRID_STRIDE_LOOP(e, g.src_numel()) {
    int64_t j;
    const int64_t t = target(index, g, e, j, bad);
    if (t < 0) continue;
    atomic_add(acc + t, static_cast<acc_t>(src[e]));
    if constexpr (kCount) atomic_add(count + t, int64_t(1));
  }
}

template <typename acc_t>
__global__ void mean_divide_kernel(acc_t* acc, const int64_t* __restrict__ count, int64_t numel) {
  WB_GRID_STRIDE_LOOP(p, numel) {
    acc[p] = divide(acc[p], count[p]);
  }
}

// Is x its group's result? Equal to it, NaN counting as equal to NaN.
template <typename acc_t>
__device__ __forceinline__ bool same(acc_t x, acc_t result) {
  return x == result || (is_nan(x) && is_nan(result));
}

// Pass 1 of min/max: the value (a NaN beats every number, so it propagates).
template <typename scalar_t, typename acc_t, Reduce R>
__global__ void scatter_extreme_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index, Geometry g,
                                       acc_t* acc, int64_t* bad) {
  WB_GRID_STRIDE_LOOP(e, g.src_numel()) {
    int64_t j;
    const int64_t t = target(index, g, e, j, bad);
    if (t < 0) continue;
    atomic_extreme<R>(acc + t, static_cast<acc_t>(src[e]));
  }
}

// Pass 2 of min/max: the argindex, lowest winning position. `initial`: out's values (else null).
template <typename scalar_t, typename acc_t, Reduce R>
__global__ void scatter_arg_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index, Geometry g,
                                   const acc_t* __restrict__ acc, const acc_t* __restrict__ initial, int64_t* arg) {
  WB_GRID_STRIDE_LOOP(e, g.src_numel()) {
    int64_t j;
    const int64_t t = target(index, g, e, j, nullptr);
    if (t < 0) continue;
    const acc_t x = static_cast<acc_t>(src[e]);
    if (same(x, acc[t]) && (initial == nullptr || beats<R>(x, initial[t]))) {
      atomicMin(reinterpret_cast<long long*>(arg + t), static_cast<long long>(j));
    }
  }
}

// Finish min/max of a functional overload: a group nothing landed in takes 0.
template <typename acc_t>
__global__ void extreme_finish_kernel(Geometry g, acc_t* acc, const int64_t* __restrict__ arg) {
  WB_GRID_STRIDE_LOOP(p, g.out_numel()) {
    if (arg[p] == g.n) acc[p] = acc_t(0);
  }
}

template <typename scalar_t, Reduce R>
void run(const Tensor& src_c, const Tensor& index3, const Geometry& g, ScatterOutputs& outs, int64_t* bad,
         cudaStream_t stream) {
  using acc_t = acc_type<scalar_t>;
  Tensor& out = outs.out;
  bool in_place;
  Tensor acc = accumulation_buffer<acc_t, scalar_t>(out, in_place);
  const scalar_t* src = src_c.const_data_ptr<scalar_t>();
  const int64_t* index = index3.const_data_ptr<int64_t>();
  acc_t* a = acc.mutable_data_ptr<acc_t>();
  const int src_blocks = blocks_for(g.src_numel());
  const int out_blocks = blocks_for(g.out_numel());

  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    constexpr bool kMean = R == Reduce::Mean;
    int64_t* count = kMean ? outs.count.mutable_data_ptr<int64_t>() : nullptr;
    scatter_add_kernel<scalar_t, acc_t, kMean><<<src_blocks, kThreads, 0, stream>>>(src, index, g, a, count, bad);
    STD_CUDA_KERNEL_LAUNCH_CHECK();
    if constexpr (kMean) {
      mean_divide_kernel<acc_t><<<out_blocks, kThreads, 0, stream>>>(a, count, g.out_numel());
      STD_CUDA_KERNEL_LAUNCH_CHECK();
    }
  } else {
    int64_t* arg = outs.argindex.mutable_data_ptr<int64_t>();
    Tensor initial;
    if (outs.fresh) {
      fill_kernel<acc_t><<<out_blocks, kThreads, 0, stream>>>(a, identity<acc_t, R>(), g.out_numel());
      STD_CUDA_KERNEL_LAUNCH_CHECK();
    } else {
      initial = torch::stable::clone(acc);
    }
    scatter_extreme_kernel<scalar_t, acc_t, R><<<src_blocks, kThreads, 0, stream>>>(src, index, g, a, bad);
    STD_CUDA_KERNEL_LAUNCH_CHECK();
    const acc_t* initial_ptr = initial.defined() ? initial.const_data_ptr<acc_t>() : nullptr;
    scatter_arg_kernel<scalar_t, acc_t, R><<<src_blocks, kThreads, 0, stream>>>(src, index, g, a, initial_ptr, arg);
    STD_CUDA_KERNEL_LAUNCH_CHECK();
    if (outs.fresh) {
      extreme_finish_kernel<acc_t><<<out_blocks, kThreads, 0, stream>>>(g, a, arg);
      STD_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
  if (!in_place) torch::stable::copy_(out, acc);
}

int64_t item(const Tensor& t) {
  int64_t value = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(t.get(), &value));
  return value;
}

std::tuple<Tensor, Tensor> scatter_reduce_cuda(const Tensor& src, const Tensor& index, int64_t dim,
                                               const std::optional<Tensor>& out, std::optional<int64_t> dim_size,
                                               Reduce r) {
  STD_TORCH_CHECK(src.defined(), "src is an undefined tensor");
  STD_TORCH_CHECK(src.is_cuda(), "src is on ", device_string(src),
                  " but another argument is a CUDA tensor; all arguments must be on the same device");
  // Checks dtypes, shapes, dim, dim_size, and that index and out are on src's device.
  ScatterOutputs outs = prepare_scatter(src, index, dim, out, dim_size, r);
  const torch::stable::accelerator::DeviceGuard device_guard(src.get_device_index());

  Geometry g = geometry_around(src, dim, outs.dim_size);
  if (src.numel() == 0 || outs.out.numel() == 0) {
    // Nothing to reduce (and a zero-block launch would be an error): as on the CPU, a fresh out is already
    // zeros and a given out keeps its values.
    return {outs.out, outs.argindex};
  }
  const Tensor src_c = src.is_contiguous() ? src : torch::stable::contiguous(src);
  const Tensor index3 = index_in_geometry(index, g);

  // Out-of-range index values are possible only when the caller chose the output size. `bad` starts at
  // src.numel(), past every position (the int64 maximum ATen's version starts from has no exact double, and
  // torch::stable::full takes its value as a double).
  const bool check_index = out.has_value() || dim_size.has_value();
  const int64_t no_bad_index = g.src_numel();
  Tensor bad = check_index ? torch::stable::full({1}, static_cast<double>(no_bad_index), ScalarType::Long, std::nullopt,
                                                 src.device())
                           : Tensor();
  int64_t* bad_ptr = check_index ? bad.mutable_data_ptr<int64_t>() : nullptr;

  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(src.get_device_index(), &stream));
  const auto current = static_cast<cudaStream_t>(stream);
  THO_DISPATCH_V2(
      src.scalar_type(), "scatter_reduce_cuda", AT_WRAP([&] {
        with_reduce(r, [&](auto R) { run<scalar_t, decltype(R)::value>(src_c, index3, g, outs, bad_ptr, current); });
      }),
      AT_EXPAND(AT_ALL_TYPES), ScalarType::Half, ScalarType::BFloat16);

  if (check_index) {
    const int64_t position = item(bad);  // waits for the kernels on this stream
    if (position != no_bad_index) {
      const int64_t i = position % g.inner;
      const int64_t j = (position / g.inner) % g.n;
      const int64_t o = position / (g.inner * g.n);
      const int64_t value =
          item(torch::stable::select(torch::stable::select(torch::stable::select(index3, 0, o), 0, j), 0, i));
      STD_TORCH_CHECK(false, "index value ", value, " at position ", j,
                      " along dim is out of range: index values must lie in [0, dim_size) = [0, ", g.m, ")");
    }
  }
  return {outs.out, outs.argindex};
}

}  // namespace
}  // namespace wb_scatter_stable

STABLE_TORCH_LIBRARY_IMPL(wb_scatter_stable, CUDA, m) {
  wb_scatter_stable::register_backend<&wb_scatter_stable::scatter_reduce_cuda>(m);
}
