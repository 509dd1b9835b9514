"""Make `nbgrader generate_assignment` write the workbook's stubs, for C++ regions too.

nbgrader replaces every solution region with the one stub of the notebook's language, so a
`// BEGIN SOLUTION` region inside a C++ source string would receive Python. This preprocessor uses the
workbook's own generator instead (the same stubs as `notebooks/`). In the course's nbgrader_config.py:

    from workbook.course.nbgrader_stubs import use_workbook_stubs
    use_workbook_stubs(get_config())
"""

from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

from workbook.course.generate import stub_source


class WorkbookClearSolutions(ClearSolutions):
    def _replace_solution_region(self, cell, language):
        stubbed = stub_source(cell.source)
        replaced = stubbed != cell.source
        cell.source = stubbed
        return replaced


def use_workbook_stubs(config) -> None:
    default = GenerateAssignment.class_traits()["preprocessors"].default()
    config.GenerateAssignment.preprocessors = [
        WorkbookClearSolutions if step is ClearSolutions else step for step in default
    ]
