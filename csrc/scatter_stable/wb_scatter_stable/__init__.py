"""scatter_sum, scatter_mean, scatter_min, scatter_max on the LibTorch stable ABI, with torch_scatter's signature.

    import wb_scatter_stable
    out = wb_scatter_stable.scatter_sum(src, index, dim=0)
    values, argindex = wb_scatter_stable.scatter_max(src, index, dim=0, out=start)

The compiled library _C*.so (C++ against torch/csrc/stable only) registers the ops
torch.ops.wb_scatter_stable.* and their CPU (and, in a CUDA build, CUDA) kernels. The stable ABI has no C++
autograd and no data-dependent meta kernels, so wb_scatter_stable.ops registers both in Python.
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
            "wb_scatter_stable's compiled library (_C*.so) is missing next to this file: the package was "
            "not built. Build it with `pip wheel --no-build-isolation --no-deps <path to csrc/scatter_stable>` "
            "and install the wheel."
        )
    return found[0]


def _namespace_taken() -> bool:
    try:
        torch.ops.wb_scatter_stable.scatter_sum  # noqa: B018 - looking the op up is the test
    except (AttributeError, RuntimeError):
        return False
    return True


library_path = _find_library()
if _namespace_taken():
    # Loading a second copy of the library kills the process inside dlopen (torch 2.13: a warning
    # about overridden CPU kernels, then SIGSEGV), which no Python code can catch. Refuse instead.
    raise ImportError(
        "the wb_scatter_stable ops are already registered in this process by another copy of the "
        "library; a library namespace can be registered only once per process. Import "
        "wb_scatter_stable in a fresh process."
    )
torch.ops.load_library(str(library_path))
ops.register_python_kernels()
