"""The progress line of a build (issue 11, part 3): shown live in a notebook, never stored in it.

The notebook test runs a two-cell notebook twice with nbclient, the way `workbook.course.generate` stores
chapters: once with a real compile (a C++ file including <regex>, compiled by ninja through
`build.run_build_step`, 0.8 s on an idle machine, where the line shows after 0.1 s) and once warm (ninja
has nothing to do). The cold run must have shown the line; both runs must store the same outputs; and
nbval, as `make test` runs it, must accept the stored notebook while the build runs cold again."""

import json
import shutil
import subprocess
import sys
import time

import nbclient
import nbformat
import pytest

from workbook import build
from workbook.build import progress_line
from workbook.course import generate

TINY_CPP = "#include <regex>\nint answer() { return 42; }\n"  # the header alone: under a second to compile
NINJA_FILE = "rule cxx\n  command = c++ -c $in -o $out\nbuild tiny.o: cxx tiny.cpp\n"


class RecordingClient(nbclient.NotebookClient):
    """nbclient's client, keeping the text of every display update the kernel sent."""

    updates: list[str] = []

    def process_message(self, msg, cell, cell_index):
        if msg["msg_type"] == "update_display_data":
            RecordingClient.updates.append(msg["content"]["data"].get("text/plain", ""))
        return super().process_message(msg, cell, cell_index)


def build_notebook(project) -> nbformat.NotebookNode:
    setup = (
        "from pathlib import Path\n"
        "from workbook import build\nfrom workbook.build import progress_line\n"
        "progress_line.DELAY_S, progress_line.INTERVAL_S = 0.1, 0.1\n"
        f"project = Path({str(project)!r})"
    )
    run = (
        'print("before the build")\n'
        'build.run_build_step("tiny", "build", ["ninja", "-C", str(project)], log_dir=project)\n'
        'print("after the build")'
    )
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(run)])


def stored_outputs(path) -> str:
    notebook = nbformat.read(path, as_version=4)
    return json.dumps([cell.outputs for cell in notebook.cells], sort_keys=True)


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_a_cold_build_shows_the_line_and_stores_what_a_warm_build_stores(tmp_path, monkeypatch):
    build.ensure_ninja_on_path()
    project = tmp_path / "tiny"
    project.mkdir()
    (project / "tiny.cpp").write_text(TINY_CPP)
    (project / "build.ninja").write_text(NINJA_FILE)
    monkeypatch.setattr(nbclient, "NotebookClient", RecordingClient)
    RecordingClient.updates = []
    stored = {}
    for run in ("cold", "warm"):
        path = tmp_path / f"{run}.ipynb"
        nbformat.write(build_notebook(project), path)
        generate.execute(path)
        stored[run] = stored_outputs(path)
        if run == "cold":
            assert (project / "tiny.o").exists()
            shown = list(RecordingClient.updates)
    assert any(text.startswith("tiny: compiling tiny.cpp … ") for text in shown), shown
    assert shown[-1] == ""  # emptied at the end
    assert stored["cold"] == stored["warm"]
    assert json.loads(stored["cold"])[1] == [
        {"name": "stdout", "output_type": "stream", "text": "before the build\nafter the build\n"}
    ]

    (project / "tiny.o").unlink()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    nbval = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--nbval",
            "--nbval-current-env",
            "warm.ipynb",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert nbval.returncode == 0 and "2 passed" in nbval.stdout, nbval.stdout[-2000:]
    assert (project / "tiny.o").exists()


def test_compiling_now_names_the_file_a_child_process_compiles():
    # A stand-in compiler: any descendant whose command line has -c and a source file counts.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "-c", "fake_unit.cpp"])
    try:
        deadline = time.monotonic() + 10
        while "fake_unit.cpp" not in progress_line.compiling_now() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert progress_line.compiling_now() == ["fake_unit.cpp"]
    finally:
        child.kill()
        child.wait()
    assert progress_line.compiling_now() == []


def test_outside_jupyter_and_a_terminal_nothing_is_printed(capsys, monkeypatch):
    monkeypatch.setattr(progress_line, "DELAY_S", 0.0)
    with progress_line.shown("quiet"):
        time.sleep(0.3)
    assert capsys.readouterr() == ("", "")


def test_the_line_names_each_file_with_its_seconds_and_the_total():
    assert progress_line.describe("wb_scatter", 15.2, [("scatter_cpu.cpp", 12.4), ("scatter.cpp", 3.0)]) == (
        "wb_scatter: compiling scatter_cpu.cpp … 12 s, scatter.cpp … 3 s (15 s so far)"
    )
    assert progress_line.describe("wb_scatter", 4.0, []) == "wb_scatter: building … 4 s"


def test_generate_drops_an_emptied_display_and_joins_the_streams_it_separated():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    notebook.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\n"),
        nbformat.v4.new_output("display_data", data={}),
        nbformat.v4.new_output("stream", name="stdout", text="b\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": "kept"}),
    ]
    generate.drop_empty_displays(notebook)
    assert [output.get("text") or output.data["text/plain"] for output in notebook.cells[0].outputs] == [
        "a\nb\n",
        "kept",
    ]
