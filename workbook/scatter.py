"""The scatter ops of chapters 03-04: loader, Python-facing functions and a pure-PyTorch reference.

    from workbook import scatter
    out = scatter.scatter_sum(src, index, dim=0)            # builds csrc/scatter on first use
    values, argindex = scatter.scatter_max(src, index, dim=0, dim_size=5)
    expected, expected_arg = scatter.reference_max(src, index, dim=0, dim_size=5)

The functions have torch_scatter's signature `(src, index, dim=-1, out=None, dim_size=None)`
and call the compiled `torch.ops.wb_scatter.*` ops (the functional overload, or `accumulate` when
`out` is given); their autograd is C++ (`torch::autograd::Function` classes in
csrc/scatter/scatter.cpp), their fake kernels Python (csrc/scatter/wb_scatter/ops.py, shared with
the installed package). The `reference_*` functions compute the same results with torch's native
`scatter_add_`/`scatter_reduce` for tests and checks.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import torch

from . import REPO_ROOT
from . import build

NAME = "wb_scatter"
CPP_SOURCES = ["csrc/scatter/scatter.cpp", "csrc/scatter/cpu/scatter_cpu.cpp"]
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
        if _namespace_taken():
            raise RuntimeError(
                "torch.ops.wb_scatter is already registered in this process by another library (the "
                "installed wb_scatter package?). Loading the JIT build as well would abort the process "
                "(a TORCH_LIBRARY namespace can be registered only once); restart the kernel."
            )
        _build()
        _python_half.register_fakes()
        _loaded = True
    return torch.ops.wb_scatter


def _build():
    if not SANITIZE:
        build.load(NAME, CPP_SOURCES + cuda_sources(), is_python_module=False, extra_cflags=EXTRA_CFLAGS,
                   extra_cuda_cflags=["-O3"], extra_ldflags=EXTRA_LDFLAGS)
        return
    # The compiler runs without the ASan runtime this process was started with: under it, it is
    # several times slower.
    preload = os.environ.pop("LD_PRELOAD", None)
    try:
        build.load(f"{NAME}_sanitized", CPP_SOURCES, is_python_module=False,
                   extra_cflags=EXTRA_CFLAGS + SANITIZER_FLAGS + WARNING_FLAGS,
                   extra_ldflags=EXTRA_LDFLAGS + SANITIZER_FLAGS[:1])
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload


def _namespace_taken() -> bool:
    try:
        torch.ops.wb_scatter.scatter_sum
    except (AttributeError, RuntimeError):
        return False
    return True


def scatter_sum(src, index, dim=-1, out=None, dim_size=None):
    load()
    return _python_half.scatter_sum(src, index, dim, out, dim_size)


def scatter_mean(src, index, dim=-1, out=None, dim_size=None):
    load()
    return _python_half.scatter_mean(src, index, dim, out, dim_size)


def scatter_min(src, index, dim=-1, out=None, dim_size=None):
    load()
    return _python_half.scatter_min(src, index, dim, out, dim_size)


def scatter_max(src, index, dim=-1, out=None, dim_size=None):
    load()
    return _python_half.scatter_max(src, index, dim, out, dim_size)


def scatter(src, index, dim=-1, out=None, dim_size=None, reduce="sum"):
    """torch_scatter's `scatter(..., reduce=...)`: min/max return only the values here too."""
    load()
    return _python_half.scatter(src, index, dim, out, dim_size, reduce)


# ---- pure-PyTorch reference ---------------------------------------------------------------------

def broadcast(index: torch.Tensor, src: torch.Tensor, dim: int) -> torch.Tensor:
    """torch_scatter's rule: a 1-D index runs along `dim`, trailing dimensions are added, then expand."""
    dim = dim + src.dim() if dim < 0 else dim
    if index.dim() == 1:
        for _ in range(dim):
            index = index.unsqueeze(0)
    while index.dim() < src.dim():
        index = index.unsqueeze(-1)
    return index.expand(src.shape)


def _prepare(src, index, dim, out, dim_size):
    dim = dim + src.dim() if dim < 0 else dim
    index = broadcast(index, src, dim)
    if out is not None:
        size = out.size(dim)
    elif dim_size is not None:
        size = dim_size
    else:
        size = int(index.max()) + 1 if index.numel() else 0
    shape = list(src.shape)
    shape[dim] = size
    return dim, index, shape


def reference_sum(src, index, dim=-1, out=None, dim_size=None):
    dim, index, shape = _prepare(src, index, dim, out, dim_size)
    start = out.clone() if out is not None else src.new_zeros(shape)
    return start.scatter_add_(dim, index, src)


def reference_count(src, index, dim=-1, out=None, dim_size=None):
    """How many src elements land in each group (int64, the output's shape)."""
    dim, index, shape = _prepare(src, index, dim, out, dim_size)
    return torch.zeros(shape, dtype=torch.long).scatter_add_(dim, index, torch.ones_like(index))


def reference_mean(src, index, dim=-1, out=None, dim_size=None):
    total = reference_sum(src, index, dim, out, dim_size)
    count = reference_count(src, index, dim, out, dim_size).clamp_min(1)
    if total.is_floating_point():
        acc = torch.float32 if total.dtype in (torch.float16, torch.bfloat16) else total.dtype
        return (total.to(acc) / count).to(total.dtype)
    return total.div(count, rounding_mode="floor").to(total.dtype)


def _reference_arg_reduce(src, index, dim, out, dim_size, which):
    dim, index, shape = _prepare(src, index, dim, out, dim_size)
    n = src.size(dim)
    amin_or_amax = "amin" if which == "min" else "amax"
    # NaN propagates (torch's amin/amax do the same): a group holding a NaN gives NaN, and its
    # argindex is the position of its first NaN; a NaN already in out= stays, with argindex n.
    if out is None:
        values = src.new_zeros(shape).scatter_reduce(dim, index, src, amin_or_amax, include_self=False)
        beats_start = torch.ones_like(src, dtype=torch.bool)
    else:
        values = out.scatter_reduce(dim, index, src, amin_or_amax, include_self=True)
        start = out.gather(dim, index)
        beats_start = (src < start if which == "min" else src > start) | (src.isnan() & ~start.isnan())
    # The argindex: the first position along dim whose value is its group's result.
    position = torch.arange(n).view([-1 if d == dim else 1 for d in range(src.dim())]).expand(src.shape)
    result = values.gather(dim, index)
    winner = ((src == result) | (src.isnan() & result.isnan())) & beats_start
    arg = torch.full(shape, n, dtype=torch.long).scatter_reduce(
        dim, index, torch.where(winner, position, n), "amin", include_self=True
    )
    return values, arg


def reference_min(src, index, dim=-1, out=None, dim_size=None):
    return _reference_arg_reduce(src, index, dim, out, dim_size, "min")


def reference_max(src, index, dim=-1, out=None, dim_size=None):
    return _reference_arg_reduce(src, index, dim, out, dim_size, "max")


# ---- loading a chapter's inline C++ that registers ops ---------------------------------------

def load_inline_ops(stem: str, source: str, **kwargs):
    """Build C++ that registers ops with `TORCH_LIBRARY(NAMESPACE, m)` and return `torch.ops.<ns>`.

    The word NAMESPACE in `source` becomes `<stem>_<hash of the source>`. A library namespace can
    be registered only once per process, so re-running an edited cell under one fixed name would
    fail with "Only a single TORCH_LIBRARY can be used to register the namespace"; with the hash in
    the name, every edit gets its own namespace (and its own build), and re-running an unchanged
    cell reuses the loaded one.
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:10]
    namespace = f"{stem}_{digest}"
    if namespace not in _inline_loaded:
        kwargs.setdefault("extra_cflags", ["-O2"])
        build.load_inline(namespace, source.replace("NAMESPACE", namespace), is_python_module=False, **kwargs)
        _inline_loaded.add(namespace)
    return getattr(torch.ops, namespace)


_inline_loaded: set[str] = set()


# ---- chapter 04: the same sources as a pip-installable package and as a CMake project --------

PACKAGE_SOURCE = REPO_ROOT / "csrc" / "scatter"
PACKAGE_SITE = REPO_ROOT / "build" / "scatter_pkg" / "site"   # pip install --target: not the venv
CMAKE_BUILD = REPO_ROOT / "build" / "scatter_cmake"


def _run(command, **kwargs):
    import subprocess

    kwargs.setdefault("cwd", REPO_ROOT)
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"`{' '.join(map(str, command))}` failed (exit {result.returncode}):\n{tail}")
    return result


def pip_install_command(target=PACKAGE_SITE) -> list[str]:
    """`pip install --no-build-isolation` of csrc/scatter into a folder of its own (a throw-away site)."""
    import sys

    return [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-build-isolation", "--no-deps", "--upgrade", "--target", str(target), str(PACKAGE_SOURCE)]


def install_package(target=PACKAGE_SITE) -> Path:
    """Build and install the wb_scatter package into `target` (~40 s cold, a few seconds warm)."""
    _run(pip_install_command(target))
    return Path(target)


def run_python(code: str, path=PACKAGE_SITE) -> str:
    """Run `code` in a fresh Python whose sys.path starts with `path`; return what it printed.

    A fresh process: a library namespace (TORCH_LIBRARY(wb_scatter)) can be registered only once
    per process, and the JIT-built wb_scatter may already be loaded in this one.
    """
    import os
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]))
    return _run([sys.executable, "-c", code], env=env, cwd="/").stdout


def cmake_configure_command(build_dir=CMAKE_BUILD) -> list[str]:
    import torch.utils

    return ["cmake", "-S", str(PACKAGE_SOURCE), "-B", str(build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"]


def cmake_build(build_dir=CMAKE_BUILD) -> Path:
    """Configure (first time) and build libwb_scatter.so and scatter_demo (~60 s cold)."""
    import shutil

    build_dir = Path(build_dir)
    if shutil.which("ninja") is None:
        import os
        import sys

        os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if not (build_dir / "build.ninja").exists():
        _run(cmake_configure_command(build_dir))
    _run(["cmake", "--build", str(build_dir)])
    return build_dir
