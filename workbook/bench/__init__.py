"""`make bench`: the workbook's C++ ops against Python, torch.compile, native ops and OpenCV, side by side.

    python -m workbook.bench                      # everything (long: the scatter grid has 140 cases)
    python -m workbook.bench --quick              # tiny sizes, one round: runs every comparison in seconds;
                                                  # its numbers are not measurements
    python -m workbook.bench --only scatter --elements 1e6 --groups 10 1e4 1e6

Every comparison is timed with torch.utils.benchmark in one process, the statements of a comparison
in turn, over several rounds (workbook.bench.timing). Ratios > 1 mean ours is faster (the call
overhead table, which has no "ours", divides by a plain Python call instead). Printed and
written to build/bench/results.json with PNG plots next to it; never asserted, since timings belong
in a report, not in a test.
"""

from workbook.bench.timing import Settings, measure, quick, side_by_side

__all__ = ["measure", "best_of_rounds", "ROUNDS", "MIN_RUN_TIME"]  # measure: chapter 03 times with it

# The interface chapter 03 and chapter 08's stable-ABI comparison time with: best_of_rounds, ROUNDS rounds of
# MIN_RUN_TIME seconds per case.
ROUNDS = 3
MIN_RUN_TIME = 0.4


def best_of_rounds(cases: dict[str, tuple[str, dict]], threads: int | None = None) -> dict[str, float]:
    """Median seconds per call of each case {name: (statement, globals)}, timed in turn, best of ROUNDS rounds,
    with `threads` intra-op threads (None: torch's default). Under the test suite (timing.quick()), one short round."""
    settings = Settings(rounds=ROUNDS, min_run_time=MIN_RUN_TIME, threads=threads)
    if quick():
        settings = Settings(rounds=1, min_run_time=0.0, min_blocks=3, threads=threads)
    return {name: times["median_s"] for name, times in side_by_side(cases, settings).items()}
