"""A learner's progress: checks run in notebooks/ keep a record, and `python -m workbook.course.progress` shows it."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from jupyter_client.manager import start_new_kernel

from workbook import REPO_ROOT
from workbook.course import checking, progress

CHAPTER = "01_python_extensions"


def read_notebook(path):
    return json.loads(path.read_text(encoding="utf-8"))


def cell_source(notebook, grade_id):
    [cell] = [c for c in notebook["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade_id") == grade_id]
    return "".join(cell["source"])


def set_cell_source(path, grade_id, source):
    """Save a new source for one cell, as JupyterLab saves a notebook."""
    notebook = read_notebook(path)
    for cell in notebook["cells"]:
        if (cell["metadata"].get("nbgrader") or {}).get("grade_id") == grade_id:
            cell["source"] = source
    path.write_text(json.dumps(notebook, indent=1), encoding="utf-8")


def table(repo):
    return progress.render(
        progress.collect(repo / "notebooks", repo / "solutions", repo / "build" / "progress.json"),
        repo / "build" / "progress.json",
    )


def row(text, title):
    [line] = [line for line in text.splitlines() if f" {title} " in line]
    return line


@pytest.fixture
def repo(tmp_path):
    """A learner's copy of the workbook with chapter 01: the workbook package and that chapter's notebooks."""
    shutil.copytree(REPO_ROOT / "workbook", tmp_path / "workbook", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in ("notebooks", "solutions"):
        (tmp_path / folder).mkdir()
        shutil.copy(REPO_ROOT / folder / f"{CHAPTER}.ipynb", tmp_path / folder)
    return tmp_path


@pytest.fixture
def kernel(repo):
    """A Jupyter kernel started in the copy's notebooks/ folder, as JupyterLab starts one, outside pytest."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST", "WORKBOOK_"))}
    env["PYTHONPATH"] = str(repo)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(repo / "notebooks"), env=env)
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(client, code):
    """Run one cell; return what it printed or displayed."""
    shown = []

    def keep(message):
        content = message["content"]
        if message["msg_type"] == "stream":
            shown.append(content["text"])
        elif message["msg_type"] in ("execute_result", "display_data"):
            shown.append(content["data"].get("text/plain", ""))
        elif message["msg_type"] == "error":
            shown.append("\n".join(content["traceback"]))

    reply = client.execute_interactive(code, output_hook=keep, timeout=300)
    assert reply["content"]["status"] == "ok", "".join(shown)
    return "".join(shown)


def test_a_learner_session_is_recorded_and_shown(repo, kernel):
    notebook_path = repo / "notebooks" / f"{CHAPTER}.ipynb"
    notebook = read_notebook(notebook_path)
    stub, check = cell_source(notebook, "ex1-gated-unit"), cell_source(notebook, "ex1-gated-unit-check")
    solution = cell_source(read_notebook(repo / "solutions" / f"{CHAPTER}.ipynb"), "ex1-gated-unit")
    record = repo / "build" / "progress.json"
    assert "Nothing checked yet" in table(repo)

    run(kernel, "import torch")
    run(kernel, stub)
    assert "not attempted yet" in run(kernel, check)
    shown = table(repo)
    assert "Nothing checked yet" not in shown
    assert row(shown, "1.1 GatedUnit backward").endswith("  not attempted")
    assert row(shown, "1.2 in-place leaky ReLU").endswith("  not checked yet")
    assert "Next: 1.1 GatedUnit backward, in notebooks/01_python_extensions.ipynb" in shown

    set_cell_source(notebook_path, "ex1-gated-unit", solution)  # the learner writes an answer and saves
    assert row(table(repo), "1.1 GatedUnit backward").endswith("changed since last checked (last check: not attempted)")

    run(kernel, solution)
    run(kernel, "x = 1")  # another cell between the answer and its check
    assert "passed" in run(kernel, check)
    shown = table(repo)
    assert row(shown, "1.1 GatedUnit backward").endswith("  passed")
    assert "Next: 1.2 in-place leaky ReLU" in shown
    entry = json.loads(record.read_text())["notebooks"][CHAPTER]["ex1-gated-unit"]
    assert entry["status"] == "passed" and entry["title"] == "1.1 GatedUnit backward"
    assert entry["answer_hash"] == progress.source_hash(solution)

    # A wrong answer, run but not saved: the record has its message, and the saved answer no longer matches.
    run(kernel, solution.replace("grad_x = grad_y * gate", "grad_x = grad_y"))
    assert "failed" in run(kernel, check)
    shown = table(repo)
    assert row(shown, "1.1 GatedUnit backward").endswith("changed since last checked (last check: failed)")
    assert json.loads(record.read_text())["notebooks"][CHAPTER]["ex1-gated-unit"]["message"]

    # Not recorded: under pytest (nbval's kernels), in strict mode (nbgrader autograde), or in solutions/.
    before = record.read_text()
    run(kernel, solution)
    for setting in ("os.environ['PYTEST_VERSION'] = '9'", "os.environ['WORKBOOK_STRICT'] = '1'"):
        run(kernel, f"import os\n{setting}")
        run(kernel, check)
        run(kernel, "os.environ.pop('PYTEST_VERSION', None), os.environ.pop('WORKBOOK_STRICT', None)")
    run(kernel, f"os.chdir({str(repo / 'solutions')!r})")
    assert "passed" in run(kernel, check)
    assert record.read_text() == before


def test_every_exercise_answer_is_found_in_a_top_to_bottom_run():
    """For each exercise of every chapter, run as a notebook runs (every code cell of the solution in order, up
    to its check): the answer cell's source as it ran is the one recorded."""
    for path in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        learner = read_notebook(path)
        solved = read_notebook(REPO_ROOT / "solutions" / path.name)
        ran = [progress._source(cell) for cell in solved["cells"] if cell["cell_type"] == "code"]
        ids = [(cell["metadata"].get("nbgrader") or {}).get("grade_id") for cell in solved["cells"]]
        code_ids = [grade_id for cell, grade_id in zip(solved["cells"], ids) if cell["cell_type"] == "code"]
        for exercise in progress.exercises(learner):
            answer, check = code_ids.index(exercise.grade_id), code_ids.index(f"{exercise.grade_id}-check")
            assert progress.latest_run(exercise.answer, ran[:check]) == ran[answer], (path.name, exercise.grade_id)


def test_the_table_reads_no_heavy_module_and_a_fresh_clone_has_nothing_checked(tmp_path):
    script = textwrap.dedent(
        """
        import sys, time
        start = time.perf_counter()
        from workbook.course import progress
        progress.main([])
        heavy = sorted(m for m in ("torch", "nbformat", "IPython", "jupyter_client", "numpy") if m in sys.modules)
        print(f"heavy modules: {heavy}; {time.perf_counter() - start:.3f} s")
        """
    )
    env = dict(os.environ, WORKBOOK_BUILD_DIR=str(tmp_path / "build"))
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Nothing checked yet")
    chapters = {path.stem for path in (REPO_ROOT / "solutions").glob("*.ipynb")}
    count = sum(len(progress.exercises(read_notebook(REPO_ROOT / "notebooks" / f"{c}.ipynb"))) for c in chapters)
    assert count >= 32
    assert f"{count} exercises: {count} not checked yet." in done.stdout
    assert "heavy modules: []" in done.stdout
    print(done.stdout.splitlines()[-1])


def test_make_progress_prints_the_table(tmp_path):
    env = dict(os.environ, WORKBOOK_BUILD_DIR=str(tmp_path / "build"))
    done = subprocess.run(
        ["make", "--no-print-directory", "progress"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Next: 1.1 GatedUnit backward" in done.stdout


def test_chapter_00_stores_what_a_fresh_clone_shows(tmp_path):
    fresh = progress.render(
        progress.collect(record_path=tmp_path / "progress.json"), REPO_ROOT / "build" / "progress.json"
    )
    for folder in ("solutions", "notebooks"):
        notebook = read_notebook(REPO_ROOT / folder / "00_setup_check.ipynb")
        [cell] = [c for c in notebook["cells"] if "progress.show()" in "".join(c["source"])]
        assert "".join(cell["outputs"][0]["text"]).rstrip("\n") == fresh, folder


# ---- odd states -------------------------------------------------------------------------------------------


def entry(status="passed", answer_hash=None, title="1.1 GatedUnit backward"):
    return {"title": title, "status": status, "message": "", "answer_hash": answer_hash, "checked_at": "2030-01-01"}


def test_a_missing_notebook_and_a_renamed_one_are_named(repo):
    record = repo / "build" / "progress.json"
    progress.update_record(record, CHAPTER, "ex1-gated-unit", entry())
    (repo / "notebooks" / f"{CHAPTER}.ipynb").rename(repo / "notebooks" / "my_chapter_01.ipynb")
    shown = table(repo)
    assert "notebooks/01_python_extensions.ipynb is missing (renamed or deleted?)" in shown
    assert "python -m workbook.course.generate 01_python_extensions" in shown
    assert "The record holds 1 check of notebooks/01_python_extensions.ipynb, which is not there any more" in shown
    assert "my_chapter_01\n" in shown and row(shown, "1.1 GatedUnit backward").endswith("not checked yet")


def test_an_exercise_that_no_longer_exists_is_named_and_left_out(repo):
    record = repo / "build" / "progress.json"
    progress.update_record(record, CHAPTER, "ex1-retired", entry(title="1.9 a retired exercise"))
    shown = table(repo)
    assert (
        "a check of exercise 1.9 a retired exercise (ex1-retired), which notebooks/01_python_extensions.ipynb" in shown
    )
    assert "1.9 a retired exercise " not in shown.split("Note:")[0]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda path: path.write_text('{"format": 1, "notebooks": {"01_python'),  # cut off mid-write
        lambda path: path.write_text('["a list"]'),
        lambda path: path.write_text(json.dumps({"format": 1, "notebooks": {"x": {"y": {"status": "great"}}}})),
        lambda path: path.mkdir(),  # unreadable as a file
    ],
    ids=["truncated", "not-a-record", "unknown-status", "a-folder"],
)
def test_an_unreadable_record_is_set_aside_and_reported(repo, spoil):
    record = repo / "build" / "progress.json"
    record.parent.mkdir()
    spoil(record)
    shown = table(repo)
    [aside] = list(record.parent.glob("progress.json.unreadable-*"))
    assert "could not be read" in shown and aside.name in shown
    assert not record.exists() and "Nothing checked yet" in shown

    progress.update_record(record, CHAPTER, "ex1-gated-unit", entry())  # recording starts afresh
    shown = table(repo)
    assert row(shown, "1.1 GatedUnit backward").endswith("  passed")
    assert f"{aside.name}: an unreadable record, set aside" in shown


def test_a_check_writing_to_an_unreadable_record_sets_it_aside_too(repo):
    record = repo / "build" / "progress.json"
    record.parent.mkdir()
    record.write_text("{")
    progress.update_record(record, CHAPTER, "ex1-gated-unit", entry())
    assert json.loads(record.read_text())["notebooks"][CHAPTER]["ex1-gated-unit"]["status"] == "passed"
    assert len(list(record.parent.glob("progress.json.unreadable-*"))) == 1


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    record, go = tmp_path / "build" / "progress.json", tmp_path / "go"
    writer = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from workbook.course import progress
        Path({str(tmp_path)!r}, "ready-" + sys.argv[1]).touch()
        while not Path({str(go)!r}).exists():
            time.sleep(0.01)
        for number in range(40):
            progress.update_record(Path({str(record)!r}), sys.argv[1], f"ex{{number}}", {entry()!r})
        """
    )
    writers = [subprocess.Popen([sys.executable, "-c", writer, name], cwd=REPO_ROOT) for name in ("a", "b")]
    while not all((tmp_path / f"ready-{name}").exists() for name in "ab"):
        assert all(process.poll() is None for process in writers)
        time.sleep(0.01)
    go.touch()  # both start writing at the same moment
    assert [process.wait(timeout=120) for process in writers] == [0, 0]
    notebooks = json.loads(record.read_text())["notebooks"]
    assert {name: len(entries) for name, entries in notebooks.items()} == {"a": 40, "b": 40}
    assert not list(record.parent.glob(".progress.json.*"))  # no temporary file left behind


def test_a_failure_to_record_changes_nothing_a_check_shows(monkeypatch, capsys):
    @checking.exercise("9.9 demo")
    def check_demo(value):
        if value != 1:
            raise checking.Mistake("expected 1")

    def broken(*args):
        raise OSError("disk full")

    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)
    monkeypatch.setattr(progress, "record_check", broken)
    assert str(check_demo(2)) == "✘ Exercise 9.9 demo: failed — expected 1"
    assert capsys.readouterr() == ("", "")
