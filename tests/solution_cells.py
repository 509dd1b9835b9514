"""What the exercise tests of chapters 03 and 04 share: a solution cell of solutions/, run as the notebook runs
it, and the check's failure it should cause."""

import nbformat

from workbook.course import generate


def run_solution_cell(chapter, grade_id):
    notebook = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    namespace = {}
    exec(  # the names the chapters' first cells import
        "import torch\nimport torch.utils.cpp_extension as cpp_extension\n"
        "from workbook.build import fresh_namespace\nfrom workbook.ops import lltm, scatter\n",
        namespace,
    )
    exec(cell.source, namespace)
    return namespace


def failed_with(outcome, *words):
    assert outcome.status == "failed", str(outcome)
    for word in words:
        assert word in outcome.explanation, str(outcome)
