// The smallest useful extension: one operator, registered with PyTorch's dispatcher.
// Chapter 00 builds it to prove that compiler, ninja, torch's headers and the linker work together.
//
// The includes are deliberately narrow: ATen/core/Tensor.h, the one per-operator header we call and
// torch/library.h compile in about a third of the time that torch/extension.h takes (chapter 02 measures it).
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <torch/library.h>

namespace {

at::Tensor add_one(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "add_one: x must be a floating-point tensor, got ", x.scalar_type());
  return at::add(x, 1);
}

}  // namespace

TORCH_LIBRARY(wb_setup_check, m) {
  m.def("add_one(Tensor x) -> Tensor");
}

// CompositeImplicitAutograd: one kernel for every device, written with ATen functions that autograd
// already knows, so the dispatcher runs it above the autograd layer and the gradient comes for free
// (x + 1 passes the gradient through). torch.compile and torch.export see through it to at::add, so
// it needs no fake kernel either. (Registered for CPU or CompositeExplicitAutograd, it would run below
// autograd with no formula: the output would require grad, and backward() would warn and leave x.grad None.)
TORCH_LIBRARY_IMPL(wb_setup_check, CompositeImplicitAutograd, m) {
  m.impl("add_one", add_one);
}
