"""Write the learners' notebooks (`notebooks/`) from the complete chapters (`solutions/`).

    python -m workbook.course.generate            # regenerate what changed, keep learners' edits
    python -m workbook.course.generate --execute  # ... and run what was rewritten, storing real outputs
    python -m workbook.course.generate --force 01_python_extensions   # overwrite even an edited notebook

Every region between `### BEGIN SOLUTION` and `### END SOLUTION` (or `// BEGIN SOLUTION` and
`// END SOLUTION` in C++ source) becomes a stub that raises "not attempted yet". The generated
notebook records a hash of its cell sources; a notebook whose sources no longer match that hash
has been edited by a learner and is never overwritten without --force.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import re
import sys
from pathlib import Path

import nbformat

from workbook import REPO_ROOT

SOLUTIONS = REPO_ROOT / "solutions"
NOTEBOOKS = REPO_ROOT / "notebooks"

_REGION = re.compile(
    r"^(?P<indent>[ \t]*)(?P<mark>###|//) BEGIN SOLUTION[^\n]*\n.*?^[ \t]*(?P=mark) END SOLUTION[^\n]*$",
    re.MULTILINE | re.DOTALL,
)
_STUBS = {
    "###": ["# YOUR CODE HERE", 'raise NotImplementedError("not attempted yet")'],
    "//": ["// YOUR CODE HERE", 'TORCH_CHECK(false, "not attempted yet");'],
}


def stub_source(source: str) -> str:
    """Replace each solution region of a cell's source with its stub."""

    def stub(match: re.Match) -> str:
        indent = match["indent"]
        return "\n".join(indent + line for line in _STUBS[match["mark"]])

    return _REGION.sub(stub, source)


def source_hash(notebook) -> str:
    digest = hashlib.sha256()
    for cell in notebook.cells:
        digest.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\0")
    return digest.hexdigest()


def student_version(solution):
    """The learner's notebook for a solution notebook, without outputs."""
    notebook = copy.deepcopy(solution)
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        stubbed = stub_source(cell.source)
        if stubbed != cell.source:
            cell.source = stubbed
        cell.outputs = []
        cell.execution_count = None
    notebook.metadata["workbook"] = {"source_hash": source_hash(notebook)}
    return notebook


def learner_edited(notebook) -> bool:
    recorded = notebook.metadata.get("workbook", {}).get("source_hash")
    return recorded != source_hash(notebook)


def cell_signature(notebook) -> list:
    """What the generator controls in a notebook: cell types, sources, grading metadata and tags."""
    return [
        (cell.cell_type, cell.source, cell.metadata.get("nbgrader"), cell.metadata.get("tags"))
        for cell in notebook.cells
    ]


def generate(name: str, *, force: bool = False) -> str:
    """Write notebooks/<name>.ipynb; returns what happened, in a word."""
    solution = nbformat.read(SOLUTIONS / f"{name}.ipynb", as_version=4)
    target = NOTEBOOKS / f"{name}.ipynb"
    fresh = student_version(solution)
    if target.exists():
        current = nbformat.read(target, as_version=4)
        if learner_edited(current) and not force:
            return "kept (edited by you; use --force to overwrite)"
        if cell_signature(current) == cell_signature(fresh):
            return "unchanged"
    NOTEBOOKS.mkdir(exist_ok=True)
    nbformat.write(fresh, target)
    return "written"


def execute(path: Path) -> None:
    """Run a notebook top to bottom in its own folder and store its outputs (timings measured in full, even when
    called from the test suite: the kernel's environment has no WORKBOOK_QUICK_TIMING)."""
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=1800,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    # workbook.bench.timing.QUICK_ENV, spelled out: that module imports torch, and this one must not
    kernel_env = {name: value for name, value in os.environ.items() if name != "WORKBOOK_QUICK_TIMING"}
    client.execute(env=kernel_env)
    drop_empty_displays(notebook)
    nbformat.write(notebook, path)


def drop_empty_displays(notebook) -> None:
    """Remove displays left with no data (a build's progress line, workbook.build.progress_line, ends as one)
    and join the stream outputs such a display separated, so a cold build stores what a warm one does."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.outputs:
            if output.output_type == "display_data" and not output.get("data"):
                continue
            previous = kept[-1] if kept else None
            if (
                output.output_type == "stream"
                and previous is not None
                and previous.output_type == "stream"
                and previous.name == output.name
            ):
                previous.text += output.text
                continue
            kept.append(output)
        cell.outputs = kept


def chapter_names() -> list[str]:
    return sorted(path.stem for path in SOLUTIONS.glob("*.ipynb"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter names such as 01_python_extensions (default: all)")
    parser.add_argument("--force", action="store_true", help="overwrite notebooks even if a learner edited them")
    parser.add_argument("--execute", action="store_true", help="run each rewritten notebook to store its outputs")
    args = parser.parse_args(argv)
    for name in args.chapters or chapter_names():
        if not (SOLUTIONS / f"{name}.ipynb").exists():
            print(f"no such chapter: solutions/{name}.ipynb", file=sys.stderr)
            return 2
        result = generate(name, force=args.force)
        print(f"notebooks/{name}.ipynb: {result}")
        if result == "written" and args.execute:
            execute(NOTEBOOKS / f"{name}.ipynb")
            print(f"notebooks/{name}.ipynb: executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
