"""The scatter ops of chapter 03 in plain PyTorch: what the compiled ops must return.

    from workbook.ops import scatter_reference as reference
    expected = reference.reference_sum(src, index, dim=0)
    values, argindex = reference.reference_max(src, index, dim=0, dim_size=5)

Same signature as the ops (torch_scatter's `(src, index, dim=-1, out=None, dim_size=None)`), computed
with torch's native `scatter_add_` and `scatter_reduce`, for tests, checks and the fuzzer. Importing it
builds nothing.
"""

from __future__ import annotations

import torch


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
    # The win rule of csrc/scatter/scatter_reduce_rules.h (NaN included), written with torch's ops.
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
