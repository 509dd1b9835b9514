"""Every exercise is wired up: nbgrader metadata, a check per exercise, and checks that report the truth.

nbval re-runs both folders and compares their outputs with the stored ones, so the stored outputs read here
are what the checks really print: "passed" for each solution, "not attempted yet" for each stub.
"""

import nbformat
import pytest

from workbook.course import generate


def _graded_cells(path):
    notebook = nbformat.read(path, as_version=4)
    return [cell for cell in notebook.cells if "nbgrader" in cell.metadata]


def _text(cell):
    return "".join(output.get("text", "") + output.get("data", {}).get("text/plain", "") for output in cell.outputs)


CHAPTERS = generate.chapter_names()


@pytest.mark.parametrize("name", CHAPTERS)
def test_each_exercise_has_a_check_with_points(name):
    cells = _graded_cells(generate.SOLUTIONS / f"{name}.ipynb")
    solutions = [c for c in cells if c.metadata.nbgrader["solution"]]
    checks = [c for c in cells if c.metadata.nbgrader["grade"]]
    ids = [c.metadata.nbgrader["grade_id"] for c in cells]
    assert len(ids) == len(set(ids)), "grade_id values must be unique"
    assert sorted(c.metadata.nbgrader["grade_id"] + "-check" for c in solutions) == sorted(
        c.metadata.nbgrader["grade_id"] for c in checks
    )
    for cell in solutions:
        assert "BEGIN SOLUTION" in cell.source and "END SOLUTION" in cell.source
    for cell in checks:
        assert cell.metadata.nbgrader["points"] > 0 and cell.metadata.nbgrader["locked"]


@pytest.mark.parametrize("name", CHAPTERS)
def test_checks_pass_on_solutions_and_report_stubs_as_not_attempted(name):
    solved = [c for c in _graded_cells(generate.SOLUTIONS / f"{name}.ipynb") if c.metadata.nbgrader["grade"]]
    stubbed = [c for c in _graded_cells(generate.NOTEBOOKS / f"{name}.ipynb") if c.metadata.nbgrader["grade"]]
    for cell in solved:
        assert ": passed" in _text(cell) or ": skipped" in _text(cell), (
            cell.metadata.nbgrader["grade_id"],
            _text(cell),
        )
    for cell in stubbed:
        assert ": not attempted yet" in _text(cell) or ": skipped" in _text(cell), (
            cell.metadata.nbgrader["grade_id"],
            _text(cell),
        )
