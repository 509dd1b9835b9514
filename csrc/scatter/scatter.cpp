// csrc/scatter/scatter.cpp — the wb_scatter operator library: schema, argument checks, autograd.
//
// Public ops (what Python and C++ users call; autograd-aware, device-independent):
//
//   wb_scatter::scatter_sum (Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) -> Tensor
//   wb_scatter::scatter_mean(Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) -> Tensor
//   wb_scatter::scatter_min (Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) -> (Tensor, Tensor)
//   wb_scatter::scatter_max (Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) -> (Tensor, Tensor)
//
//   torch_scatter's semantics: `index` is broadcast against `src` (a 1-D index lines up with `dim`,
//   a longer one with the leading dimensions; missing trailing dimensions are added), out has
//   src's shape with size dim_size at `dim` (dim_size = index.max() + 1 when neither out nor
//   dim_size is given). Groups that receive nothing are 0; min/max also return the argindex, the
//   position along `dim` of the chosen element, which is src.size(dim) for an empty group.
//   With out=, the reduction starts from out's values, writes into out and returns it.
//   They are implemented below as C++ torch::autograd::Function classes, registered for the
//   CompositeImplicitAutograd key: they run on any device for which the kernel op has a kernel.
//
// Kernel op (device level, no autograd; one implementation per backend):
//
//   wb_scatter::scatter_reduce_kernel(Tensor src, Tensor index, int dim, Tensor(a!)? out,
//                                     int? dim_size, str reduce) -> (Tensor, Tensor)
//
//   Implemented with TORCH_LIBRARY_IMPL(wb_scatter, CPU, m) in cpu/scatter_cpu.cpp and
//   TORCH_LIBRARY_IMPL(wb_scatter, CUDA, m) in cuda/scatter_cuda.cu. The C++ kernel signature is
//     std::tuple<at::Tensor, at::Tensor> (const at::Tensor& src, const at::Tensor& index, int64_t dim,
//         const std::optional<at::Tensor>& out, std::optional<int64_t> dim_size, c10::string_view reduce)
//   Contract:
//   - src: dim() >= 1; dtype uint8, int8, int16, int32, int64, float16, bfloat16, float32 or
//     float64; any strides.
//   - index: int64, on src's device, with exactly src's shape (already broadcast: it may be an
//     expanded view with stride 0). Values must lie in [0, dim_size).
//   - dim: already wrapped, 0 <= dim < src.dim().
//   - out (optional): src's dtype and device, out.size(d) == src.size(d) for every d != dim, any
//     strides. The reduction starts from its values; the result is written into it and the
//     returned first tensor IS out (same TensorImpl), so autograd can mark it dirty.
//   - dim_size (optional): must be None or out.size(dim) when out is given; else >= 0; when
//     neither is given, index.max() + 1 (0 for an empty index).
//   - reduce: "sum", "mean", "min" or "max".
//   Returns (out, extra): out as above (empty groups 0 unless out= was given; integer mean rounds
//   down); extra is, for min/max, the int64 argindex of out's shape (first position along dim on
//   ties; src.size(dim) where no src element won: an empty group, or out='s own value kept), for
//   mean the int64 count of elements in each group (0 for empty groups), for sum an undefined
//   tensor (None in Python).
//   NaN in min/max propagates, as in torch.amin/amax and torch.scatter_reduce("amin"/"amax"): a
//   group holding a NaN gives NaN, and its argindex is the position of its first NaN along dim; a
//   NaN already in out= stays (argindex src.size(dim)). The result depends neither on the order
//   the elements are visited in nor on the number of threads.
//   Who checks what: the public ops check what users pass (dim in [-src.dim(), src.dim()), index
//   an integer tensor broadcastable against src, devices) and broadcast index. Every backend calls
//   wb_scatter::prepare_scatter (below; device-generic) first, which re-checks dtypes, devices,
//   shapes, dim, dim_size, out= and reduce, and allocates out (zeros) and extra. The backend's
//   own loop checks the index *values* while it reads them (negative, or >= dim_size) and raises
//   an error naming `index`; on such an error an out= tensor may be partly updated (as with
//   torch's native scatter_add_). Every user error is a TORCH_CHECK naming the argument.
#include "scatter.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace wb_scatter {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

Reduce parse_reduce(const std::string& reduce) {
  if (reduce == "sum") return Reduce::Sum;
  if (reduce == "mean") return Reduce::Mean;
  if (reduce == "min") return Reduce::Min;
  if (reduce == "max") return Reduce::Max;
  TORCH_CHECK(false, "reduce must be one of \"sum\", \"mean\", \"min\", \"max\", got \"", reduce, "\"");
}

static bool supported_dtype(at::ScalarType t) {
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kHalf: case at::kBFloat16: case at::kFloat: case at::kDouble:
      return true;
    default:
      return false;
  }
}

ScatterOutputs prepare_scatter(const Tensor& src, const Tensor& index, int64_t dim,
                               const c10::optional<Tensor>& out, c10::optional<int64_t> dim_size,
                               Reduce reduce) {
  TORCH_CHECK(src.defined(), "src is an undefined tensor");
  TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  TORCH_CHECK(supported_dtype(src.scalar_type()), "src has dtype ", src.scalar_type(),
              "; supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64");
  TORCH_CHECK(index.scalar_type() == at::kLong, "index must be an int64 tensor, got dtype ",
              index.scalar_type());
  TORCH_CHECK(index.device() == src.device(), "index is on ", index.device(), " but src is on ",
              src.device(), "; they must be on the same device");
  TORCH_CHECK(dim >= 0 && dim < src.dim(), "dim must be in [0, ", src.dim(),
              ") for the kernel op (wrap negative dims first), got ", dim);
  TORCH_CHECK(index.sizes() == src.sizes(), "index must have src's shape ", src.sizes(),
              " (broadcast it first), got ", index.sizes());

  int64_t size = 0;
  if (out.has_value()) {
    const Tensor& o = *out;
    TORCH_CHECK(o.scalar_type() == src.scalar_type(), "out has dtype ", o.scalar_type(),
                " but src has dtype ", src.scalar_type(), "; they must match");
    TORCH_CHECK(o.device() == src.device(), "out is on ", o.device(), " but src is on ",
                src.device(), "; they must be on the same device");
    bool same = o.dim() == src.dim();
    for (int64_t d = 0; same && d < src.dim(); ++d) same = d == dim || o.size(d) == src.size(d);
    TORCH_CHECK(same, "out has shape ", o.sizes(), " but must have src's shape ", src.sizes(),
                " except at dim ", dim);
    size = o.size(dim);
    TORCH_CHECK(!dim_size.has_value() || *dim_size == size, "dim_size is ", dim_size.value_or(0),
                " but out.size(", dim, ") is ", size, "; pass one of them or make them agree");
  } else if (dim_size.has_value()) {
    TORCH_CHECK(*dim_size >= 0, "dim_size must be >= 0, got ", *dim_size);
    size = *dim_size;
  } else if (index.numel() > 0) {
    auto [lo, hi] = at::aminmax(index);
    int64_t low = lo.item<int64_t>(), high = hi.item<int64_t>();
    TORCH_CHECK(low >= 0, "index contains the negative value ", low,
                "; index values must lie in [0, dim_size)");
    size = high + 1;
  }

  std::vector<int64_t> sizes = src.sizes().vec();
  sizes[dim] = size;
  ScatterOutputs result;
  result.dim_size = size;
  result.fresh = !out.has_value();
  result.out = out.has_value() ? *out : at::zeros(sizes, src.options());
  if (reduce == Reduce::Min || reduce == Reduce::Max) {
    result.arg = at::full(sizes, src.size(dim), index.options());
  } else if (reduce == Reduce::Mean) {
    result.arg = at::zeros(sizes, index.options());
  }
  return result;
}

// ---- the public ops' argument checks and torch_scatter's broadcasting rule -------------------

static int64_t wrap_dim(const Tensor& src, int64_t dim) {
  TORCH_CHECK(src.dim() >= 1, "src must have at least one dimension, got a 0-dimensional tensor");
  TORCH_CHECK(dim >= -src.dim() && dim < src.dim(), "dim must be in [", -src.dim(), ", ", src.dim(),
              ") for src of shape ", src.sizes(), ", got ", dim);
  return dim < 0 ? dim + src.dim() : dim;
}

static Tensor broadcast_index(const Tensor& index, const Tensor& src, int64_t dim,
                              const c10::optional<Tensor>& out) {
  TORCH_CHECK(!at::isFloatingType(index.scalar_type()) && !at::isComplexType(index.scalar_type()),
              "index must be an integer tensor (int64), got dtype ", index.scalar_type());
  TORCH_CHECK(index.scalar_type() == at::kLong, "index must be an int64 tensor, got dtype ",
              index.scalar_type(), " (convert it with index.long())");
  TORCH_CHECK(index.device() == src.device(), "index is on ", index.device(), " but src is on ",
              src.device(), "; they must be on the same device");
  if (out.has_value())
    TORCH_CHECK(out->device() == src.device(), "out is on ", out->device(), " but src is on ",
                src.device(), "; they must be on the same device");
  TORCH_CHECK(index.dim() <= src.dim(), "index has ", index.dim(), " dimensions but src has only ",
              src.dim(), "; index must broadcast against src");
  Tensor view = index;
  if (view.dim() == 1)  // a 1-D index runs along `dim`
    for (int64_t d = 0; d < dim; ++d) view = view.unsqueeze(0);
  while (view.dim() < src.dim()) view = view.unsqueeze(-1);
  for (int64_t d = 0; d < src.dim(); ++d)
    TORCH_CHECK(view.size(d) == src.size(d) || view.size(d) == 1, "index of shape ", index.sizes(),
                " cannot be broadcast against src of shape ", src.sizes(), " along dim ", dim,
                " (lined up as ", view.sizes(), ", size ", view.size(d), " at dimension ", d,
                " must be 1 or ", src.size(d), ")");
  return view.expand(src.sizes());
}

// The kernel op, called through the dispatcher: the tensors' device picks the backend.
static std::tuple<Tensor, Tensor> call_kernel(const Tensor& src, const Tensor& index, int64_t dim,
                                              const c10::optional<Tensor>& out,
                                              c10::optional<int64_t> dim_size, c10::string_view reduce) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("wb_scatter::scatter_reduce_kernel", "")
                       .typed<std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t,
                                                         const c10::optional<Tensor>&,
                                                         c10::optional<int64_t>, c10::string_view)>();
  return op.call(src, index, dim, out, dim_size, reduce);
}

static std::vector<int64_t> shape_of(AutogradContext* ctx) {
  return ctx->saved_data["src_shape"].toIntVector();
}

// ---- autograd: one torch::autograd::Function per op ------------------------------------------
// forward() receives the same arguments as the op; backward() returns one gradient per forward
// argument: undefined tensors for index, dim, dim_size (not differentiable) and for out= when
// none was given.

class ScatterSum : public torch::autograd::Function<ScatterSum> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                          const c10::optional<Variable>& out, c10::optional<int64_t> dim_size) {
    dim = wrap_dim(src, dim);
    Tensor idx = broadcast_index(index, src, dim, out);
    Tensor result = std::get<0>(call_kernel(src, idx, dim, out, dim_size, "sum"));
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({idx});
    if (out.has_value()) ctx->mark_dirty({*out});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    Tensor idx = ctx->get_saved_variables()[0];
    int64_t dim = ctx->saved_data["dim"].toInt();
    Tensor grad_src = ctx->needs_input_grad(0) ? grad.gather(dim, idx) : Tensor();
    Tensor grad_out = ctx->saved_data["has_out"].toBool() ? grad : Tensor();  // out + sum: identity
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor()};
  }
};

class ScatterMean : public torch::autograd::Function<ScatterMean> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                          const c10::optional<Variable>& out, c10::optional<int64_t> dim_size) {
    dim = wrap_dim(src, dim);
    Tensor idx = broadcast_index(index, src, dim, out);
    auto [result, count] = call_kernel(src, idx, dim, out, dim_size, "mean");
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["has_out"] = out.has_value();
    ctx->save_for_backward({idx, count});
    if (out.has_value()) ctx->mark_dirty({*out});
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor& grad = grads[0];
    auto saved = ctx->get_saved_variables();
    const Tensor& idx = saved[0];
    const Tensor& count = saved[1];
    int64_t dim = ctx->saved_data["dim"].toInt();
    // Each src element contributed 1/count of its group's mean; its group has count >= 1.
    Tensor grad_src = ctx->needs_input_grad(0) ? grad.gather(dim, idx).div(count.gather(dim, idx)) : Tensor();
    Tensor grad_out = ctx->saved_data["has_out"].toBool() ? grad.div(count.clamp_min(1)) : Tensor();
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor()};
  }
};

template <typename Self>
class ScatterArgReduce : public torch::autograd::Function<Self> {
 public:
  static variable_list forward(AutogradContext* ctx, const Variable& src, const Variable& index, int64_t dim,
                               const c10::optional<Variable>& out, c10::optional<int64_t> dim_size) {
    dim = wrap_dim(src, dim);
    Tensor idx = broadcast_index(index, src, dim, out);
    auto [result, arg] = call_kernel(src, idx, dim, out, dim_size, Self::reduce);
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["src_shape"] = src.sizes();
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
    auto shape = shape_of(ctx);
    int64_t n = shape[dim];
    Tensor grad_src;
    if (ctx->needs_input_grad(0)) {
      // Route each group's gradient to its winner; empty groups (arg == n) land in an extra slot.
      shape[dim] = n + 1;
      grad_src = at::zeros(shape, grad.options()).scatter_(dim, arg, grad).narrow(dim, 0, n);
    }
    Tensor grad_out;
    if (ctx->saved_data["has_out"].toBool()) grad_out = grad.masked_fill(arg.ne(n), 0);
    return {grad_src, Tensor(), Tensor(), grad_out, Tensor()};
  }
};

class ScatterMin : public ScatterArgReduce<ScatterMin> {
 public:
  static constexpr const char* reduce = "min";
};
class ScatterMax : public ScatterArgReduce<ScatterMax> {
 public:
  static constexpr const char* reduce = "max";
};

Tensor scatter_sum(const Tensor& src, const Tensor& index, int64_t dim, const c10::optional<Tensor>& out,
                   c10::optional<int64_t> dim_size) {
  return ScatterSum::apply(src, index, dim, out, dim_size);
}

Tensor scatter_mean(const Tensor& src, const Tensor& index, int64_t dim, const c10::optional<Tensor>& out,
                    c10::optional<int64_t> dim_size) {
  return ScatterMean::apply(src, index, dim, out, dim_size);
}

std::tuple<Tensor, Tensor> scatter_min(const Tensor& src, const Tensor& index, int64_t dim,
                                       const c10::optional<Tensor>& out, c10::optional<int64_t> dim_size) {
  auto result = ScatterMin::apply(src, index, dim, out, dim_size);
  return {result[0], result[1]};
}

std::tuple<Tensor, Tensor> scatter_max(const Tensor& src, const Tensor& index, int64_t dim,
                                       const c10::optional<Tensor>& out, c10::optional<int64_t> dim_size) {
  auto result = ScatterMax::apply(src, index, dim, out, dim_size);
  return {result[0], result[1]};
}

}  // namespace wb_scatter

TORCH_LIBRARY(wb_scatter, m) {
  m.def("scatter_reduce_kernel(Tensor src, Tensor index, int dim, Tensor(a!)? out, int? dim_size, "
        "str reduce) -> (Tensor, Tensor)");
  m.def("scatter_sum(Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) -> Tensor");
  m.def("scatter_mean(Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) -> Tensor");
  m.def("scatter_min(Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) "
        "-> (Tensor, Tensor)");
  m.def("scatter_max(Tensor src, Tensor index, int dim=-1, Tensor(a!)? out=None, int? dim_size=None) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(wb_scatter, CompositeImplicitAutograd, m) {
  m.impl("scatter_sum", &wb_scatter::scatter_sum);
  m.impl("scatter_mean", &wb_scatter::scatter_mean);
  m.impl("scatter_min", &wb_scatter::scatter_min);
  m.impl("scatter_max", &wb_scatter::scatter_max);
}
