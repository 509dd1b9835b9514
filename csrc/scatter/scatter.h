// csrc/scatter/scatter.h — what every backend of the wb_scatter ops shares.
//
// A backend (cpu/scatter_cpu.cpp, cuda/scatter_cuda.cu) writes one function of type ReduceKernel,
// which fills the outputs of one reduction, and registers the public ops for its dispatch key with
// `register_backend<its_function>(m)`: the op-level kernels defined here check the user's
// arguments, bring `dim` and `index` to the kernel's form and call it. Inside, the backend calls
// `prepare_scatter` first: it checks everything that does not need to read tensor *values* (dtypes,
// devices, shapes, dim, dim_size, out) and allocates the outputs on src's device with
// device-generic ATen calls. The backend's loop then only has to check the index *values*
// (negative or >= dim_size) as it reads them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "scatter_reduce_rules.h"  // enum Reduce, and the rules every kernel follows

namespace wb_scatter {

// The outputs a backend fills, already allocated and initialised (see scatter.cpp for the contract).
struct ScatterOutputs {
  at::Tensor out;       // the result: the caller's `out` tensor itself for an accumulate overload
  at::Tensor argindex;  // min/max: int64, shape of out, filled with src.size(dim) (no winner yet); else undefined
  at::Tensor count;     // mean: int64 elements per group, shape of out, filled with 0; else undefined
  int64_t dim_size;     // out.size(dim)
  bool fresh;           // true when out was allocated here (functional overload): it holds zeros
};

// Validates a backend's arguments (naming the bad one in a RuntimeError) and allocates outputs.
// `out` is returned as given; whether to compute in place or through a contiguous/float buffer is
// the backend's choice (it must write its result back into `out`).
ScatterOutputs prepare_scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size, Reduce reduce);

// One backend's reduction. Arguments as prepare_scatter takes them: dim in [0, src.dim()), index
// int64 with src's shape (a broadcast view is fine), out (accumulate overloads) or dim_size
// (functional overloads, None: index.max() + 1). Returns (out, argindex) as in ScatterOutputs.
using ReduceKernel = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                                            const std::optional<at::Tensor>& out,
                                                            std::optional<int64_t> dim_size, Reduce reduce);

// The public ops' argument checks and torch_scatter's broadcasting rule:
//   wrap_dim            checks dim against src and returns it in [0, src.dim());
//   broadcast_index     lines index up with a tensor of `shape` around (wrapped) `dim` and expands it
//                       to that shape (a view), or raises naming index;
//   check_and_broadcast all the checks of what users pass (dim, index's dtype and shape, devices),
//                       then both of the above.
// Sizes are SymInts: the autograd kernels also run on fake tensors under torch.compile.
int64_t wrap_dim(const at::Tensor& src, int64_t dim);
at::Tensor broadcast_index(const at::Tensor& index, c10::SymIntArrayRef shape, int64_t dim);
std::pair<int64_t, at::Tensor> check_and_broadcast(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                                   const std::optional<at::Tensor>& out);

// The op-level kernels of one backend, for its TORCH_LIBRARY_IMPL block.
template <ReduceKernel kernel>
void register_backend(torch::Library& m) {
  using at::Tensor;
  using OptionalSize = std::optional<int64_t>;
  // Functional overloads: a fresh result.
  m.impl("scatter_sum", [](const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return std::get<0>(kernel(src, idx, d, std::nullopt, dim_size, Reduce::Sum));
  });
  m.impl("scatter_mean", [](const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return std::get<0>(kernel(src, idx, d, std::nullopt, dim_size, Reduce::Mean));
  });
  m.impl("scatter_min", [](const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return kernel(src, idx, d, std::nullopt, dim_size, Reduce::Min);
  });
  m.impl("scatter_max", [](const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return kernel(src, idx, d, std::nullopt, dim_size, Reduce::Max);
  });
  // Accumulate overloads: the reduction starts from out's values and writes into out.
  m.impl("scatter_sum.accumulate", [](const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    kernel(src, idx, d, out, std::nullopt, Reduce::Sum);
  });
  m.impl("scatter_mean.accumulate", [](const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    kernel(src, idx, d, out, std::nullopt, Reduce::Mean);
  });
  m.impl("scatter_min.accumulate", [](const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    return std::get<1>(kernel(src, idx, d, out, std::nullopt, Reduce::Min));
  });
  m.impl("scatter_max.accumulate", [](const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    return std::get<1>(kernel(src, idx, d, out, std::nullopt, Reduce::Max));
  });
}

// How every backend's loops see the tensors: src and index as [outer, n, inner] around `dim`, the
// output as [outer, m, inner] with m = dim_size. Index strides may be 0 (a broadcast view).
struct Geometry {
  int64_t outer, n, inner, m;
  int64_t is0, is1, is2;  // index strides
  C10_HOST_DEVICE int64_t src_numel() const { return outer * n * inner; }
  C10_HOST_DEVICE int64_t out_numel() const { return outer * m * inner; }
};

inline Geometry geometry_around(const at::Tensor& src, int64_t dim, int64_t dim_size) {
  Geometry g{1, src.size(dim), 1, dim_size, 0, 0, 0};
  for (int64_t d = 0; d < dim; ++d) g.outer *= src.size(d);
  for (int64_t d = dim + 1; d < src.dim(); ++d) g.inner *= src.size(d);
  return g;
}

// index as an [outer, n, inner] tensor (a view when its strides allow it, e.g. a broadcast 1-D
// index; a copy otherwise), with its strides recorded in g.
inline at::Tensor index_in_geometry(const at::Tensor& index, Geometry& g) {
  at::Tensor index3 = index.reshape({g.outer, g.n, g.inner});
  g.is0 = index3.stride(0);
  g.is1 = index3.stride(1);
  g.is2 = index3.stride(2);
  return index3;
}

}  // namespace wb_scatter
