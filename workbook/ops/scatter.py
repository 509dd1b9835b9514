"""The scatter ops of chapters 03-04: the JIT build of csrc/scatter, and the same sources as a package
and as a CMake project.

    from workbook.ops import scatter
    out = scatter.scatter_sum(src, index, dim=0)            # builds csrc/scatter on first use
    values, argindex = scatter.scatter_max(src, index, dim=0, dim_size=5)
    expected, expected_arg = scatter.reference_max(src, index, dim=0, dim_size=5)

The functions are the installed package's own (csrc/scatter/wb_scatter/ops.py, loaded here by its
path), each wrapped to build and load the library first (once it is loaded, the names are the
functions themselves): torch_scatter's signature
`(src, index, dim=-1, out=None, dim_size=None)`, calling the compiled `torch.ops.wb_scatter.*` ops (the
functional overload, or `accumulate` when `out` is given). Their autograd is C++
(`torch::autograd::Function` classes in csrc/scatter/autograd_*.cpp), their fake kernels Python (ops.py).
The `reference_*` functions are workbook.ops.scatter_reference's, in plain PyTorch.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch

from workbook import REPO_ROOT, build

# Re-exported: chapter 03 and the tests call the pure-PyTorch reference as scatter.reference_*.
from workbook.ops.scatter_reference import (
    broadcast,
    reference_count,
    reference_max,
    reference_mean,
    reference_min,
    reference_sum,
)

NAME = "wb_scatter"
# The op-level files are compiled as one unit, which includes them (csrc/scatter/scatter_unity.cpp says why).
CPP_SOURCES = ["csrc/scatter/scatter_unity.cpp"]
CPP_SOURCES += [f"csrc/scatter/cpu/scatter_cpu_{reduction}.cpp" for reduction in ("sum", "mean", "min", "max")]
# The dtypes the kernels accept (supported_dtype in csrc/scatter/checks.cpp; the stable port takes the same).
DTYPES = tuple(getattr(torch, name) for name in "uint8 int8 int16 int32 int64 float16 bfloat16 float32 float64".split())
# at::parallel_for runs its loop on OpenMP threads only when the code is compiled with -fopenmp;
# without the flag it silently runs on one thread. load() would compile at -O0 without -O3.
EXTRA_CFLAGS = ["-O3", "-fopenmp"]
EXTRA_LDFLAGS = ["-fopenmp"]
# `make sanitize` sets WORKBOOK_SANITIZE=1: the same sources, built into a folder of their own with
# AddressSanitizer and UndefinedBehaviorSanitizer (any finding aborts the process) and warnings as
# errors. Loading such a library needs the ASan runtime preloaded into Python (the Makefile does it).
SANITIZE = os.environ.get("WORKBOOK_SANITIZE") == "1"
SANITIZER_FLAGS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g"]
WARNING_FLAGS = ["-Wall", "-Wextra", "-Werror"]

_loaded = False


def _load_python_half():
    """csrc/scatter/wb_scatter/ops.py, by path: importing the package would load its own library.

    The module is entered in sys.modules under its name, as an import would: torch.compile looks a
    traced function's module up there.
    """
    path = REPO_ROOT / "csrc" / "scatter" / "wb_scatter" / "ops.py"
    spec = importlib.util.spec_from_file_location("workbook._wb_scatter_ops", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_python_half = _load_python_half()
OP_NAMES = _python_half.OPS  # the ops, each with the overloads "" and "accumulate"


def cuda_sources() -> list[str]:
    """The CUDA kernels in csrc/scatter/cuda/ (relative paths), when CUDA can be built here."""
    found = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "csrc/scatter/cuda").glob("*.cu"))
    return build.cuda_sources(NAME, found) if found else []


def load():
    """Build (once; later calls and processes reuse the build) and load the wb_scatter op library.

    Returns `torch.ops.wb_scatter` with kernels, autograd and fake kernels registered.
    """
    global _loaded
    if not _loaded:
        if _python_half.namespace_taken():
            raise RuntimeError(
                "torch.ops.wb_scatter is already registered in this process by another library (the "
                "installed wb_scatter package?). Loading the JIT build as well would abort the process "
                "(a TORCH_LIBRARY namespace can be registered only once); restart the kernel."
            )
        _build()
        _python_half.register_python_kernels()
        _loaded = True
        # From now on this module's scatter_* names are ops.py's functions themselves, without the
        # wrapper below: a call of a small input costs a few microseconds, and the wrapper was one of them.
        globals().update({name: getattr(_python_half, name) for name in _WRAPPED})
    return torch.ops.wb_scatter


def _build():
    if not SANITIZE:
        build.load(
            NAME,
            CPP_SOURCES + cuda_sources(),
            is_python_module=False,
            extra_cflags=EXTRA_CFLAGS,
            extra_cuda_cflags=["-O3"],
            extra_ldflags=EXTRA_LDFLAGS,
        )
        return
    # The compiler runs without the ASan runtime this process was started with: under it, it is
    # several times slower.
    preload = os.environ.pop("LD_PRELOAD", None)
    try:
        build.load(
            f"{NAME}_sanitized",
            CPP_SOURCES,
            is_python_module=False,
            extra_cflags=EXTRA_CFLAGS + SANITIZER_FLAGS + WARNING_FLAGS,
            extra_ldflags=EXTRA_LDFLAGS + SANITIZER_FLAGS[:1],
        )
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload


def _loading_first(function):
    """`function` of ops.py, preceded by building and loading the library when it is not loaded yet."""

    @functools.wraps(function)
    def loaded(*args, **kwargs):
        load()
        return function(*args, **kwargs)

    return loaded


_WRAPPED = ("scatter_sum", "scatter_mean", "scatter_min", "scatter_max", "scatter")
scatter_sum = _loading_first(_python_half.scatter_sum)
scatter_mean = _loading_first(_python_half.scatter_mean)
scatter_min = _loading_first(_python_half.scatter_min)
scatter_max = _loading_first(_python_half.scatter_max)
scatter = _loading_first(_python_half.scatter)


# ---- chapter 04: the same sources as a pip-installable package and as a CMake project --------

PACKAGE_SOURCE = REPO_ROOT / "csrc" / "scatter"
PACKAGE_SITE = REPO_ROOT / "build" / "scatter_pkg" / "site"  # pip install --target: not the venv
CMAKE_BUILD = REPO_ROOT / "build" / "scatter_cmake"


def pip_install_command(target=PACKAGE_SITE) -> list[str]:
    """`pip install --no-build-isolation` of csrc/scatter into a folder of its own (a throw-away site)."""
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-build-isolation",
        "--no-deps",
        "--upgrade",
        "--target",
        str(target),
        str(PACKAGE_SOURCE),
    ]


# What a build of the package reads: its C++ and CUDA sources, setup.py, pyproject.toml and wb_scatter/*.py.
_PACKAGE_INPUTS = (".cpp", ".h", ".cu", ".py", ".toml")


def _package_fingerprint(target) -> str:
    """A digest of everything an install into `target` depends on: the package's files, this torch, this
    Python, the pip command and the switch that leaves CUDA out."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_SOURCE.rglob("*")):
        if path.is_file() and path.suffix in _PACKAGE_INPUTS and "__pycache__" not in path.parts:
            digest.update(path.relative_to(PACKAGE_SOURCE).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for part in (
        torch.__version__,
        sys.executable,
        os.environ.get("WB_SCATTER_CPU_ONLY", ""),
        *pip_install_command(target),
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def install_package(target=PACKAGE_SITE) -> Path:
    """Build and install the wb_scatter package into `target` (~40 s cold); return `target`.

    When `target` already holds an install of the same sources for this torch and this Python (a record
    beside it, `<target>.installed`, says so), pip is not run again: a warm pip run still starts Python
    and torch twice and relinks the library, about 15 s, to produce the same files.
    """
    target = Path(target)
    record = target.with_name(target.name + ".installed")
    with build.exclusive(f"pip-{NAME}"):
        fingerprint = _package_fingerprint(target)
        installed = (target / NAME / "__init__.py").exists() and any((target / NAME).glob("_C*.so"))
        if installed and record.exists() and record.read_text() == fingerprint:
            return target
        record.unlink(missing_ok=True)
        build.run_build_step(NAME, "install", pip_install_command(target), log_dir=target.parent)
        record.write_text(fingerprint)
    return target


def run_python(code: str, path=PACKAGE_SITE) -> str:
    """Run `code` in a fresh Python whose sys.path starts with `path`; return what it printed.

    A fresh process: a library namespace (TORCH_LIBRARY(wb_scatter)) can be registered only once
    per process, and the JIT-built wb_scatter may already be loaded in this one.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/")
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"the Python code failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def cmake_configure_command(build_dir=CMAKE_BUILD) -> list[str]:
    return build.cmake_configure_command(PACKAGE_SOURCE, build_dir)


def cmake_build(build_dir=CMAKE_BUILD) -> Path:
    """Configure (first time) and build libwb_scatter.so and scatter_demo (~60 s cold)."""
    return build.cmake_build(NAME, PACKAGE_SOURCE, build_dir=build_dir)
