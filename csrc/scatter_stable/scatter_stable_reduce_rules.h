// csrc/scatter_stable/scatter_stable_reduce_rules.h — the reduction rules of the wb_scatter_stable kernels,
// written once for the CPU loops (cpu/scatter_stable_cpu.cpp) and the CUDA kernels (cuda/scatter_stable_cuda.cu).
//
// The rules are those of the ATen library, stated in csrc/scatter/scatter_reduce_rules.h (accumulation type,
// identity, integer mean, min/max ties, NaN); the functions here have the same names and bodies. That header
// cannot be included here: it takes at::opmath_type and at::_isnan from ATen headers, and a stable-ABI build
// stops at any ATen header (TORCH_TARGET_VERSION). This one uses torch/headeronly only, which is compiled into
// the library and has no libtorch symbols. tests/test_scatter_packages.py runs both libraries on the same
// inputs (ties, NaN, integer mean, float16 sums), so the two copies cannot drift apart unnoticed.
#pragma once

#include <torch/headeronly/macros/Macros.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace wb_scatter_stable {

enum class Reduce { Sum, Mean, Min, Max };

// at::opmath_type for the dtypes these ops take: float16 and bfloat16 accumulate in float32.
template <typename scalar_t>
using acc_type = std::conditional_t<std::is_same_v<scalar_t, torch::headeronly::Half> ||
                                        std::is_same_v<scalar_t, torch::headeronly::BFloat16>,
                                    float, scalar_t>;

// at::_isnan for an accumulation type (never a 16-bit float: those accumulate in float).
template <typename acc_t>
C10_HOST_DEVICE inline bool is_nan(acc_t x) {
  if constexpr (std::is_floating_point_v<acc_t>)
    return x != x;
  else
    return false;
}

template <typename acc_t, Reduce R>
C10_HOST_DEVICE inline acc_t identity() {
  using limits = std::numeric_limits<acc_t>;
  if constexpr (R == Reduce::Min)
    return limits::has_infinity ? limits::infinity() : limits::max();
  else if constexpr (R == Reduce::Max)
    return limits::has_infinity ? -limits::infinity() : limits::lowest();
  else
    return acc_t(0);
}

// min/max: does x, from a later position, replace `val`, the value of the earlier positions?
template <Reduce R, typename acc_t>
C10_HOST_DEVICE inline bool beats(acc_t x, acc_t val) {
  if constexpr (R == Reduce::Min) {
    if (x < val) return true;
  } else {
    if (x > val) return true;
  }
  return is_nan(x) && !is_nan(val);
}

// The same for a group that may be empty: x always wins into an empty group (even if it equals the identity).
template <Reduce R, typename acc_t>
C10_HOST_DEVICE inline bool wins(acc_t x, acc_t val, bool empty) {
  if (empty) return true;
  return beats<R>(x, val);
}

// A count of 0 or 1 leaves the sum as it is. In floating point the sum is divided by max(count, 1), without a branch: a
// division by 1 returns +-0, +-inf, a quiet NaN and every normal number unchanged (it quiets a signalling NaN and,
// under torch.set_flush_denormal(True), flushes a subnormal to 0, as the reference's division by count.clamp_min(1)
// does). Over a random index with about as many groups as elements the counts are about Poisson(1): count <= 1 in 74%
// of the groups and >= 2 in 26%, at random, and on the CPU a branch on it was mispredicted often enough to cost more
// than the reduction (10^6 float32 elements into 10^6 groups, a random index, one thread: 6.8 -> 3.2 ms a call, old and
// new builds timed in turn in alternating processes). The price is a division for every group, where almost all are
// empty: 10^4 or 10^5 elements into 10^6 groups took 0.4-0.6 ms longer. (The CUDA kernels use the same rule; not timed
// on a GPU.)
template <typename acc_t>
C10_HOST_DEVICE inline acc_t divide(acc_t sum, int64_t count) {
  if constexpr (std::is_integral_v<acc_t>) {
    if (count <= 1) return sum;
    const int64_t s = static_cast<int64_t>(sum);
    int64_t q = s / count;
    if (s % count < 0) q -= 1;
    return static_cast<acc_t>(q);
  } else {
    return sum / static_cast<acc_t>(count > 1 ? count : 1);
  }
}

}  // namespace wb_scatter_stable
