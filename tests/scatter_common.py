"""What the scatter test files share: the ops' names, the reference, exact comparisons, integer-valued
data, Hypothesis problems, the kernels' thread splits, the NaN cases and the inputs of the bad-input tables.

tests/test_scatter.py (the ATen package), tests/test_scatter_packages.py (both packages) and
tests/test_scatter_stable.py (the stable package) import them from here.
"""

import torch
from hypothesis import strategies as st

from workbook.ops import scatter as S

OPS = ["sum", "mean", "min", "max"]


def reference(op, *args, **kwargs):
    return getattr(S, f"reference_{op}")(*args, **kwargs)


def assert_same(op, got, expected):
    """Integer-valued inputs keep every sum exact in every dtype, so results must agree exactly."""
    if op in ("min", "max"):
        assert torch.equal(got[0], expected[0]), f"values differ:\n{got[0]}\n{expected[0]}"
        assert torch.equal(got[1], expected[1]), f"argindex differs:\n{got[1]}\n{expected[1]}"
    else:
        assert got.dtype == expected.dtype and torch.equal(got, expected), f"\n{got}\n{expected}"


def integer_valued(shape, dtype, generator):
    low = 0 if dtype == torch.uint8 else -8
    return torch.randint(low, 9, shape, generator=generator).to(dtype)


@st.composite
def problems(draw):
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim))
    dim = draw(st.integers(-ndim, ndim - 1))
    # index: full shape, a 1-D index along dim, or leading dims only (broadcast over the rest)
    form = draw(st.sampled_from(["full", "1d", "leading"]))
    wrapped = dim % ndim
    if form == "1d":
        index_shape = [shape[wrapped]]
    elif form == "leading":
        index_shape = shape[: wrapped + 1]
    else:
        index_shape = list(shape)
    groups = draw(st.integers(1, 6))
    use_dim_size = draw(st.booleans())
    return dict(
        shape=shape,
        dim=dim,
        index_shape=index_shape,
        groups=groups,
        dim_size=groups + draw(st.integers(0, 2)) if use_dim_size else None,
        dtype=draw(st.sampled_from(S.DTYPES)),
        op=draw(st.sampled_from(OPS)),
        seed=draw(st.integers(0, 2**16)),
    )


# Shapes that take each of the CPU kernel's ways of splitting the work between threads.
SPLITS = {
    "slices of one row (1-D)": ((70_000,), 0, 20, None),
    "slices of one row ([n, 3] along dim 0)": ((70_000, 3), 0, 20, None),
    "columns: as many rows as threads": ((4, 40_000), 1, 50, None),
    "columns: output too large to copy per thread": ((60_000,), 0, 20, 100_000),
    "groups: wide rows, output too large to copy per thread": ((4_000, 40), 0, 3_000, None),
    "one task: narrow rows, output too large to copy per thread": ((20_000, 4), 0, 15_000, None),
}


NAN = float("nan")


def with_threads(count, function):
    """function() run with `count` intra-op threads; the thread count is restored afterwards."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(count)
        return function()
    finally:
        torch.set_num_threads(threads)


def assert_same_with_nan(got, expected, what=""):
    assert torch.equal(got[0].isnan(), expected[0].isnan()), f"{what}: NaN differs:\n{got[0]}\n{expected[0]}"
    assert torch.equal(got[0].nan_to_num(), expected[0].nan_to_num()), (
        f"{what}: values differ:\n{got[0]}\n{expected[0]}"
    )
    assert torch.equal(got[1], expected[1]), f"{what}: argindex differs:\n{got[1]}\n{expected[1]}"


# Groups: 0 NaN first, 1 NaN in the middle, 2 NaN last, 3 no NaN, 4 two NaNs, 5 empty.
NAN_SRC = [NAN, 1.0, 2.0, 3.0, NAN, 0.0, 4.0, -1.0, NAN, 6.0, 7.0, 5.0, NAN, NAN]
NAN_INDEX = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4]
NAN_EXPECTED = {  # op: (values, argindex); n = 14 means "nobody"
    "min": ([NAN, NAN, NAN, 6.0, NAN, 0.0], [0, 4, 8, 9, 12, 14]),
    "max": ([NAN, NAN, NAN, 7.0, NAN, 0.0], [0, 4, 8, 10, 12, 14]),
}
# out= starts: group 0 NaN (stays, argindex n), 3 a value that beats 6 and 7 for min but not for max.
NAN_OUT = [NAN, 0.0, 9.0, -9.0, 100.0, -100.0]
NAN_OUT_EXPECTED = {
    "min": ([NAN, NAN, NAN, -9.0, NAN, -100.0], [14, 4, 8, 14, 12, 14]),
    "max": ([NAN, NAN, NAN, 7.0, NAN, -100.0], [14, 4, 8, 10, 12, 14]),
}


SRC = torch.randn(6, 3)
INDEX = torch.tensor([0, 2, 2, 0, 3, 0])
