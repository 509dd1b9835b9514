"""The scatter ops on the LibTorch stable ABI (csrc/scatter_stable): build, load, and what it costs to compile
(chapter 08 times them against the ATen build: `workbook.chapters.torch_library_compile_export`).

    from workbook.ops import scatter_stable
    ops = scatter_stable.load()                  # torch.ops.wb_scatter_stable; builds the wheel the first time
    out = ops.scatter_sum(src, index, 0, None)
    import wb_scatter_stable             # after load(): torch_scatter's signature, out= included
    values, argindex = wb_scatter_stable.scatter_max(src, index, 0, out=start)
    scatter_stable.wheel_tag()                   # 'cp310-abi3-linux_x86_64': one wheel for CPython >= 3.10
    scatter_stable.compile_times()               # seconds per translation unit, stable vs ATen, from ninja's logs
    scatter_stable.cold_compile_times("stable")  # compile each TU again, ccache off, in a throw-away folder

Building (`install`, called by `load`): `pip wheel --no-build-isolation --no-deps` writes
build/stable/dist/wb_scatter_stable-0.1.0-cp310-abi3-linux_x86_64.whl (setuptools' objects and ninja
log stay in build/stable/setuptools/), and `pip install --target build/stable/site` unpacks it into a
private folder, never the project's environment. A hash of csrc/scatter_stable/'s sources is
stored with the install: an unchanged source tree is neither rebuilt nor reinstalled (~0.1 s), an
edit rebuilds (about a minute here with ccache off, a few seconds on ccache hits; the CUDA kernel is
compiled only where torch has CUDA). `load()` puts build/stable/site on sys.path and imports
`wb_scatter_stable`, whose __init__ loads the library and registers the ops' fake kernels and autograd
in Python (wb_scatter_stable/ops.py: the stable ABI has no C++ autograd). The
stable namespace differs from the ATen one (`wb_scatter`), so both libraries can be loaded in one
process.

Public names:
    SOURCE, DIST, SITE          csrc/scatter_stable, build/stable/dist, build/stable/site
    install() -> Path           build (when the sources changed) and install; returns SITE
    load()                      install + import; returns torch.ops.wb_scatter_stable
    wheel_path() -> Path        the built wheel
    wheel_tag() -> str          its tag, '<python>-<abi>-<platform>', e.g. 'cp310-abi3-linux_x86_64'
    error_text(error) -> str    an op's error message without the "function, /path/file.cpp:LINE, " that
                                STD_TORCH_CHECK puts in front (an absolute path: differs per machine)
    library_dependencies() -> list[str]   the shared libraries the op library links (ldd's names):
                                libtorch_cpu/libc10, no libtorch_python, no libpython
    torch_imports(which) -> dict[str, list[str]]   which = "stable" or "aten": the symbols the op
                                library takes from torch's libraries (`nm -D --undefined-only`), as
                                {"c": [extern "C" shim functions: aoti_torch_*, torch_*],
                                 "c++": [mangled at::, c10::, torch:: names, demangled]}. The
                                stable library's "c++" list is empty: nothing tied to one torch build.
    ninja_log_times(folder) -> dict[str, float]   seconds per output file name ("scatter_cpu.o"; a
                                JIT build also logs its link step, "wb_scatter.so") of the last build
                                in `folder`, from its .ninja_log (start and end ms per output)
    compile_times() -> dict[str, dict[str, float]]   {"stable": {object: s}, "aten": {object: s}} from
                                the ninja logs of the stable wheel build and of the ATen JIT build
                                (build/torch_extensions/wb_scatter); no compiling. Beware: a log
                                records the last build, which may have been a ccache hit (~0.5 s).
    compile_commands(which) -> list[dict]   `ninja -t compdb` of that build: the exact compiler command
                                of each TU (which = "stable" or "aten")
    cold_compile_times(which, cpu=False) -> dict[str, float]   which = "stable" or "aten": re-runs
                                each TU's compile command from that build's ninja file (`ninja -t
                                compdb`) with CCACHE_DISABLE=1 and the object written to a temporary
                                folder, one TU after the other; wall seconds per object file name
                                (compile_times()'s keys); cpu=True: the compiler's CPU seconds,
                                steadier on a busy machine. The build must exist (load() /
                                workbook.ops.scatter.load() first).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workbook import BUILD_DIR, REPO_ROOT, build

SOURCE = REPO_ROOT / "csrc" / "scatter_stable"
STABLE_BUILD = BUILD_DIR / "stable"
DIST = STABLE_BUILD / "dist"
SITE = STABLE_BUILD / "site"
SETUPTOOLS_BUILD = STABLE_BUILD / "setuptools"  # build_base in csrc/scatter_stable/setup.py
ATEN_BUILD = build.EXTENSIONS_DIR / "wb_scatter"  # workbook.ops.scatter's JIT build
_STAMP = SITE / ".source-hash"

_ops = None


_SOURCE_SUFFIXES = (".cpp", ".h", ".cu", ".py", ".toml")


def _source_hash() -> str:
    """A hash of the package's sources (not of what building writes there: *.egg-info, __pycache__)."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE.rglob("*")):
        if (
            path.suffix in _SOURCE_SUFFIXES
            and path.is_file()
            and "__pycache__" not in path.parts
            and not any(part.endswith(".egg-info") for part in path.parts)
        ):
            digest.update(str(path.relative_to(SOURCE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise build.BuildError(f"`{' '.join(map(str, command))}` failed (exit {result.returncode}):\n{tail}")
    return result


def wheel_path() -> Path:
    found = sorted(DIST.glob("wb_scatter_stable-*.whl"))
    if not found:
        raise FileNotFoundError(
            f"no wb_scatter_stable wheel in {DIST}: run workbook.ops.scatter_stable.install() first"
        )
    return found[-1]


def wheel_tag() -> str:
    """'<python tag>-<abi tag>-<platform tag>' from the wheel's file name (PEP 427)."""
    return "-".join(wheel_path().stem.split("-")[-3:])


def install() -> Path:
    """Build the wheel and install it into SITE, unless SITE already holds this source tree's build."""
    with build.exclusive("wb_scatter_stable"):
        digest = _source_hash()
        if _STAMP.exists() and _STAMP.read_text() == digest and list(DIST.glob("*.whl")):
            return SITE
        shutil.rmtree(DIST, ignore_errors=True)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
        build.run_build_step(
            "wb_scatter_stable",
            "wheel",
            pip + ["wheel", "--no-build-isolation", "--no-deps", "--wheel-dir", str(DIST), str(SOURCE)],
            log_dir=STABLE_BUILD,
        )
        shutil.rmtree(SITE, ignore_errors=True)  # nothing stale from an earlier install survives
        _run(pip + ["install", "--no-deps", "--target", str(SITE), str(wheel_path())])
        _STAMP.write_text(digest)
        return SITE


def load():
    """Install (when needed) and import wb_scatter_stable; returns torch.ops.wb_scatter_stable."""
    global _ops
    if _ops is None:
        import torch

        install()
        if str(SITE) not in sys.path:
            sys.path.insert(0, str(SITE))
        import wb_scatter_stable  # noqa: F401  (loads the library, registers fake kernels and autograd)

        _ops = torch.ops.wb_scatter_stable
    return _ops


def _library(which: str) -> Path:
    if which == "stable":
        return next((SITE / "wb_scatter_stable").glob("_C*.so"))
    if which == "aten":
        return ATEN_BUILD / "wb_scatter.so"
    raise ValueError(f"which must be 'stable' or 'aten', got {which!r}")


_CHECK_LOCATION = re.compile(r"^[\w:~<>()]+, \S+:\d+, ")


def error_text(error) -> str:
    """str(error) without the `function, /path/to/file.cpp:LINE, ` prefix STD_TORCH_CHECK adds."""
    return _CHECK_LOCATION.sub("", str(error), count=1)


def library_dependencies() -> list[str]:
    """The shared libraries the installed op library needs (names from `ldd`, torch's and the system's)."""
    lines = _run(["ldd", str(_library("stable"))]).stdout.splitlines()
    return sorted(line.split()[0] for line in lines if line.strip() and "=>" in line)


def torch_imports(which: str) -> dict[str, list[str]]:
    """The undefined dynamic symbols of an op library that torch provides: C shim vs C++ names."""
    undefined = _run(["nm", "-D", "--undefined-only", str(_library(which))]).stdout.split()
    names = [word.split("@")[0] for word in undefined if word != "U"]
    c_names = sorted(name for name in names if name.startswith(("aoti_torch_", "torch_")))
    cpp_prefixes = ("_ZN2at", "_ZNK2at", "_ZN3c10", "_ZNK3c10", "_ZN5torch", "_ZNK5torch")  # at::, c10::, torch::
    mangled = [name for name in names if name.startswith(cpp_prefixes)]
    demangled = _run(["c++filt"], input="\n".join(mangled)).stdout.split("\n") if mangled else []
    return {"c": c_names, "c++": sorted(name for name in demangled if name)}


# ---- compile times ---------------------------------------------------------------------------


def ninja_log_times(folder) -> dict[str, float]:
    """Seconds per output of the last build recorded in `folder`/.ninja_log, keyed by file name.

    Each line of a v5+ log is `start_ms end_ms mtime output hash`; a rebuilt output appears again
    further down, so the last line for an output wins. Linking is included (the .so's line).
    """
    log = Path(folder) / ".ninja_log"
    if not log.exists():
        return {}
    times = {}
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, output, *_ = line.split("\t")
        times[Path(output).name] = (int(end) - int(start)) / 1000
    return times


def _ninja_folder(which: str) -> Path:
    if which == "aten":
        return ATEN_BUILD
    if which == "stable":
        # setuptools compiles in build_base/temp.<platform>-<python>/, where BuildExtension's ninja runs
        found = sorted(SETUPTOOLS_BUILD.glob("temp.*/build.ninja"))
        return found[-1].parent if found else SETUPTOOLS_BUILD
    raise ValueError(f"which must be 'stable' or 'aten', got {which!r}")


def compile_times() -> dict[str, dict[str, float]]:
    """Per-TU seconds of the last stable and ATen builds, from their ninja logs (nothing is compiled)."""
    return {which: ninja_log_times(_ninja_folder(which)) for which in ("stable", "aten")}


def compile_commands(which: str) -> list[dict]:
    """`ninja -t compdb` of a build's C++/CUDA sources: one {directory, command, file, output} per TU."""
    folder = _ninja_folder(which)
    ninja = build.ensure_ninja_on_path()
    if ninja is None or not (folder / "build.ninja").exists():
        raise FileNotFoundError(
            f"no build.ninja in {folder}: build it first (workbook.ops.scatter_stable.load() for "
            "'stable', workbook.ops.scatter.load() for 'aten')"
        )
    out = _run([ninja, "-C", str(folder), "-t", "compdb"]).stdout
    return [entry for entry in json.loads(out) if entry["file"].endswith((".cpp", ".cu"))]


def cold_compile_times(which: str, cpu: bool = False) -> dict[str, float]:
    """Compile each TU of a build again with ccache disabled, into a throw-away folder; seconds per TU.

    The command is the build's own (flags, includes, defines), only the object goes elsewhere, so
    the build folder and its ninja state are untouched. TUs are compiled one at a time. Wall-clock
    seconds by default; cpu=True gives the compiler's CPU seconds (user + system) instead, which
    other work on a shared machine changes much less.
    """
    times = {}
    env = dict(os.environ, CCACHE_DISABLE="1", LC_ALL="C")
    with tempfile.TemporaryDirectory(prefix="wb_cold_compile_") as scratch:
        for entry in compile_commands(which):
            words = shlex.split(entry["command"])
            words[words.index("-o") + 1] = str(Path(scratch) / Path(entry["output"]).name)
            wall, used = time.perf_counter(), _children_cpu_seconds()
            _run(words, cwd=entry["directory"], env=env)
            elapsed = _children_cpu_seconds() - used if cpu else time.perf_counter() - wall
            times[Path(entry["output"]).name] = elapsed
    return times


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
