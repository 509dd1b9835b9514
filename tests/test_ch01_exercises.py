"""Chapter 01's checks pass the notebook's own solutions and reject a catalogue of wrong answers, saying why."""

import nbformat
import pytest
import torch
import torch.nn.functional as F
import wrong_answers
from torch.autograd.function import once_differentiable
from torchscript_warning import IGNORE_JIT_DEPRECATION
from wrong_answers import WrongAnswer

from workbook.course import generate
from workbook.course.checking import PASSED
from workbook.exercises import ch01

# torch.func.jvp (a wrong answer below uses it) scripts a helper the first time, and TorchScript says it is deprecated.
pytestmark = IGNORE_JIT_DEPRECATION


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


@pytest.mark.parametrize(
    "check, grade_id, name",
    [
        (ch01.check_gated_unit, "ex1-gated-unit", "GatedUnit"),
        (ch01.check_leaky_relu_, "ex1-leaky-relu", "LeakyReLUInplace"),
        (ch01.check_row_max, "ex1-row-max", "RowMax"),
        (ch01.check_softplus, "ex1-softplus", "SoftplusFn"),
    ],
)
def test_solution_passes(check, grade_id, name):
    outcome = check(solution(grade_id, name))
    assert outcome.status == PASSED, str(outcome)


def _function(name, forward, backward):
    """A torch.autograd.Function called `name` with these forward and backward."""
    return type(
        name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    )


# ---- 1.1 GatedUnit: y = x * sigmoid(g) ---------------------------------------------------------------


def _gated_forward(ctx, x, g):
    gate = torch.sigmoid(g)
    ctx.save_for_backward(x, gate)
    return x * gate


def _gated_unit(backward):
    return _function("GatedUnit", _gated_forward, backward)


def _gated_right(ctx, grad_y, compute_x_always=False, compute_g_always=False):
    x, gate = ctx.saved_tensors
    grad_x = grad_y * gate if compute_x_always or ctx.needs_input_grad[0] else None
    grad_g = grad_y * x * gate * (1 - gate) if compute_g_always or ctx.needs_input_grad[1] else None
    return grad_x, grad_g


def _gated_without_sigmoid_derivative(ctx, grad_y):
    x, gate = ctx.saved_tensors
    return grad_y * gate, grad_y * x


def _gated_through_autograd(ctx, grad_y):
    x, gate = ctx.saved_tensors
    with torch.enable_grad():
        x_, g_ = x.detach().requires_grad_(), torch.logit(gate).detach().requires_grad_()
        return torch.autograd.grad(x_ * torch.sigmoid(g_), (x_, g_), grad_y)


def _gated_in_place(ctx, grad_y):
    x, gate = ctx.saved_tensors
    grad_g = grad_y * x * gate * (1 - gate) if ctx.needs_input_grad[1] else None
    grad_x = grad_y.mul_(gate) if ctx.needs_input_grad[0] else None  # "saves" a temporary
    return grad_x, grad_g


def _gated_forward_saving_autograds_derivatives(ctx, x, g):  # autograd's derivatives, computed in forward
    with torch.enable_grad():
        x_, g_ = x.detach().requires_grad_(), g.detach().requires_grad_()
        d_x, d_g = torch.autograd.grad((x_ * torch.sigmoid(g_)).sum(), (x_, g_))
    ctx.save_for_backward(d_x, d_g)
    return x * torch.sigmoid(g)


def _gated_from_saved_derivatives(ctx, grad_y):
    d_x, d_g = ctx.saved_tensors
    return grad_y * d_x if ctx.needs_input_grad[0] else None, grad_y * d_g if ctx.needs_input_grad[1] else None


def _gated_forward_mode(ctx, grad_y):  # elementwise, so a jvp with tangent grad_y is the vjp
    x, gate = ctx.saved_tensors
    g = torch.logit(gate)
    grad_x = torch.func.jvp(lambda t: t * gate, (x,), (grad_y,))[1] if ctx.needs_input_grad[0] else None
    grad_g = torch.func.jvp(lambda t: x * torch.sigmoid(t), (g,), (grad_y,))[1] if ctx.needs_input_grad[1] else None
    return grad_x, grad_g


def _gated_in_float32(ctx, grad_y):
    x, gate = ctx.saved_tensors
    grad_y, x, gate = grad_y.float(), x.float(), gate.float()
    grad_x = grad_y * gate if ctx.needs_input_grad[0] else None
    grad_g = grad_y * x * gate * (1 - gate) if ctx.needs_input_grad[1] else None
    return grad_x, grad_g


class _GatedWithVjp(torch.autograd.Function):  # right: vjp is the documented other name of backward
    @staticmethod
    def forward(ctx, x, g):
        return _gated_forward(ctx, x, g)

    @staticmethod
    def vjp(ctx, grad_y):
        return _gated_right(ctx, grad_y)


class _GatedWithSetupContext(torch.autograd.Function):  # right: the setup_context style
    @staticmethod
    def forward(x, g):
        return x * torch.sigmoid(g)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, g = inputs
        ctx.save_for_backward(x, torch.sigmoid(g))

    @staticmethod
    def backward(ctx, grad_y):
        return _gated_right(ctx, grad_y)


@pytest.mark.parametrize("function", [_GatedWithVjp, _GatedWithSetupContext], ids=["vjp", "setup_context"])
def test_gated_unit_written_another_right_way_passes(function):
    assert ch01.check_gated_unit(function).status == PASSED


def test_gated_unit_that_uses_needs_input_grad_passes():
    assert ch01.check_gated_unit(_gated_unit(_gated_right)).status == PASSED


# ---- 1.2 LeakyReLUInplace ---------------------------------------------------------------------------


def _leaky(forward, backward):
    return _function("LeakyReLUInplace", forward, backward)


def _leaky_forward(ctx, x, slope):
    ctx.slope = slope
    x.copy_(torch.where(x > 0, x, x * slope))
    ctx.mark_dirty(x)
    ctx.save_for_backward(x)
    return x


def _leaky_forward_not_marked(ctx, x, slope):
    ctx.slope = slope
    x.copy_(torch.where(x > 0, x, x * slope))
    ctx.save_for_backward(x)
    return x


def _leaky_out_of_place(ctx, x, slope):
    ctx.slope = slope
    ctx.save_for_backward(x)
    return F.leaky_relu(x, slope)


def _leaky_backward(ctx, grad_y):
    (y,) = ctx.saved_tensors
    return torch.where(y > 0, grad_y, grad_y * ctx.slope), None


def _leaky_backward_slope_written_in(ctx, grad_y):
    (y,) = ctx.saved_tensors
    return torch.where(y > 0, grad_y, grad_y * 0.1), None  # the slope the notebook's first try used


def _leaky_backward_in_place(ctx, grad_y):
    (y,) = ctx.saved_tensors
    grad_y[y <= 0] *= ctx.slope
    return grad_y, None


def _leaky_forward_saving_autograds_derivative(ctx, x, slope):
    with torch.enable_grad():
        x_ = x.detach().clone().requires_grad_()
        (derivative,) = torch.autograd.grad(F.leaky_relu(x_, slope).sum(), x_)
    x.copy_(F.leaky_relu(x, slope))
    ctx.mark_dirty(x)
    ctx.save_for_backward(derivative)
    return x


def _leaky_backward_from_saved_derivative(ctx, grad_y):
    (derivative,) = ctx.saved_tensors
    return grad_y * derivative, None


def _leaky_backward_by_aten(ctx, grad_y):  # PyTorch's own backward of leaky_relu
    (y,) = ctx.saved_tensors
    return torch.ops.aten.leaky_relu_backward(grad_y, y, ctx.slope, True), None


# ---- 1.3 RowMax ---------------------------------------------------------------------------------------


def _row_max(forward, backward):
    return _function("RowMax", forward, backward)


def _max_forward(ctx, x, dim=-1):
    values, indices = x.max(dim=dim)
    ctx.mark_non_differentiable(indices)
    ctx.save_for_backward(x, indices)
    ctx.dim = dim
    return values, indices


def _max_backward(ctx, grad_values, grad_indices):
    x, indices = ctx.saved_tensors
    return torch.zeros_like(x).scatter_(ctx.dim, indices.unsqueeze(ctx.dim), grad_values.unsqueeze(ctx.dim))


def _max_float_indices(ctx, x):
    values, indices = x.max(dim=-1)
    ctx.save_for_backward(x, indices)
    ctx.dim = -1
    return values, indices.to(x.dtype)


def _max_over_dim_1(ctx, x):  # the last dimension of the 2-D inputs the notebook shows
    return _max_forward(ctx, x, dim=1)


def _max_last_on_ties(ctx, x):
    values, flipped = x.flip(-1).max(dim=-1)
    indices = x.shape[-1] - 1 - flipped
    ctx.mark_non_differentiable(indices)
    ctx.save_for_backward(x, indices)
    ctx.dim = -1
    return values, indices


def _max_backward_to_every_maximum(ctx, grad_values, grad_indices):
    x, indices = ctx.saved_tensors
    is_maximum = x == x.gather(-1, indices.unsqueeze(-1))
    return grad_values.unsqueeze(-1) * is_maximum


def _max_backward_two_dimensional(ctx, grad_values, grad_indices):
    x, indices = ctx.saved_tensors
    grad_x = torch.zeros_like(x)
    grad_x[torch.arange(x.shape[0]), indices] = grad_values
    return grad_x


def _max_backward_through_autograd(ctx, grad_values, grad_indices):
    x, _ = ctx.saved_tensors
    with torch.enable_grad():
        x_ = x.detach().requires_grad_()
        return torch.autograd.grad(x_.max(dim=-1).values, x_, grad_values)


def _max_forward_saving_autograds_gradient(ctx, x):
    with torch.enable_grad():
        x_ = x.detach().requires_grad_()
        values, indices = x_.max(dim=-1)
        (one_hot,) = torch.autograd.grad(values.sum(), x_)
    ctx.mark_non_differentiable(indices)
    ctx.save_for_backward(one_hot)
    return values.detach(), indices


def _max_backward_from_saved_gradient(ctx, grad_values, grad_indices):
    (one_hot,) = ctx.saved_tensors
    return one_hot * grad_values.unsqueeze(-1)


def _max_backward_default_dtype(ctx, grad_values, grad_indices):  # torch.zeros: float32, whatever x is
    x, indices = ctx.saved_tensors
    grad_x = torch.zeros(x.shape)
    return grad_x.scatter_(-1, indices.unsqueeze(-1), grad_values.unsqueeze(-1).to(grad_x.dtype))


# ---- 1.4 SoftplusFn -----------------------------------------------------------------------------------


def _softplus(forward, backward):
    return _function("SoftplusFn", forward, backward)


def _softplus_forward(ctx, x):
    ctx.save_for_backward(x)
    return F.softplus(x)


def _softplus_backward(ctx, grad_y):
    (x,) = ctx.saved_tensors
    return grad_y * torch.sigmoid(x)


def _softplus_saves_sigmoid(ctx, x):
    ctx.save_for_backward(torch.sigmoid(x))
    return F.softplus(x)


def _softplus_backward_from_saved_sigmoid(ctx, grad_y):
    (s,) = ctx.saved_tensors
    return grad_y * s


def _softplus_naive(ctx, x):
    ctx.save_for_backward(x)
    return torch.log1p(torch.exp(x))


def _softplus_positive_side_only(ctx, x):
    ctx.save_for_backward(x)
    return x + torch.log1p(torch.exp(-x))  # stable for large x, but exp(-x) overflows for very negative x


def _softplus_float64_threshold(ctx, x):
    ctx.save_for_backward(x)
    return torch.where(x > 700, x, torch.log1p(torch.exp(x)))  # exp overflows above 709 in float64 (not float32)


def _softplus_backward_overflows(ctx, grad_y):
    (x,) = ctx.saved_tensors
    return grad_y * torch.exp(x) / (1 + torch.exp(x))


@once_differentiable
def _softplus_backward_once(ctx, grad_y):
    (x,) = ctx.saved_tensors
    return grad_y * torch.sigmoid(x)


def _softplus_backward_through_autograd(ctx, grad_y):
    (x,) = ctx.saved_tensors
    with torch.enable_grad():
        x_ = x if x.requires_grad else x.detach().requires_grad_()
        (grad,) = torch.autograd.grad(F.softplus(x_), x_, grad_y, create_graph=torch.is_grad_enabled())
    return grad


def _softplus_backward_forward_mode(ctx, grad_y):  # elementwise: a jvp with tangent grad_y is the vjp
    (x,) = ctx.saved_tensors
    return torch.func.jvp(F.softplus, (x,), (grad_y,))[1]


def _softplus_backward_by_aten(ctx, grad_y):  # PyTorch's own backward of softplus
    (x,) = ctx.saved_tensors
    return torch.ops.aten.softplus_backward(grad_y, x, 1, 20)


WRONG_ANSWERS = [
    WrongAnswer(
        "1.1",
        "wrong math",
        "the gradient for g forgets sigmoid's derivative",
        lambda: ch01.check_gated_unit(_gated_unit(_gated_without_sigmoid_derivative)),
        ("the gradient for g", "is wrong at index"),
    ),
    WrongAnswer(
        "1.1",
        "wrong math",
        "needs_input_grad ignored for g",
        lambda: ch01.check_gated_unit(_gated_unit(lambda ctx, g: _gated_right(ctx, g, compute_g_always=True))),
        ("needs_input_grad[1]",),
    ),
    WrongAnswer(
        "1.1",
        "wrong math",
        "needs_input_grad ignored for x",
        lambda: ch01.check_gated_unit(_gated_unit(lambda ctx, g: _gated_right(ctx, g, compute_x_always=True))),
        ("needs_input_grad[0]",),
    ),
    WrongAnswer(
        "1.1",
        "concept skipped",
        "backward asks torch.autograd.grad for the gradient",
        lambda: ch01.check_gated_unit(_gated_unit(_gated_through_autograd)),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.1",
        "wrong math",
        "backward writes into the incoming gradient (grad_y.mul_)",
        lambda: ch01.check_gated_unit(_gated_unit(_gated_in_place)),
        ("incoming gradient in place",),
    ),
    WrongAnswer(
        "1.1",
        "concept skipped",
        "forward asks torch.autograd.grad for the derivatives and saves them",
        lambda: ch01.check_gated_unit(
            _function("GatedUnit", _gated_forward_saving_autograds_derivatives, _gated_from_saved_derivatives)
        ),
        ("calls autograd", "in forward or backward"),
    ),
    WrongAnswer(
        "1.1",
        "concept skipped",
        "backward made of forward-mode torch.func.jvp",
        lambda: ch01.check_gated_unit(_gated_unit(_gated_forward_mode)),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.1",
        "wrong math",
        "gradients computed in float32 for float64 inputs",
        lambda: ch01.check_gated_unit(_gated_unit(_gated_in_float32)),
        ("dtype torch.float32", "dtype torch.float64"),
    ),
    WrongAnswer(
        "1.2",
        "concept skipped",
        "out of place: F.leaky_relu returns a new tensor",
        lambda: ch01.check_leaky_relu_(_leaky(_leaky_out_of_place, _leaky_backward)),
        ("modify x in place",),
    ),
    WrongAnswer(
        "1.2",
        "wrong math",
        "mark_dirty missing",
        lambda: ch01.check_leaky_relu_(_leaky(_leaky_forward_not_marked, _leaky_backward)),
        ("ctx.mark_dirty(x)",),
    ),
    WrongAnswer(
        "1.2",
        "hard-coded",
        "the slope 0.1 written into backward",
        lambda: ch01.check_leaky_relu_(_leaky(_leaky_forward, _leaky_backward_slope_written_in)),
        ("the gradient for x", "slope"),
    ),
    WrongAnswer(
        "1.2",
        "wrong math",
        "backward scales the incoming gradient in place",
        lambda: ch01.check_leaky_relu_(_leaky(_leaky_forward, _leaky_backward_in_place)),
        ("incoming gradient in place",),
    ),
    WrongAnswer(
        "1.2",
        "concept skipped",
        "forward asks torch.autograd.grad for the derivative and saves it",
        lambda: ch01.check_leaky_relu_(
            _leaky(_leaky_forward_saving_autograds_derivative, _leaky_backward_from_saved_derivative)
        ),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.2",
        "concept skipped",
        "backward calls torch.ops.aten.leaky_relu_backward",
        lambda: ch01.check_leaky_relu_(_leaky(_leaky_forward, _leaky_backward_by_aten)),
        ("leaky_relu_backward", "PyTorch's own backward"),
    ),
    WrongAnswer(
        "1.3",
        "wrong math",
        "indices returned as floats",
        lambda: ch01.check_row_max(_row_max(_max_float_indices, _max_backward)),
        ("has dtype torch.float64, expected torch.int64",),
    ),
    WrongAnswer(
        "1.3",
        "shown sizes only",
        "maximum over dim=1, the last dimension of a 2-D input only",
        lambda: ch01.check_row_max(_row_max(_max_over_dim_1, _max_backward)),
        ("has shape",),
    ),
    WrongAnswer(
        "1.3",
        "shown sizes only",
        "backward indexes rows with arange, right for 2-D inputs only",
        lambda: ch01.check_row_max(_row_max(_max_forward, _max_backward_two_dimensional)),
        ("raised IndexError for x of shape",),
    ),
    WrongAnswer(
        "1.3",
        "wrong math",
        "on ties, the last position of the maximum",
        lambda: ch01.check_row_max(_row_max(_max_last_on_ties, _max_backward)),
        ("first position",),
    ),
    WrongAnswer(
        "1.3",
        "wrong math",
        "on ties, the gradient goes to every position holding the maximum",
        lambda: ch01.check_row_max(_row_max(_max_forward, _max_backward_to_every_maximum)),
        ("the one position its index names",),
    ),
    WrongAnswer(
        "1.3",
        "concept skipped",
        "backward asks torch.autograd.grad of x.max",
        lambda: ch01.check_row_max(_row_max(_max_forward, _max_backward_through_autograd)),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.3",
        "concept skipped",
        "forward asks torch.autograd.grad for the gradient of max and saves it",
        lambda: ch01.check_row_max(_row_max(_max_forward_saving_autograds_gradient, _max_backward_from_saved_gradient)),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.3",
        "wrong math",
        "the gradient made with torch.zeros(shape), float32 for float64 inputs",
        lambda: ch01.check_row_max(_row_max(_max_forward, _max_backward_default_dtype)),
        ("dtype torch.float32", "torch.zeros(..., dtype=x.dtype)"),
    ),
    WrongAnswer(
        "1.4",
        "wrong math",
        "saves sigmoid(x), a constant to the second derivative",
        lambda: ch01.check_softplus(_softplus(_softplus_saves_sigmoid, _softplus_backward_from_saved_sigmoid)),
        ("second derivative",),
    ),
    WrongAnswer(
        "1.4",
        "concept skipped",
        "@once_differentiable backward",
        lambda: ch01.check_softplus(_softplus(_softplus_forward, _softplus_backward_once)),
        ("second derivative",),
    ),
    WrongAnswer(
        "1.4",
        "shown sizes only",
        "log1p(exp(x)) overflows for large x",
        lambda: ch01.check_softplus(_softplus(_softplus_naive, _softplus_backward)),
        ("the output", "overflow"),
    ),
    WrongAnswer(
        "1.4",
        "shown sizes only",
        "x + log1p(exp(-x)): stable for large x only, overflows for very negative x",
        lambda: ch01.check_softplus(_softplus(_softplus_positive_side_only, _softplus_backward)),
        ("the output", "-1000"),
    ),
    WrongAnswer(
        "1.4",
        "shown sizes only",
        "a threshold of 700, where exp overflows in float64 but not in float32",
        lambda: ch01.check_softplus(_softplus(_softplus_float64_threshold, _softplus_backward)),
        ("torch.float32",),
    ),
    WrongAnswer(
        "1.4",
        "shown sizes only",
        "backward exp(x) / (1 + exp(x)): nan where exp overflows",
        lambda: ch01.check_softplus(_softplus(_softplus_forward, _softplus_backward_overflows)),
        ("the gradient", "overflow"),
    ),
    WrongAnswer(
        "1.4",
        "concept skipped",
        "backward asks torch.autograd.grad of F.softplus",
        lambda: ch01.check_softplus(_softplus(_softplus_forward, _softplus_backward_through_autograd)),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.4",
        "concept skipped",
        "backward made of forward-mode torch.func.jvp of F.softplus",
        lambda: ch01.check_softplus(_softplus(_softplus_forward, _softplus_backward_forward_mode)),
        ("calls autograd",),
    ),
    WrongAnswer(
        "1.4",
        "concept skipped",
        "backward calls torch.ops.aten.softplus_backward",
        lambda: ch01.check_softplus(_softplus(_softplus_forward, _softplus_backward_by_aten)),
        ("softplus_backward", "PyTorch's own backward"),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)


def test_checks_report_stubs_as_not_attempted():
    def stub(ctx, *args):
        raise NotImplementedError

    assert ch01.check_gated_unit(_gated_unit(stub)).status == "not attempted yet"
    assert ch01.check_leaky_relu_(_leaky(stub, stub)).status == "not attempted yet"
    assert ch01.check_row_max(_row_max(stub, stub)).status == "not attempted yet"
    assert ch01.check_softplus(_softplus(stub, stub)).status == "not attempted yet"


def test_checks_restore_autograd():
    import torch._functorch.predispatch as predispatch

    original, make_dual = torch.autograd._engine_run_backward, predispatch._make_dual
    ch01.check_gated_unit(_gated_unit(_gated_through_autograd))
    ch01.check_softplus(_softplus(_softplus_forward, _softplus_backward_forward_mode))
    assert torch.autograd._engine_run_backward is original
    assert predispatch._make_dual is make_dual
