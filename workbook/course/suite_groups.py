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
"""

from __future__ import annotations

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


@pytest.hookimpl(optionalhook=True)  # the hook is xdist's: `-p no:xdist` runs without it
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of_test(nodeid)

    return ByGroup(config, log)
