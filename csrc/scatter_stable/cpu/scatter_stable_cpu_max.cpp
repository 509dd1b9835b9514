// csrc/scatter_stable/cpu/scatter_stable_cpu_max.cpp — the CPU loops of scatter_max, for every dtype (see
// scatter_stable_cpu.h).
#include "scatter_stable_cpu_loops.h"

namespace wb_scatter_stable {

#define WB_SCATTER_STABLE_CPU_MAX(scalar_t, _) WB_SCATTER_STABLE_CPU_LOOPS(scalar_t, Reduce::Max);
AT_FORALL_SCALAR_TYPES_AND2(Half, BFloat16, WB_SCATTER_STABLE_CPU_MAX)

}  // namespace wb_scatter_stable
