"""What the GPU tests of the two scatter packages share (tests/test_scatter_cuda.py for wb_scatter,
tests/test_scatter_stable_cuda.py for wb_scatter_stable): an op run on DEVICE and on the CPU, the results
compared exactly, and the empty inputs both kernels must handle. DEVICE and the dry run: tests/cuda_device.py.
"""

import torch
from cuda_device import DEVICE


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def integer_valued(shape, dtype, seed=0, low=-20, high=20):
    """Small integers in any dtype: every sum is exact, so CPU and GPU must agree exactly."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(low, high, shape, generator=generator)
    return (values.abs() if dtype == torch.uint8 else values).to(dtype)


def run_both(function, src, index, dim=-1, out=None, dim_size=None):
    """function (a scatter_<op> of either package) on DEVICE, its results moved to the CPU, and on the CPU:
    (got, expected), each a tuple. The CPU call writes a copy of out."""
    expected = as_tuple(function(src, index, dim, None if out is None else out.clone(), dim_size))
    device_out = None if out is None else out.to(DEVICE)
    got = as_tuple(function(src.to(DEVICE), index.to(DEVICE), dim, device_out, dim_size))
    for tensor in got:
        assert tensor.device.type == torch.device(DEVICE).type
    return tuple(t.cpu() for t in got), expected


def assert_equal(got, expected, what=""):
    assert len(got) == len(expected)
    for position, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype and g.shape == e.shape, (what, position, g.dtype, e.dtype, g.shape, e.shape)
        assert torch.equal(g, e) or (g.is_floating_point() and torch.allclose(g, e, equal_nan=True, rtol=0, atol=0)), (
            f"{what} output {position} differs at {(g != e).nonzero()[:5].tolist()}: {g[g != e][:5]} vs {e[g != e][:5]}"
        )


def assert_equal_or_close(name, got, expected, what=""):
    """For results of random floats: min and max exactly, whatever the order of the updates; sum and mean up to
    rounding, since the order of the additions differs between the kernels (and between runs of one)."""
    if name in ("min", "max"):
        assert_equal(got, expected, what)
    else:
        torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)


# (src, index, dim, dim_size) with nothing to reduce, or nowhere to put it.
EMPTY_INPUTS = [
    (torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.long), 0, 4),  # no elements, 4 groups
    (torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), 0, 3),  # no elements, a broadcast 1-D index
    (torch.zeros(5, 0), torch.zeros(5, 0, dtype=torch.long), 0, 2),  # no columns
    (torch.zeros(3, 5, 0), torch.zeros(5, dtype=torch.long), 1, 2),  # no columns, a broadcast 1-D index
    (torch.ones(4), torch.tensor([0, 0, 1, 1]), 0, 0),  # dim_size 0: an empty output
    (torch.ones(2, 3), torch.tensor([[0, 0, 0], [0, 0, 0]]), 1, 0),  # an empty output along dim 1
    (torch.zeros(0), torch.zeros(0, dtype=torch.long), 0, None),  # dim_size from an empty index: 0
    (torch.zeros(2, 0, 4), torch.zeros(2, 0, 4, dtype=torch.long), 1, None),  # the same along dim 1
]


def check_empty_inputs(function, what):
    for src, index, dim, dim_size in EMPTY_INPUTS:
        got, expected = run_both(function, src, index, dim=dim, dim_size=dim_size)
        assert_equal(got, expected, f"{what} empty {tuple(src.shape)}")
