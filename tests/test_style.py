"""The tree stays formatted and linted: ruff for Python, clang-format for C++ and CUDA.

Both tools are pinned in requirements.txt (their output changes between versions); their settings are in
pyproject.toml and .clang-format. To fix what fails here (layout only, never what the code does):

    .venv/bin/ruff format . && .venv/bin/ruff check --fix .
    .venv/bin/clang-format -i $(git ls-files 'csrc/*.cpp' 'csrc/*.h' 'csrc/*.cu' 'csrc/*.cuh')

There is no make target for it on purpose: every make target leaves the learner's sources as they are.
"""

import shutil
import subprocess
import sys
from pathlib import Path

from workbook import REPO_ROOT

BIN = Path(sys.executable).parent
CXX_SUFFIXES = (".cpp", ".h", ".cu", ".cuh")


def _tool(name):
    return str(BIN / name) if (BIN / name).exists() else shutil.which(name) or name


def _run(*command):
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)


def cxx_sources():
    """The C++ and CUDA files under csrc/ that git tracks (a learner's scratch files are theirs)."""
    listed = _run("git", "ls-files", "-z", "--", *(f"csrc/*{suffix}" for suffix in CXX_SUFFIXES))
    assert listed.returncode == 0, listed.stderr
    return sorted(name for name in listed.stdout.split("\0") if name)


def test_python_is_formatted():
    result = _run(_tool("ruff"), "format", "--check", ".")
    assert result.returncode == 0, "run `ruff format .` (see this file's docstring):\n" + result.stdout + result.stderr


def test_python_passes_the_linter():
    result = _run(_tool("ruff"), "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_cxx_is_formatted():
    sources = cxx_sources()
    assert len(sources) > 20  # every library under csrc/ is covered
    result = _run(_tool("clang-format"), "--dry-run", "--Werror", *sources)
    assert result.returncode == 0, "run clang-format -i (see this file's docstring):\n" + result.stderr[-4000:]
