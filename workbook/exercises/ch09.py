"""Checks for chapter 09 (performance)."""

from __future__ import annotations

import contextlib
import math
import random
import re
import sys
import time

from workbook.course.checking import Mistake, exercise, expect_close, watched

# ---- 9.1 measure a claim properly -------------------------------------------------------------------

# The kinds of round the check's clock knows, per statement: (seconds per call, the disturbance of some of its
# blocks, a block being the `number` calls a Timer times as one). A Timer first estimates how many calls a block
# needs (blocks of 1, 10, 100, ... calls); the first block of a round whose `number` repeats the one before is
# the first it keeps, and that block and every 5th after it are disturbed:
# * ("slow", extra): an interruption; the block's calls take `extra` seconds more each;
# * ("lucky", seconds): the block runs at `seconds` per call.
# One kept block in three at most (in the shortest Measurement that counts), so that the median of a round
# stays its typical call, whatever the Timer does; in longer ones, one in five, so that quantiles from the 25th
# to the 75th stay there too.
_ROUND_KINDS = {
    "fastest": (0.002, ("slow", 0.004)),  # the lowest median; its slow blocks lift its mean above "lucky"'s
    "lucky": (0.003, ("lucky", 0.0003)),  # the lowest mean and the fastest single block
    "busy": (0.005, ("slow", 0.010)),  # the slowest blocks and the widest spread
    "plain": (0.006, None),  # the highest median
}
_SCALE = {"ours": 1.0, "baseline": 2.0}  # baseline's calls take twice as long: a ratio of 2
# Two layouts with the same number of rounds, run in a random order: the fastest round is never the first or
# the last, and no round number and no statistic but a robust middle of the blocks finds it in both.
_LAYOUTS = (
    {"ours": ("busy", "lucky", "fastest", "plain"), "baseline": ("lucky", "fastest", "plain", "busy")},
    {"ours": ("plain", "fastest", "busy", "lucky"), "baseline": ("busy", "plain", "fastest", "lucky")},
)
_DISTURBED_EVERY = 5
_FEWEST_BLOCKS = 3  # in a Measurement that counts: the median of two is their average
_MOST_BLOCKS = 20_000  # per round: a Timer that never stops (adaptive_autorange without max_run_time, say)
_STATEMENTS = {"ours": "ours_step()", "baseline": "baseline_step()"}


class _Steps:
    """The two statements the check times, under one layout of rounds. A call belongs to a round: the calls
    of one statement in a row, up to the first call of the other. A call takes no real time: it advances the
    check's clock by its round's time per call, and a Timer of these statements reads that clock (see
    `timers_on_this_clock`), which also applies the round's disturbance to some of its blocks. So what each
    round measures is known exactly, however busy the machine is. Each call is logged, so the
    check can see the order the statements ran in."""

    def __init__(self, layout):
        self.layout = layout
        self.clock = 0.0
        self.log = []  # the statement of each call, in order
        self.rounds = {"ours": -1, "baseline": -1}
        self.blocks = {}  # (statement, round) -> [blocks a Timer timed in it, the last block's number, the first kept]
        self.measured = []  # (Measurement, its task, its times as returned, its turn) for every one a Timer returned
        self.used_side_by_side = False
        self.timing = set()  # the statements whose block is being timed now
        self.turns = 0  # stretches of calls so far

    @property
    def rounds_asked(self) -> int:
        return len(self.layout["ours"])

    def ours_step(self):
        self._call("ours")

    def baseline_step(self):
        self._call("baseline")

    def _call(self, name):
        if not self.log or self.log[-1] != name:
            self.rounds[name] += 1
            self.turns += 1
        self.clock += self._round(name)[0]
        self.log.append(name)

    def _round(self, name):
        kinds = self.layout[name]
        per_call, disturbance = _ROUND_KINDS[kinds[min(self.rounds[name], len(kinds) - 1)]]
        if disturbance is None:
            return per_call * _SCALE[name], None
        kind, seconds = disturbance
        return per_call * _SCALE[name], (kind, seconds * _SCALE[name])

    def _block_seconds(self, name, number: int, seconds: float) -> float:
        """What a block of `number` calls of `name` that took `seconds` on the clock measures, with its
        round's disturbance; the clock moves on by the difference."""
        _, disturbance = self._round(name)
        counts = self.blocks.setdefault((name, self.rounds[name]), [0, None, None])
        counts[0] += 1
        if number == counts[1] and counts[2] is None:
            counts[2] = counts[0]
        counts[1] = number
        if counts[0] > _MOST_BLOCKS:
            raise Mistake(
                f"a Timer timed {_STATEMENTS[name]!r} in more than {_MOST_BLOCKS:,} blocks in one round without "
                f"stopping: use blocked_autorange, or give adaptive_autorange a max_run_time"
            )
        if disturbance is None or counts[2] is None or (counts[0] - counts[2]) % _DISTURBED_EVERY:
            return seconds
        kind, value = disturbance
        disturbed = seconds + number * value if kind == "slow" else number * value
        self.clock += disturbed - seconds
        return disturbed

    def stretches(self) -> list[str]:
        """The statements in the order they ran, each stretch of calls to the same one folded into one."""
        return [name for position, name in enumerate(self.log) if position == 0 or self.log[position - 1] != name]

    @contextlib.contextmanager
    def timers_on_this_clock(self):
        """Meanwhile, torch.utils.benchmark.Timer times the two statements on this clock (every Timer
        method times through Timer._timeit); other statements keep the real clock. Every Measurement a
        Timer returns meanwhile is kept in `self.measured` with the task it was made for, and a call made
        from inside workbook.chapters.performance.side_by_side is noted in `self.used_side_by_side`."""
        from torch.utils.benchmark import Timer

        real_timeit = Timer._timeit
        real_methods = {name: getattr(Timer, name) for name in ("timeit", "blocked_autorange", "adaptive_autorange")}
        names = {statement: name for name, statement in _STATEMENTS.items()}

        def timeit(timer, number):
            statement = timer._task_spec.stmt
            if statement not in names:
                return real_timeit(timer, number)
            self.used_side_by_side = self.used_side_by_side or _called_from_side_by_side()
            if self.timing - {statement}:
                raise Mistake(
                    f"{statement!r} was timed while {', '.join(map(repr, self.timing))} was being timed (two "
                    f"threads?): time the statements in turn, one at a time, so that each has the machine to itself"
                )
            self.timing.add(statement)
            start, calls_before = self.clock, len(self.log)
            try:
                real_timeit(timer, number)  # runs the statement `number` times
            finally:
                self.timing.discard(statement)
            if number == 0:
                return 1e-9  # Timer's floor for a block's time: it estimates its own overhead this way
            if len(self.log) == calls_before:
                raise Mistake(
                    f"a Timer of {statement!r} ran it {number} time(s) without calling the check's "
                    f"function {statement[:-2]}: give Timer globals=env, the "
                    f"dictionary the check passed to speedup"
                )
            return self._block_seconds(names[statement], number, self.clock - start)

        def recording(method):
            def measure(timer, *args, **kwargs):
                turns_before = self.turns
                measurement = method(timer, *args, **kwargs)
                if self.turns - turns_before > 1:
                    raise Mistake(
                        f"while a Timer measured {timer._task_spec.stmt!r}, the other statement ran too (two "
                        f"threads?): time the statements in turn, one Measurement at a time, so that each has the "
                        f"machine to itself"
                    )
                returned = (tuple(measurement.raw_times), measurement.number_per_run)
                self.measured.append((measurement, measurement.task_spec, returned, self.turns))
                return measurement

            return measure

        Timer._timeit = timeit
        for name, method in real_methods.items():
            setattr(Timer, name, recording(method))
        try:
            yield
        finally:
            Timer._timeit = real_timeit
            for name, method in real_methods.items():
                setattr(Timer, name, method)

    def made_by_a_timer(self, measurement) -> bool:
        """Is `measurement` one a Timer returned during the check, with the task and the times it had then?"""
        return any(
            measurement is made
            and measurement.task_spec is task
            and (tuple(measurement.raw_times), measurement.number_per_run) == returned
            for made, task, returned, _ in self.measured
        )


def _called_from_side_by_side() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "side_by_side" and code.co_filename.endswith("performance.py"):
            return True
        frame = frame.f_back
    return False


@exercise("9.1 measure a claim properly")
def check_speedup(speedup):
    """`speedup(ours, baseline, env, threads, rounds)` times both statements with torch.utils.benchmark,
    in turn over `rounds` rounds, with `threads` threads, keeps each statement's Measurement with the lowest
    median and returns (baseline median / ours median, ours' Measurement, baseline's Measurement). Run once
    per layout of rounds."""
    for layout in random.SystemRandom().sample(_LAYOUTS, len(_LAYOUTS)):
        _check_speedup_on(speedup, _Steps(layout))


def _check_speedup_on(speedup, steps: _Steps) -> None:
    from torch.utils.benchmark import Measurement

    threads, rounds = 3, steps.rounds_asked
    env = {"ours_step": lambda: steps.ours_step(), "baseline_step": lambda: steps.baseline_step()}
    with steps.timers_on_this_clock():
        result = speedup(_STATEMENTS["ours"], _STATEMENTS["baseline"], env, threads, rounds)
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
    for name, measurement in (("ours", ours), ("baseline", baseline)):
        statement = _STATEMENTS[name]
        if measurement.task_spec.stmt != statement:
            raise Mistake(f"the {name} measurement timed {measurement.task_spec.stmt!r}, expected {statement!r}")
        if measurement.task_spec.num_threads != threads:
            raise Mistake(
                f"the {name} statement ran with {measurement.task_spec.num_threads} thread(s), but "
                f"threads={threads} was asked for: pass num_threads=threads to Timer (its default is 1)"
            )
    stretches = steps.stretches()
    if not stretches:
        raise Mistake(
            "your speedup never ran the two statements: time them with Timer(...).blocked_autorange() instead "
            "of making Measurements up"
        )
    if steps.used_side_by_side:
        raise Mistake(
            "your speedup calls workbook.chapters.performance.side_by_side, which does the whole exercise: write the "
            "rounds yourself, with torch.utils.benchmark.Timer"
        )
    for name, measurement in (("ours", ours), ("baseline", baseline)):
        if not steps.made_by_a_timer(measurement):
            raise Mistake(
                f"the {name} measurement is not one a Timer returned while the check ran, as it returned it (built "
                f"by hand, copied, merged, relabelled or its times changed): return the Measurement that "
                f"Timer(...).blocked_autorange() gave you"
            )
        if len(measurement.raw_times) < _FEWEST_BLOCKS:
            raise Mistake(
                f"the {name} measurement holds {len(measurement.raw_times)} timed block(s) of calls, and the "
                f"median of fewer than three is no more than their average: let Timer time several blocks "
                f"(blocked_autorange or adaptive_autorange, with a min_run_time long enough)"
            )
    expected_ratio = baseline.median / ours.median
    if not isinstance(ratio, float) or abs(ratio - expected_ratio) > 1e-9 * expected_ratio:
        raise Mistake(
            f"the ratio should be baseline's median / ours' median = {expected_ratio:.3f} (above 1: "
            f"ours is faster), got {ratio!r}"
        )
    if min(stretches.count("ours"), stretches.count("baseline")) < rounds:
        raise Mistake(
            f"the two statements ran in {len(stretches)} stretch(es) ({' → '.join(stretches[:6])}"
            f"{' ...' if len(stretches) > 6 else ''}); with rounds={rounds}, alternate them (ours, baseline, "
            f"ours, ...) so that each runs in {rounds} separate turns at least, and a disturbance of the machine "
            f"hits both alike"
        )
    for name, measurement in (("ours", ours), ("baseline", baseline)):
        counted = [
            (made, turn)
            for made, task, _, turn in steps.measured
            if task.stmt == _STATEMENTS[name] and len(made.raw_times) >= _FEWEST_BLOCKS
        ]
        turns = {turn for _, turn in counted}
        counted = [made for made, _ in counted]
        if len(turns) < rounds:
            raise Mistake(
                f"your Timers measured {_STATEMENTS[name]!r} (three blocks or more) in {len(turns)} of its turns; "
                f"with rounds={rounds}, make one such Measurement of each statement per round, in turn, and keep "
                f"the best: calls made outside a Timer are not measured"
            )
        lowest_median = min(counted, key=lambda made: made.median)
        if math.isclose(measurement.median, lowest_median.median, rel_tol=1e-9):
            continue
        also = [
            what
            for what, key in (
                ("the lowest mean", lambda made: made.mean),
                ("the fastest single block", lambda made: min(made.raw_times) / made.number_per_run),
            )
            if measurement is min(counted, key=key)
        ]
        why = (
            f" (the one you kept has {' and '.join(also)}: a few slow blocks, the machine busy for a moment, pull "
            f"a mean up, one lucky block says little, and the median stays with the typical call)"
            if also
            else ""
        )
        raise Mistake(
            f"the {name} measurement you kept has a median of {measurement.median * 1e3:.2f} ms, but another "
            f"Measurement of that statement (three blocks or more: a round, or a warm-up that long) measured "
            f"{lowest_median.median * 1e3:.2f} ms: keep, for each statement, the Measurement with the lowest median "
            f"over the rounds, the one the machine disturbed least{why}"
        )


# ---- 9.2 find and fix a slow loop ------------------------------------------------------------------

SPEED_LIMIT = 100  # a correct answer may take up to this many times the reference solution's time
_SPEED_VALUES, _SPEED_GROUPS = 10_000, 2_000


def group_means_slow(values, groups, num_groups: int):
    """The mean of `values` per group (0 for a group with no values), one group at a time."""
    import torch

    means = torch.zeros(num_groups, dtype=values.dtype)
    for group in range(num_groups):
        members = values[groups == group]
        if len(members):
            means[group] = members.mean()
    return means


def _draw_groups(generator, elements: int, num_groups: int):
    """`elements` group ids in [0, num_groups), drawn from a random three quarters of the ids, so that
    some groups inside the range stay empty, and never the last one, so that the output's end is
    an empty group too."""
    import torch

    used = torch.randperm(num_groups - 1, generator=generator)[: max(1, 3 * (num_groups - 1) // 4)]
    return used[torch.randint(0, len(used), (elements,), generator=generator)]


def _seconds_per_call(function, args, budget: float = 0.005, calls: int = 3, patience: float = 0.05) -> float:
    """The least CPU time (of this process, all its threads) of at least `calls` calls made within about
    `budget` CPU seconds (fewer once `patience` seconds are spent). CPU time, not the clock on the wall: on
    a busy machine a call that is preempted waits, but uses no CPU meanwhile; and noise only makes a call
    slower, so the fastest one is the least disturbed."""
    fastest, spent, made = math.inf, 0.0, 0
    while (made < calls or spent < budget) and not (made and spent > patience):
        start = time.process_time()
        function(*args)
        seconds = time.process_time() - start
        fastest, spent, made = min(fastest, seconds), spent + seconds, made + 1
    return fastest


class _TooManySteps(Exception):
    pass


def _result_and_python_steps(function, *args, limit: float = math.inf):
    """(`function(*args)`, how many Python lines and calls it executed; torch's C++ loops do not count).
    Raises _TooManySteps as soon as it has taken more than `limit` steps, so that a long loop ends early."""
    steps = 0

    def count(frame, event, arg):
        nonlocal steps
        steps += 1
        if steps > limit:
            raise _TooManySteps
        return count

    with watched(sys.settrace, count):
        result = function(*args)
    return result, steps


def _speed_against_reference(group_means, values, groups, num_groups: int, rounds: int = 5):
    """(ratio, your seconds, the reference's seconds, rounds timed): your function and the reference
    solution timed in turn, one thread each, each side's fastest call over the rounds so far. The timing
    ends as soon as the ratio is within SPEED_LIMIT, or ten times beyond it. `group_means` is called on
    these inputs once first, so that first-call costs (a compilation, say) are paid before the clock runs."""
    import torch

    def reference(values, groups, num_groups):
        sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, groups, values)
        return sums / torch.bincount(groups, minlength=num_groups).clamp(min=1)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        args = (values, groups, num_groups)
        group_means(*args)
        ours = theirs = math.inf
        timed = 0
        while timed < rounds:
            timed += 1
            ours = min(ours, _seconds_per_call(reference, args))
            theirs = min(theirs, _seconds_per_call(group_means, args))
            if theirs <= SPEED_LIMIT * ours or theirs > 10 * SPEED_LIMIT * ours:
                break
        return theirs / ours, theirs, ours, timed
    finally:
        torch.set_num_threads(threads)


@exercise("9.2 find and fix a slow loop")
def check_group_means(group_means):
    """`group_means(values, groups, num_groups)` returns what group_means_slow returns, on inputs drawn
    now (float32 and float64, empty groups inside and at the end, no values at all, non-contiguous
    inputs, sizes beyond the notebook's), without changing its inputs; runs no Python loop (the Python
    steps it takes are the same, within a few, for every input drawn); and takes at most SPEED_LIMIT times the CPU time of the
    reference solution, the two timed side by side."""
    import torch

    generator = torch.Generator().manual_seed(9)

    def expected(values, groups, num_groups):  # what group_means_slow returns, in float64 and without a loop
        sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, groups, values.double())
        return (sums / torch.bincount(groups, minlength=num_groups).clamp(min=1)).to(values.dtype)

    def case(elements, num_groups, dtype, contiguous=True):
        groups = _draw_groups(generator, elements, num_groups)
        values = (torch.randn(elements, 2, generator=generator, dtype=dtype) * 10)[:, 1]  # every second one
        if contiguous:
            values = values.contiguous()
        else:
            groups = torch.stack([groups, groups], dim=1)[:, 0]
        layout = "" if contiguous else " non-contiguous"
        return (
            values,
            groups,
            num_groups,
            f"group_means for {elements:,}{layout} {values.dtype} values in {num_groups:,} groups",
        )

    def expect_right(values, groups, num_groups, what, result=None):
        before = values.clone(), groups.clone()
        result = group_means(values, groups, num_groups) if result is None else result
        expect_close(result, expected(values, groups, num_groups), what)
        if not (torch.equal(values, before[0]) and torch.equal(groups, before[1])):
            raise Mistake(f"{what}: your function changed its input values or groups; leave them as they are")

    def loops(fewest, fewest_what, more, more_what):
        return Mistake(
            f"your function took {fewest:,} Python steps for {fewest_what.removeprefix('group_means for ')} but "
            f"{more} for {more_what.removeprefix('group_means for ')}: it still loops in Python, over the groups "
            f"or the values, at least for some inputs. Let one torch call handle every group at once "
            f"(index_add_, scatter_add_ or bincount with weights)"
        )

    cases = (
        case(7, 12, torch.float32),
        case(0, 5, torch.float32),
        case(100, 20, torch.float32),
        case(1_000, 200, torch.float32),
        case(3_001, 1_234, torch.float64, contiguous=False),
    )
    for args in cases:
        expect_right(*args)
    # Steps counted on a second call of each input, so that first-call costs (a compilation) do not count.
    steps_taken = {args[3]: _result_and_python_steps(group_means, *args[:3])[1] for args in cases}
    fewest, most = min(steps_taken, key=steps_taken.get), max(steps_taken, key=steps_taken.get)
    if steps_taken[most] > steps_taken[fewest] + 20:
        raise loops(steps_taken[fewest], fewest, f"{steps_taken[most]:,}", most)
    values, groups, num_groups = case(_SPEED_VALUES, _SPEED_GROUPS, torch.float32)[:3]
    ratio, yours, reference, rounds = _speed_against_reference(group_means, values, groups, num_groups)
    if ratio > SPEED_LIMIT:
        raise Mistake(
            f"correct, but too slow: for {len(values):,} values in {num_groups:,} groups your group_means took "
            f"{yours * 1e3:.2f} ms, {ratio:,.0f} times the reference solution's {reference * 1e3:.3f} ms (the "
            f"best of {rounds} round{'s' if rounds > 1 else ''}, timed side by side in CPU time); at most {SPEED_LIMIT} times is allowed. A "
            f"loop over the groups (in TorchScript, or through map), or a [groups, values] mask, does far more "
            f"work than one scatter: let one call add every value to its group (index_add_, scatter_add_, or "
            f"bincount with weights) and one count every group's members"
        )
    # The largest input: its steps counted on the first call, which stops early if it loops.
    *args, what = case(60_000, 7_000, torch.float32)
    try:
        result, _ = _result_and_python_steps(group_means, *args, limit=steps_taken[most] + 20)
    except _TooManySteps:
        raise loops(steps_taken[fewest], fewest, f"more than {steps_taken[most] + 20:,}", what) from None
    expect_right(*args, what, result=result)


# ---- 9.3 choose headers to cut a build's time -------------------------------------------------------

HEADERS_OP = r"""
at::Tensor positive_twice(const at::Tensor& x) {
  TORCH_CHECK(x.is_floating_point(), "positive_twice: x must be a floating-point tensor, got ", x.scalar_type());
  return at::clamp_min(x, 0).mul(2);
}

TORCH_LIBRARY_FRAGMENT(wb_ch09_headers, m) { m.def("positive_twice(Tensor x) -> Tensor", &positive_twice); }
"""
_SLACK = 1.1  # a header list may read this much more than the smallest one the workbook knows
_HEADER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*")


def with_headers(headers) -> str:
    return "".join(f"#include <{header}>\n" for header in headers) + HEADERS_OP


def _smallest_known_lines() -> int:
    """How many lines the compiler reads for HEADERS_OP with the smallest header set the workbook knows."""
    from workbook.diagnostics import compile_times

    return compile_times.preprocessed_size(
        with_headers(["ATen/core/Tensor.h", "ATen/ops/clamp_min.h", "torch/library.h"])
    )


@exercise("9.3 choose headers to cut a build's time")
def check_minimal_headers(choose_headers):
    """`choose_headers()` returns a list of header names with which HEADERS_OP compiles, reading at most 10 %
    more lines than the smallest set the workbook knows."""
    from workbook.diagnostics import compile_times

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
    odd = [header for header in headers if not _HEADER_NAME.fullmatch(header)]
    if odd:
        raise Mistake(
            f"write each header as a path alone, such as 'torch/library.h' (letters, digits, _ . + - /; no "
            f"#include, <>, quotes, spaces or new lines): {odd[0]!r}"
        )
    climbing = [header for header in headers if ".." in header.split("/")]
    if climbing:
        raise Mistake(
            f"name torch's headers as they are found under its include folders, without '..': {climbing[0]!r} "
            f"climbs out of them"
        )
    source = with_headers(headers)
    try:
        lines = compile_times.preprocessed_size(source)
    except RuntimeError as error:
        raise Mistake(f"the compiler cannot read these headers: {_first_error(error)}") from None
    limit = int(_smallest_known_lines() * _SLACK)
    if lines > limit:
        raise Mistake(
            f"with these headers the compiler reads {lines:,} lines, more than the {limit:,} allowed (10 % above "
            f"the smallest set the workbook knows). "
            f"Drop umbrella headers (torch/extension.h, torch/torch.h, ATen/ATen.h) and include the "
            f"class and the one function header the op uses"
        )
    error = compile_times.syntax_error(source)
    if error:
        raise Mistake(f"the op does not compile with these headers: {_first_error(error, source)}")


def _first_error(error, source: str = "") -> str:
    """The compiler's first error line, followed by the source line it points at."""
    message = str(error).split(" failed: ", 1)[-1]
    where = re.match(r"(?:positive_twice|source)\.cpp:(\d+):", message)
    if where and source:
        message += f" (line {where[1]}: {source.splitlines()[int(where[1]) - 1].strip()[:60]})"
    return message
