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
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "geometry.h"
#include "scatter_reduce_rules.h"  // enum Reduce, and the rules every kernel follows

namespace wb_scatter {

// The outputs a backend fills, already allocated and initialised (the contract is below, at ReduceKernel).
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
//
// The ReduceKernel contract:
//   - src: dim() >= 1; dtype uint8, int8, int16, int32, int64, float16, bfloat16, float32 or
//     float64; any strides.
//   - index: int64, on src's device, with exactly src's shape (already broadcast: it may be an
//     expanded view with stride 0). Values must lie in [0, dim_size).
//   - dim: already wrapped, 0 <= dim < src.dim().
//   - out (optional): src's dtype and device, out.size(d) == src.size(d) for every d != dim, any
//     strides. The reduction starts from its values and the result is written into it.
//   - dim_size (optional): must be None or out.size(dim) when out is given; else >= 0; when
//     neither is given, index.max() + 1 (0 for an empty index). A result that could not fit in
//     this machine's memory is refused before anything is allocated, naming dim_size or index.
//   - out's elements must not share memory with each other (an expanded view), with src or index.
//   Returns (out, argindex): out as above (empty groups 0 unless out was given); argindex is, for
//   min/max, the int64 argindex of out's shape (src.size(dim) where no src element won: an empty
//   group, or out's own value kept), undefined for sum and mean. The rules for ties, NaN, integer
//   mean and the accumulation type are stated once, in scatter_reduce_rules.h, and shared by every
//   backend. The result depends neither on the order the elements are visited in nor on the number
//   of threads.
//   Who checks what (checks.cpp): check_and_broadcast checks what users pass (dim in
//   [-src.dim(), src.dim()), index an integer tensor broadcastable against src, devices) and
//   broadcasts index. prepare_scatter (device-generic), which every backend calls first,
//   re-checks dtypes, devices, shapes, dim, dim_size and out, and allocates out (zeros), argindex
//   (min/max) and count (mean).
//   The backend's own loop checks the index *values* while it reads them (negative, or >=
//   dim_size) and raises an error naming `index`; on such an error an accumulate overload's out
//   may be partly updated (as with torch's native scatter_add_). Every user error is a
//   TORCH_CHECK naming the argument.
using ReduceKernel = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                                                            const std::optional<at::Tensor>& out,
                                                            std::optional<int64_t> dim_size, Reduce reduce);

// The public ops' argument checks and torch_scatter's broadcasting rule:
//   wrap_dim            checks dim against src and returns it in [0, src.dim());
//   broadcast_index     lines index up with a tensor of `shape` around (wrapped) `dim` and expands it
//                       to that shape (a view), or raises naming index;
//   check_defined       checks that src, index and out (when given) are tensors, not None;
//   check_and_broadcast all the checks of what users pass (dim, index's dtype and shape, devices),
//                       then the three above.
// Sizes are SymInts: the autograd kernels also run on fake tensors under torch.compile.
int64_t wrap_dim(const at::Tensor& src, int64_t dim);
at::Tensor broadcast_index(const at::Tensor& index, c10::SymIntArrayRef shape, int64_t dim);
void check_defined(const at::Tensor& src, const at::Tensor& index, const std::optional<at::Tensor>& out);
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

// The Geometry (geometry.h) of src, index and the output around `dim`.
inline Geometry geometry_around(const at::Tensor& src, int64_t dim, int64_t dim_size) {
  Geometry g{1, src.size(dim), 1, dim_size, 0, 0, 0};
  for (int64_t d = 0; d < dim; ++d) g.outer *= src.size(d);
  for (int64_t d = dim + 1; d < src.dim(); ++d) g.inner *= src.size(d);
  return g;
}

// The stride of dimensions [begin, end) of `t` merged into one, as a view would merge them, or -1
// where no view could (the dimensions are not laid out one inside the next). Dimensions of size 1
// do not count; a broadcast (stride 0) over all of them merges into stride 0.
inline int64_t merged_stride(const at::Tensor& t, int64_t begin, int64_t end) {
  int64_t stride = 0, next = -1;  // next: the stride the next outer dimension must have
  for (int64_t d = end - 1; d >= begin; --d) {
    if (t.size(d) == 1) continue;
    if (next >= 0 && t.stride(d) != next) return -1;
    if (next < 0) stride = t.stride(d);
    next = t.stride(d) * t.size(d);
  }
  return stride;
}

// index (src's shape) as [outer, n, inner]: sets g's index strides and returns the tensor whose data
// they describe. Usually that is index itself (contiguous, or a broadcast view): no new tensor, which
// would cost more than the reduction of a small input. Otherwise a reshaped copy.
inline at::Tensor index_in_geometry(const at::Tensor& index, int64_t dim, Geometry& g) {
  const int64_t outer_stride = merged_stride(index, 0, dim), inner_stride = merged_stride(index, dim + 1, index.dim());
  if (outer_stride >= 0 && inner_stride >= 0) {
    g.is0 = outer_stride;
    g.is1 = index.stride(dim);
    g.is2 = inner_stride;
    return index;
  }
  at::Tensor index3 = index.reshape({g.outer, g.n, g.inner});
  g.is0 = index3.stride(0);
  g.is1 = index3.stride(1);
  g.is2 = index3.stride(2);
  return index3;
}

}  // namespace wb_scatter
