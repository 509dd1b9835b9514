"""notebooks/ is generated from solutions/: stubs, edit protection, and no drift between the two."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from workbook.bench import timing
from workbook.course import generate

PYTHON_CELL = """def f(x):
    y = x + 1
    ### BEGIN SOLUTION
    return y * 2
    ### END SOLUTION
"""
CPP_CELL = '''source = """
at::Tensor twice(const at::Tensor& x) {
  // BEGIN SOLUTION
  return x * 2;
  // END SOLUTION
}
"""'''


def test_python_region_becomes_an_indented_stub():
    stubbed = generate.stub_source(PYTHON_CELL)
    assert "return y * 2" not in stubbed
    assert '    # YOUR CODE HERE\n    raise NotImplementedError("not attempted yet")' in stubbed
    namespace = {}
    exec(stubbed, namespace)
    with pytest.raises(NotImplementedError, match="not attempted yet"):
        namespace["f"](1)


def test_cpp_region_becomes_a_torch_check_stub():
    stubbed = generate.stub_source(CPP_CELL)
    assert "x * 2" not in stubbed
    assert '  // YOUR CODE HERE\n  TORCH_CHECK(false, "not attempted yet");\n}' in stubbed


def test_cells_without_regions_are_unchanged():
    assert (
        generate.stub_source("print(1)\n# BEGIN SOLUTION is only a marker with ### in front\n")
        == "print(1)\n# BEGIN SOLUTION is only a marker with ### in front\n"
    )


@pytest.fixture
def chapter(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(generate, "NOTEBOOKS", tmp_path / "notebooks")
    generate.SOLUTIONS.mkdir()
    notebook = new_notebook(cells=[new_markdown_cell("# Demo"), new_code_cell(PYTHON_CELL)])
    nbformat.write(notebook, generate.SOLUTIONS / "99_demo.ipynb")
    return generate.NOTEBOOKS / "99_demo.ipynb"


def test_generator_writes_then_leaves_an_unchanged_notebook_alone(chapter):
    assert generate.generate("99_demo") == "written"
    assert "NotImplementedError" in nbformat.read(chapter, as_version=4).cells[1].source
    assert generate.generate("99_demo") == "unchanged"


def test_generator_never_overwrites_a_learners_edit(chapter):
    generate.generate("99_demo")
    notebook = nbformat.read(chapter, as_version=4)
    notebook.cells[1].source = notebook.cells[1].source.replace(
        'raise NotImplementedError("not attempted yet")', "return y * 2"
    )
    nbformat.write(notebook, chapter)
    solution = nbformat.read(generate.SOLUTIONS / "99_demo.ipynb", as_version=4)
    solution.cells[0].source = "# Demo, revised"
    nbformat.write(solution, generate.SOLUTIONS / "99_demo.ipynb")

    assert generate.generate("99_demo").startswith("kept")
    assert "return y * 2" in nbformat.read(chapter, as_version=4).cells[1].source
    assert generate.generate("99_demo", force=True) == "written"
    assert nbformat.read(chapter, as_version=4).cells[0].source == "# Demo, revised"


def test_cli_refuses_an_unknown_chapter(chapter, capsys):
    assert generate.main(["00_nonexistent"]) == 2
    assert "no such chapter" in capsys.readouterr().err


@pytest.mark.parametrize("name", generate.chapter_names())
def test_notebooks_match_their_solutions(name):
    notebook = nbformat.read(generate.NOTEBOOKS / f"{name}.ipynb", as_version=4)
    expected = generate.student_version(nbformat.read(generate.SOLUTIONS / f"{name}.ipynb", as_version=4))
    assert not generate.learner_edited(notebook), f"notebooks/{name}.ipynb was edited by hand"
    assert generate.cell_signature(notebook) == generate.cell_signature(expected), (
        f"notebooks/{name}.ipynb is out of date: run  python -m workbook.course.generate --execute {name}"
    )


def test_every_notebook_has_a_solution():
    notebooks = sorted(path.stem for path in generate.NOTEBOOKS.glob("*.ipynb"))
    assert notebooks == generate.chapter_names()


def test_stored_outputs_measure_in_full_even_when_the_test_suite_asks_for_quick_timings(tmp_path, monkeypatch):
    monkeypatch.setenv(timing.QUICK_ENV, "1")  # tests/conftest.py sets it for the suite
    path = tmp_path / "probe.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(f"import os\nprint(os.environ.get({timing.QUICK_ENV!r}))")]), path)
    generate.execute(path)
    assert nbformat.read(path, as_version=4).cells[0].outputs[0].text == "None\n"
