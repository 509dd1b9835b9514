// csrc/scatter/scatter.cpp — the wb_scatter operator library's schema: every op, in one place.
//
// Ops (what Python and C++ users call):
//
//   wb_scatter::scatter_sum (Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor
//   wb_scatter::scatter_mean(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor
//   wb_scatter::scatter_min (Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)
//   wb_scatter::scatter_max (Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)
//
//   and for each an overload that accumulates into a tensor the caller owns (torch_scatter's out=):
//
//   wb_scatter::scatter_sum.accumulate (Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()
//   wb_scatter::scatter_mean.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()
//   wb_scatter::scatter_min.accumulate (Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor
//   wb_scatter::scatter_max.accumulate (Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor
//
//   dim_size is a SymInt: while torch.compile or torch.export traces a model, it may be a symbol
//   (see OptionalSymInt in autograd.h), so the autograd kernels take std::optional<c10::SymInt>.
//
//   torch_scatter's semantics: `index` is broadcast against `src` (a 1-D index lines up with `dim`,
//   a longer one with the leading dimensions; missing trailing dimensions are added), the result
//   has src's shape with size dim_size at `dim` (dim_size = index.max() + 1 when not given). Groups
//   that receive nothing are 0; min/max also return the argindex, the position along `dim` of the
//   chosen element, which is src.size(dim) for an empty group.
//   accumulate: the reduction starts from out's values and writes into out (the size along dim is
//   out.size(dim)). The schemas say exactly that: `Tensor(a!) out` is written, and nothing returned
//   aliases an input (min/max return only the fresh argindex). Such an op is not an "out=" op in
//   torch's sense (an out= op never reads its out), and torch.compile can functionalize it as it is.
//
// Who implements what (one TORCH_LIBRARY_IMPL block per dispatch key, each in its own file):
//   schema     this file (TORCH_LIBRARY).
//   CPU        cpu/scatter_cpu.cpp registers the kernels; the loops are in cpu/scatter_cpu_loops.h,
//              compiled for sum, mean, min and max in cpu/scatter_cpu_<reduction>.cpp.
//   CUDA       cuda/scatter_cuda.cu.
//              Both backends register through register_backend (scatter.h): the argument checks of
//              checks.cpp, then the backend's ReduceKernel (its contract: scatter.h).
//   Autograd   autograd_sum_mean.cpp, autograd_min_max.cpp: one C++ torch::autograd::Function per op,
//              registered in autograd.cpp. Its forward re-dispatches to
//              the op below autograd (the backend kernel of the tensors' device), its backward
//              computes the gradients with ATen ops.
//   fake       Python (wb_scatter/ops.py): shapes only, for torch.compile and torch.export. A C++
//              Meta kernel could not express a result size that depends on index's values.
#include <torch/library.h>

TORCH_LIBRARY(wb_scatter, m) {
  m.def("scatter_sum(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor");
  m.def("scatter_mean(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor");
  m.def("scatter_min(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)");
  m.def("scatter_max(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)");
  m.def("scatter_sum.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()");
  m.def("scatter_mean.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()");
  m.def("scatter_min.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor");
  m.def("scatter_max.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor");
}
