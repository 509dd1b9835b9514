"""Command line of `make bench`; see workbook/bench/__init__.py."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from workbook import BUILD_DIR, relative_to_repo
from workbook.bench import lltm_cases, overhead_cases, report, scatter_cases, warp_cases
from workbook.bench.timing import Settings

SECTIONS = ("scatter", "lltm", "warp", "overhead")
FULL = {
    "elements": [10**4, 10**5, 10**6, 10**7],
    "groups": [10, 10**2, 10**3, 10**4, 10**5, 10**6],
    "sides": [256, 512, 1024],
}
QUICK = {"elements": [10**4], "groups": [10], "sides": [64]}


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m workbook.bench", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, one short round per statement: checks that every comparison runs",
    )
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="sections to run")
    parser.add_argument("--elements", nargs="+", type=float, help="scatter: src sizes (default 1e4 ... 1e7)")
    parser.add_argument("--groups", nargs="+", type=float, help="scatter: group counts (default 10 ... 1e6)")
    parser.add_argument("--sides", nargs="+", type=int, help="warp_perspective: image sides (default 256 512 1024)")
    parser.add_argument("--rounds", type=int, help="rounds per comparison (default 3; --quick: 1)")
    parser.add_argument(
        "--threads", type=int, help="threads for torch and both OpenCV builds (default: each library's default)"
    )
    parser.add_argument("--out", type=Path, default=BUILD_DIR / "bench", help="folder for results.json and plots")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    arguments = parse(argv)
    sizes = QUICK if arguments.quick else FULL
    settings = Settings(rounds=arguments.rounds or 3, threads=arguments.threads)
    if arguments.quick:
        settings = Settings(
            rounds=arguments.rounds or 1, min_run_time=0.0, block_time=1e-4, min_blocks=3, threads=arguments.threads
        )
    elements = [int(n) for n in arguments.elements or sizes["elements"]]
    groups = [int(g) for g in arguments.groups or sizes["groups"]]
    meta = {
        "torch": torch.__version__,
        "threads": settings.threads or torch.get_num_threads(),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "quick": arguments.quick,
        "rounds": settings.rounds,
        "min_run_time_s": settings.min_run_time,
        "block_time_s": settings.block_time,
        "min_blocks": settings.min_blocks,
    }
    print(
        f"torch {meta['torch']}, {meta['threads']} threads, {meta['cores']} cores, load average "
        f"{meta['load_average']:.1f}; best of {settings.rounds} rounds, medians of ~1 ms blocks, side by side\n"
    )
    runners = {
        "scatter": lambda: scatter_cases.run(settings, elements, groups),
        "lltm": lambda: lltm_cases.run(settings),
        "warp": lambda: warp_cases.run(settings, sides=arguments.sides or sizes["sides"]),
        "overhead": lambda: overhead_cases.run(settings),
    }
    results = {"meta": meta, "sections": {}}
    for section in arguments.only:
        results["sections"][section] = runners[section]()
        print()
    path = report.write_json(results, arguments.out)
    plots = report.draw_plots(results, arguments.out)
    print(f"wrote {relative_to_repo(path)} and {', '.join(p.name for p in plots)}")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
