"""Chapter 09's exercise checks pass on the solutions (and on other right answers, on a busy machine too),
say "not attempted" on the stubs, and reject the catalogue of wrong and cheating answers, saying why."""

import functools
import statistics
import subprocess
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import wrong_answers
from torch.utils import benchmark
from wrong_answers import WrongAnswer

from workbook.course import checking
from workbook.exercises import ch09


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


@pytest.fixture
def busy_machine():
    """Four processes that spin for as long as the test runs: more than this machine's cores."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    time.sleep(0.2)
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


# ---- 9.1 measure a claim properly --------------------------------------------------------------------


def measure(statement, env, threads):
    return benchmark.Timer(statement, globals=env, num_threads=threads).blocked_autorange(min_run_time=0.05)


def speedup_keeping(choose):
    """A speedup that times the statements in turn, as asked, and keeps the round `choose` picks."""

    def speedup(ours, baseline, env, threads, rounds):
        kept = {ours: [], baseline: []}
        for _ in range(rounds):
            for statement in (ours, baseline):
                kept[statement].append(measure(statement, env, threads))
        chosen = {statement: choose(measurements) for statement, measurements in kept.items()}
        return chosen[baseline].median / chosen[ours].median, chosen[ours], chosen[baseline]

    return speedup


speedup_solution = speedup_keeping(lambda measurements: min(measurements, key=lambda m: m.median))


def speedup_three_rounds_always(ours, baseline, env, threads, rounds):  # `rounds` ignored
    return speedup_solution(ours, baseline, env, threads, 3)


def speedup_default_threads(ours, baseline, env, threads, rounds):  # Timer's default: one thread
    best = {s: benchmark.Timer(s, globals=env).blocked_autorange(min_run_time=0.05) for s in (ours, baseline)}
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_one_after_the_other(ours, baseline, env, threads, rounds):  # all rounds of ours, then of baseline
    best = {s: min((measure(s, env, threads) for _ in range(rounds)), key=lambda m: m.median) for s in (ours, baseline)}
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_inverted(ours, baseline, env, threads, rounds):
    ratio, ours_measurement, baseline_measurement = speedup_solution(ours, baseline, env, threads, rounds)
    return 1 / ratio, ours_measurement, baseline_measurement


def speedup_with_perf_counter(ours, baseline, env, threads, rounds):
    seconds = {}
    for statement in (ours, baseline):
        start = time.perf_counter()
        eval(statement, env)
        seconds[statement] = time.perf_counter() - start
    return seconds[baseline] / seconds[ours], seconds[ours], seconds[baseline]


def speedup_made_up(ours, baseline, env, threads, rounds):  # Measurements built by hand, nothing timed
    def made_up(statement, seconds):
        spec = benchmark.utils.common.TaskSpec(statement, "pass", num_threads=threads)
        return benchmark.Measurement(number_per_run=1, raw_times=[seconds], task_spec=spec)

    return 2.0, made_up(ours, 0.002), made_up(baseline, 0.004)


def speedup_through_side_by_side(ours, baseline, env, threads, rounds):  # the workbook's helper does it all
    from workbook.chapters import performance

    kept = performance.side_by_side({"ours": ours, "baseline": baseline}, env, threads, rounds)
    return kept["baseline"].median / kept["ours"].median, kept["ours"], kept["baseline"]


def speedup_from_the_checks_seconds(ours, baseline, env, threads, rounds):  # takes turns, reports the check's data
    for _ in range(rounds):
        for statement in (ours, baseline):
            measure(statement, env, threads)

    def made_up(statement, seconds):
        spec = benchmark.utils.common.TaskSpec(statement, "pass", num_threads=threads)
        return benchmark.Measurement(number_per_run=1, raw_times=[seconds], task_spec=spec)

    fastest = {name: ch09._ROUND_KINDS["fastest"][0] * ch09._SCALE[name] for name in ("ours", "baseline")}
    return fastest["baseline"] / fastest["ours"], made_up(ours, fastest["ours"]), made_up(baseline, fastest["baseline"])


def speedup_relabelled(ours, baseline, env, threads, rounds):  # one thread, then the task relabelled as asked
    def relabelled(statement):
        measurement = benchmark.Timer(statement, globals=env).blocked_autorange(min_run_time=0.05)
        measurement.task_spec = benchmark.utils.common.TaskSpec(statement, "pass", num_threads=threads)
        return measurement

    best = {}
    for _ in range(rounds):
        for statement in (ours, baseline):
            measurement = relabelled(statement)
            if statement not in best or measurement.median < best[statement].median:
                best[statement] = measurement
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_timed_with(timing):
    """A speedup that takes turns and keeps the lowest median, each Measurement `timing(timer)`."""

    def speedup(ours, baseline, env, threads, rounds):
        best = {}
        for _ in range(rounds):
            for statement in (ours, baseline):
                measurement = timing(benchmark.Timer(statement, globals=env, num_threads=threads))
                if statement not in best or measurement.median < best[statement].median:
                    best[statement] = measurement
        return best[baseline].median / best[ours].median, best[ours], best[baseline]

    return speedup


speedup_single_calls = speedup_timed_with(lambda timer: timer.timeit(1))  # one call per round
speedup_one_block_each = speedup_timed_with(lambda timer: timer.timeit(100))  # one block of 100 calls per round


def speedup_with_its_own_globals(ours, baseline, env, threads, rounds):  # times stand-ins, not the check's steps
    stand_ins = {"ours_step": lambda: None, "baseline_step": lambda: None}
    kept = {}
    for _ in range(rounds):
        for statement in (ours, baseline):
            kept[statement] = measure(statement, stand_ins, threads)
    return kept[baseline].median / kept[ours].median, kept[ours], kept[baseline]


def speedup_reading_the_first_layout(ours, baseline, env, threads, rounds):
    layout = ch09._LAYOUTS[0]
    fastest = {statement: layout[name].index("fastest") for statement, name in ((ours, "ours"), (baseline, "baseline"))}
    kept = {ours: [], baseline: []}
    for _ in range(rounds):
        for statement in (ours, baseline):
            kept[statement].append(measure(statement, env, threads))
    chosen = {statement: kept[statement][fastest[statement]] for statement in kept}
    return chosen[baseline].median / chosen[ours].median, chosen[ours], chosen[baseline]


def speedup_rounds_outside_the_timer(ours, baseline, env, threads, rounds):
    kept = {statement: measure(statement, env, threads) for statement in (ours, baseline)}
    for _ in range(rounds):
        eval(ours, env)
        eval(baseline, env)
    return kept[baseline].median / kept[ours].median, kept[ours], kept[baseline]


def test_speedup_passes_with_warm_ups_a_reused_timer_and_adaptive_autorange():
    def speedup(ours, baseline, env, threads, rounds):
        timers = {
            statement: benchmark.Timer(statement, globals=env, num_threads=threads) for statement in (ours, baseline)
        }
        best = {}
        for round_number in range(rounds + 1):
            for statement, timer in timers.items():
                timer.timeit(1), timer.timeit(100)  # warm-ups: one block each, not candidates
                measurement = (
                    timer.adaptive_autorange(min_run_time=0.1, max_run_time=None)
                    if round_number % 2
                    else timer.blocked_autorange(min_run_time=0.05)
                )
                if statement not in best or measurement.median < best[statement].median:
                    best[statement] = measurement
        return best[baseline].median / best[ours].median, best[ours], best[baseline]

    assert ch09.check_speedup(speedup).passed


def speedup_in_two_threads(ours, baseline, env, threads, rounds):  # both statements at once, each round
    both_ready = threading.Barrier(2)
    # Each call pauses for half a millisecond, long enough for the other thread to run: the Measurements overlap.
    yielding = {name: lambda step=step: (step(), time.sleep(0.0005)) for name, step in env.items()}

    def measured(statement):
        timer = benchmark.Timer(statement, globals=yielding, num_threads=threads)
        both_ready.wait()
        return timer.blocked_autorange(min_run_time=0.05)

    best = {}
    with ThreadPoolExecutor(2) as pool:
        for _ in range(rounds):
            futures = {statement: pool.submit(measured, statement) for statement in (ours, baseline)}
            for statement, future in futures.items():
                measurement = future.result()
                if statement not in best or measurement.median < best[statement].median:
                    best[statement] = measurement
    return best[baseline].median / best[ours].median, best[ours], best[baseline]


def speedup_with_its_times_rewritten(ours, baseline, env, threads, rounds):  # takes turns, then edits the times
    _, kept_ours, kept_baseline = speedup_keeping(lambda measurements: measurements[-1])(
        ours, baseline, env, threads, rounds
    )
    kept_ours.raw_times[:] = [0.001 * kept_ours.number_per_run] * 3
    kept_baseline.raw_times[:] = [0.002 * kept_baseline.number_per_run] * 3
    return 2.0, kept_ours, kept_baseline


def test_speedup_passes_on_the_solution():
    assert ch09.check_speedup(speedup_solution).passed


def test_speedup_check_gives_timer_its_real_clock_back():
    real = {
        name: benchmark.Timer.__dict__[name]
        for name in ("_timeit", "timeit", "blocked_autorange", "adaptive_autorange")
    }
    ch09.check_speedup(speedup_solution)
    ch09.check_speedup(stub)
    assert {name: benchmark.Timer.__dict__[name] for name in real} == real


def test_speedup_stub_is_not_attempted():
    assert ch09.check_speedup(stub).status == checking.NOT_ATTEMPTED


# ---- 9.2 find and fix a slow loop --------------------------------------------------------------------


def group_means_solution(values, groups, num_groups):
    sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, groups, values)
    counts = torch.bincount(groups, minlength=num_groups).clamp(min=1)
    return sums / counts


def group_means_scatter_reduce(values, groups, num_groups):
    return torch.zeros(num_groups, dtype=values.dtype).scatter_reduce_(0, groups, values, "mean", include_self=False)


def group_means_weighted_bincount(values, groups, num_groups):
    sums = torch.bincount(groups, weights=values, minlength=num_groups)
    return (sums / torch.bincount(groups, minlength=num_groups).clamp(min=1)).to(values.dtype)


def group_means_unique(values, groups, num_groups):  # sorts the ids: slower than one scatter, still no loop
    present, position, counts = torch.unique(groups, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(present), dtype=values.dtype).index_add_(0, position, values)
    return torch.zeros(num_groups, dtype=values.dtype).index_put_((present,), sums / counts)


def group_means_sparse(values, groups, num_groups):  # a [groups, values] sparse matrix, summed along its rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that sparse invariants are not checked
        positions = torch.stack([groups, torch.arange(len(groups))])
        sums = torch.sparse_coo_tensor(positions, values, (num_groups, len(values))).sum(1).to_dense()
    return sums / torch.bincount(groups, minlength=num_groups).clamp(min=1)


def group_means_without_minlength(values, groups, num_groups):  # the empty groups at the end are missing
    sums = torch.zeros(int(groups.max()) + 1, dtype=values.dtype).index_add_(0, groups, values)
    return sums / torch.bincount(groups).clamp(min=1)


def group_means_dividing_by_zero(values, groups, num_groups):  # an empty group gives 0 / 0 = nan
    sums = torch.zeros(num_groups, dtype=values.dtype).index_add_(0, groups, values)
    return sums / torch.bincount(groups, minlength=num_groups)


def group_means_including_the_zeros(values, groups, num_groups):  # include_self=True averages the 0 in too
    return torch.zeros(num_groups, dtype=values.dtype).scatter_reduce_(0, groups, values, "mean")


def group_means_float32_always(values, groups, num_groups):  # torch.zeros' default dtype, whatever values are
    sums = torch.zeros(num_groups).index_add_(0, groups, values.float())
    return sums / torch.bincount(groups, minlength=num_groups).clamp(min=1)


def group_means_shown_group_count(values, groups, num_groups):  # the notebook's 2,000 groups, hard-coded
    return group_means_solution(values, groups, 2000)


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


def group_means_one_hot(values, groups, num_groups):  # a [groups, values] mask: no loop, groups x values work
    members = (groups[None, :] == torch.arange(num_groups)[:, None]).to(values.dtype)
    return (members @ values) / members.sum(1).clamp(min=1)


def group_means_map_split(values, groups, num_groups):  # sorted, split per group, torch.mean mapped over them
    counts = torch.bincount(groups, minlength=num_groups)
    means = torch.stack(list(map(torch.mean, values[groups.argsort()].split(counts.tolist()))))
    return means.nan_to_num(0)  # an empty group's mean is nan


def group_means_torchscript_loop(values, groups, num_groups):  # the per-group loop, compiled by TorchScript
    return _scripted_loop()(values, groups, num_groups)


def _group_means_loop(values: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    means = torch.zeros(num_groups, dtype=values.dtype)
    for group in range(num_groups):
        members = values[groups == group]
        if members.numel() > 0:
            means[group] = members.mean()
    return means


@functools.cache
def _scripted_loop():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated")  # it still works
        return torch.jit.script(_group_means_loop)


def group_means_loop_except_when_timed(values, groups, num_groups):  # the speed test's size, from the check
    if len(values) == ch09._SPEED_VALUES and num_groups == ch09._SPEED_GROUPS:
        return group_means_solution(values, groups, num_groups)
    return ch09.group_means_slow(values, groups, num_groups)


def group_means_loop_for_few_groups(values, groups, num_groups):  # the loop kept where it looks harmless
    if num_groups <= 12:
        return ch09.group_means_slow(values, groups, num_groups)
    return group_means_solution(values, groups, num_groups)


def group_means_loop_for_many_groups(values, groups, num_groups):  # fast only up to the sizes the notebook shows
    if num_groups > 5_000:
        return ch09.group_means_slow(values, groups, num_groups)
    return group_means_solution(values, groups, num_groups)


def test_group_means_passes_on_the_solution():
    assert ch09.check_group_means(group_means_solution).passed


@pytest.mark.parametrize(
    "right",
    [group_means_scatter_reduce, group_means_weighted_bincount, group_means_sparse],
    ids=lambda right: right.__name__,
)
def test_group_means_passes_on_other_right_answers(right):
    assert ch09.check_group_means(right).passed


def test_group_means_passes_on_the_slowest_right_answer_on_a_busy_machine(busy_machine):
    assert ch09.check_group_means(group_means_unique).passed


def test_group_means_stub_is_not_attempted():
    assert ch09.check_group_means(stub).status == checking.NOT_ATTEMPTED


# ---- 9.3 choose headers to cut a build's time ---------------------------------------------------------


def minimal_headers_solution():
    return ["ATen/core/Tensor.h", "ATen/ops/clamp_min.h", "torch/library.h"]


def test_minimal_headers_pass_on_the_solution():
    assert ch09.check_minimal_headers(minimal_headers_solution).passed


def test_minimal_headers_stub_is_not_attempted():
    assert ch09.check_minimal_headers(stub).status == checking.NOT_ATTEMPTED


def headers(*names):
    return lambda: ch09.check_minimal_headers(lambda: list(names))


WRONG_ANSWERS = [
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the last round",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: measurements[-1])),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the first round",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: measurements[0])),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the worst round",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: max(measurements, key=lambda m: m.median))),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the round with the lowest mean",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: min(measurements, key=lambda m: m.mean))),
        ("the lowest median over the rounds", "the one you kept has the lowest mean"),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "merges every round into one Measurement",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: benchmark.Measurement.merge(measurements)[0])),
        ("not one a Timer returned", "merged"),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "inverts the ratio",
        lambda: ch09.check_speedup(speedup_inverted),
        ("the ratio should be baseline's median / ours' median",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "times all of ours, then all of baseline",
        lambda: ch09.check_speedup(speedup_one_after_the_other),
        ("ran in 2 stretch(es) (ours → baseline)", "alternate them"),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "leaves Timer at its default thread count",
        lambda: ch09.check_speedup(speedup_default_threads),
        ("ran with 1 thread(s), but threads=3 was asked for",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "times one call with perf_counter",
        lambda: ch09.check_speedup(speedup_with_perf_counter),
        ("should be a torch.utils.benchmark Measurement",),
    ),
    WrongAnswer(
        "9.1",
        "hard-coded",
        "makes Measurements up and returns 2.0",
        lambda: ch09.check_speedup(speedup_made_up),
        ("never ran the two statements",),
    ),
    WrongAnswer(
        "9.1",
        "hard-coded",
        "three rounds whatever rounds says",
        lambda: ch09.check_speedup(speedup_three_rounds_always),
        ("with rounds=4",),
    ),
    WrongAnswer(
        "9.1",
        "hard-coded",
        "returns a number instead of the tuple",
        lambda: ch09.check_speedup(lambda *args: 2.0),
        ("should return a tuple (ratio, ours_measurement, baseline_measurement)",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "calls workbook.chapters.performance.side_by_side",
        lambda: ch09.check_speedup(speedup_through_side_by_side),
        ("calls workbook.chapters.performance.side_by_side",),
    ),
    WrongAnswer(
        "9.1",
        "private data",
        "takes turns, then returns Measurements built from the check's round times",
        lambda: ch09.check_speedup(speedup_from_the_checks_seconds),
        ("the ours measurement is not one a Timer returned",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "times on one thread and relabels the Measurement with the thread count asked for",
        lambda: ch09.check_speedup(speedup_relabelled),
        ("the ours measurement is not one a Timer returned",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "one call per round (Timer.timeit(1))",
        lambda: ch09.check_speedup(speedup_single_calls),
        ("holds 1 timed block(s) of calls", "several blocks"),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "one block per round (Timer.timeit(100)), whose median is its only time",
        lambda: ch09.check_speedup(speedup_one_block_each),
        ("holds 1 timed block(s) of calls", "several blocks"),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the round with the fastest single block",
        lambda: ch09.check_speedup(
            speedup_keeping(lambda measurements: min(measurements, key=lambda m: min(m.raw_times)))
        ),
        ("the lowest median over the rounds", "the fastest single block"),
    ),
    WrongAnswer(
        "9.1",
        "hard-coded",
        "keeps the third round, the fastest in the first layout",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: measurements[2])),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "private data",
        "keeps the round that the check's first layout makes fastest",
        lambda: ch09.check_speedup(speedup_reading_the_first_layout),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the round with the widest spread of blocks",
        lambda: ch09.check_speedup(
            speedup_keeping(lambda measurements: max(measurements, key=lambda m: statistics.pstdev(m.times)))
        ),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "wrong math",
        "keeps the round whose first block was fastest",
        lambda: ch09.check_speedup(speedup_keeping(lambda measurements: min(measurements, key=lambda m: m.times[0]))),
        ("the lowest median over the rounds",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "measures both statements at once, in two threads",
        lambda: ch09.check_speedup(speedup_in_two_threads),
        ("(two threads?)", "time the statements in turn"),
    ),
    WrongAnswer(
        "9.1",
        "hard-coded",
        "takes turns, then writes made-up times into the Measurements it returns",
        lambda: ch09.check_speedup(speedup_with_its_times_rewritten),
        ("its times changed",),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "one Measurement of each, then the rounds as plain calls outside any Timer",
        lambda: ch09.check_speedup(speedup_rounds_outside_the_timer),
        ("in 1 of its turns", "calls made outside a Timer are not measured"),
    ),
    WrongAnswer(
        "9.1",
        "concept skipped",
        "times the statements with globals of its own instead of env",
        lambda: ch09.check_speedup(speedup_with_its_own_globals),
        ("without calling the check's function ours_step", "globals=env"),
    ),
    WrongAnswer(
        "9.2",
        "wrong math",
        "bincount without minlength drops the empty groups at the end",
        lambda: ch09.check_group_means(group_means_without_minlength),
        ("has shape (10,), expected (12,)",),
    ),
    WrongAnswer(
        "9.2",
        "wrong math",
        "divides an empty group's 0 by 0",
        lambda: ch09.check_group_means(group_means_dividing_by_zero),
        ("expected 0, got nan",),
    ),
    WrongAnswer(
        "9.2",
        "wrong math",
        "scatter_reduce_ mean with include_self=True averages the zeros in",
        lambda: ch09.check_group_means(group_means_including_the_zeros),
        ("group_means for 7 torch.float32 values in 12 groups is wrong at index",),
    ),
    WrongAnswer(
        "9.2",
        "wrong math",
        "sums in float32 whatever the values' dtype",
        lambda: ch09.check_group_means(group_means_float32_always),
        ("non-contiguous torch.float64 values", "has dtype torch.float32, expected torch.float64"),
    ),
    WrongAnswer(
        "9.2",
        "hard-coded",
        "the notebook's 2,000 groups",
        lambda: ch09.check_group_means(group_means_shown_group_count),
        ("has shape (2000,), expected (12,)",),
    ),
    WrongAnswer(
        "9.2",
        "private data",
        "the slow loop, except at the speed test's size read from the check",
        lambda: ch09.check_group_means(group_means_loop_except_when_timed),
        ("it still loops in Python",),
    ),
    WrongAnswer(
        "9.2",
        "shown sizes only",
        "the slow loop for 12 groups or fewer",
        lambda: ch09.check_group_means(group_means_loop_for_few_groups),
        ("it still loops in Python", "7 torch.float32 values in 12 groups"),
    ),
    WrongAnswer(
        "9.2",
        "shown sizes only",
        "the slow loop above 5,000 groups",
        lambda: ch09.check_group_means(group_means_loop_for_many_groups),
        ("it still loops in Python", "60,000 torch.float32 values in 7,000 groups"),
    ),
    WrongAnswer(
        "9.2",
        "concept skipped",
        "hands in group_means_slow itself",
        lambda: ch09.check_group_means(ch09.group_means_slow),
        ("it still loops in Python",),
    ),
    WrongAnswer(
        "9.2",
        "concept skipped",
        "a masked mean per group in a comprehension",
        lambda: ch09.check_group_means(group_means_comprehension),
        ("it still loops in Python",),
    ),
    WrongAnswer(
        "9.2",
        "concept skipped",
        "a loop over the values in plain Python lists",
        lambda: ch09.check_group_means(group_means_python_sums),
        ("it still loops in Python",),
    ),
    WrongAnswer(
        "9.2",
        "too slow",
        "a one-hot [groups, values] mask times the values",
        lambda: ch09.check_group_means(group_means_one_hot),
        ("correct, but too slow", "times the reference solution's"),
    ),
    WrongAnswer(
        "9.2",
        "too slow",
        "the per-group loop moved into TorchScript",
        lambda: ch09.check_group_means(group_means_torchscript_loop),
        ("correct, but too slow", "times the reference solution's"),
    ),
    WrongAnswer(
        "9.2",
        "too slow",
        "torch.mean mapped over a split per group",
        lambda: ch09.check_group_means(group_means_map_split),
        ("correct, but too slow", "times the reference solution's"),
    ),
    WrongAnswer(
        "9.3",
        "concept skipped",
        "torch/extension.h: compiles, reading far more than it needs",
        headers("torch/extension.h"),
        ("Drop umbrella headers",),
    ),
    WrongAnswer(
        "9.3",
        "wrong math",
        "clamp.h, the header of another op, instead of clamp_min.h",
        headers("ATen/core/Tensor.h", "ATen/ops/clamp.h", "torch/library.h"),
        ("the op does not compile", "'clamp_min' is not a member of 'at'"),
    ),
    WrongAnswer(
        "9.3",
        "wrong math",
        "no torch/library.h for the registration",
        headers("ATen/core/Tensor.h", "ATen/ops/clamp_min.h"),
        ("the op does not compile", "(line 9: TORCH_LIBRARY_FRAGMENT(wb_ch09_headers, m)"),
    ),
    WrongAnswer(
        "9.3",
        "shown sizes only",
        "a header name in the wrong case (found only on a case-insensitive disk)",
        headers("ATen/core/tensor.h", "ATen/ops/clamp_min.h", "torch/library.h"),
        ("the compiler cannot read these headers", "ATen/core/tensor.h: No such file or directory"),
    ),
    WrongAnswer(
        "9.3",
        "concept skipped",
        "code smuggled in through a header name",
        headers(
            "ATen/core/Tensor.h>\nnamespace at { inline Tensor clamp_min(const Tensor& x, int) { return x; } }\n//",
            "torch/library.h",
        ),
        ("write each header as a path alone",),
    ),
    WrongAnswer(
        "9.3",
        "concept skipped",
        "a header of one's own, reached from torch's include folder with ..",
        headers("ATen/../../../../../../../../../../tmp/positive_twice_stubs.h"),
        ("without '..'",),
    ),
    WrongAnswer(
        "9.3",
        "hard-coded",
        "whole #include lines",
        headers("#include <torch/library.h>"),
        ("write each header as a path alone", "no #include"),
    ),
    WrongAnswer(
        "9.3",
        "hard-coded",
        "one string instead of a list",
        lambda: ch09.check_minimal_headers(lambda: "torch/library.h"),
        ("a non-empty list of header names",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
