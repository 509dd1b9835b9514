"""Error text made short: every place that turns a build log, an exception or a crashed process's
output into the line or two a learner reads calls one of these.

* `first_compiler_error`: the first real error of a compiler, linker or CMake log, with the lines
  that explain it (`first_compiler_error_line`: just its first line);
* `first_error_line` / `error_summary`: the first line(s) of an error message, without the source
  excerpts and C++ backtraces that differ between machines (also what a process printed before it
  aborted);
* `last_exception`: the final `SomeError: message` line of a Python traceback;
* `static_assertions`: the `static_assert` messages of a compiler log.

Paths are shown relative to the repository (`strip_repo`, `repo_relative_paths`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from workbook import REPO_ROOT, relative_to_repo

_FIRST_ERROR = re.compile(
    r"(\berror\b\s*:|\): error|undefined reference to|undefined symbol|cannot find -l|No such file or directory)",
    re.IGNORECASE,
)
_GCC_EXCERPT_LINE = re.compile(r"^\s*(\d+\s*)?\|")  # gcc's source excerpt and caret lines
_NVCC_ERROR = re.compile(r"\(\d+\): (catastrophic )?error\b")  # nvcc: `kernel.cu(12): error: ...`
# a relative path to a C/C++/CUDA file, as a compiler prints it before ':<line>' or '(<line>)'
_RELATIVE_SOURCE = re.compile(
    r"(?<![\w/.+-])(?:\.\.?/)*[\w.+-]+(?:/[\w.+-]+)*\.(?:c|cc|cpp|cxx|cu|cuh|h|hh|hpp|inl)(?=[:(])"
)
_DIAGNOSTIC = re.compile(r"(\(\d+\): \w|:\d+(:\d+)?: \w|^\S.*\berror\b)")  # the start of the next message


def first_compiler_error(output: str) -> str:
    """The first error of a build log, with the lines that explain it: CMake's message below a
    `CMake Error`, gcc's source excerpt and caret below a compiler error, nvcc's source line and caret
    below an nvcc error. Without a recognisable error: the log's last lines."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("CMake Error"):  # CMake's own error explains what follows it
            return _excerpt(line, lines[index + 1 : index + 7], _cmake_message_line)
    index = _first_error_index(lines)
    if index is not None:
        explains = _nvcc_excerpt_line if _NVCC_ERROR.search(lines[index]) else _gcc_excerpt_line
        return _excerpt(lines[index], lines[index + 1 : index + 5], explains)
    tail = [line for line in lines if line.strip()][-4:]
    return "\n".join("    " + strip_repo(text) for text in tail)


def _first_error_index(lines: list[str]) -> int | None:
    """The first line that reports an error (a warning that mentions a missing file does not)."""
    for index, line in enumerate(lines):
        if _FIRST_ERROR.search(line) and not line.startswith(("FAILED:", "ninja:")) and "warning:" not in line:
            return index
    return None


def _excerpt(first: str, following: list[str], explains) -> str:
    """`first` and the lines after it for which `explains` holds (None: skip the line; False: stop)."""
    excerpt = [first]
    for line in following:
        verdict = explains(line)
        if verdict is None:
            continue
        if not verdict:
            break
        excerpt.append(line)
    return "\n".join("    " + strip_repo(text.rstrip()) for text in excerpt)


def _cmake_message_line(line: str):
    if line.startswith(("CMake ", "-- ")):
        return False
    return True if line.strip() else None


def _gcc_excerpt_line(line: str) -> bool:
    return bool(_GCC_EXCERPT_LINE.match(line))


def _nvcc_excerpt_line(line: str) -> bool:
    return bool(line.strip()) and not _DIAGNOSTIC.search(line) and not re.match(r"(Remark|\d+ errors? detected)", line)


def strip_repo(text: str) -> str:
    """Text with the repository's absolute path removed, so paths read as repo-relative."""
    return text.replace(str(REPO_ROOT) + os.sep, "")


def repo_relative_paths(text: str, *folders) -> str:
    """`text` with each relative source path that names a file from one of `folders` (where the compiler
    ran) rewritten relative to the repository. ccache with a `base_dir` hands the compiler relative
    paths, so its messages say `../../src/x.cpp` where they would otherwise say `<repo>/build/src/x.cpp`."""

    def from_repo(match: re.Match) -> str:
        path = match.group(0)
        found = [Path(folder) / path for folder in folders if (Path(folder) / path).is_file()]
        return relative_to_repo(found[0]) if found else path

    return _RELATIVE_SOURCE.sub(from_repo, text)


def first_compiler_error_line(output: str) -> str:
    """The first error line of a build log, with the repository's path left out; without a recognisable error,
    the log's last non-blank line."""
    lines = output.splitlines()
    cmake = [line for line in lines if line.startswith("CMake Error")]
    index = lines.index(cmake[0]) if cmake else _first_error_index(lines)
    if index is None:
        found = [line for line in lines if line.strip()]
        return strip_repo(found[-1].strip()) if found else ""
    return strip_repo(lines[index].strip())


def first_error_line(text: str) -> str:
    """The first line of an error message that says what went wrong (skips blank lines)."""
    return error_summary(text, 1)


def error_summary(text: str, lines: int = 2) -> str:
    """The first `lines` non-blank lines of an error message, stopping before any source excerpt
    or C++ backtrace (which name files and addresses that differ between machines)."""
    kept = []
    for line in str(text).splitlines():
        if line.startswith(("  File ", "Exception raised from", "frame #")) or line.strip() in (":", ""):
            if kept and line.strip() != "":
                break
            continue
        kept.append(line.strip())
        if len(kept) == lines:
            break
    return "\n".join(kept)


_TRACEBACK_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Warning): ")


def last_exception(stderr: str) -> str:
    """The final `SomeError: message` line of a Python traceback ('' when there is none)."""
    found = [line for line in stderr.splitlines() if _TRACEBACK_ERROR.match(line)]
    return found[-1] if found else ""


def static_assertions(log_path) -> list[str]:
    """The distinct `static assertion failed` messages in a compiler log, in order."""
    found = []
    for message in re.findall(r"static assertion failed: (.*)", Path(log_path).read_text()):
        if message not in found:
            found.append(message)
    return found
