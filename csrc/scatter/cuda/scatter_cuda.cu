// csrc/scatter/cuda/scatter_cuda.cu — the CUDA kernels of the wb_scatter ops.
//
// Schema: ../scatter.cpp; contract: ../scatter.h; CPU kernel: ../cpu/scatter_cpu.cpp. Results match the CPU
// kernel's: the same values (up to the rounding order of floating-point sums) and the same argindex,
// since both follow the rules of ../scatter_reduce_rules.h (identity, ties, NaN, integer mean,
// accumulation type), whose host-device functions both call.
//
// Layout. As on the CPU, tensors are viewed as [outer, n, inner] around `dim` (the output as
// [outer, m, inner], m = dim_size). There is one thread per src element e = (o, j, i); it reads its
// group k = index[o, j, i] and updates output element (o, k, i). Many threads may update the same
// output element at once, so updates are atomic read-modify-writes (ATen's gpuAtomicAdd/Min/Max,
// which cover every dtype here; the adds of 8- and 16-bit integers and every min and max are
// compare-and-swap loops, on the 32-bit word that holds an 8- or 16-bit value).
//
//   sum   one pass of atomic adds.
//   mean  the same, plus an atomic count per output element; then one thread per output element
//         divides (`divide`, as on the CPU).
//   min/max  atomics give the value but not *which* element won. So:
//         pass 1  atomic min/max of the values into the output. ATen's atomics propagate NaN (a
//                 NaN value wins, a NaN in memory stays), so a group holding a NaN ends as NaN;
//         pass 2  every element equal to its group's result (NaN counting as equal to NaN) bids its
//                 position j with atomicMin on the argindex: the lowest position wins, which is the
//                 rule for ties and for NaN (the first NaN). With out given (accumulate), an element
//                 only bids when it beats out's initial value (`beats`); otherwise out's value was
//                 kept and argindex stays at src.size(dim);
//         finish  (functional overloads) groups nothing landed in become 0.
// float16/bfloat16 accumulate in a float32 buffer (acc_type), as on the CPU: summing thousands of
// halves in half precision loses digits. (A float32 atomic add is also one instruction on every GPU,
// a float16 one only from compute capability 7.0, a bfloat16 one from 9.0: ATen calls CUDA's bfloat16
// atomicAdd from 8.0, but below 9.0 that is a compare-and-swap loop itself, in cuda_bf16.hpp.)
//
// Index values are checked as they are read: an out-of-range one is skipped (never written through)
// and the lowest offending position is recorded. Only when out or dim_size was given can a value be
// out of range (otherwise dim_size was computed from index.max() and index.min() was checked), and
// only then is the record read back, which waits for the kernel (one synchronisation), to raise the
// same error as the CPU. torch's own CUDA scatter ops use a device-side assert instead: no wait, but
// the error surfaces later and leaves the CUDA context unusable until the process restarts.
//
// Every launch is on the current stream, under a guard for src's device, followed by
// C10_CUDA_KERNEL_LAUNCH_CHECK().
#include <ATen/Dispatch.h>
#include <ATen/NumericUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/full.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <ATen/cuda/Atomic.cuh>
#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>

#include "../scatter.h"
#include "../scatter_reduce_rules.h"

namespace wb_scatter {
namespace {

using at::Tensor;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;  // grid-stride loops cover the rest
constexpr int64_t kNoBadIndex = std::numeric_limits<int64_t>::max();

int blocks_for(int64_t elements) {
  return static_cast<int>(std::min<int64_t>((elements + kThreads - 1) / kThreads, kMaxBlocks));
}

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

// sum and mean: acc[target] += src[e]; mean also counts.
template <typename scalar_t, typename acc_t, bool kCount>
__global__ void scatter_add_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index, Geometry g,
                                   acc_t* acc, int64_t* count, int64_t* bad) {
  WB_GRID_STRIDE_LOOP(e, g.src_numel()) {
    int64_t j;
    const int64_t t = target(index, g, e, j, bad);
    if (t < 0) continue;
    gpuAtomicAdd(acc + t, static_cast<acc_t>(src[e]));
    if constexpr (kCount) gpuAtomicAdd(count + t, int64_t(1));
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
  return x == result || (at::_isnan(x) && at::_isnan(result));
}

// Pass 1 of min/max: the value (a NaN propagates through the atomics).
template <typename scalar_t, typename acc_t, Reduce R>
__global__ void scatter_extreme_kernel(const scalar_t* __restrict__ src, const int64_t* __restrict__ index, Geometry g,
                                       acc_t* acc, int64_t* bad) {
  WB_GRID_STRIDE_LOOP(e, g.src_numel()) {
    int64_t j;
    const int64_t t = target(index, g, e, j, bad);
    if (t < 0) continue;
    const acc_t x = static_cast<acc_t>(src[e]);
    if constexpr (R == Reduce::Max)
      gpuAtomicMax(acc + t, x);
    else
      gpuAtomicMin(acc + t, x);
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
  // Accumulate in out itself when it is contiguous and of the accumulation type, else in a copy.
  Tensor acc = (std::is_same_v<acc_t, scalar_t> && out.is_contiguous())
                   ? out
                   : out.to(c10::CppTypeToScalarType<acc_t>::value, /*non_blocking=*/false, /*copy=*/true,
                            at::MemoryFormat::Contiguous);
  const scalar_t* src = src_c.const_data_ptr<scalar_t>();
  const int64_t* index = index3.const_data_ptr<int64_t>();
  acc_t* a = acc.mutable_data_ptr<acc_t>();
  const int src_blocks = blocks_for(g.src_numel());
  const int out_blocks = blocks_for(g.out_numel());

  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    constexpr bool kMean = R == Reduce::Mean;
    int64_t* count = kMean ? outs.count.mutable_data_ptr<int64_t>() : nullptr;
    scatter_add_kernel<scalar_t, acc_t, kMean><<<src_blocks, kThreads, 0, stream>>>(src, index, g, a, count, bad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if constexpr (kMean) {
      mean_divide_kernel<acc_t><<<out_blocks, kThreads, 0, stream>>>(a, count, g.out_numel());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  } else {
    int64_t* arg = outs.argindex.mutable_data_ptr<int64_t>();
    Tensor initial;
    if (outs.fresh) {
      acc.fill_(identity<acc_t, R>());
    } else {
      initial = acc.clone();
    }
    scatter_extreme_kernel<scalar_t, acc_t, R><<<src_blocks, kThreads, 0, stream>>>(src, index, g, a, bad);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const acc_t* initial_ptr = initial.defined() ? initial.const_data_ptr<acc_t>() : nullptr;
    scatter_arg_kernel<scalar_t, acc_t, R><<<src_blocks, kThreads, 0, stream>>>(src, index, g, a, initial_ptr, arg);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (outs.fresh) {
      extreme_finish_kernel<acc_t><<<out_blocks, kThreads, 0, stream>>>(g, a, arg);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
  if (!acc.is_same(out)) out.copy_(acc);
}

std::tuple<Tensor, Tensor> scatter_reduce_cuda(const Tensor& src, const Tensor& index, int64_t dim,
                                               const std::optional<Tensor>& out, std::optional<int64_t> dim_size,
                                               Reduce r) {
  TORCH_CHECK(src.defined(), "src is an undefined tensor");
  TORCH_CHECK(src.is_cuda(), "src is on ", src.device(),
              " but another argument is a CUDA tensor; all arguments must be on the same device");
  // Checks dtypes, shapes, dim, dim_size, and that index and out are on src's device.
  ScatterOutputs outs = prepare_scatter(src, index, dim, out, dim_size, r);
  const c10::cuda::CUDAGuard device_guard(src.device());

  Geometry g = geometry_around(src, dim, outs.dim_size);
  if (src.numel() == 0 || outs.out.numel() == 0) {
    // Nothing to reduce (and a zero-block launch would be an error): as on the CPU, a fresh out
    // is already zeros and a given out keeps its values.
    return {outs.out, outs.argindex};
  }
  const Tensor src_c = src.contiguous();
  const Tensor index3 = index_in_geometry(index, dim, g);

  // Out-of-range index values are possible only when the caller chose the output size.
  const bool check_index = out.has_value() || dim_size.has_value();
  Tensor bad = check_index ? at::full({1}, kNoBadIndex, index.options()) : Tensor();
  int64_t* bad_ptr = check_index ? bad.mutable_data_ptr<int64_t>() : nullptr;

  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_reduce_cuda", [&] {
    switch (r) {
      case Reduce::Sum:
        run<scalar_t, Reduce::Sum>(src_c, index3, g, outs, bad_ptr, stream);
        break;
      case Reduce::Mean:
        run<scalar_t, Reduce::Mean>(src_c, index3, g, outs, bad_ptr, stream);
        break;
      case Reduce::Min:
        run<scalar_t, Reduce::Min>(src_c, index3, g, outs, bad_ptr, stream);
        break;
      case Reduce::Max:
        run<scalar_t, Reduce::Max>(src_c, index3, g, outs, bad_ptr, stream);
        break;
    }
  });

  if (check_index) {
    const int64_t position = bad.item<int64_t>();  // waits for the kernels on this stream
    if (position != kNoBadIndex) {
      const int64_t i = position % g.inner;
      const int64_t j = (position / g.inner) % g.n;
      const int64_t o = position / (g.inner * g.n);
      // index3 may be index itself rather than a 3-D view (index_in_geometry): read the value at its offset.
      const int64_t offset = index3.storage_offset() + o * g.is0 + j * g.is1 + i * g.is2;
      const int64_t value = index3.as_strided({1}, {1}, offset).item<int64_t>();
      TORCH_CHECK(false, "index value ", value, " at position ", j,
                  " along dim is out of range: index values must lie in [0, dim_size) = [0, ", g.m, ")");
    }
  }
  return {outs.out, outs.argindex};
}

}  // namespace
}  // namespace wb_scatter

TORCH_LIBRARY_IMPL(wb_scatter, CUDA, m) {
  wb_scatter::register_backend<&wb_scatter::scatter_reduce_cuda>(m);
}
