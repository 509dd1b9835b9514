// The library's op-level C++ compiled as one translation unit (a "unity build"): the schemas, the argument
// checks, the C++ autograd and the CPU kernel with its registration. Each file below includes what it uses and
// compiles on its own; compiled apart, the six parse torch's headers six times, and those parses are most of
// their time. Measured cold (ccache off, one compiler at a time, idle 2-core machine): 68-79 s of CPU for the
// six files apart, 24-29 s for this unit. The four loop files (cpu/scatter_cpu_<reduction>.cpp) stay apart:
// their headers are light (about 1 s), so together they would save nothing. The price: an edit to any of the six
// recompiles all of them, and with more cores this unit (not the slowest file) is what a build waits for.
// All three builds (load(), setup.py, CMakeLists.txt) compile this file and the four loop files.
#include "autograd.cpp"
#include "autograd_min_max.cpp"
#include "autograd_sum_mean.cpp"
#include "checks.cpp"
#include "cpu/scatter_cpu.cpp"
#include "scatter.cpp"
