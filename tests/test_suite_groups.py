"""The groups that keep a chapter's notebooks and the tests sharing its files on one pytest-xdist worker."""

from pathlib import Path

from workbook import REPO_ROOT
from workbook.course import generate, suite_groups


def test_both_copies_of_a_chapter_share_a_group():
    for name in generate.chapter_names():
        groups = {suite_groups.group_of(REPO_ROOT / folder / f"{name}.ipynb") for folder in ("notebooks", "solutions")}
        assert groups == {f"chapter-{name[:2]}"}, name


def test_tests_that_share_a_chapters_files_join_its_group():
    chapters = {name[:2] for name in generate.chapter_names()}
    for stem, chapter in suite_groups.CHAPTER_OF_TEST.items():
        assert (REPO_ROOT / "tests" / f"{stem}.py").exists(), f"{stem}.py is listed but does not exist"
        assert chapter in chapters, f"{stem} joins chapter {chapter}, which does not exist"
        assert suite_groups.group_of(REPO_ROOT / "tests" / f"{stem}.py") == f"chapter-{chapter}"


def test_any_other_test_file_is_its_own_group():
    assert suite_groups.group_of(Path("tests/test_scatter.py")) == "test_scatter"


def test_node_ids_map_to_their_files_group():
    assert suite_groups.group_of_test("notebooks/02_cpp_extensions.ipynb::Cell 12") == "chapter-02"
    assert suite_groups.group_of_test("tests/test_example_app.py::test_program[scripted.pt-linked]") == "chapter-06"
    assert suite_groups.group_of_test("tests/test_scatter.py::test_sum[float32]") == "test_scatter"
