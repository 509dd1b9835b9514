"""Every exercise is wired up: nbgrader metadata, a check per exercise, and checks that report the truth.

nbval re-runs both folders and compares their outputs with the stored ones, so the stored outputs read here
are what the checks really print: "passed" for each solution, "not attempted yet" for each stub.
"""

import nbformat
import pytest

from workbook import generate


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


# ---- chapter 02, exercise 2.3: the check runs on Python stand-ins for the C++ functions (no build) ----


def _stand_in_extension():
    import types

    import torch

    def backward(grad, a, b):
        t, s = torch.tanh(a), torch.sigmoid(b)
        return [grad * (1 - t * t) * s, grad * t * s * (1 - s)]

    return types.SimpleNamespace(
        gated_tanh_forward=lambda a, b: torch.tanh(a) * torch.sigmoid(b), gated_tanh_backward=backward
    )


def _gated_function(extension, *, backward_in_python=False, swap=False, save=True):
    import torch

    class GatedTanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            if save:
                ctx.save_for_backward(a, b)
            return extension.gated_tanh_forward(a, b)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            if backward_in_python:
                t, s = torch.tanh(a), torch.sigmoid(b)
                d_a, d_b = grad * (1 - t * t) * s, grad * t * s * (1 - s)
            else:
                d_a, d_b = extension.gated_tanh_backward(grad, a, b)
            return (d_b, d_a) if swap else (d_a, d_b)

    return GatedTanh


def test_gated_function_check_passes_on_a_right_function_and_restores_the_extension():
    from workbook.exercises import ch02

    extension = _stand_in_extension()
    original = extension.gated_tanh_backward
    assert ch02.check_gated_function(_gated_function(extension), extension).passed
    assert extension.gated_tanh_backward is original


@pytest.mark.parametrize(
    "mistake, words",
    [
        ({"backward_in_python": True}, ("should call the C++ gated_tanh_backward",)),
        ({"swap": True}, ("the gradient for a", "is wrong at index")),
        ({"save": False}, ("your code raised",)),
    ],
)
def test_gated_function_check_explains_each_mistake(mistake, words):
    from workbook.exercises import ch02

    extension = _stand_in_extension()
    outcome = ch02.check_gated_function(_gated_function(extension, **mistake), extension)
    assert outcome.status == "failed", str(outcome)
    assert all(word in outcome.explanation for word in words), str(outcome)


def test_gated_function_check_reports_stubs_as_not_attempted():
    import torch

    from workbook.exercises import ch02

    class Stub(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            raise NotImplementedError("not attempted yet")

    extension = _stand_in_extension()
    assert ch02.check_gated_function(Stub, extension).status == "not attempted yet"

    def unsolved_backward(grad, a, b):
        raise RuntimeError("gated_tanh_backward: not attempted yet")  # exercise 2.1's C++ stub

    extension.gated_tanh_backward = unsolved_backward
    assert ch02.check_gated_function(_gated_function(extension), extension).status == "not attempted yet"
