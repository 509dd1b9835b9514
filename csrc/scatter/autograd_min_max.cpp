// csrc/scatter/autograd_min_max.cpp — the torch::autograd::Functions of scatter_min and scatter_max,
// and their Autograd kernels (registered in autograd.cpp).
// The Functions and their op handles have internal linkage (the unnamed namespace): the function-local
// statics of a class template would otherwise be one process-wide object shared with any other library
// built from these sources (the CUDA emulation of chapter 05 is one), and the first to run would decide
// the op every copy calls.
#include <ATen/core/LegacyTypeDispatch.h>  // at::AutoDispatchBelowADInplaceOrView
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <tuple>
#include <vector>

#include "autograd.h"
#include "scatter.h"

namespace wb_scatter {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// Both overloads of scatter_min or scatter_max, called below autograd as SumLikeOp calls scatter_sum's
// and scatter_mean's (autograd_sum_mean.cpp): returns (values, argindex).
struct ArgReduceOp {
  c10::TypedOperatorHandle<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, OptionalSymInt)>
      functional;
  c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, int64_t, const Tensor&)> accumulate;

  explicit ArgReduceOp(const char* name)
      : functional(
            find_op<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, OptionalSymInt)>(name, "")),
        accumulate(find_op<Tensor(const Tensor&, const Tensor&, int64_t, const Tensor&)>(name, "accumulate")) {}

  std::tuple<Tensor, Tensor> below_autograd(const Tensor& src, const Tensor& index, int64_t dim,
                                            const std::optional<Tensor>& out, OptionalSymInt dim_size,
                                            bool grad_mode) const {
    at::AutoDispatchBelowADInplaceOrView guard;
    if (!out.has_value()) return functional.call(src, index, dim, dim_size);
    at::AutoGradMode callers_grad_mode(grad_mode);
    return {*out, accumulate.call(src, index, dim, *out)};
  }
};

// scatter_min and scatter_max: forward and backward shared, Self gives the op's name.
template <typename Self>
class ScatterArgReduce : public torch::autograd::Function<Self> {
 public:
  static const ArgReduceOp& op() {
    static const ArgReduceOp op(Self::name);
    return op;
  }

  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                               const std::optional<Variable>& out, OptionalSymInt dim_size, bool grad_mode) {
    auto [result, arg] = op().below_autograd(src, index, dim, out, dim_size, grad_mode);
    dim = wrap_dim(src, dim);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["n"] = src.sym_size(dim);
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({arg});
    ctx->mark_non_differentiable({arg});
    if (out.has_value()) ctx->mark_dirty({*out});
    return {result, arg};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    Tensor arg = ctx->get_saved_variables()[0];
    int64_t dim = ctx->saved_data["dim"].toInt();
    c10::SymInt n = ctx->saved_data["n"].toSymInt();
    Tensor grad_src;
    if (ctx->needs_input_grad(0)) {
      // Route each group's gradient to its winner; empty groups (arg == n) land in an extra slot.
      std::vector<c10::SymInt> shape = grad.sym_sizes().vec();
      shape[dim] = n + 1;
      grad_src = at::zeros_symint(shape, grad.options()).scatter_(dim, arg, grad).narrow_symint(dim, 0, n);
    }
    Tensor grad_out;
    if (ctx->saved_data["has_out"].toBool()) grad_out = grad.masked_fill(arg.ne(n), 0);
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor(), Tensor()};
  }
};

class ScatterMin : public ScatterArgReduce<ScatterMin> {
 public:
  static constexpr const char* name = "wb_scatter::scatter_min";
};
class ScatterMax : public ScatterArgReduce<ScatterMax> {
 public:
  static constexpr const char* name = "wb_scatter::scatter_max";
};

template <typename F>
std::tuple<Tensor, Tensor> arg_reduce(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  check_defined(src, index, std::nullopt);
  const bool grad_mode = torch::autograd::GradMode::is_enabled();
  if (!needs_autograd(src)) return F::op().below_autograd(src, index, dim, std::nullopt, dim_size, grad_mode);
  variable_list result = F::apply(src, index, dim, std::nullopt, dim_size, grad_mode);
  return {result[0], result[1]};
}

template <typename F>
Tensor arg_reduce_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  check_defined(src, index, out);
  check_out_for_autograd(src, out);
  variable_list result = F::apply(src, index, dim, out, std::nullopt, torch::autograd::GradMode::is_enabled());
  return result[1];  // the argindex; out itself was written
}

}  // namespace

// The Autograd kernels (autograd.h).
std::tuple<Tensor, Tensor> scatter_min(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  return arg_reduce<ScatterMin>(src, index, dim, dim_size);
}
Tensor scatter_min_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  return arg_reduce_accumulate<ScatterMin>(src, index, dim, out);
}
std::tuple<Tensor, Tensor> scatter_max(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  return arg_reduce<ScatterMax>(src, index, dim, dim_size);
}
Tensor scatter_max_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  return arg_reduce_accumulate<ScatterMax>(src, index, dim, out);
}

}  // namespace wb_scatter
