"""Timing statements side by side with torch.utils.benchmark, robust to a shared machine."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.utils.benchmark as benchmark

QUICK_ENV = "WORKBOOK_QUICK_TIMING"


def quick() -> bool:
    """Whether a notebook's timings should run one short round (WORKBOOK_QUICK_TIMING=1), not measure.

    tests/conftest.py sets it for the test suite: nbval ignores what a timing cell prints (its
    `# NBVAL_IGNORE_OUTPUT`) and checks only that the cell runs, so full rounds would spend time for
    nothing. Outputs are stored by workbook.course.generate.execute, which leaves it out of the kernel's
    environment: stored timings are measurements."""
    return os.environ.get(QUICK_ENV) == "1"


@dataclass(frozen=True)
class Settings:
    """How long and how often each statement is timed."""

    rounds: int = 3  # each round times every statement once, in turn
    min_run_time: float = 0.2  # seconds per statement and round
    block_time: float = 1e-3  # seconds per block of calls (at least one call)
    min_blocks: int = 10
    threads: int | None = None  # None: torch's default


def measure(
    stmt: str,
    env: dict,
    num_threads: int | None = None,
    min_run_time: float = 0.4,
    block_time: float = 1e-3,
    min_blocks: int = 10,
) -> tuple[float, float]:
    """(median, fastest) seconds per call of `stmt`, from blocks of about a millisecond each.

    torch.utils.benchmark's blocked_autorange averages long blocks, so on a machine shared with other
    work one descheduled thread spoils every block. Short blocks leave most of them clean: their
    median is what the code does when it gets the cores, the fastest block a lower bound.
    """
    timer = benchmark.Timer(stmt, globals=env, num_threads=num_threads or torch.get_num_threads())
    timer.timeit(3)  # warm-up (and, for torch.compile, the compilation)
    once = timer.timeit(1).median
    number = max(1, int(block_time / max(once, 1e-7)))
    blocks = []
    deadline = time.perf_counter() + min_run_time
    while time.perf_counter() < deadline or len(blocks) < min_blocks:
        blocks.append(timer.timeit(number).median)
    return statistics.median(blocks), min(blocks)


def side_by_side(cases: dict[str, tuple[str, dict]], settings: Settings) -> dict[str, dict[str, float]]:
    """Each case's (statement, globals) best median and fastest block over the rounds, timed in turn.

    Returns {name: {"median_s": ..., "fastest_s": ...}}. Alternating the statements within each
    round spreads any disturbance of the machine over all of them; the best round's median is the one
    least disturbed.
    """
    best = {name: {"median_s": float("inf"), "fastest_s": float("inf")} for name in cases}
    for _ in range(settings.rounds):
        for name, (stmt, env) in cases.items():
            median, fastest = measure(
                stmt, env, settings.threads, settings.min_run_time, settings.block_time, settings.min_blocks
            )
            best[name]["median_s"] = min(best[name]["median_s"], median)
            best[name]["fastest_s"] = min(best[name]["fastest_s"], fastest)
    return best


def us(seconds: float) -> str:
    return f"{seconds * 1e6:10.1f} us"
