// csrc/scatter/autograd.h — what the Autograd kernels of the wb_scatter ops share. autograd.cpp
// registers the kernels; they and the torch::autograd::Function each applies are in
// autograd_sum_mean.cpp (scatter_sum, scatter_mean) and autograd_min_max.cpp (scatter_min,
// scatter_max). torch's autograd headers and the Functions' code take longest to compile in this
// library; the builds compile both files inside scatter_unity.cpp, which parses those headers once.
//
// forward() receives the op's arguments, with `out` set for the accumulate overload and `dim_size`
// for the functional one; backward() returns one gradient per forward argument: undefined tensors
// for index, dim, dim_size (not differentiable) and for out when none was given.
// forward() runs no tensor op of its own besides the call below autograd (index is broadcast in
// backward()): when torch.compile traces the op, whatever forward() computes lands in the graph,
// and Inductor re-traces the calls of mutating ops expecting to find exactly the op itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/SymInt.h>

#include <optional>
#include <tuple>

namespace wb_scatter {

// dim_size as the schema declares it (`SymInt?`). Under torch.compile(dynamic=True) and torch.export
// the autograd kernels run while the graph is traced, and the dim_size they receive may be a symbol
// (the number of nodes, whatever it is). Taken as int64_t, it would be turned into its current value
// and guarded on (one compiled graph per value); as a SymInt it flows on, through the Autograd kernels
// declared below and the op handles they call, to the fake kernel. The backend kernels (scatter.h) keep
// int64_t: they only ever run on real tensors.
using OptionalSymInt = std::optional<c10::SymInt>;

template <typename Signature>
c10::TypedOperatorHandle<Signature> find_op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).typed<Signature>();
}

// Whether autograd has anything to record of a call with this src (index, int64, never has): grad mode
// on and src requiring grad, or a forward-mode tangent on src (which the Function refuses, clearly).
// Otherwise the functional overloads call the op below autograd at once, as autograd does for torch's
// own ops, and skip the Function's bookkeeping (a graph node, its saved values), about a microsecond
// a call. The accumulate overloads always apply their Function: it also bumps out's version counter.
inline bool needs_autograd(const at::Tensor& src) {
  return (c10::GradMode::is_enabled() && src.requires_grad()) || src._fw_grad(/*level=*/0).defined();
}

// What autograd cannot record of a write into out: a write into a leaf that requires grad (its
// gradient would be lost), or into a view of another tensor (the Function would have to rewrite the
// base's history too, which torch supports only for a Function returning one tensor, and not at
// all in some cases: backward then fails inside torch). Refused up front, naming out.
void check_out_for_autograd(const at::Tensor& src, const at::Tensor& out);

// The Autograd kernels: each overload applies its op's Function (the functional ones only when
// needs_autograd(src)).
at::Tensor scatter_sum(const at::Tensor& src, const at::Tensor& index, int64_t dim, OptionalSymInt dim_size);
void scatter_sum_accumulate(const at::Tensor& src, const at::Tensor& index, int64_t dim, const at::Tensor& out);
at::Tensor scatter_mean(const at::Tensor& src, const at::Tensor& index, int64_t dim, OptionalSymInt dim_size);
void scatter_mean_accumulate(const at::Tensor& src, const at::Tensor& index, int64_t dim, const at::Tensor& out);
std::tuple<at::Tensor, at::Tensor> scatter_min(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                               OptionalSymInt dim_size);
at::Tensor scatter_min_accumulate(const at::Tensor& src, const at::Tensor& index, int64_t dim, const at::Tensor& out);
std::tuple<at::Tensor, at::Tensor> scatter_max(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                               OptionalSymInt dim_size);
at::Tensor scatter_max_accumulate(const at::Tensor& src, const at::Tensor& index, int64_t dim, const at::Tensor& out);

}  // namespace wb_scatter
