"""Instructors can release the chapters with nbgrader and get exactly the learners' notebooks."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from workbook import generate

CONFIG = """
from workbook.nbgrader_stubs import use_workbook_stubs
c = get_config()
c.CourseDirectory.course_id = "workbook"
use_workbook_stubs(c)
"""


def test_generate_assignment_writes_the_workbooks_stubs_for_python_and_cpp(tmp_path):
    source = tmp_path / "source" / "workbook"
    source.mkdir(parents=True)
    for name in generate.chapter_names():
        shutil.copy(generate.SOLUTIONS / f"{name}.ipynb", source)
    (tmp_path / "nbgrader_config.py").write_text(CONFIG)
    bin_dir = str(Path(sys.executable).parent)  # nbgrader runs alembic from PATH
    env = dict(os.environ, PATH=os.pathsep.join([bin_dir, os.environ["PATH"]]))
    done = subprocess.run([os.path.join(bin_dir, "nbgrader"), "generate_assignment", "workbook", "--force"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    for name in generate.chapter_names():
        released = nbformat.read(tmp_path / "release" / "workbook" / f"{name}.ipynb", as_version=4)
        learners = nbformat.read(generate.NOTEBOOKS / f"{name}.ipynb", as_version=4)
        assert [c.source for c in released.cells] == [c.source for c in learners.cells], name
