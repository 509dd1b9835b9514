// csrc/scatter_stable/scatter_stable.cpp — the wb_scatter_stable operator library: schema and argument checks,
// written against the LibTorch stable ABI only.
//
// Ops (what Python and C++ users call), the same as the ATen library's (csrc/scatter/scatter.cpp):
//
//   wb_scatter_stable::scatter_sum (Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor
//   wb_scatter_stable::scatter_mean(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor
//   wb_scatter_stable::scatter_min (Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)
//   wb_scatter_stable::scatter_max (Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)
//
//   wb_scatter_stable::scatter_sum.accumulate (Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()
//   wb_scatter_stable::scatter_mean.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()
//   wb_scatter_stable::scatter_min.accumulate (Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor
//   wb_scatter_stable::scatter_max.accumulate (Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor
//
// Semantics, the kernel contract and the error messages are the ATen library's (csrc/scatter/scatter.cpp, scatter.h
// and checks.cpp; torch_scatter's: index broadcasts against src, dim_size=None means index.max() + 1, empty groups
// are 0, min/max also return the argindex, src.size(dim) for an empty group; accumulate starts from out's values
// and writes into out, and returns only fresh tensors). The reduction rules are in scatter_stable_reduce_rules.h.
//
// `SymInt? dim_size`: under torch.compile and torch.export the group count may be a symbol. Here nothing in C++
// runs while a graph is traced: autograd and the fake kernels are Python (wb_scatter_stable/ops.py), and they
// pass the symbol on. The backend kernels run on real tensors only, where the size is a number, so they take
// std::optional<int64_t> (the C shim hands a SymInt argument to a stable kernel as an int).
//
// Who implements what:
//   CPU, CUDA  the kernels (cpu/scatter_stable_cpu.cpp, cuda/scatter_stable_cuda.cu), via register_backend in
//              scatter_stable.h: argument checks, then the backend's ReduceKernel.
//   Autograd   Python (wb_scatter_stable/ops.py): the stable ABI has no torch::autograd::Function.
//   fake       Python (wb_scatter_stable/ops.py), as for the ATen library.
//
// What the stable ABI lacks, and what this library uses instead:
//   TORCH_CHECK (c10::Error)         STD_TORCH_CHECK (a std::runtime_error, which the dispatcher turns into
//                                    Python's RuntimeError; its message starts "function, file:line, ")
//   at::aminmax, Tensor::expand      torch_call_dispatcher("aten::aminmax" / "aten::expand"): a boxed call by name
//   Tensor::item<int64_t>()          aoti_torch_item_int64, a C shim function (it copies from the GPU if needed)
//   at::has_internal_overlap,        the checks below, on sizes, strides and data pointers
//   Storage::is_alias_of
//   printing IntArrayRef, Device     shape_string, device_string
#include "scatter_stable.h"

#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace wb_scatter_stable {

using torch::headeronly::ScalarType;

std::string shape_string(torch::headeronly::IntHeaderOnlyArrayRef shape) {
  std::ostringstream text;
  text << '[';
  for (size_t d = 0; d < shape.size(); ++d) text << (d ? ", " : "") << shape[d];
  text << ']';
  return text.str();
}

std::string device_string(const Tensor& t) {
  using torch::headeronly::DeviceType;
  const torch::stable::Device device = t.device();
  switch (device.type()) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::Meta:
      return "meta";
    case DeviceType::CUDA:
      return "cuda:" + std::to_string(device.index());
    default:
      return "device type " + std::to_string(static_cast<int>(device.type()));
  }
}

static bool supported_dtype(ScalarType t) {
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

// at::isFloatingType || at::isComplexType, for the index check.
static bool floating_or_complex(ScalarType t) {
  switch (t) {
    case ScalarType::Half:
    case ScalarType::BFloat16:
    case ScalarType::Float:
    case ScalarType::Double:
    case ScalarType::ComplexHalf:
    case ScalarType::ComplexFloat:
    case ScalarType::ComplexDouble:
    case ScalarType::Float8_e5m2:
    case ScalarType::Float8_e4m3fn:
    case ScalarType::Float8_e5m2fnuz:
    case ScalarType::Float8_e4m3fnuz:
      return true;
    default:
      return false;
  }
}

// The bytes of this machine's memory: a result larger than that can never be allocated, and one close to it
// would be zero-filled page by page until the system kills the process.
static uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// Checks, before allocating it, that a result of `sizes` (plus an int64 tensor of the same shape when
// `with_int64`) fits in memory. `reason` says where the size along `dim` came from, naming the argument.
static void check_result_fits(const std::vector<int64_t>& sizes, int64_t dim, int64_t itemsize, bool with_int64,
                              const std::string& reason) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t size : sizes) overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(size), &numel);
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(itemsize + (with_int64 ? 8 : 0)), &bytes);
  const uint64_t memory = physical_memory_bytes();
  STD_TORCH_CHECK(!overflow && bytes <= memory, reason, ": the result would have shape ", shape_string(sizes),
                  " (size ", sizes[dim], " at dim ", dim, "), ",
                  overflow ? std::string("more bytes than a 64-bit count can hold")
                           : std::to_string(bytes) + " bytes, more than this machine's memory (" +
                                 std::to_string(memory) + " bytes)");
}

// The byte range [first, last) a tensor's elements occupy.
static std::pair<const char*, const char*> byte_range(const Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto* begin = static_cast<const char*>(t.const_data_ptr());
  return {begin, begin + (last + 1) * static_cast<int64_t>(t.element_size())};
}

// Whether two tensors share any memory. The stable ABI has no storage handle to compare; on one device,
// two byte ranges that intersect belong to one allocation, so comparing the ranges is enough.
static bool share_memory(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.device() != b.device()) return false;
  auto [a0, a1] = byte_range(a);
  auto [b0, b1] = byte_range(b);
  return a0 < b1 && b0 < a1;
}

// Whether two elements of `t` may share one memory location. The dimensions, taken by increasing stride, must
// each step over all the elements of the ones before (a sliced or permuted tensor does; stride 0, an expanded
// tensor, never does; nor does an as_strided view with overlapping windows).
static bool elements_may_overlap(const Tensor& t) {
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

// (min, max) of an int64 tensor, through the dispatcher (the stable ABI has no at::aminmax), read back
// with the C shim's item function.
static std::pair<int64_t, int64_t> index_min_max(const Tensor& index) {
  std::array<StableIValue, 3> stack{torch::stable::detail::from(index), torch::stable::detail::from(std::nullopt),
                                    torch::stable::detail::from(false)};
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::aminmax", "", stack.data(), TORCH_ABI_VERSION));
  const Tensor low = torch::stable::detail::to<Tensor>(stack[0]), high = torch::stable::detail::to<Tensor>(stack[1]);
  int64_t lo = 0, hi = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(low.get(), &lo));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_item_int64(high.get(), &hi));
  return {lo, hi};
}

ScatterOutputs prepare_scatter(const Tensor& src, const Tensor& index, int64_t dim, const std::optional<Tensor>& out,
                               std::optional<int64_t> dim_size, Reduce reduce) {
  STD_TORCH_CHECK(src.defined(), "src must be a tensor, got None (an undefined tensor)");
  STD_TORCH_CHECK(index.defined(), "index must be a tensor, got None (an undefined tensor)");
  STD_TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  STD_TORCH_CHECK(supported_dtype(src.scalar_type()), "src has dtype ", src.scalar_type(),
                  "; supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64");
  STD_TORCH_CHECK(index.scalar_type() == ScalarType::Long, "index must be an int64 tensor, got dtype ",
                  index.scalar_type());
  STD_TORCH_CHECK(index.device() == src.device(), "index is on ", device_string(index), " but src is on ",
                  device_string(src), "; they must be on the same device");
  STD_TORCH_CHECK(dim >= 0 && dim < src.dim(), "dim must be in [0, ", src.dim(),
                  ") for the kernel (wrap negative dims first), got ", dim);
  STD_TORCH_CHECK(index.sizes().equals(src.sizes()), "index must have src's shape ", shape_string(src.sizes()),
                  " (broadcast it first), got ", shape_string(index.sizes()));

  int64_t size = 0;
  if (out.has_value()) {
    const Tensor& o = *out;
    STD_TORCH_CHECK(o.defined(), "out must be a tensor, got None (an undefined tensor)");
    STD_TORCH_CHECK(o.scalar_type() == src.scalar_type(), "out has dtype ", o.scalar_type(), " but src has dtype ",
                    src.scalar_type(), "; they must match");
    STD_TORCH_CHECK(o.device() == src.device(), "out is on ", device_string(o), " but src is on ", device_string(src),
                    "; they must be on the same device");
    bool same = o.dim() == src.dim();
    for (int64_t d = 0; same && d < src.dim(); ++d) same = d == dim || o.size(d) == src.size(d);
    STD_TORCH_CHECK(same, "out has shape ", shape_string(o.sizes()), " but must have src's shape ",
                    shape_string(src.sizes()), " except at dim ", dim);
    size = o.size(dim);
    STD_TORCH_CHECK(!dim_size.has_value() || *dim_size == size, "dim_size is ", dim_size.value_or(0), " but out.size(",
                    dim, ") is ", size, "; pass one of them or make them agree");
    STD_TORCH_CHECK(!elements_may_overlap(o), "out has shape ", shape_string(o.sizes()), " and strides ",
                    shape_string(o.strides()),
                    ": some of its elements share one memory location (an expanded or overlapping view), so the "
                    "result cannot be written into it; pass out.clone() or a fresh tensor");
    STD_TORCH_CHECK(!share_memory(o, src) && !share_memory(o, index), "out shares memory with ",
                    share_memory(o, src) ? "src" : "index",
                    ": the op would read what it has already written; pass out.clone() or a fresh tensor");
  } else if (dim_size.has_value()) {
    STD_TORCH_CHECK(*dim_size >= 0, "dim_size must be >= 0, got ", *dim_size);
    size = *dim_size;
  } else if (index.numel() > 0) {
    auto [low, high] = index_min_max(index);
    STD_TORCH_CHECK(low >= 0, "index contains the negative value ", low, "; index values must lie in [0, dim_size)");
    STD_TORCH_CHECK(high < std::numeric_limits<int64_t>::max(), "index contains the value ", high,
                    ", so dim_size = index.max() + 1 cannot be represented; pass dim_size, or check index");
    size = high + 1;
  }

  std::vector<int64_t> sizes = src.sizes().vec();
  sizes[dim] = size;
  if (!out.has_value()) {
    const bool with_int64 = reduce != Reduce::Sum;
    const int64_t itemsize = static_cast<int64_t>(src.element_size());
    if (dim_size.has_value())
      check_result_fits(sizes, dim, itemsize, with_int64, "dim_size is " + std::to_string(size));
    else
      check_result_fits(sizes, dim, itemsize, with_int64,
                        "index.max() is " + std::to_string(size - 1) + ", so dim_size = index.max() + 1 is " +
                            std::to_string(size) + " (pass dim_size, or check index)");
  }
  ScatterOutputs result;
  result.dim_size = size;
  result.fresh = !out.has_value();
  result.out = out.has_value() ? *out : torch::stable::new_zeros(src, sizes);
  if (reduce == Reduce::Min || reduce == Reduce::Max) {
    result.argindex =
        torch::stable::full(sizes, static_cast<double>(src.size(dim)), ScalarType::Long, std::nullopt, src.device());
  } else if (reduce == Reduce::Mean) {
    result.count = torch::stable::new_zeros(src, sizes, ScalarType::Long);
  }
  return result;
}

int64_t wrap_dim(const Tensor& src, int64_t dim) {
  STD_TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  STD_TORCH_CHECK(dim >= -src.dim() && dim < src.dim(), "dim must be in [", -src.dim(), ", ", src.dim(),
                  ") for src of shape ", shape_string(src.sizes()), ", got ", dim);
  return dim < 0 ? dim + src.dim() : dim;
}

// index.expand(sizes), through the dispatcher: torch/csrc/stable/ops.h has no expand.
static Tensor expand(const Tensor& t, torch::headeronly::IntHeaderOnlyArrayRef sizes) {
  std::array<StableIValue, 3> stack{torch::stable::detail::from(t), torch::stable::detail::from(sizes),
                                    torch::stable::detail::from(false)};
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::expand", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::detail::to<Tensor>(stack[0]);
}

Tensor broadcast_index(const Tensor& index, const Tensor& src, int64_t dim) {
  const int64_t ndim = src.dim();
  STD_TORCH_CHECK(index.dim() <= ndim, "index has ", index.dim(), " dimensions but src has only ", ndim,
                  "; index must broadcast against src");
  Tensor view = index;
  if (view.dim() == 1)  // a 1-D index runs along `dim`
    for (int64_t d = 0; d < dim; ++d) view = torch::stable::unsqueeze(view, 0);
  while (view.dim() < ndim) view = torch::stable::unsqueeze(view, -1);
  for (int64_t d = 0; d < ndim; ++d)
    STD_TORCH_CHECK(view.size(d) == src.size(d) || view.size(d) == 1, "index of shape ", shape_string(index.sizes()),
                    " cannot be broadcast against src of shape ", shape_string(src.sizes()), " along dim ", dim,
                    " (lined up as ", shape_string(view.sizes()), ", size ", view.size(d), " at dimension ", d,
                    " must be 1 or ", src.size(d), ")");
  return expand(view, src.sizes());
}

std::pair<int64_t, Tensor> check_and_broadcast(const Tensor& src, const Tensor& index, int64_t dim,
                                               const std::optional<Tensor>& out) {
  STD_TORCH_CHECK(src.defined(), "src must be a tensor, got None (an undefined tensor)");
  STD_TORCH_CHECK(index.defined(), "index must be a tensor, got None (an undefined tensor)");
  STD_TORCH_CHECK(!out.has_value() || out->defined(), "out must be a tensor, got None (an undefined tensor)");
  dim = wrap_dim(src, dim);
  STD_TORCH_CHECK(!floating_or_complex(index.scalar_type()), "index must be an integer tensor (int64), got dtype ",
                  index.scalar_type());
  STD_TORCH_CHECK(index.scalar_type() == ScalarType::Long, "index must be an int64 tensor, got dtype ",
                  index.scalar_type(), " (convert it with index.long())");
  STD_TORCH_CHECK(index.device() == src.device(), "index is on ", device_string(index), " but src is on ",
                  device_string(src), "; they must be on the same device");
  if (out.has_value())
    STD_TORCH_CHECK(out->device() == src.device(), "out is on ", device_string(*out), " but src is on ",
                    device_string(src), "; they must be on the same device");
  return {dim, broadcast_index(index, src, dim)};
}

Tensor index_in_geometry(const Tensor& index, Geometry& g) {
  Tensor index3 = torch::stable::reshape(index, {g.outer, g.n, g.inner});
  g.is0 = index3.stride(0);
  g.is1 = index3.stride(1);
  g.is2 = index3.stride(2);
  return index3;
}

}  // namespace wb_scatter_stable

STABLE_TORCH_LIBRARY(wb_scatter_stable, m) {
  m.def("scatter_sum(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor");
  m.def("scatter_mean(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> Tensor");
  m.def("scatter_min(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)");
  m.def("scatter_max(Tensor src, Tensor index, int dim=-1, SymInt? dim_size=None) -> (Tensor, Tensor)");
  m.def("scatter_sum.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()");
  m.def("scatter_mean.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> ()");
  m.def("scatter_min.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor");
  m.def("scatter_max.accumulate(Tensor src, Tensor index, int dim, Tensor(a!) out) -> Tensor");
}
