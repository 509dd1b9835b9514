"""Where a learner stands: every check run in notebooks/ is recorded, and this module shows the record.

    python -m workbook.course.progress        # or: make progress

**The record.** Each time an exercise's check runs in a notebook of `notebooks/`, `workbook.course.checking` calls
`record_check`, which writes the outcome to `build/progress.json` (under WORKBOOK_BUILD_DIR when that is
set): for each notebook and exercise (the nbgrader `grade_id` of its answer cell), passed / failed with the
check's one-line message / not attempted / skipped, a hash of the answer cell's source as it ran, and when.

A check knows it runs in `notebooks/` from its kernel's working folder: JupyterLab, nbclient and other
Jupyter front ends start a notebook's kernel in the notebook's folder. Nothing is recorded in `solutions/`,
outside IPython, under pytest (which sets PYTEST_VERSION; nbval's kernels inherit it), or in strict mode
(WORKBOOK_STRICT, as for `nbgrader autograde`, whose kernels also run in the course's own folders).

**The answer cell as it ran.** The notebook file may be older than what the kernel ran (JupyterLab saves
every two minutes), so the answer's source comes from the kernel's input history (IPython's, the same in
JupyterLab, nbclient and any other front end): the latest cell run before the check that defines every name
the answer cell defines (`class GatedUnit`, `def reverse`, `DIVIDE_BY_COUNT_CU = ...`), which is the code
the check found under those names.

**Safety.** A write holds an OS lock (build/locks/progress.flock) and replaces the file atomically
(a temporary file, then os.replace), so notebooks checking at once cannot lose each other's entries and a
killed kernel leaves the old record whole. An unreadable record is renamed aside (`progress.json.unreadable-
<time>`) and reported, never a crash. The learner's notebooks are only read. This module imports no more
than the standard library, so the table appears in a fraction of a second.

**The table** lists every notebook of `notebooks/` that has exercises, each exercise with its last result,
or *changed since last checked* when the answer cell's source in the saved notebook no longer matches the
hash of the source that was checked.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from workbook import BUILD_DIR, REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
SOLUTIONS = REPO_ROOT / "solutions"
RECORD = BUILD_DIR / "progress.json"
_EXERCISE_MODULES = Path(__file__).parent.parent / "exercises"
_FORMAT = 1

PASSED, FAILED, NOT_ATTEMPTED, SKIPPED = "passed", "failed", "not attempted", "skipped"
CHANGED, NOT_CHECKED = "changed since last checked", "not checked yet"
_RECORDED = (PASSED, FAILED, NOT_ATTEMPTED, SKIPPED)
_ORDER = (PASSED, FAILED, CHANGED, NOT_ATTEMPTED, SKIPPED, NOT_CHECKED)
_SYMBOLS = {PASSED: "✔", FAILED: "✘", CHANGED: "✎", NOT_ATTEMPTED: "…", SKIPPED: "○", NOT_CHECKED: "·"}
_DECORATED_CHECK = re.compile(r"^@exercise\((['\"])(.+?)\1\)\s*\ndef (\w+)", re.MULTILINE)


# ---- notebooks, read as JSON ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    grade_id: str  # the nbgrader grade_id of the answer cell; its check cell's is grade_id + "-check"
    title: str
    answer: str  # the answer cell's source, as saved
    check_calls: frozenset  # the names the check cell calls


def exercises(notebook: dict, titles: dict | None = None) -> list[Exercise]:
    """The notebook's exercises in order: each answer cell (nbgrader `solution`) that has a check cell."""
    titles = titles or {}
    code_cells = [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]
    grade_ids = {}
    for index, cell in enumerate(code_cells):
        grade_id = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if grade_id:
            grade_ids.setdefault(grade_id, index)
    found = []
    for grade_id, index in grade_ids.items():
        answer = code_cells[index]
        check_index = grade_ids.get(f"{grade_id}-check")
        if check_index is None or not answer["metadata"]["nbgrader"].get("solution"):
            continue
        calls = _called_names(_source(code_cells[check_index]))
        title = next((titles[name] for name in sorted(calls) if name in titles), grade_id)
        found.append(Exercise(grade_id, title, _source(answer), calls))
    return found


def check_titles() -> dict[str, str]:
    """Each check function's exercise title ("1.1 GatedUnit backward"), read from workbook/exercises/ without
    importing it (the checks import torch)."""
    titles = {}
    for module in sorted(_EXERCISE_MODULES.glob("*.py")):
        for _, title, name in _DECORATED_CHECK.findall(module.read_text(encoding="utf-8")):
            titles[name] = title
    return titles


def source_hash(source: str) -> str:
    """A hash of a cell's source that ignores trailing spaces and blank lines at either end (IPython's input
    history drops a cell's final newlines)."""
    text = "\n".join(line.rstrip() for line in source.splitlines()).strip("\n")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _called_names(source: str) -> frozenset:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset(re.findall(r"\b(\w+)\s*\(", source))
    return frozenset(
        node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    )


# ---- which cell of the history is the answer --------------------------------------------------------------

_TOP_LEVEL_NAME = re.compile(r"^(?:(?:async\s+)?def|class)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


def defined_names(source: str) -> frozenset:
    """The names a cell defines at its top level (functions, classes, assignments), read line by line so
    that a cell with a syntax error or an IPython magic still counts."""
    return frozenset(function or variable for function, variable in _TOP_LEVEL_NAME.findall(source))


def latest_run(answer: str, history: list[str]) -> str | None:
    """The latest entry of `history` that defines every name the answer cell defines: the code the check
    then found under those names. None when no entry does (or the answer defines nothing)."""
    names = defined_names(answer)
    if not names:
        return None
    return next((entry for entry in reversed(history) if names <= defined_names(entry)), None)


# ---- the record -------------------------------------------------------------------------------------------


def record_check(check_name: str, outcome) -> None:
    """Record the outcome of check function `check_name` when it ran in a learner's notebook (see the module
    docstring); otherwise do nothing. workbook.course.checking calls this after every check, outside strict mode."""
    shell = _learner_shell()
    if shell is None:
        return
    found = _running_notebook(check_name)
    if found is None:
        return
    path, notebook, exercise = found
    history = list(shell.history_manager.input_hist_raw[:-1])  # the last entry is the check cell itself
    executed = latest_run(exercise.answer, history)
    status = NOT_ATTEMPTED if outcome.status == "not attempted yet" else outcome.status
    entry = {
        "title": outcome.exercise,
        "status": status,
        "message": outcome.explanation if status in (FAILED, SKIPPED) else "",
        "answer_hash": None if executed is None else source_hash(executed),
        "checked_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    update_record(RECORD, path.stem, exercise.grade_id, entry)


def _learner_shell():
    if "PYTEST_VERSION" in os.environ:
        return None
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if getattr(shell, "history_manager", None) is not None else None


def _running_notebook(check_name: str):
    """(path, notebook, exercise) for the notebook of notebooks/ whose check cell calls `check_name`, when the
    kernel runs in notebooks/; else None. The notebook JupyterLab started the kernel for (JPY_SESSION_NAME)
    is tried first, then the chapters, then other notebooks there (a learner's copies)."""
    if Path.cwd().resolve() != NOTEBOOKS.resolve():
        return None
    session = Path(os.environ.get("JPY_SESSION_NAME") or "").name
    candidates = sorted(
        NOTEBOOKS.glob("*.ipynb"), key=lambda path: (path.name != session, not (SOLUTIONS / path.name).exists(), path)
    )
    for path in candidates:
        try:
            text = path.read_text(encoding="utf-8")
            notebook = json.loads(text) if check_name in text else None
        except (OSError, ValueError):
            continue
        for exercise in exercises(notebook) if isinstance(notebook, dict) else []:
            if check_name in exercise.check_calls:
                return path, notebook, exercise
    return None


def update_record(record_path: Path, notebook: str, grade_id: str, entry: dict) -> None:
    """Set one exercise's entry, under the record's lock, replacing the file atomically."""
    from workbook.build import exclusive

    record_path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(_lock_file(record_path)):
        record, _ = _read_or_set_aside(record_path)
        record.setdefault(notebook, {})[grade_id] = entry
        _write(record_path, record)


def load_record(record_path: Path) -> tuple[dict, list[str]]:
    """The record's entries ({notebook: {grade_id: entry}}) and notes about what could not be read."""
    notes = [
        f"{_shown(aside)}: an unreadable record, set aside; progress was recorded afresh after it. "
        "Delete it when you no longer need it."
        for aside in sorted(record_path.parent.glob(f"{record_path.name}.unreadable-*"))
    ]
    try:
        return _read(record_path), notes
    except FileNotFoundError:
        return {}, notes
    except (OSError, ValueError):
        from workbook.build import exclusive

        with exclusive(_lock_file(record_path)):
            record, note = _read_or_set_aside(record_path)
        return record, notes + ([note] if note else [])


def _lock_file(record_path: Path) -> Path:
    return record_path.with_name(record_path.name + ".flock")


def _read(record_path: Path) -> dict:
    data = json.loads(record_path.read_text(encoding="utf-8"))
    notebooks = data.get("notebooks") if isinstance(data, dict) and data.get("format") == _FORMAT else None
    if not isinstance(notebooks, dict) or not all(
        isinstance(entries, dict)
        and all(isinstance(entry, dict) and entry.get("status") in _RECORDED for entry in entries.values())
        for entries in notebooks.values()
    ):
        raise ValueError("it is not a progress record of this workbook")
    return notebooks


def _read_or_set_aside(record_path: Path) -> tuple[dict, str | None]:
    """With the lock held: the record's entries, or, when it cannot be read, an empty record, after renaming
    the file aside, and a note that says so."""
    try:
        return _read(record_path), None
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) else str(error).split(":")[0]
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = record_path.with_name(f"{record_path.name}.unreadable-{stamp}")
        number = 1
        while aside.exists():
            number += 1
            aside = record_path.with_name(f"{record_path.name}.unreadable-{stamp}-{number}")
        try:
            os.replace(record_path, aside)
        except OSError as rename_error:
            return {}, f"{_shown(record_path)} cannot be read ({reason}) nor set aside ({rename_error.strerror})."
        return {}, f"{_shown(record_path)} could not be read ({reason}); it was set aside as {_shown(aside)}."


def _write(record_path: Path, record: dict) -> None:
    descriptor, temporary = tempfile.mkstemp(prefix=f".{record_path.name}.", suffix=".tmp", dir=record_path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            json.dump({"format": _FORMAT, "notebooks": record}, file, indent=1, sort_keys=True, ensure_ascii=False)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, record_path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _shown(path: Path) -> str:
    """A path as the learner knows it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


# ---- the table --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    notebook: str
    exercise: Exercise
    state: str
    entry: dict | None


@dataclass(frozen=True)
class Progress:
    chapters: list  # [(notebook name, [Row, ...]), ...]
    notes: list
    anything_recorded: bool


def collect(notebooks: Path = NOTEBOOKS, solutions: Path = SOLUTIONS, record_path: Path = RECORD) -> Progress:
    record, notes = load_record(record_path)
    titles = check_titles()
    chapters, present = [], {}
    for path in sorted(notebooks.glob("*.ipynb")):
        try:
            found = exercises(json.loads(path.read_text(encoding="utf-8")), titles)
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as error:
            notes.append(f"notebooks/{path.name} could not be read ({type(error).__name__}); it is left out.")
            continue
        present[path.stem] = {exercise.grade_id for exercise in found}
        if found:
            entries = record.get(path.stem, {})
            rows = []
            for exercise in found:
                entry = entries.get(exercise.grade_id)
                rows.append(Row(path.stem, exercise, _state(exercise, entry), entry))
            chapters.append((path.stem, rows))
    for solution in sorted(solutions.glob("*.ipynb")):
        if solution.stem not in present and not (notebooks / solution.name).exists():
            notes.append(
                f"notebooks/{solution.name} is missing (renamed or deleted?). "
                f"`python -m workbook.course.generate {solution.stem}` writes it afresh from solutions/."
            )
    for name, entries in sorted(record.items()):
        if name not in present:
            notes.append(
                f"The record holds {_count(len(entries), 'check')} of notebooks/{name}.ipynb, which is not there "
                "any more (renamed or deleted?); they are not shown."
            )
            continue
        for grade_id, entry in sorted(entries.items()):
            if grade_id not in present[name]:
                notes.append(
                    f"The record holds a check of exercise {entry.get('title') or grade_id} ({grade_id}), which "
                    f"notebooks/{name}.ipynb no longer has; it is not shown."
                )
    return Progress(chapters, notes, bool(record))


def _state(exercise: Exercise, entry: dict | None) -> str:
    if entry is None:
        return NOT_CHECKED
    if entry.get("answer_hash") and entry["answer_hash"] != source_hash(exercise.answer):
        return CHANGED
    return entry["status"]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def render(progress: Progress, record_path: Path = RECORD) -> str:
    rows = [row for _, chapter_rows in progress.chapters for row in chapter_rows]
    width = max((len(row.exercise.title) for row in rows), default=0)
    lines = []
    if not progress.anything_recorded:
        lines += [f"Nothing checked yet: each check you run in notebooks/ is recorded in {_shown(record_path)}.", ""]
    for name, chapter_rows in progress.chapters:
        lines.append(name)
        for row in chapter_rows:
            state = row.state
            if state == CHANGED:
                state += f" (last check: {row.entry['status']})"
            lines.append(f"  {_SYMBOLS[row.state]} {row.exercise.title:<{width}}  {state}")
            if row.state in (FAILED, SKIPPED) and row.entry.get("message"):
                lines.append(f"      {_shorten(row.entry['message'], 100)}")
    counts = Counter(row.state for row in rows)
    summary = ", ".join(f"{counts[state]} {state}" for state in _ORDER if counts[state])
    lines += ["", f"{_count(len(rows), 'exercise')}: {summary}." if rows else "No exercises found in notebooks/."]
    upcoming = next((row for row in rows if row.state not in (PASSED, SKIPPED)), None)
    if upcoming is not None:
        lines.append(f"Next: {upcoming.exercise.title}, in notebooks/{upcoming.notebook}.ipynb")
    elif rows:
        lines.append("Every exercise has passed its check.")
    if progress.notes:
        lines += ["", *(f"Note: {note}" for note in progress.notes)]
    return "\n".join(lines)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show() -> None:
    """Print the table (chapter 00 calls this)."""
    print(render(collect()))


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    show()
    return 0


if __name__ == "__main__":
    sys.exit(main())
