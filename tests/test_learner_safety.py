"""Nothing of the learner's is lost (issue 12, part 4): no make target deletes or rewrites a notebook,
solution or source, `make notebooks` keeps an edited notebook, and a failed rebuild of an extension
leaves the previous build loadable. Everything runs in a temporary copy or in build/, never on the
learner's files."""

import hashlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from workbook import REPO_ROOT, build
from workbook.course import generate

LEARNER_FOLDERS = ("notebooks", "solutions", "csrc")
MAKEFILE_TARGETS = re.findall(r"^([a-z][a-z-]*):", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
# A command that deletes, moves, truncates or overwrites files, or restores them from git.
WRITING_COMMAND = re.compile(
    r"\b(rm|mv|cp|rsync|truncate|tee|install|sed\s+-i|git\s+(checkout|clean|reset|restore|"
    r"stash))\b|>"
)


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dry_run(target: str) -> str:
    """What `make <target>` would run, every recipe included (-B: as if everything were out of date)."""
    result = subprocess.run(["make", "-n", "-B", target], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_makefile_targets_are_found():
    assert {"setup", "lab", "test", "notebooks"} <= set(MAKEFILE_TARGETS)


@pytest.mark.parametrize("target", MAKEFILE_TARGETS)
def test_no_make_target_writes_into_learner_folders(target):
    commands = dry_run(target)
    for line in commands.splitlines():
        if any(re.search(rf"(^|[\s/'\"=]){folder}\b", line) for folder in LEARNER_FOLDERS):
            assert not WRITING_COMMAND.search(line), f"`make {target}` runs a command that may overwrite: {line}"
    assert "--force" not in commands, f"`make {target}` forces the notebook generator over learners' edits"


def test_the_writing_check_would_see_a_destructive_recipe():
    assert WRITING_COMMAND.search("rm -rf notebooks/") and WRITING_COMMAND.search("echo x > solutions/a.ipynb")
    assert WRITING_COMMAND.search("git checkout -- csrc") and not WRITING_COMMAND.search(".venv/bin/python -m pytest")


@pytest.fixture
def repo_copy(tmp_path):
    """A copy of what `make notebooks` reads and writes: the Makefile, the workbook package, one chapter
    and a C++ source; the virtual environment is linked, not copied."""
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("Makefile", "requirements.txt"):
        shutil.copy2(REPO_ROOT / name, copy / name)  # copy2 keeps times: make sees the venv up to date
    shutil.copytree(REPO_ROOT / "workbook", copy / "workbook", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "solutions").mkdir()
    shutil.copy2(generate.SOLUTIONS / "00_setup_check.ipynb", copy / "solutions")
    (copy / "csrc" / "setup_check").mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "csrc/setup_check/add_one.cpp", copy / "csrc/setup_check")
    (copy / ".venv").symlink_to(sys.prefix)  # this run's venv (.venv-torch-<version>/ under make test-torch)
    return copy


def test_make_notebooks_keeps_a_notebook_and_a_source_the_learner_edited(repo_copy):
    solution = nbformat.read(repo_copy / "solutions/00_setup_check.ipynb", as_version=4)
    notebook = generate.student_version(solution)
    code = next(cell for cell in notebook.cells if cell.cell_type == "code")
    code.source += "\n# my own note: this is where I got stuck"
    learners = repo_copy / "notebooks/00_setup_check.ipynb"
    learners.parent.mkdir()
    nbformat.write(notebook, learners)
    source = repo_copy / "csrc/setup_check/add_one.cpp"
    source.write_text(source.read_text() + "// my own change\n")
    watched = [learners, repo_copy / "solutions/00_setup_check.ipynb", source]
    before = {path: digest(path) for path in watched}
    real_notebook = digest(REPO_ROOT / "notebooks/00_setup_check.ipynb")

    # -o setup: the copy shares the real virtual environment, which set-up must not touch from here
    # (test_no_make_target_writes_into_learner_folders covers set-up's own recipes).
    result = subprocess.run(
        ["make", "-o", "setup", "notebooks"],
        cwd=repo_copy,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo_copy), "HOME": str(repo_copy)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "notebooks/00_setup_check.ipynb: kept (edited by you" in result.stdout
    assert {path: digest(path) for path in watched} == before
    assert digest(REPO_ROOT / "notebooks/00_setup_check.ipynb") == real_notebook


# ---- a failed rebuild --------------------------------------------------------------------------------
# A tiny extension, so the failing compile costs well under a second: what is tested is what the build
# does with the previous library when the next compile fails, whatever the source.
WORKING = 'extern "C" int wb_learner_answer() { return 42; }\n'
BROKEN = 'extern "C" int wb_learner_answer() { return 42 }\n'  # the learner's edit: a missing semicolon
LOAD_AND_CALL = """
import ctypes, sys, torch
torch.ops.load_library(sys.argv[1])
print(ctypes.CDLL(sys.argv[1]).wb_learner_answer())
"""


def test_a_failed_rebuild_leaves_the_previous_build_loadable():
    source = build.BUILD_DIR / "learner_safety" / "answer.cpp"  # a fixed path: ccache hits on later runs
    build.write_if_changed(source, WORKING)
    library = build.load("wb_learner_safety", [source], is_python_module=False)

    build.write_if_changed(source, BROKEN)
    with pytest.raises(build.BuildError, match=r"answer\.cpp:1:\d+: error: expected ';'"):
        build.load("wb_learner_safety", [source], is_python_module=False)

    loaded = subprocess.run([sys.executable, "-c", LOAD_AND_CALL, library], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "42"
    build.write_if_changed(source, WORKING)
