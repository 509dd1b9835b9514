"""scatter_sum, scatter_mean, scatter_min, scatter_max on the LibTorch stable ABI.

    import wb_scatter_stable
    out = wb_scatter_stable.scatter_sum(src, index, dim=0)
    values, argindex = wb_scatter_stable.scatter_max(src, index, dim=0)

The compiled library _C*.so (C++ against torch/csrc/stable only) registers the ops
torch.ops.wb_scatter_stable.* and their CPU kernels. The stable ABI has no C++ autograd and no
meta kernels, so this module registers both in Python: a fake kernel for each op (what
torch.compile and torch.export trace with) and its backward.
"""

from pathlib import Path

# torch first: the library needs libtorch's symbols, which importing torch loads into the process.
import torch

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
_ops = torch.ops.wb_scatter_stable
OPS = ("scatter_sum", "scatter_mean", "scatter_min", "scatter_max")


# ---- fake kernels: output shapes and dtypes only, no data -----------------------------------


def _output_shape(src, index, dim, dim_size):
    torch._check(src.dim() >= 1, lambda: "src must have at least one dimension, got a 0-dimensional tensor")
    torch._check(-src.dim() <= dim < src.dim(), lambda: f"dim must be in [{-src.dim()}, {src.dim()}), got {dim}")
    torch._check(index.dtype == torch.int64, lambda: f"index must be an int64 tensor, got dtype {index.dtype}")
    torch._check(src.device == index.device, lambda: f"index is on {index.device} but src is on {src.device}")
    if dim_size is None:
        # index.max() + 1: known only once the data is, so the size is a fresh symbol.
        dim_size = torch.library.get_ctx().new_dynamic_size()
    shape = list(src.shape)
    shape[dim % src.dim()] = dim_size
    return shape


def _fake_values(src, index, dim=-1, dim_size=None):
    return src.new_empty(_output_shape(src, index, dim, dim_size))


def _fake_values_and_argindex(src, index, dim=-1, dim_size=None):
    shape = _output_shape(src, index, dim, dim_size)
    return src.new_empty(shape), src.new_empty(shape, dtype=torch.int64)


torch.library.register_fake("wb_scatter_stable::scatter_sum", _fake_values)
torch.library.register_fake("wb_scatter_stable::scatter_mean", _fake_values)
torch.library.register_fake("wb_scatter_stable::scatter_min", _fake_values_and_argindex)
torch.library.register_fake("wb_scatter_stable::scatter_max", _fake_values_and_argindex)


# ---- autograd: gradients with respect to src (index, dim, dim_size are not differentiable) ----


def _broadcast(index, src, dim):
    """torch_scatter's rule: a 1-D index runs along dim, missing trailing dimensions are added."""
    if index.dim() == 1:
        index = index.view([-1 if d == dim else 1 for d in range(src.dim())])
    else:
        index = index.view(list(index.shape) + [1] * (src.dim() - index.dim()))
    return index.expand(src.shape)


def _setup_context(ctx, inputs, output):
    src, index, dim, _ = inputs
    ctx.dim = dim % src.dim()
    ctx.n = src.shape[ctx.dim]
    argindex = (output[1],) if isinstance(output, tuple) else ()
    ctx.save_for_backward(_broadcast(index, src, ctx.dim), *argindex)


def _sum_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    return grad.gather(ctx.dim, index), None, None, None


def _mean_backward(ctx, grad):
    (index,) = ctx.saved_tensors
    # each element of a group of `count` elements contributed 1/count of its mean
    count = torch.zeros_like(grad, dtype=torch.int64).scatter_add_(ctx.dim, index, torch.ones_like(index))
    return grad.gather(ctx.dim, index) / count.gather(ctx.dim, index), None, None, None


def _arg_backward(ctx, grad, _grad_argindex):
    _, argindex = ctx.saved_tensors
    # route each group's gradient to its winner; empty groups (argindex n) land in an extra slot
    shape = list(grad.shape)
    shape[ctx.dim] = ctx.n + 1
    grad_src = grad.new_zeros(shape).scatter_(ctx.dim, argindex, grad).narrow(ctx.dim, 0, ctx.n)
    return grad_src, None, None, None


for _name, _backward in zip(OPS, (_sum_backward, _mean_backward, _arg_backward, _arg_backward)):
    torch.library.register_autograd(f"wb_scatter_stable::{_name}", _backward, setup_context=_setup_context)


# ---- the Python-facing functions ------------------------------------------------------------


def scatter_sum(src, index, dim=-1, dim_size=None):
    return _ops.scatter_sum(src, index, dim, dim_size)


def scatter_mean(src, index, dim=-1, dim_size=None):
    return _ops.scatter_mean(src, index, dim, dim_size)


def scatter_min(src, index, dim=-1, dim_size=None):
    return _ops.scatter_min(src, index, dim, dim_size)


def scatter_max(src, index, dim=-1, dim_size=None):
    return _ops.scatter_max(src, index, dim, dim_size)


def scatter(src, index, dim=-1, dim_size=None, reduce="sum"):
    """One entry point, like torch_scatter.scatter; min/max return only the values."""
    if reduce in ("sum", "add"):
        return scatter_sum(src, index, dim, dim_size)
    if reduce == "mean":
        return scatter_mean(src, index, dim, dim_size)
    if reduce in ("min", "max"):
        return (scatter_min if reduce == "min" else scatter_max)(src, index, dim, dim_size)[0]
    raise ValueError(f"reduce must be 'sum', 'mean', 'min' or 'max', got {reduce!r}")
