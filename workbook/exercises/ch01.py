"""Checks for chapter 01, Python extensions.

Each check draws its inputs when it runs, from seeded generators (the same inputs on every run), at several
sizes other than the notebook's, with non-contiguous inputs and incoming gradients (a strided view, and the
stride-0 gradient that `.sum()` sends back). The learner's Function runs under watch: the exercises ask for
a gradient written by hand, so a forward or backward that calls autograd (`torch.autograd.grad`, `.backward()`,
`torch.func`'s transforms, forward mode included) or PyTorch's own backward of the function to compute it
fails, and so does one that writes into the incoming gradient or returns a gradient of another dtype.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from workbook.course.checking import Mistake, exercise, expect_close


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sizes(generator, count: int, low: int, high: int) -> list[int]:
    return torch.randint(low, high, (count,), generator=generator).tolist()


def _strided(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of `tensor` that is not contiguous: every other element of a buffer twice as wide."""
    if tensor.dim() == 0:
        return tensor.clone()
    buffer = tensor.new_zeros(*tensor.shape[:-1], 2 * tensor.shape[-1])
    view = buffer[..., ::2]
    view.copy_(tensor)
    return view


def _incoming_gradients(shape, generator, dtype=torch.float64):
    """(label, gradient) pairs: contiguous, strided, and expanded with stride 0 (what `.sum()` passes back)."""
    values = torch.randn(shape, generator=generator, dtype=dtype)
    expanded = torch.randn((), generator=generator, dtype=dtype).expand(shape)
    return [
        ("a contiguous incoming gradient", values),
        ("a non-contiguous incoming gradient", _strided(values)),
        ("an expanded incoming gradient (stride 0, as from .sum())", expanded),
    ]


def _describe(tensor: torch.Tensor, name: str) -> str:
    layout = "" if tensor.is_contiguous() else " (non-contiguous)"
    return f"{name} of shape {tuple(tensor.shape)}{layout}"


class _Watch:
    """What the learner's Function did while a check ran: calls of autograd (reverse mode: what
    torch.autograd.grad, .backward() and torch.func.grad/vjp run; forward mode: what torch.func.jvp and
    torch.autograd.forward_ad run) made from inside its forward, setup_context or backward, and calls of
    PyTorch's own backward for the exercise's function."""

    depth = 0
    calls = 0
    forbidden: set = set()  # e.g. {"aten::softplus_backward"} while check_softplus runs
    used: list = []


class _OpSpy(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.name() in _Watch.forbidden:
            _Watch.used.append(func.name())
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _watching_autograd(forbidden=()):
    import torch._functorch.predispatch as predispatch

    engine = torch.autograd._engine_run_backward  # what torch.autograd.grad and .backward() both call
    make_dual = predispatch._make_dual  # what every forward-mode entry point calls (fwAD.make_dual, jvp)

    def watched_engine(*args, **kwargs):
        if _Watch.depth:
            _Watch.calls += 1
        return engine(*args, **kwargs)

    def watched_make_dual(*args, **kwargs):
        if _Watch.depth:
            _Watch.calls += 1
        return make_dual(*args, **kwargs)

    _Watch.calls, _Watch.forbidden, _Watch.used = 0, set(forbidden), []
    torch.autograd._engine_run_backward = watched_engine
    predispatch._make_dual = watched_make_dual
    try:
        yield
    finally:
        torch.autograd._engine_run_backward = engine
        predispatch._make_dual = make_dual
        _Watch.forbidden = set()


def _expect_no_autograd_in_backward() -> None:
    if _Watch.calls:
        raise Mistake(
            "your Function calls autograd (torch.autograd.grad, .backward(), torch.func) in forward or backward "
            "to get the derivative, so autograd does the work the exercise asks you to write: compute the "
            "gradient yourself from grad and the saved tensors, with tensor operations"
        )
    if _Watch.used:
        raise Mistake(
            f"backward calls {_Watch.used[0].removeprefix('aten::')}, PyTorch's own backward of this function, "
            "which does the whole job: compute the gradient yourself from grad and the saved tensors"
        )


@contextlib.contextmanager
def _under_watch():
    _Watch.depth += 1
    try:
        with _OpSpy() if _Watch.forbidden else contextlib.nullcontext():
            yield
    finally:
        _Watch.depth -= 1


def _dtypes(values) -> tuple:
    return tuple(v.dtype if isinstance(v, torch.Tensor) else None for v in values)


def _watched(Function):
    """A subclass of the learner's Function that runs its forward, setup_context and backward under watch,
    records what backward returns, and refuses a gradient of another dtype than its input (autograd would
    cast it back silently, keeping the lost precision)."""
    base = torch.autograd.Function
    uses_vjp = Function.vjp is not base.vjp  # vjp is the documented other name of backward
    user_backward = Function.vjp if uses_vjp else Function.backward
    user_setup_context = Function.setup_context
    ctx_style = user_setup_context is base.setup_context  # forward(ctx, *inputs), not setup_context

    class Watched(Function):
        returned: list = []

        @staticmethod
        def forward(*args, **kwargs):
            with _under_watch():
                result = Function.forward(*args, **kwargs)
            if ctx_style:
                args[0]._watched_dtypes = _dtypes(args[1:])
            return result

    def setup_context(ctx, inputs, output):
        with _under_watch():
            user_setup_context(ctx, inputs, output)
        ctx._watched_dtypes = _dtypes(inputs)

    def backward(ctx, *grads):
        with _under_watch():
            result = user_backward(ctx, *grads)
        returned = result if isinstance(result, tuple) else (result,)
        Watched.returned.append(returned)
        for position, (got, wanted) in enumerate(zip(_dtypes(returned), getattr(ctx, "_watched_dtypes", ()))):
            if got is not None and wanted is not None and got != wanted:
                raise Mistake(
                    f"backward returned a gradient of dtype {got} for input {position} of dtype {wanted}; autograd "
                    "casts it back, but the rounding stays: make it in the input's dtype (grad.new_zeros(...), "
                    "torch.zeros(..., dtype=x.dtype)), not torch.zeros(shape)"
                )
        return result

    if not ctx_style:
        Watched.setup_context = staticmethod(setup_context)
    setattr(Watched, "vjp" if uses_vjp else "backward", staticmethod(backward))
    Watched.__name__ = Function.__name__
    return Watched


def _call(function, args, where: str):
    """function(*args); an error it raises is explained with the inputs it was raised for."""
    try:
        return function(*args)
    except (Mistake, NotImplementedError):
        raise
    except Exception as error:
        if "not attempted yet" in str(error):
            raise
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise Mistake(f"your code raised {type(error).__name__} {where}: {first_line}") from None


def _gradients(function, inputs, grad_output, where: str):
    """The gradients for `inputs` that require grad; explains a backward that writes into grad_output."""
    wanted = [t for t in inputs if t.requires_grad]
    before = grad_output.clone()
    try:
        output = function(*inputs)
        got = torch.autograd.grad(output, wanted, grad_output, allow_unused=True)
    except (Mistake, NotImplementedError):
        raise
    except Exception as error:  # the learner's code raised: say for which inputs
        if "written-to tensor refers to a single memory location" in str(error):
            raise Mistake(
                f"backward writes into its incoming gradient in place, which fails {where}: compute new "
                "tensors (grad * s, not grad.mul_(s)); autograd may hand the same gradient to other nodes"
            ) from None
        if "not attempted yet" in str(error):
            raise
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise Mistake(f"your code raised {type(error).__name__} {where}: {first_line}") from None
    _expect_no_autograd_in_backward()
    if not torch.equal(grad_output, before):
        raise Mistake(
            f"backward changed its incoming gradient in place ({where}); autograd may hand the same gradient "
            "to other nodes: compute new tensors (grad * s, not grad.mul_(s))"
        )
    return got


def _expect_gradcheck(function, inputs, *, second_order=False):
    try:
        torch.autograd.gradcheck(function, inputs)
    except Mistake:
        raise
    except Exception as error:  # gradcheck raises GradcheckError (a RuntimeError) with the Jacobians
        first = str(error).strip().splitlines()[0]
        raise Mistake(f"gradcheck disagrees with finite differences: {first}") from None
    if second_order:
        try:
            torch.autograd.gradgradcheck(function, inputs)
        except Mistake:
            raise
        except Exception as error:
            first = str(error).strip().splitlines()[0]
            raise Mistake(
                "the second derivative is wrong or missing — save the inputs and compute backward from them "
                "with differentiable torch operations (tensors computed in forward carry no graph; no "
                f"@once_differentiable). gradgradcheck said: {first}"
            ) from None


def _gated(x, g):
    return x * torch.sigmoid(g)


@exercise("1.1 GatedUnit backward")
def check_gated_unit(GatedUnit) -> None:
    """y = x * sigmoid(g); the learner writes backward and computes only what needs_input_grad asks for."""
    Watched = _watched(GatedUnit)
    generator = _generator(11)
    rows, columns, depth = _sizes(generator, 3, 6, 40)
    with _watching_autograd():
        for shape, layout, dtype in [
            ((rows, columns), torch.Tensor.clone, torch.float64),
            ((depth, 3, columns), _strided, torch.float64),
            ((rows * columns,), _strided, torch.float32),
        ]:
            x, g = (
                layout(torch.randn(shape, generator=generator, dtype=torch.float64).mul(3).to(dtype)).requires_grad_()
                for _ in range(2)
            )
            where = f"for {_describe(x, 'x')} and {_describe(g, 'g')}, {dtype}"
            expect_close(_call(Watched.apply, (x, g), where), _gated(x, g), f"the forward output {where}")
            for label, grad_y in _incoming_gradients(shape, generator, dtype):
                got = _gradients(Watched.apply, (x, g), grad_y, f"{where} and {label}")
                if got[0] is None or got[1] is None:
                    raise Mistake(
                        "backward returned None for an input that requires grad; return one gradient per input"
                    )
                want = torch.autograd.grad(_gated(x, g), (x, g), grad_y)
                for name, value, expected in zip("xg", got, want):
                    expect_close(value, expected, f"the gradient for {name} {where} and {label}")
        x, g = (torch.randn(rows, columns, generator=generator, dtype=torch.float64) for _ in range(2))
        grad_y = torch.randn(rows, columns, generator=generator, dtype=torch.float64)
        for needed, unneeded, position in (("x", "g", 1), ("g", "x", 0)):
            inputs = (x.requires_grad_(needed == "x"), g.requires_grad_(needed == "g"))
            Watched.returned.clear()
            (got,) = _gradients(Watched.apply, inputs, grad_y, f"when only {needed} requires grad")
            returned = Watched.returned[0]
            if len(returned) != 2:
                raise Mistake(
                    f"backward returned {len(returned)} values; return one per input of forward: (grad_x, grad_g)"
                )
            if returned[position] is not None:
                raise Mistake(
                    f"when {unneeded} does not require grad, backward still computed its gradient: check "
                    f"ctx.needs_input_grad[{position}] and return None for {unneeded} when it is False"
                )
            (want,) = torch.autograd.grad(_gated(*inputs), inputs[1 - position], grad_y)
            expect_close(got, want, f"the gradient for {needed} when {unneeded} does not require grad")
        small = [torch.randn(4, 3, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(2)]
        _expect_gradcheck(Watched.apply, small)
    _expect_no_autograd_in_backward()


@exercise("1.2 in-place leaky ReLU")
def check_leaky_relu_(LeakyReLUInplace) -> None:
    """LeakyReLUInplace.apply(x, slope) overwrites x, marks it dirty and returns it."""
    Watched = _watched(LeakyReLUInplace)
    generator = _generator(12)
    slopes = torch.empty(3, dtype=torch.float64).uniform_(0.01, 0.5, generator=generator).tolist()
    rows, columns = _sizes(generator, 2, 6, 40)
    with _watching_autograd(forbidden={"aten::leaky_relu_backward"}):
        for slope, shape, transposed in [
            (slopes[0], (rows, columns), False),
            (slopes[1], (columns, rows), True),
            (slopes[2], (2, rows, columns), False),
        ]:
            leaf = torch.randn(shape, generator=generator, dtype=torch.float64).mul(3).requires_grad_()
            # A non-leaf to overwrite (in-place ops on a leaf that requires grad are refused); a transposed
            # copy is not contiguous.
            source = leaf.mT if transposed else leaf
            for label, grad_y in _incoming_gradients(source.shape, generator):
                x = source.clone()
                where = f"for {_describe(x, 'x')} and slope {slope:.4g}"
                version_before = x._version
                y = _call(Watched.apply, (x, slope), where)
                if y.data_ptr() != x.data_ptr():
                    raise Mistake(
                        f"forward returned a new tensor {where}; it must modify x in place and return x itself"
                    )
                if x._version == version_before:
                    raise Mistake(f"x was not modified in place {where} (its version counter did not change)")
                expect_close(y, F.leaky_relu(source, slope), f"the output {where}")
                if y is not x or x.grad_fn is not y.grad_fn:
                    raise Mistake(
                        "x was overwritten, but autograd still sees x as it was before the call (x.grad_fn is "
                        f"{type(x.grad_fn).__name__}): gradients taken through x would miss the leaky ReLU. "
                        "Call ctx.mark_dirty(x) in forward and return x"
                    )
                (want,) = torch.autograd.grad(F.leaky_relu(source, slope), leaf, grad_y)
                (got,) = _gradients(lambda _: x, (leaf,), grad_y, f"{where} and {label}")
                expect_close(got, want, f"the gradient for x {where} and {label}")
    _expect_no_autograd_in_backward()


def _first_maximum_gradient(x, indices, grad_values):
    return torch.zeros_like(x).scatter_(-1, indices.unsqueeze(-1), grad_values.unsqueeze(-1))


@exercise("1.3 row max with its index")
def check_row_max(RowMax) -> None:
    """RowMax.apply(x) -> (values, indices) over the last dimension; indices are not differentiable."""
    Watched = _watched(RowMax)
    generator = _generator(13)
    rows, columns, depth = _sizes(generator, 3, 5, 30)
    with _watching_autograd():
        for shape, layout, ties in [
            ((rows, columns), torch.Tensor.clone, False),
            ((depth, 4, columns), _strided, False),
            ((rows, columns), torch.Tensor.clone, True),
            ((columns,), _strided, True),
            ((4, depth, columns), lambda t: t.mT.contiguous().mT, True),
        ]:
            if ties:  # small whole numbers: most rows hold their maximum more than once
                data = torch.randint(0, 4, shape, generator=generator).to(torch.float64)
            else:
                data = torch.randn(shape, generator=generator, dtype=torch.float64)
            x = layout(data).requires_grad_()
            where = f"for {_describe(x, 'x')}" + (
                " with ties (rows holding their maximum twice or more)" if ties else ""
            )
            values, indices = _call(Watched.apply, (x,), where)
            want_values, want_indices = x.detach().max(dim=-1)
            if ties:
                try:
                    expect_close(indices, want_indices, f"the index output {where}")
                except Mistake as mistake:
                    raise Mistake(f"{mistake}. On a tie, return the first position, as torch.max does") from None
            else:
                expect_close(indices, want_indices, f"the index output {where}")
            expect_close(values, want_values, f"the value output {where}")
            if indices.requires_grad:
                raise Mistake("the indices require grad; mark them with ctx.mark_non_differentiable")
            for label, grad_values in _incoming_gradients(want_values.shape, generator):
                (got,) = _gradients(lambda t: Watched.apply(t)[0], (x,), grad_values, f"{where} and {label}")
                want = _first_maximum_gradient(x.detach(), want_indices, grad_values)
                hint = ": each row's whole gradient goes to the one position its index names" if ties else ""
                try:
                    expect_close(got, want, f"the gradient for x {where} and {label}")
                except Mistake as mistake:
                    raise Mistake(f"{mistake}{hint}") from None
    _expect_no_autograd_in_backward()


@exercise("1.4 twice-differentiable softplus")
def check_softplus(SoftplusFn) -> None:
    Watched = _watched(SoftplusFn)
    generator = _generator(14)
    (size,) = _sizes(generator, 1, 20, 60)
    extremes = {
        torch.float64: [-1000.0, -800.0, -100.0, -30.0, 30.0, 100.0, 800.0, 1000.0],
        torch.float32: [-200.0, -100.0, -89.0, -30.0, 30.0, 89.0, 100.0, 200.0],
    }
    with _watching_autograd(forbidden={"aten::softplus_backward"}):
        for dtype, large in extremes.items():
            x = torch.cat([torch.randn(size, generator=generator, dtype=torch.float64) * 4, torch.tensor(large)])
            x = _strided(x.to(dtype)).requires_grad_()
            where = f"for {dtype} inputs from {min(large):g} to {max(large):g}"
            expect_close(Watched.apply(x), F.softplus(x), f"the output {where} (overflow?)")
            for label, grad_y in _incoming_gradients(x.shape, generator, dtype):
                (got,) = _gradients(Watched.apply, (x,), grad_y, f"{where} and {label}")
                expect_close(got, grad_y * torch.sigmoid(x.detach()), f"the gradient {where} and {label} (overflow?)")
            (first,) = torch.autograd.grad(Watched.apply(x).sum(), x, create_graph=True)
            if not first.requires_grad:
                raise Mistake(
                    "the first derivative carries no graph, so it has no second derivative: compute backward "
                    "with differentiable torch operations on the saved input (no @once_differentiable)"
                )
            (second,) = torch.autograd.grad(first.sum(), x)
            s = torch.sigmoid(x.detach())
            expect_close(second, s * (1 - s), f"the second derivative {where} (overflow?)")
        small = torch.randn(7, generator=generator, dtype=torch.float64, requires_grad=True)
        _expect_gradcheck(Watched.apply, (small,), second_order=True)
    _expect_no_autograd_in_backward()
