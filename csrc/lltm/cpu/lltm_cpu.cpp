// CPU kernels of the wb_lltm ops (schema: ../lltm.cpp).
//
// The LLTM cell, for a batch of inputs x (batch, input_features) and a state (old_h, old_cell),
// each (batch, state_size):
//
//   X            = [old_h, x]                              (batch, state_size + input_features)
//   gate_weights = X @ weights.T + bias                    (batch, 3 * state_size)
//   input_gate   = sigmoid(gate_weights[:, 0S:1S])
//   output_gate  = sigmoid(gate_weights[:, 1S:2S])
//   candidate    = elu(gate_weights[:, 2S:3S])             (alpha = 1)
//   new_cell     = old_cell + candidate * input_gate
//   new_h        = tanh(new_cell) * output_gate
//
// Two matrix products carry most of the arithmetic; ATen's BLAS does them. The rest is elementwise:
// - forward: the activations are transcendental (exp, tanh); ATen's implementations of them are
//   vectorized (SIMD) and beat a scalar loop of std::exp calls by far, so the forward is a short
//   sequence of ATen calls. Made from C++, each call skips the Python interpreter.
// - backward: given tanh(new_cell) (one vectorized ATen call), the gradients of all three gates
//   and of old_cell are plain arithmetic on values the forward saved. One loop over the elements
//   computes them all (a fused kernel), where autograd on the Python version runs a dozen separate
//   kernels, each allocating a temporary and walking memory again.
//
// Headers: the Tensor class plus one header per ATen function used, not <torch/extension.h>;
// this file compiles in a few seconds instead of half a minute (chapter 02 measures it).
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/elu.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../lltm_checks.h"

namespace wb_lltm {
namespace {

// One parallel chunk should hold enough elements to pay for waking a thread.
constexpr int64_t kGrainSize = 16384;

// d_gates holds the gradient with respect to gate_weights (batch, 3 * state_size), laid out like it.
template <typename scalar_t>
void lltm_backward_elementwise(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                               const at::Tensor& tanh_new_cell, const at::Tensor& input_gate,
                               const at::Tensor& output_gate, const at::Tensor& candidate_cell,
                               const at::Tensor& gate_weights, at::Tensor& d_gates,
                               at::Tensor& d_old_cell) {
  using opmath_t = at::opmath_type<scalar_t>;
  // The loop reads raw memory in row-major order: every tensor must be laid out that way.
  for (const at::Tensor* tensor : std::initializer_list<const at::Tensor*>{
           &grad_h, &grad_cell, &tanh_new_cell, &input_gate, &output_gate,
           &candidate_cell, &gate_weights, &d_gates, &d_old_cell}) {
    TORCH_INTERNAL_ASSERT(tensor->is_contiguous());
  }
  const int64_t state_size = grad_h.size(1);
  const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
  const scalar_t* gc = grad_cell.const_data_ptr<scalar_t>();
  const scalar_t* tanh_c_new = tanh_new_cell.const_data_ptr<scalar_t>();
  const scalar_t* i_gate = input_gate.const_data_ptr<scalar_t>();
  const scalar_t* o_gate = output_gate.const_data_ptr<scalar_t>();
  const scalar_t* z_cand = candidate_cell.const_data_ptr<scalar_t>();
  const scalar_t* gates = gate_weights.const_data_ptr<scalar_t>();
  scalar_t* d_g = d_gates.mutable_data_ptr<scalar_t>();
  scalar_t* d_c_old = d_old_cell.mutable_data_ptr<scalar_t>();
  const int64_t batch_size = grad_h.size(0);
  // Parallel over rows (each chunk a range of rows); within a row, a plain loop over the columns
  // that the compiler can turn into SIMD instructions.
  const int64_t rows_per_chunk = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, state_size));
  at::parallel_for(0, batch_size, rows_per_chunk, [&](int64_t row_begin, int64_t row_end) {
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t r = row * state_size;  // start of this row in the (batch, state_size) tensors
      const scalar_t* pre_candidate = gates + row * 3 * state_size + 2 * state_size;
      scalar_t* d_input_gate = d_g + row * 3 * state_size;  // this row of d_gates: [d_i | d_o | d_z]
      scalar_t* d_output_gate = d_input_gate + state_size;
      scalar_t* d_candidate = d_input_gate + 2 * state_size;
      for (int64_t j = 0; j < state_size; ++j) {
        const opmath_t i = i_gate[r + j];
        const opmath_t o = o_gate[r + j];
        const opmath_t z = z_cand[r + j];
        const opmath_t t = tanh_c_new[r + j];
        const opmath_t g_h = gh[r + j];
        // new_h = tanh(new_cell) * o: the gradient reaches new_cell through tanh and adds to grad_cell.
        const opmath_t d_c = opmath_t(gc[r + j]) + g_h * o * (opmath_t(1) - t * t);
        // sigmoid' = s * (1 - s), written with the saved gate value s.
        d_input_gate[j] = d_c * z * i * (opmath_t(1) - i);
        d_output_gate[j] = g_h * t * o * (opmath_t(1) - o);
        // elu'(x) = 1 for x > 0, exp(x) = elu(x) + 1 otherwise.
        const opmath_t elu_slope = opmath_t(pre_candidate[j]) > opmath_t(0) ? opmath_t(1) : z + opmath_t(1);
        d_candidate[j] = d_c * i * elu_slope;
        d_c_old[r + j] = d_c;  // new_cell = old_cell + ...: its gradient passes through unchanged
      }
    }
  });
}

std::vector<at::Tensor> lltm_forward_cpu(const at::Tensor& input, const at::Tensor& weights,
                                         const at::Tensor& bias, const at::Tensor& old_h,
                                         const at::Tensor& old_cell) {
  const auto [batch_size, state_size, input_features] =
      check_forward_arguments(input, weights, bias, old_h, old_cell);
  (void)input_features;

  at::Tensor X = at::cat({old_h, input}, /*dim=*/1);
  // addmm returns a fresh contiguous (batch, 3 * state_size) tensor: bias + X @ weights.T
  at::Tensor gate_weights = at::addmm(bias, X, weights.t());
  TORCH_INTERNAL_ASSERT(gate_weights.is_contiguous());
  // The activations are transcendental functions (exp, tanh); ATen's versions are vectorized
  // (SIMD), which beats a scalar loop of std::exp calls by far, so the forward calls them.
  at::Tensor input_gate = at::sigmoid(gate_weights.narrow(1, 0, state_size));
  at::Tensor output_gate = at::sigmoid(gate_weights.narrow(1, state_size, state_size));
  at::Tensor candidate_cell = at::elu(gate_weights.narrow(1, 2 * state_size, state_size));
  // new_cell = old_cell + candidate * input_gate. Written as (candidate * input_gate) += old_cell so
  // that new_cell is contiguous like the gates: addcmul(old_cell, ...) would copy old_cell's
  // memory layout, which may be column-major.
  at::Tensor new_cell = at::mul(candidate_cell, input_gate).add_(old_cell);
  at::Tensor new_h = at::tanh(new_cell).mul_(output_gate);  // in place on a fresh temporary
  return {new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights};
}

std::vector<at::Tensor> lltm_backward_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell,
                                          const at::Tensor& new_cell, const at::Tensor& input_gate,
                                          const at::Tensor& output_gate,
                                          const at::Tensor& candidate_cell, const at::Tensor& X,
                                          const at::Tensor& gate_weights,
                                          const at::Tensor& weights) {
  const auto [batch_size, state_size, input_features] =
      check_backward_arguments(grad_h, grad_cell, new_cell, input_gate, output_gate,
                               candidate_cell, X, gate_weights, weights);
  (void)input_features;

  // Incoming gradients are often not contiguous (the gradient of .sum() is an expanded tensor
  // with stride 0), and the loop below reads raw memory in row-major order.
  const at::Tensor grad_h_c = grad_h.contiguous();
  const at::Tensor grad_cell_c = grad_cell.contiguous();
  // at::tanh is vectorized, so the loop needs no exp/tanh of its own. Its result has the memory
  // layout of its input, hence contiguous() before, not after.
  const at::Tensor tanh_new_cell = at::tanh(new_cell.contiguous());
  const at::Tensor input_gate_c = input_gate.contiguous();
  const at::Tensor output_gate_c = output_gate.contiguous();
  const at::Tensor candidate_cell_c = candidate_cell.contiguous();
  const at::Tensor gate_weights_c = gate_weights.contiguous();

  at::Tensor d_gates = at::empty({batch_size, 3 * state_size}, grad_h.options());
  at::Tensor d_old_cell = at::empty({batch_size, state_size}, grad_h.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_h.scalar_type(), "lltm_backward_cpu", [&] {
    lltm_backward_elementwise<scalar_t>(grad_h_c, grad_cell_c, tanh_new_cell, input_gate_c,
                                        output_gate_c, candidate_cell_c, gate_weights_c, d_gates,
                                        d_old_cell);
  });

  // gate_weights = X @ weights.T + bias, so:
  at::Tensor d_weights = at::mm(d_gates.t(), X);   // (3S, S + I)
  at::Tensor d_bias = d_gates.sum(/*dim=*/0);       // (3S)
  at::Tensor d_X = at::mm(d_gates, weights);       // (batch, S + I); X = [old_h, input]
  at::Tensor d_old_h = d_X.narrow(1, 0, state_size);
  at::Tensor d_input = d_X.narrow(1, state_size, X.size(1) - state_size);
  return {d_old_h, d_input, d_weights, d_bias, d_old_cell};
}

}  // namespace

TORCH_LIBRARY_IMPL(wb_lltm, CPU, m) {
  m.impl("lltm_forward", &lltm_forward_cpu);
  m.impl("lltm_backward", &lltm_backward_cpu);
}

}  // namespace wb_lltm
