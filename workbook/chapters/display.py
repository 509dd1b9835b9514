"""Text the notebooks print: excerpts of the repository's sources, and commands and file names written
the same on every machine.

The repository's location, the Python executable, torch's CMake folder and Python's
extension-module suffix differ between machines; the notebooks print them short.
"""

from __future__ import annotations

import sys
import sysconfig

from workbook import REPO_ROOT

CMAKE_PREFIX_AS_TEXT = "$(python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"


def command_as_text(command) -> str:
    """A command's words joined, with the Python executable, torch's CMake folder and the repository written short."""
    import torch.utils

    def short(word: str) -> str:
        word = word.replace(sys.executable, "python").replace(torch.utils.cmake_prefix_path, CMAKE_PREFIX_AS_TEXT)
        return word.replace(str(REPO_ROOT) + "/", "")

    return " ".join(short(str(word)) for word in command)


def module_file_name(path) -> str:
    """A built module's name without the Python-version part: _C.cpython-311-x86_64-linux-gnu.so -> _C.<EXT_SUFFIX>."""
    return path.name.replace(sysconfig.get_config_var("EXT_SUFFIX"), ".<EXT_SUFFIX>")


def source_lines(path, start: str | None = None, stop: str | None = None) -> list[str]:
    """A repository file's lines (path relative to the repository), or those from the first one containing
    `start` up to (not including) the next one containing `stop` (to the end when there is none)."""
    lines = (REPO_ROOT / path).read_text().splitlines()
    if start is None:
        return lines
    first = next(i for i, line in enumerate(lines) if start in line)
    last = len(lines)
    if stop is not None:
        last = next((i for i, line in enumerate(lines) if i > first and stop in line), len(lines))
    return lines[first:last]


def show_source(path, start: str | None = None, stop: str | None = None) -> None:
    """Print `source_lines(path, start, stop)` under a comment that names the file."""
    print(f"// {path}" if str(path).endswith((".cpp", ".h")) else f"# {path}")
    print("\n".join(source_lines(path, start, stop)).rstrip())


def source_diff(left, right, *, context: int = 1) -> None:
    """Print a unified diff of two excerpts, each (path, start, stop) as `source_lines` takes them."""
    import difflib

    diff = difflib.unified_diff(source_lines(*left), source_lines(*right), left[0], right[0], lineterm="", n=context)
    print("\n".join(diff))
