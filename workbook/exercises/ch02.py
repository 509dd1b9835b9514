"""Checks for chapter 02 (C++ extensions).

The exercises work on the *gated tanh* unit, y = tanh(a) * sigmoid(b), written in C++:

* 2.1 ``check_gated_tanh_backward(backward)``: ``backward(grad, a, b)`` must return
  ``[d_a, d_b]``, the gradients of sum(grad * y) with respect to a and b.
* 2.2 ``check_gated_inputs(validate)``: ``validate(a, b)`` must accept matching floating-point
  tensors and raise a RuntimeError naming the argument for anything else.
* 2.3 ``check_gated_function(GatedTanh, extension)``: ``GatedTanh`` is a ``torch.autograd.Function``
  whose forward and backward call the extension's ``gated_tanh_forward`` and ``gated_tanh_backward``.

The checks draw their inputs when they run, from seeded generators: several shapes (sizes drawn too), float32
and float64, values beyond the range of exp, and inputs and incoming gradients that are not contiguous
(transposed, strided, and the stride-0 gradient `.sum()` passes back), each a view of memory that holds all
of its elements, so that a C++ answer that ignores strides reads wrong values, never outside the buffer.
"""

from __future__ import annotations

import inspect
import re

from workbook.course.checking import Mistake, exercise, expect_close, inplace_change_is_caught, raise_if_not_attempted


def gated_tanh(a, b):
    """The gated tanh unit in torch functions (the reference)."""
    import torch

    return torch.tanh(a) * torch.sigmoid(b)


def _draw(shape, generator, dtype, *, extremes=()):
    """Random values of `shape` (about -4 to 4), with the values in `extremes` written over its first elements."""
    import torch

    values = torch.randn(shape, generator=generator, dtype=torch.float64).mul(2)
    flat = values.view(-1)
    count = min(len(extremes), flat.numel())
    flat[:count] = torch.tensor(extremes[:count], dtype=torch.float64)
    return values.to(dtype)


def _strided(tensor):
    """The same values, not contiguous: every other element of a buffer twice as wide."""
    buffer = tensor.new_zeros(*tensor.shape[:-1], 2 * tensor.shape[-1])
    buffer[..., ::2] = tensor
    return buffer[..., ::2]


def _transposed(tensor):
    """The same values, not contiguous: stored column by column (the last two dimensions swapped in memory)."""
    return tensor.mT.contiguous().mT


def _expanded(tensor):
    """A stride-0 tensor of tensor's shape (one row repeated), as `.sum()` and `.expand` pass on."""
    row = tensor[(0,) * (tensor.dim() - 1)] if tensor.dim() > 1 else tensor
    return row.expand(tensor.shape)


# Beyond exp's range in each dtype: exp(-x) overflows to inf there, and inf / inf is NaN.
_EXTREMES = {"float32": (-100.0, 100.0, -95.0, 95.0), "float64": (-1000.0, 1000.0, -750.0, 750.0)}


def _backward_cases(generator):
    """(shape, dtype, extremes?, layout of grad, layout of a and b): several sizes, dtypes, value ranges, layouts."""
    import torch

    rows, columns, depth = torch.randint(6, 40, (3,), generator=generator).tolist()
    same = ("contiguous", lambda t: t)
    return [
        ((5,), torch.float64, False, same, same),
        ((3, 4), torch.float64, False, same, same),
        ((2, 3, 4), torch.float32, False, same, same),
        ((rows, columns), torch.float32, True, same, same),
        ((depth, 3, columns), torch.float64, True, same, same),
        ((rows, columns), torch.float32, False, ("transposed", _transposed), same),
        ((depth, 3, columns), torch.float64, False, ("strided", _strided), ("transposed", _transposed)),
        ((rows, columns), torch.float64, False, ("expanded (stride 0)", _expanded), ("strided", _strided)),
    ]


@exercise("2.1 a backward in C++")
def check_gated_tanh_backward(backward):
    import torch

    generator = torch.Generator().manual_seed(21)
    for shape, dtype, extremes, (grad_layout, in_grad_layout), (input_layout, in_input_layout) in _backward_cases(
        generator
    ):
        wide = _EXTREMES[str(dtype).removeprefix("torch.")] if extremes else ()
        a = in_input_layout(_draw(shape, generator, dtype, extremes=wide))
        b = in_input_layout(_draw(shape, generator, dtype, extremes=wide[::-1]))
        grad = in_grad_layout(_draw(shape, generator, dtype))
        leaf_a, leaf_b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        expected_a, expected_b = torch.autograd.grad(gated_tanh(leaf_a, leaf_b), (leaf_a, leaf_b), grad)
        originals = {"grad": grad.clone(), "a": a.clone(), "b": b.clone()}

        saved = []  # tensors an autograd graph saves: an answer that lets autograd differentiate builds one
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(1) or t, lambda t: t):
            result = backward(grad, a, b)
        if saved:
            raise Mistake(
                "backward builds an autograd graph (it makes a or b require grad and lets autograd differentiate "
                "it: backward() or torch::autograd::grad), so autograd does the work the exercise asks you to "
                "write: compute d_a and d_b from grad, a and b with ATen calls"
            )
        if not isinstance(result, (list, tuple)) or len(result) != 2:
            got = f"a {type(result).__name__}" + (
                f" of length {len(result)}" if isinstance(result, (list, tuple)) else ""
            )
            raise Mistake(f"backward should return a list of two tensors [d_a, d_b], got {got}")
        d_a, d_b = result
        where = f"for a and b of shape {tuple(shape)} and dtype {dtype}"
        if extremes:
            where += f" with values as large as {max(wide):g} in size"
        if input_layout != "contiguous":
            where += f", a and b {input_layout} (not contiguous)"
        if grad_layout != "contiguous":
            where += f", grad {grad_layout} (not contiguous)"
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
                if grad_layout != "contiguous" or input_layout != "contiguous":
                    hint[name] += (
                        "; and a tensor that is not contiguous is not laid out row by row in memory: use ATen "
                        "calls, or call .contiguous() before reading data_ptr()"
                    )
                if extremes:
                    hint[name] += "; and exp of a large number overflows to inf (inf / inf is nan): use at::sigmoid"
                raise Mistake(f"{mistake}. Remember: {hint[name]}") from None
        for name, before in originals.items():
            now = {"grad": grad, "a": a, "b": b}[name]
            if not torch.equal(now, before):
                raise Mistake(
                    f"backward changed {name} in place {where}: the caller still needs it (autograd may pass the "
                    "same gradient to other nodes); compute new tensors (grad * s, not grad.mul_(s))"
                )


# The argument a as a word of its own, not the article of "a floating-point tensor": followed by no word,
# or by one an article cannot be followed by.
_ARGUMENT_WORD = {
    "a": re.compile(
        r"\ba\b(?!\s+[A-Za-z])|\ba\s+(and|or|must|is|has|have|was|should|needs|does|to|of|with|on|in|are|be|can)\b"
    ),
    "b": re.compile(r"\bb\b"),
}


def _expect_rejected(validate, a, b, culprits: tuple, topic: str, keywords, case: str, others=()) -> None:
    """Calls validate(a, b), which must raise a RuntimeError naming a culprit and the topic, and none of the
    `others` (the words of the properties that are right)."""
    named = " or ".join(culprits)
    message = _validation_error(validate, a, b)
    if message is None:
        raise Mistake(
            f"{case}: validate(a, b) accepted it; it should raise a RuntimeError (TORCH_CHECK) "
            f"naming {named} and its {topic}"
        )
    if not any(_ARGUMENT_WORD[culprit].search(message) for culprit in culprits):
        raise Mistake(
            f"{case}: you raised, but the message does not name the argument {named} "
            f"(as a word of its own: the 'a' of 'a floating-point tensor' does not count); your message: {message!r}"
        )
    if not any(word in message.lower() for word in keywords):
        raise Mistake(
            f"{case}: you raised, but the message does not say it is about the {topic} "
            f"(expected one of the words {', '.join(keywords)}); your message: {message!r}"
        )
    mixed = [word for word in others if word in message.lower()]
    if mixed:
        raise Mistake(
            f"{case}: only the {topic} is wrong, but the message also speaks of the {mixed[0]} "
            f"({message!r}): check each property with a TORCH_CHECK of its own, whose message names that one"
        )


def _validation_error(validate, a, b) -> str | None:
    """The first line of the RuntimeError validate(a, b) raised, or None when it accepted a and b."""
    try:
        validate(a, b)
    except NotImplementedError:
        raise
    except RuntimeError as error:
        raise_if_not_attempted(error)
        return str(error).splitlines()[0] if str(error) else ""
    return None


_SHAPE, _DTYPE, _DEVICE = (
    ("shape", ("shape", "size")),
    ("dtype", ("dtype", "type", "double", "float")),
    ("device", ("device", "meta", "cpu", "cuda")),
)
# Words a message about one property has no reason to use, by property.
_TOPIC_WORDS = {"shape": ("shape", "size"), "dtype": ("dtype",), "device": ("device",)}
_FLOATING = ("dtype (it must be floating point)", ("float", "dtype", "type"))


def _validation_cases():
    """(a, b, case) pairs that validate must accept, and (a, b, topic, case) that it must reject."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # tensors on two GPUs, real or not: a shape, a dtype and a device, no data
        on_gpu_0, on_gpu_1 = torch.zeros(3, 4, device="cuda:0"), torch.zeros(3, 4, device="cuda:1")
    accepted = [
        (torch.zeros(3, 4), torch.zeros(3, 4), "a and b both float32 of shape (3, 4)"),
        (
            torch.zeros(2, dtype=torch.float64),
            torch.zeros(2, dtype=torch.float64),
            "a and b both float64 of shape (2,)",
        ),
        (torch.zeros(4, 3).t(), torch.zeros(3, 4), "a non-contiguous, b contiguous, both (3, 4)"),
        (torch.zeros(2, 5, dtype=torch.float16), torch.zeros(2, 5, dtype=torch.float16), "a and b both float16"),
        (
            torch.zeros(2, 3, 4, dtype=torch.bfloat16),
            torch.zeros(2, 3, 4, dtype=torch.bfloat16),
            "a and b both bfloat16",
        ),
        (torch.zeros(3, 4, device="meta"), torch.zeros(3, 4, device="meta"), "a and b both on the meta device"),
        (torch.zeros(0, 3), torch.zeros(0, 3), "a and b both empty, of shape (0, 3)"),
    ]
    rejected = [
        (torch.zeros(3, 4), torch.zeros(4, 3), _SHAPE, "a of shape (3, 4) with b of shape (4, 3)"),
        (torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.float64), _DTYPE, "a float32 with b float64"),
        (torch.zeros(3, 4, dtype=torch.int64), torch.zeros(3, 4, dtype=torch.int64), _FLOATING, "a and b both int64"),
        (torch.zeros(3, 4), torch.zeros(3, 4, device="meta"), _DEVICE, "a on the CPU with b on the meta device"),
        (torch.zeros(2, 3, 4), torch.zeros(2, 3, 5), _SHAPE, "a of shape (2, 3, 4) with b of shape (2, 3, 5)"),
        (torch.zeros(12), torch.zeros(3, 4), _SHAPE, "a of shape (12,) with b of shape (3, 4), as many elements"),
        (torch.zeros(3, 4), torch.zeros(1, 3, 4), _SHAPE, "a of shape (3, 4) with b of shape (1, 3, 4)"),
        (
            torch.zeros(5, dtype=torch.float16),
            torch.zeros(5, dtype=torch.bfloat16),
            _DTYPE,
            "a float16 with b bfloat16",
        ),
        (torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32), _FLOATING, "a and b both int32"),
        (torch.zeros(3, device="meta"), torch.zeros(3), _DEVICE, "a on the meta device with b on the CPU"),
        (on_gpu_0, on_gpu_1, _DEVICE, "a on cuda:0 with b on cuda:1 (two GPUs)"),
        (torch.zeros(2, 3, 4), torch.zeros(3, 2, 4), _SHAPE, "a of shape (2, 3, 4) with b of shape (3, 2, 4)"),
    ]
    return accepted, rejected


@exercise("2.2 input validation in C++")
def check_gated_inputs(validate):
    accepted, rejected = _validation_cases()
    for a, b, case in accepted:
        message = _validation_error(validate, a, b)
        if message is not None:
            raise Mistake(f"validate rejected valid inputs ({case}): {message}")

    for a, b, (topic, keywords), case in rejected:
        others = [word for other, words in _TOPIC_WORDS.items() if other not in topic for word in words]
        _expect_rejected(validate, a, b, ("a", "b"), topic, keywords, case, others)


class _Spy:
    """Counts the calls of one function of an extension module while the check runs: reached through the
    module, or through a name the learner's Function sees it under (a global or closure variable of its
    forward or backward, `forward_kernel = gated.gated_tanh_forward`)."""

    def __init__(self, extension, name, Function):
        self.calls = 0
        self.original = getattr(extension, name)
        self.namespaces = [vars(extension) if hasattr(extension, "__dict__") else {}]
        self.cells = []
        for method in (Function.forward, Function.backward):
            function = inspect.unwrap(method)  # under @once_differentiable
            self.namespaces.append(getattr(function, "__globals__", {}))
            self.cells += [cell for cell in function.__closure__ or () if _holds(cell, self.original)]
        self.extension, self.name = extension, name
        self.replaced = []

    def __enter__(self):
        def counted(*args):
            self.calls += 1
            return self.original(*args)

        setattr(self.extension, self.name, counted)
        for namespace in self.namespaces:
            for key in [key for key, value in namespace.items() if value is self.original]:
                namespace[key] = counted
                self.replaced.append((namespace, key))
        for cell in self.cells:
            cell.cell_contents = counted
        return self

    def __exit__(self, *exc):
        setattr(self.extension, self.name, self.original)
        for namespace, key in self.replaced:
            namespace[key] = self.original
        for cell in self.cells:
            cell.cell_contents = self.original


def _holds(cell, value) -> bool:
    try:
        return cell.cell_contents is value
    except ValueError:  # an empty cell
        return False


@exercise("2.3 the C++ functions behind autograd")
def check_gated_function(GatedTanh, extension):
    import torch

    generator = torch.Generator().manual_seed(23)
    rows, columns = torch.randint(6, 40, (2,), generator=generator).tolist()
    same = ("", lambda t: t)
    for shape, dtype, (input_layout, in_input_layout), (grad_layout, in_grad_layout) in [
        ((6,), torch.float64, same, same),
        ((3, 4), torch.float32, same, same),
        ((rows, columns), torch.float64, (", a and b transposed", _transposed), (", grad strided", _strided)),
        ((2, rows, columns), torch.float32, (", a and b strided", _strided), (", grad expanded", _expanded)),
    ]:
        a = in_input_layout(_draw(shape, generator, dtype))
        b = in_input_layout(_draw(shape, generator, dtype))
        grad = in_grad_layout(_draw(shape, generator, dtype))
        where = f"for a and b of shape {tuple(shape)} and dtype {dtype}{input_layout}{grad_layout}"
        leaf_a, leaf_b = a.detach().requires_grad_(), b.detach().requires_grad_()
        with (
            _Spy(extension, "gated_tanh_forward", GatedTanh) as forward,
            _Spy(extension, "gated_tanh_backward", GatedTanh) as backward,
        ):
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
    a64 = torch.randn(rows, generator=generator, dtype=torch.float64, requires_grad=True)
    b64 = torch.randn(rows, generator=generator, dtype=torch.float64)
    (only_a,) = torch.autograd.grad(GatedTanh.apply(a64, b64).sum(), a64)
    (want,) = torch.autograd.grad(gated_tanh(a64, b64).sum(), a64)
    expect_close(only_a, want, "the gradient for a when b does not require grad")
    _expect_saved_for_backward(GatedTanh, generator)


def _expect_saved_for_backward(GatedTanh, generator):
    """a or b changed in place between forward and backward: autograd must refuse, or the gradient stay right."""
    import torch

    leaves = tuple(torch.randn(7, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(2))
    for changed, name in enumerate("ab"):
        if not inplace_change_is_caught(GatedTanh.apply, gated_tanh, leaves, changed=changed):
            raise Mistake(
                f"after {name} was changed in place between forward and backward, backward silently used its new "
                "values and returned a wrong gradient: save a and b with ctx.save_for_backward(a, b), which notices "
                "such changes (tensors kept as ctx attributes are not checked)"
            )
