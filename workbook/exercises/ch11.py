"""Checks for chapter 11 (Triton kernels; without a GPU they run in Triton's interpreter).

Each check launches the learner's kernel itself, on inputs it draws when it runs, at sizes that are not
multiples of the block. The tensors a kernel gets are views into larger buffers: in the interpreter every
access is watched (`triton_kernels.watch_memory`: a stray one is reported and skipped), and on a GPU the
guard elements around each tensor show a store that went past its end.
"""

from __future__ import annotations

import inspect

from workbook.course.checking import NOT_ATTEMPTED, Mistake, exercise, expect_close

GUARD = 1e30  # the value of the guard elements around an output: no right answer writes it
UNWRITTEN = -7e29  # what an output holds before the kernel runs: no right answer writes that either


def _require_kernel(kernel, name: str) -> None:
    from workbook.ops import triton_kernels as tk

    if tk.is_kernel(kernel) and _launch_replaced(kernel):
        raise Mistake(
            f"{name}'s launch was replaced ({type(kernel).__name__} with its own run or []): the check launches "
            f"the kernel Triton made from your function, {name}[grid](...), so write the work in the kernel"
        )
    if not tk.is_kernel(kernel):
        raise Mistake(
            f"{name} should be a @triton.jit kernel (the check launches it as {name}[grid](...)), got "
            f"{type(kernel).__name__}: write it with triton.language (tl.load, tl.store) under @triton.jit"
        )
    if "raise NotImplementedError" in inspect.getsource(kernel.fn):  # the stub: a kernel cannot raise
        raise NotImplementedError(NOT_ATTEMPTED)


def _launch_replaced(kernel) -> bool:
    """Whether a kernel object's launch was swapped for something else (a subclass, or `run` set on it)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return type(kernel) not in (JITFunction, InterpretedFunction) or bool(
        {"run", "__getitem__", "__call__"} & set(vars(kernel))
    )


def _guarded(values, guard: int, fill: float):
    """`values` copied into the middle of a buffer with `guard` elements of `fill` on each side: (view, buffer)."""
    import torch

    buffer = torch.full((guard + values.numel() + guard,), fill, dtype=values.dtype, device=values.device)
    view = buffer[guard : guard + values.numel()].view(values.shape)
    view.copy_(values)
    return view, buffer


def _launch(kernel, grid, args, watched: dict, what: str, **constants) -> None:
    """Launch `kernel[grid](*args, **constants)`; in the interpreter, watch its memory accesses."""
    import warnings

    from workbook.ops import triton_kernels as tk

    if not tk.INTERPRETED:
        kernel[grid](*args, **constants)
        return
    with tk.watch_memory(**watched) as report, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow warnings: the values are checked below
        kernel[grid](*args, **constants)
    if not report.stores:
        raise Mistake(
            f"{what}: the kernel stored nothing (no tl.store ran); the outputs must be written by the kernel, "
            "with tl.store"
        )
    if report.strays:
        raise Mistake(
            f"{what}: the kernel reached outside its tensors ({report.strays} lane(s); the first: "
            f"{report.first_stray}). Lanes past the end must be masked off: pass the mask to tl.load and tl.store"
        )


def _check_guards(buffer, view, what: str) -> None:
    import torch

    start = view.storage_offset() - buffer.storage_offset()
    outside = torch.cat([buffer[:start], buffer[start + view.numel() :]])
    if bool((outside != GUARD).any()):
        raise Mistake(f"{what}: the kernel wrote past the end of out: mask the store (tl.store(..., mask=...))")


def _check_all_written(out, what: str, hint: str) -> None:
    unwritten = (out == UNWRITTEN).nonzero()
    if len(unwritten):
        first = tuple(unwritten[0].tolist())
        raise Mistake(f"{what}: out{list(first)} and {len(unwritten) - 1} other element(s) were never written; {hint}")


# ---- 11.1 a masked elementwise kernel ---------------------------------------------------------------------


def gated_tanh_reference(a, b):
    import torch

    return torch.tanh(a) * torch.sigmoid(b)


@exercise("11.1 a masked kernel for any size")
def check_gated_tanh(kernel):
    """`kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr)` writes out = tanh(a) * sigmoid(b) for the n
    elements of a contiguous tensor, launched with a grid of triton.cdiv(n, BLOCK) programs."""
    import torch
    import triton

    from workbook.ops import triton_kernels as tk

    _require_kernel(kernel, "gated_tanh_kernel")
    generator = torch.Generator().manual_seed(1101)
    for block in (64, 128):
        drawn = [int(torch.randint(5 * block, 12 * block, (1,), generator=generator)) | 1 for _ in range(2)]
        for n in [4 * block, 1, block - 1, block + 1, *drawn]:  # a multiple first, then sizes that are not
            a = torch.rand(n, generator=generator) * 12 - 6
            a[::5] *= 15  # every fifth value in [-90, 90]: tanh(a) is +-1 there, and exp(2a) overflows float32
            a = a.to(tk.DEVICE)
            b = (torch.rand(n, generator=generator) * 12 - 6).to(tk.DEVICE)
            a_view, _ = _guarded(a, block, float("nan"))
            b_view, _ = _guarded(b, block, float("nan"))
            out, out_buffer = _guarded(torch.full_like(a, UNWRITTEN), block, GUARD)
            what = f"with n = {n} and BLOCK = {block}" + ("" if n % block == 0 else " (n not a multiple of BLOCK)")
            _launch(
                kernel,
                (triton.cdiv(n, block),),
                (a_view, b_view, out, n),
                {"a": a_view, "b": b_view, "out": out},
                what,
                BLOCK=block,
            )
            _check_guards(out_buffer, out, what)
            _check_all_written(
                out,
                what,
                "program p owns the elements p * BLOCK + tl.arange(0, BLOCK), with p = tl.program_id(0), "
                "and the mask must keep exactly those below n",
            )
            got, expected = out.cpu(), gated_tanh_reference(a, b).cpu()
            if not bool(torch.isfinite(got).all()):
                bad = int((~torch.isfinite(got)).nonzero()[0])
                raise Mistake(
                    f"out {what}: out[{bad}] is {got[bad].item()} for a = {a[bad].item():.4g}, expected "
                    f"{expected[bad].item():.4g}; tanh must hold for large |a| too: exp(2a) overflows float32 "
                    "above a = 44, while 2 * sigmoid(2a) - 1 does not"
                )
            expect_close(got, expected, f"out {what}", rtol=1e-5, atol=1e-6)


# ---- 11.2 a row reduction: log-sum-exp of each row, in blocks -------------------------------------------


def _logsumexp_cases(generator, block):
    """(what, x, hint): the matrices the check reduces, each with what a failure on it suggests."""
    import torch

    def drawn(low, high):
        return int(torch.randint(low, high, (1,), generator=generator))

    def normal(rows, columns, scale=3.0):
        return torch.randn(rows, columns, generator=generator) * scale

    short = drawn(block // 2, block - 1)
    long = drawn(2 * block + 1, 4 * block) | 1
    large = normal(5, drawn(2 * block, 4 * block)) + torch.tensor([[110.0], [-110.0], [95.0], [-95.0], [0.0]])
    large[4] += torch.linspace(-100, 100, large.shape[1])  # its largest values come last, far from its first block
    wide = normal(6, long + 13)
    return [
        (
            f"rows shorter than BLOCK (4 rows of {short} columns, BLOCK = {block})",
            normal(4, short),
            "lanes past the row's end must add nothing: load them as -inf (other=-float('inf')), so that "
            "they neither win the maximum nor add to the sum (exp(-inf) = 0)",
        ),
        (
            f"rows longer than BLOCK (5 rows of {long} columns, BLOCK = {block})",
            normal(5, long),
            "a row may be longer than one block: loop over it, BLOCK columns at a time "
            "(for start in range(0, columns, BLOCK)), for the maximum and again for the sum (in one pass, "
            "the running sum must be rescaled by exp(old_max - new_max) whenever the maximum grows)",
        ),
        (
            f"large values (rows around +-100, one rising from -100 to 100; {large.shape[1]} columns, BLOCK = {block})",
            large,
            "exp overflows float32 above about 88 (and gives 0 far below -88): subtract the row's maximum m "
            "first, the maximum of the whole row (not of its first block), log-sum-exp(x) = m + log(sum(exp(x - m)))",
        ),
        (
            f"rows that are not contiguous (6 rows of {long} columns, row_stride {long + 13}, BLOCK = {block})",
            wide[:, :long],
            "row r starts at x_ptr + r * row_stride, not r * columns",
        ),
    ]


@exercise("11.2 a row reduction in blocks: log-sum-exp")
def check_logsumexp(kernel):
    """`kernel(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr)`, launched with one program per row,
    writes out[r] = log(sum(exp(x[r, :columns]))) for rows of any length, without overflow."""
    import torch

    from workbook.ops import triton_kernels as tk

    _require_kernel(kernel, "logsumexp_kernel")
    generator = torch.Generator().manual_seed(1102)
    for block in (32, 64):
        for what, x, hint in _logsumexp_cases(generator, block):
            rows, columns = x.shape
            x_buffer = torch.full((rows + 1, x.stride(0)), float("nan"), device=tk.DEVICE)  # and a row of NaN after
            x_view = x_buffer[:rows, :columns]
            x_view.copy_(x)
            out, out_buffer = _guarded(torch.full((rows,), UNWRITTEN, device=tk.DEVICE), block, GUARD)
            _launch(
                kernel,
                (rows,),
                (x_view, out, columns, x_view.stride(0)),
                {"x": x_view, "out": out},
                f"for {what}",
                BLOCK=block,
            )
            _check_guards(out_buffer, out, f"for {what}")
            _check_all_written(out, f"for {what}", "each program writes one value, out[tl.program_id(0)]")
            expected = torch.logsumexp(x.double(), dim=1).float()
            got = out.cpu()
            if not bool(torch.isfinite(got).all()):
                bad = int((~torch.isfinite(got)).nonzero()[0])
                raise Mistake(
                    f"for {what}: out[{bad}] is {got[bad].item()}, expected {expected[bad].item():.6g}; {hint}"
                )
            try:
                expect_close(got, expected, f"out for {what}", rtol=1e-5, atol=1e-4)
            except Mistake as mistake:
                raise Mistake(f"{mistake}; {hint}") from None


# ---- 11.3 a custom op made compile-ready -----------------------------------------------------------------


def _softmax_samples():
    """float64 inputs that require grad, drawn now: several sizes, and a transposed (non-contiguous) one."""
    import torch

    from workbook.ops import triton_kernels as tk

    generator = torch.Generator().manual_seed(1103)

    def draw(rows, columns):
        return (torch.randn(rows, columns, generator=generator, dtype=torch.float64) * 4).to(tk.DEVICE)

    rows, columns = (
        int(torch.randint(2, 9, (1,), generator=generator)),
        int(torch.randint(10, 70, (1,), generator=generator)),
    )
    return [draw(rows, columns), draw(1, 131), draw(23, 6).t(), draw(7, 3)]


_TORCHS_SOFTMAX = {"_softmax", "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data"}


def _aten_calls():
    """A dispatch mode that records the names of the aten ops run under it (the class is made on first use)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class AtenCalls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func._schema.name.split("::")[-1])
            return func(*args, **(kwargs or {}))

    return AtenCalls()


def _raised_in_triton(error: BaseException) -> bool:
    """Whether the error came from inside triton: a kernel launched (compiled or interpreted)."""
    import traceback
    from pathlib import Path

    import triton

    package = str(Path(triton.__file__).parent)
    return any(frame.filename.startswith(package) for frame in traceback.extract_tb(error.__traceback__))


def _fake_failure(op, x) -> None:
    """Run the op on a fake copy of x and compare what its fake kernel promises with the real output."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    x = x.detach()
    real = op(x)
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        try:
            fake = op(mode.from_tensor(x))
        except (NotImplementedError, Mistake):
            raise
        except Exception as error:
            if _raised_in_triton(error):
                raise Mistake(
                    "the fake kernel ran the real kernel, which needs x's data, and a fake tensor has none: "
                    "a fake kernel only describes the output (shape, dtype, strides), e.g. with x.new_empty(...)"
                ) from None
            raise
    described = f"for x of shape {tuple(x.shape)} and strides {x.stride()}"
    if not hasattr(fake, "shape"):
        raise Mistake(f"the fake kernel should return a tensor, got {type(fake).__name__}")
    if tuple(fake.shape) != tuple(real.shape):
        raise Mistake(
            f"the fake kernel's output has shape {tuple(fake.shape)} {described}, the real one {tuple(real.shape)}"
        )
    if fake.dtype != real.dtype:
        raise Mistake(f"the fake kernel's output has dtype {fake.dtype} {described}, the real one {real.dtype}")
    if tuple(fake.stride()) != tuple(real.stride()):
        raise Mistake(
            f"the fake kernel's output has strides {tuple(fake.stride())} {described}, but the op returns a new "
            f"contiguous tensor with strides {tuple(real.stride())}: describe that (x.new_empty(x.shape)), not "
            "x's layout (empty_like copies a transposed input's strides)"
        )


@exercise("11.3 a Triton op made ready for torch.compile")
def check_softmax_op(fake, setup_context, backward):
    """A custom op that launches softmax_kernel, with `fake` registered as its fake kernel and
    `setup_context`/`backward` as its autograd formula: right outputs, gradients, opcheck, and
    torch.compile(fullgraph=True)."""
    import torch

    from workbook.ops import triton_kernels as tk

    op = tk.new_softmax_op(fake=fake, setup_context=setup_context, backward=backward)
    samples = _softmax_samples()
    for x in samples:
        _fake_failure(op, x)
    generator = torch.Generator().manual_seed(11031)
    for x in samples:
        x = x.detach().requires_grad_()
        grad_y = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        y = op(x)
        with _aten_calls() as calls:
            (got,) = torch.autograd.grad(y, x, grad_y)
        borrowed = sorted(calls.names & _TORCHS_SOFTMAX)
        if borrowed:
            raise Mistake(
                f"the backward called torch's own softmax ({', '.join(borrowed)}): write the formula from the "
                "saved output, y * (grad - (grad * y).sum(dim=1, keepdim=True))"
            )
        (expected,) = torch.autograd.grad(torch.softmax(x, dim=1), x, grad_y)
        expect_close(got, expected, f"the gradient of x (shape {tuple(x.shape)})")
    # opcheck once, on the transposed input; the trace through AOTAutograd is _check_compiles's job.
    transposed = samples[2].detach().requires_grad_()
    tests = ("test_schema", "test_faketensor", "test_autograd_registration")
    results = torch.library.opcheck(op, (transposed,), test_utils=tests, raise_exception=False)
    for test, result in results.items():
        if result != "SUCCESS":
            first_line = str(result).strip().splitlines()[0] if str(result).strip() else type(result).__name__
            raise Mistake(f"opcheck's {test} failed for x of shape {tuple(transposed.shape)}: {first_line[:300]}")
    _check_compiles(op, samples[:2])


def _check_compiles(op, samples) -> None:
    """A small model around the op compiles with fullgraph=True and gives eager's values and gradients."""
    import torch

    def attention_like(x, weight):
        return op(x @ weight).logsumexp(dim=1).sum()

    torch._dynamo.reset()
    # aot_eager traces forward and backward as Inductor would, without generating code.
    compiled = torch.compile(attention_like, fullgraph=True, backend="aot_eager", dynamic=True)
    for x in samples:
        weight = torch.linspace(-1, 1, x.shape[1] ** 2, dtype=x.dtype, device=x.device).view(x.shape[1], -1)
        x_eager, x_compiled = x.detach().requires_grad_(), x.detach().requires_grad_()
        try:
            got = compiled(x_compiled, weight)
        except torch._dynamo.exc.Unsupported as error:
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            raise Mistake(f"torch.compile(fullgraph=True) found a graph break: {' '.join(lines[:2])[:300]}") from None
        expected = attention_like(x_eager, weight)
        expect_close(got, expected, f"the compiled model's output (x of shape {tuple(x.shape)})")
        (got_grad,) = torch.autograd.grad(got, x_compiled)
        (expected_grad,) = torch.autograd.grad(expected, x_eager)
        expect_close(got_grad, expected_grad, f"the compiled model's gradient of x (shape {tuple(x.shape)})")
