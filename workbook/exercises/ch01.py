"""Checks for chapter 01, Python extensions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..checking import Mistake, exercise, expect_close


def _double_inputs(*shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, dtype=torch.float64, generator=generator, requires_grad=True) for shape in shapes]


def _gradients(function, inputs, grad_output):
    output = function(*inputs)
    return torch.autograd.grad(output, [t for t in inputs if t.requires_grad], grad_output, allow_unused=True)


def _expect_gradcheck(function, inputs, *, second_order=False):
    try:
        torch.autograd.gradcheck(function, inputs)
    except Exception as error:  # gradcheck raises GradcheckError (a RuntimeError) with the Jacobians
        first = str(error).strip().splitlines()[0]
        raise Mistake(f"gradcheck disagrees with finite differences: {first}") from None
    if second_order:
        try:
            torch.autograd.gradgradcheck(function, inputs)
        except Exception as error:
            first = str(error).strip().splitlines()[0]
            raise Mistake(
                "the second derivative is wrong or missing — save the inputs and compute backward from them "
                "with differentiable torch operations (tensors computed in forward carry no graph; no "
                f"@once_differentiable). gradgradcheck said: {first}"
            ) from None


def _returned_by_backward(Function, inputs, grad_output):
    """What Function's backward returns when called by autograd on `inputs`."""
    returned = []

    class Spy(Function):
        @staticmethod
        def backward(ctx, *grads):
            result = Function.backward(ctx, *grads)
            returned.append(result if isinstance(result, tuple) else (result,))
            return result

    output = Spy.apply(*inputs)
    wanted = [t for t in inputs if t.requires_grad]
    torch.autograd.grad(output, wanted, grad_output)
    return returned[0]


@exercise("1.1 GatedUnit backward")
def check_gated_unit(GatedUnit) -> None:
    """y = x * sigmoid(g); the learner writes backward and computes only what needs_input_grad asks for."""
    x, g = _double_inputs((4, 5), (4, 5))
    grad_y = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expect_close(GatedUnit.apply(x, g), x * torch.sigmoid(g), "the forward output")
    got_x, got_g = _gradients(GatedUnit.apply, (x, g), grad_y)
    want_x, want_g = _gradients(lambda a, b: a * torch.sigmoid(b), (x, g), grad_y)
    if got_x is None or got_g is None:
        raise Mistake("backward returned None for an input that requires grad; return one gradient per input")
    expect_close(got_x, want_x, "the gradient for x")
    expect_close(got_g, want_g, "the gradient for g")
    (got_x_alone,) = _gradients(GatedUnit.apply, (x, g.detach()), grad_y)
    expect_close(got_x_alone, want_x, "the gradient for x when g does not require grad")
    for inputs, unneeded in (((x, g.detach()), "g"), ((x.detach(), g), "x")):
        returned = _returned_by_backward(GatedUnit, inputs, grad_y)
        if len(returned) != 2:
            raise Mistake(
                f"backward returned {len(returned)} values; return one per input of forward: (grad_x, grad_g)"
            )
        position = "xg".index(unneeded)
        if returned[position] is not None:
            raise Mistake(
                f"when {unneeded} does not require grad, backward still computed its gradient: check "
                f"ctx.needs_input_grad[{position}] and return None for {unneeded} when it is False"
            )
    _expect_gradcheck(GatedUnit.apply, (x, g))


@exercise("1.2 in-place leaky ReLU")
def check_leaky_relu_(LeakyReLUInplace) -> None:
    """LeakyReLUInplace.apply(x, slope) overwrites x, marks it dirty and returns it."""
    (leaf,) = _double_inputs((3, 7))
    slope = 0.1
    x = leaf.clone()  # a non-leaf: in-place ops on a leaf that requires grad are not allowed
    version_before = x._version
    y = LeakyReLUInplace.apply(x, slope)
    if y.data_ptr() != x.data_ptr():
        raise Mistake("forward returned a new tensor; it must modify x in place and return x itself")
    if x._version == version_before:
        raise Mistake("x was not modified in place (its version counter did not change)")
    expect_close(y, F.leaky_relu(leaf, slope), "the output")
    grad_y = torch.randn(3, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (want,) = torch.autograd.grad(F.leaky_relu(leaf, slope), leaf, grad_y)
    (got,) = torch.autograd.grad(y, leaf, grad_y, retain_graph=True)
    expect_close(got, want, "the gradient for x")
    if y is not x or x.grad_fn is not y.grad_fn:
        raise Mistake(
            "x was overwritten, but autograd still sees x as it was before the call (x.grad_fn is "
            f"{type(x.grad_fn).__name__}): gradients taken through x would miss the leaky ReLU. "
            "Call ctx.mark_dirty(x) in forward and return x"
        )
    (through_x,) = torch.autograd.grad(x, leaf, grad_y)
    expect_close(through_x, want, "the gradient taken through x after the call")


@exercise("1.3 row max with its index")
def check_row_max(RowMax) -> None:
    """RowMax.apply(x) -> (values, indices) over the last dimension; indices are not differentiable."""
    (x,) = _double_inputs((5, 8))
    values, indices = RowMax.apply(x)
    want_values, want_indices = x.max(dim=-1)
    expect_close(indices, want_indices, "the indices")
    expect_close(values, want_values, "the values")
    if indices.requires_grad:
        raise Mistake("the indices require grad; mark them with ctx.mark_non_differentiable")
    grad_values = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    (got,) = torch.autograd.grad(values, x, grad_values)
    (want,) = torch.autograd.grad(x.max(dim=-1).values, x, grad_values)
    expect_close(got, want, "the gradient for x")


@exercise("1.4 twice-differentiable softplus")
def check_softplus(SoftplusFn) -> None:
    (x,) = _double_inputs((6,))
    expect_close(SoftplusFn.apply(x), F.softplus(x), "the forward output")
    large = torch.tensor([60.0, 800.0], dtype=torch.float64)
    expect_close(SoftplusFn.apply(large), F.softplus(large), "the output for large inputs (overflow?)")
    _expect_gradcheck(SoftplusFn.apply, (x,), second_order=True)
