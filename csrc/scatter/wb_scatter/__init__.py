"""scatter_sum, scatter_mean, scatter_min, scatter_max with torch_scatter's signature.

    import wb_scatter
    out = wb_scatter.scatter_sum(src, index, dim=0)
    values, argindex = wb_scatter.scatter_max(src, index, dim=0)

The compiled library _C*.so registers the ops torch.ops.wb_scatter.* (kernels and autograd, in
C++); this module loads it, and wb_scatter.ops adds the fake kernels torch.compile needs.
"""

from pathlib import Path

# torch first: the library needs libtorch's symbols, which importing torch loads into the process.
import torch

from . import ops
from .ops import scatter, scatter_max, scatter_mean, scatter_min, scatter_sum

__version__ = "0.1.0"
__all__ = ["scatter_sum", "scatter_mean", "scatter_min", "scatter_max", "scatter", "library_path"]


def _find_library() -> Path:
    found = sorted(Path(__file__).parent.glob("_C*.so"))
    if not found:
        raise ImportError(
            "wb_scatter's compiled library (_C*.so) is missing next to this file: the package was "
            "not built. Install it with `pip install --no-build-isolation <path to csrc/scatter>`."
        )
    return found[0]


library_path = _find_library()
if ops.namespace_taken():
    # Loading a second library that says TORCH_LIBRARY(wb_scatter, ...) does not raise: its static
    # initialiser throws inside dlopen and the whole process aborts. Refuse politely instead.
    raise ImportError(
        "the wb_scatter ops are already registered in this process (by another build of the same "
        "sources, e.g. workbook.ops.scatter's JIT build); a library namespace can be registered only once "
        "per process. Use the ops already loaded (torch.ops.wb_scatter.*), or import wb_scatter in a "
        "fresh process."
    )
torch.ops.load_library(str(library_path))
ops.register_python_kernels()
