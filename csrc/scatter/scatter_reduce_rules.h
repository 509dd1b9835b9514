// csrc/scatter/scatter_reduce_rules.h — the reduction rules every wb_scatter kernel follows, written once
// for the CPU loops (cpu/scatter_cpu_loops.h) and the CUDA kernels (cuda/scatter_cuda.cu). The functions are
// host-device (C10_HOST_DEVICE), so one definition serves host code, device code and the CPU emulation of
// the CUDA file (csrc/cuda_emulation). The stable-ABI library (csrc/scatter_stable) may include no ATen
// header, so it keeps its own copy of these rules; they must stay the same.
//
// The rules, stated here and nowhere else:
//   accumulation  float16 and bfloat16 accumulate in float32 (at::opmath_type): summing thousands of halves
//                 in half precision loses digits. Every other dtype accumulates in itself.
//   identity      what a group holds before its first element: 0 for sum/mean, the largest value (+inf for
//                 floating types) for min, the smallest (-inf) for max.
//   mean          the group's sum divided by its count; integers round down (floor division, like
//                 torch_scatter); a count of 0 or 1 leaves the sum as it is (out's initial value takes part
//                 in the sum but not in the count; in floating point up to a signalling NaN being quieted and a
//                 subnormal flushed under torch.set_flush_denormal(True), see divide).
//   min/max wins  a later element replaces the group's value only when it is strictly smaller (larger), so
//                 the first position along dim wins a tie.
//   NaN           NaN propagates, as in torch.amin/amax and torch.scatter_reduce("amin"/"amax"): a group
//                 holding a NaN gives NaN, and its argindex is the position of its first NaN along dim; a NaN
//                 already in out stays (argindex src.size(dim)). In the win rule: a NaN replaces a number, and
//                 nothing replaces a NaN (nothing compares less or greater than NaN). The rule does not depend
//                 on the order elements are folded in, so every split between threads gives the same result
//                 (a rule like "a NaN wins only as a group's first element" would not survive a split).
#pragma once

#include <ATen/NumericUtils.h>
#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace wb_scatter {

enum class Reduce { Sum, Mean, Min, Max };

template <typename scalar_t>
using acc_type = at::opmath_type<scalar_t>;

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
  return at::_isnan(x) && !at::_isnan(val);
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

}  // namespace wb_scatter
