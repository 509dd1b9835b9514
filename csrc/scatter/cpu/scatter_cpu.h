// csrc/scatter/cpu/scatter_cpu.h — what the CPU kernel (scatter_cpu.cpp) calls of the CPU loops.
//
// scatter_loops is defined in scatter_cpu_loops.h and compiled (explicitly instantiated) for every
// dtype in scatter_cpu_sum.cpp, scatter_cpu_mean.cpp, scatter_cpu_min.cpp and scatter_cpu_max.cpp,
// one reduction per file: four translation units that ninja compiles in parallel, each a quarter of
// the work. Every other file sees only the declaration below, so none of them compiles the loops again.
#pragma once

#include <cstdint>

#include "../geometry.h"
#include "../scatter_reduce_rules.h"

namespace wb_scatter {

constexpr int64_t kGrain = 32768;  // elements per task below which threads do not pay off (ATen uses the same)

// Reduce src (an [outer, n, inner] contiguous array) into `acc` ([outer, m, inner], contiguous, of the
// accumulation type) by `index` (strides in g); `extra` is what a reduction keeps per group beside its
// value: mean's count (ScatterOutputs::count), min/max's argindex (ScatterOutputs::argindex); null for
// sum. `fresh`: acc was allocated for this call (it holds zeros).
template <typename scalar_t, typename acc_t, Reduce R>
void scatter_loops(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                   bool fresh);

}  // namespace wb_scatter
