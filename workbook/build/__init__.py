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
  (`workbook.build.progress_line`); it leaves nothing in the cell's stored outputs;
* the lock file a killed build left behind is removed, with a line that says so, instead of making
  torch wait for it forever (see `clear_stale_lock`);
* a failed build raises `BuildError` showing the *first* error (the compiler's, the linker's or
  CMake's, see `errors.first_compiler_error`), with paths relative to the repository, and keeps the full
  log in a file; the next load of that extension builds it again;
* CUDA sources are built where they can run, or where `WORKBOOK_BUILD_CUDA=1` asks for them (see
  `cuda_build_status`); otherwise the extension gets its CPU kernels only, with one line saying why.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from workbook import BUILD_DIR, REPO_ROOT, relative_to_repo
from workbook.build import progress_line
from workbook.build.errors import first_compiler_error, repo_relative_paths

EXTENSIONS_DIR = BUILD_DIR / "torch_extensions"
CMAKE_BUILD_DIR = BUILD_DIR / "cmake"
SOURCES_DIR = BUILD_DIR / "src"
INDUCTOR_CACHE = BUILD_DIR / "inductor_cache"
_LOCKS_DIR = BUILD_DIR / "locks"
_held_here = threading.local()  # .locks: {lock file: [its open file, blocks using it]} of this thread

os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_DIR))
# A CUDA torch that sees no GPU logs "No CUDA runtime is found, using CUDA_HOME=..." (with a time and a
# process id) when cpp_extension is imported; `cuda_sources` says what that means for the build instead.
logging.getLogger("torch.utils.cpp_extension").addFilter(
    lambda record: not record.getMessage().startswith("No CUDA runtime is found")
)

BUILD_CUDA_SWITCH = "WORKBOOK_BUILD_CUDA"


class BuildError(RuntimeError):
    """An extension failed to compile or link; the message starts with the first real error."""


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


def use_inductor_cache() -> None:
    """Point torch.compile's on-disk caches (Inductor's compiled graphs and kernels) at build/inductor_cache, unless
    TORCHINDUCTOR_CACHE_DIR is set already: the notebooks, their second copies and the tests reuse each other's
    work, and nothing goes to the system's temporary folder."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR_CACHE))


def build_directory(name: str) -> Path:
    return EXTENSIONS_DIR / name


def clear_stale_lock(name: str) -> Path | None:
    """Delete the `lock` file a killed build of `name` left behind, if there is one; return its path.

    torch marks a JIT build in progress with `<build folder>/lock`. Up to torch 2.13 (`FileBaton`) the
    file's existence is the lock: the builder deletes it in a `finally` (so an exception or Ctrl-C
    leaves nothing), but a builder that is killed (SIGKILL, an out-of-memory kill, a crashed kernel)
    leaves it, and every later load of it (built or not) waits for it forever. From torch 2.14 on
    (`FileLock`) the file always stays, and only an OS-level `flock` on it, which dies with its holder,
    means a build is running: such a file is never stale.

    Only call this while holding the workbook's lock for `name` (`exclusive(name)`): then no workbook
    process is building it, and a lock file nobody holds is a leftover.
    """
    lock = build_directory(name) / "lock"
    if not lock.exists() or torch_lock_file_stays() or lock_is_held(lock):
        return None
    lock.unlink(missing_ok=True)
    return lock


def torch_lock_file_stays() -> bool:
    """Whether this torch locks JIT builds with an OS-level lock whose file stays (torch >= 2.14's
    `FileLock`) rather than a file whose existence is the lock (`FileBaton`, torch <= 2.13)."""
    from torch.utils import cpp_extension

    return not hasattr(cpp_extension, "FileBaton")


def lock_is_held(path) -> bool:
    """Whether some process holds an OS-level `flock` on `path` (the workbook's own build locks, and
    torch >= 2.14's JIT build lock, are such locks)."""
    try:
        guard = open(path)
    except FileNotFoundError:
        return False
    with guard:
        try:
            fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(guard, fcntl.LOCK_UN)
    return False


def stale_lock_files(extensions_dir: Path | None = None) -> list[Path]:
    """torch's `lock` files in the build folders under `extensions_dir` (default: the workbook's) that no
    build holds: neither the workbook's lock for that extension nor an OS-level lock on the file itself.
    Only torch <= 2.13 leaves such files (see `clear_stale_lock`)."""
    if torch_lock_file_stays():
        return []
    extensions_dir = Path(extensions_dir or EXTENSIONS_DIR)
    locks_dir = extensions_dir.parent / _LOCKS_DIR.name
    return sorted(
        lock
        for lock in extensions_dir.glob("*/lock")
        if not lock_is_held(locks_dir / f"{lock.parent.name}.flock") and not lock_is_held(lock)
    )


def load(name: str, sources, **kwargs):
    """`torch.utils.cpp_extension.load` under the workbook's conventions.

    Relative source paths are taken from the repository root, e.g. ``"csrc/lltm/lltm.cpp"``.
    """
    from torch.utils import cpp_extension

    sources = [str(_from_repo(source)) for source in sources]
    include_paths = [str(_from_repo(p)) for p in kwargs.pop("extra_include_paths", None) or []]
    with _exclusive_build(name) as directory, _cuda_build_settings(any(map(_is_cuda, sources))) as cuda_flags:
        kwargs["extra_ldflags"] = [*(kwargs.get("extra_ldflags") or []), *cuda_flags]
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
    with _exclusive_build(name) as directory, _cuda_build_settings(bool(kwargs.get("cuda_sources"))) as cuda_flags:
        kwargs["extra_ldflags"] = [*(kwargs.get("extra_ldflags") or []), *cuda_flags]
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
    releases it when its holder dies, so a killed build never leaves it behind. In a thread that holds
    it already (a cell that holds the lock around `load`, which takes it too), the block goes straight
    on; the lock is released when the last block of this thread that uses it ends, in whatever order.
    Paths are compared resolved (symbolic links followed); a hard link to the lock file is another lock.
    """
    lock_file = Path(lock_file)
    if not lock_file.is_absolute():
        lock_file = _LOCKS_DIR / f"{lock_file}.flock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock_file = lock_file.resolve()
    held = _held_here.__dict__.setdefault("locks", {})
    if lock_file not in held:
        guard = open(lock_file, "w")
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
        except BaseException:
            guard.close()
            raise
        held[lock_file] = [guard, 0]
    entry = held[lock_file]
    entry[1] += 1
    try:
        yield
    finally:
        entry[1] -= 1
        if entry[1] == 0:
            del held[lock_file]
            entry[0].close()  # closing the file releases the lock


def _from_repo(path) -> Path:
    path = Path(path)
    return path if path.is_absolute() else REPO_ROOT / path


@contextlib.contextmanager
def _exclusive_build(name: str):
    """Hold the workbook's OS-level lock for `name` while building it, after clearing a lock file that a
    killed build left behind (see `clear_stale_lock`)."""
    ensure_ninja_on_path()
    directory = build_directory(name)
    directory.mkdir(parents=True, exist_ok=True)
    with progress_line.shown(name), exclusive(name), _plain_compiler_messages():
        removed = clear_stale_lock(name)
        if removed is not None:
            print(
                f"{name}: removed {relative_to_repo(removed)}, left behind by a build that was killed before it "
                f"finished (nothing is building {name} now; torch would have waited for the file forever)."
            )
        yield directory


@contextlib.contextmanager
def _environment(**values: str | None):
    """Environment variables set while the block runs (None: left as they are), then restored."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update({key: value for key, value in values.items() if value is not None})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _plain_compiler_messages():
    """ASCII compiler messages whatever the learner's locale, so stored notebook outputs match."""
    return _environment(LC_ALL="C")


def ensure_ninja_on_path() -> str | None:
    """torch and CMake run `ninja` from PATH; a kernel started outside the venv may not have the venv's
    bin (where pip's ninja lives) on it. Returns ninja's path, or None if there is none."""
    if shutil.which("ninja") is None:
        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which("ninja")


def _translate_build_failure(name: str, build, **kwargs):
    try:
        return build(name, **kwargs)
    except BaseException as error:
        _build_again_next_time(name)
        text = str(error)
        if not isinstance(error, RuntimeError) or not text.startswith(
            ("Error building extension", "Error compiling objects")
        ):
            raise
        log = build_directory(name) / "build_error.log"
        log.write_text(text)
        text = repo_relative_paths(text, build_directory(name))
        raise BuildError(
            f"Building extension '{name}' failed. The compiler's first error:\n\n"
            f"{first_compiler_error(text)}\n\n"
            f"Full compiler output: {relative_to_repo(log)}"
        ) from None


def _build_again_next_time(name: str) -> None:
    """torch records an extension's sources before it builds them; a later load in the same process with
    the same sources then skips the build and tries to load a library that the failed build never wrote
    ("Could not load this library"). Marking the record out of date makes that load build again."""
    from torch.utils import cpp_extension

    entries = cpp_extension.JIT_EXTENSION_VERSIONER.entries
    if name in entries:
        entries[name] = entries[name]._replace(hash=None)


# ---- CMake projects and other build commands --------------------------------------------------


def cmake_options(options: dict | None = None) -> dict:
    """The options every CMake project is configured with, then `options`: a Release build against this
    torch, ccache as the compiler launcher when it is installed (a launcher that is not there fails
    every compile; CXX="ccache g++" fails torch's own builds, see doctor), and with a CUDA torch from
    pip, its CUDA runtime (see csrc/cmake/pip_torch_cuda.cmake)."""
    import torch.utils

    defaults = {"CMAKE_BUILD_TYPE": "Release"}
    if shutil.which("ccache"):
        defaults["CMAKE_CXX_COMPILER_LAUNCHER"] = "ccache"
    defaults["CMAKE_PREFIX_PATH"] = torch.utils.cmake_prefix_path
    runtime = pip_cuda_runtime()
    if runtime is not None:  # a CUDA torch from pip: find_package(Torch) need not look for a CUDA toolkit
        defaults["CMAKE_PROJECT_INCLUDE"] = REPO_ROOT / "csrc" / "cmake" / "pip_torch_cuda.cmake"
        defaults["WORKBOOK_CUDA_RUNTIME"] = runtime
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
    with progress_line.shown(project), exclusive(f"cmake-{project}"):
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
    # ASCII messages whatever the learner's locale
    environment = dict(os.environ, LC_ALL="C", **package_cuda_environment())
    with progress_line.shown(project):
        result = subprocess.run(
            [str(word) for word in command], capture_output=True, text=True, cwd=cwd or REPO_ROOT, env=environment
        )
    if result.returncode == 0:
        return result
    output = result.stdout + result.stderr
    log = Path(log_dir) / f"{step}_error.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(output)
    output = repo_relative_paths(output, log_dir, cwd or REPO_ROOT)  # a CMake build compiles in its build folder
    raise BuildError(
        f"The {step} step of '{project}' failed. The first error:\n\n"
        f"{first_compiler_error(output)}\n\n"
        f"Full output: {relative_to_repo(log)}"
    )


# ---- reading build logs -------------------------------------------------------------------------


def cuda_build_status() -> tuple[bool, str]:
    """Whether extensions get their CUDA kernels here, and why not.

    They do when torch is a CUDA build, it sees a GPU (or `WORKBOOK_BUILD_CUDA=1` asks for the kernels
    anyway, to check that they compile and link: without a GPU they cannot run), and a CUDA toolkit
    is found.
    """
    import torch
    from torch.utils import cpp_extension

    if torch.version.cuda is None:
        return False, "this torch is a CPU-only build"
    if not torch.cuda.is_available() and not cuda_build_requested():
        return False, f"this torch sees no GPU; {BUILD_CUDA_SWITCH}=1 builds the CUDA kernels anyway, to check them"
    if cpp_extension.CUDA_HOME is None:
        return False, "no CUDA toolkit found: set CUDA_HOME to it"
    if not torch.cuda.is_available():
        return (
            True,
            f"CUDA {torch.version.cuda}, for GPU architecture {compile_check_arch()} ({BUILD_CUDA_SWITCH}=1; no GPU to run them)",
        )
    return True, f"CUDA {torch.version.cuda}"


def package_cuda_environment() -> dict[str, str]:
    """Environment variables that make a setuptools build of the workbook's packages (csrc/scatter,
    csrc/scatter_stable) follow `cuda_build_status`. Their setup.py compile the CUDA kernels whenever torch
    is a CUDA build and a toolkit is found; without a GPU torch then fails (no architecture to build for).
    CPU kernels only: WB_SCATTER_CPU_ONLY=1. CUDA kernels without a GPU: TORCH_CUDA_ARCH_LIST."""
    import torch

    if torch.version.cuda is None:
        return {}
    buildable, _ = cuda_build_status()
    if not buildable:
        return {"WB_SCATTER_CPU_ONLY": "1"}
    if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return {"TORCH_CUDA_ARCH_LIST": compile_check_arch()}
    return {}


def cuda_build_requested() -> bool:
    """Whether `WORKBOOK_BUILD_CUDA` asks for the CUDA kernels on a machine whose torch sees no GPU."""
    return os.environ.get(BUILD_CUDA_SWITCH, "") not in ("", "0")


def compile_check_arch() -> str:
    """The GPU architecture CUDA kernels are compiled for when torch sees no GPU (torch would take the
    architectures of the visible GPUs, and fails without one): the newest one that both this torch was
    built for and the toolkit's nvcc supports, spelt as TORCH_CUDA_ARCH_LIST wants it ("12.0")."""
    import torch
    from torch.utils import cpp_extension

    nvcc = Path(cpp_extension.CUDA_HOME or "/usr/local/cuda") / "bin" / "nvcc"
    try:
        listed = subprocess.run([str(nvcc), "--list-gpu-arch"], capture_output=True, text=True).stdout
    except OSError:
        listed = ""
    toolkit = {int(number) for number in re.findall(r"compute_(\d+)", listed)}
    if not toolkit:
        raise BuildError(f"`{nvcc} --list-gpu-arch` named no GPU architecture: is CUDA_HOME a CUDA toolkit?")
    built_for = {int(number) for number in re.findall(r"sm_(\d+)", torch._C._cuda_getArchFlags() or "")}
    newest = max(toolkit & built_for or toolkit)
    return f"{newest // 10}.{newest % 10}"


@contextlib.contextmanager
def _cuda_build_settings(with_cuda: bool):
    """What a CUDA build needs here beyond torch's defaults, as extra linker flags for the block: an
    architecture list when torch sees no GPU (`compile_check_arch`), and the CUDA runtime library
    where the toolkit torch found has none (`cuda_runtime_link_flags`)."""
    import torch

    if not with_cuda:
        yield []
        return
    arch = None
    if not torch.cuda.is_available() and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        arch = compile_check_arch()
    with _environment(TORCH_CUDA_ARCH_LIST=arch):
        yield cuda_runtime_link_flags()


def cuda_runtime_link_flags() -> list[str]:
    """Linker flags that let torch's `-lcudart` find the CUDA runtime.

    torch links CUDA extensions with `-L<CUDA_HOME>/lib64 -lcudart`. A pip torch brings its own
    runtime, in site-packages (`nvidia/cu13/lib/libcudart.so.13`; `nvidia/cuda_runtime/lib/` for
    CUDA 12), without the unversioned `libcudart.so` that `-lcudart` looks for; and a toolkit found
    through an `nvcc` wrapper script (CUDA_HOME=/usr/local) has none either. When CUDA_HOME has no
    `libcudart.so`, a folder under build/ gets a link to pip's runtime and goes on the search path.
    """
    from torch.utils import cpp_extension

    home = Path(cpp_extension.CUDA_HOME or "/nonexistent")
    if any((home / folder / "libcudart.so").exists() for folder in ("lib64", "lib")):
        return []
    runtime = pip_cuda_runtime()
    if runtime is None:
        return []  # torch's -lcudart then fails, and the linker's message says so
    folder = BUILD_DIR / "cuda_runtime"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "libcudart.so"
    if not link.is_symlink() or os.readlink(link) != str(runtime):
        staged = folder / f"libcudart.so.{os.getpid()}"
        staged.unlink(missing_ok=True)
        staged.symlink_to(runtime)
        staged.replace(link)  # atomic: a parallel build sees the old link or the new one
    return [f"-L{folder}"]


def pip_cuda_runtime() -> Path | None:
    """The CUDA runtime library of pip's `nvidia-*` packages for this torch's CUDA major version, or None."""
    import importlib.util

    import torch

    spec = importlib.util.find_spec("nvidia")
    if spec is None or torch.version.cuda is None:
        return None
    major = torch.version.cuda.split(".")[0]
    for root in spec.submodule_search_locations or []:
        found = sorted(Path(root).glob(f"*/lib/libcudart.so.{major}*"))
        if found:
            return found[0]
    return None


def _is_cuda(source: str) -> bool:
    return source.endswith((".cu", ".cuh"))


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
