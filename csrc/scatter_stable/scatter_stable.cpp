// csrc/scatter_stable/scatter_stable.cpp — the wb_scatter_stable operator library: schema and
// argument checks, written against the LibTorch stable ABI only.
//
//   wb_scatter_stable::scatter_sum (Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor
//   wb_scatter_stable::scatter_mean(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor
//   wb_scatter_stable::scatter_min (Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> (Tensor, Tensor)
//   wb_scatter_stable::scatter_max (Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> (Tensor, Tensor)
//
// The same semantics as csrc/scatter (torch_scatter's): index broadcasts against src (a 1-D index
// runs along dim, missing trailing dimensions are added), dim_size=None means index.max() + 1,
// empty groups are 0, min/max also return the int64 argindex (src.size(dim) for an empty group).
// Ties, NaN, integer mean and the accumulation type follow the rules stated in
// csrc/scatter/scatter_reduce_rules.h; the kernels (cpu/scatter_cpu.cpp) keep their own copy of those
// functions, since that header includes ATen, which a stable-ABI build may not.
//
// What differs from the ATen version is what the stable ABI has and lacks:
// - no C++ autograd (torch::autograd::Function is not part of it): the ops are registered for the
//   CPU key only, and their autograd and fake (meta) kernels are registered from Python, in
//   wb_scatter_stable/__init__.py;
// - errors are STD_TORCH_CHECK (a std::runtime_error, which the dispatcher turns into Python's
//   RuntimeError) instead of TORCH_CHECK;
// - torch/csrc/stable/ops.h wraps a few dozen ATen ops, not expand, and shapes do not print:
//   broadcasting is done here on sizes and strides, by hand (torch_call_dispatcher could call
//   aten::expand by name, at the cost of a boxed call).
#include "scatter_stable.h"

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

namespace wb_scatter_stable {

using torch::headeronly::ScalarType;

namespace {

std::string shape_string(torch::headeronly::IntHeaderOnlyArrayRef shape) {
  std::ostringstream text;
  text << '[';
  for (size_t d = 0; d < shape.size(); ++d) text << (d ? ", " : "") << shape[d];
  text << ']';
  return text.str();
}

bool supported_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
    case ScalarType::Half:
    case ScalarType::BFloat16:
    case ScalarType::Float:
    case ScalarType::Double:
      return true;
    default:
      return false;
  }
}

bool is_integer_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
    case ScalarType::UInt16:
    case ScalarType::UInt32:
    case ScalarType::UInt64:
      return true;
    default:
      return false;
  }
}

// Do dims [first, last) of a strided view collapse into one dimension? Yes when each stride is the
// next one times the next size (size-1 dimensions do not matter).
bool collapsible(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t first, int64_t last,
                 int64_t& stride) {
  stride = 0;
  int64_t expected = -1;  // the stride the next (outer) non-trivial dimension must have
  for (int64_t d = last - 1; d >= first; --d) {
    if (sizes[d] == 1) continue;
    if (expected == -1) {
      stride = strides[d];
    } else if (strides[d] != expected) {
      return false;
    }
    expected = strides[d] * sizes[d];
  }
  return true;
}

}  // namespace

Prepared prepare(const Tensor& src, const Tensor& index, int64_t dim, std::optional<int64_t> dim_size) {
  STD_TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  const int64_t ndim = src.dim();
  STD_TORCH_CHECK(dim >= -ndim && dim < ndim, "dim must be in [", -ndim, ", ", ndim, ") for src of shape ",
                  shape_string(src.sizes()), ", got ", dim);
  if (dim < 0) dim += ndim;
  STD_TORCH_CHECK(supported_dtype(src.scalar_type()), "src has dtype ", src.scalar_type(),
                  "; supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64");
  STD_TORCH_CHECK(is_integer_dtype(index.scalar_type()), "index must be an integer tensor (int64), got dtype ",
                  index.scalar_type());
  STD_TORCH_CHECK(index.scalar_type() == ScalarType::Long, "index must be an int64 tensor, got dtype ",
                  index.scalar_type(), " (convert it with index.long())");
  STD_TORCH_CHECK(src.is_cpu() && index.is_cpu(),
                  "src and index must be CPU tensors: wb_scatter_stable has "
                  "only a CPU kernel");
  STD_TORCH_CHECK(index.dim() <= ndim, "index has ", index.dim(), " dimensions but src has only ", ndim,
                  "; index must broadcast against src");
  STD_TORCH_CHECK(!dim_size.has_value() || *dim_size >= 0, "dim_size must be >= 0, got ", dim_size.value_or(0));

  // torch_scatter's rule, on sizes and strides: a 1-D index lines up with `dim`, a longer one with
  // the leading dimensions; a dimension of size 1 broadcasts (stride 0).
  std::vector<int64_t> sizes(ndim, 1), strides(ndim, 0);
  const int64_t first = index.dim() == 1 ? dim : 0;
  for (int64_t d = 0; d < index.dim(); ++d) {
    sizes[first + d] = index.size(d);
    strides[first + d] = index.stride(d);
  }
  for (int64_t d = 0; d < ndim; ++d) {
    STD_TORCH_CHECK(sizes[d] == src.size(d) || sizes[d] == 1, "index of shape ", shape_string(index.sizes()),
                    " cannot be broadcast against src of shape ", shape_string(src.sizes()), " along dim ", dim,
                    " (lined up as ", shape_string(sizes), ", size ", sizes[d], " at dimension ", d, " must be 1 or ",
                    src.size(d), ")");
    if (sizes[d] == 1) strides[d] = 0;
    sizes[d] = src.size(d);
  }

  // (is_contiguous is a plain C shim query; contiguous() a boxed call through the dispatcher)
  Tensor src_c = src.is_contiguous() ? src : torch::stable::contiguous(src);
  Prepared p{src_c, index, nullptr, Geometry{1, src.size(dim), 1, 0, 0, 0, 0}, {}};
  Geometry& g = p.g;
  for (int64_t d = 0; d < dim; ++d) g.outer *= src.size(d);
  for (int64_t d = dim + 1; d < ndim; ++d) g.inner *= src.size(d);
  g.is1 = strides[dim];
  if (collapsible(sizes, strides, 0, dim, g.is0) && collapsible(sizes, strides, dim + 1, ndim, g.is2)) {
    p.index_data = index.const_data_ptr<int64_t>();
  } else {
    // The strides do not fold into [outer, n, inner] (a permuted multi-dimensional index, say):
    // copy the broadcast index into a contiguous [outer, n, inner] tensor, walking it with a counter.
    p.index = torch::stable::empty({g.outer, g.n, g.inner}, ScalarType::Long);
    int64_t* copy = p.index.mutable_data_ptr<int64_t>();
    const int64_t* from = index.const_data_ptr<int64_t>();
    const int64_t total = g.outer * g.n * g.inner;
    std::vector<int64_t> position(ndim, 0);
    int64_t offset = 0;
    for (int64_t k = 0; k < total; ++k) {
      copy[k] = from[offset];
      for (int64_t d = ndim - 1; d >= 0; --d) {  // advance the counter, last dimension fastest
        offset += strides[d];
        if (++position[d] < sizes[d]) break;
        offset -= strides[d] * sizes[d];
        position[d] = 0;
      }
    }
    g.is0 = g.n * g.inner;
    g.is1 = g.inner;
    g.is2 = 1;
    p.index_data = copy;
  }

  if (dim_size.has_value()) {
    g.m = *dim_size;
  } else if (g.outer * g.n * g.inner > 0) {
    int64_t low = std::numeric_limits<int64_t>::max(), high = std::numeric_limits<int64_t>::min();
    for (int64_t o = 0; o < g.outer; ++o)
      for (int64_t j = 0; j < g.n; ++j)
        for (int64_t i = 0; i < g.inner; ++i) {
          int64_t k = p.index_data[o * g.is0 + j * g.is1 + i * g.is2];
          low = std::min(low, k);
          high = std::max(high, k);
        }
    STD_TORCH_CHECK(low >= 0, "index contains the negative value ", low, "; index values must lie in [0, dim_size)");
    g.m = high + 1;
  }
  p.out_shape = src.sizes().vec();
  p.out_shape[dim] = g.m;
  return p;
}

}  // namespace wb_scatter_stable

STABLE_TORCH_LIBRARY(wb_scatter_stable, m) {
  m.def("scatter_sum(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor");
  m.def("scatter_mean(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> Tensor");
  m.def("scatter_min(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> (Tensor, Tensor)");
  m.def("scatter_max(Tensor src, Tensor index, int dim=-1, int? dim_size=None) -> (Tensor, Tensor)");
}
