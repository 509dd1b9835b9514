// The wb_lltm operators: their schema, the one place that says what the ops are, and their autograd.
// The kernels live elsewhere, one file per backend:
//   cpu/lltm_cpu.cpp    TORCH_LIBRARY_IMPL(wb_lltm, CPU, m)
//   cuda/lltm_cuda.cu   TORCH_LIBRARY_IMPL(wb_lltm, CUDA, m)   (built only where CUDA can be)
// The autograd kernels below (the Autograd key) are device-independent: they call the ops again below
// autograd, where the dispatcher picks the kernel of the tensors' device. The fake kernels (output
// shapes without computing, for torch.compile and torch.export) are registered from Python, in
// workbook/ops/lltm.py.
//
// This file and the CPU kernels need no Python: built alone (CMakeLists.txt) they make an op
// library that a C++ program can load, gradients included. The Python extension module adds
// lltm_python.cpp, its pybind11 bindings.
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "lltm_checks.h"
#include "lltm_glue.h"

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

namespace wb_lltm {
// Internal linkage: the function-local statics below must not merge with those of another library
// built from this file (chapter 05's CUDA emulation is one) in the same process.
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// Whether autograd has anything to record of a call with these arguments: grad mode on and one of
// them requiring grad, or a forward-mode tangent on one (which the Function refuses, clearly).
// Otherwise the kernels below call the op below autograd at once, as autograd does for torch's own
// ops: no graph node, nothing saved. That is every forward under torch.no_grad(), and every
// lltm_backward that a backward pass runs (grad mode is off there unless create_graph=True).
bool needs_autograd(std::initializer_list<const at::Tensor*> arguments) {
  const bool grad_mode = c10::GradMode::is_enabled();
  for (const at::Tensor* tensor : arguments)
    if ((grad_mode && tensor->requires_grad()) || tensor->_fw_grad(/*level=*/0).defined()) return true;
  return false;
}

// The backward of lltm_forward is lltm_backward; lltm_backward itself has none (first derivatives only).
class LLTMForward : public torch::autograd::Function<LLTMForward> {
 public:
  // lltm_forward, called below autograd: the guard takes Autograd (and ADInplaceOrView) out of this
  // thread's dispatch for the call, so that it reaches the kernel of the tensors' device, or the fake
  // kernel while torch.compile traces, not this one again.
  static ForwardOutputs below_autograd(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                                       const at::Tensor& old_h, const at::Tensor& old_cell) {
    static const auto op = find_op<ForwardSignature>("wb_lltm::lltm_forward");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(input, weights, bias, old_h, old_cell);
  }

  static variable_list forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weights,
                               const at::Tensor& bias, const at::Tensor& old_h, const at::Tensor& old_cell) {
    auto [new_h, new_cell, gates, X] = below_autograd(input, weights, bias, old_h, old_cell);
    ctx->save_for_backward({new_cell, gates, X, weights});
    // gates and X are returned for the backward only, and backward() ignores any gradient sent to them.
    // Marked, they come out with requires_grad=False: autograd treats them as constants. Left unmarked,
    // they would require grad, and a loss computed from them would get wrong gradients, silently.
    ctx->mark_non_differentiable({gates, X});
    // Undefined gradients stay undefined rather than becoming tensors of zeros: gates and X never get
    // one, and backward() fills in the rare missing grad_h or grad_cell itself.
    ctx->set_materialize_grads(false);
    return {new_h, new_cell, gates, X};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = find_op<BackwardSignature>("wb_lltm::lltm_backward");
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& new_cell = saved[0];
    const at::Tensor grad_h = grads[0].defined() ? grads[0] : at::zeros_like(new_cell);
    const at::Tensor grad_cell = grads[1].defined() ? grads[1] : at::zeros_like(new_cell);
    // Through the dispatcher with autograd: under create_graph=True, lltm_backward's own autograd
    // kernel (below) records that a second derivative is refused.
    auto [d_old_h, d_input, d_weights, d_bias, d_old_cell] =
        op.call(grad_h, grad_cell, new_cell, saved[1], saved[2], saved[3]);
    return {d_input, d_weights, d_bias, d_old_h, d_old_cell};  // one per input of forward(), in order
  }
};

class LLTMBackward : public torch::autograd::Function<LLTMBackward> {
 public:
  static BackwardOutputs below_autograd(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                        const at::Tensor& new_cell, const at::Tensor& gates, const at::Tensor& X,
                                        const at::Tensor& weights) {
    static const auto op = find_op<BackwardSignature>("wb_lltm::lltm_backward");
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(grad_h, grad_cell, new_cell, gates, X, weights);
  }

  static variable_list forward(AutogradContext*, const at::Tensor& grad_h, const at::Tensor& grad_cell,
                               const at::Tensor& new_cell, const at::Tensor& gates, const at::Tensor& X,
                               const at::Tensor& weights) {
    auto [d_old_h, d_input, d_weights, d_bias, d_old_cell] =
        below_autograd(grad_h, grad_cell, new_cell, gates, X, weights);
    return {d_old_h, d_input, d_weights, d_bias, d_old_cell};
  }

  static variable_list backward(AutogradContext*, variable_list) {
    TORCH_CHECK(false,
                "wb_lltm::lltm_backward is not differentiable: the LLTM op has first derivatives only "
                "(a gradient computed with create_graph=True cannot be differentiated again, so gradgradcheck fails)");
  }
};

ForwardOutputs lltm_forward_autograd(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                                     const at::Tensor& old_h, const at::Tensor& old_cell) {
  check_defined(
      "lltm_forward",
      {{&input, "input"}, {&weights, "weights"}, {&bias, "bias"}, {&old_h, "old_h"}, {&old_cell, "old_cell"}});
  if (!needs_autograd({&input, &weights, &bias, &old_h, &old_cell}))
    return LLTMForward::below_autograd(input, weights, bias, old_h, old_cell);
  const variable_list outputs = LLTMForward::apply(input, weights, bias, old_h, old_cell);
  return {outputs[0], outputs[1], outputs[2], outputs[3]};
}

BackwardOutputs lltm_backward_autograd(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                       const at::Tensor& new_cell, const at::Tensor& gates, const at::Tensor& X,
                                       const at::Tensor& weights) {
  check_defined("lltm_backward", {{&grad_h, "grad_h"},
                                  {&grad_cell, "grad_cell"},
                                  {&new_cell, "new_cell"},
                                  {&gates, "gates"},
                                  {&X, "X"},
                                  {&weights, "weights"}});
  if (!needs_autograd({&grad_h, &grad_cell, &new_cell, &gates, &X, &weights}))
    return LLTMBackward::below_autograd(grad_h, grad_cell, new_cell, gates, X, weights);
  const variable_list outputs = LLTMBackward::apply(grad_h, grad_cell, new_cell, gates, X, weights);
  return {outputs[0], outputs[1], outputs[2], outputs[3], outputs[4]};
}

}  // namespace
}  // namespace wb_lltm

TORCH_LIBRARY_IMPL(wb_lltm, Autograd, m) {
  m.impl("lltm_forward", &wb_lltm::lltm_forward_autograd);
  m.impl("lltm_backward", &wb_lltm::lltm_backward_autograd);
}
