"""The scatter ops of chapters 03-04: loader, Python-facing functions and a pure-PyTorch reference.

    from workbook import scatter
    out = scatter.scatter_sum(src, index, dim=0)            # builds csrc/scatter on first use
    values, argindex = scatter.scatter_max(src, index, dim=0, dim_size=5)
    expected, expected_arg = scatter.reference_max(src, index, dim=0, dim_size=5)

The functions have torch_scatter's signature `(src, index, dim=-1, out=None, dim_size=None)`
and call the compiled `torch.ops.wb_scatter.*` ops; their autograd is C++
(`torch::autograd::Function` classes in csrc/scatter/scatter.cpp). The `reference_*` functions
compute the same results with torch's native `scatter_add_`/`scatter_reduce` for tests and checks.
"""
from __future__ import annotations

import hashlib
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

_loaded = False


def cuda_sources() -> list[str]:
    """The CUDA kernels in csrc/scatter/cuda/ (relative paths), when CUDA can be built here."""
    found = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "csrc/scatter/cuda").glob("*.cu"))
    return build.cuda_sources(NAME, found) if found else []


def load():
    """Build (once; later calls and processes reuse the build) and load the wb_scatter op library."""
    global _loaded
    if not _loaded:
        build.load(
            NAME,
            CPP_SOURCES + cuda_sources(),
            is_python_module=False,
            extra_cflags=EXTRA_CFLAGS,
            extra_cuda_cflags=["-O3"],
            extra_ldflags=EXTRA_LDFLAGS,
        )
        _loaded = True
    return torch.ops.wb_scatter


def scatter_sum(src, index, dim=-1, out=None, dim_size=None):
    return load().scatter_sum(src, index, dim, out, dim_size)


def scatter_mean(src, index, dim=-1, out=None, dim_size=None):
    return load().scatter_mean(src, index, dim, out, dim_size)


def scatter_min(src, index, dim=-1, out=None, dim_size=None):
    return load().scatter_min(src, index, dim, out, dim_size)


def scatter_max(src, index, dim=-1, out=None, dim_size=None):
    return load().scatter_max(src, index, dim, out, dim_size)


def scatter(src, index, dim=-1, out=None, dim_size=None, reduce="sum"):
    """torch_scatter's `scatter(..., reduce=...)`: min/max return only the values here too."""
    ops = {"sum": scatter_sum, "add": scatter_sum, "mean": scatter_mean, "min": scatter_min, "max": scatter_max}
    result = ops[reduce](src, index, dim, out, dim_size)
    return result[0] if reduce in ("min", "max") else result


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
    if out is None:
        values = src.new_zeros(shape).scatter_reduce(dim, index, src, amin_or_amax, include_self=False)
        beats_start = torch.ones_like(src, dtype=torch.bool)
    else:
        values = out.scatter_reduce(dim, index, src, amin_or_amax, include_self=True)
        start = out.gather(dim, index)
        beats_start = src < start if which == "min" else src > start
    # The argindex: the first position along dim whose value is its group's result.
    position = torch.arange(n).view([-1 if d == dim else 1 for d in range(src.dim())]).expand(src.shape)
    winner = (src == values.gather(dim, index)) & beats_start
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
