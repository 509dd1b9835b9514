// A C++ program that uses the wb_scatter ops: no Python anywhere.
//
// The ops are registered by libwb_scatter.so (TORCH_LIBRARY in ../scatter.cpp) when it is loaded;
// the program finds them by name in the dispatcher, like Python's torch.ops.wb_scatter.* does.
#include <ATen/core/Formatting.h>  // std::cout << tensor
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>

#include <iostream>
#include <optional>
#include <tuple>

using at::Tensor;

int main() {
  // An op is found by its name and overload ("" is the default one) and called with its C++ signature:
  // scatter_sum(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor
  auto scatter_sum = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("wb_scatter::scatter_sum", "")
                         .typed<Tensor(const Tensor&, const Tensor&, int64_t, std::optional<int64_t>)>();
  auto scatter_max =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("wb_scatter::scatter_max", "")
          .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, std::optional<int64_t>)>();
  // scatter_sum.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> (): adds into out.
  auto scatter_sum_into = c10::Dispatcher::singleton()
                              .findSchemaOrThrow("wb_scatter::scatter_sum", "accumulate")
                              .typed<void(const Tensor&, const Tensor&, int64_t, const Tensor&)>();

  Tensor src = at::arange(1, 7, at::kFloat).view({2, 3});  // [[1, 2, 3], [4, 5, 6]]
  Tensor index = at::tensor({0, 1, 0}, at::kLong);         // broadcast over the rows
  std::cout << "src:\n" << src << "\n";
  std::cout << "scatter_sum(src, index, dim=1):\n" << scatter_sum.call(src, index, 1, std::nullopt) << "\n";

  Tensor totals = at::ones({2, 2});
  scatter_sum_into.call(src, index, 1, totals);
  std::cout << "scatter_sum.accumulate into ones(2, 2):\n" << totals << "\n";

  auto [values, argindex] = scatter_max.call(src, index, 1, 3);
  std::cout << "scatter_max(src, index, dim=1, dim_size=3) values:\n" << values << "\n";
  std::cout << "argindex (3 = src.size(1) marks the empty group):\n" << argindex << "\n";

  // The C++ autograd Function works here too: gradients flow back to the winners.
  Tensor leaf = src.clone().requires_grad_();
  std::get<0>(scatter_max.call(leaf, index, 1, 3)).sum().backward();
  std::cout << "gradient of scatter_max(...).sum() with respect to src:\n" << leaf.grad() << "\n";

  try {
    scatter_sum.call(src, at::tensor({0, -1, 0}, at::kLong), 1, 2);
  } catch (const c10::Error& error) {
    std::cout << "a negative index is refused: " << error.what_without_backtrace() << "\n";
  }
  return 0;
}
