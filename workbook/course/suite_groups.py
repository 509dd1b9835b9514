"""A pytest plugin that keeps together what must not run at the same time when the suite runs on two workers.

`make test` runs pytest on two pytest-xdist workers: while one waits for a compiler, the other runs Python.
This plugin gives xdist a scheduler that hands out whole groups, each run on one worker, in order:

* a notebook's cells share one kernel, so a notebook is one group; both copies of a chapter (notebooks/
  and solutions/) join it, since they write the same files under build/;
* a test file is its own group, unless it writes where a chapter writes (a package installed into
  build/scatter_pkg, a program built under build/cmake, AOTInductor packages in build/ch08, chapter
  10's sandbox): then it joins that chapter's group.

Builds themselves are safe in parallel (workbook.build holds a lock per extension and per CMake
project); the groups are for the other files a chapter and its tests share.

The longest groups go first, and a worker is handed its next group only when it is down to its last test:
then the two workers finish close together, rather than one running a long group alone at the end. How long
each group took is kept in pytest's cache (.pytest_cache/, git-ignored) after every run; on the first run,
with nothing kept, groups with more tests go first (xdist's own order).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import PurePosixPath

import pytest

# test file -> the chapter whose files under build/ it writes too
CHAPTER_OF_TEST = {
    "test_scatter_packaging": "04",
    "test_example_app": "06",
    "test_warp_perspective": "06",
    "test_ch06_exercises": "06",
    "test_ch07_exercises": "06",  # loads chapter 06's library too (TensorStack is in it)
    "test_custom_class": "07",
    "test_compile_export": "08",
    "test_ch08_exercises": "08",
    "test_opcheck_ops": "08",
    "test_ch09_exercises": "09",
    "test_compile_times": "09",
    "test_ch10_exercises": "10",
}
NOTEBOOK_FOLDERS = ("notebooks", "solutions")


def group_of(path) -> str:
    """The group of a collected file: `chapter-NN` for notebooks and the tests that share their files."""
    path = PurePosixPath(path)
    if path.parent.name in NOTEBOOK_FOLDERS and path.suffix == ".ipynb":
        return f"chapter-{path.name[:2]}"
    chapter = CHAPTER_OF_TEST.get(path.stem)
    return f"chapter-{chapter}" if chapter else path.stem


def group_of_test(nodeid: str) -> str:
    """The group of a test or notebook cell from its pytest node id (`tests/test_x.py::test_y[...]`)."""
    return group_of(nodeid.split("::", 1)[0])


SECONDS_KEY = "workbook/group-seconds"  # {group: seconds its tests took in the last run that ran it}


def expected_seconds(kept: dict[str, float], tests: dict[str, int]) -> dict[str, float]:
    """How long each group (with its number of tests) should take: the kept seconds, or for a group with
    none kept (new, or the first run), its number of tests times the kept seconds per test (1 with none)."""
    known = [group for group in tests if group in kept]
    per_test = sum(kept[group] for group in known) / sum(tests[group] for group in known) if known else 1.0
    return {group: kept.get(group, count * per_test) for group, count in tests.items()}


class GroupSeconds:
    """Adds up each group's setup, call and teardown times (in the process that reports them: the
    controller under xdist) and keeps them in pytest's cache when the session ends."""

    def __init__(self, cache):
        self.cache = cache
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[group_of_test(report.nodeid)] += report.duration

    def pytest_sessionfinish(self):
        if self.seconds:
            self.cache.set(SECONDS_KEY, {**self.cache.get(SECONDS_KEY, {}), **self.seconds})


def pytest_configure(config):
    is_xdist_worker = hasattr(config, "workerinput")
    if config.cache is not None and not is_xdist_worker:  # -p no:cacheprovider turns the cache off
        config.pluginmanager.register(GroupSeconds(config.cache), "workbook-group-seconds")


@pytest.hookimpl(optionalhook=True)  # the hook is xdist's: `-p no:xdist` runs without it
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    kept = config.cache.get(SECONDS_KEY, {}) if config.cache is not None else {}

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of_test(nodeid)

        def _assign_work_unit(self, node) -> None:
            # xdist hands out the front of its queue; put the longest group expected there first
            if kept:
                tests = {group: len(work) for group, work in self.workqueue.items()}
                seconds = expected_seconds(kept, tests)
                self.workqueue.move_to_end(max(tests, key=seconds.__getitem__), last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            # xdist tops a worker up while it has 2 tests left; 1 is enough (a worker holds its last test
            # until it knows the next one), and a group handed out early may wait behind a long one
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return ByGroup(config, log)
