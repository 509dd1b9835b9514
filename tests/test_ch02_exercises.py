"""Chapter 02's checks reject a catalogue of wrong answers and say why.

The C++ wrong answers of exercises 2.1 and 2.2 share one build (lean headers, ops reached through torch.ops,
as `fresh_namespace.ops` builds them); exercise 2.3's run on Python stand-ins for the C++ functions. The
checks passing the real solutions is tested in tests/test_lltm.py, which builds them from the notebook.
"""

import functools
import types

import pytest
import torch
import wrong_answers
from torch.autograd.function import once_differentiable
from wrong_answers import WrongAnswer

from workbook.build import fresh_namespace
from workbook.course.checking import FAILED, NOT_ATTEMPTED, PASSED
from workbook.exercises import ch02


@pytest.fixture(autouse=True)
def lenient(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)


# Wrong answers a learner could write for 2.1 (backward) and 2.2 (validation), all in one source.
WRONG_CPP = r"""
#include <ATen/Dispatch.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

// The elementwise gradients over n values laid out one after the other.
template <typename T>
void gated_loop(const T* g, const T* pa, const T* pb, T* da, T* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T t = std::tanh(pa[i]);
    const T s = 1 / (1 + std::exp(-pb[i]));
    da[i] = g[i] * (1 - t * t) * s;
    db[i] = g[i] * t * s * (1 - s);
  }
}

// 2.1: a loop over raw memory, as if every tensor were contiguous.
std::vector<at::Tensor> backward_raw_loop(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  at::Tensor d_a = at::empty(a.sizes(), a.options());
  at::Tensor d_b = at::empty(a.sizes(), a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "backward_raw_loop", [&] {
    gated_loop(grad.const_data_ptr<scalar_t>(), a.const_data_ptr<scalar_t>(), b.const_data_ptr<scalar_t>(),
               d_a.mutable_data_ptr<scalar_t>(), d_b.mutable_data_ptr<scalar_t>(), a.numel());
  });
  return {d_a, d_b};
}

// 2.1: sigmoid'(b) written with exp(-b), which overflows for very negative b (inf / inf = nan).
std::vector<at::Tensor> backward_exp_formula(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor t = at::tanh(a);
  const at::Tensor e = at::exp(-b);
  return {grad * (1 - t * t) * at::sigmoid(b), grad * t * e / ((1 + e) * (1 + e))};
}

// 2.1: the incoming gradient reused as d_a's storage.
std::vector<at::Tensor> backward_in_place(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor t = at::tanh(a);
  const at::Tensor s = at::sigmoid(b);
  at::Tensor d_b = grad * t * s * (1 - s);
  at::Tensor d_a = grad.mul_((1 - t * t) * s);
  return {d_a, d_b};
}

// 2.1: the data read as float, whatever the dtype.
std::vector<at::Tensor> backward_reads_float(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  at::Tensor d_a = at::empty(a.sizes(), a.options());
  at::Tensor d_b = at::empty(a.sizes(), a.options());
  gated_loop(static_cast<const float*>(grad.const_data_ptr()), static_cast<const float*>(a.const_data_ptr()),
             static_cast<const float*>(b.const_data_ptr()), static_cast<float*>(d_a.mutable_data_ptr()),
             static_cast<float*>(d_b.mutable_data_ptr()), a.numel());
  return {d_a, d_b};
}

// 2.1: autograd does the work: a and b made to require grad, the forward run, backward() asked for d_a, d_b.
std::vector<at::Tensor> backward_by_autograd(const at::Tensor& grad, const at::Tensor& a, const at::Tensor& b) {
  at::Tensor a_leaf = a.detach().requires_grad_(true);
  at::Tensor b_leaf = b.detach().requires_grad_(true);
  (at::tanh(a_leaf) * at::sigmoid(b_leaf)).backward(grad);
  return {a_leaf.grad(), b_leaf.grad()};
}

// 2.2: right, except that it accepts the CPU only.
void validate_cpu_only(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point(), "gated_tanh: a must be a floating-point tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "gated_tanh: a and b must be on the cpu device");
  TORCH_CHECK(b.sizes() == a.sizes(), "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

// 2.2: right, except that it accepts float and double only.
void validate_float_or_double(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble,
              "gated_tanh: a must be a float or double tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(b.device() == a.device(), "gated_tanh: b must be on the device of a, got ", b.device());
  TORCH_CHECK(b.sizes() == a.sizes(), "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

// 2.2: the shape compared by its number of dimensions and rows only.
void validate_rows_only(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point(), "gated_tanh: a must be a floating-point tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(b.device() == a.device(), "gated_tanh: b must be on the device of a, got ", b.device());
  TORCH_CHECK(b.dim() == a.dim() && (a.dim() == 0 || b.size(0) == a.size(0)),
              "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

// 2.2: int64, the one integer dtype the notebook mentions, refused by name.
void validate_not_long(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() != at::kLong, "gated_tanh: a must be a floating-point tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(b.device() == a.device(), "gated_tanh: b must be on the device of a, got ", b.device());
  TORCH_CHECK(b.sizes() == a.sizes(), "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

// 2.2: one check for everything, with a message that cannot say which property is wrong.
void validate_one_message(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point() && b.scalar_type() == a.scalar_type() && b.device() == a.device() &&
                  b.sizes() == a.sizes(),
              "gated_tanh: a and b must be floating-point tensors of the same dtype, device and shape");
}

// 2.2: one check for everything, whose message prints every value but does not say which property is wrong.
void validate_one_message_with_values(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point() && b.scalar_type() == a.scalar_type() && b.device() == a.device() &&
                  b.sizes() == a.sizes(),
              "gated_tanh: a and b must be floating-point tensors with the same shape, dtype and device; got a: ",
              a.sizes(), " ", a.scalar_type(), " on ", a.device(), ", b: ", b.sizes(), " ", b.scalar_type(), " on ",
              b.device());
}

// 2.2: right, except that the floating-point message names no argument ("a" is the article).
void validate_no_argument_named(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point(), "gated_tanh: expected a floating-point tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(b.device() == a.device(), "gated_tanh: b must be on the device of a, got ", b.device());
  TORCH_CHECK(b.sizes() == a.sizes(), "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

// 2.2: the device compared by its type only (cuda:0 and cuda:1 pass), as one GPU cannot show.
void validate_device_type_only(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point(), "gated_tanh: a must be a floating-point tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(b.device().type() == a.device().type(), "gated_tanh: b must be on the device of a, got ", b.device());
  TORCH_CHECK(b.sizes() == a.sizes(), "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

// 2.2: the shape compared by the number of elements, of dimensions and the last size.
void validate_numel_and_last_size(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.is_floating_point(), "gated_tanh: a must be a floating-point tensor, got ", a.scalar_type());
  TORCH_CHECK(b.scalar_type() == a.scalar_type(), "gated_tanh: b must have the dtype of a, got ", b.scalar_type());
  TORCH_CHECK(b.device() == a.device(), "gated_tanh: b must be on the device of a, got ", b.device());
  TORCH_CHECK(b.numel() == a.numel() && b.dim() == a.dim() && (a.dim() == 0 || b.size(-1) == a.size(-1)),
              "gated_tanh: b must have the shape of a ", a.sizes(), ", got ", b.sizes());
}

TORCH_LIBRARY(NAMESPACE, m) {
  m.def("backward_raw_loop(Tensor grad, Tensor a, Tensor b) -> Tensor[]", &backward_raw_loop);
  m.def("backward_exp_formula(Tensor grad, Tensor a, Tensor b) -> Tensor[]", &backward_exp_formula);
  m.def("backward_in_place(Tensor grad, Tensor a, Tensor b) -> Tensor[]", &backward_in_place);
  m.def("backward_reads_float(Tensor grad, Tensor a, Tensor b) -> Tensor[]", &backward_reads_float);
  m.def("backward_by_autograd(Tensor grad, Tensor a, Tensor b) -> Tensor[]", &backward_by_autograd);
  m.def("validate_cpu_only(Tensor a, Tensor b) -> ()", &validate_cpu_only);
  m.def("validate_float_or_double(Tensor a, Tensor b) -> ()", &validate_float_or_double);
  m.def("validate_rows_only(Tensor a, Tensor b) -> ()", &validate_rows_only);
  m.def("validate_not_long(Tensor a, Tensor b) -> ()", &validate_not_long);
  m.def("validate_one_message(Tensor a, Tensor b) -> ()", &validate_one_message);
  m.def("validate_one_message_with_values(Tensor a, Tensor b) -> ()", &validate_one_message_with_values);
  m.def("validate_no_argument_named(Tensor a, Tensor b) -> ()", &validate_no_argument_named);
  m.def("validate_device_type_only(Tensor a, Tensor b) -> ()", &validate_device_type_only);
  m.def("validate_numel_and_last_size(Tensor a, Tensor b) -> ()", &validate_numel_and_last_size);
}
"""


@functools.cache
def wrong_ops():
    """torch.ops namespace of the wrong answers above (built once, on first use)."""
    return fresh_namespace.ops("wb_test_ch02_wrong", WRONG_CPP)


def _op(name):
    return lambda *args: getattr(wrong_ops(), name)(*args)


# ---- exercise 2.3: Python stand-ins for the C++ functions -----------------------------------------------


def _stand_in_extension():
    def backward(grad, a, b):
        t, s = torch.tanh(a), torch.sigmoid(b)
        return [grad * (1 - t * t) * s, grad * t * s * (1 - s)]

    return types.SimpleNamespace(
        gated_tanh_forward=lambda a, b: torch.tanh(a) * torch.sigmoid(b), gated_tanh_backward=backward
    )


def _gated_function(extension, *, backward_in_python=False, swap=False, save="save_for_backward", reference=False):
    class GatedTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            if save == "save_for_backward":
                ctx.save_for_backward(a, b)
            elif save == "attributes":
                ctx.a, ctx.b = a, b
            elif save == "a only":
                ctx.save_for_backward(a)
                ctx.b = b
            return ch02.gated_tanh(a, b) if reference else extension.gated_tanh_forward(a, b)

        @staticmethod
        def backward(ctx, grad):
            if save == "save_for_backward":
                a, b = ctx.saved_tensors
            elif save == "a only":
                (a,), b = ctx.saved_tensors, ctx.b
            else:
                a, b = ctx.a, ctx.b
            if backward_in_python:
                t, s = torch.tanh(a), torch.sigmoid(b)
                d_a, d_b = grad * (1 - t * t) * s, grad * t * s * (1 - s)
            else:
                d_a, d_b = extension.gated_tanh_backward(grad, a, b)
            return (d_b, d_a) if swap else (d_a, d_b)

    return GatedTanh


def _check_function(**mistake):
    extension = _stand_in_extension()
    return ch02.check_gated_function(_gated_function(extension, **mistake), extension)


WRONG_ANSWERS = [
    WrongAnswer(
        "2.1",
        "wrong math",
        "a loop over data_ptr() as if every tensor were contiguous",
        lambda: ch02.check_gated_tanh_backward(_op("backward_raw_loop")),
        ("not contiguous", "is wrong at index"),
    ),
    WrongAnswer(
        "2.1",
        "shown sizes only",
        "sigmoid'(b) as exp(-b) / (1 + exp(-b))^2, nan where exp overflows",
        lambda: ch02.check_gated_tanh_backward(_op("backward_exp_formula")),
        ("d_b", "overflows"),
    ),
    WrongAnswer(
        "2.1",
        "wrong math",
        "d_a computed into the incoming gradient (grad.mul_)",
        lambda: ch02.check_gated_tanh_backward(_op("backward_in_place")),
        ("changed grad in place",),
    ),
    WrongAnswer(
        "2.1",
        "wrong math",
        "the data read as float whatever the dtype",
        lambda: ch02.check_gated_tanh_backward(_op("backward_reads_float")),
        ("d_a", "float64", "is wrong at index"),
    ),
    WrongAnswer(
        "2.1",
        "concept skipped",
        "autograd does the work: backward() of the forward on leaves made of a and b",
        lambda: ch02.check_gated_tanh_backward(_op("backward_by_autograd")),
        ("builds an autograd graph", "with ATen calls"),
    ),
    WrongAnswer(
        "2.2",
        "shown sizes only",
        "accepts CPU tensors only",
        lambda: ch02.check_gated_inputs(_op("validate_cpu_only")),
        ("rejected valid inputs", "meta device"),
    ),
    WrongAnswer(
        "2.2",
        "shown sizes only",
        "accepts float32 and float64 only",
        lambda: ch02.check_gated_inputs(_op("validate_float_or_double")),
        ("rejected valid inputs", "float16"),
    ),
    WrongAnswer(
        "2.2",
        "wrong math",
        "compares the number of dimensions and the rows only",
        lambda: ch02.check_gated_inputs(_op("validate_rows_only")),
        ("(2, 3, 5)", "accepted it"),
    ),
    WrongAnswer(
        "2.2",
        "hard-coded",
        "refuses int64, the one integer dtype the notebook names, instead of every non-floating dtype",
        lambda: ch02.check_gated_inputs(_op("validate_not_long")),
        ("int32", "accepted it"),
    ),
    WrongAnswer(
        "2.2",
        "wrong math",
        "one TORCH_CHECK for everything, whose message cannot say what is wrong",
        lambda: ch02.check_gated_inputs(_op("validate_one_message")),
        ("only the shape is wrong", "a TORCH_CHECK of its own"),
    ),
    WrongAnswer(
        "2.2",
        "wrong math",
        "one TORCH_CHECK for everything, its message printing every value",
        lambda: ch02.check_gated_inputs(_op("validate_one_message_with_values")),
        ("only the shape is wrong", "also speaks of the dtype"),
    ),
    WrongAnswer(
        "2.2",
        "wrong math",
        "the floating-point message names no argument (only the article a)",
        lambda: ch02.check_gated_inputs(_op("validate_no_argument_named")),
        ("does not name the argument", "a floating-point tensor"),
    ),
    WrongAnswer(
        "2.2",
        "shown sizes only",
        "the device compared by its type only, right on one GPU",
        lambda: ch02.check_gated_inputs(_op("validate_device_type_only")),
        ("cuda:1", "accepted it"),
    ),
    WrongAnswer(
        "2.2",
        "wrong math",
        "the shape compared by its number of elements, dimensions and last size",
        lambda: ch02.check_gated_inputs(_op("validate_numel_and_last_size")),
        ("(3, 2, 4)", "accepted it"),
    ),
    WrongAnswer(
        "2.3",
        "concept skipped",
        "backward computed in Python instead of calling gated_tanh_backward",
        lambda: _check_function(backward_in_python=True),
        ("should call the C++ gated_tanh_backward",),
    ),
    WrongAnswer(
        "2.3",
        "wrong math",
        "the two gradients returned in the wrong order",
        lambda: _check_function(swap=True),
        ("the gradient for a", "is wrong at index"),
    ),
    WrongAnswer(
        "2.3",
        "wrong math",
        "a and b kept as ctx attributes, unchecked for in-place changes",
        lambda: _check_function(save="attributes"),
        ("ctx.save_for_backward(a, b)",),
    ),
    WrongAnswer(
        "2.3",
        "wrong math",
        "a saved, b kept as a ctx attribute (an in-place change of b goes unnoticed)",
        lambda: _check_function(save="a only"),
        ("after b was changed in place", "ctx.save_for_backward(a, b)"),
    ),
    WrongAnswer(
        "2.3", "wrong math", "nothing saved in forward", lambda: _check_function(save=None), ("your code raised",)
    ),
    WrongAnswer(
        "2.3",
        "private data",
        "forward returns the check's own reference, ch02.gated_tanh",
        lambda: _check_function(reference=True),
        ("should call the C++ gated_tanh_forward once",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)


def test_gated_function_check_passes_on_a_right_function_and_restores_the_extension():
    extension = _stand_in_extension()
    original = extension.gated_tanh_backward
    assert ch02.check_gated_function(_gated_function(extension), extension).status == PASSED
    assert extension.gated_tanh_backward is original


def test_gated_function_check_passes_when_the_functions_are_called_under_other_names():
    """A right answer may bind the C++ functions to names of its own first; the check still counts the calls."""
    extension = _stand_in_extension()
    forward_kernel, backward_kernel = extension.gated_tanh_forward, extension.gated_tanh_backward

    class GatedTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return forward_kernel(a, b)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            return tuple(backward_kernel(grad, *ctx.saved_tensors))

    assert ch02.check_gated_function(GatedTanh, extension).status == PASSED
    assert extension.gated_tanh_forward is forward_kernel
    assert GatedTanh.forward.__closure__[0].cell_contents is forward_kernel

    def python_backward(grad, a, b):  # the same, with the backward in Python: the count still sees it
        t, s = torch.tanh(a), torch.sigmoid(b)
        return [grad * (1 - t * t) * s, grad * t * s * (1 - s)]

    backward_kernel = python_backward
    outcome = ch02.check_gated_function(GatedTanh, extension)
    assert outcome.status == FAILED and "gated_tanh_backward" in outcome.explanation


def test_gated_function_check_reports_stubs_as_not_attempted():
    class Stub(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            raise NotImplementedError("not attempted yet")

    extension = _stand_in_extension()
    assert ch02.check_gated_function(Stub, extension).status == NOT_ATTEMPTED

    def unsolved_backward(grad, a, b):
        raise RuntimeError("gated_tanh_backward: not attempted yet")  # exercise 2.1's C++ stub

    extension.gated_tanh_backward = unsolved_backward
    assert ch02.check_gated_function(_gated_function(extension), extension).status == NOT_ATTEMPTED
