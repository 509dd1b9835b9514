// The CPU loops' four reductions as one translation unit (see ../scatter_unity.cpp for why): 21 s of CPU
// cold, against 25 s for the four files apart. ninja compiles it beside ../scatter_unity.cpp.
#include "scatter_cpu_sum.cpp"
#include "scatter_cpu_mean.cpp"
#include "scatter_cpu_min.cpp"
#include "scatter_cpu_max.cpp"
