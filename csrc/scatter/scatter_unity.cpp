// The library's op-level C++ compiled as one translation unit (a "unity build"): the schemas, the argument
// checks, the C++ autograd and the CPU kernel's registration. Each file below includes what it uses and
// can be read (and compiled) on its own; compiled separately they parse torch's headers six times, and the
// headers are most of the work. Measured cold (ccache off, one compiler at a time, 2-core machine): the six
// files apart took 108 s of CPU, this unit 24 s. All three builds (load(), setup.py, CMakeLists.txt) compile it.
#include "scatter.cpp"
#include "checks.cpp"
#include "autograd.cpp"
#include "autograd_sum_mean.cpp"
#include "autograd_min_max.cpp"
#include "cpu/scatter_cpu.cpp"
