"""Chapter 09's small live measurements and their plots.

`side_by_side` times statements in turn over a few rounds with torch.utils.benchmark and keeps each
statement's best round; `scatter_rows` uses it for a handful of scatter cases, much smaller than
`make bench`, so that the chapter runs in seconds; `op_counts` counts the ops a call runs, from the
profiler. The `*_image` functions draw the results with
matplotlib and return a PNG for a notebook cell.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from workbook.chapters.drawing import as_image

SUM_NATIVES = {
    "index_add_": "torch.zeros(groups).index_add_(0, index, src)",
    "scatter_add_": "torch.zeros(groups).scatter_add_(0, index, src)",
}
# torch_scatter's max, natively: empty groups 0. include_self=False scatters the identity (-inf) into every
# position the index names before it reduces; the other route fills the whole output with -inf first and
# turns what is left of it into 0 afterwards (which also turns a group whose values are all -inf into 0).
MAX_NATIVES = {
    "include_self=False": "torch.zeros(groups).scatter_reduce_(0, index, src, 'amax', include_self=False)",
    "-inf, amax, -inf→0": "(out := torch.full((groups,), -torch.inf).scatter_reduce_(0, index, src, 'amax'))"
    ".masked_fill_(out == -torch.inf, 0)",
}
OURS = {
    "sum": "scatter.scatter_sum(src, index, 0, None, groups)",
    "max": "scatter.scatter_max(src, index, 0, None, groups)",
}


def side_by_side(
    statements: dict[str, str],
    env: dict,
    threads: int,
    rounds: int = 3,
    min_run_time: float = 0.02,
    label: str = "side by side",
    cpu_time: bool = False,
) -> dict:
    """{name: the Measurement with the lowest median over `rounds` rounds}, the statements timed in turn.
    Each Measurement is labelled for benchmark.Compare: a row per name, a column per thread count.

    cpu_time=True times with the process's CPU time (time.process_time) instead of the clock on the wall:
    on a busy machine a call that is preempted waits, but uses no CPU meanwhile. Only for one thread,
    since the CPU time of several threads adds up. Under the test suite (workbook.bench.timing.quick()), one short
    round."""
    from torch.utils import benchmark

    from workbook.bench.timing import quick

    if quick():
        rounds, min_run_time = 1, min(min_run_time, 0.001)
    if cpu_time and threads != 1:
        raise ValueError(f"cpu_time=True needs threads=1 (the CPU time of {threads} threads adds up), got {threads}")
    clock = {"timer": time.process_time} if cpu_time else {}
    best = {}
    for _ in range(rounds):
        for name, statement in statements.items():
            timer = benchmark.Timer(
                statement,
                globals=env,
                num_threads=threads,
                label=label,
                sub_label=name,
                description=f"{threads} thread(s){', CPU time' if cpu_time else ''}",
                **clock,
            )
            measurement = timer.blocked_autorange(min_run_time=min_run_time)
            if name not in best or measurement.median < best[name].median:
                best[name] = measurement
    return best


def scatter_inputs(elements: int, groups: int, order: str, seed: int = 0):
    """1-D float32 src and an index into `groups` groups, "random" or "sorted": `make bench`'s 1-D case."""
    from workbook.bench.scatter_cases import make_inputs

    return make_inputs(elements, groups, order, "1-D", "float32", seed)


def scatter_agrees_with_native(elements: int, group_counts, orders=("random", "sorted")) -> bool:
    """Do scatter_sum and scatter_max give torch's own results in every case?"""
    import torch

    from workbook.ops import scatter

    for groups in group_counts:
        for order in orders:
            src, index = scatter_inputs(elements, groups, order)
            env = {"torch": torch, "scatter": scatter, "src": src, "index": index, "groups": groups}
            ours_sum, ours_max = eval(OURS["sum"], env), eval(OURS["max"], env)[0]
            sums_agree = all(
                torch.allclose(ours_sum, eval(native, env), rtol=1e-4, atol=1e-4) for native in SUM_NATIVES.values()
            )
            maxima_agree = all(torch.equal(ours_max, eval(native, env)) for native in MAX_NATIVES.values())
            if not (sums_agree and maxima_agree):
                return False
    return True


def scatter_rows(
    elements: int, group_counts, threads: int, orders=("random", "sorted"), cpu_time: bool = False
) -> list[dict]:
    """Per case and op: ours and the faster native equivalent, their ratio (> 1: ours faster), and
    scatter_sum's GB/s next to a copy of the same bytes, all timed in one run (see side_by_side)."""
    import torch

    from workbook.ops import scatter

    rows = []
    for groups in group_counts:
        for order in orders:
            src, index = scatter_inputs(elements, groups, order)
            moved = src.numel() * 4 + index.numel() * 8 + groups * 4  # read src and index, write the output
            # written memory: a never-written tensor reads the kernel's zero page, which stays in cache
            copy_from, copy_to = torch.ones(moved // 2, dtype=torch.uint8), torch.zeros(moved // 2, dtype=torch.uint8)
            env = {
                "torch": torch,
                "scatter": scatter,
                "src": src,
                "index": index,
                "groups": groups,
                "copy_from": copy_from,
                "copy_to": copy_to,
            }
            statements = {
                "copy": "copy_to.copy_(copy_from)",
                "ours sum": OURS["sum"],
                **SUM_NATIVES,
                "ours max": OURS["max"],
                **MAX_NATIVES,
            }
            measured = side_by_side(statements, env, threads, cpu_time=cpu_time)
            seconds = {name: m.median for name, m in measured.items()}
            case = {"groups": groups, "index": order, "copy_gbps": moved / seconds["copy"] / 1e9}
            native_sum = min(SUM_NATIVES, key=seconds.get)
            rows.append(
                {
                    **case,
                    "op": "sum",
                    "native": native_sum,
                    "ratio": seconds[native_sum] / seconds["ours sum"],
                    "ours_gbps": moved / seconds["ours sum"] / 1e9,
                    "native_gbps": moved / seconds[native_sum] / 1e9,
                }
            )
            native_max = min(MAX_NATIVES, key=seconds.get)
            rows.append({**case, "op": "max", "native": native_max, "ratio": seconds[native_max] / seconds["ours max"]})
    return rows


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'groups':>7} {'index':6} {'op':3} {'native / ours':>13} {'faster native':18} {'ours GB/s':>9} "
        f"{'copy GB/s':>9}"
    )
    for row in rows:
        bandwidth = f"{row['ours_gbps']:9.1f} {row['copy_gbps']:9.1f}" if row["op"] == "sum" else ""
        print(
            f"{row['groups']:7.0e} {row['index']:6} {row['op']:3} {row['ratio']:12.2f}x {row['native']:18} {bandwidth}"
        )


def describe(measurement) -> str:
    """What printing a Measurement shows, without its first line (the object's address in memory)."""
    return repr(measurement).split("\n", 1)[1]


def op_counts(function, calls: int = 3) -> dict[str, float]:
    """{op name: calls per call of `function`} from the profiler, in the order the profiler lists them.
    torch.autograd.profiler.profile records the same CPU events as torch.profiler.profile, but does not
    import torch._inductor when it starts (torch.profiler does, seconds on a first use). Kineto, the
    profiler's engine, writes a timestamped line to stderr as it starts and stops; those are dropped, so
    that the counts print the same on every run."""
    import torch

    with _stderr_dropped(), torch.autograd.profiler.profile() as profile:
        for _ in range(calls):
            function()
    return {event.key: event.count / calls for event in profile.key_averages()}


@contextlib.contextmanager
def _stderr_dropped():
    """Send what is written to file descriptor 2 (C++ code writes there directly) to /dev/null meanwhile."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _case_label(row) -> str:
    return f"{row['index']}\n{row['groups']:.0e} groups".replace("e+0", "e")


def ratios_image(rows: list[dict]):
    """Bars of native / ours per case, sum and max side by side, on a log axis around 1."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    cases = [row for row in rows if row["op"] == "sum"]
    figure = Figure(figsize=(8, 3.4))
    axes = figure.add_subplot()
    for offset, op, colour in ((-0.2, "sum", "#8ecae6"), (0.2, "max", "#ffb703")):
        ratios = [row["ratio"] for row in rows if row["op"] == op]
        axes.bar(
            [position + offset for position in range(len(ratios))],
            ratios,
            width=0.4,
            label=f"scatter_{op}",
            color=colour,
            edgecolor="#333333",
        )
    axes.axhline(1, color="#333333", linewidth=1)
    axes.set_yscale("log")
    as_ratio = FuncFormatter(lambda ratio, _: f"{ratio:g}x")
    axes.yaxis.set_major_formatter(as_ratio)
    axes.yaxis.set_minor_formatter(as_ratio)
    axes.set_xticks(range(len(cases)), [_case_label(row) for row in cases], fontsize=8)
    axes.set_ylabel("native time / ours\n(above 1: ours faster)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return as_image(figure)


def bandwidth_image(rows: list[dict]):
    """GB/s of scatter_sum, of the faster native sum and of a plain copy of the same bytes, per case."""
    from matplotlib.figure import Figure

    cases = [row for row in rows if row["op"] == "sum"]
    figure = Figure(figsize=(8, 3.4))
    axes = figure.add_subplot()
    series = (
        ("ours_gbps", "scatter_sum", "#8ecae6"),
        ("native_gbps", "faster native sum", "#90be6d"),
        ("copy_gbps", "copy of the same bytes", "#cccccc"),
    )
    for number, (key, label, colour) in enumerate(series):
        axes.bar(
            [position + (number - 1) * 0.27 for position in range(len(cases))],
            [row[key] for row in cases],
            width=0.27,
            label=label,
            color=colour,
            edgecolor="#333333",
        )
    axes.set_xticks(range(len(cases)), [_case_label(row) for row in cases], fontsize=8)
    axes.set_ylabel("GB/s")
    axes.legend(fontsize=8)
    figure.tight_layout()
    return as_image(figure)


def header_costs_image(costs: dict):
    """Horizontal bars: seconds of one cold compile per include set, with its preprocessed lines."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 0.6 + 0.6 * len(costs)))
    axes = figure.add_subplot()
    labels = list(costs)
    seconds = [cost.seconds for cost in costs.values()]
    axes.barh(range(len(labels)), seconds, color="#8ecae6", edgecolor="#333333")
    for position, cost in enumerate(costs.values()):
        axes.text(
            cost.seconds, position, f"  {cost.seconds:.1f} s, {cost.lines / 1000:.0f}k lines", va="center", fontsize=8
        )
    axes.set_yticks(range(len(labels)), labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlim(0, max(seconds) * 1.4)
    axes.set_xlabel("CPU seconds for one cold compile of the same tiny op")
    figure.tight_layout()
    return as_image(figure)
