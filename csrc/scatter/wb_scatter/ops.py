"""The Python half of the wb_scatter ops: torch_scatter-style functions and the fake kernels.

This module imports nothing but torch, so that two builds of the same C++ sources share it: the
installed package (wb_scatter/__init__.py) imports it, and the workbook's JIT build
(workbook/ops/scatter.py) loads this file by its path. Either calls `register_python_kernels()` once, after the
compiled library has defined the ops.

The functions take torch_scatter's arguments `(src, index, dim=-1, out=None, dim_size=None)`
and pick the overload: without `out`, the functional op (a fresh result); with `out`, the
`accumulate` overload, which starts from out's values, writes into `out` and returns it.
"""

import torch

OPS = ("scatter_sum", "scatter_mean", "scatter_min", "scatter_max")


def _ops():
    return torch.ops.wb_scatter


def _check_dim_size(out, dim, dim_size):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a tensor or None, got {type(out).__name__}")
    if dim_size is not None and dim_size != out.size(dim):
        raise RuntimeError(
            f"dim_size is {dim_size} but out.size({dim}) is {out.size(dim)}; pass one of them or make them agree"
        )


def scatter_sum(src, index, dim=-1, out=None, dim_size=None):
    if out is None:
        return _ops().scatter_sum(src, index, dim, dim_size)
    _check_dim_size(out, dim, dim_size)
    _ops().scatter_sum.accumulate(src, index, dim, out)
    return out


def scatter_mean(src, index, dim=-1, out=None, dim_size=None):
    if out is None:
        return _ops().scatter_mean(src, index, dim, dim_size)
    _check_dim_size(out, dim, dim_size)
    _ops().scatter_mean.accumulate(src, index, dim, out)
    return out


def scatter_min(src, index, dim=-1, out=None, dim_size=None):
    if out is None:
        return _ops().scatter_min(src, index, dim, dim_size)
    _check_dim_size(out, dim, dim_size)
    return out, _ops().scatter_min.accumulate(src, index, dim, out)


def scatter_max(src, index, dim=-1, out=None, dim_size=None):
    if out is None:
        return _ops().scatter_max(src, index, dim, dim_size)
    _check_dim_size(out, dim, dim_size)
    return out, _ops().scatter_max.accumulate(src, index, dim, out)


def scatter(src, index, dim=-1, out=None, dim_size=None, reduce="sum"):
    """One entry point, like torch_scatter.scatter; min/max return only the values."""
    functions = {"sum": scatter_sum, "add": scatter_sum, "mean": scatter_mean, "min": scatter_min, "max": scatter_max}
    if not isinstance(reduce, str) or reduce not in functions:
        raise ValueError(f"reduce must be 'sum', 'mean', 'min' or 'max', got {reduce!r}")
    result = functions[reduce](src, index, dim, out, dim_size)
    return result[0] if reduce in ("min", "max") else result


# ---- fake kernels: what torch.compile and torch.export run instead of the C++ kernels ---------
# A fake kernel sees tensors without data and returns empty tensors with the result's shape,
# strides and dtype. The C++ kernels return contiguous tensors, so the fakes do too (new_empty).


def _check(src, index, dim, out=None):
    """The C++ kernels' argument checks that need no values, with the same messages."""
    torch._check(src.dim() >= 1, lambda: "src must have at least one dimension, got a 0-dimensional tensor")
    torch._check(
        -src.dim() <= dim < src.dim(),
        lambda: f"dim must be in [{-src.dim()}, {src.dim()}) for src of shape {list(src.shape)}, got {dim}",
    )
    torch._check(index.dtype == torch.int64, lambda: f"index must be an int64 tensor, got dtype {index.dtype}")
    torch._check(
        index.device == src.device,
        lambda: f"index is on {index.device} but src is on {src.device}; they must be on the same device",
    )
    if out is not None:
        torch._check(
            out.device == src.device,
            lambda: f"out is on {out.device} but src is on {src.device}; they must be on the same device",
        )


def _result_shape(src, index, dim, dim_size):
    _check(src, index, dim)
    if dim_size is None:
        # The size is index.max() + 1: it depends on the *values* of index, which a fake tensor
        # does not have. A new dynamic size is a symbol for "an integer >= 0 known only when the
        # kernel has run": the compiled graph carries it through instead of specialising on it.
        # (A C++ Meta kernel cannot do this: it must return a concrete or input-derived size.)
        dim_size = torch.library.get_ctx().new_dynamic_size()
    shape = list(src.shape)
    shape[dim] = dim_size
    return shape


def _fake_sum_or_mean(src, index, dim=-1, dim_size=None):
    return src.new_empty(_result_shape(src, index, dim, dim_size))


def _fake_min_or_max(src, index, dim=-1, dim_size=None):
    shape = _result_shape(src, index, dim, dim_size)
    return src.new_empty(shape), src.new_empty(shape, dtype=torch.int64)


def _fake_accumulate(src, index, dim, out):
    """sum/mean: the result is written into out and nothing is returned."""
    _check(src, index, dim, out)


def _fake_arg_accumulate(src, index, dim, out):
    """min/max: out is written; the argindex is a fresh int64 tensor of out's shape."""
    _check(src, index, dim, out)
    return out.new_empty(out.shape, dtype=torch.int64)


def _size_given_on_meta(fake):
    """`fake`, refusing meta tensors without dim_size up front, with a message naming dim_size.

    Meta tensors (unlike the fake tensors of torch.compile) cannot carry a dynamic size."""

    def checked(src, index, dim=-1, dim_size=None):
        on_meta = src.device.type == "meta" and index.device.type == "meta"
        torch._check(
            dim_size is not None or not on_meta,
            lambda: "dim_size=None reads index.max(), and a meta tensor has no values: pass dim_size",
        )
        return fake(src, index, dim, dim_size)

    return checked


# ---- vmap: one call of the op for a whole batch -----------------------------------------------


def _batched_rule(name):
    """The vmap rule of the functional overload of op `name`.

    torch.vmap calls it with the batched tensors and where their batch dimension is (`in_dims`);
    it returns the batched result and where its batch dimension is. Each sample's `dim` becomes
    `dim + 1` once the batch is moved to the front. The index is batched alongside: a per-sample
    index of several dimensions lines up with src's leading dimensions, and the batch dimension in
    front keeps it so. A per-sample 1-D index lines up with `dim` instead, so it gets size-1
    dimensions between the batch and `dim`. With dim_size=None the rows are index.max() + 1 over
    the whole batch (vmap stacks equal shapes): samples with fewer groups get empty (zero) rows.
    """

    def rule(info, in_dims, src, index, dim=-1, dim_size=None):
        src_batch, index_batch = in_dims[0], in_dims[1]
        rank = src.dim() - (src_batch is not None)  # the rank each sample's src has
        torch._check(-rank <= dim < rank, lambda: f"dim must be in [{-rank}, {rank}) for src of rank {rank}, got {dim}")
        dim = dim + rank if dim < 0 else dim
        src = src.movedim(src_batch, 0) if src_batch is not None else src.expand(info.batch_size, *src.shape)
        if index_batch is None:
            index = index.expand(info.batch_size, *index.shape)
        else:
            index = index.movedim(index_batch, 0)
        if index.dim() == 2 and dim != 0:  # a per-sample 1-D index, which runs along dim
            index = index.reshape(index.shape[0], *[1] * dim, index.shape[1])
        result = getattr(_ops(), name)(src, index, dim + 1, dim_size)
        return result, (0, 0) if isinstance(result, tuple) else 0

    return rule


def namespace_taken() -> bool:
    """Whether some library already registered the wb_scatter ops in this process."""
    try:
        torch.ops.wb_scatter.scatter_sum  # noqa: B018 - looking the op up is the test
    except (AttributeError, RuntimeError):
        return False
    return True


_registered = False


def register_python_kernels():
    """Register the fake kernels and vmap rules of every wb_scatter op (once per process; later calls
    do nothing)."""
    global _registered
    if _registered:
        return
    for name in OPS:
        arg_reduce = name in ("scatter_min", "scatter_max")
        torch.library.register_fake(
            f"wb_scatter::{name}", _size_given_on_meta(_fake_min_or_max if arg_reduce else _fake_sum_or_mean)
        )
        torch.library.register_fake(
            f"wb_scatter::{name}.accumulate", _fake_arg_accumulate if arg_reduce else _fake_accumulate
        )
        torch.library.register_vmap(f"wb_scatter::{name}", _batched_rule(name))
    _registered = True
