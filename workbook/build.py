"""Building C++/CUDA extensions the workbook's way.

`load` and `load_inline` take the same arguments as their namesakes in `torch.utils.cpp_extension`
and add the workbook's conventions:

* everything is built under the git-ignored `build/` folder (one folder per extension name),
  never next to the notebooks;
* builds are quiet (`verbose=False`); ninja and ccache reuse earlier work;
* a build that a killed process left half-done (its `lock` file still there) is reported with the
  command that clears it, instead of waiting forever;
* a failed build raises `BuildError` showing the compiler's *first* error, with paths relative to
  the repository, and keeps the full log in a file.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import sys
from pathlib import Path

from . import BUILD_DIR, REPO_ROOT, relative_to_repo

EXTENSIONS_DIR = BUILD_DIR / "torch_extensions"
SOURCES_DIR = BUILD_DIR / "src"
_LOCKS_DIR = BUILD_DIR / "locks"

os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_DIR))

_FIRST_ERROR = re.compile(
    r"(\berror\b\s*:|\): error|undefined reference to|undefined symbol|No such file or directory)",
    re.IGNORECASE,
)
_CONTEXT_LINE = re.compile(r"^\s*(\d+\s*)?\|")  # gcc's source excerpt and caret lines


class BuildError(RuntimeError):
    """An extension failed to compile or link; the message starts with the first real error."""


class StaleBuildLock(RuntimeError):
    """A previous build of this extension was interrupted and left its lock file behind."""


def write_if_changed(path, text: str) -> Path:
    """Write `text` to `path` only when the content differs.

    Rewriting an unchanged source gives it a new modification time, and ninja then recompiles it.
    Relative paths are taken under `build/src/`.
    """
    path = Path(path)
    if not path.is_absolute():
        path = SOURCES_DIR / path
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def build_directory(name: str) -> Path:
    return EXTENSIONS_DIR / name


def clear_stale_lock(name: str) -> None:
    """Delete the lock file an interrupted build of `name` left behind."""
    build_directory(name).joinpath("lock").unlink(missing_ok=True)


def load(name: str, sources, **kwargs):
    """`torch.utils.cpp_extension.load` under the workbook's conventions.

    Relative source paths are taken from the repository root, e.g. ``"csrc/lltm/lltm.cpp"``.
    """
    from torch.utils import cpp_extension

    sources = [str(_from_repo(source)) for source in sources]
    include_paths = [str(_from_repo(p)) for p in kwargs.pop("extra_include_paths", None) or []]
    with _exclusive_build(name) as directory:
        return _translate_build_failure(
            name,
            cpp_extension.load,
            sources=sources,
            extra_include_paths=include_paths,
            build_directory=str(directory),
            verbose=False,
            **kwargs,
        )


def load_inline(name: str, cpp_sources, **kwargs):
    """`torch.utils.cpp_extension.load_inline` under the workbook's conventions.

    torch writes the sources into the build folder only when they changed, so re-running a cell
    costs nothing; a changed source is recompiled (and ccache makes a return to old code cheap).
    """
    from torch.utils import cpp_extension

    if kwargs.get("use_pch"):
        raise ValueError("use_pch=True writes a ~785 MB header into torch's own install; the workbook does not use it")
    with _exclusive_build(name) as directory:
        return _translate_build_failure(
            name,
            cpp_extension.load_inline,
            cpp_sources=cpp_sources,
            build_directory=str(directory),
            verbose=False,
            **kwargs,
        )


@contextlib.contextmanager
def exclusive(lock_file):
    """Hold an OS-level lock on `lock_file` (a name under build/locks/, or a path) while the block runs.

    Other processes of the workbook (a notebook kernel and a test run, say) wait for it; the OS
    releases it when its holder dies, so a killed build never leaves it behind.
    """
    lock_file = Path(lock_file)
    if not lock_file.is_absolute():
        lock_file = _LOCKS_DIR / f"{lock_file}.flock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        yield


def _from_repo(path) -> Path:
    path = Path(path)
    return path if path.is_absolute() else REPO_ROOT / path


@contextlib.contextmanager
def _exclusive_build(name: str):
    """Hold an OS-level lock for `name` while building it.

    torch marks a build in progress with a plain `lock` file that nobody removes when the building
    process is killed; every later build then waits on it forever. The OS releases our `flock`
    when its holder dies, so once we hold it, a `lock` file left in the folder can only be stale.
    """
    ensure_ninja_on_path()
    directory = build_directory(name)
    directory.mkdir(parents=True, exist_ok=True)
    with exclusive(name), _plain_compiler_messages():
        stale = directory / "lock"
        if stale.exists():
            raise StaleBuildLock(
                f"A previous build of extension '{name}' was interrupted (a kernel restart or Ctrl-C "
                f"during compilation) and left its lock file {relative_to_repo(stale)} behind. "
                "torch would wait for it forever. Nothing in the workbook is building this extension "
                f"now, so delete the file: run workbook.build.clear_stale_lock({name!r}) "
                f"or `rm {relative_to_repo(stale)}`, then build again."
            )
        yield directory


@contextlib.contextmanager
def _plain_compiler_messages():
    """ASCII compiler messages whatever the learner's locale, so stored notebook outputs match."""
    saved = os.environ.get("LC_ALL")
    os.environ["LC_ALL"] = "C"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["LC_ALL"]
        else:
            os.environ["LC_ALL"] = saved


def ensure_ninja_on_path() -> str | None:
    """torch and CMake run `ninja` from PATH; a kernel started outside the venv may not have the venv's
    bin (where pip's ninja lives) on it. Returns ninja's path, or None if there is none."""
    if shutil.which("ninja") is None:
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which("ninja")


def _translate_build_failure(name: str, build, **kwargs):
    try:
        return build(name, **kwargs)
    except RuntimeError as error:
        text = str(error)
        if not text.startswith(("Error building extension", "Error compiling objects")):
            raise
        log = build_directory(name) / "build_error.log"
        log.write_text(text)
        raise BuildError(
            f"Building extension '{name}' failed. The compiler's first error:\n\n"
            f"{first_compiler_error(text)}\n\n"
            f"Full compiler output: {relative_to_repo(log)}"
        ) from None


def first_compiler_error(output: str, context_lines: int = 4) -> str:
    """The first error line of a compiler/linker log with gcc's source excerpt below it."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if _FIRST_ERROR.search(line) and not line.startswith(("FAILED:", "ninja:")):
            excerpt = [line]
            for follow in lines[index + 1 : index + 1 + context_lines]:
                if not _CONTEXT_LINE.match(follow):
                    break
                excerpt.append(follow)
            return "\n".join("    " + strip_repo(text) for text in excerpt)
    tail = [line for line in lines if line.strip()][-context_lines:]
    return "\n".join("    " + strip_repo(text) for text in tail)


def strip_repo(text: str) -> str:
    """Text with the repository's absolute path removed, so paths read as repo-relative."""
    return text.replace(str(REPO_ROOT) + os.sep, "")


def cuda_build_status() -> tuple[bool, str]:
    """Whether CUDA sources can be compiled and linked into an extension here, and why not."""
    import torch
    from torch.utils import cpp_extension

    if torch.version.cuda is None:
        return False, "this torch is a CPU-only build"
    if cpp_extension.CUDA_HOME is None:
        return False, "no CUDA toolkit found (set CUDA_HOME to it)"
    return True, f"CUDA {torch.version.cuda}"


_announced_cpu_only: set[str] = set()


def cuda_sources(name: str, sources) -> list[str]:
    """`sources` when CUDA can be built here; otherwise none, saying so once per extension."""
    buildable, reason = cuda_build_status()
    if buildable:
        return list(sources)
    if name not in _announced_cpu_only:
        _announced_cpu_only.add(name)
        print(f"{name}: building the CPU kernels only ({reason}).")
    return []
