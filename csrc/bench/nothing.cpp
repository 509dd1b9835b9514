// Functions that do nothing, for measuring what a call costs: one registered as an operator
// (torch.ops.wb_bench.nothing, through the dispatcher) and one bound with pybind11 (a module function).
// Only the two headers the registrations need, so the file compiles in seconds.
#include <pybind11/pybind11.h>
#include <torch/library.h>

namespace {
void nothing() {}
}  // namespace

TORCH_LIBRARY(wb_bench, m) {
  m.def("nothing() -> ()", &nothing);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("nothing", &nothing, "does nothing");
}
