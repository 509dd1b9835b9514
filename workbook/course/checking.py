"""The exercise checks' shared machinery.

A check is a function decorated with `@exercise("3.2 scatter_max with its argindex")`. Its body
calls the learner's code and raises `Mistake` with a plain-words explanation when something is off.
The decorator turns that into an `Outcome`, displayed in the notebook as one line:

    ✔ Exercise 3.2 scatter_max with its argindex: passed
    ✘ Exercise 3.2 scatter_max with its argindex: failed — argindex (two groups of two) is wrong at ...
    … Exercise 3.2 scatter_max with its argindex: not attempted yet — replace the code under YOUR CODE ...

An untouched stub (`raise NotImplementedError`, or a C++ `TORCH_CHECK(false, "not attempted yet")`)
is reported as *not attempted yet*, and the notebook keeps running; a check that catches the
learner's errors itself calls `raise_if_not_attempted(error)` first, so that a stub's error still
reads as one. For grading (`nbgrader autograde`) or tests, set WORKBOOK_STRICT=1 or call
`.require()`: anything but a pass then raises `ExerciseFailed`, which is what marks a grade cell as
failed. In strict mode a pass is printed and the check returns None, because nbgrader scores a grade
cell by its output: an error scores nothing, printed text full marks, and a returned value must be a
number of points.

Outside strict mode a check run in a learner's notebook (in notebooks/) also records its outcome in
build/progress.json, which `python -m workbook.course.progress` shows; see `workbook.course.progress`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
from dataclasses import dataclass

NOT_ATTEMPTED = "not attempted yet"
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_HOW_TO_START = "replace the code under YOUR CODE HERE, run that cell, then run this check again"
_SYMBOLS = {PASSED: "✔", FAILED: "✘", NOT_ATTEMPTED: "…", SKIPPED: "○"}


class Mistake(AssertionError):
    """Raised by a check body: the learner's code runs but does the wrong thing."""


class Skip(Exception):
    """Raised by a check body that cannot run here (for example: needs a GPU)."""


class ExerciseFailed(AssertionError):
    """Raised in strict mode for any outcome other than a pass."""


@dataclass(frozen=True)
class Outcome:
    exercise: str
    status: str
    explanation: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def require(self) -> Outcome:
        if not self.passed:
            raise ExerciseFailed(str(self))
        return self

    def __str__(self) -> str:
        line = f"{_SYMBOLS[self.status]} Exercise {self.exercise}: {self.status}"
        return f"{line} — {self.explanation}" if self.explanation else line

    __repr__ = __str__


def strict_mode() -> bool:
    return os.environ.get("WORKBOOK_STRICT", "") not in ("", "0")


def exercise(title: str):
    """Decorate a check body; see the module docstring."""

    def decorate(body):
        @functools.wraps(body)
        def check(*args, **kwargs) -> Outcome | None:
            outcome = _run(title, body, args, kwargs)
            if not strict_mode():
                _keep_record(body.__name__, outcome)
                return outcome
            print(outcome.require())
            return None

        return check

    return decorate


def _keep_record(check_name: str, outcome: Outcome) -> None:
    """Record the outcome for `python -m workbook.course.progress` when the check ran in a learner's notebook
    (`workbook.course.progress.record_check` decides). A failure to record must never change what a check reports
    or prints, so it is ignored."""
    with contextlib.suppress(Exception):
        from workbook.course.progress import record_check

        record_check(check_name, outcome)


def raise_if_not_attempted(error: BaseException) -> None:
    """In a check's `except` block: an error raised by an untouched stub (its message says "not attempted
    yet": a C++ `TORCH_CHECK(false, ...)`, or a TorchScript stub) becomes NotImplementedError, which the
    check reports as not attempted instead of as a mistake."""
    if NOT_ATTEMPTED in str(error):
        raise NotImplementedError(NOT_ATTEMPTED) from None


def _run(title, body, args, kwargs) -> Outcome:
    try:
        body(*args, **kwargs)
    except NotImplementedError:
        return Outcome(title, NOT_ATTEMPTED, _HOW_TO_START)
    except Mistake as mistake:
        return Outcome(title, FAILED, str(mistake))
    except Skip as reason:
        return Outcome(title, SKIPPED, str(reason))
    except Exception as error:  # the learner's code itself raised: say what and where
        if NOT_ATTEMPTED in str(error):
            return Outcome(title, NOT_ATTEMPTED, _HOW_TO_START)
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return Outcome(title, FAILED, f"your code raised {type(error).__name__}: {first_line}")
    return Outcome(title, PASSED)


# torch.testing.assert_close's default tolerances, so a failure here means what it means there.
def _tolerances():
    import torch

    return {
        torch.float16: (1e-3, 1e-5),
        torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7),
    }


@contextlib.contextmanager
def watched(install, hook):
    """Run the block with `hook` installed by `install` (`sys.settrace` or `sys.setprofile`), with garbage
    collection paused: a collection in between would run unrelated objects' Python finalizers under the hook."""
    current = {sys.settrace: sys.gettrace, sys.setprofile: sys.getprofile}[install]
    previous, collecting = current(), gc.isenabled()
    gc.disable()
    install(hook)
    try:
        yield
    finally:
        install(previous)
        if collecting:
            gc.enable()


def expect_close(actual, expected, what: str, *, rtol=None, atol=None) -> None:
    """Compare two tensors and explain the first difference in plain words."""
    import torch

    if not isinstance(actual, torch.Tensor):
        raise Mistake(f"{what} should be a tensor, got {type(actual).__name__}")
    if actual.shape != expected.shape:
        raise Mistake(f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise Mistake(f"{what} has dtype {actual.dtype}, expected {expected.dtype}")
    if actual.device != expected.device:
        raise Mistake(f"{what} is on {actual.device}, expected {expected.device}")
    if actual.dtype.is_floating_point or actual.dtype.is_complex:
        default_rtol, default_atol = _tolerances().get(actual.dtype, (1.3e-6, 1e-5))
        rtol = default_rtol if rtol is None else rtol
        atol = default_atol if atol is None else atol
        wrong = ~torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        wrong = actual != expected
    positions = wrong.nonzero()
    if len(positions):
        index = tuple(positions[0].tolist())
        raise Mistake(
            f"{what} is wrong at index {index}: expected {_scalar(expected[index])}, "
            f"got {_scalar(actual[index])} ({len(positions)} of {actual.numel()} values differ)"
        )


def _scalar(value) -> str:
    number = value.item()
    return f"{number:.6g}" if isinstance(number, float) else str(number)


def inplace_change_is_caught(function, reference, leaves, changed: int) -> bool:
    """Whether function's backward survives inputs[changed] being changed in place between forward and
    backward (inputs: non-leaf copies of `leaves`): autograd refuses (what ctx.save_for_backward makes it
    do), or the gradients of function(*inputs).sum() are still those of reference(*leaves).sum()."""
    import torch

    inputs = [leaf * 1 for leaf in leaves]  # not leaves, so they may be changed in place
    output = function(*inputs)
    with torch.no_grad():
        inputs[changed].add_(1.0)
    try:
        got = torch.autograd.grad(output.sum(), leaves)
    except RuntimeError as error:
        if "modified by an inplace operation" in str(error):
            return True
        raise
    want = torch.autograd.grad(reference(*leaves).sum(), leaves)
    return all(torch.allclose(g, w) for g, w in zip(got, want))
