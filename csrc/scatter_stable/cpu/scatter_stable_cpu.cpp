// csrc/scatter_stable/cpu/scatter_stable_cpu.cpp — the CPU kernels of the wb_scatter_stable ops (contract:
// ../scatter_stable.cpp).
//
// This file is the kernel of csrc/scatter/cpu/scatter_cpu.cpp, and scatter_stable_cpu_loops.h the loops of
// csrc/scatter/cpu/scatter_cpu_loops.h, function for function and with the same names, rewritten against the
// stable ABI (compare the files side by side), and compiled the same way: the loops one reduction per file
// (scatter_stable_cpu_sum.cpp, _mean, _min, _max; scatter_stable_cpu.h says why).
//   at::parallel_for, at::get_num_threads  -> parallel_for in scatter_stable_cpu.h (over torch::stable::parallel_for,
//                                             which runs on libtorch's thread pool: no -fopenmp here)
//   AT_DISPATCH_ALL_TYPES_AND2             -> THO_DISPATCH_V2 (header-only)
//   Tensor::data_ptr<T>, to, copy_, ...     -> the same names on torch::stable::Tensor and in torch::stable
//   ../scatter_reduce_rules.h              -> ../scatter_stable_reduce_rules.h (the same rules, no ATen)
// Every tensor is viewed as [outer, n, inner] around `dim` (src and index: n = src.size(dim); the output:
// m = dim_size), and a "column" is one (outer, inner) pair. Threads split either the columns
// (reduce_by_columns: each writes only its own columns of the output) or the n elements of a row
// (reduce_by_slices: private copies of the output row, merged in order so the first position wins a tie);
// scatter_loops picks one, as in the ATen file.
#include "scatter_stable_cpu.h"

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/Dispatch_v2.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <optional>
#include <tuple>

#include "../scatter_stable.h"
#include "../scatter_stable_reduce_rules.h"

namespace wb_scatter_stable {
namespace {

using torch::headeronly::ScalarType;

template <typename scalar_t, Reduce R>
void run(const Tensor& src_c, const Tensor& index3, const Geometry& g, ScatterOutputs& outs) {
  using acc_t = acc_type<scalar_t>;
  Tensor& out = outs.out;
  bool in_place;
  Tensor acc = accumulation_buffer<acc_t, scalar_t>(out, in_place);
  acc_t* a = acc.mutable_data_ptr<acc_t>();
  const Tensor& per_group = R == Reduce::Mean ? outs.count : outs.argindex;
  int64_t* extra = per_group.defined() ? per_group.mutable_data_ptr<int64_t>() : nullptr;
  scatter_loops<scalar_t, acc_t, R>(src_c.const_data_ptr<scalar_t>(), index3.const_data_ptr<int64_t>(), g, a, extra,
                                    outs.fresh);
  // Finish: mean divides by the count.
  if constexpr (R == Reduce::Mean) {
    parallel_for(0, acc.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) a[k] = divide<acc_t>(a[k], extra[k]);
    });
  }
  if (!in_place) torch::stable::copy_(out, acc);
}

std::tuple<Tensor, Tensor> scatter_reduce_cpu(const Tensor& src, const Tensor& index, int64_t dim,
                                              const std::optional<Tensor>& out, std::optional<int64_t> dim_size,
                                              Reduce r) {
  ScatterOutputs outs = prepare_scatter(src, index, dim, out, dim_size, r);
  STD_TORCH_CHECK(src.is_cpu(), "src is on ", device_string(src), "; this is the CPU kernel");

  Geometry g = geometry_around(src, dim, outs.dim_size);
  if (src.numel() == 0 || outs.out.numel() == 0) {
    // Nothing to reduce: a fresh out is already zeros, a given out keeps its values.
    return {outs.out, outs.argindex};
  }
  // (is_contiguous is a C shim query; contiguous() a boxed call through the dispatcher)
  const Tensor src_c = src.is_contiguous() ? src : torch::stable::contiguous(src);
  const Tensor index3 = index_in_geometry(index, g);

  THO_DISPATCH_V2(src.scalar_type(), "scatter_reduce_cpu", AT_WRAP([&] {
                    with_reduce(r, [&](auto R) { run<scalar_t, decltype(R)::value>(src_c, index3, g, outs); });
                  }),
                  AT_EXPAND(AT_ALL_TYPES), ScalarType::Half, ScalarType::BFloat16);
  return {outs.out, outs.argindex};
}

}  // namespace
}  // namespace wb_scatter_stable

STABLE_TORCH_LIBRARY_IMPL(wb_scatter_stable, CPU, m) {
  wb_scatter_stable::register_backend<&wb_scatter_stable::scatter_reduce_cpu>(m);
}
