"""workbook.performance: chapter 09's side-by-side timing and plots (tiny statements, no scatter build)."""

from IPython.display import Image

from workbook import compile_times, performance


def test_side_by_side_times_in_turn_and_keeps_each_statements_best_round():
    order = []
    env = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    best = performance.side_by_side(
        {"first": "a()", "second": "b()"}, env, threads=2, rounds=3, min_run_time=0.001, label="demo"
    )
    stretches = [name for position, name in enumerate(order) if position == 0 or order[position - 1] != name]
    assert stretches == ["a", "b"] * 3
    assert list(best) == ["first", "second"]
    for name, statement in (("first", "a()"), ("second", "b()")):
        spec = best[name].task_spec
        assert (spec.stmt, spec.num_threads, spec.label, spec.sub_label) == (statement, 2, "demo", name)


def test_plots_are_png_images():
    rows = [
        {
            "groups": 10,
            "index": "random",
            "op": "sum",
            "ratio": 1.2,
            "ours_gbps": 5.0,
            "native_gbps": 4.0,
            "copy_gbps": 20.0,
        },
        {"groups": 10, "index": "random", "op": "max", "ratio": 0.8, "copy_gbps": 20.0},
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
