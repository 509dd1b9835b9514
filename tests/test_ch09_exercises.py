"""Chapter 09's exercise checks pass on the solutions, say "not attempted" on the stubs, and explain
plausible wrong answers."""

import pytest
import torch
from torch.utils import benchmark

from workbook import checking
from workbook.exercises import ch09


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def status(outcome):
    return outcome.status, outcome.explanation


def assert_fails_saying(outcome, says):
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


# ---- 9.2 find and fix a slow loop --------------------------------------------------------------------


def group_means_solution(values, groups, num_groups):
    sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, groups, values)
    counts = torch.bincount(groups, minlength=num_groups).clamp(min=1)
    return sums / counts


def group_means_without_minlength(values, groups, num_groups):  # the empty groups at the end are missing
    sums = torch.zeros(int(groups.max()) + 1, dtype=values.dtype).index_add_(0, groups, values)
    return sums / torch.bincount(groups).clamp(min=1)


def group_means_dividing_by_zero(values, groups, num_groups):  # an empty group gives 0 / 0 = nan
    sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, groups, values)
    return sums / torch.bincount(groups, minlength=num_groups)


def group_means_including_the_zeros(values, groups, num_groups):  # include_self=True averages the 0 in too
    return torch.zeros(num_groups, dtype=values.dtype).scatter_reduce_(0, groups, values, "mean")


def group_means_comprehension(values, groups, num_groups):  # one masked mean per group, in a comprehension
    return torch.stack(
        [values[groups == g].mean() if (groups == g).any() else values.new_zeros(()) for g in range(num_groups)]
    )


def group_means_python_sums(values, groups, num_groups):  # the loop moved into plain Python lists
    sums, counts = [0.0] * num_groups, [0] * num_groups
    for value, group in zip(values.tolist(), groups.tolist()):
        sums[group] += value
        counts[group] += 1
    return torch.tensor([s / max(c, 1) for s, c in zip(sums, counts)], dtype=values.dtype)


def test_group_means_passes_on_the_solution():
    assert ch09.check_group_means(group_means_solution).passed


def test_group_means_stub_is_not_attempted():
    assert ch09.check_group_means(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (group_means_without_minlength, "has shape (6,), expected (8,)"),
        (group_means_dividing_by_zero, "expected 0, got nan"),
        (group_means_including_the_zeros, "group_means for 50 torch.float32 values in 8 groups is wrong at index (0,)"),
        (ch09.group_means_slow, "it still loops in Python"),
        (group_means_comprehension, "it still loops in Python"),
        (group_means_python_sums, "it still loops in Python"),
    ],
)
def test_group_means_explains_wrong_answers(wrong, says):
    assert_fails_saying(ch09.check_group_means(wrong), says)


# ---- 9.1 measure a claim properly --------------------------------------------------------------------


def best_measurement(statement, env, threads, min_run_time=0.02):
    return benchmark.Timer(statement, globals=env, num_threads=threads).blocked_autorange(min_run_time=min_run_time)


def speedup_solution(ours, baseline, env, threads, rounds):
    best = {}
    for _ in range(rounds):
        for statement in (ours, baseline):
            measurement = best_measurement(statement, env, threads)
            if statement not in best or measurement.median < best[statement].median:
                best[statement] = measurement
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_default_threads(ours, baseline, env, threads, rounds):  # Timer's default: one thread
    best = {s: benchmark.Timer(s, globals=env).blocked_autorange(min_run_time=0.02) for s in (ours, baseline)}
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_one_after_the_other(ours, baseline, env, threads, rounds):  # all rounds of ours, then of baseline
    best = {
        s: min((best_measurement(s, env, threads) for _ in range(rounds)), key=lambda m: m.median)
        for s in (ours, baseline)
    }
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_inverted(ours, baseline, env, threads, rounds):
    ratio, ours_measurement, baseline_measurement = speedup_solution(ours, baseline, env, threads, rounds)
    return 1 / ratio, ours_measurement, baseline_measurement


def speedup_swapped(ours, baseline, env, threads, rounds):
    ratio, ours_measurement, baseline_measurement = speedup_solution(ours, baseline, env, threads, rounds)
    return ratio, baseline_measurement, ours_measurement


def speedup_with_perf_counter(ours, baseline, env, threads, rounds):
    import time

    seconds = {}
    for statement in (ours, baseline):
        start = time.perf_counter()
        eval(statement, env)
        seconds[statement] = time.perf_counter() - start
    return seconds[baseline] / seconds[ours], seconds[ours], seconds[baseline]


def test_speedup_passes_on_the_solution():
    assert ch09.check_speedup(speedup_solution).passed


def test_speedup_stub_is_not_attempted():
    assert ch09.check_speedup(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (speedup_default_threads, "ran with 1 thread(s), but threads=3 was asked for"),
        (speedup_one_after_the_other, "ran in 2 stretch(es) (ours → baseline)"),
        (speedup_inverted, "the ratio should be baseline's median / ours' median"),
        (speedup_swapped, "the ours measurement timed 'baseline_step()'"),
        (speedup_with_perf_counter, "should be a torch.utils.benchmark Measurement"),
        (lambda *args: 2.0, "should return a tuple (ratio, ours_measurement, baseline_measurement)"),
    ],
)
def test_speedup_explains_wrong_answers(wrong, says):
    assert_fails_saying(ch09.check_speedup(wrong), says)


# ---- 9.3 choose headers to cut a build's time ---------------------------------------------------------


def minimal_headers_solution():
    return ["ATen/core/Tensor.h", "ATen/ops/clamp_min.h", "torch/library.h"]


def test_minimal_headers_pass_on_the_solution():
    assert ch09.check_minimal_headers(minimal_headers_solution).passed


def test_minimal_headers_stub_is_not_attempted():
    assert ch09.check_minimal_headers(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (["torch/extension.h"], "Drop umbrella headers"),  # compiles, but reads twice the lines it needs
        (["ATen/core/Tensor.h", "torch/library.h"], "'clamp_min' is not a member of 'at'"),  # the function's header
        (
            ["ATen/core/Tensor.h", "ATen/ops/clamp_min.h"],
            "(line 9: TORCH_LIBRARY_FRAGMENT(wb_ch09_headers, m)",
        ),  # the registration's header
        (["ATen/core/tensor.h", "torch/library.h"], "cannot read these headers: positive_twice.cpp:1:10: fatal error"),
        (["#include <torch/library.h>"], "without #include"),
        ("torch/library.h", "a non-empty list of header names"),
    ],
)
def test_minimal_headers_explain_wrong_answers(wrong, says):
    assert_fails_saying(ch09.check_minimal_headers(lambda: wrong), says)
