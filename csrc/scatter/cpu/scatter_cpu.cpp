// csrc/scatter/cpu/scatter_cpu.cpp — the CPU kernel of the wb_scatter ops (contract: ../scatter.h).
//
// scatter_reduce_cpu checks and allocates (prepare_scatter), views the tensors as [outer, n, inner]
// around `dim`, picks the dtype and the reduction, and runs the loops of scatter_cpu_loops.h, which
// scatter_cpu_<reduction>.cpp compile (scatter_cpu.h says why there). float16/bfloat16 accumulate in a
// float32 buffer; other dtypes accumulate in the output itself when it is contiguous.
#include "scatter_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <type_traits>

#include "../scatter.h"

namespace wb_scatter {
namespace {

using at::Tensor;

template <typename scalar_t, Reduce R>
void run(const Tensor& src_c, const Tensor& index3, const Geometry& g, ScatterOutputs& outs) {
  using acc_t = acc_type<scalar_t>;
  Tensor& out = outs.out;
  // The buffer we accumulate in: out itself when it is contiguous and of the accumulation type.
  Tensor acc;
  if (std::is_same_v<acc_t, scalar_t> && out.is_contiguous()) {
    acc = out;
  } else {
    acc = out.to(c10::CppTypeToScalarType<acc_t>::value, /*non_blocking=*/false, /*copy=*/true,
                 at::MemoryFormat::Contiguous);
  }
  // min/max need no identity in a fresh out: a group's first element always wins (the argindex
  // marks the group empty), and a group nothing lands in keeps the 0 it was allocated with.
  acc_t* a = acc.data_ptr<acc_t>();
  const Tensor& per_group = R == Reduce::Mean ? outs.count : outs.argindex;
  int64_t* extra = per_group.defined() ? per_group.data_ptr<int64_t>() : nullptr;
  scatter_loops<scalar_t, acc_t, R>(src_c.const_data_ptr<scalar_t>(), index3.const_data_ptr<int64_t>(), g, a, extra,
                                    outs.fresh);
  // Finish: mean divides by the count.
  if constexpr (R == Reduce::Mean) {
    at::parallel_for(0, acc.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) a[k] = divide<acc_t>(a[k], extra[k]);
    });
  }
  if (!acc.is_same(out)) out.copy_(acc);
}

std::tuple<Tensor, Tensor> scatter_reduce_cpu(const Tensor& src, const Tensor& index, int64_t dim,
                                              const std::optional<Tensor>& out, std::optional<int64_t> dim_size,
                                              Reduce r) {
  ScatterOutputs outs = prepare_scatter(src, index, dim, out, dim_size, r);
  TORCH_CHECK(src.device().is_cpu(), "src is on ", src.device(), "; this is the CPU kernel");

  Geometry g = geometry_around(src, dim, outs.dim_size);
  if (src.numel() == 0 || outs.out.numel() == 0) {
    // Nothing to reduce: a fresh out is already zeros, a given out keeps its values.
    return {outs.out, outs.argindex};
  }
  Tensor src_c = src.contiguous();
  Tensor index3 = index_in_geometry(index, dim, g);

  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, src.scalar_type(), "scatter_reduce_cpu", [&] {
    switch (r) {
      case Reduce::Sum:
        run<scalar_t, Reduce::Sum>(src_c, index3, g, outs);
        break;
      case Reduce::Mean:
        run<scalar_t, Reduce::Mean>(src_c, index3, g, outs);
        break;
      case Reduce::Min:
        run<scalar_t, Reduce::Min>(src_c, index3, g, outs);
        break;
      case Reduce::Max:
        run<scalar_t, Reduce::Max>(src_c, index3, g, outs);
        break;
    }
  });
  return {outs.out, outs.argindex};
}

}  // namespace
}  // namespace wb_scatter

TORCH_LIBRARY_IMPL(wb_scatter, CPU, m) {
  wb_scatter::register_backend<&wb_scatter::scatter_reduce_cpu>(m);
}
