"""Exercise checks of chapter 03: they pass on the solutions, say "not attempted" on the stubs, and reject a
catalogue of plausible wrong and cheating answers (WRONG_ANSWERS), each with a message that says what is
wrong.

The solutions are the exercise cells of solutions/03_cpp_autograd.ipynb, run here as they are
(tests/solution_cells.py; the C++ ones build through workbook.build.fresh_namespace.ops, reusing the notebook's
build). The C++ wrong answers of 3.1 and 3.2 are ops of one library (WRONG_CPP), built once.
"""

import functools

import pytest
import torch
import wrong_answers
from solution_cells import failed_with, run_solution_cell
from wrong_answers import WrongAnswer

from workbook.build import fresh_namespace
from workbook.exercises import ch03
from workbook.ops import scatter

WRONG_CPP = r"""
// Wrong answers to exercises 3.1 and 3.2, the way a learner might write them: one build, one op each.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/scatter_reduce.h>
#include <ATen/ops/scatter_reduce_cpu_dispatch.h>
#include <ATen/ops/zeros.h>
#include <Python.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- 3.1: scatter_mean's backward ----
enum class Mean { NoCount, DimZero, PlainBuffer, LibraryBackward, InFloat32 };

using MeanSignature = Tensor(const Tensor&, const Tensor&, int64_t, std::optional<int64_t>);

template <Mean M>
struct WrongMean : torch::autograd::Function<WrongMean<M>> {
  static Tensor forward(AutogradContext* ctx, const Tensor& src, const Tensor& index, int64_t dim,
                        std::optional<int64_t> dim_size) {
    using Signature = Tensor(const Tensor&, const Tensor&, int64_t, std::optional<int64_t>);
    static auto mean = c10::Dispatcher::singleton().findSchemaOrThrow("wb_scatter::scatter_mean", "").typed<Signature>();
    static auto sum = c10::Dispatcher::singleton().findSchemaOrThrow("wb_scatter::scatter_sum", "").typed<Signature>();
    at::AutoDispatchBelowADInplaceOrView guard;
    Tensor out = mean.call(src, index, dim, dim_size);
    Tensor count = sum.call(at::ones_like(src), index, dim, out.size(dim));
    ctx->saved_data["dim"] = dim;
    ctx->save_for_backward({index, count});
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    Tensor index = saved[0], count = saved[1];
    int64_t dim = ctx->saved_data["dim"].toInt();
    Tensor grad_src;
    if constexpr (M == Mean::NoCount) {
      grad_src = grads[0].gather(dim, index);  // forgets to divide by the count
    } else if constexpr (M == Mean::DimZero) {
      grad_src = grads[0].gather(0, index).div(count.gather(0, index));  // dim 0, as the chapter's examples
    } else if constexpr (M == Mean::InFloat32) {
      // computed in float32 whatever src's dtype (autograd casts it back to float64 without a word)
      grad_src = grads[0].to(at::kFloat).gather(dim, index).div(count.to(at::kFloat).gather(dim, index));
    } else if constexpr (M == Mean::LibraryBackward) {
      // the library's autograd does the backward: a stand-in src through wb_scatter::scatter_mean (the mean's
      // gradient does not depend on src's values), then autograd::grad of it
      static auto mean = c10::Dispatcher::singleton().findSchemaOrThrow("wb_scatter::scatter_mean", "").typed<MeanSignature>();
      c10::AutoGradMode enable(true);
      Tensor leaf = at::zeros(index.sizes(), grads[0].options()).requires_grad_();
      Tensor out = mean.call(leaf, index, dim, grads[0].size(dim));
      grad_src = torch::autograd::grad({out}, {leaf}, {grads[0]})[0];
    } else {
      // the incoming gradient's memory read as if it were a contiguous tensor of its shape
      Tensor g = at::from_blob(grads[0].data_ptr(), grads[0].sizes(), grads[0].options());
      grad_src = g.gather(dim, index).div(count.gather(dim, index));
    }
    return {grad_src, Tensor(), Tensor(), Tensor()};
  }
};

template <Mean M>
Tensor wrong_mean(const Tensor& src, const Tensor& index, int64_t dim, std::optional<int64_t> dim_size) {
  return WrongMean<M>::apply(src, index, dim, dim_size);
}

// ---- 3.2: scatter_max with its argindex ----
enum class Max { NoLowerBound, CheckAfterWrite, StartFromZero, LastWins, ReadAsFloat, GroupByGroup, Library, CpuKernel };

// The library's scatter_max, reached from C++ by importing the workbook through Python's C API.
std::tuple<Tensor, Tensor> max_through_python(const Tensor& src, const Tensor& index, int64_t dim_size) {
  PyGILState_STATE state = PyGILState_Ensure();
  PyRun_SimpleString("from workbook.ops import scatter; scatter.load()");
  PyGILState_Release(state);
  using Signature = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, int64_t, std::optional<int64_t>);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("wb_scatter::scatter_max", "").typed<Signature>();
  return op.call(src, index, 0, dim_size);
}

template <Max M>
std::tuple<Tensor, Tensor> wrong_max(const Tensor& src, const Tensor& index, int64_t dim_size) {
  Tensor s = src.contiguous(), ix = index.contiguous();
  int64_t n = s.size(0);
  Tensor values = at::zeros({dim_size}, src.options());
  Tensor argindex = at::full({dim_size}, n, index.options());
  if constexpr (M == Max::Library) {  // the values from torch's own scatter_reduce, then the argindex by hand
    values = values.scatter_reduce(0, ix, s, "amax", /*include_self=*/false);
  } else if constexpr (M == Max::CpuKernel) {  // the same, calling torch's CPU kernel directly (no dispatcher)
    values = at::cpu::scatter_reduce(at::full({dim_size}, -INFINITY, src.options()), 0, ix, s, "amax", true);
  }
  AT_DISPATCH_FLOATING_TYPES(src.scalar_type(), "wrong_max", [&] {
    const scalar_t* x = s.const_data_ptr<scalar_t>();
    const int64_t* group = ix.const_data_ptr<int64_t>();
    scalar_t* v = values.data_ptr<scalar_t>();
    int64_t* arg = argindex.data_ptr<int64_t>();
    if constexpr (M == Max::GroupByGroup) {
      for (int64_t j = 0; j < n; ++j)
        TORCH_CHECK(group[j] >= 0 && group[j] < dim_size, "index value ", group[j], " is out of range");
      for (int64_t g = 0; g < dim_size; ++g)
        for (int64_t j = 0; j < n; ++j)
          if (group[j] == g && (arg[g] == n || x[j] > v[g])) {
            v[g] = x[j];
            arg[g] = j;
          }
      return;
    }
    for (int64_t j = 0; j < n; ++j) {
      int64_t g = group[j];
      if constexpr (M == Max::NoLowerBound) {
        TORCH_CHECK(g < dim_size, "index value ", g, " at position ", j, " is out of range");
      } else if constexpr (M != Max::CheckAfterWrite) {
        TORCH_CHECK(g >= 0 && g < dim_size, "index value ", g, " at position ", j, " is out of range");
      }
      if constexpr (M == Max::Library || M == Max::CpuKernel) {
        if (arg[g] == n && x[j] == v[g]) arg[g] = j;
      } else if constexpr (M == Max::StartFromZero) {
        if (x[j] > v[g]) {
          v[g] = x[j];
          arg[g] = j;
        }
      } else if constexpr (M == Max::LastWins) {
        if (arg[g] == n || x[j] >= v[g]) {
          v[g] = x[j];
          arg[g] = j;
        }
      } else if constexpr (M == Max::ReadAsFloat) {
        float value = x[j];
        if (arg[g] == n || value > static_cast<float>(v[g])) {
          v[g] = value;
          arg[g] = j;
        }
      } else {
        if (arg[g] == n || x[j] > v[g]) {
          v[g] = x[j];
          arg[g] = j;
        }
      }
      if constexpr (M == Max::CheckAfterWrite) {
        TORCH_CHECK(g >= 0 && g < dim_size, "index value ", g, " at position ", j, " is out of range");
      }
    }
    if constexpr (M == Max::CpuKernel) {
      for (int64_t g = 0; g < dim_size; ++g)
        if (arg[g] == n) v[g] = 0;  // empty groups: 0
    }
  });
  return {values, argindex};
}

#define MEAN_SCHEMA "(Tensor src, Tensor index, int dim, int? dim_size=None) -> Tensor"
#define MAX_SCHEMA "(Tensor src, Tensor index, int dim_size) -> (Tensor, Tensor)"
TORCH_LIBRARY(NAMESPACE, m) {
  m.def("mean_without_count" MEAN_SCHEMA, &wrong_mean<Mean::NoCount>);
  m.def("mean_along_dim_0" MEAN_SCHEMA, &wrong_mean<Mean::DimZero>);
  m.def("mean_plain_buffer" MEAN_SCHEMA, &wrong_mean<Mean::PlainBuffer>);
  m.def("mean_library_backward" MEAN_SCHEMA, &wrong_mean<Mean::LibraryBackward>);
  m.def("mean_in_float32" MEAN_SCHEMA, &wrong_mean<Mean::InFloat32>);
  m.def("max_no_lower_bound" MAX_SCHEMA, &wrong_max<Max::NoLowerBound>);
  m.def("max_check_after_write" MAX_SCHEMA, &wrong_max<Max::CheckAfterWrite>);
  m.def("max_from_zero" MAX_SCHEMA, &wrong_max<Max::StartFromZero>);
  m.def("max_last_wins" MAX_SCHEMA, &wrong_max<Max::LastWins>);
  m.def("max_read_as_float" MAX_SCHEMA, &wrong_max<Max::ReadAsFloat>);
  m.def("max_group_by_group" MAX_SCHEMA, &wrong_max<Max::GroupByGroup>);
  m.def("max_library_values" MAX_SCHEMA, &wrong_max<Max::Library>);
  m.def("max_cpu_kernel" MAX_SCHEMA, &wrong_max<Max::CpuKernel>);
  m.def("max_through_python" MAX_SCHEMA, &max_through_python);
}
"""


# ---- the solutions pass, the stubs are not attempted, and the messages name the mistake ----------


def test_mean_backward_check_passes_on_the_solution():
    scatter.load()
    solution = run_solution_cell("03_cpp_autograd", "ex3_1")["my_scatter_mean"]
    assert ch03.check_scatter_mean_backward(solution).passed


def test_max_check_passes_on_the_solution():
    scatter.load()
    solution = run_solution_cell("03_cpp_autograd", "ex3_2")["my_scatter_max"]
    assert ch03.check_scatter_max(solution).passed


def test_max_function_check_passes_on_the_solution_and_on_a_python_version():
    namespace = run_solution_cell("03_cpp_autograd", "ex3_3")
    namespace["ops"] = scatter.load()  # the notebook's global, read when forward runs
    assert ch03.check_scatter_max_function(namespace["ScatterMaxPy"]).passed
    assert ch03.check_scatter_max_function(_max_function(_spare_slot)).passed


def test_max_function_check_reports_stubs_and_wants_two_outputs():
    def stub(*arguments):
        raise NotImplementedError("not attempted yet")

    assert ch03.check_scatter_max_function(_max_function(stub)).status == "not attempted yet"

    class ValuesOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, index, dim, dim_size):
            return scatter.load().scatter_max(src, index, dim, dim_size)[0]

        @staticmethod
        def backward(ctx, grad):
            return None, None, None, None

    failed_with(ch03.check_scatter_max_function(ValuesOnly), "should return (values, argindex)")


@functools.cache
def wrong_ops():
    scatter.load()  # the wrong scatter_means call the library's ops
    return fresh_namespace.ops("wb_test_ch03_wrong", WRONG_CPP)


def wrong_cpp(check, name):
    """Run ch03.<check> on the op <name> of WRONG_CPP."""
    return lambda: getattr(ch03, check)(getattr(wrong_ops(), name))


# ---- 3.3: Python autograd.Functions around the library's kernel --------------------------------


def _max_function(route, save_src=False):
    """A Python autograd.Function around the library's scatter_max whose backward is `route`."""

    class ScatterMaxPy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, src, index, dim, dim_size):
            values, argindex = scatter.load().scatter_max(src, index, dim, dim_size)
            ctx.save_for_backward(argindex, index, src if save_src else argindex, values)
            ctx.dim, ctx.n = dim, src.size(dim)
            return values, argindex

        @staticmethod
        def backward(ctx, grad_values, grad_argindex):
            argindex, index, src, values = ctx.saved_tensors
            return route(grad_values, argindex, index, ctx.dim, ctx.n, src, values), None, None, None

    return ScatterMaxPy


def _spare_slot(grad, argindex, index, dim, n, src=None, values=None):
    shape = list(grad.shape)
    shape[dim] = n + 1
    return grad.new_zeros(shape).scatter_(dim, argindex, grad).narrow(dim, 0, n)


def _no_spare_slot(grad, argindex, index, dim, n, *saved):
    shape = list(grad.shape)
    shape[dim] = n
    return grad.new_zeros(shape).scatter_(dim, argindex, grad)


def _clamped(grad, argindex, index, dim, n, *saved):
    return _no_spare_slot(grad, argindex.clamp(max=n - 1), index, dim, n)


def _through_the_checks_reference(grad, argindex, index, dim, n, src, values):
    """The gradient of the check's own pure-torch reference, scatter.reference_max."""
    with torch.enable_grad():
        leaf = src.detach().requires_grad_()
        result = scatter.reference_max(leaf, index, dim, dim_size=values.size(dim))[0]
        return torch.autograd.grad(result, leaf, grad)[0]


def _in_float32(grad, argindex, index, dim, n, *saved):
    """Routed in float32: autograd casts the result back to src's float64 without a word."""
    return _spare_slot(grad.float(), argindex, index, dim, n)


def _every_tied_element(grad, argindex, index, dim, n, src, values):
    """Gradient to every element equal to its group's maximum: right until there is a tie."""
    return grad.gather(dim, index) * (src == values.gather(dim, index))


def _along_dim_0(grad, argindex, index, dim, n, *saved):
    """dim 0 written into the code, as in the chapter's examples."""
    return grad.new_zeros(n + 1, *grad.shape[1:]).scatter_(0, argindex, grad)[:n]


def _torch_amax_gradient(grad, argindex, index, dim, n, src, values):
    """The gradient of torch's own scatter_reduce("amax"), which splits a tie between the tied elements."""
    with torch.enable_grad():
        leaf = src.detach().requires_grad_()
        shape = list(src.shape)
        shape[dim] = values.size(dim)
        result = src.new_zeros(shape).scatter_reduce(dim, index, leaf, "amax", include_self=False)
        return torch.autograd.grad(result, leaf, grad)[0]


class _LibraryItself:
    """No Function of its own: the library's op, whose C++ backward does the work."""

    @staticmethod
    def apply(src, index, dim, dim_size):
        return scatter.scatter_max(src, index, dim, None, dim_size)


def _reference_max(src, index, dim_size):
    return scatter.reference_max(src, index, 0, dim_size=dim_size)


WRONG_ANSWERS = [
    # 3.1 scatter_mean's backward in C++
    WrongAnswer(
        "3.1",
        "wrong math",
        "no division by the count",
        wrong_cpp("check_scatter_mean_backward", "mean_without_count"),
        ("divided by its group's count",),
    ),
    WrongAnswer(
        "3.1",
        "shown sizes only",
        "gathers along dim 0, the chapter's examples",
        wrong_cpp("check_scatter_mean_backward", "mean_along_dim_0"),
        ("dim=-1",),
    ),
    WrongAnswer(
        "3.1",
        "wrong math",
        "reads the incoming gradient as a contiguous buffer",
        wrong_cpp("check_scatter_mean_backward", "mean_plain_buffer"),
        ("not contiguous", "through its strides"),
    ),
    WrongAnswer(
        "3.1",
        "concept skipped",
        "backward borrows the library's scatter_mean autograd (torch::autograd::grad of it)",
        wrong_cpp("check_scatter_mean_backward", "mean_library_backward"),
        ("your backward calls wb_scatter::scatter_mean",),
    ),
    WrongAnswer(
        "3.1",
        "wrong math",
        "a float64 gradient computed in float32 (autograd casts it back silently)",
        wrong_cpp("check_scatter_mean_backward", "mean_in_float32"),
        ("float64", "is wrong at index"),
    ),
    WrongAnswer(
        "3.1",
        "concept skipped",
        "the library's scatter_mean, whose C++ backward does the work",
        lambda: ch03.check_scatter_mean_backward(lambda s, i, d, n: scatter.scatter_mean(s, i, d, None, n)),
        ("not a Python function",),
    ),
    WrongAnswer(
        "3.1",
        "private data",
        "the check's own reference, torch's scatter_reduce autograd",
        lambda: ch03.check_scatter_mean_backward(torch.ops.aten.scatter_reduce),
        ("is not yours",),
    ),
    # 3.2 scatter_max with its argindex
    WrongAnswer(
        "3.2",
        "wrong math",
        "checks index < dim_size only: a negative index writes before values",
        wrong_cpp("check_scatter_max", "max_no_lower_bound"),
        ("index value -1",),
    ),
    WrongAnswer(
        "3.2",
        "wrong math",
        "writes values[k] before checking k",
        wrong_cpp("check_scatter_max", "max_check_after_write"),
        ("crashed the process", "before"),
    ),
    WrongAnswer(
        "3.2",
        "wrong math",
        "starts every group at 0",
        wrong_cpp("check_scatter_max", "max_from_zero"),
        ("all negative",),
    ),
    WrongAnswer(
        "3.2",
        "wrong math",
        "the last position wins a tie",
        wrong_cpp("check_scatter_max", "max_last_wins"),
        ("argindex", "the first one on a tie"),
    ),
    WrongAnswer(
        "3.2",
        "wrong math",
        "compares float64 values as float32",
        wrong_cpp("check_scatter_max", "max_read_as_float"),
        ("float64 values 1e-12 apart",),
    ),
    WrongAnswer(
        "3.2",
        "too slow",
        "a pass over src for every group",
        wrong_cpp("check_scatter_max", "max_group_by_group"),
        ("times as long as the library's scatter_max",),
    ),
    WrongAnswer(
        "3.2",
        "concept skipped",
        "values from torch's scatter_reduce",
        wrong_cpp("check_scatter_max", "max_library_values"),
        ("aten::scatter_reduce",),
    ),
    WrongAnswer(
        "3.2",
        "concept skipped",
        "values from torch's CPU kernel called directly (at::cpu::scatter_reduce, no dispatcher)",
        wrong_cpp("check_scatter_max", "max_cpu_kernel"),
        ("at::cpu::scatter_reduce", "past the dispatcher"),
    ),
    WrongAnswer(
        "3.2",
        "concept skipped",
        "the library's op, reached from C++ through Python's C API",
        wrong_cpp("check_scatter_max", "max_through_python"),
        ("wb_scatter::scatter_max",),
    ),
    WrongAnswer(
        "3.2",
        "private data",
        "the check's reference, as a Python function",
        lambda: ch03.check_scatter_max(_reference_max),
        ("not a Python function",),
    ),
    # 3.3 scatter_max's gradient, Python style
    WrongAnswer(
        "3.3",
        "wrong math",
        "gradient to every element equal to the maximum",
        lambda: ch03.check_scatter_max_function(_max_function(_every_tied_element, save_src=True)),
        ("with ties", "the first one on a tie"),
    ),
    WrongAnswer(
        "3.3",
        "wrong math",
        "argindex clamped into range: an empty group's gradient lands on the last element",
        lambda: ch03.check_scatter_max_function(_max_function(_clamped)),
        ("nothing for an empty group",),
    ),
    WrongAnswer(
        "3.3",
        "wrong math",
        "the gradient routed in float32 for a float64 src",
        lambda: ch03.check_scatter_max_function(_max_function(_in_float32)),
        ("float64", "is wrong at index"),
    ),
    WrongAnswer(
        "3.3",
        "private data",
        "backward through the check's reference, scatter.reference_max",
        lambda: ch03.check_scatter_max_function(_max_function(_through_the_checks_reference, save_src=True)),
        ("aten::scatter_reduce",),
    ),
    WrongAnswer(
        "3.3",
        "wrong math",
        "no spare slot for empty groups",
        lambda: ch03.check_scatter_max_function(_max_function(_no_spare_slot)),
        ("your backward raised", "spare slot"),
    ),
    WrongAnswer(
        "3.3",
        "shown sizes only",
        "dim 0 written into the backward",
        lambda: ch03.check_scatter_max_function(_max_function(_along_dim_0)),
        ("dim=-1",),
    ),
    WrongAnswer(
        "3.3",
        "concept skipped",
        "no Function: the library's op and its C++ backward",
        lambda: ch03.check_scatter_max_function(_LibraryItself),
        ("torch.autograd.Function",),
    ),
    WrongAnswer(
        "3.3",
        "concept skipped",
        "backward borrows torch's scatter_reduce gradient",
        lambda: ch03.check_scatter_max_function(_max_function(_torch_amax_gradient, save_src=True)),
        ("aten::scatter_reduce",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
