// csrc/scatter_stable/cpu/scatter_stable_cpu.h — what the CPU kernel (scatter_stable_cpu.cpp) calls of the CPU
// loops, as ../../scatter/cpu/scatter_cpu.h is for the ATen library: scatter_loops is defined in
// scatter_stable_cpu_loops.h and compiled (explicitly instantiated) for every dtype in scatter_stable_cpu_sum.cpp,
// _mean, _min and _max, one reduction per file, which ninja compiles in parallel.
#pragma once

#include <torch/csrc/stable/ops.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

#include "../scatter_stable.h"
#include "../scatter_stable_reduce_rules.h"

namespace wb_scatter_stable {

constexpr int64_t kGrain = 32768;  // elements per task below which threads do not pay off (ATen uses the same)

// at::parallel_for rethrows, after the loop, an exception a task threw. torch::stable::parallel_for cannot: an
// exception must not cross the C shim (targeting torch 2.10 it would come back as a bare "torch_parallel_for
// API call failed"). So the tasks catch it here, and the one from the task that starts first along the range is
// rethrown once the loop is over, whichever thread failed first: the error message does not depend on timing.
// Once a task has failed, tasks further along the range are skipped (their result is discarded anyway).
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  std::mutex mutex;
  std::exception_ptr error;
  std::atomic<int64_t> error_at{end};
  torch::stable::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    if (b > error_at.load(std::memory_order_relaxed)) return;
    try {
      f(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (b < error_at.load()) {
        error_at.store(b);
        error = std::current_exception();
      }
    }
  });
  if (error) std::rethrow_exception(error);
}

// Reduce src (an [outer, n, inner] contiguous array) into `acc` ([outer, m, inner], contiguous, of the accumulation
// type) by `index` (strides in g); `extra`: mean's count, min/max's argindex, null for sum. `fresh`: acc was
// allocated for this call (it holds zeros).
template <typename scalar_t, typename acc_t, Reduce R>
void scatter_loops(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                   bool fresh);

}  // namespace wb_scatter_stable
