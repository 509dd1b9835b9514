"""Checks for chapter 03 (autograd in C++).

* 3.1 ``check_scatter_mean_backward(scatter_mean)``: ``scatter_mean(src, index, dim, dim_size)``
  (index of src's shape) is the op the learner's C++ cell built; the gradient must come from its
  ``torch::autograd::Function``'s backward and be the gradient of the mean with respect to src, for
  any shape, dim (negative too), dtype and incoming gradient (contiguous, transposed, expanded).
* 3.2 ``check_scatter_max(scatter_max)``: ``scatter_max(src, index, dim_size)`` for 1-D float
  tensors is the learner's C++ op and must return ``(values, argindex)`` as torch_scatter does: the
  first position wins a tie, an empty group has value 0 and argindex ``src.size(0)``. It must be a loop
  of its own (no torch reduction does the work), about as fast as the library's one-pass loop, and an
  index out of range must raise a RuntimeError that names ``index`` without writing anywhere: that is
  probed in a child process, so an answer that writes out of bounds cannot corrupt this one.
* 3.3 ``check_scatter_max_function(ScatterMaxPy)``: a Python ``torch.autograd.Function`` around the
  library's kernel whose own backward routes each group's gradient to its winner (ties included).

Every check draws its inputs when it runs, from seeded generators, at sizes beyond those the chapter shows.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from workbook.course.checking import Mistake, exercise, expect_close, raise_if_not_attempted

# The namespaces of the workbook's own libraries and of torch: an op from one of them is not the learner's.
_NOT_THE_LEARNERS = {"aten", "prim", "prims", "wb_scatter", "wb_scatter_stable", "wb_scatter_emu"}


def _learners_op(op, built_by: str):
    """The namespace and name of `op`, which must be an op the learner's C++ cell registered."""
    import torch

    if isinstance(op, torch._ops.OpOverloadPacket):
        qualified = op._qualified_op_name
    elif isinstance(op, torch._ops.OpOverload):
        qualified = op._schema.name
    else:
        raise Mistake(
            f"pass the op your C++ cell built ({built_by}), not a Python {type(op).__name__}: this exercise is "
            "written in C++"
        )
    namespace, name = qualified.split("::", 1)
    if namespace in _NOT_THE_LEARNERS:
        raise Mistake(f"torch.ops.{namespace}.{name} is not yours: pass the op your C++ cell built ({built_by})")
    return namespace, name


def _draw(generator, low, high) -> int:
    import torch

    return int(torch.randint(low, high, (1,), generator=generator))


def _incoming_gradient(shape, kind, dtype, generator):
    """The gradient that flows into an op's output: `kind` is contiguous, transposed (not contiguous), or
    expanded (one value seen through stride 0, as `out.sum().backward()` produces)."""
    import torch

    if kind == "expanded":
        return torch.randn((), dtype=dtype, generator=generator).expand(shape)
    if kind == "transposed":
        if len(shape) == 1:
            return torch.randn(2 * shape[0], dtype=dtype, generator=generator)[::2]
        return torch.randn(tuple(reversed(shape)), dtype=dtype, generator=generator).permute(
            *reversed(range(len(shape)))
        )
    return torch.randn(tuple(shape), dtype=dtype, generator=generator)


_GRADIENT_WORDS = {
    "contiguous": "",
    "transposed": ", an incoming gradient that is not contiguous (transposed)",
    "expanded": ", an incoming gradient expanded from one value (stride 0, as out.sum().backward() gives)",
}


def _autograd_cases(seed: int):
    """(shape, dim, groups, dim_size, dtype, gradient kind) drawn from a seeded generator: 1-D to 3-D,
    negative dims, empty groups (dim_size beyond the largest index), float32 and float64, and every kind
    of incoming gradient."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    d = lambda low, high: _draw(generator, low, high)  # noqa: E731
    return generator, [
        ((d(40, 200),), 0, d(3, 12), None, torch.float64, "contiguous"),
        ((d(20, 60), d(2, 7)), 0, d(3, 9), d(9, 14), torch.float64, "transposed"),
        ((d(3, 8), d(20, 60)), -1, d(4, 10), None, torch.float32, "expanded"),
        ((d(2, 5), d(10, 30), d(2, 5)), 1, d(2, 6), d(6, 9), torch.float64, "transposed"),
        ((d(2, 5), d(3, 6), d(10, 30)), -1, d(3, 7), None, torch.float64, "expanded"),
    ]


def _describe(shape, dim, groups, dim_size, dtype, kind) -> str:
    return (
        f"for src of shape {tuple(shape)} ({str(dtype).replace('torch.', '')}), dim={dim}, index values in "
        f"[0, {groups}), dim_size={dim_size}{_GRADIENT_WORDS[kind]}"
    )


# ---- 3.1 ------------------------------------------------------------------------------------------


@exercise("3.1 scatter_mean's backward in C++")
def check_scatter_mean_backward(scatter_mean):
    import torch

    from workbook.ops import scatter as reference

    _learners_op(scatter_mean, "my_scatter_mean, from fresh_namespace.ops")
    generator, cases = _autograd_cases(31)
    for shape, dim, groups, dim_size, dtype, kind in cases:
        src = torch.randn(shape, dtype=dtype, generator=generator)
        index = torch.randint(0, groups, shape, generator=generator)
        where = _describe(shape, dim, groups, dim_size, dtype, kind)
        leaf = src.clone().requires_grad_()
        try:
            out = scatter_mean(leaf, index, dim, dim_size)
            node = out.grad_fn.name() if out.grad_fn is not None else "none"
            if not node.startswith("torch::autograd::CppNode<"):
                raise Mistake(
                    f"the result's gradient function is {node}, not your C++ Function: the gradient must come "
                    "from the backward of the torch::autograd::Function in your cell"
                )
            grad_out = _incoming_gradient(out.shape, kind, dtype, generator)
            grad, called = _ops_called_in_backward(out, leaf, grad_out)
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise Mistake(f"your op raised {where}: {str(error).strip().splitlines()[0]}") from None
        borrowed = sorted(
            n for n in called if n.split("::")[0] in _NOT_THE_LEARNERS - {"aten"} or "scatter_reduce" in n
        )
        if borrowed:
            raise Mistake(
                f"your backward calls {', '.join(borrowed)}: the gradient would come from that op's own backward; "
                "compute it in your Function's backward (gather the incoming gradient along dim, divide by the count)"
            )
        if grad is None:
            raise Mistake(
                f"no gradient reached src {where}: backward's first returned tensor must be the "
                "gradient with respect to src (an undefined Tensor() there means 'no gradient')"
            )
        expected_leaf = src.clone().requires_grad_()
        expected_out = reference.reference_mean(expected_leaf, index, dim, dim_size=dim_size)
        (expected,) = torch.autograd.grad(expected_out, expected_leaf, grad_out.contiguous())
        # float64 to the last bits: a gradient computed in float32 comes back cast to float64 without a word
        exact = {"rtol": 1e-12, "atol": 0} if dtype == torch.float64 else {}
        try:
            expect_close(grad, expected, f"the gradient with respect to src {where}", **exact)
        except Mistake as mistake:
            hint = (
                "Each src element contributed 1/count of its group's mean, so it receives its "
                "group's incoming gradient (gather it along dim with index) divided by its group's count"
            )
            if kind != "contiguous":
                hint += "; read the incoming gradient through its strides (gather does), never as a plain buffer"
            raise Mistake(f"{mistake}. {hint}") from None


# ---- 3.2 ------------------------------------------------------------------------------------------

# torch ops that would do exercise 3.2's loop for it.
_REDUCING_OPS = (
    "scatter",
    "index_reduce",
    "index_add",
    "index_put",
    "_index_put",
    "segment_reduce",
    "_segment_reduce",
    "max",
    "amax",
    "aminmax",
    "argmax",
    "sort",
    "argsort",
    "unique",
    "_unique",
    "topk",
    "cummax",
)
SLOWER_LIMIT = 20  # the learner's op may take this many times as long as the library's loop on one thread
_BAD_INDEX_VALUES = [-1, 3, -(2**40), 2**40]  # probed with dim_size 3: just outside, and far outside


def _max_cases(generator):
    """(description, src, index, dim_size): the shapes of trouble, then drawn inputs well beyond them. None holds
    a NaN: the exercise leaves the NaN rule out, and its text says so."""
    import torch

    f64 = torch.float64
    yield "two groups of two", torch.tensor([1.0, 5.0, 2.0, 7.0]), torch.tensor([0, 0, 1, 1]), 2
    yield (
        "a group whose values are all negative (its maximum is -1, not 0: start from nothing, not from 0)",
        torch.tensor([-3.0, -1.0, 2.0]),
        torch.tensor([0, 0, 1]),
        2,
    )
    yield (
        "a tie: 4 at positions 0, 2 and 3 (the first position wins) and an empty group 0",
        torch.tensor([4.0, 2.0, 4.0, 4.0]),
        torch.tensor([1, 1, 1, 1]),
        2,
    )
    yield (
        "a group holding only -inf, and empty groups 1 and 3 (value 0, argindex 3)",
        torch.tensor([-2.0, float("-inf"), 1.0]),
        torch.tensor([2, 0, 2]),
        4,
    )
    yield "an empty src", torch.zeros(0), torch.zeros(0, dtype=torch.long), 3
    for dtype in (torch.float32, f64):
        n, groups = _draw(generator, 1000, 4000), _draw(generator, 20, 400)
        dim_size = groups + _draw(generator, 1, 50)  # the last groups stay empty
        src = torch.randint(-50, 50, (n,), generator=generator).to(dtype)  # many ties, negative groups
        index = torch.randint(0, groups, (n,), generator=generator)
        name = str(dtype).replace("torch.", "")
        yield f"{n} random {name} values (many ties) in {dim_size} groups", src, index, dim_size
    # float64 values that differ beyond float32's precision: read as float they would tie.
    n = _draw(generator, 1000, 3000)
    base = torch.randint(-5, 5, (n,), generator=generator).to(f64)
    src = base + torch.randint(0, 4, (n,), generator=generator).to(f64) * 1e-12
    index = torch.randint(0, 60, (n,), generator=generator)
    yield f"{n} float64 values 1e-12 apart (ties only if read as float32)", src, index, 64
    # Not contiguous: every second element of longer tensors.
    n = _draw(generator, 1000, 3000)
    src = torch.randn(2 * n, generator=generator)[::2]
    index = torch.randint(0, 100, (2 * n,), generator=generator)[1::2]
    yield f"{n} float32 values, src and index strided views (not contiguous)", src, index, 100


def _library_file(namespace: str) -> str | None:
    """The shared library that registered `namespace` in this process."""
    import torch

    for path in torch.ops.loaded_libraries:
        if Path(path).stem == namespace:
            return path
    maps = Path("/proc/self/maps")
    if maps.exists():
        for line in maps.read_text().splitlines():
            path = line.split()[-1]
            if path.endswith(".so") and namespace in Path(path).name:
                return path
    return None


def _probe_bad_indices(op) -> None:
    """Each bad index value must raise a RuntimeError naming index (run in the child process, last)."""
    import torch

    for value in _BAD_INDEX_VALUES:
        _progress(f"index value {value} with dim_size=3")
        try:
            op(torch.arange(6, dtype=torch.float32), torch.tensor([0, 1, 2, value, 1, 0]), 3)
        except RuntimeError as error:
            message = str(error).strip().splitlines()[0]
            if "index" not in message:
                raise Mistake(
                    f"index value {value} with dim_size=3 raised, but the message does not name index: {message!r}"
                ) from None
            continue
        raise Mistake(
            f"index value {value} with dim_size=3 was accepted: writing values[{value}] corrupts memory; "
            'check each index value with TORCH_CHECK(0 <= k && k < dim_size, "index ...") before using it'
        )


def _reducing_ops_called(op, args) -> list[str]:
    import torch

    with torch.autograd.profiler.profile(use_kineto=False) as profile:
        op(*args)
    names = {event.name for event in profile.function_events}
    reducing = {n for n in names if n.startswith("aten::") and n[6:].startswith(_REDUCING_OPS)}
    workbooks = {n for n in names if n.split("::")[0] in _NOT_THE_LEARNERS - {"aten", "prim", "prims"}}
    return sorted(reducing | workbooks)


# What a library's dynamic symbol table shows that the profiler cannot: a call straight into one of torch's
# kernels (at::cpu::, at::native::: no dispatcher, so no profiler event), or a detour through Python.
_REDUCING_SYMBOL = re.compile(r"\bat::(?:\w+::)*?(?:" + "|".join(_REDUCING_OPS) + r")\w*(?:::call)?\(")
_PYTHON_SYMBOL = re.compile(r"^(?:PyRun_|PyImport_|PyEval_Eval|Py_CompileString)\w*$")


def _borrowed_symbols(library: str) -> list[str]:
    """The reducing torch functions and the Python C-API functions that `library` calls (its undefined
    dynamic symbols, demangled); an empty list where nm is missing."""
    import shutil
    import subprocess

    if shutil.which("nm") is None:
        return []
    listing = subprocess.run(
        ["nm", "-D", "--undefined-only", "-C", library], capture_output=True, text=True, check=False
    ).stdout
    found = []
    for line in listing.splitlines():
        symbol = line.split(None, 1)[-1].split("@")[0].strip()
        match = _REDUCING_SYMBOL.search(symbol)
        if match:
            found.append(match.group(0).rstrip("("))
        elif _PYTHON_SYMBOL.match(symbol):
            found.append(symbol)
    return sorted(set(found))


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _speed_ratio(op, generator) -> tuple[float, int, int]:
    """How many times as long the learner's op takes as the library's scatter_max on one thread (the
    best of interleaved rounds), on a drawn input of 100 000+ elements."""
    import torch

    from workbook.ops import scatter

    n, dim_size = 100_000 + _draw(generator, 0, 20_000), 2_000 + _draw(generator, 0, 500)
    src = torch.randn(n, generator=generator)
    index = torch.randint(0, dim_size, (n,), generator=generator)
    library = scatter.load().scatter_max
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best, best_library = float("inf"), float("inf")
        for _ in range(5):
            best_library = min(best_library, _seconds(lambda: library(src, index, 0, dim_size)))
            best = min(best, _seconds(lambda: op(src, index, dim_size)))
            if best > 10 * SLOWER_LIMIT * best_library:  # clearly too slow: no more rounds needed
                break
    finally:
        torch.set_num_threads(threads)
    return best / best_library, n, dim_size


# A C++ answer may read or write out of bounds, so exercise 3.2 is graded in a child process: whatever the
# answer does cannot harm the process that runs the check (a notebook's kernel). The child reports what it
# is about to do before each call (so a crash names its case) and, last, the outcome.
#
# The children are forked from multiprocessing's fork server, which imports torch and the workbook once:
# each check still gets a process of its own (a crash or a stray write stays in it), without paying for
# starting Python and importing torch again (seconds of CPU each time).
_FORK_SERVER_PRELOAD = ["torch", "workbook.ops.scatter", "workbook.exercises.ch03"]
_report = None  # in the child: the connection its records go to


def _progress(what: str) -> None:
    _report.send({"doing": what})


def _grade_max_in_child(report, library: str, namespace: str, name: str) -> None:
    global _report
    import torch

    _report = report
    # The child shares the notebook's stdout and stderr (ipykernel captures them): what the profiler or a
    # loader prints here would land in the notebook's output now and then, with pids and times. The
    # records go through the pipe; the rest is silenced.
    import os

    silent = os.open(os.devnull, os.O_WRONLY)
    os.dup2(silent, 1)
    os.dup2(silent, 2)
    torch.ops.load_library(library)
    try:
        _grade_max(getattr(getattr(torch.ops, namespace), name))
        outcome = {"status": "passed"}
    except NotImplementedError:
        outcome = {"status": "not attempted"}
    except Mistake as mistake:
        outcome = {"status": "failed", "explanation": str(mistake)}
    except Exception as error:  # the parent names it; the child ends with status 1
        report.send({"error": f"{type(error).__name__}: {error}"})
        raise
    report.send(outcome)


def _run_in_child(library: str, namespace: str, name: str, timeout: float = 600) -> tuple[list, int | None]:
    """Grade the op in a child forked from the fork server; return its records and its exit code (None
    when it was still running after `timeout` seconds, and killed)."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_FORK_SERVER_PRELOAD)
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_grade_max_in_child, args=(sending, library, namespace, name), daemon=True)
    child.start()
    sending.close()  # the child holds the other copy: the pipe ends when the child does
    records = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            if not receiving.poll(max(deadline - time.monotonic(), 0)):
                break
            records.append(receiving.recv())
        except EOFError:
            break
    child.join(max(deadline - time.monotonic(), 0) + 1)
    if child.exitcode is None:
        child.kill()
        child.join()
        return records, None
    return records, child.exitcode


def _grade_max(scatter_max) -> None:
    import torch

    from workbook.ops import scatter as reference

    def run(src, index, dim_size, case):
        _progress(case)
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
        expect_close(values, expected_values, f"values ({case})", rtol=0, atol=0)
        try:
            expect_close(argindex, expected_arg, f"argindex ({case})")
        except Mistake as mistake:
            raise Mistake(
                f"{mistake}. The argindex is the position along the dimension of the element that "
                f"won (the first one on a tie), and src.size(0) = {src.size(0)} for an empty group"
            ) from None

    generator = torch.Generator().manual_seed(32)
    for case, src, index, dim_size in _max_cases(generator):
        run(src, index, dim_size, case)

    _progress("500 values in 50 groups, under torch's profiler")
    src = torch.randn(500, generator=generator)
    index = torch.randint(0, 50, (500,), generator=generator)
    called = _reducing_ops_called(scatter_max, (src, index, 50))
    if called:
        raise Mistake(
            f"your op calls {', '.join(called)}: torch does the reduction for you there, and exercise 3.2 is the loop "
            "itself (one pass over src, updating values[index[j]] and argindex[index[j]])"
        )

    _progress("100 000 values, timed against the library's scatter_max")
    ratio, n, dim_size = _speed_ratio(scatter_max, generator)
    if ratio > SLOWER_LIMIT:
        raise Mistake(
            f"your op is right but takes {ratio:.0f} times as long as the library's scatter_max on one thread "
            f"({n} elements, {dim_size} groups; more than {SLOWER_LIMIT} times fails): one pass over src, "
            "updating the group of each element, does n steps; a loop over the groups for every element (or "
            "over the elements for every group) does n x groups"
        )

    _probe_bad_indices(scatter_max)


@exercise("3.2 scatter_max with its argindex")
def check_scatter_max(scatter_max):
    namespace, name = _learners_op(scatter_max, "my_scatter_max, from fresh_namespace.ops")
    library = _library_file(namespace)
    if library is None:
        raise Mistake(
            f"cannot find the library file that registered torch.ops.{namespace}: build the op with "
            "fresh_namespace.ops, as the cell does"
        )
    records, exitcode = _run_in_child(library, namespace, name)
    if exitcode is None:
        raise Mistake("your op did not finish the check's cases within 10 minutes (an endless loop?)")
    outcome = records[-1] if records and "status" in records[-1] else None
    if outcome is None:
        doing = next((r["doing"] for r in reversed(records) if "doing" in r), "loading your library")
        how = (
            f"was killed by {signal.Signals(-exitcode).name}"
            if exitcode < 0
            else f"exited with status {exitcode}: {next((r['error'] for r in records if 'error' in r), '')[:200]}"
        )
        raise Mistake(
            f"{doing}: your op crashed the process (it {how}; the check runs your op in a child process). It "
            "read or wrote outside values or argindex: check 0 <= k && k < dim_size for every index value k "
            "before it is used, negative values included"
        )
    if outcome["status"] == "not attempted":
        raise NotImplementedError
    if outcome["status"] == "failed":
        raise Mistake(outcome["explanation"])
    # Right, and fast: last, what the profiler cannot see (a library may hold several ops, so this comes after
    # the op's own behaviour has been judged).
    borrowed = _borrowed_symbols(library)
    if borrowed:
        raise Mistake(
            f"your op is right, but your library calls {', '.join(borrowed[:4])}: torch's kernels (called "
            "directly, past the dispatcher and the profiler) or Python do the reduction for you there, and "
            "exercise 3.2 is the loop itself (one pass over src, updating values[index[j]] and argindex[index[j]])"
        )


# ---- 3.3 ------------------------------------------------------------------------------------------


def _ops_called_in_backward(outputs, leaf, grad_out):
    """The gradient, and the names of the ops (namespace::name) that ran while it was computed."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.add(func._schema.name)
            return func(*args, **(kwargs or {}))

    with Recorder() as recorder:
        (grad,) = torch.autograd.grad(outputs, leaf, grad_out, allow_unused=True)
    return grad, recorder.names


@exercise("3.3 scatter_max's gradient, Python style")
def check_scatter_max_function(ScatterMaxPy):
    import torch

    from workbook.ops import scatter

    if not (isinstance(ScatterMaxPy, type) and issubclass(ScatterMaxPy, torch.autograd.Function)):
        raise Mistake(
            f"ScatterMaxPy should be a class derived from torch.autograd.Function, got {ScatterMaxPy!r}: the "
            "exercise is the backward of your own Function"
        )
    generator, cases = _autograd_cases(33)
    for shape, dim, groups, dim_size, dtype, kind in cases:
        src = torch.randint(-4, 5, shape, generator=generator).to(dtype)  # small integers: ties in every group
        index = torch.randint(0, groups, shape, generator=generator)
        where = _describe(shape, dim, groups, dim_size, dtype, kind) + ", with ties"
        leaf = src.clone().requires_grad_()
        try:
            result = ScatterMaxPy.apply(leaf, index, dim, dim_size)
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise Mistake(f"ScatterMaxPy.apply raised {where}: {str(error).strip().splitlines()[0]}") from None
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise Mistake(f"ScatterMaxPy.apply should return (values, argindex), got {type(result).__name__} {where}")
        values, argindex = result
        expected_values, expected_arg = scatter.scatter_max(src, index, dim, None, dim_size)
        expect_close(values, expected_values, f"values {where}")
        expect_close(argindex, expected_arg, f"argindex {where}")
        if not isinstance(values.grad_fn, ScatterMaxPy._backward_cls):
            node = values.grad_fn.name() if values.grad_fn is not None else "none"
            raise Mistake(
                f"the values' gradient function is {node}, not ScatterMaxPy's backward: forward must return "
                "the kernel's outputs from inside your Function, and backward computes their gradient"
            )
        grad_out = _incoming_gradient(values.shape, kind, dtype, generator)
        try:
            grad, called = _ops_called_in_backward(values, leaf, grad_out)
        except RuntimeError as error:
            raise_if_not_attempted(error)
            raise Mistake(
                f"your backward raised {where}: {str(error).splitlines()[0]}. An empty group's argindex "
                f"is src.size(dim) = {src.size(dim)}, one past the end: scatter into a tensor with one "
                "spare slot along dim, then narrow it away"
            ) from None
        borrowed = sorted(n for n in called if n.startswith("wb_scatter::") or n.startswith("aten::scatter_reduce"))
        if borrowed:
            raise Mistake(
                f"your backward calls {', '.join(borrowed)}: its gradient would come from another op's "
                "backward; route grad_values to the winners yourself (scatter_ at the positions argindex names)"
            )
        if grad is None:
            raise Mistake(f"no gradient reached src {where}: backward's first result is the gradient for src")
        expected_leaf = src.clone().requires_grad_()
        (expected,) = torch.autograd.grad(
            scatter.scatter_max(expected_leaf, index, dim, None, dim_size)[0], expected_leaf, grad_out.contiguous()
        )
        try:  # routing copies values: exact, which also catches a gradient routed in float32 and cast back
            expect_close(grad, expected, f"the gradient with respect to src {where}", rtol=0, atol=0)
        except Mistake as mistake:
            raise Mistake(
                f"{mistake}. Each group's gradient belongs to its winner alone (the element at argindex "
                "along dim, the first one on a tie); every other element, and nothing for an empty group, gets 0"
            ) from None
