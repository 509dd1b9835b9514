// csrc/scatter/autograd.cpp — the Autograd kernels of the wb_scatter ops, registered (schema:
// scatter.cpp). The kernels and the torch::autograd::Function each applies are in
// autograd_sum_mean.cpp and autograd_min_max.cpp (autograd.h says why two files).
#include "autograd.h"

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <torch/library.h>

namespace wb_scatter {

using at::Tensor;

void check_out_for_autograd(const Tensor& src, const Tensor& out) {
  if (!c10::GradMode::is_enabled() || !(src.requires_grad() || out.requires_grad())) return;
  TORCH_CHECK(!(out.is_leaf() && out.requires_grad()),
              "out is a leaf Variable that requires grad, and the op "
              "writes into it in place; pass out.clone() (or out.detach() if out needs no gradient)");
  TORCH_CHECK(!out.is_view(),
              "out is a view of another tensor, and autograd cannot record the op's write into "
              "a view; pass a tensor that is not a view (out.clone(), or out.contiguous() of a non-contiguous one), "
              "or run under torch.no_grad()");
}

}  // namespace wb_scatter

TORCH_LIBRARY_IMPL(wb_scatter, Autograd, m) {
  using namespace wb_scatter;
  m.impl("scatter_sum", &scatter_sum);
  m.impl("scatter_sum.accumulate", &scatter_sum_accumulate);
  m.impl("scatter_mean", &scatter_mean);
  m.impl("scatter_mean.accumulate", &scatter_mean_accumulate);
  m.impl("scatter_min", &scatter_min);
  m.impl("scatter_min.accumulate", &scatter_min_accumulate);
  m.impl("scatter_max", &scatter_max);
  m.impl("scatter_max.accumulate", &scatter_max_accumulate);
}
