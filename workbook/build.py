"""Building C++/CUDA code the workbook's way: every chapter builds through this module.

`load` and `load_inline` take the same arguments as their namesakes in `torch.utils.cpp_extension`
(the JIT route); `cmake_build` configures and builds a CMake project; `run_build_step` runs any
other build command (a `pip install` of a package, a setuptools build). All of them follow the
workbook's conventions:

* everything is built under the git-ignored `build/` folder (one folder per extension or project),
  never next to the notebooks;
* builds are quiet; ninja and ccache reuse earlier work (torch's JIT builds put ccache in front of
  the compiler by themselves; CMake gets it as its compiler launcher, see `cmake_options`);
* while a build runs in a notebook, a transient line shows what is being compiled and for how long
  (`workbook.build_progress`); it leaves nothing in the cell's stored outputs;
* a build that a killed process left half-done (its `lock` file still there) is reported with the
  command that clears it, instead of waiting forever;
* a failed build raises `BuildError` showing the *first* error (the compiler's, the linker's or
  CMake's, see `first_compiler_error`), with paths relative to the repository, and keeps the full
  log in a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from . import BUILD_DIR, REPO_ROOT, build_progress, relative_to_repo

EXTENSIONS_DIR = BUILD_DIR / "torch_extensions"
CMAKE_BUILD_DIR = BUILD_DIR / "cmake"
SOURCES_DIR = BUILD_DIR / "src"
_LOCKS_DIR = BUILD_DIR / "locks"

os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_DIR))

_FIRST_ERROR = re.compile(
    r"(\berror\b\s*:|\): error|undefined reference to|undefined symbol|No such file or directory)", re.IGNORECASE
)
_GCC_EXCERPT_LINE = re.compile(r"^\s*(\d+\s*)?\|")  # gcc's source excerpt and caret lines
_NVCC_ERROR = re.compile(r"\(\d+\): (catastrophic )?error\b")  # nvcc: `kernel.cu(12): error: ...`
_DIAGNOSTIC = re.compile(r"(\(\d+\): \w|:\d+(:\d+)?: \w|^\S.*\berror\b)")  # the start of the next message


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
    with build_progress.shown(name), exclusive(name), _plain_compiler_messages():
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


# ---- CMake projects and other build commands --------------------------------------------------


def cmake_options(options: dict | None = None) -> dict:
    """The options every CMake project is configured with, then `options`: a Release build against this
    torch, and ccache as the compiler launcher when it is installed (a launcher that is not there fails
    every compile; CXX="ccache g++" fails torch's own builds, see doctor)."""
    import torch.utils

    defaults = {"CMAKE_BUILD_TYPE": "Release"}
    if shutil.which("ccache"):
        defaults["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache"
    defaults["CMAKE_PREFIX_PATH"] = torch.utils.cmake_prefix_path
    return {**defaults, **(options or {})}


def cmake_configure_command(source_dir, build_dir, options: dict | None = None) -> list[str]:
    """The `cmake` command that configures `source_dir` into `build_dir` (Ninja when there is one)."""
    generator = ["-G", "Ninja"] if ensure_ninja_on_path() else []
    return [
        "cmake",
        "-S",
        str(source_dir),
        "-B",
        str(build_dir),
        *generator,
        *(f"-D{key}={value}" for key, value in cmake_options(options).items()),
    ]


def cmake_build(project: str, source_dir, *, options: dict | None = None, targets=None, build_dir=None) -> Path:
    """Configure (when needed) and build a CMake project into `build_dir` (default build/cmake/<project>);
    return that folder.

    The configure step runs only when the folder has no CMake cache yet or `options` changed;
    later calls just run the build tool, which reconfigures by itself when a CMakeLists.txt changed.
    """
    source_dir = Path(source_dir).resolve()
    build_dir = Path(build_dir) if build_dir else CMAKE_BUILD_DIR / project
    configure = cmake_configure_command(source_dir, build_dir, options)
    recorded = build_dir / "workbook_configure.json"
    wanted = json.dumps(configure)
    with build_progress.shown(project), exclusive(f"cmake-{project}"):
        if not (build_dir / "CMakeCache.txt").exists() or not recorded.exists() or recorded.read_text() != wanted:
            if _configured_source(build_dir) not in (None, str(source_dir)):
                # CMake refuses to reuse a build folder for another source folder: start this one afresh.
                shutil.rmtree(build_dir)
            build_dir.mkdir(parents=True, exist_ok=True)
            recorded.unlink(missing_ok=True)
            run_build_step(project, "configure", configure, log_dir=build_dir)
            recorded.write_text(wanted)
        command = ["cmake", "--build", str(build_dir), "--parallel", str(min(os.cpu_count() or 1, 4))]
        for target in targets or []:
            command += ["--target", target]
        run_build_step(project, "build", command, log_dir=build_dir)
    return build_dir


def _configured_source(build_dir: Path) -> str | None:
    """The source folder `build_dir` was configured for (from its CMakeCache.txt), or None."""
    try:
        cache = (build_dir / "CMakeCache.txt").read_text()
    except OSError:
        return None
    found = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.MULTILINE)
    return found.group(1) if found else None


def run_build_step(project: str, step: str, command, *, log_dir, cwd=None) -> subprocess.CompletedProcess:
    """Run one step of building `project` (a CMake configure or build, a pip install, a setuptools
    build) quietly, with the progress line in a notebook.

    A failure raises `BuildError` with the first error; the whole output is kept in
    `log_dir`/<step>_error.log.
    """
    ensure_ninja_on_path()
    environment = dict(os.environ, LC_ALL="C")  # ASCII messages whatever the learner's locale
    with build_progress.shown(project):
        result = subprocess.run(
            [str(word) for word in command], capture_output=True, text=True, cwd=cwd or REPO_ROOT, env=environment
        )
    if result.returncode == 0:
        return result
    output = result.stdout + result.stderr
    log = Path(log_dir) / f"{step}_error.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output)
    raise BuildError(
        f"The {step} step of '{project}' failed. The first error:\n\n"
        f"{first_compiler_error(output)}\n\n"
        f"Full output: {relative_to_repo(log)}"
    )


# ---- reading build logs -------------------------------------------------------------------------


def first_compiler_error(output: str) -> str:
    """The first error of a build log, with the lines that explain it: CMake's message below a
    `CMake Error`, gcc's source excerpt and caret below a compiler error, nvcc's source line and caret
    below an nvcc error. Without a recognisable error: the log's last lines."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("CMake Error"):  # CMake's own error explains what follows it
            return _excerpt(line, lines[index + 1 : index + 7], _cmake_message_line)
    for index, line in enumerate(lines):
        if _FIRST_ERROR.search(line) and not line.startswith(("FAILED:", "ninja:")):
            explains = _nvcc_excerpt_line if _NVCC_ERROR.search(line) else _gcc_excerpt_line
            return _excerpt(line, lines[index + 1 : index + 5], explains)
    tail = [line for line in lines if line.strip()][-4:]
    return "\n".join("    " + strip_repo(text) for text in tail)


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
