// csrc/scatter/scatter.h — helpers shared by every backend of the wb_scatter kernel op.
//
// A backend (cpu/scatter_cpu.cpp, cuda/scatter_cuda.cu) calls `prepare_scatter` first: it checks
// everything that does not need to read tensor *values* (dtypes, devices, shapes, dim, dim_size,
// out=) and allocates the outputs on src's device with device-generic ATen calls. The backend's
// loop then only has to check the index *values* (negative or >= dim_size) as it reads them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>
#include <c10/util/Optional.h>

#include <string>

namespace wb_scatter {

enum class Reduce { Sum, Mean, Min, Max };

// "sum" | "mean" | "min" | "max"; anything else is a TORCH_CHECK error naming `reduce`.
Reduce parse_reduce(const std::string& reduce);

// The outputs a backend fills, already allocated and initialised (see scatter.cpp for the contract).
struct ScatterOutputs {
  at::Tensor out;    // what the op returns: the caller's out= tensor itself when one was given
  at::Tensor arg;    // min/max: int64 argindex, shape of out, filled with src.size(dim); mean: int64
                     // counts, shape of out, filled with 0; sum: undefined
  int64_t dim_size;  // out.size(dim)
  bool fresh;        // true when out was allocated here (no out= given): it holds zeros
};

// Validates the kernel op's arguments (naming the bad one in a RuntimeError) and allocates outputs.
// `out` is returned as given; whether to compute in place or through a contiguous/float buffer is
// the backend's choice (it must write its result back into `out`).
ScatterOutputs prepare_scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               const c10::optional<at::Tensor>& out, c10::optional<int64_t> dim_size,
                               Reduce reduce);

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
