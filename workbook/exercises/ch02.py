"""Checks for chapter 02 (C++ extensions).

The exercises work on the *gated tanh* unit, y = tanh(a) * sigmoid(b), written in C++:

* 2.1 ``check_gated_tanh_backward(backward)``: ``backward(grad, a, b)`` must return
  ``[d_a, d_b]``, the gradients of sum(grad * y) with respect to a and b.
* 2.2 ``check_gated_inputs(validate)``: ``validate(a, b)`` must accept matching floating-point
  tensors and raise a RuntimeError naming the argument for anything else.
* 2.3 ``check_gated_function(GatedTanh, extension)``: ``GatedTanh`` is a ``torch.autograd.Function``
  whose forward and backward call the extension's ``gated_tanh_forward`` and ``gated_tanh_backward``.
"""

from __future__ import annotations

import re

from ..checking import Mistake, exercise, expect_close, raise_if_not_attempted


def gated_tanh(a, b):
    """The gated tanh unit in torch functions (the reference)."""
    import torch

    return torch.tanh(a) * torch.sigmoid(b)


@exercise("2.1 a backward in C++")
def check_gated_tanh_backward(backward):
    import torch

    generator = torch.Generator().manual_seed(21)
    for shape, dtype in [((5,), torch.float64), ((3, 4), torch.float64), ((2, 3, 4), torch.float32)]:
        a = torch.randn(shape, generator=generator, dtype=torch.float64).mul(2).to(dtype)
        b = torch.randn(shape, generator=generator, dtype=torch.float64).mul(2).to(dtype)
        grad = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
        leaf_a, leaf_b = a.clone().requires_grad_(), b.clone().requires_grad_()
        expected_a, expected_b = torch.autograd.grad(gated_tanh(leaf_a, leaf_b), (leaf_a, leaf_b), grad)

        result = backward(grad, a, b)
        if not isinstance(result, (list, tuple)) or len(result) != 2:
            got = f"a {type(result).__name__}" + (
                f" of length {len(result)}" if isinstance(result, (list, tuple)) else ""
            )
            raise Mistake(f"backward should return a list of two tensors [d_a, d_b], got {got}")
        d_a, d_b = result
        where = f"for a and b of shape {tuple(shape)} and dtype {dtype}"
        for name, value in (("d_a", d_a), ("d_b", d_b)):
            if not isinstance(value, torch.Tensor):
                raise Mistake(f"{name} should be a tensor, got {type(value).__name__} {where}")
        hint = {
            "d_a": "d/da tanh(a) = 1 - tanh(a)^2, times sigmoid(b) and grad",
            "d_b": "d/db sigmoid(b) = sigmoid(b) * (1 - sigmoid(b)), times tanh(a) and grad",
        }
        for name, value, expected in (("d_a", d_a, expected_a), ("d_b", d_b, expected_b)):
            try:
                expect_close(value, expected, f"{name} {where}")
            except Mistake as mistake:
                raise Mistake(f"{mistake}. Remember: {hint[name]}") from None
        if a.grad is not None or b.grad is not None or not torch.equal(a, leaf_a.detach()):
            raise Mistake("backward must not modify a or b")


_ARGUMENT_WORD = {"a": re.compile(r"\ba\b"), "b": re.compile(r"\bb\b")}


def _expect_rejected(validate, a, b, culprits: tuple, topic: str, keywords, case: str) -> None:
    named = " or ".join(culprits)
    try:
        validate(a, b)
    except NotImplementedError:
        raise
    except RuntimeError as error:
        raise_if_not_attempted(error)
        message = str(error).splitlines()[0] if str(error) else ""
        if not any(_ARGUMENT_WORD[culprit].search(message) for culprit in culprits):
            raise Mistake(
                f"{case}: you raised, but the message does not name the argument {named} "
                f"(as a word of its own); your message: {message!r}"
            ) from None
        if not any(word in message.lower() for word in keywords):
            raise Mistake(
                f"{case}: you raised, but the message does not say it is about the {topic} "
                f"(expected one of the words {', '.join(keywords)}); your message: {message!r}"
            ) from None
        return
    raise Mistake(
        f"{case}: validate(a, b) accepted it; it should raise a RuntimeError (TORCH_CHECK) "
        f"naming {named} and its {topic}"
    )


@exercise("2.2 input validation in C++")
def check_gated_inputs(validate):
    import torch

    for a, b, case in [
        (torch.zeros(3, 4), torch.zeros(3, 4), "a and b both float32 of shape (3, 4)"),
        (
            torch.zeros(2, dtype=torch.float64),
            torch.zeros(2, dtype=torch.float64),
            "a and b both float64 of shape (2,)",
        ),
        (torch.zeros(4, 3).t(), torch.zeros(3, 4), "a non-contiguous, b contiguous, both (3, 4)"),
    ]:
        try:
            validate(a, b)
        except NotImplementedError:
            raise
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise Mistake(f"validate rejected valid inputs ({case}): {str(error).splitlines()[0]}") from None

    _expect_rejected(
        validate,
        torch.zeros(3, 4),
        torch.zeros(4, 3),
        ("a", "b"),
        "shape",
        ("shape", "size"),
        "a of shape (3, 4) with b of shape (4, 3)",
    )
    _expect_rejected(
        validate,
        torch.zeros(3, 4),
        torch.zeros(3, 4, dtype=torch.float64),
        ("a", "b"),
        "dtype",
        ("dtype", "type", "double", "float"),
        "a float32 with b float64",
    )
    _expect_rejected(
        validate,
        torch.zeros(3, 4, dtype=torch.int64),
        torch.zeros(3, 4, dtype=torch.int64),
        ("a", "b"),
        "dtype (it must be floating point)",
        ("float", "dtype", "type"),
        "a and b both int64",
    )
    _expect_rejected(
        validate,
        torch.zeros(3, 4),
        torch.zeros(3, 4, device="meta"),
        ("a", "b"),
        "device",
        ("device", "meta", "cpu"),
        "a on the CPU with b on the meta device",
    )


class _Spy:
    """Counts the calls of one function of an extension module while the check runs."""

    def __init__(self, extension, name):
        self.extension, self.name, self.calls = extension, name, 0
        self.original = getattr(extension, name)

    def __enter__(self):
        def counted(*args):
            self.calls += 1
            return self.original(*args)

        setattr(self.extension, self.name, counted)
        return self

    def __exit__(self, *exc):
        setattr(self.extension, self.name, self.original)


@exercise("2.3 the C++ functions behind autograd")
def check_gated_function(GatedTanh, extension):
    import torch

    generator = torch.Generator().manual_seed(23)
    for shape, dtype in [((6,), torch.float64), ((3, 4), torch.float32)]:
        a = torch.randn(shape, generator=generator, dtype=torch.float64).mul(2).to(dtype)
        b = torch.randn(shape, generator=generator, dtype=torch.float64).mul(2).to(dtype)
        grad = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
        where = f"for a and b of shape {tuple(shape)} and dtype {dtype}"
        leaf_a, leaf_b = a.clone().requires_grad_(), b.clone().requires_grad_()
        with _Spy(extension, "gated_tanh_forward") as forward, _Spy(extension, "gated_tanh_backward") as backward:
            y = GatedTanh.apply(leaf_a, leaf_b)
            expect_close(y, gated_tanh(a, b), f"the output {where}")
            if forward.calls != 1:
                raise Mistake(
                    f"forward should call the C++ gated_tanh_forward once; it called it {forward.calls} times"
                )
            got = torch.autograd.grad(y, (leaf_a, leaf_b), grad, allow_unused=True)
            if backward.calls != 1:
                raise Mistake(
                    "backward should call the C++ gated_tanh_backward (once) and return what it computes; "
                    f"it called it {backward.calls} times"
                )
        expected_a, expected_b = torch.autograd.grad(gated_tanh(leaf_a, leaf_b), (leaf_a, leaf_b), grad)
        for name, value, expected in (("a", got[0], expected_a), ("b", got[1], expected_b)):
            if value is None:
                raise Mistake(
                    f"no gradient reached {name}: backward returns one gradient per input of forward, "
                    "in order (d_a, d_b)"
                )
            expect_close(value, expected, f"the gradient for {name} {where}")
    a64 = torch.randn(5, generator=generator, dtype=torch.float64, requires_grad=True)
    b64 = torch.randn(5, generator=generator, dtype=torch.float64)
    (only_a,) = torch.autograd.grad(GatedTanh.apply(a64, b64).sum(), a64)
    (want,) = torch.autograd.grad(gated_tanh(a64, b64).sum(), a64)
    expect_close(only_a, want, "the gradient for a when b does not require grad")
