// csrc/scatter_stable/cpu/scatter_stable_cpu_min.cpp — the CPU loops of scatter_min, for every dtype (see
// scatter_stable_cpu.h).
#include "scatter_stable_cpu_loops.h"

namespace wb_scatter_stable {

#define WB_SCATTER_STABLE_CPU_MIN(scalar_t, _) WB_SCATTER_STABLE_CPU_LOOPS(scalar_t, Reduce::Min);
AT_FORALL_SCALAR_TYPES_AND2(Half, BFloat16, WB_SCATTER_STABLE_CPU_MIN)

}  // namespace wb_scatter_stable
