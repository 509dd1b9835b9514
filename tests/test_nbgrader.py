"""Instructors can release the chapters with nbgrader, get exactly the learners' notebooks, and grade them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
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


def test_generate_assignment_writes_the_workbooks_stubs_for_python_and_cpp(tmp_path):
    course = make_course(tmp_path, generate.chapter_names())
    nbgrader(course, "generate_assignment", "workbook", "--force")

    for name in generate.chapter_names():
        released = nbformat.read(course / "release" / "workbook" / f"{name}.ipynb", as_version=4)
        learners = nbformat.read(generate.NOTEBOOKS / f"{name}.ipynb", as_version=4)
        assert [c.source for c in released.cells] == [c.source for c in learners.cells], name


def test_autograde_gives_full_marks_to_solutions_none_to_stubs_and_counts_each_exercise(tmp_path):
    chapter = "01_python_extensions"
    course = make_course(tmp_path, [chapter])
    nbgrader(course, "generate_assignment", "workbook", "--force")

    solved = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    one_wrong = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    [cell] = [c for c in one_wrong.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex1-gated-unit"]
    assert "grad_x = grad_y * gate" in cell.source
    cell.source = cell.source.replace("grad_x = grad_y * gate", "grad_x = grad_y")  # forgets the gate
    submissions = {
        "solved": solved,
        "one_wrong": one_wrong,
        "untouched": nbformat.read(generate.NOTEBOOKS / f"{chapter}.ipynb", as_version=4),
    }
    for student, notebook in submissions.items():
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
        wrong_scores, _ = scores("one_wrong")
        assert wrong_scores == dict(solved_scores, **{"ex1-gated-unit-check": 0})
        untouched_scores, _ = scores("untouched")
        assert set(untouched_scores.values()) == {0}
