"""Instructors can release the chapters with nbgrader, get exactly the learners' notebooks, and grade them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from workbook.course import generate

CONFIG = """
from workbook.course.nbgrader_stubs import use_workbook_stubs
c = get_config()
c.CourseDirectory.course_id = "workbook"
use_workbook_stubs(c)
"""


def nbgrader(course: Path, *args: str, **env: str) -> str:
    """Run an nbgrader command in `course`; returns its log, fails the test if the command fails."""
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs alembic from PATH
    environment = dict(os.environ, PATH=os.pathsep.join([bin_dir, os.environ["PATH"]]), **env)
    done = subprocess.run(
        [os.path.join(bin_dir, "nbgrader"), *args],
        cwd=course,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def make_course(root: Path, names) -> Path:
    source = root / "source" / "workbook"
    source.mkdir(parents=True)
    for name in names:
        shutil.copy(generate.SOLUTIONS / f"{name}.ipynb", source)
    (root / "nbgrader_config.py").write_text(CONFIG)
    return root


@pytest.fixture(scope="module")
def released_course(tmp_path_factory) -> Path:
    """Every chapter as one nbgrader assignment, generated once for this file's tests."""
    course = make_course(tmp_path_factory.mktemp("course"), generate.chapter_names())
    nbgrader(course, "generate_assignment", "workbook", "--force")
    return course


def test_generate_assignment_writes_the_workbooks_stubs_for_python_and_cpp(released_course):
    for name in generate.chapter_names():
        released = nbformat.read(released_course / "release" / "workbook" / f"{name}.ipynb", as_version=4)
        learners = nbformat.read(generate.NOTEBOOKS / f"{name}.ipynb", as_version=4)
        assert [c.source for c in released.cells] == [c.source for c in learners.cells], name


def test_autograde_gives_full_marks_to_solutions_none_to_stubs_and_counts_each_exercise(released_course):
    # only this chapter is submitted: nbgrader logs "No submitted file" for the others and scores them 0
    chapter, course = "01_python_extensions", released_course

    solved = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    answers = {cell.metadata.get("nbgrader", {}).get("grade_id"): cell.source for cell in solved.cells}
    assert "grad_x = grad_y * gate" in answers["ex1-gated-unit"]
    # 1.1 wrong, 1.2 left as the stub it was handed out as, 1.3 and 1.4 right: each right answer comes after a
    # wrong one and a stub, so a check that leaned on another exercise would lose its points
    partly_done = nbformat.read(generate.NOTEBOOKS / f"{chapter}.ipynb", as_version=4)
    for cell in partly_done.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id == "ex1-gated-unit":
            cell.source = answers[grade_id].replace("grad_x = grad_y * gate", "grad_x = grad_y")  # forgets the gate
        elif grade_id in ("ex1-row-max", "ex1-softplus"):
            cell.source = answers[grade_id]
    for student, notebook in {"solved": solved, "partly_done": partly_done}.items():
        folder = course / "submitted" / student / "workbook"
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / f"{chapter}.ipynb")

    log = nbgrader(course, "autograde", "workbook", "--force", WORKBOOK_STRICT="1")
    assert "partial credit" not in log  # a check's printed pass is full marks, not a value nbgrader must guess at

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:

        def scores(student):
            submission = gradebook.find_submission_notebook(chapter, "workbook", student)
            return {grade.name: grade.score for grade in submission.grades}, submission.max_score

        solved_scores, max_score = scores("solved")
        assert max_score == 8 and set(solved_scores.values()) == {2}
        partly_done_scores, _ = scores("partly_done")
        assert partly_done_scores == {
            "ex1-gated-unit-check": 0,
            "ex1-leaky-relu-check": 0,
            "ex1-row-max-check": 2,
            "ex1-softplus-check": 2,
        }
