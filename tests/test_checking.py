"""The exercise machinery: outcomes, strict mode, and plain-words tensor comparisons."""

import pytest
import torch

from workbook.course.checking import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    SKIPPED,
    ExerciseFailed,
    Mistake,
    Skip,
    exercise,
    expect_close,
    raise_if_not_attempted,
)


@exercise("9.9 demo")
def check_returns_one(function):
    if function() != 1:
        raise Mistake(f"expected 1, got {function()}")


def not_attempted_python():
    raise NotImplementedError("not attempted yet")


def not_attempted_cpp():  # what a C++ stub's TORCH_CHECK(false, "not attempted yet") looks like from Python
    raise RuntimeError("not attempted yet\nException raised from stub at x.cpp:3")


def crashes():
    return {}["missing"]


@pytest.mark.parametrize(
    "function, status",
    [
        (lambda: 1, PASSED),
        (lambda: 2, FAILED),
        (not_attempted_python, NOT_ATTEMPTED),
        (not_attempted_cpp, NOT_ATTEMPTED),
        (crashes, FAILED),
    ],
)
def test_outcome_status(function, status, monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)
    assert check_returns_one(function).status == status


def test_failure_explains_itself_in_one_line(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)
    assert str(check_returns_one(lambda: 2)) == "✘ Exercise 9.9 demo: failed — expected 1, got 2"
    assert str(check_returns_one(crashes)) == "✘ Exercise 9.9 demo: failed — your code raised KeyError: 'missing'"
    assert str(check_returns_one(not_attempted_python)).startswith("… Exercise 9.9 demo: not attempted yet — ")


def test_strict_mode_raises_for_anything_but_a_pass(monkeypatch, capsys):
    monkeypatch.setenv("WORKBOOK_STRICT", "1")
    # a pass is printed, not returned: nbgrader reads a cell's value as a number of points
    assert check_returns_one(lambda: 1) is None
    assert capsys.readouterr().out == "✔ Exercise 9.9 demo: passed\n"
    for function in (lambda: 2, not_attempted_python):
        with pytest.raises(ExerciseFailed):
            check_returns_one(function)


@exercise("9.7 a check that explains the learner's errors itself")
def check_explaining_errors(function):
    try:
        function()
    except RuntimeError as error:
        raise_if_not_attempted(error)
        raise Mistake(f"your function raised: {error}") from None


def test_a_stubs_error_caught_by_a_check_is_still_not_attempted(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)
    assert check_explaining_errors(not_attempted_cpp).status == NOT_ATTEMPTED

    def wrong():
        raise RuntimeError("index 5 out of range")

    outcome = check_explaining_errors(wrong)
    assert outcome.status == FAILED and "index 5 out of range" in str(outcome)


def test_skip_is_its_own_status(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)

    @exercise("9.8 gpu")
    def check_needs_gpu():
        raise Skip("needs a CUDA GPU")

    outcome = check_needs_gpu()
    assert outcome.status == SKIPPED and "needs a CUDA GPU" in str(outcome)


def test_expect_close_names_shape_dtype_and_first_wrong_index():
    expected = torch.arange(6.0).reshape(2, 3)
    with pytest.raises(Mistake, match=r"the output has shape \(3, 2\), expected \(2, 3\)"):
        expect_close(expected.reshape(3, 2), expected, "the output")
    with pytest.raises(Mistake, match=r"has dtype torch.float64, expected torch.float32"):
        expect_close(expected.double(), expected, "the output")
    wrong = expected.clone()
    wrong[1, 2] = 9.5
    with pytest.raises(Mistake, match=r"wrong at index \(1, 2\): expected 5, got 9.5 \(1 of 6 values differ\)"):
        expect_close(wrong, expected, "the output")
    with pytest.raises(Mistake, match="should be a tensor, got list"):
        expect_close([1.0], expected, "the output")
    expect_close(expected + 1e-7, expected, "the output")


def test_expect_close_compares_integers_exactly():
    with pytest.raises(Mistake, match=r"index \(2,\): expected 2, got 3"):
        expect_close(torch.tensor([0, 1, 3]), torch.tensor([0, 1, 2]), "argindex")
