"""The Python half of the wb_scatter_stable ops: torch_scatter-style functions, fake kernels and autograd.

The compiled library (C++ on the stable ABI) defines the ops and their CPU and CUDA kernels. The stable ABI
has no C++ autograd (no torch::autograd::Function) and no way to express a size that depends on index's
values in a C++ meta kernel, so both live here; `register_python_kernels()` registers them once the library is loaded.

The functions take torch_scatter's arguments `(src, index, dim=-1, out=None, dim_size=None)`, like the
ATen package's (csrc/scatter/wb_scatter/ops.py): without `out`, the functional op (a fresh result); with `out`,
the `accumulate` overload, which starts from out's values, writes into `out` and returns it (min/max: with
the argindex).

Autograd, two ways:
- the functional overloads: `torch.library.register_autograd` (a backward and a setup_context);
- the accumulate overloads write into `out` (`Tensor(a!)`), and register_autograd refuses a schema that
  mutates. Their Autograd kernel is written here instead: a `torch.autograd.Function` that calls the op
  below autograd and marks `out` dirty, registered for the Autograd key with `torch.library.Library.impl`,
  which is what the ATen package's C++ kernels do with `torch::autograd::Function` and `mark_dirty`.
Nothing here turns a size into an int: under torch.compile and torch.export a symbolic dim_size or src size
flows through the fake kernels and the backward formulas as a symbol (the schema says `SymInt? dim_size`).
"""

import torch

NAMESPACE = "wb_scatter_stable"
OPS = ("scatter_sum", "scatter_mean", "scatter_min", "scatter_max")
ARG_REDUCE = ("scatter_min", "scatter_max")


def _packet(name):
    return getattr(getattr(torch.ops, NAMESPACE), name)


# ---- the functions users call ------------------------------------------------------------------


def _check_dim_size(out, dim, dim_size):
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a tensor or None, got {type(out).__name__}")
    if dim_size is not None and dim_size != out.size(dim):
        raise RuntimeError(
            f"dim_size is {dim_size} but out.size({dim}) is {out.size(dim)}; pass one of them or make them agree"
        )


def _torch_scatter_function(name):
    def function(src, index, dim=-1, out=None, dim_size=None):
        if out is None:
            return _packet(name)(src, index, dim, dim_size)
        _check_dim_size(out, dim, dim_size)
        returned = _packet(name).accumulate(src, index, dim, out)
        return (out, returned) if name in ARG_REDUCE else out

    function.__name__ = function.__qualname__ = name
    function.__doc__ = (
        f"torch.ops.{NAMESPACE}.{name}, called with torch_scatter's arguments; with `out`, its accumulate overload."
    )
    return function


scatter_sum = _torch_scatter_function("scatter_sum")
scatter_mean = _torch_scatter_function("scatter_mean")
scatter_min = _torch_scatter_function("scatter_min")
scatter_max = _torch_scatter_function("scatter_max")
_BY_REDUCE = {"sum": scatter_sum, "add": scatter_sum, "mean": scatter_mean, "min": scatter_min, "max": scatter_max}


def scatter(src, index, dim=-1, out=None, dim_size=None, reduce="sum"):
    """One entry point, like torch_scatter.scatter; min/max return only the values."""
    if not isinstance(reduce, str) or reduce not in _BY_REDUCE:
        raise ValueError(f"reduce must be 'sum', 'mean', 'min' or 'max', got {reduce!r}")
    result = _BY_REDUCE[reduce](src, index, dim, out, dim_size)
    return result[0] if reduce in ("min", "max") else result


# ---- fake kernels: what torch.compile and torch.export run instead of the C++ kernels ---------
# Empty tensors with the result's shape, strides and dtype. The C++ kernels return contiguous tensors, and
# new_empty makes contiguous ones whatever src's strides (empty_like would copy a non-contiguous layout).


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


def _fake_functional(name):
    def fake(src, index, dim=-1, dim_size=None):
        _check(src, index, dim)
        if dim_size is None:
            # index.max() + 1 depends on index's values, which a fake tensor does not have: a fresh symbol.
            # Meta tensors (unlike the fake tensors of torch.compile) cannot carry one.
            torch._check(
                not (src.device.type == "meta" and index.device.type == "meta"),
                lambda: "dim_size=None reads index.max(), and a meta tensor has no values: pass dim_size",
            )
            dim_size = torch.library.get_ctx().new_dynamic_size()
        shape = list(src.shape)
        shape[dim] = dim_size
        values = src.new_empty(shape)
        return (values, src.new_empty(shape, dtype=torch.int64)) if name in ARG_REDUCE else values

    return fake


def _fake_accumulate(name):
    def fake(src, index, dim, out):
        _check(src, index, dim, out)
        return out.new_empty(out.shape, dtype=torch.int64) if name in ARG_REDUCE else None

    return fake


# ---- gradients ---------------------------------------------------------------------------------
# Each takes the context saved by _save and the incoming gradient (out's shape) and returns the gradients of
# src and of out's initial values (None where not needed), the formulas of the ATen package's C++ Functions.


def _save(ctx, src, index, dim, argindex, has_out):
    ctx.dim = dim % src.dim()
    ctx.src_shape = src.shape
    ctx.has_out = has_out
    ctx.save_for_backward(index if argindex is None else argindex)


def _broadcast_index(ctx):
    """The saved index lined up with src (torch_scatter's rule) and expanded to src's shape."""
    (index,) = ctx.saved_tensors
    ndim = len(ctx.src_shape)
    if index.dim() == 1:
        index = index.view([-1 if d == ctx.dim else 1 for d in range(ndim)])
    else:
        index = index.view(list(index.shape) + [1] * (ndim - index.dim()))
    return index.expand(ctx.src_shape)


def _sum_grads(ctx, grad):
    grad_src = grad.gather(ctx.dim, _broadcast_index(ctx)) if ctx.needs_input_grad[0] else None
    return grad_src, grad if ctx.has_out else None  # out + sum(src): out's gradient passes unchanged


def _mean_grads(ctx, grad):
    index = _broadcast_index(ctx)
    # how many src elements each group averaged (out's initial value is not counted)
    count = torch.zeros_like(grad, dtype=torch.int64).scatter_add_(ctx.dim, index, torch.ones_like(index))
    grad_src = grad.gather(ctx.dim, index) / count.gather(ctx.dim, index) if ctx.needs_input_grad[0] else None
    return grad_src, grad / count.clamp_min(1) if ctx.has_out else None


def _arg_grads(ctx, grad):
    (argindex,) = ctx.saved_tensors
    n = ctx.src_shape[ctx.dim]
    grad_src = None
    if ctx.needs_input_grad[0]:
        # each group's gradient goes to its winner; groups without one (argindex n) land in an extra slot
        shape = list(grad.shape)
        shape[ctx.dim] = n + 1
        grad_src = grad.new_zeros(shape).scatter_(ctx.dim, argindex, grad).narrow(ctx.dim, 0, n)
    # out's own value won where no src element did
    return grad_src, grad.masked_fill(argindex.ne(n), 0) if ctx.has_out else None


_GRADS = {"scatter_sum": _sum_grads, "scatter_mean": _mean_grads, "scatter_min": _arg_grads, "scatter_max": _arg_grads}


def _register_functional_autograd(name):
    arg_reduce = name in ARG_REDUCE

    def setup_context(ctx, inputs, output):
        src, index, dim, _ = inputs
        _save(ctx, src, index, dim, output[1] if arg_reduce else None, has_out=False)

    def backward(ctx, grad, *_grad_argindex):
        return _GRADS[name](ctx, grad)[0], None, None, None

    torch.library.register_autograd(f"{NAMESPACE}::{name}", backward, setup_context=setup_context)


def _check_out_for_autograd(src, out):
    """What autograd cannot record of a write into out, refused up front naming out (the ATen package's messages)."""
    if not torch.is_grad_enabled() or not (src.requires_grad or out.requires_grad):
        return
    if out.is_leaf and out.requires_grad:
        raise RuntimeError(
            "out is a leaf Variable that requires grad, and the op writes into it in place; pass out.clone() "
            "(or out.detach() if out needs no gradient)"
        )
    if out._is_view():
        raise RuntimeError(
            "out is a view of another tensor, and autograd cannot record the op's write into a view; pass a "
            "tensor that is not a view (out.clone(), or out.contiguous() of a non-contiguous one), or run "
            "under torch.no_grad()"
        )


def _register_accumulate_autograd(library, name):
    overload = _packet(name).accumulate
    arg_reduce = name in ARG_REDUCE

    def below_autograd(keyset, *args):
        with torch._C._AutoDispatchBelowAutograd():
            return overload.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    def forward(ctx, src, index, dim, out, keyset, grad_enabled):
        # A Function's forward runs with grad mode off; the write into out is made with the caller's. Eager
        # autograd does not mind, but torch.compile's functionalization takes a write made with grad mode off
        # for one autograd cannot see, and drops this backward from out's gradient.
        with torch.set_grad_enabled(grad_enabled):
            argindex = below_autograd(keyset, src, index, dim, out)
        ctx.mark_dirty(out)  # out was written in place: its history now ends in this node
        _save(ctx, src, index, dim, argindex, has_out=True)
        if arg_reduce:
            ctx.mark_non_differentiable(argindex)
            return out, argindex
        return out

    def backward(ctx, grad, *_grad_argindex):
        grad_src, grad_out = _GRADS[name](ctx, grad)
        return grad_src, None, None, grad_out, None, None

    # a class per op, named after it: out's grad_fn then reads e.g. ScatterSumAccumulateBackward
    class_name = "".join(word.title() for word in name.split("_")) + "Accumulate"
    Accumulate = type(
        class_name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    )

    def autograd_kernel(keyset, src, index, dim, out):
        if src is None or index is None or out is None:
            return below_autograd(keyset, src, index, dim, out)  # the C++ checks name the missing tensor
        _check_out_for_autograd(src, out)
        result = Accumulate.apply(src, index, dim, out, keyset, torch.is_grad_enabled())
        return result[1] if arg_reduce else None

    library.impl(f"{name}.accumulate", autograd_kernel, "Autograd", with_keyset=True)


_library = None


def register_python_kernels():
    """Register the fake kernels and autograd of every wb_scatter_stable op (once per process)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library(NAMESPACE, "IMPL")
    for name in OPS:
        torch.library.register_fake(f"{NAMESPACE}::{name}", _fake_functional(name))
        torch.library.register_fake(f"{NAMESPACE}::{name}.accumulate", _fake_accumulate(name))
        _register_functional_autograd(name)
        _register_accumulate_autograd(library, name)
    _library = library
