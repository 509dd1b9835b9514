"""`make bench` in its quickest configuration: every comparison runs and lands in the JSON and the plots.

Timings are never asserted (they belong in a report); the structure and finiteness of the results are.
One thread keeps the run short on a shared machine. Reuses the builds of the chapters' extensions; the
do-nothing extension of the overhead comparison (csrc/bench/nothing.cpp) compiles once, ~15 s, and
the direct OpenCV call of the warp comparison (csrc/bench/warp_direct.cpp) ~7 s.
"""

import json
import math

import pytest
import torch
from torchscript_warning import IGNORE_JIT_DEPRECATION

from workbook.bench import __main__ as bench
from workbook.bench import lltm_cases, overhead_cases, scatter_cases, warp_cases

# The warp section scripts a module (TorchScript), which warns that TorchScript is deprecated.
pytestmark = IGNORE_JIT_DEPRECATION


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    import cv2

    folder = tmp_path_factory.mktemp("bench")
    warp_cases.load_direct()
    opencv_threads_before = torch.ops.wb_bench_cv.opencv_threads(), cv2.getNumThreads()
    returned = bench.main(["--quick", "--threads", "1", "--out", str(folder)])
    return folder, returned, opencv_threads_before


def positive_and_finite(value):
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_the_json_is_what_the_run_returned_with_every_section(quick_run):
    folder, returned, _ = quick_run
    written = json.loads((folder / "results.json").read_text())
    assert written == returned
    assert set(written["sections"]) == set(bench.SECTIONS)
    assert written["meta"]["quick"] is True and written["meta"]["threads"] == 1


def test_every_scatter_op_and_case_has_a_finite_row(quick_run):
    rows = quick_run[1]["sections"]["scatter"]
    cases = list(scatter_cases.cases(bench.QUICK["elements"], bench.QUICK["groups"]))
    assert {"random", "sorted"} == {case[2] for case in cases} and {"1-D", "[N, 64]"} == {case[3] for case in cases}
    keys = [(row["elements"], row["groups"], row["index"], row["layout"], row["dtype"], row["op"]) for row in rows]
    assert sorted(keys) == sorted((*case, op) for case in cases for op in scatter_cases.OPS)
    for row in rows:
        assert set(row["natives_s"]) == set(scatter_cases.NATIVES[row["op"]])
        assert row["best_native"] in row["natives_s"]
        numbers = [
            row["ours_s"],
            *row["natives_s"].values(),
            row["ratio"],
            row["ours_gbps"],
            row["copy_gbps"],
            row["percent_of_copy"],
        ]
        assert all(positive_and_finite(value) for value in numbers), row
        assert row["ratio"] == pytest.approx(row["natives_s"][row["best_native"]] / row["ours_s"])


def test_lltm_warp_and_overhead_rows(quick_run):
    sections = quick_run[1]["sections"]
    assert [row["task"] for row in sections["lltm"]] == list(lltm_cases.TASKS)
    for row in sections["lltm"]:
        assert set(row["times_s"]) == set(lltm_cases.VERSIONS)
        assert len(row["ratios"]) == len(lltm_cases.RATIOS)
        assert all(positive_and_finite(value) for value in [*row["times_s"].values(), *row["ratios"].values()])
    assert list(sections["lltm"][0]["breakdown_s"]) == ["C++ forward", "extension function alone", "its addmm"]
    assert all(positive_and_finite(value) for value in sections["lltm"][0]["breakdown_s"].values())
    assert [(row["side"], row["channels"]) for row in sections["warp"]] == [
        (side, c) for side in bench.QUICK["sides"] for c in (1, 3)
    ]
    assert all(
        positive_and_finite(row[key])
        for row in sections["warp"]
        for key in ("ours_s", "direct_s", "cv2_s", "direct_ratio", "cv2_ratio", "fixed_cost_share")
    )
    assert all(row["fixed_cost_s"] >= 0 for row in sections["warp"])
    assert [row["kind"] for row in sections["overhead"]] == list(overhead_cases.STATEMENTS)
    assert all(positive_and_finite(row["seconds"]) for row in sections["overhead"])


def test_plots_are_written(quick_run):
    folder = quick_run[0]
    for name in ("scatter_ratios.png", "scatter_bandwidth.png", "lltm.png", "warp.png", "overhead.png"):
        assert (folder / name).read_bytes().startswith(b"\x89PNG"), name


def test_the_warp_section_runs_opencv_with_the_given_threads_and_restores_them(quick_run):
    import cv2

    assert {(row["opencv_threads"], row["cv2_threads"]) for row in quick_run[1]["sections"]["warp"]} == {(1, 1)}
    assert (torch.ops.wb_bench_cv.opencv_threads(), cv2.getNumThreads()) == quick_run[2]


@pytest.mark.parametrize("shape", [(37, 53), (37, 53, 3)])
def test_the_direct_call_is_the_operators_opencv_call(quick_run, shape):
    image = torch.rand(shape, generator=torch.Generator().manual_seed(3))
    warp = warp_cases.warp_matrix(53)
    out = torch.full_like(image, float("nan"))
    torch.ops.wb_bench_cv.warp_perspective_into(image, warp, out)
    assert torch.equal(out, torch.ops.workbook_cv.warp_perspective(image, warp, 37, 53))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda image, warp, out: (image.double(), warp, out), "image must be a float32 CPU tensor"),
        (lambda image, warp, out: (image, warp.float(), out), "warp must be a contiguous 3 x 3 float64"),
        (lambda image, warp, out: (image, warp, out.transpose(0, 1)), "out must be contiguous"),
        (lambda image, warp, out: (image, warp, out[..., :1]), "out must be contiguous"),
        (lambda image, warp, out: (image, warp, out[..., 0].contiguous()), "out must have image's channels"),
        (lambda image, warp, out: (image, warp, torch.empty(4, 4, 5)), "out must be H x W or H x W x C"),
    ],
)
def test_the_direct_call_names_a_bad_argument(quick_run, change, message):
    image = torch.rand(8, 8, 3)
    with pytest.raises(RuntimeError, match=message):
        torch.ops.wb_bench_cv.warp_perspective_into(*change(image, warp_cases.warp_matrix(8), torch.empty_like(image)))
