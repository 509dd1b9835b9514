"""What a call costs: four ways to call a function that does nothing.

torch.ops.wb_bench.nothing (a C++ operator through the dispatcher), a pybind11 module function, a
torch.library.custom_op written in Python, and a plain Python function. The two C++ ones come from
csrc/bench/nothing.cpp, built once (about 15 s) into build/torch_extensions/wb_bench_nothing.
"""

from __future__ import annotations

import torch

from workbook.bench.timing import Settings, side_by_side

STATEMENTS = {
    "torch.ops op": "torch.ops.wb_bench.nothing()",
    "pybind11 function": "extension.nothing()",
    "custom_op": "custom_nothing()",
    "Python function": "python_nothing()",
}


def python_nothing() -> None:
    pass


_custom_nothing = None


def custom_nothing():
    """The torch.library.custom_op, defined on first use (a namespace can be defined once per process)."""
    global _custom_nothing
    if _custom_nothing is None:
        _custom_nothing = torch.library.custom_op("wb_bench_python::nothing", mutates_args=())(python_nothing)
    return _custom_nothing


def run(settings: Settings) -> list[dict]:
    from workbook import build

    extension = build.load("wb_bench_nothing", ["csrc/bench/nothing.cpp"])
    env = {"torch": torch, "extension": extension, "custom_nothing": custom_nothing(), "python_nothing": python_nothing}
    times = side_by_side({name: (stmt, env) for name, stmt in STATEMENTS.items()}, settings)
    python = times["Python function"]["median_s"]
    print("per-call overhead of a function that does nothing (ratio = its time / a Python function's)")
    rows = []
    for name in STATEMENTS:
        seconds = times[name]["median_s"]
        rows.append({"kind": name, "seconds": seconds, "ratio_to_python": seconds / python})
        print(f"  {name:18} {seconds * 1e9:8.0f} ns  {seconds / python:6.1f}x")
    return rows
