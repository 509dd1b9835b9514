// csrc/scatter/autograd_sum_mean.cpp — the torch::autograd::Functions of scatter_sum and scatter_mean,
// and their Autograd kernels (registered in autograd.cpp).
// The Functions and their op handles have internal linkage (the unnamed namespace): the function-local
// statics of a class template would otherwise be one process-wide object shared with any other library
// built from these sources (the CUDA emulation of chapter 05 is one), and the first to run would decide
// the op every copy calls.
#include <ATen/core/LegacyTypeDispatch.h>  // at::AutoDispatchBelowADInplaceOrView
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <utility>
#include <vector>

#include "autograd.h"
#include "scatter.h"

namespace wb_scatter {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// Both overloads of scatter_sum or scatter_mean, called below autograd: the guard takes the
// Autograd and ADInplaceOrView keys out of this thread's dispatch, so the dispatcher goes on to
// the kernel of the tensors' backend (CPU, CUDA, or the fake kernel under torch.compile) instead
// of coming back to the autograd kernel that is calling.
// The write into out is made with the caller's grad mode (`grad_mode`), not the one a Function's
// forward() runs in (off). Eager autograd does not mind, but torch.compile does: its functionalization
// takes a write made with grad mode off for one autograd cannot see, and drops the op's backward
// from out's gradient (out's initial values would get the incoming gradient unmasked, undivided).
struct SumLikeOp {
  c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, int64_t, OptionalSymInt)> functional;
  c10::TypedOperatorHandle<void(const Tensor&, const Tensor&, int64_t, const Tensor&)> accumulate;

  explicit SumLikeOp(const char* name)
      : functional(find_op<Tensor(const Tensor&, const Tensor&, int64_t, OptionalSymInt)>(name, "")),
        accumulate(find_op<void(const Tensor&, const Tensor&, int64_t, const Tensor&)>(name, "accumulate")) {}

  Tensor below_autograd(const Tensor& src, const Tensor& index, int64_t dim, const std::optional<Tensor>& out,
                        OptionalSymInt dim_size, bool grad_mode) const {
    at::AutoDispatchBelowADInplaceOrView guard;
    if (!out.has_value()) return functional.call(src, index, dim, dim_size);
    at::AutoGradMode callers_grad_mode(grad_mode);
    accumulate.call(src, index, dim, *out);
    return *out;
  }
};

// scatter_sum and scatter_mean: the same forward, and a backward each (in Self).
template <typename Self>
class ScatterSumLike : public torch::autograd::Function<Self> {
 public:
  static const SumLikeOp& op() {
    static const SumLikeOp op(Self::name);
    return op;
  }

  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                          const std::optional<Variable>& out, OptionalSymInt dim_size, bool grad_mode) {
    Tensor result = op().below_autograd(src, index, dim, out, dim_size, grad_mode);
    ctx->saved_data["dim"] = wrap_dim(src, dim);
    ctx->saved_data["src_shape"] = src.sym_sizes();
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({index});
    if (out.has_value()) ctx->mark_dirty({*out});
    return result;
  }

 protected:
  // The dim forward() saved, and index broadcast to src's shape as the kernel saw it.
  static std::pair<int64_t, Tensor> saved_dim_and_index(AutogradContext* ctx) {
    int64_t dim = ctx->saved_data["dim"].toInt();
    return {dim, broadcast_index(ctx->get_saved_variables()[0], ctx->saved_data["src_shape"].toSymIntVector(), dim)};
  }
};

class ScatterSum : public ScatterSumLike<ScatterSum> {
 public:
  static constexpr const char* name = "wb_scatter::scatter_sum";

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    auto [dim, idx] = saved_dim_and_index(ctx);
    Tensor grad_src = ctx->needs_input_grad(0) ? grad.gather(dim, idx) : Tensor();
    Tensor grad_out = ctx->saved_data["has_out"].toBool() ? grad : Tensor();  // out + sum: identity
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor(), Tensor()};
  }
};

class ScatterMean : public ScatterSumLike<ScatterMean> {
 public:
  static constexpr const char* name = "wb_scatter::scatter_mean";

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    auto [dim, idx] = saved_dim_and_index(ctx);
    // How many src elements each group averaged (the op returns only the mean, so count again).
    Tensor count = at::zeros_like(grad, at::kLong).scatter_add_(dim, idx, at::ones_like(idx));
    // Each src element contributed 1/count of its group's mean; its group has count >= 1.
    Tensor grad_src = ctx->needs_input_grad(0) ? grad.gather(dim, idx).div(count.gather(dim, idx)) : Tensor();
    Tensor grad_out = ctx->saved_data["has_out"].toBool() ? grad.div(count.clamp_min(1)) : Tensor();
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor(), Tensor()};
  }
};

template <typename F>
Tensor sum_like(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  check_defined(src, index, std::nullopt);
  const bool grad_mode = torch::autograd::GradMode::is_enabled();
  if (!needs_autograd(src)) return F::op().below_autograd(src, index, dim, std::nullopt, dim_size, grad_mode);
  return F::apply(src, index, dim, std::nullopt, dim_size, grad_mode);
}

}  // namespace

// The Autograd kernels (autograd.h).
Tensor scatter_sum(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  return sum_like<ScatterSum>(src, index, dim, dim_size);
}
void scatter_sum_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  check_defined(src, index, out);
  check_out_for_autograd(src, out);
  ScatterSum::apply(src, index, dim, out, std::nullopt, torch::autograd::GradMode::is_enabled());
}
Tensor scatter_mean(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  return sum_like<ScatterMean>(src, index, dim, dim_size);
}
void scatter_mean_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  check_defined(src, index, out);
  check_out_for_autograd(src, out);
  ScatterMean::apply(src, index, dim, out, std::nullopt, torch::autograd::GradMode::is_enabled());
}

}  // namespace wb_scatter
