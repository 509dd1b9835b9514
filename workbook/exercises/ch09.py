"""Checks for chapter 09 (performance)."""

from __future__ import annotations

import functools
import re
import sys
import tempfile
import time
from pathlib import Path

from ..checking import Mistake, exercise, expect_close

# ---- 9.2 find and fix a slow loop ------------------------------------------------------------------


def group_means_slow(values, groups, num_groups: int):
    """The mean of `values` per group (0 for a group with no values), one group at a time."""
    import torch

    means = torch.zeros(num_groups, dtype=values.dtype)
    for group in range(num_groups):
        members = values[groups == group]
        if len(members):
            means[group] = members.mean()
    return means


def _group_cases():
    import torch

    generator = torch.Generator().manual_seed(9)
    cases = []
    for elements, num_groups, dtype in [(50, 8, torch.float32), (300, 40, torch.float64), (7, 12, torch.float32)]:
        groups = torch.randint(0, num_groups - 2, (elements,), generator=generator)  # the last two stay empty
        values = torch.randn(elements, generator=generator, dtype=dtype)
        cases.append((values, groups, num_groups))
    return cases


def python_steps(function, *args) -> int:
    """How many Python lines and calls `function(*args)` executed (torch's C++ loops do not count)."""
    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        steps += 1
        return count

    previous = sys.gettrace()
    sys.settrace(count)
    try:
        function(*args)
    finally:
        sys.settrace(previous)
    return steps


@exercise("9.2 find and fix a slow loop")
def check_group_means(group_means):
    """`group_means(values, groups, num_groups)` equals group_means_slow and runs no Python loop per group
    or element: the Python steps it takes must not grow with the input."""
    import torch

    for values, groups, num_groups in _group_cases():
        expect_close(
            group_means(values, groups, num_groups),
            group_means_slow(values, groups, num_groups),
            f"group_means for {len(values)} {values.dtype} values in {num_groups} groups",
        )
    generator = torch.Generator().manual_seed(1)
    small = (torch.randn(200, generator=generator), torch.randint(0, 20, (200,), generator=generator), 20)
    large = (torch.randn(20_000, generator=generator), torch.randint(0, 2_000, (20_000,), generator=generator), 2_000)
    small_steps, large_steps = python_steps(group_means, *small), python_steps(group_means, *large)
    if large_steps > small_steps + 20:
        raise Mistake(
            f"your function took {small_steps} Python steps for 200 values in 20 groups but {large_steps} "
            f"for 20,000 values in 2,000 groups: it still loops in Python. Let one torch call handle "
            f"every group at once (index_add_, scatter_add_ or bincount with weights)"
        )


# ---- 9.1 measure a claim properly -------------------------------------------------------------------


class _Steps:
    """Two statements for the check to time: `baseline_step()` sleeps twice as long as `ours_step()`.
    Each call is logged, so the check can see in which order they ran."""

    def __init__(self):
        self.log = []

    def ours_step(self):
        self.log.append("ours")
        time.sleep(0.001)

    def baseline_step(self):
        self.log.append("baseline")
        time.sleep(0.002)

    def stretches(self) -> list[str]:
        """The log with each stretch of calls to the same statement folded into one entry."""
        return [name for position, name in enumerate(self.log) if position == 0 or self.log[position - 1] != name]


@exercise("9.1 measure a claim properly")
def check_speedup(speedup):
    """`speedup(ours, baseline, env, threads, rounds)` times both statements with torch.utils.benchmark,
    in turn over `rounds` rounds, with `threads` threads, and returns (baseline median / ours median,
    ours' Measurement, baseline's Measurement)."""
    from torch.utils.benchmark import Measurement

    steps, threads, rounds = _Steps(), 3, 3
    result = speedup(
        "ours_step()",
        "baseline_step()",
        {"ours_step": steps.ours_step, "baseline_step": steps.baseline_step},
        threads,
        rounds,
    )
    if not isinstance(result, tuple) or len(result) != 3:
        raise Mistake(
            f"speedup should return a tuple (ratio, ours_measurement, baseline_measurement), "
            f"got {type(result).__name__}"
        )
    ratio, ours, baseline = result
    for name, measurement in (("ours", ours), ("baseline", baseline)):
        if not isinstance(measurement, Measurement):
            raise Mistake(
                f"the {name} measurement should be a torch.utils.benchmark Measurement (what "
                f"Timer.blocked_autorange returns), got {type(measurement).__name__}"
            )
    for name, measurement, statement in (("ours", ours, "ours_step()"), ("baseline", baseline, "baseline_step()")):
        if measurement.task_spec.stmt != statement:
            raise Mistake(f"the {name} measurement timed {measurement.task_spec.stmt!r}, expected {statement!r}")
        if measurement.task_spec.num_threads != threads:
            raise Mistake(
                f"the {name} statement ran with {measurement.task_spec.num_threads} thread(s), but "
                f"threads={threads} was asked for: pass num_threads=threads to Timer (its default is 1)"
            )
    expected_ratio = baseline.median / ours.median
    if not isinstance(ratio, float) or abs(ratio - expected_ratio) > 1e-9 * expected_ratio:
        raise Mistake(
            f"the ratio should be baseline's median / ours' median = {expected_ratio:.3f} (above 1: "
            f"ours is faster), got {ratio!r}"
        )
    stretches = steps.stretches()
    if min(stretches.count("ours"), stretches.count("baseline")) < rounds:
        raise Mistake(
            f"the two statements ran in {len(stretches)} stretch(es) ({' → '.join(stretches[:6])}"
            f"{' ...' if len(stretches) > 6 else ''}); with rounds={rounds}, time them in turn, "
            f"each at least {rounds} times, so that a disturbance of the machine hits both alike"
        )


# ---- 9.3 choose headers to cut a build's time -------------------------------------------------------

HEADERS_OP = r"""
at::Tensor positive_twice(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "positive_twice: x must be a floating-point tensor, got ", x.scalar_type());
  return at::clamp_min(x, 0).mul(2);
}

TORCH_LIBRARY_FRAGMENT(wb_ch09_headers, m) { m.def("positive_twice(Tensor x) -> Tensor", &positive_twice); }
"""
_REFERENCE_HEADERS = ("ATen/core/Tensor.h", "ATen/ops/clamp_min.h", "torch/library.h")
_SLACK = 1.1  # a header list may read this much more than the reference's


def with_headers(headers) -> str:
    return "".join(f"#include <{header}>\n" for header in headers) + HEADERS_OP


@functools.cache
def _reference_lines() -> int:
    from .. import compile_times

    return _preprocess(_REFERENCE_HEADERS, compile_times.compile_flags())


def _preprocess(headers, flags) -> int:
    from .. import compile_times

    with tempfile.TemporaryDirectory(prefix="ch09_headers_") as folder:
        source = Path(folder) / "positive_twice.cpp"
        source.write_text(with_headers(headers))
        return compile_times.preprocessed_lines(compile_times.compiler_command(), flags, source)


@exercise("9.3 choose headers to cut a build's time")
def check_minimal_headers(choose_headers):
    """`choose_headers()` returns a list of header names with which HEADERS_OP compiles, reading at most 10 %
    more lines than the smallest set the workbook knows."""
    from .. import compile_times

    headers = choose_headers()
    if (
        isinstance(headers, str)
        or not isinstance(headers, (list, tuple))
        or not headers
        or not all(isinstance(header, str) for header in headers)
    ):
        raise Mistake(
            f"headers should be a non-empty list of header names such as 'ATen/core/Tensor.h', got {headers!r}"
        )
    odd = [header for header in headers if header.startswith("#") or "<" in header or '"' in header]
    if odd:
        raise Mistake(f"write the header names alone, without #include, <> or quotes: {odd[0]!r}")
    flags = compile_times.compile_flags()
    try:
        lines = _preprocess(headers, flags)
    except RuntimeError as error:
        raise Mistake(f"the compiler cannot read these headers: {_first_error(error)}") from None
    limit = int(_reference_lines() * _SLACK)
    if lines > limit:
        raise Mistake(
            f"with these headers the compiler reads {lines:,} lines; the op needs at most {limit:,}. "
            f"Drop umbrella headers (torch/extension.h, torch/torch.h, ATen/ATen.h) and include the "
            f"class and the one function header the op uses"
        )
    with tempfile.TemporaryDirectory(prefix="ch09_headers_") as folder:
        Path(folder, "positive_twice.cpp").write_text(with_headers(headers))
        try:
            compile_times.run_compiler(
                compile_times.compiler_command(), [*flags, "-fsyntax-only", "positive_twice.cpp"], cwd=folder
            )
        except RuntimeError as error:
            raise Mistake(
                f"the op does not compile with these headers: {_first_error(error, with_headers(headers))}"
            ) from None


def _first_error(error: RuntimeError, source: str = "") -> str:
    """The compiler's first error line, followed by the source line it points at."""
    message = str(error).split(" failed: ", 1)[-1]
    where = re.match(r"positive_twice\.cpp:(\d+):", message)
    if where and source:
        message += f" (line {where[1]}: {source.splitlines()[int(where[1]) - 1].strip()[:60]})"
    return message
