"""A pytest plugin that keeps together what must not run at the same time when the suite runs on two workers.

`make test` runs pytest with `-n 2 --dist loadgroup` (pytest-xdist): while one worker waits for a compiler,
the other runs Python. Each item gets an `xdist_group`, and a group runs on one worker, in order:

* a notebook's cells share one kernel, so a notebook is one group; both copies of a chapter (notebooks/
  and solutions/) join it, since they write the same files under build/;
* a test file is its own group, unless it writes where a chapter writes (a package installed into
  build/scatter_pkg, a program built under build/cmake, AOTInductor packages in build/ch08, chapter
  10's sandbox): then it joins that chapter's group.

Builds themselves are safe in parallel (workbook.build holds a lock per extension and per CMake
project); the groups are for the other files a chapter and its tests share.
"""

from __future__ import annotations

import pytest

# test file -> the chapter whose files under build/ it writes too
CHAPTER_OF_TEST = {
    "test_scatter_packaging": "04",
    "test_example_app": "06",
    "test_warp_perspective": "06",
    "test_torchscript_exercises": "06",
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
    """The xdist group of a collected file: `chapter-NN` for notebooks and the tests that share their files."""
    if path.parent.name in NOTEBOOK_FOLDERS and path.suffix == ".ipynb":
        return f"chapter-{path.name[:2]}"
    chapter = CHAPTER_OF_TEST.get(path.stem)
    return f"chapter-{chapter}" if chapter else path.stem


def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item.path)))
