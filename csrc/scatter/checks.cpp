// csrc/scatter/checks.cpp — what runs before any kernel of the wb_scatter ops touches a value:
//   check_and_broadcast  the checks of what users pass (dim, index's dtype and shape, devices) and
//                        torch_scatter's broadcast of index against src, for the op-level kernels of
//                        every backend (register_backend in scatter.h); the autograd kernels use its
//                        parts (check_defined, wrap_dim, broadcast_index);
//   prepare_scatter      which every backend's ReduceKernel calls first: re-checks dtypes, devices,
//                        shapes, dim, dim_size and out, refuses a result too large for this machine,
//                        and allocates the outputs with device-generic ATen calls.
// The kernel contract these checks enforce is in scatter.h.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/util/safe_numerics.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "scatter.h"

namespace wb_scatter {

using at::Tensor;

static bool supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kHalf:
    case at::kBFloat16:
    case at::kFloat:
    case at::kDouble:
      return true;
    default:
      return false;
  }
}

// The bytes of this machine's memory: a result larger than that can never be allocated, and one
// close to it would be zero-filled page by page until the system kills the process.
static uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// Checks, before allocating it, that a result of `sizes` (plus an int64 tensor of the same shape when
// `with_int64`: min/max's argindex, mean's count) fits in memory. `from_index`: the size along `dim`
// is index.max() + 1 (else the dim_size argument); the message says which. The machine's memory is
// read once (a system call) and the message built only on failure: this runs on every call.
static void check_result_fits(const std::vector<int64_t>& sizes, int64_t dim, int64_t itemsize, bool with_int64,
                              bool from_index) {
  static const uint64_t memory = physical_memory_bytes();
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t size : sizes) overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(size), &numel);
  uint64_t bytes = 0;
  overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(itemsize + (with_int64 ? 8 : 0)), &bytes);
  if (!overflow && bytes <= memory) return;
  const int64_t size = sizes[dim];
  const std::string reason = from_index ? "index.max() is " + std::to_string(size - 1) +
                                              ", so dim_size = index.max() + 1 is " + std::to_string(size) +
                                              " (pass dim_size, or check index)"
                                        : "dim_size is " + std::to_string(size);
  TORCH_CHECK(
      false, reason, ": the result would have shape ", at::IntArrayRef(sizes), " (size ", size, " at dim ", dim, "), ",
      overflow
          ? std::string("more bytes than a 64-bit count can hold")
          : std::to_string(bytes) + " bytes, more than this machine's memory (" + std::to_string(memory) + " bytes)");
}

// Whether two tensors share any memory: the same storage, and byte ranges that intersect.
static bool share_memory(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.has_storage() || !b.has_storage() || !a.storage().is_alias_of(b.storage()))
    return false;
  auto range = [](const Tensor& t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const auto* begin = static_cast<const char*>(t.const_data_ptr());
    return std::make_pair(begin, begin + (last + 1) * t.element_size());
  };
  auto [a0, a1] = range(a);
  auto [b0, b1] = range(b);
  return a0 < b1 && b0 < a1;
}

// Whether two elements of `t` may share one memory location. Stride 0 (an expanded tensor) always
// does; otherwise the dimensions, taken by increasing stride, must each step over all the elements of
// the ones before (a sliced or permuted tensor does; an as_strided view with overlapping windows not).
static bool elements_may_overlap(const Tensor& t) {
  if (at::has_internal_overlap(t) != at::MemOverlap::TooHard) return at::has_internal_overlap(t) == at::MemOverlap::Yes;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions with size > 1
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // elements the dimensions so far step over
  for (auto [stride, size] : dims) {
    if (stride < span) return true;
    span = stride * size;
  }
  return false;
}

ScatterOutputs prepare_scatter(const Tensor& src, const Tensor& index, int64_t dim, const std::optional<Tensor>& out,
                               std::optional<int64_t> dim_size, Reduce reduce) {
  TORCH_CHECK(src.defined(), "src must be a tensor, got None (an undefined tensor)");
  TORCH_CHECK(index.defined(), "index must be a tensor, got None (an undefined tensor)");
  TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  TORCH_CHECK(supported_dtype(src.scalar_type()), "src has dtype ", src.scalar_type(),
              "; supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64");
  TORCH_CHECK(index.scalar_type() == at::kLong, "index must be an int64 tensor, got dtype ", index.scalar_type());
  TORCH_CHECK(index.device() == src.device(), "index is on ", index.device(), " but src is on ", src.device(),
              "; they must be on the same device");
  TORCH_CHECK(dim >= 0 && dim < src.dim(), "dim must be in [0, ", src.dim(),
              ") for the kernel (wrap negative dims first), got ", dim);
  TORCH_CHECK(index.sizes() == src.sizes(), "index must have src's shape ", src.sizes(), " (broadcast it first), got ",
              index.sizes());

  int64_t size = 0;
  if (out.has_value()) {
    const Tensor& o = *out;
    TORCH_CHECK(o.defined(), "out must be a tensor, got None (an undefined tensor)");
    TORCH_CHECK(o.scalar_type() == src.scalar_type(), "out has dtype ", o.scalar_type(), " but src has dtype ",
                src.scalar_type(), "; they must match");
    TORCH_CHECK(o.device() == src.device(), "out is on ", o.device(), " but src is on ", src.device(),
                "; they must be on the same device");
    bool same = o.dim() == src.dim();
    for (int64_t d = 0; same && d < src.dim(); ++d) same = d == dim || o.size(d) == src.size(d);
    TORCH_CHECK(same, "out has shape ", o.sizes(), " but must have src's shape ", src.sizes(), " except at dim ", dim);
    size = o.size(dim);
    TORCH_CHECK(!dim_size.has_value() || *dim_size == size, "dim_size is ", dim_size.value_or(0), " but out.size(", dim,
                ") is ", size, "; pass one of them or make them agree");
    TORCH_CHECK(!elements_may_overlap(o), "out has shape ", o.sizes(), " and strides ", o.strides(),
                ": some of its elements share one memory location (an expanded or overlapping view), so the "
                "result cannot be written into it; pass out.clone() or a fresh tensor");
    TORCH_CHECK(!share_memory(o, src) && !share_memory(o, index), "out shares memory with ",
                share_memory(o, src) ? "src" : "index",
                ": the op would read what it has already written; pass out.clone() or a fresh tensor");
  } else if (dim_size.has_value()) {
    TORCH_CHECK(*dim_size >= 0, "dim_size must be >= 0, got ", *dim_size);
    size = *dim_size;
  } else if (index.numel() > 0) {
    auto [lo, hi] = at::aminmax(index);
    int64_t low = lo.item<int64_t>(), high = hi.item<int64_t>();
    TORCH_CHECK(low >= 0, "index contains the negative value ", low, "; index values must lie in [0, dim_size)");
    TORCH_CHECK(high < std::numeric_limits<int64_t>::max(), "index contains the value ", high,
                ", so dim_size = index.max() + 1 cannot be represented; pass dim_size, or check index");
    size = high + 1;
  }

  std::vector<int64_t> sizes = src.sizes().vec();
  sizes[dim] = size;
  if (!out.has_value())
    check_result_fits(sizes, dim, src.element_size(), /*with_int64=*/reduce != Reduce::Sum, !dim_size.has_value());
  ScatterOutputs result;
  result.dim_size = size;
  result.fresh = !out.has_value();
  result.out = out.has_value() ? *out : at::zeros(sizes, src.options());
  if (reduce == Reduce::Min || reduce == Reduce::Max) {
    result.argindex = at::full(sizes, src.size(dim), index.options());
  } else if (reduce == Reduce::Mean) {
    result.count = at::zeros(sizes, index.options());
  }
  return result;
}

// Sizes are read as SymInts here: under torch.compile the autograd kernels (autograd_*.cpp) run on fake
// tensors whose sizes may be symbols, and plain sizes() would refuse them.
int64_t wrap_dim(const Tensor& src, int64_t dim) {
  TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  TORCH_CHECK(dim >= -src.dim() && dim < src.dim(), "dim must be in [", -src.dim(), ", ", src.dim(),
              ") for src of shape ", src.sym_sizes(), ", got ", dim);
  return dim < 0 ? dim + src.dim() : dim;
}

Tensor broadcast_index(const Tensor& index, c10::SymIntArrayRef shape, int64_t dim) {
  if (index.sym_sizes() == shape) return index;  // already src's shape: no view to make
  const int64_t ndim = static_cast<int64_t>(shape.size());
  TORCH_CHECK(index.dim() <= ndim, "index has ", index.dim(), " dimensions but src has only ", ndim,
              "; index must broadcast against src");
  Tensor view = index;
  if (view.dim() == 1)  // a 1-D index runs along `dim`
    for (int64_t d = 0; d < dim; ++d) view = view.unsqueeze(0);
  while (view.dim() < ndim) view = view.unsqueeze(-1);
  for (int64_t d = 0; d < ndim; ++d)
    TORCH_CHECK(view.sym_size(d) == shape[d] || view.sym_size(d) == 1, "index of shape ", index.sym_sizes(),
                " cannot be broadcast against src of shape ", shape, " along dim ", dim, " (lined up as ",
                view.sym_sizes(), ", size ", view.sym_size(d), " at dimension ", d, " must be 1 or ", shape[d], ")");
  return view.expand_symint(shape);
}

void check_defined(const Tensor& src, const Tensor& index, const std::optional<Tensor>& out) {
  TORCH_CHECK(src.defined(), "src must be a tensor, got None (an undefined tensor)");
  TORCH_CHECK(index.defined(), "index must be a tensor, got None (an undefined tensor)");
  TORCH_CHECK(!out.has_value() || out->defined(), "out must be a tensor, got None (an undefined tensor)");
}

std::pair<int64_t, Tensor> check_and_broadcast(const Tensor& src, const Tensor& index, int64_t dim,
                                               const std::optional<Tensor>& out) {
  check_defined(src, index, out);
  dim = wrap_dim(src, dim);
  TORCH_CHECK(!at::isFloatingType(index.scalar_type()) && !at::isComplexType(index.scalar_type()),
              "index must be an integer tensor (int64), got dtype ", index.scalar_type());
  TORCH_CHECK(index.scalar_type() == at::kLong, "index must be an int64 tensor, got dtype ", index.scalar_type(),
              " (convert it with index.long())");
  TORCH_CHECK(index.device() == src.device(), "index is on ", index.device(), " but src is on ", src.device(),
              "; they must be on the same device");
  if (out.has_value())
    TORCH_CHECK(out->device() == src.device(), "out is on ", out->device(), " but src is on ", src.device(),
                "; they must be on the same device");
  return {dim, broadcast_index(index, src.sym_sizes(), dim)};
}

}  // namespace wb_scatter
