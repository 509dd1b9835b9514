// csrc/scatter_stable/scatter_stable.h — what every backend of the wb_scatter_stable ops shares.
//
// The same shape as csrc/scatter/scatter.h, on the stable ABI. A backend (cpu/scatter_stable_cpu.cpp,
// cuda/scatter_stable_cuda.cu) writes one function of type ReduceKernel and registers the public ops for its
// dispatch key with `register_backend<its_function>(m)`: the op-level kernels defined here check the user's
// arguments, bring `dim` and `index` to the kernel's form and call it. Inside, the backend calls
// `prepare_scatter` first: it checks everything that does not need tensor *values* (dtypes, devices, shapes,
// dim, dim_size, out) and allocates the outputs on src's device through torch::stable calls, which work for
// every device. The backend's loop then only checks the index *values* as it reads them.
//
// Only stable-ABI headers: torch/csrc/stable/* (C++ wrappers over libtorch's C shim) and torch/headeronly/*
// (code compiled into this library, no libtorch symbols). The build defines TORCH_TARGET_VERSION, and with it
// any ATen/c10 header stops the compile with an #error, so nothing version-bound can slip in.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/macros/Macros.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "scatter_stable_reduce_rules.h"  // enum Reduce, and the rules every kernel follows

namespace wb_scatter_stable {

using torch::stable::Tensor;

// The outputs a backend fills, already allocated and initialised (scatter_stable.cpp states the contract).
struct ScatterOutputs {
  Tensor out;            // the result: the caller's `out` tensor itself for an accumulate overload
  Tensor argindex;       // min/max: int64, shape of out, filled with src.size(dim) (no winner yet); else undefined
  Tensor count;          // mean: int64 elements per group, shape of out, filled with 0; else undefined
  int64_t dim_size = 0;  // out.size(dim)
  bool fresh = true;     // true when out was allocated here (functional overload): it holds zeros
};

// Validates a backend's arguments (naming the bad one in a RuntimeError) and allocates the outputs.
ScatterOutputs prepare_scatter(const Tensor& src, const Tensor& index, int64_t dim, const std::optional<Tensor>& out,
                               std::optional<int64_t> dim_size, Reduce reduce);

// One backend's reduction. Arguments as prepare_scatter takes them: dim in [0, src.dim()), index int64 with
// src's shape (a broadcast view is fine), out (accumulate overloads) or dim_size (functional overloads, None:
// index.max() + 1). Returns (out, argindex) as in ScatterOutputs.
using ReduceKernel = std::tuple<Tensor, Tensor> (*)(const Tensor& src, const Tensor& index, int64_t dim,
                                                    const std::optional<Tensor>& out, std::optional<int64_t> dim_size,
                                                    Reduce reduce);

// The public ops' argument checks and torch_scatter's broadcasting rule (scatter.h of the ATen library has the
// same three): wrap_dim checks dim and returns it in [0, src.dim()); broadcast_index lines index up with src
// around (wrapped) dim and expands it to src's shape (a view), or raises naming index; check_and_broadcast does
// every check of what users pass, then both.
int64_t wrap_dim(const Tensor& src, int64_t dim);
Tensor broadcast_index(const Tensor& index, const Tensor& src, int64_t dim);
std::pair<int64_t, Tensor> check_and_broadcast(const Tensor& src, const Tensor& index, int64_t dim,
                                               const std::optional<Tensor>& out);

// How the messages print a shape ("[6, 3]") and a device ("cpu", "cuda:0"), as ATen's TORCH_CHECK does.
std::string shape_string(torch::headeronly::IntHeaderOnlyArrayRef shape);
std::string device_string(const Tensor& t);

// The op-level kernels of one backend. TORCH_BOX turns each into the boxed function the C shim registers;
// it needs a function (not a lambda, as torch::Library::impl accepts), hence the static members.
template <ReduceKernel kernel>
struct BackendOps {
  using OptionalSize = std::optional<int64_t>;
  // Functional overloads: a fresh result.
  static Tensor sum(const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return std::get<0>(kernel(src, idx, d, std::nullopt, dim_size, Reduce::Sum));
  }
  static Tensor mean(const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return std::get<0>(kernel(src, idx, d, std::nullopt, dim_size, Reduce::Mean));
  }
  static std::tuple<Tensor, Tensor> min(const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return kernel(src, idx, d, std::nullopt, dim_size, Reduce::Min);
  }
  static std::tuple<Tensor, Tensor> max(const Tensor& src, const Tensor& index, int64_t dim, OptionalSize dim_size) {
    auto [d, idx] = check_and_broadcast(src, index, dim, std::nullopt);
    return kernel(src, idx, d, std::nullopt, dim_size, Reduce::Max);
  }
  // Accumulate overloads: the reduction starts from out's values and writes into out.
  static void sum_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    kernel(src, idx, d, out, std::nullopt, Reduce::Sum);
  }
  static void mean_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    kernel(src, idx, d, out, std::nullopt, Reduce::Mean);
  }
  static Tensor min_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    return std::get<1>(kernel(src, idx, d, out, std::nullopt, Reduce::Min));
  }
  static Tensor max_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
    auto [d, idx] = check_and_broadcast(src, index, dim, out);
    return std::get<1>(kernel(src, idx, d, out, std::nullopt, Reduce::Max));
  }
};

// f(std::integral_constant<Reduce, R>{}) for the reduction r chosen at run time: a backend's kernel templates
// take R as a template argument, fixed once here instead of in a switch per backend.
template <typename F>
void with_reduce(Reduce r, F&& f) {
  switch (r) {
    case Reduce::Sum:
      return f(std::integral_constant<Reduce, Reduce::Sum>{});
    case Reduce::Mean:
      return f(std::integral_constant<Reduce, Reduce::Mean>{});
    case Reduce::Min:
      return f(std::integral_constant<Reduce, Reduce::Min>{});
    case Reduce::Max:
      return f(std::integral_constant<Reduce, Reduce::Max>{});
  }
}

// For one backend's STABLE_TORCH_LIBRARY_IMPL block.
template <ReduceKernel kernel>
void register_backend(torch::stable::detail::StableLibrary& m) {
  using Ops = BackendOps<kernel>;
  m.impl("scatter_sum", TORCH_BOX(&Ops::sum));
  m.impl("scatter_mean", TORCH_BOX(&Ops::mean));
  m.impl("scatter_min", TORCH_BOX(&Ops::min));
  m.impl("scatter_max", TORCH_BOX(&Ops::max));
  m.impl("scatter_sum.accumulate", TORCH_BOX(&Ops::sum_accumulate));
  m.impl("scatter_mean.accumulate", TORCH_BOX(&Ops::mean_accumulate));
  m.impl("scatter_min.accumulate", TORCH_BOX(&Ops::min_accumulate));
  m.impl("scatter_max.accumulate", TORCH_BOX(&Ops::max_accumulate));
}

// How every backend's loops see the tensors: src and index as [outer, n, inner] around `dim`, the output as
// [outer, m, inner] with m = dim_size. Index strides may be 0 (a broadcast view).
struct Geometry {
  int64_t outer, n, inner, m;
  int64_t is0, is1, is2;  // index strides
  C10_HOST_DEVICE int64_t src_numel() const { return outer * n * inner; }
  C10_HOST_DEVICE int64_t out_numel() const { return outer * m * inner; }
};

inline Geometry geometry_around(const Tensor& src, int64_t dim, int64_t dim_size) {
  Geometry g{1, src.size(dim), 1, dim_size, 0, 0, 0};
  for (int64_t d = 0; d < dim; ++d) g.outer *= src.size(d);
  for (int64_t d = dim + 1; d < src.dim(); ++d) g.inner *= src.size(d);
  return g;
}

// The buffer a backend accumulates in: out itself when it is contiguous and of the accumulation type acc_t
// (`in_place`), else a contiguous acc_t copy of out, which the backend copies back into out when it is done.
template <typename acc_t, typename scalar_t>
Tensor accumulation_buffer(const Tensor& out, bool& in_place) {
  in_place = std::is_same_v<acc_t, scalar_t> && out.is_contiguous();
  if (in_place) return out;
  return torch::stable::to(out, torch::headeronly::CppTypeToScalarType<acc_t>::value, std::nullopt, std::nullopt,
                           std::nullopt, /*non_blocking=*/false, /*copy=*/true,
                           torch::headeronly::MemoryFormat::Contiguous);
}

// index as an [outer, n, inner] tensor (a view when its strides allow it, e.g. a broadcast 1-D index; a copy
// otherwise), with its strides recorded in g. Defined in scatter_stable.cpp (reshape is a dispatcher call).
Tensor index_in_geometry(const Tensor& index, Geometry& g);

}  // namespace wb_scatter_stable
