// The schema of the chapter's TorchScript operators: one TORCH_LIBRARY block per namespace.
//
// The kernels live elsewhere (cpu/warp_perspective_cpu.cpp registers the CPU one), so this file only
// needs torch/library.h: no ATen operator, no OpenCV.
#include <torch/library.h>

#include "workbook_ops.h"

TORCH_LIBRARY(workbook_cv, m) {
  // The fake kernels (output shapes for torch.compile and torch.export) and the autograd formula are
  // registered from Python, by register_python_kernels() in this module. Naming the module here makes torch
  // reject a fake kernel registered from any other module (when it is first used), and name this one in
  // the error about a missing fake kernel while it is not imported yet.
  m.set_python_module("workbook.ops.warp_perspective");
  // `int` in a schema is a 64-bit integer (int64_t in C++), `float` is a double.
  m.def("warp_perspective(Tensor image, Tensor warp, int height, int width) -> Tensor");
  // The gradient with respect to the image, of the image's size, from the gradient of the output.
  m.def("warp_perspective_backward(Tensor grad, Tensor warp, int image_height, int image_width) -> Tensor");
}

namespace workbook_ops {

// An ordinary function that a C++ program can call. Calling it is one way to make the linker keep
// this library even with --as-needed (see chapter 06).
const char* describe() {
  return "workbook ops: workbook_cv::warp_perspective, workbook_classes::TensorStack";
}

}  // namespace workbook_ops
