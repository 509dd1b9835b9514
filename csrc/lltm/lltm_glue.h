// The device-independent half of both LLTM backends (cpu/lltm_cpu.cpp, cuda/lltm_cuda.cu): the
// matrix products before and after the elementwise kernels, and the tensors those kernels read and
// fill. ATen runs the products on the tensors' device (BLAS on the CPU, cuBLAS on the current CUDA
// stream), so only the elementwise kernels differ between backends.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>

#include <tuple>

namespace wb_lltm {

// What the ops return (the schema in lltm.cpp): a fixed number of tensors, so a std::tuple.
// lltm_forward: new_h, new_cell, gates, X.
using ForwardOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
// lltm_backward: d_old_h, d_input, d_weights, d_bias, d_old_cell.
using BackwardOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
// The C++ types of the ops, for calls through the dispatcher (c10::TypedOperatorHandle).
using ForwardSignature = ForwardOutputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        const at::Tensor&);
using BackwardSignature = BackwardOutputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const at::Tensor&);

// Forward: gates = bias + [old_h, input] @ weights.T, and the outputs the kernel fills.
struct ForwardTensors {
  at::Tensor X;                // [old_h, input], contiguous (batch, state_size + input_features)
  at::Tensor gates;            // (batch, 3 * state_size), per row [input | output | candidate]: the kernel
                               // reads the pre-activations and overwrites them with the activated gates
  at::Tensor old_cell;         // contiguous
  at::Tensor new_h, new_cell;  // the kernel's outputs, uninitialised

  // What lltm_forward returns: the new state, then what lltm_backward needs besides the weights.
  ForwardOutputs outputs() const { return {new_h, new_cell, gates, X}; }
};

inline ForwardTensors prepare_forward(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                                      const at::Tensor& old_h, const at::Tensor& old_cell, int64_t batch_size,
                                      int64_t state_size) {
  ForwardTensors t;
  t.X = at::cat({old_h, input}, /*dim=*/1);
  t.gates = at::addmm(bias, t.X, weights.t());  // a fresh contiguous tensor, ours to overwrite
  TORCH_INTERNAL_ASSERT(t.gates.is_contiguous());
  t.old_cell = old_cell.contiguous();  // a copy only if old_cell is not row-major
  t.new_h = at::empty({batch_size, state_size}, t.gates.options());
  t.new_cell = at::empty({batch_size, state_size}, t.gates.options());
  return t;
}

// Backward: the kernel reads the saved tensors and incoming gradients as row-major memory and
// writes d_gates (the gradient of the pre-activation gates) and d_old_cell; the products then
// finish the job.
struct BackwardTensors {
  at::Tensor grad_h, grad_cell, new_cell, gates;  // contiguous
  at::Tensor d_gates, d_old_cell;                 // uninitialised, filled by the kernel
};

inline BackwardTensors prepare_backward(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                        const at::Tensor& new_cell, const at::Tensor& gates, int64_t batch_size,
                                        int64_t state_size) {
  // Incoming gradients are often not contiguous: the gradient of .sum() is an expanded tensor with
  // stride 0. contiguous() copies only what needs it.
  BackwardTensors t{grad_h.contiguous(), grad_cell.contiguous(), new_cell.contiguous(), gates.contiguous(), {}, {}};
  t.d_gates = at::empty({batch_size, 3 * state_size}, grad_h.options());
  t.d_old_cell = at::empty({batch_size, state_size}, grad_h.options());
  return t;
}

// The pre-activation gates are X @ weights.T + bias, so the gradients of weights, bias and
// X = [old_h, input] follow from d_gates by matrix products and a sum.
// d_old_h and d_input come from one product each (with the matching columns of weights), not as two
// views of one d_X: the schema promises outputs that share no memory, and torch.compile relies on it.
inline BackwardOutputs finish_backward(const BackwardTensors& t, const at::Tensor& X, const at::Tensor& weights,
                                       int64_t state_size) {
  at::Tensor d_weights = at::mm(t.d_gates.t(), X);                                                // (3S, S + I)
  at::Tensor d_bias = t.d_gates.sum(/*dim=*/0);                                                   // (3S)
  at::Tensor d_old_h = at::mm(t.d_gates, weights.narrow(1, 0, state_size));                       // (batch, S)
  at::Tensor d_input = at::mm(t.d_gates, weights.narrow(1, state_size, X.size(1) - state_size));  // (batch, I)
  return {d_old_h, d_input, d_weights, d_bias, t.d_old_cell};
}

}  // namespace wb_lltm
