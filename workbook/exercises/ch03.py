"""Checks for chapter 03 (autograd in C++).

* 3.1 ``check_scatter_mean_backward(scatter_mean)``: ``scatter_mean(src, index, dim, dim_size)``
  (index of src's shape) is the learner's op whose C++ ``torch::autograd::Function`` backward
  must give the gradient of the mean with respect to src.
* 3.2 ``check_scatter_max(scatter_max)``: ``scatter_max(src, index, dim_size)`` for 1-D float
  tensors must return ``(values, argindex)`` as torch_scatter does: the first position wins a tie,
  an empty group has value 0 and argindex ``src.size(0)``, and an index out of range raises a
  RuntimeError that names ``index``.
"""

from __future__ import annotations

from ..checking import Mistake, exercise, expect_close, raise_if_not_attempted


@exercise("3.1 scatter_mean's backward in C++")
def check_scatter_mean_backward(scatter_mean):
    import torch

    from .. import scatter as reference

    generator = torch.Generator().manual_seed(31)
    cases = [((6,), 0, 3, None), ((5, 4), 0, 3, 4), ((3, 7), 1, 4, 6), ((2, 5, 3), 1, 2, None)]
    for shape, dim, groups, dim_size in cases:
        src = torch.randn(shape, dtype=torch.float64, generator=generator)
        index = torch.randint(0, groups, shape, generator=generator)
        leaf = src.clone().requires_grad_()
        try:
            out = scatter_mean(leaf, index, dim, dim_size)
            weight = torch.randn(out.shape, dtype=torch.float64, generator=generator)
            (grad,) = torch.autograd.grad((out * weight).sum(), leaf, allow_unused=True)
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise
        where = f"for src of shape {shape}, dim={dim}, index values in [0, {groups})"
        if grad is None:
            raise Mistake(
                f"no gradient reached src {where}: backward's first returned tensor must be the "
                "gradient with respect to src (an undefined Tensor() there means 'no gradient')"
            )
        expected_leaf = src.clone().requires_grad_()
        (expected,) = torch.autograd.grad(
            (reference.reference_mean(expected_leaf, index, dim, dim_size=dim_size) * weight).sum(), expected_leaf
        )
        try:
            expect_close(grad, expected, f"the gradient with respect to src {where}")
        except Mistake as mistake:
            hint = (
                "Each src element contributed 1/count of its group's mean, so it receives its "
                "group's incoming gradient (gather it along dim with index) divided by its group's count"
            )
            raise Mistake(f"{mistake}. {hint}") from None


@exercise("3.2 scatter_max with its argindex")
def check_scatter_max(scatter_max):
    import torch

    from .. import scatter as reference

    def run(src, index, dim_size, case):
        try:
            result = scatter_max(src, index, dim_size)
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise Mistake(f"{case}: your function raised: {str(error).splitlines()[0]}") from None
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Mistake(
                f"{case}: scatter_max should return two tensors (values, argindex), got {type(result).__name__}"
            )
        values, argindex = result
        expected_values, expected_arg = reference.reference_max(src, index, 0, dim_size=dim_size)
        expect_close(values, expected_values, f"values ({case})")
        try:
            expect_close(argindex, expected_arg, f"argindex ({case})")
        except Mistake as mistake:
            raise Mistake(
                f"{mistake}. The argindex is the position along the dimension of the element that "
                f"won (the first one on a tie), and src.size(0) = {src.size(0)} for an empty group"
            ) from None

    run(torch.tensor([1.0, 5.0, 2.0, 7.0]), torch.tensor([0, 0, 1, 1]), 2, "two groups of two")
    run(
        torch.tensor([-3.0, -1.0, 2.0]),
        torch.tensor([0, 0, 1]),
        2,
        "a group whose values are all negative (its maximum is -1, not 0: start from nothing, not from 0)",
    )
    run(
        torch.tensor([4.0, 2.0, 4.0, 4.0]),
        torch.tensor([1, 1, 1, 1]),
        2,
        "a tie: 4 at positions 0, 2 and 3 (the first position wins) and an empty group 0",
    )
    run(
        torch.tensor([-2.0, float("-inf"), 1.0]),
        torch.tensor([2, 0, 2]),
        4,
        "a group holding only -inf, and empty groups 1 and 3 (value 0, argindex 3)",
    )
    generator = torch.Generator().manual_seed(32)
    for dtype in (torch.float32, torch.float64):
        src = torch.randint(-20, 20, (200,), generator=generator).to(dtype)  # many ties
        index = torch.randint(0, 30, (200,), generator=generator)
        run(src, index, 33, f"200 random {dtype} values in 33 groups")
    try:
        scatter_max(torch.ones(3), torch.tensor([0, 5, 1]), 2)
    except RuntimeError as error:
        raise_if_not_attempted(error)
        if "index" not in str(error):
            raise Mistake(
                f"an index value 5 with dim_size=2 raised, but the message does not name index: "
                f"{str(error).splitlines()[0]!r}"
            ) from None
        return
    raise Mistake(
        "an index value 5 with dim_size=2 was accepted: writing values[5] would corrupt memory; "
        'check each index value with TORCH_CHECK(0 <= k && k < dim_size, "index ...")'
    )


@exercise("3.3 scatter_max's gradient, Python style")
def check_scatter_max_function(ScatterMaxPy):
    import torch

    from .. import scatter

    generator = torch.Generator().manual_seed(33)
    cases = [((7,), 0, 3, 5), ((5, 4), 0, 3, 4), ((3, 7), 1, 4, None), ((2, 5, 3), 1, 2, 4)]
    for shape, dim, groups, dim_size in cases:
        src = torch.randn(shape, dtype=torch.float64, generator=generator)
        index = torch.randint(0, groups, shape, generator=generator)
        where = f"for src of shape {shape}, dim={dim}, index values in [0, {groups}), dim_size={dim_size}"
        leaf = src.clone().requires_grad_()
        result = ScatterMaxPy.apply(leaf, index, dim, dim_size)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Mistake(f"ScatterMaxPy.apply should return (values, argindex), got {type(result).__name__} {where}")
        values, argindex = result
        expected_values, expected_arg = scatter.scatter_max(src, index, dim, None, dim_size)
        expect_close(values, expected_values, f"values {where}")
        expect_close(argindex, expected_arg, f"argindex {where}")
        weight = torch.randn(values.shape, dtype=torch.float64, generator=generator)
        try:
            (grad,) = torch.autograd.grad((values * weight).sum(), leaf, allow_unused=True)
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise Mistake(
                f"your backward raised {where}: {str(error).splitlines()[0]}. An empty group's argindex "
                f"is src.size(dim) = {src.size(dim)}, one past the end: scatter into a tensor with one "
                "spare slot along dim, then narrow it away"
            ) from None
        if grad is None:
            raise Mistake(f"no gradient reached src {where}: backward's first result is the gradient for src")
        expected_leaf = src.clone().requires_grad_()
        (expected,) = torch.autograd.grad(
            (scatter.scatter_max(expected_leaf, index, dim, None, dim_size)[0] * weight).sum(), expected_leaf
        )
        try:
            expect_close(grad, expected, f"the gradient with respect to src {where}")
        except Mistake as mistake:
            raise Mistake(
                f"{mistake}. Each group's gradient belongs to its winner alone (the element at argindex "
                "along dim); every other element, and nothing for an empty group, gets 0"
            ) from None
