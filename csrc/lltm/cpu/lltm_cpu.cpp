// CPU kernels of the wb_lltm ops (schema: ../lltm.cpp).
//
// The LLTM cell, for a batch of inputs x (batch, input_features) and a state (old_h, old_cell),
// each (batch, state_size):
//
//   X            = [old_h, x]                              (batch, state_size + input_features)
//   gates        = X @ weights.T + bias                    (batch, 3 * state_size), then in place:
//   input_gate   = sigmoid(gates[:, 0S:1S])
//   output_gate  = sigmoid(gates[:, 1S:2S])
//   candidate    = elu(gates[:, 2S:3S])                    (alpha = 1)
//   new_cell     = old_cell + candidate * input_gate
//   new_h        = tanh(new_cell) * output_gate
//
// The forward returns new_h and new_cell, and for the backward the activated gates and X; the
// backward needs no pre-activation, because each activation's slope can be written with its value
// (sigmoid' = s (1 - s), elu' = elu + 1 below 0), so the activated gates overwrite the
// pre-activations in the tensor the matrix product made.
// Matrix products carry most of the arithmetic; ATen's BLAS does them (one forward; three backward,
// see lltm_glue.h). The rest is elementwise, and each direction does it in one loop over the elements
// (a fused kernel), where autograd on the Python version runs a separate kernel per operation,
// each allocating a temporary and walking memory again:
// - forward: sigmoid, elu, tanh and the cell update, after the one addmm that makes the gates;
// - backward: tanh(new_cell) and the gradients of the three gates and of old_cell.
// The activations are transcendental (exp, tanh). A plain loop of std::exp calls is scalar and
// would be several times slower than ATen's vectorized kernels, so the loops use ATen's SIMD
// vector type, at::vec::Vectorized, whose exp and tanh are those ATen's own kernels use.
// Vectorized uses SIMD instructions only when CPU_CAPABILITY_AVX2 (or another capability) is
// defined and the compiler may emit those instructions; workbook/ops/lltm.py passes the flags for
// what this machine's ATen uses (torch.backends.cpu.get_cpu_capability()). Without them the same
// code compiles to scalar loops: still correct, just slower.
//
// Headers: the Tensor class plus one header per ATen function used, and the vector type, not
// <torch/extension.h>; this file compiles in a few seconds instead of half a minute (chapter 02
// measures it).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "../lltm_checks.h"
#include "../lltm_glue.h"

namespace wb_lltm {
namespace {

// One parallel chunk should hold enough elements to pay for waking a thread.
constexpr int64_t kGrainSize = 16384;

// The loops below compute in at::opmath_type<scalar_t> (float for float16 and bfloat16, else
// scalar_t itself), on at::vec::Vectorized<opmath_t>: Vec::size() values in one SIMD register,
// with +, *, / and the transcendental functions exp, expm1 and tanh that ATen's own kernels use.
// These two helpers move up to Vec::size() elements (fewer at the end of a row) between memory of
// scalar_t and such a vector.
template <typename scalar_t>
inline at::vec::Vectorized<at::opmath_type<scalar_t>> load(const scalar_t* data, int64_t count) {
  using opmath_t = at::opmath_type<scalar_t>;
  using Vec = at::vec::Vectorized<opmath_t>;
  if constexpr (std::is_same_v<scalar_t, opmath_t>) {
    return Vec::loadu(data, count);
  } else {  // float16/bfloat16: widen to float one element at a time
    opmath_t buffer[Vec::size()];
    for (int64_t k = 0; k < count; ++k) buffer[k] = static_cast<opmath_t>(data[k]);
    return Vec::loadu(buffer, count);
  }
}

template <typename scalar_t>
inline void store(const at::vec::Vectorized<at::opmath_type<scalar_t>>& values, scalar_t* data, int64_t count) {
  using opmath_t = at::opmath_type<scalar_t>;
  if constexpr (std::is_same_v<scalar_t, opmath_t>) {
    values.store(data, count);
  } else {  // round back to float16/bfloat16
    opmath_t buffer[at::vec::Vectorized<opmath_t>::size()];
    values.store(buffer);
    for (int64_t k = 0; k < count; ++k) data[k] = static_cast<scalar_t>(buffer[k]);
  }
}

// e^x - 1, accurate near x = 0 too (as F.elu is). Vectorized has expm1(), but on x86 Sleef's
// float expm1 behind it costs about twice its exp (torch.expm1 against torch.exp, AVX2, one
// thread). So for float: exp(x) - 1, which is as exact
// as exp(x) except near 0, where the subtraction cancels digits; for |x| < 1/4 the Taylor series
// up to x^7 instead (the next term is below 2e-9 of the result). double keeps expm1().
template <typename opmath_t>
inline at::vec::Vectorized<opmath_t> expm1(const at::vec::Vectorized<opmath_t>& x) {
  using Vec = at::vec::Vectorized<opmath_t>;
  if constexpr (std::is_same_v<opmath_t, float>) {
    const Vec series =
        x * (Vec(1.f) +
             x * (Vec(1.f / 2) +
                  x * (Vec(1.f / 6) +
                       x * (Vec(1.f / 24) + x * (Vec(1.f / 120) + x * (Vec(1.f / 720) + x * Vec(1.f / 5040)))))));
    return Vec::blendv(x.exp() - Vec(1.f), series, x.abs() < Vec(0.25f));  // blendv(a, b, mask): b where mask
  } else {
    return x.expm1();
  }
}

// tanh(x) = (e^2x - 1) / (e^2x + 1), from the expm1 above: Vectorized's tanh() is exact too, but on
// x86 it costs about three exps (measured as above). Above x = 20, tanh(x) is 1 in float and
// double alike, and the clamp keeps e^2x finite (inf / inf would be NaN); minimum() passes NaN
// through.
template <typename opmath_t>
inline at::vec::Vectorized<opmath_t> tanh(const at::vec::Vectorized<opmath_t>& x) {
  using Vec = at::vec::Vectorized<opmath_t>;
  const Vec e = expm1(at::vec::minimum(x, Vec(20)) * Vec(2));
  return e / (e + Vec(2));
}

// Splits rows [0, batch_size) of (batch_size, state_size) work into chunks for PyTorch's threads.
template <typename Function>
void for_each_row_chunk(int64_t batch_size, int64_t state_size, const Function& function) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, state_size));
  at::parallel_for(0, batch_size, rows_per_chunk, function);
}

// Everything of the forward after the matrix product, in one pass over gates (batch, 3 * state_size)
// and old_cell: each vector of columns is read once, its results are written once, and no
// temporary tensor is made. The activated gates overwrite their pre-activations in `gates`.
template <typename scalar_t>
void lltm_forward_elementwise(at::Tensor& gates, const at::Tensor& old_cell, at::Tensor& new_h, at::Tensor& new_cell) {
  using Vec = at::vec::Vectorized<at::opmath_type<scalar_t>>;
  // The loop reads raw memory in row-major order: every tensor must be laid out that way.
  for (const at::Tensor* tensor : std::initializer_list<const at::Tensor*>{&gates, &old_cell, &new_h, &new_cell}) {
    TORCH_INTERNAL_ASSERT(tensor->is_contiguous());
  }
  const int64_t state_size = old_cell.size(1);
  scalar_t* g = gates.mutable_data_ptr<scalar_t>();
  const scalar_t* c_old = old_cell.const_data_ptr<scalar_t>();
  scalar_t* h_new = new_h.mutable_data_ptr<scalar_t>();
  scalar_t* c_new = new_cell.mutable_data_ptr<scalar_t>();
  for_each_row_chunk(old_cell.size(0), state_size, [&](int64_t row_begin, int64_t row_end) {
    const Vec one(1);
    const Vec zero(0);
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t r = row * state_size;               // start of this row in the (batch, state_size) tensors
      scalar_t* input_gate = g + row * 3 * state_size;  // this row of gates: [input | output | candidate]
      scalar_t* output_gate = input_gate + state_size;
      scalar_t* candidate = input_gate + 2 * state_size;
      for (int64_t j = 0; j < state_size; j += Vec::size()) {
        const int64_t n = std::min<int64_t>(Vec::size(), state_size - j);  // fewer at the row's end
        // sigmoid(x) = 1 / (1 + exp(-x)); elu(x) = x for x > 0, exp(x) - 1 otherwise.
        const Vec i = one / (one + load(input_gate + j, n).neg().exp());
        const Vec o = one / (one + load(output_gate + j, n).neg().exp());
        const Vec pre = load(candidate + j, n);
        const Vec z = Vec::blendv(expm1(pre), pre, pre > zero);
        const Vec c = load(c_old + r + j, n) + z * i;
        store(tanh(c) * o, h_new + r + j, n);
        store(c, c_new + r + j, n);
        store(i, input_gate + j, n);
        store(o, output_gate + j, n);
        store(z, candidate + j, n);
      }
    }
  });
}

// d_gates holds the gradient with respect to the pre-activation gates, laid out like gates.
template <typename scalar_t>
void lltm_backward_elementwise(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                               const at::Tensor& gates, at::Tensor& d_gates, at::Tensor& d_old_cell) {
  using Vec = at::vec::Vectorized<at::opmath_type<scalar_t>>;
  // The loop reads raw memory in row-major order: every tensor must be laid out that way.
  for (const at::Tensor* tensor :
       std::initializer_list<const at::Tensor*>{&grad_h, &grad_cell, &new_cell, &gates, &d_gates, &d_old_cell}) {
    TORCH_INTERNAL_ASSERT(tensor->is_contiguous());
  }
  const int64_t state_size = grad_h.size(1);
  const scalar_t* gh = grad_h.const_data_ptr<scalar_t>();
  const scalar_t* gc = grad_cell.const_data_ptr<scalar_t>();
  const scalar_t* c_new = new_cell.const_data_ptr<scalar_t>();
  const scalar_t* g = gates.const_data_ptr<scalar_t>();
  scalar_t* d_g = d_gates.mutable_data_ptr<scalar_t>();
  scalar_t* d_c_old = d_old_cell.mutable_data_ptr<scalar_t>();
  for_each_row_chunk(grad_h.size(0), state_size, [&](int64_t row_begin, int64_t row_end) {
    const Vec one(1);
    const Vec zero(0);
    for (int64_t row = row_begin; row < row_end; ++row) {
      const int64_t r = row * state_size;                     // start of this row in the (batch, state_size) tensors
      const scalar_t* input_gate = g + row * 3 * state_size;  // this row of gates: [input | output | candidate]
      const scalar_t* output_gate = input_gate + state_size;
      const scalar_t* candidate = input_gate + 2 * state_size;
      scalar_t* d_input_gate = d_g + row * 3 * state_size;  // this row of d_gates, the same layout
      scalar_t* d_output_gate = d_input_gate + state_size;
      scalar_t* d_candidate = d_input_gate + 2 * state_size;
      for (int64_t j = 0; j < state_size; j += Vec::size()) {
        const int64_t n = std::min<int64_t>(Vec::size(), state_size - j);  // fewer at the row's end
        const Vec i = load(input_gate + j, n);
        const Vec o = load(output_gate + j, n);
        const Vec z = load(candidate + j, n);
        const Vec t = tanh(load(c_new + r + j, n));
        const Vec g_h = load(gh + r + j, n);
        // new_h = tanh(new_cell) * o: the gradient reaches new_cell through tanh and adds to grad_cell.
        const Vec d_c = load(gc + r + j, n) + g_h * o * (one - t * t);
        // sigmoid' = s * (1 - s), written with the saved gate value s.
        store(d_c * z * i * (one - i), d_input_gate + j, n);
        store(g_h * t * o * (one - o), d_output_gate + j, n);
        // elu'(x) = 1 for x > 0, exp(x) = elu(x) + 1 otherwise; elu(x) > 0 exactly when x > 0.
        const Vec elu_slope = Vec::blendv(z + one, one, z > zero);
        store(d_c * i * elu_slope, d_candidate + j, n);
        store(d_c, d_c_old + r + j, n);  // new_cell = old_cell + ...: its gradient passes through unchanged
      }
    }
  });
}

ForwardOutputs lltm_forward_cpu(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                                const at::Tensor& old_h, const at::Tensor& old_cell) {
  const auto [batch_size, state_size, input_features] = check_forward_arguments(input, weights, bias, old_h, old_cell);
  (void)input_features;
  ForwardTensors t = prepare_forward(input, weights, bias, old_h, old_cell, batch_size, state_size);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "lltm_forward_cpu", [&] {
    lltm_forward_elementwise<scalar_t>(t.gates, t.old_cell, t.new_h, t.new_cell);
  });
  return t.outputs();
}

BackwardOutputs lltm_backward_cpu(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                                  const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights) {
  const auto [batch_size, state_size, input_features] =
      check_backward_arguments(grad_h, grad_cell, new_cell, gates, X, weights);
  (void)input_features;
  BackwardTensors t = prepare_backward(grad_h, grad_cell, new_cell, gates, batch_size, state_size);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_h.scalar_type(), "lltm_backward_cpu", [&] {
    lltm_backward_elementwise<scalar_t>(t.grad_h, t.grad_cell, t.new_cell, t.gates, t.d_gates, t.d_old_cell);
  });
  return finish_backward(t, X, weights, state_size);
}

}  // namespace

TORCH_LIBRARY_IMPL(wb_lltm, CPU, m) {
  m.impl("lltm_forward", &lltm_forward_cpu);
  m.impl("lltm_backward", &lltm_backward_cpu);
}

}  // namespace wb_lltm
