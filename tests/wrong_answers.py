"""Wrong and cheating answers, and the rule every exercise check is held to: it rejects each one and says why.

Each chapter's exercise tests list theirs in a module-level list of `WrongAnswer`s and run each through
`assert_rejected` (one parametrized test). `tests/test_wrong_answers.py` reads those lists back from the test
files' source (without importing them, so no extension is built to count) and requires at least three wrong
answers, of at least two kinds, for every exercise the workbook has. Write the exercise number as a literal
string, `WrongAnswer("3.2", ...)`, so that count can find it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbook.course.checking import FAILED

KINDS = {
    "hard-coded": "outputs hard-coded for the inputs the notebook shows",
    "shown sizes only": "right only on the sizes or value ranges the notebook shows",
    "concept skipped": "a library call does the whole job, or the mechanism the exercise names is bypassed",
    "too slow": "correct, but slower than the exercise's own standard (a ratio against the reference, side by side)",
    "private data": "the check's own data or reference read back",
    "wrong math": "subtly wrong: ties, the identity, off-by-one, dtype, a non-contiguous input, an empty group, "
    "a missing mark_dirty or needs_input_grad, a skipped bounds or argument check",
}


@dataclass(frozen=True)
class WrongAnswer:
    exercise: str  # the exercise's number, "3.2"
    kind: str  # a key of KINDS
    description: str  # what the answer does, in a few words; also the test's id
    run: Callable  # runs the exercise's check on the answer and returns its Outcome
    says: tuple[str, ...] = ()  # words the check's explanation must contain

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; one of {sorted(KINDS)}")

    def __str__(self) -> str:
        return f"{self.exercise} {self.kind}: {self.description}"


def assert_rejected(wrong: WrongAnswer) -> None:
    """The check fails `wrong`, and its one-line explanation contains every phrase in `wrong.says`."""
    outcome = wrong.run()
    assert outcome.status == FAILED, f"the check let a wrong answer through ({wrong}): {outcome}"
    missing = [words for words in wrong.says if words not in outcome.explanation]
    assert not missing, f"the check rejected {wrong}, but its message lacks {missing}: {outcome}"


def ids(wrong: WrongAnswer) -> str:
    return str(wrong)
