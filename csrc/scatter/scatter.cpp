// csrc/scatter/scatter.cpp — the wb_scatter operator library: schema, argument checks, autograd.
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
//   (see OptionalSymInt below), so the autograd kernels take std::optional<c10::SymInt>.
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
// Who implements what:
//   CPU, CUDA  the kernels (cpu/scatter_cpu.cpp, cuda/scatter_cuda.cu), via register_backend in
//              scatter.h: argument checks, then the backend's ReduceKernel (contract below).
//   Autograd   this file: one C++ torch::autograd::Function per op. Its forward re-dispatches to
//              the op below autograd (the backend kernel of the tensors' device), its backward
//              computes the gradients with ATen ops.
//   fake       Python (wb_scatter/ops.py): shapes only, for torch.compile and torch.export. A C++
//              Meta kernel could not express a result size that depends on index's values.
//
// ReduceKernel contract (scatter.h):
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
//   Who checks what: check_and_broadcast (below) checks what users pass (dim in
//   [-src.dim(), src.dim()), index an integer tensor broadcastable against src, devices) and
//   broadcasts index. prepare_scatter (below; device-generic), which every backend calls first,
//   re-checks dtypes, devices, shapes, dim, dim_size and out, and allocates out (zeros), argindex
//   (min/max) and count (mean).
//   The backend's own loop checks the index *values* while it reads them (negative, or >=
//   dim_size) and raises an error naming `index`; on such an error an accumulate overload's out
//   may be partly updated (as with torch's native scatter_add_). Every user error is a
//   TORCH_CHECK naming the argument.
#include "scatter.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>  // at::AutoDispatchBelowADInplaceOrView
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/safe_numerics.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace wb_scatter {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

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
// `with_int64`: min/max's argindex, mean's count) fits in memory. `reason` says where the size along `dim` came from,
// naming the argument.
static void check_result_fits(const std::vector<int64_t>& sizes, int64_t dim, int64_t itemsize, bool with_int64,
                              const std::string& reason) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t size : sizes) overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(size), &numel);
  uint64_t bytes = 0;
  overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(itemsize + (with_int64 ? 8 : 0)), &bytes);
  const uint64_t memory = physical_memory_bytes();
  TORCH_CHECK(!overflow && bytes <= memory, reason, ": the result would have shape ", at::IntArrayRef(sizes), " (size ",
              sizes[dim], " at dim ", dim, "), ",
              overflow ? std::string("more bytes than a 64-bit count can hold")
                       : std::to_string(bytes) + " bytes, more than this machine's memory (" + std::to_string(memory) +
                             " bytes)");
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
  if (!out.has_value()) {
    const bool with_int64 = reduce != Reduce::Sum;
    if (dim_size.has_value())
      check_result_fits(sizes, dim, src.element_size(), with_int64, "dim_size is " + std::to_string(size));
    else
      check_result_fits(sizes, dim, src.element_size(), with_int64,
                        "index.max() is " + std::to_string(size - 1) + ", so dim_size = index.max() + 1 is " +
                            std::to_string(size) + " (pass dim_size, or check index)");
  }
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

// Sizes are read as SymInts here: under torch.compile the autograd kernels below run on fake
// tensors whose sizes may be symbols, and plain sizes() would refuse them.
int64_t wrap_dim(const Tensor& src, int64_t dim) {
  TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  TORCH_CHECK(dim >= -src.dim() && dim < src.dim(), "dim must be in [", -src.dim(), ", ", src.dim(),
              ") for src of shape ", src.sym_sizes(), ", got ", dim);
  return dim < 0 ? dim + src.dim() : dim;
}

Tensor broadcast_index(const Tensor& index, c10::SymIntArrayRef shape, int64_t dim) {
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

static void check_defined(const Tensor& src, const Tensor& index, const std::optional<Tensor>& out) {
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

// ---- autograd: one torch::autograd::Function per op -------------------------------------------
// forward() receives the op's arguments, with `out` set for the accumulate overload and `dim_size`
// for the functional one; backward() returns one gradient per forward argument: undefined tensors
// for index, dim, dim_size (not differentiable) and for out when none was given.
// forward() runs no tensor op of its own besides the call below autograd (index is broadcast in
// backward()): when torch.compile traces the op, whatever forward() computes lands in the graph,
// and Inductor re-traces the calls of mutating ops expecting to find exactly the op itself.
// All of it has internal linkage (the unnamed namespace): the function-local statics of a class
// template would otherwise be one process-wide object shared with any other library built from
// these sources (the CUDA emulation of chapter 05 is one), and the first to run would decide the op
// every copy calls.

namespace {

// dim_size as the schema declares it (`SymInt?`). Under torch.compile(dynamic=True) and torch.export
// the autograd kernels run while the graph is traced, and the dim_size they receive may be a symbol
// (the number of nodes, whatever it is). Taken as int64_t, it would be turned into its current value
// and guarded on (one compiled graph per value); as a SymInt it flows on, through the calls below, to
// the fake kernel. The backend kernels (scatter.h) keep int64_t: they only ever run on real tensors.
using OptionalSymInt = std::optional<c10::SymInt>;

template <typename Signature>
static c10::TypedOperatorHandle<Signature> find_op(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload).typed<Signature>();
}

// Both overloads of scatter_sum or scatter_mean, called below autograd: the guard takes the
// Autograd and ADInplaceOrView keys out of this thread's dispatch, so the dispatcher goes on to
// the kernel of the tensors' backend (CPU, CUDA, or the fake kernel under torch.compile) instead
// of coming back to the autograd kernel that is calling.
// The write into out is made with the caller's grad mode (`grad_mode`), not the one a Function's
// forward() runs in (off). Eager autograd does not mind, but torch.compile does: its functionalization
// takes a write made with grad mode off for one autograd cannot see, and drops the op's backward
// from out's gradient (out's initial values would get the incoming gradient unmasked, undivided).
struct SumLikeOp {
  c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, int64_t, OptionalSymInt)> functional;
  c10::TypedOperatorHandle<void(const Tensor&, const Tensor&, int64_t, const Tensor&)> accumulate;

  explicit SumLikeOp(const char* name)
      : functional(find_op<Tensor(const Tensor&, const Tensor&, int64_t, OptionalSymInt)>(name, "")),
        accumulate(find_op<void(const Tensor&, const Tensor&, int64_t, const Tensor&)>(name, "accumulate")) {}

  Tensor below_autograd(const Tensor& src, const Tensor& index, int64_t dim, const std::optional<Tensor>& out,
                        OptionalSymInt dim_size, bool grad_mode) const {
    at::AutoDispatchBelowADInplaceOrView guard;
    if (!out.has_value()) return functional.call(src, index, dim, dim_size);
    at::AutoGradMode callers_grad_mode(grad_mode);
    accumulate.call(src, index, dim, *out);
    return *out;
  }
};

// The same for scatter_min or scatter_max: returns (values, argindex).
struct ArgReduceOp {
  c10::TypedOperatorHandle<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, OptionalSymInt)>
      functional;
  c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, int64_t, const Tensor&)> accumulate;

  explicit ArgReduceOp(const char* name)
      : functional(
            find_op<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, OptionalSymInt)>(name, "")),
        accumulate(find_op<Tensor(const Tensor&, const Tensor&, int64_t, const Tensor&)>(name, "accumulate")) {}

  std::tuple<Tensor, Tensor> below_autograd(const Tensor& src, const Tensor& index, int64_t dim,
                                            const std::optional<Tensor>& out, OptionalSymInt dim_size,
                                            bool grad_mode) const {
    at::AutoDispatchBelowADInplaceOrView guard;
    if (!out.has_value()) return functional.call(src, index, dim, dim_size);
    at::AutoGradMode callers_grad_mode(grad_mode);
    return {*out, accumulate.call(src, index, dim, *out)};
  }
};

class ScatterSum : public torch::autograd::Function<ScatterSum> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                          const std::optional<Variable>& out, OptionalSymInt dim_size, bool grad_mode) {
    static const SumLikeOp op("wb_scatter::scatter_sum");
    Tensor result = op.below_autograd(src, index, dim, out, dim_size, grad_mode);
    ctx->saved_data["dim"] = wrap_dim(src, dim);
    ctx->saved_data["src_shape"] = src.sym_sizes();
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({index});
    if (out.has_value()) ctx->mark_dirty({*out});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    int64_t dim = ctx->saved_data["dim"].toInt();
    Tensor idx = broadcast_index(ctx->get_saved_variables()[0], ctx->saved_data["src_shape"].toSymIntVector(), dim);
    Tensor grad_src = ctx->needs_input_grad(0) ? grad.gather(dim, idx) : Tensor();
    Tensor grad_out = ctx->saved_data["has_out"].toBool() ? grad : Tensor();  // out + sum: identity
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor(), Tensor()};
  }
};

class ScatterMean : public torch::autograd::Function<ScatterMean> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                          const std::optional<Variable>& out, OptionalSymInt dim_size, bool grad_mode) {
    static const SumLikeOp op("wb_scatter::scatter_mean");
    Tensor result = op.below_autograd(src, index, dim, out, dim_size, grad_mode);
    ctx->saved_data["dim"] = wrap_dim(src, dim);
    ctx->saved_data["src_shape"] = src.sym_sizes();
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({index});
    if (out.has_value()) ctx->mark_dirty({*out});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    int64_t dim = ctx->saved_data["dim"].toInt();
    Tensor idx = broadcast_index(ctx->get_saved_variables()[0], ctx->saved_data["src_shape"].toSymIntVector(), dim);
    // How many src elements each group averaged (the op returns only the mean, so count again).
    Tensor count = at::zeros_like(grad, at::kLong).scatter_add_(dim, idx, at::ones_like(idx));
    // Each src element contributed 1/count of its group's mean; its group has count >= 1.
    Tensor grad_src = ctx->needs_input_grad(0) ? grad.gather(dim, idx).div(count.gather(dim, idx)) : Tensor();
    Tensor grad_out = ctx->saved_data["has_out"].toBool() ? grad.div(count.clamp_min(1)) : Tensor();
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor(), Tensor()};
  }
};

template <typename Self>
class ScatterArgReduce : public torch::autograd::Function<Self> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                               const std::optional<Variable>& out, OptionalSymInt dim_size, bool grad_mode) {
    static const ArgReduceOp op(Self::name);
    auto [result, arg] = op.below_autograd(src, index, dim, out, dim_size, grad_mode);
    dim = wrap_dim(src, dim);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["n"] = src.sym_size(dim);
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({arg});
    ctx->mark_non_differentiable({arg});
    if (out.has_value()) ctx->mark_dirty({*out});
    return {result, arg};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    Tensor arg = ctx->get_saved_variables()[0];
    int64_t dim = ctx->saved_data["dim"].toInt();
    c10::SymInt n = ctx->saved_data["n"].toSymInt();
    Tensor grad_src;
    if (ctx->needs_input_grad(0)) {
      // Route each group's gradient to its winner; empty groups (arg == n) land in an extra slot.
      std::vector<c10::SymInt> shape = grad.sym_sizes().vec();
      shape[dim] = n + 1;
      grad_src = at::zeros_symint(shape, grad.options()).scatter_(dim, arg, grad).narrow_symint(dim, 0, n);
    }
    Tensor grad_out;
    if (ctx->saved_data["has_out"].toBool()) grad_out = grad.masked_fill(arg.ne(n), 0);
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor(), Tensor()};
  }
};

class ScatterMin : public ScatterArgReduce<ScatterMin> {
 public:
  static constexpr const char* name = "wb_scatter::scatter_min";
};
class ScatterMax : public ScatterArgReduce<ScatterMax> {
 public:
  static constexpr const char* name = "wb_scatter::scatter_max";
};

// What autograd cannot record of a write into out: a write into a leaf that requires grad (its
// gradient would be lost), or into a view of another tensor (the Function would have to rewrite the
// base's history too, which torch supports only for a Function returning one tensor, and not at
// all in some cases: backward then fails inside torch). Refused up front, naming out.
static void check_out_for_autograd(const Tensor& src, const Tensor& out) {
  if (!torch::autograd::GradMode::is_enabled() || !(src.requires_grad() || out.requires_grad())) return;
  TORCH_CHECK(!(out.is_leaf() && out.requires_grad()),
              "out is a leaf Variable that requires grad, and the op "
              "writes into it in place; pass out.clone() (or out.detach() if out needs no gradient)");
  TORCH_CHECK(!out.is_view(),
              "out is a view of another tensor, and autograd cannot record the op's write into "
              "a view; pass a tensor that is not a view (out.clone(), or out.contiguous() of a non-contiguous one), "
              "or run under torch.no_grad()");
}

// The Autograd kernels: each overload applies its op's Function.
static Tensor scatter_sum(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  check_defined(src, index, std::nullopt);
  return ScatterSum::apply(src, index, dim, std::nullopt, dim_size, torch::autograd::GradMode::is_enabled());
}
static void scatter_sum_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  check_defined(src, index, out);
  check_out_for_autograd(src, out);
  ScatterSum::apply(src, index, dim, out, std::nullopt, torch::autograd::GradMode::is_enabled());
}
static Tensor scatter_mean(const Tensor& src, const Tensor& index, int64_t dim, OptionalSymInt dim_size) {
  check_defined(src, index, std::nullopt);
  return ScatterMean::apply(src, index, dim, std::nullopt, dim_size, torch::autograd::GradMode::is_enabled());
}
static void scatter_mean_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  check_defined(src, index, out);
  check_out_for_autograd(src, out);
  ScatterMean::apply(src, index, dim, out, std::nullopt, torch::autograd::GradMode::is_enabled());
}
template <typename F>
static std::tuple<Tensor, Tensor> arg_reduce(const Tensor& src, const Tensor& index, int64_t dim,
                                             OptionalSymInt dim_size) {
  check_defined(src, index, std::nullopt);
  variable_list result = F::apply(src, index, dim, std::nullopt, dim_size, torch::autograd::GradMode::is_enabled());
  return {result[0], result[1]};
}
template <typename F>
static Tensor arg_reduce_accumulate(const Tensor& src, const Tensor& index, int64_t dim, const Tensor& out) {
  check_defined(src, index, out);
  check_out_for_autograd(src, out);
  variable_list result = F::apply(src, index, dim, out, std::nullopt, torch::autograd::GradMode::is_enabled());
  return result[1];  // the argindex; out itself was written
}

}  // namespace
}  // namespace wb_scatter

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

TORCH_LIBRARY_IMPL(wb_scatter, Autograd, m) {
  using namespace wb_scatter;
  m.impl("scatter_sum", &scatter_sum);
  m.impl("scatter_sum.accumulate", &scatter_sum_accumulate);
  m.impl("scatter_mean", &scatter_mean);
  m.impl("scatter_mean.accumulate", &scatter_mean_accumulate);
  m.impl("scatter_min", &arg_reduce<ScatterMin>);
  m.impl("scatter_min.accumulate", &arg_reduce_accumulate<ScatterMin>);
  m.impl("scatter_max", &arg_reduce<ScatterMax>);
  m.impl("scatter_max.accumulate", &arg_reduce_accumulate<ScatterMax>);
}
