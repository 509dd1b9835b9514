"""Every exercise has its catalogue of wrong and cheating answers (tests/wrong_answers.py) in the suite.

The exercises are read from the checks' `@exercise("N.M title")` decorators, the catalogue entries from the test
files' `WrongAnswer("N.M", "kind", ...)` calls; both by reading source, so counting builds nothing.
"""

import ast
import re
from collections import defaultdict
from pathlib import Path

from wrong_answers import KINDS

from workbook import REPO_ROOT

_CHECK_TITLE = re.compile(r'@exercise\(\s*"(\d+\.\d+)')


def exercises() -> set[str]:
    found = set()
    for module in (REPO_ROOT / "workbook" / "exercises").glob("ch*.py"):
        found.update(_CHECK_TITLE.findall(module.read_text()))
    return found


def catalogue() -> dict[str, list[str]]:
    """Exercise number -> the kinds of its wrong answers, from every WrongAnswer(...) written in tests/."""
    kinds = defaultdict(list)
    for path in Path(__file__).parent.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "WrongAnswer":
                number, kind = (argument.value for argument in node.args[:2])
                kinds[number].append(kind)
    return kinds


def test_the_exercises_are_found():
    assert {"1.1", "3.2", "10.3"} <= exercises()


def test_every_exercise_has_three_wrong_answers_of_two_kinds():
    listed = catalogue()
    short = {
        number: listed.get(number, [])
        for number in sorted(exercises())
        if len(listed.get(number, [])) < 3 or len(set(listed.get(number, []))) < 2
    }
    assert not short, f"exercises with fewer than three wrong answers, or only one kind: {short}"


def test_every_listed_answer_names_a_real_exercise_and_kind():
    known = exercises()
    for number, kinds in catalogue().items():
        assert number in known, f"WrongAnswer({number!r}, ...) names no exercise"
        assert set(kinds) <= set(KINDS), f"{number}: unknown kinds {set(kinds) - set(KINDS)}"
