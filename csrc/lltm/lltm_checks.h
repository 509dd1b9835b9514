// Input validation shared by every backend of the wb_lltm ops (CPU here, CUDA in cuda/).
//
// The dispatcher picks a kernel from the devices of the arguments, so each kernel must first make
// sure the arguments fit together: a learner's mistake (a transposed weight, a float64 state with
// float32 weights, a state on another device) has to end in a RuntimeError that names the argument,
// never in a crash or in numbers computed from the wrong memory.
//
// Only c10 and the Tensor class are needed here, so this header costs next to nothing to compile.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <initializer_list>
#include <tuple>
#include <utility>

namespace wb_lltm {

// Checks that every tensor of `arguments` (pointer, name) is defined. The autograd kernels (lltm.cpp)
// run before a backend's checks, and autograd cannot record an undefined tensor, so they check this first.
inline void check_defined(const char* op, std::initializer_list<std::pair<const at::Tensor*, const char*>> arguments) {
  for (const auto& [tensor, name] : arguments) {
    TORCH_CHECK(tensor->defined(), op, ": ", name, " is an undefined tensor");
  }
}

// Checks that `tensor` is a floating-point tensor with `dim` dimensions and the same dtype and
// device as `reference` (the first argument of the op, whose name is `reference_name`).
inline void check_argument(const char* op, const at::Tensor& tensor, const char* name, int64_t dim,
                           const at::Tensor& reference, const char* reference_name) {
  TORCH_CHECK(tensor.defined(), op, ": ", name, " is an undefined tensor");
  TORCH_CHECK(at::isFloatingType(tensor.scalar_type()), op, ": ", name, " must be a floating-point tensor, got dtype ",
              tensor.scalar_type());
  TORCH_CHECK(tensor.dim() == dim, op, ": ", name, " must be ", dim, "-D, got a ", tensor.dim(), "-D tensor of shape ",
              tensor.sizes());
  TORCH_CHECK(tensor.scalar_type() == reference.scalar_type(), op, ": ", name, " has dtype ", tensor.scalar_type(),
              " but ", reference_name, " has dtype ", reference.scalar_type(),
              "; all arguments must have the same dtype");
  TORCH_CHECK(tensor.device() == reference.device(), op, ": ", name, " is on ", tensor.device(), " but ",
              reference_name, " is on ", reference.device(), "; all arguments must be on the same device");
}

// Checks that `tensor` has exactly the shape `expected`, which is `formula` with sizes taken from
// the arguments named in `source`.
inline void check_shape(const char* op, const at::Tensor& tensor, const char* name,
                        std::initializer_list<int64_t> expected, const char* formula, const char* source) {
  TORCH_CHECK(tensor.sizes() == at::IntArrayRef(expected), op, ": ", name, " must have shape ", formula, " = ",
              at::IntArrayRef(expected), " (sizes from ", source, "), got ", tensor.sizes());
}

// Validates the arguments of lltm_forward; returns (batch_size, state_size, input_features).
inline std::tuple<int64_t, int64_t, int64_t> check_forward_arguments(const at::Tensor& input, const at::Tensor& weights,
                                                                     const at::Tensor& bias, const at::Tensor& old_h,
                                                                     const at::Tensor& old_cell) {
  constexpr const char* op = "lltm_forward";
  TORCH_CHECK(input.defined(), op, ": input is an undefined tensor");
  check_argument(op, input, "input", 2, input, "input");
  check_argument(op, weights, "weights", 2, input, "input");
  check_argument(op, bias, "bias", 1, input, "input");
  check_argument(op, old_h, "old_h", 2, input, "input");
  check_argument(op, old_cell, "old_cell", 2, input, "input");

  const int64_t batch_size = input.size(0);
  const int64_t input_features = input.size(1);
  const int64_t state_size = old_h.size(1);
  TORCH_CHECK(old_h.size(0) == batch_size, op, ": old_h must have one row per row of input (", batch_size,
              "), got shape ", old_h.sizes());
  check_shape(op, old_cell, "old_cell", {batch_size, state_size}, "(batch_size, state_size)", "input and old_h");
  check_shape(op, weights, "weights", {3 * state_size, state_size + input_features},
              "(3 * state_size, state_size + input_features)", "old_h and input");
  check_shape(op, bias, "bias", {3 * state_size}, "(3 * state_size)", "old_h");
  return {batch_size, state_size, input_features};
}

// Validates the arguments of lltm_backward; returns (batch_size, state_size, input_features).
inline std::tuple<int64_t, int64_t, int64_t> check_backward_arguments(const at::Tensor& grad_h,
                                                                      const at::Tensor& grad_cell,
                                                                      const at::Tensor& new_cell,
                                                                      const at::Tensor& gates, const at::Tensor& X,
                                                                      const at::Tensor& weights) {
  constexpr const char* op = "lltm_backward";
  TORCH_CHECK(grad_h.defined(), op, ": grad_h is an undefined tensor");
  const std::pair<const at::Tensor*, const char*> arguments[] = {
      {&grad_h, "grad_h"}, {&grad_cell, "grad_cell"}, {&new_cell, "new_cell"}, {&gates, "gates"},
      {&X, "X"},           {&weights, "weights"}};
  for (const auto& [tensor, name] : arguments) {
    check_argument(op, *tensor, name, 2, grad_h, "grad_h");
  }
  const int64_t batch_size = grad_h.size(0);
  const int64_t state_size = grad_h.size(1);
  TORCH_CHECK(X.size(0) == batch_size && X.size(1) >= state_size, op,
              ": X must have shape (batch_size, state_size + input_features) = [", batch_size, ", ", state_size,
              " + input_features] (sizes from grad_h), got ", X.sizes());
  const int64_t input_features = X.size(1) - state_size;
  check_shape(op, grad_cell, "grad_cell", {batch_size, state_size}, "(batch_size, state_size)", "grad_h");
  check_shape(op, new_cell, "new_cell", {batch_size, state_size}, "(batch_size, state_size)", "grad_h");
  check_shape(op, gates, "gates", {batch_size, 3 * state_size}, "(batch_size, 3 * state_size)", "grad_h");
  check_shape(op, weights, "weights", {3 * state_size, state_size + input_features},
              "(3 * state_size, state_size + input_features)", "grad_h and X");
  return {batch_size, state_size, input_features};
}

}  // namespace wb_lltm
