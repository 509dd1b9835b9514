"""csrc/README.md, the map of every op's parts, against the tree: every path it names exists, and every op
library and op that a TORCH_LIBRARY block under csrc/ defines is on it."""

import re

from workbook import CSRC_DIR, REPO_ROOT

MAP = CSRC_DIR / "README.md"
# A TORCH_LIBRARY block: on one line, or up to the first line that is a closing brace.
_LIBRARY_BLOCK = re.compile(
    r"^(?:STABLE_)?TORCH_LIBRARY\((\w+),\s*m\)\s*\{(?:([^\n]*)\}\s*$|(.*?)^\})", re.MULTILINE | re.DOTALL
)
_DEFINED = re.compile(r'm\.(?:def|class_<\w+>)\(\s*"(\w+)')


def named_paths(markdown: str) -> list[str]:
    """Every `code span` that is a repository path: has a slash, no spaces, no C++ scope."""
    spans = re.findall(r"`([^`\s]+)`", markdown)
    return [span for span in spans if "/" in span and "::" not in span]


def defined_ops() -> set[tuple[str, str]]:
    """(namespace, op or class name) for every TORCH_LIBRARY / STABLE_TORCH_LIBRARY block under csrc/."""
    found = set()
    for source in CSRC_DIR.rglob("*.cpp"):
        for namespace, one_line, lines in _LIBRARY_BLOCK.findall(source.read_text()):
            found.update((namespace, name) for name in _DEFINED.findall(one_line + lines))
    return found


def test_named_paths_finds_paths_and_skips_the_rest():
    text = "`csrc/scatter/scatter.cpp`, `wb_scatter::scatter_sum`, `m.class_`, `tests/missing.py`"
    assert named_paths(text) == ["csrc/scatter/scatter.cpp", "tests/missing.py"]


def test_every_path_on_the_map_exists():
    paths = named_paths(MAP.read_text())
    assert len(paths) > 30
    missing = [path for path in paths if not (REPO_ROOT / path).exists()]
    assert not missing, f"csrc/README.md names paths that do not exist: {missing}"


def test_every_op_library_and_op_under_csrc_is_on_the_map():
    ops = defined_ops()
    assert {namespace for namespace, _ in ops} >= {
        "wb_scatter",
        "wb_scatter_stable",
        "wb_lltm",
        "wb_setup_check",
        "wb_bench",
        "workbook_cv",
        "workbook_classes",
    }
    text = MAP.read_text()
    absent = sorted(
        f"{namespace}::{name}"
        for namespace, name in ops
        if f"`{namespace}::" not in text or not re.search(rf"\b{name}\b", text)
    )
    assert not absent, f"defined under csrc/ but not on csrc/README.md's map: {absent}"
