"""A live line while a build runs: what is being compiled, and for how long.

    with progress_line.shown("wb_scatter"):
        ...  # run the build; in a notebook the cell shows, updated every half second,
             # "wb_scatter: compiling scatter_cpu.cpp … 12 s, scatter.cpp … 3 s (15 s so far)"

The line is transient: it leaves nothing behind, so a notebook executed with cold builds stores the
same outputs as one executed with warm builds.

* In Jupyter it is a display that starts out empty (no data at all), is updated in place while
  the build runs, and is emptied again at the end. nbval compares an output by its data, so the
  empty display compares as nothing, and it ignores the updates; `workbook.course.generate` drops empty
  displays from the notebooks it stores.
* In a terminal (stderr is a tty) it is a line rewritten in place and erased at the end.
* Anywhere else (pytest, a pipe, a log file) nothing is shown.

A build that finishes within `DELAY_S` (nothing to rebuild) shows nothing anywhere. What is being
compiled is read from the command lines of this process's descendants (Linux's /proc): a compiler
run with `-c` on a source file; elsewhere the line shows only the time.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time

DELAY_S = 1.0
INTERVAL_S = 0.5
SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c", ".cu")

_active = threading.local()


@contextlib.contextmanager
def shown(what: str):
    """Show the progress line of building `what` while the block runs (nested blocks show the outer one)."""
    sink = None if getattr(_active, "on", False) else _sink()
    if sink is None:
        yield
        return
    stop = threading.Event()
    watcher = threading.Thread(target=contextvars.copy_context().run, args=(_watch, what, sink, stop), daemon=True)
    _active.on = True
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        _active.on = False


def compiling_now(root_pid: int | None = None) -> list[str]:
    """The source files that compilers started by `root_pid` (default: this process) are compiling now."""
    children = _children_by_parent()
    pending, found = list(children.get(root_pid or os.getpid(), [])), []
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        for name in _compiled_sources(pid):
            if name not in found:
                found.append(name)
    return found


def describe(what: str, elapsed: float, compiling: list[tuple[str, float]]) -> str:
    """The line itself: `what`, the files being compiled with their seconds, the seconds so far."""
    if not compiling:
        return f"{what}: building … {elapsed:.0f} s"
    files = ", ".join(f"{name} … {seconds:.0f} s" for name, seconds in compiling)
    return f"{what}: compiling {files} ({elapsed:.0f} s so far)"


def _watch(what: str, sink, stop: threading.Event) -> None:
    started = time.monotonic()
    if stop.wait(DELAY_S):
        return
    first_seen: dict[str, float] = {}
    try:
        while True:
            now = time.monotonic()
            running = compiling_now()
            for name in running:
                first_seen.setdefault(name, now)
            sink.show(describe(what, now - started, [(name, now - first_seen[name]) for name in running]))
            if stop.wait(INTERVAL_S):
                return
    finally:
        sink.close()


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    try:
        entries = os.scandir("/proc")
    except OSError:
        return children
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended meanwhile
            children.setdefault(parent, []).append(int(entry.name))
    return children


def _compiled_sources(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().decode(errors="replace").split("\0")
    except OSError:
        return []
    if "-c" not in words:
        return []
    return [os.path.basename(word) for word in words[1:] if word.endswith(SOURCE_SUFFIXES) and " " not in word]


class _NotebookLine:
    """A display in the running cell that starts and ends with no data."""

    def __init__(self):
        from IPython.display import display

        self._handle = display({}, raw=True, display_id=True)

    def show(self, text: str) -> None:
        self._handle.update({"text/plain": text}, raw=True)

    def close(self) -> None:
        self._handle.update({}, raw=True)


class _TerminalLine:
    def show(self, text: str) -> None:
        sys.stderr.write(f"\r{text}\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


class _LazySink:
    """Creates the line on its first `show`, so a build that ends before the delay leaves no trace."""

    def __init__(self, make):
        self._make, self._line = make, None

    def show(self, text: str) -> None:
        if self._line is None:
            self._line = self._make()
        self._line.show(text)

    def close(self) -> None:
        if self._line is not None:
            self._line.close()


def _sink():
    if _in_jupyter_kernel():
        return _LazySink(_NotebookLine)
    if sys.stderr is not None and sys.stderr.isatty():
        return _LazySink(_TerminalLine)
    return None


def _in_jupyter_kernel() -> bool:
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None
