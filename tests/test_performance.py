"""workbook.chapters.performance: chapter 09's side-by-side timing, op counts and plots (tiny statements, no scatter
build)."""

import time

import pytest
import torch
from IPython.display import Image
from torch.utils import benchmark

from workbook import bench
from workbook.bench import timing
from workbook.chapters import performance
from workbook.diagnostics import compile_times


def test_side_by_side_times_in_turn_and_keeps_each_statements_best_round(monkeypatch):
    monkeypatch.delenv(timing.QUICK_ENV, raising=False)  # as a learner's notebook runs it
    order = []
    env = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    best = performance.side_by_side(
        {"first": "a()", "second": "b()"}, env, threads=2, rounds=3, min_run_time=1e-5, label="demo"
    )
    stretches = [name for position, name in enumerate(order) if position == 0 or order[position - 1] != name]
    assert stretches == ["a", "b"] * 3
    assert list(best) == ["first", "second"]
    for name, statement in (("first", "a()"), ("second", "b()")):
        spec = best[name].task_spec
        assert (spec.stmt, spec.num_threads, spec.label, spec.sub_label) == (statement, 2, "demo", name)


def test_under_the_test_suite_side_by_side_and_best_of_rounds_run_one_short_round(monkeypatch):
    monkeypatch.setenv(timing.QUICK_ENV, "1")
    order = []
    env = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    started = time.perf_counter()
    performance.side_by_side({"first": "a()", "second": "b()"}, env, threads=1, rounds=3, min_run_time=10.0)
    assert time.perf_counter() - started < 10.0, "measuring would take at least the min_run_time asked for"
    assert [name for position, name in enumerate(order) if position == 0 or order[position - 1] != name] == ["a", "b"]

    calls = []
    started = time.perf_counter()
    bench.best_of_rounds({"x": ("calls.append(1)", {"calls": calls})}, threads=1)
    assert time.perf_counter() - started < bench.ROUNDS * bench.MIN_RUN_TIME and calls


def test_plots_are_png_images():
    rows = [
        {
            "groups": 10,
            "index": "random",
            "op": "sum",
            "native": "scatter_add_",
            "ratio": 1.2,
            "ours_gbps": 5.0,
            "native_gbps": 4.0,
            "copy_gbps": 20.0,
        },
        {"groups": 10, "index": "random", "op": "max", "native": "include_self=False", "ratio": 0.8, "copy_gbps": 20.0},
    ]
    costs = {
        "lean": compile_times.HeaderCost(5.0, 190_000, False),
        "full": compile_times.HeaderCost(20.0, 416_000, False),
    }
    for image in (
        performance.ratios_image(rows),
        performance.bandwidth_image(rows),
        performance.header_costs_image(costs),
    ):
        assert isinstance(image, Image) and image.data.startswith(b"\x89PNG")


def test_printed_rows_name_the_faster_native(capsys):
    performance.print_rows(
        [
            {
                "groups": 10,
                "index": "sorted",
                "op": "sum",
                "native": "index_add_",
                "ratio": 3.5,
                "ours_gbps": 9.0,
                "copy_gbps": 70.0,
            },
            {"groups": 10, "index": "sorted", "op": "max", "native": "-inf, amax, -inf→0", "ratio": 0.7},
        ]
    )
    header, sum_row, max_row = capsys.readouterr().out.splitlines()
    assert "faster native" in header
    assert sum_row.split() == ["1e+01", "sorted", "sum", "3.50x", "index_add_", "9.0", "70.0"]
    assert max_row.split()[3:] == ["0.70x", "-inf,", "amax,", "-inf→0"]


def test_both_native_max_routes_give_torch_scatters_result():
    src, index = torch.tensor([1.0, -2.0, 5.0, -torch.inf]), torch.tensor([0, 0, 2, 3])
    env = {"torch": torch, "src": src, "index": index, "groups": 5}
    expected = torch.tensor([1.0, 0.0, 5.0, -torch.inf, 0.0])  # what ours returns: empty groups 0
    assert torch.equal(eval(performance.MAX_NATIVES["include_self=False"], env), expected)
    textbook = eval(performance.MAX_NATIVES["-inf, amax, -inf→0"], env)
    assert torch.equal(textbook[:3], expected[:3]) and textbook[3] == 0, "a group of -inf alone becomes 0 here"


def test_op_counts_show_include_self_false_scattering_the_identity_first(capfd):
    index, src = torch.tensor([0, 2, 2]), torch.ones(3)
    excluded = performance.op_counts(lambda: torch.zeros(4).scatter_reduce_(0, index, src, "amax", include_self=False))
    included = performance.op_counts(lambda: torch.full((4,), -torch.inf).scatter_reduce_(0, index, src, "amax"))
    assert (excluded["aten::zeros"], excluded["aten::scatter_reduce_"], excluded["aten::scatter_"]) == (1, 1, 1)
    assert included["aten::scatter_reduce_"] == 1 and "aten::scatter_" not in included
    assert "USDT" not in capfd.readouterr().err, "the profiler's start and stop lines are dropped"


def test_a_described_measurement_has_no_address():
    spec = benchmark.utils.common.TaskSpec("f()", "pass", num_threads=1)
    text = performance.describe(benchmark.Measurement(number_per_run=10, raw_times=[0.01, 0.012], task_spec=spec))
    assert "object at 0x" not in repr(text) and text.startswith("f()") and "Median" in text


def test_side_by_side_in_cpu_time_leaves_waiting_out():
    env = {"time": time}
    best = performance.side_by_side(  # a short min_run_time: in CPU time a block of sleeps fills it slowly
        {"sleeps": "time.sleep(0.001)"}, env, threads=1, rounds=1, min_run_time=1e-4, cpu_time=True
    )
    assert best["sleeps"].median < 0.00025, "a call that sleeps 1 ms uses almost no CPU"
    assert "CPU time" in best["sleeps"].task_spec.description
    with pytest.raises(ValueError, match="cpu_time=True needs threads=1"):
        performance.side_by_side({"sleeps": "time.sleep(0)"}, env, threads=2, cpu_time=True)
