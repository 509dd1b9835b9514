"""A pytest plugin that keeps together what must not run at the same time when the suite runs on several workers.

`make test` runs pytest on pytest-xdist workers (`-n auto`): while one waits for a compiler, another runs Python.
This plugin chooses how many (see `pytest_xdist_auto_num_workers`) and gives xdist a scheduler that hands out
whole groups, each run on one worker, in order:

* a notebook's cells share one kernel, so a notebook is one group; both copies of a chapter (notebooks/
  and solutions/) join it, since they write the same files under build/;
* a test file is its own group, unless it writes where a chapter writes (a package installed into
  build/scatter_pkg, a program built under build/cmake, AOTInductor packages in build/ch08, chapter
  10's sandbox): then it joins that chapter's group.

Builds themselves are safe in parallel (workbook.build holds a lock per extension and per CMake
project); the groups are for the other files a chapter and its tests share.

The longest groups go first, and a worker is handed its next group only when it is down to its last test:
then the workers finish close together, rather than one running a long group alone at the end. How long
each test took is kept in pytest's cache (.pytest_cache/, git-ignored) after every run, and a group is expected
to take the sum over the tests it has now; a test with no kept time counts as the average kept test. On the
first run, with nothing kept, groups with more tests go first (xdist's own order).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from importlib import metadata
from pathlib import Path, PurePosixPath

import pytest

from workbook import BUILD_DIR

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


SECONDS_KEY = "workbook/test-seconds"  # {test node id: seconds it took, the last time it ran}
BUILDS_KEY = "workbook/last-run-builds"  # what the last run built with: the result of builds_in_use()


def builds_in_use() -> dict[str, str]:
    """Where this run builds (WORKBOOK_BUILD_DIR, which `make test-torch` changes) and with which torch."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    return {"build_dir": str(BUILD_DIR), "torch": torch_version}


def kept_seconds(config) -> dict[str, float]:
    """The kept seconds per test; none without pytest's cache (-p no:cacheprovider) or where it holds no such dict."""
    cache = getattr(config, "cache", None)  # set by pytest's cacheprovider plugin, when it is on
    return as_seconds(cache.get(SECONDS_KEY, None) if cache is not None else None)


def as_seconds(kept) -> dict[str, float]:
    """The entries of a kept {test: seconds} that are finite numbers of seconds; {} for anything else."""
    if not isinstance(kept, dict):
        return {}
    return {test: float(seconds) for test, seconds in kept.items() if is_finite_number(seconds)}


def is_finite_number(value) -> bool:
    try:
        return isinstance(value, (int, float)) and math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def expected_seconds(kept: dict[str, float], groups: dict[str, list[str]]) -> dict[str, float]:
    """How long each group {group: its tests' node ids} should take: the sum of its tests' kept seconds, a test
    with none kept counting as the average kept test of these groups (1 s when none is kept)."""
    known = [kept[test] for tests in groups.values() for test in tests if test in kept]
    per_test = sum(known) / len(known) if known else 1.0
    return {group: sum(kept.get(test, per_test) for test in tests) for group, tests in groups.items()}


class SecondsPerTest:
    """Adds up each test's setup, call and teardown times (in the process that reports them: the controller
    under xdist) and keeps them in pytest's cache when the session ends, with those of tests that did not run."""

    def __init__(self, cache):
        self.cache = cache
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session):
        if self.seconds:
            self.cache.set(SECONDS_KEY, {**kept_seconds(session.config), **self.seconds})
            self.cache.set(BUILDS_KEY, builds_in_use())


def pytest_configure(config):
    is_xdist_worker = hasattr(config, "workerinput")
    cache = getattr(config, "cache", None)
    if cache is not None and not is_xdist_worker:
        config.pluginmanager.register(SecondsPerTest(cache), "workbook-test-seconds")


# Under this many kept seconds in all, the last run found its builds done (this machine, two cores: 500-750 s for
# a whole suite whose builds were done, 1,550-3,000 s for one that compiled everything).
WARM_SUITE_SECONDS = 1200


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own, which counts the CPUs
def pytest_xdist_auto_num_workers(config):
    """How many workers `-n auto` starts: three where the last run found its builds done, else two.

    "Done": the kept seconds add up to under WARM_SUITE_SECONDS, and the last run built where this one builds
    (the same build folder, still there) with the same torch. Not checked: whether a source changed since.
    Measured on two cores, warm, back to back in one checkout: 244 and 226 s on three workers after 265 s on
    two, 284.5 s on three after 267 s on two (an hour later), 255-274 s on three against 287 s on two (an
    earlier session); with three, the cores were 1.9 busy of 2.
    Cold, each worker's ninja runs several compilers; the one cold run on three took 1,058 s of pytest (other
    work ran beside it), against 813.5 and 880.5 s on two. A whole-number PYTEST_XDIST_AUTO_NUM_WORKERS wins."""
    try:
        int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", ""))
        return None  # xdist's own hook uses it
    except ValueError:
        pass
    if config.getoption("cacheclear", False):
        return 2  # pytest empties the cache after this hook
    # pytest's cache (config.cache) is opened only after xdist has asked this: read the files it keeps, where
    # pytest keeps them (cache_dir, with ~ and $VARIABLES expanded, relative to the root folder)
    try:
        cache_dir = Path(os.path.expandvars(os.path.expanduser(config.getini("cache_dir"))))
        values = config.rootpath / cache_dir / "v"
        kept = as_seconds(json.loads((values / SECONDS_KEY).read_text()))
        last_builds = json.loads((values / BUILDS_KEY).read_text())
    except (ValueError, OSError):  # no cache_dir setting (-p no:cacheprovider), no file, or not JSON
        return 2
    warm = kept and sum(kept.values()) < WARM_SUITE_SECONDS and last_builds == builds_in_use() and BUILD_DIR.is_dir()
    return 3 if warm else 2


@pytest.hookimpl(optionalhook=True)  # the hook is xdist's: `-p no:xdist` runs without it
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    kept = kept_seconds(config)

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of_test(nodeid)

        def _assign_work_unit(self, node) -> None:
            # xdist hands out the front of its queue; put the longest group expected there first
            if kept:
                seconds = expected_seconds(kept, {group: list(tests) for group, tests in self.workqueue.items()})
                self.workqueue.move_to_end(max(seconds, key=seconds.__getitem__), last=False)
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            # xdist tops a worker up while it has 2 tests left; 1 is enough (a worker holds its last test
            # until it knows the next one), and a group handed out early may wait behind a long one
            if self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return ByGroup(config, log)
