// The wb_lltm operators: their schema, the one place that says what the ops are.
// The kernels live elsewhere, one file per backend:
//   cpu/lltm_cpu.cpp    TORCH_LIBRARY_IMPL(wb_lltm, CPU, m)
//   cuda/lltm_cuda.cu   TORCH_LIBRARY_IMPL(wb_lltm, CUDA, m)   (built only where CUDA can be)
// and two more parts are registered from Python, in workbook/lltm.py: the fake kernels (output
// shapes without computing, for torch.compile and torch.export) and the autograd formula.
//
// This file and the CPU kernels need no Python: built alone (CMakeLists.txt) they make an op
// library that a C++ program can load. The Python extension module adds lltm_python.cpp, its
// pybind11 bindings.
#include <torch/library.h>

TORCH_LIBRARY(wb_lltm, m) {
  // Where the Python parts are: an error about a missing fake kernel then says which module to import.
  m.set_python_module("workbook.ops.lltm");
  // The outputs are tuples of a fixed length, matching the kernels' std::tuple return types (a
  // kernel returning another number of tensors is refused when it is registered). `Tensor[]`, a
  // std::vector<at::Tensor>, would also work under torch.compile and torch.export (the fake kernel
  // returns the list), but its length would be written nowhere in the schema.
  m.def(
      "lltm_forward(Tensor input, Tensor weights, Tensor bias, Tensor old_h, Tensor old_cell)"
      " -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "lltm_backward(Tensor grad_h, Tensor grad_cell, Tensor new_cell, Tensor gates, Tensor X,"
      " Tensor weights) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
}
