"""Chapter 01's checks pass the notebook's own solutions and explain deliberate mistakes."""

import nbformat
import pytest
import torch
import torch.nn.functional as F

from workbook import generate
from workbook.checking import FAILED, PASSED
from workbook.exercises import ch01


@pytest.fixture(autouse=True)
def lenient(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)


def solution(grade_id, name):
    """Run the solution cell `grade_id` of chapter 01 and return what it defines under `name`."""
    notebook = nbformat.read(generate.SOLUTIONS / "01_python_extensions.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    namespace = {"torch": torch, "F": F}
    exec(cell.source, namespace)
    return namespace[name]


def test_gated_unit_solution_passes():
    assert ch01.check_gated_unit(solution("ex1-gated-unit", "GatedUnit")).status == PASSED


def test_gated_unit_with_a_missing_chain_rule_factor_fails():
    class ForgotSigmoidDerivative(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, g):
            gate = torch.sigmoid(g)
            ctx.save_for_backward(x, gate)
            return x * gate

        @staticmethod
        def backward(ctx, grad_y):
            x, gate = ctx.saved_tensors
            return grad_y * gate, grad_y * x

    outcome = ch01.check_gated_unit(ForgotSigmoidDerivative)
    assert outcome.status == FAILED
    assert "the gradient for g is wrong at index (0, 0)" in outcome.explanation


def _gated_unit(compute_x_always=False, compute_g_always=False):
    class GatedUnit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, g):
            gate = torch.sigmoid(g)
            ctx.save_for_backward(x, gate)
            return x * gate

        @staticmethod
        def backward(ctx, grad_y):
            x, gate = ctx.saved_tensors
            grad_x = grad_y * gate if compute_x_always or ctx.needs_input_grad[0] else None
            grad_g = grad_y * x * gate * (1 - gate) if compute_g_always or ctx.needs_input_grad[1] else None
            return grad_x, grad_g

    return GatedUnit


def test_gated_unit_that_uses_needs_input_grad_passes():
    assert ch01.check_gated_unit(_gated_unit()).status == PASSED


@pytest.mark.parametrize(
    "mistake, named",
    [({"compute_g_always": True}, "needs_input_grad[1]"), ({"compute_x_always": True}, "needs_input_grad[0]")],
)
def test_gated_unit_that_ignores_needs_input_grad_fails(mistake, named):
    outcome = ch01.check_gated_unit(_gated_unit(**mistake))
    assert outcome.status == FAILED and named in outcome.explanation, str(outcome)


def test_leaky_relu_solution_passes():
    assert ch01.check_leaky_relu_(solution("ex1-leaky-relu", "LeakyReLUInplace")).status == PASSED


def test_leaky_relu_that_is_not_in_place_fails():
    class OutOfPlace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, slope):
            return F.leaky_relu(x, slope)

        @staticmethod
        def backward(ctx, grad_y):
            return grad_y, None

    outcome = ch01.check_leaky_relu_(OutOfPlace)
    assert outcome.status == FAILED and "modify x in place" in outcome.explanation


def test_leaky_relu_without_mark_dirty_fails_on_the_graph():
    class NotMarkedDirty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, slope):
            ctx.slope = slope
            x.copy_(torch.where(x > 0, x, x * slope))
            ctx.save_for_backward(x)
            return x

        @staticmethod
        def backward(ctx, grad_y):
            (y,) = ctx.saved_tensors
            return torch.where(y > 0, grad_y, grad_y * ctx.slope), None

    outcome = ch01.check_leaky_relu_(NotMarkedDirty)
    assert outcome.status == FAILED and "ctx.mark_dirty(x)" in outcome.explanation, str(outcome)


def test_row_max_solution_passes():
    assert ch01.check_row_max(solution("ex1-row-max", "RowMax")).status == PASSED


def test_row_max_returning_float_indices_fails():
    class FloatIndices(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values, indices = x.max(dim=-1)
            return values, indices.to(x.dtype)

        @staticmethod
        def backward(ctx, grad_values, grad_indices):
            return None

    outcome = ch01.check_row_max(FloatIndices)
    assert outcome.status == FAILED and "indices has dtype torch.float64, expected torch.int64" in outcome.explanation


def test_softplus_solution_passes():
    assert ch01.check_softplus(solution("ex1-softplus", "SoftplusFn")).status == PASSED


def test_softplus_with_a_constant_saved_intermediate_fails_the_second_derivative():
    class SavesSigmoid(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(torch.sigmoid(x))
            return F.softplus(x)

        @staticmethod
        def backward(ctx, grad_y):
            (s,) = ctx.saved_tensors
            return grad_y * s

    outcome = ch01.check_softplus(SavesSigmoid)
    assert outcome.status == FAILED and "second derivative" in outcome.explanation


def test_softplus_that_overflows_fails():
    class Naive(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.log1p(torch.exp(x))

        @staticmethod
        def backward(ctx, grad_y):
            (x,) = ctx.saved_tensors
            return grad_y * torch.sigmoid(x)

    outcome = ch01.check_softplus(Naive)
    assert outcome.status == FAILED and "large inputs" in outcome.explanation
