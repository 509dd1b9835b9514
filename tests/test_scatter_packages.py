"""One suite for both scatter packages: wb_scatter (ATen, csrc/scatter) and wb_scatter_stable (stable ABI,
csrc/scatter_stable).

Every test takes the `package` fixture and runs once per package, with torch_scatter's signature
`scatter_<op>(src, index, dim=-1, out=None, dim_size=None)`: values against the pure-PyTorch reference
(workbook/ops/scatter_reference.py), the thread splits of the CPU kernels, the NaN and tie rules, `out=` and the
accumulate overloads, gradients, opcheck, torch.compile, a symbolic dim_size, torch_scatter-style cases, and
bad input, where both packages must give the same message. Helpers and data shared with the ATen package's own
tests come from tests/scatter_common.py. Package-only matters (the stable wheel, its ABI) are in
tests/test_scatter_stable.py; the stable CUDA kernel's GPU tests in tests/test_scatter_stable_cuda.py.

Both libraries are loaded in this process: their namespaces differ. Sizes are small: the builds dominate.
"""

import functools
from dataclasses import dataclass

import pytest
import torch
import torch._dynamo.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scatter_common import (
    INDEX,
    NAN_EXPECTED,
    NAN_INDEX,
    NAN_OUT,
    NAN_OUT_EXPECTED,
    NAN_SRC,
    OPS,
    SPLITS,
    SRC,
    assert_same,
    assert_same_with_nan,
    integer_valued,
    problems,
    reference,
    with_threads,
)
from torch.fx.experimental.proxy_tensor import make_fx

from workbook.ops import scatter as S
from workbook.ops import scatter_stable

ARG_REDUCE = ("min", "max")


@dataclass(frozen=True)
class Package:
    name: str  # the op namespace, torch.ops.<name>
    functions: object  # the module with the torch_scatter-style functions

    def __call__(self, op, *args, **kwargs):
        return getattr(self.functions, f"scatter_{op}")(*args, **kwargs)

    @property
    def ops(self):
        return getattr(torch.ops, self.name)

    def __repr__(self):
        return self.name


def load(name) -> Package:
    if name == "wb_scatter":
        S.load()
        return Package(name, S)  # workbook.ops.scatter: wb_scatter/ops.py's functions over the JIT build
    scatter_stable.load()
    import wb_scatter_stable

    return Package(name, wb_scatter_stable)


PACKAGES = ["wb_scatter", "wb_scatter_stable"]


@pytest.fixture(scope="module", params=PACKAGES, ids=["aten", "stable"])
def package(request):
    return load(request.param)


@pytest.fixture(scope="module")
def packages():
    return [load(name) for name in PACKAGES]


def values(op, result):
    return result[0] if op in ARG_REDUCE else result


# ---- values ------------------------------------------------------------------------------------


def case(name, g):
    """(src, index, dim, dim_size) for the layouts the kernels treat differently."""
    if name == "1-D":
        return integer_valued((9,), torch.float32, g), torch.randint(0, 4, (9,), generator=g), 0, None
    if name == "2-D full index along dim 1":
        return integer_valued((3, 7), torch.float32, g), torch.randint(0, 5, (3, 7), generator=g), 1, 6
    if name == "1-D index broadcast over features":
        return integer_valued((6, 3), torch.float32, g), torch.tensor([0, 2, 2, 0, 3, 0]), 0, None
    if name == "leading index, 3-D src, negative dim":
        return integer_valued((2, 5, 3), torch.float32, g), torch.randint(0, 3, (2, 5), generator=g), -2, None
    if name == "non-contiguous src and index":
        src = integer_valued((7, 5), torch.float32, g).t()[:, ::2]
        index = torch.randint(0, 4, (8, 5), generator=g).t()[:, ::2]
        return src, index, 1, None
    if name == "permuted 3-D index (its strides do not fold)":
        index = torch.randint(0, 3, (5, 4, 2), generator=g).permute(1, 2, 0)  # shape (4, 2, 5)
        return integer_valued((4, 2, 5), torch.float32, g), index, 0, 4
    if name == "sorted index, long runs":
        return integer_valued((3000,), torch.float64, g), torch.arange(3000) // 700, 0, None
    if name == "empty src":
        return torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), 0, None
    if name == "empty src, dim_size given":
        return torch.zeros(0, 3), torch.zeros(0, dtype=torch.long), 0, 2
    if name == "empty trailing dimension":
        return torch.zeros(4, 0), torch.tensor([0, 1, 1, 0]), 0, 2
    raise KeyError(name)


CASES = [
    "1-D",
    "2-D full index along dim 1",
    "1-D index broadcast over features",
    "leading index, 3-D src, negative dim",
    "non-contiguous src and index",
    "permuted 3-D index (its strides do not fold)",
    "sorted index, long runs",
    "empty src",
    "empty src, dim_size given",
    "empty trailing dimension",
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", CASES)
def test_values_match_the_reference(package, op, name):
    src, index, dim, dim_size = case(name, torch.Generator().manual_seed(len(name)))
    assert_same(op, package(op, src, index, dim, dim_size=dim_size), reference(op, src, index, dim, dim_size=dim_size))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", S.DTYPES, ids=str)
def test_every_dtype_with_and_without_out(package, op, dtype):
    g = torch.Generator().manual_seed(3)
    src = integer_valued((40, 3), dtype, g)
    index = torch.randint(0, 6, (40,), generator=g)
    assert_same(op, package(op, src, index, 0, dim_size=7), reference(op, src, index, 0, dim_size=7))
    start = integer_valued((7, 3), dtype, g)
    out = start.clone()
    assert_same(op, package(op, src, index, 0, out=out), reference(op, src, index, 0, out=start))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problems(), with_out=st.booleans())
def test_random_shapes_dims_dtypes_and_outs_match_the_reference(package, p, with_out):
    g = torch.Generator().manual_seed(p["seed"])
    src = integer_valued(p["shape"], p["dtype"], g)
    index = torch.randint(0, p["groups"], p["index_shape"], generator=g)
    op, dim, dim_size = p["op"], p["dim"], p["dim_size"]
    if with_out:
        shape = list(src.shape)
        shape[dim] = dim_size or p["groups"]
        start = integer_valued(shape, p["dtype"], g)
        out = start.clone()
        assert_same(op, package(op, src, index, dim, out=out), reference(op, src, index, dim, out=start))
    else:
        expected = reference(op, src, index, dim, dim_size=dim_size)
        assert_same(op, package(op, src, index, dim, dim_size=dim_size), expected)


@functools.cache
def split_case(split, op):
    """(src, index, dim, dim_size, expected) of a thread split, computed once for both packages."""
    shape, dim, groups, dim_size = SPLITS[split]
    g = torch.Generator().manual_seed(1)
    src = integer_valued(shape, torch.float32, g)
    index = torch.randint(0, groups, shape if len(shape) == 1 or dim else shape[:1], generator=g)
    return src, index, dim, dim_size, reference(op, src, index, dim, dim_size=dim_size)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", list(SPLITS))
def test_each_thread_split_matches_the_reference_with_one_and_two_threads(package, op, split):
    src, index, dim, dim_size, expected = split_case(split, op)
    for threads in (1, 2):
        assert_same(op, with_threads(threads, lambda: package(op, src, index, dim, dim_size=dim_size)), expected)


# ---- the rules: NaN, ties, empty groups, integer mean, float16 sums ------------------------------


@pytest.mark.parametrize("op", ARG_REDUCE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_nan_propagates_with_the_first_nan_as_argindex(package, op, dtype):
    src, index = torch.tensor(NAN_SRC, dtype=dtype), torch.tensor(NAN_INDEX)
    expected_values, expected_arg = NAN_EXPECTED[op]
    expected = (torch.tensor(expected_values, dtype=dtype), torch.tensor(expected_arg))
    assert_same_with_nan(package(op, src, index, 0, dim_size=6), expected, package.name)


@pytest.mark.parametrize("op", ARG_REDUCE)
def test_nan_propagates_into_out_and_a_nan_in_out_stays(package, op):
    expected_values, expected_arg = NAN_OUT_EXPECTED[op]
    out = torch.tensor(NAN_OUT)
    got = package(op, torch.tensor(NAN_SRC), torch.tensor(NAN_INDEX), 0, out=out)
    assert got[0] is out
    assert_same_with_nan(got, (torch.tensor(expected_values), torch.tensor(expected_arg)), package.name)


@pytest.mark.parametrize("op", ARG_REDUCE)
def test_nan_in_long_columns_does_not_depend_on_the_thread_count(package, op):
    g = torch.Generator().manual_seed(11)
    n = 150_000
    src = integer_valued((n,), torch.float32, g)
    src[torch.randint(0, n, (40,), generator=g)] = float("nan")
    index = torch.randint(0, 100, (n,), generator=g)
    expected = reference(op, src, index, 0)
    assert expected[0].isnan().any() and not expected[0].isnan().all()
    for threads in (1, 2):
        assert_same_with_nan(with_threads(threads, lambda: package(op, src, index, 0)), expected, f"{threads} threads")


@pytest.mark.parametrize("op", ARG_REDUCE)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("n", "per_group"), [(6000, 1), (6000, 3), (6000, 8), (6000, 9), (48_000, 6)])
def test_min_max_with_few_elements_per_group_keep_ties_nan_infinities_and_out(package, op, dtype, n, per_group):
    # Up to 8 elements per group (on average), min/max updates are masked instead of branched on: both rules must
    # hold either way, around the switch too, and in the private copies of a split row (48,000 on 2 threads).
    g = torch.Generator().manual_seed(per_group)
    groups = n // per_group
    src = integer_valued((n,), dtype, g)  # ties within groups
    special = torch.randint(0, n, (3, n // 100), generator=g)
    src[special[0]], src[special[1]], src[special[2]] = float("nan"), float("inf"), -float("inf")
    index = torch.randint(0, groups, (n,), generator=g)
    expected = reference(op, src, index, 0, dim_size=groups + 2)  # two groups nothing lands in
    assert_same_with_nan(with_threads(2, lambda: package(op, src, index, 0, dim_size=groups + 2)), expected, "fresh")
    start = integer_valued((groups + 2,), dtype, g)
    start[::7] = float("nan")
    out = start.clone()
    expected = reference(op, src, index, 0, out=start)
    assert_same_with_nan(with_threads(2, lambda: package(op, src, index, 0, out=out)), expected, "into out")


def test_first_position_wins_a_tie_empty_groups_are_zero_and_infinities_are_kept(package):
    src, index = torch.tensor([3.0, 1.0, 3.0, 1.0, 2.0]), torch.tensor([0, 0, 0, 0, 2])
    assert [t.tolist() for t in package("max", src, index, dim_size=4)] == [[3.0, 0.0, 2.0, 0.0], [0, 5, 4, 5]]
    assert [t.tolist() for t in package("min", src, index, dim_size=4)] == [[1.0, 0.0, 2.0, 0.0], [1, 5, 4, 5]]
    infinite = package("min", torch.tensor([float("inf"), -float("inf")]), torch.tensor([0, 1]))
    assert [t.tolist() for t in infinite] == [[float("inf"), -float("inf")], [0, 1]]


def test_integer_mean_rounds_down(package):
    assert package("mean", torch.tensor([-3, -4, 5, 2]), torch.tensor([0, 0, 1, 1])).tolist() == [-4, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_mean_returns_groups_of_no_or_one_element_exactly(package, dtype):
    # The kernels divide every group by max(count, 1), without a branch: a group of 0 or 1 elements must come
    # back as it was, -0.0 (which only a given out can hold: a fresh group starts at +0.0), infinities and NaN
    # included; groups of 2 and 3 must be divided (by a division: x * (1 / 3) is not x / 3).
    special = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), float("nan"), 1.5], dtype=dtype)
    start = torch.cat([special, special, special, special])  # groups 0-5 get nothing, 6-11 one, 12-17 two, 18-23 three
    index = torch.cat([torch.arange(6, 12), torch.arange(12, 18), torch.arange(12, 18), torch.arange(18, 24).repeat(3)])
    src = torch.cat([special, -special, special, torch.tensor([1.0, 2.0, 5.0, 7.0, 10.0, 11.0], dtype=dtype).repeat(3)])
    for out in (start.clone(), None):
        got = package("mean", src, index, 0, out=out, dim_size=24)
        expected = reference("mean", src, index, 0, out=None if out is None else start, dim_size=24)
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(got.signbit(), expected.signbit()), (got, expected)


def test_mean_of_an_empty_group_divides_by_one_as_the_reference_does(package):
    # A division by 1 quiets a signalling NaN (bits 0x7f800001 -> 0x7fc00001); the reference divides by
    # count.clamp_min(1) too, so an empty group's value comes back with the reference's bits.
    start = torch.tensor([0x7F800001, 0x3FC00000], dtype=torch.int32).view(torch.float32)
    got = package("mean", torch.tensor([2.0]), torch.tensor([1]), 0, out=start.clone())
    expected = reference("mean", torch.tensor([2.0]), torch.tensor([1]), 0, out=start)
    assert got.view(torch.int32).tolist() == expected.view(torch.int32).tolist()


def test_half_precision_sums_accumulate_in_float32(package):
    # Adding 1.0 to 2048.0 in float16 gives 2048.0 again (its spacing there is 2), so a float16 accumulator
    # stops at 2048; a float32 one reaches 4097, which rounds to 4096 on the way out.
    src = torch.ones(4097, dtype=torch.float16)
    assert package("sum", src, torch.zeros(4097, dtype=torch.long)).item() == 4096.0


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32], ids=str)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_small_integer_sums_of_long_runs_wrap_as_adding_one_at_a_time_does(package, op, dtype):
    # A sorted index makes runs that the CPU loop sums in eight partial sums; for int8 GCC 12 at -O3
    # vectorized those wrongly (16 values of 100 summed to 32 instead of 1600 mod 256 = 64). Every run length
    # from 16 to 79, and one of 2048, against the reference (index_add_ and a count, which add one value at a
    # time and wrap the same way).
    generator = torch.Generator().manual_seed(3)
    for length in [*range(16, 80), 2048]:
        src = torch.randint(0, 100, (length,), generator=generator).to(dtype)
        index = torch.zeros(length, dtype=torch.long)
        expected = reference(op, src, index, 0, None, 1)
        got = package(op, src, index, 0, None, 1)
        assert torch.equal(got, expected), f"run of {length} {dtype}: got {got.item()}, expected {expected.item()}"


def runs_and_scatter(length, groups, g):
    """An index of long runs with stretches of scattered values between them, in one chunk of the CPU loop
    whose ends are close (so the loop tries runs first and has to give up part way)."""
    index = torch.arange(length) * groups // length
    for start in range(100, length - 100, 700):
        index[start : start + 60] = torch.randint(0, groups, (60,), generator=g)
    return index


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("columns", [1, 15, 16, 17, 64, 100])
def test_runs_of_rows_and_scattered_stretches_match_the_reference(package, op, columns):
    # Runs of equal index values are folded as a whole (1-D: a run at a time; [N, C]: a block of columns at a time
    # over a run of rows, 64 float32 columns or 16 of 8-byte sums, then blocks of 16, the columns left over a row at
    # a time); stretches of scattered values go one at a time. Integer values: every order sums them exactly.
    # Both, over several chunks of the loops, with 1 and 2 threads (40,000 elements or more: both thread counts
    # split the work).
    g = torch.Generator().manual_seed(columns)
    rows = max(2048, 40_000 // columns)
    index = runs_and_scatter(rows, 6, g)
    shape = (rows,) if columns == 1 else (rows, columns)
    for dtype in (torch.float64, torch.float32, torch.int8):
        src = integer_valued(shape, dtype, g) * (12 if dtype == torch.int8 else 1)  # int8 sums wrap
        expected = reference(op, src, index, 0, None, 7)
        for threads in (1, 2):
            assert_same(op, with_threads(threads, lambda: package(op, src, index, 0, None, 7)), expected)


@pytest.mark.parametrize("columns", [1, 16, 20])
def test_every_run_length_up_to_70_ends_its_runs_where_they_end(package, columns):
    # Runs of every length 1..70 put a run's end at every offset of the blocks that run_end compares at once
    # (an off-by-one there, found by review, passed every other test).
    src = torch.arange(4096 * columns).remainder(7).double().reshape(4096, columns).squeeze(1)
    for length in range(1, 71):
        index = (torch.arange(4096) // length) % 3
        for op in OPS:
            assert_same(op, package(op, src, index, 0, None, 3), reference(op, src, index, 0, None, 3))


@pytest.mark.parametrize("columns", [1, 64])
@pytest.mark.parametrize("bad", [-1, 7])
def test_an_out_of_range_run_between_in_range_ends_is_named_at_its_first_position(package, columns, bad):
    # The chunk's first and last values are in range and close, so the loop folds it run by run: each run's
    # value is checked, and the first bad position is named.
    index = torch.zeros(4096, dtype=torch.long)
    index[1000:1100] = bad
    src = torch.ones((4096,) if columns == 1 else (4096, columns))
    for op in OPS:
        with pytest.raises(RuntimeError, match=rf"index value {bad} at position 1000 along dim is out of range"):
            with_threads(1, lambda: package(op, src, index, 0, None, 7))


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("bad", ["past the last group", "negative"])
def test_an_out_of_range_index_is_named_at_its_position_in_each_thread_split(package, split, bad):
    src, index, dim, dim_size, _ = split_case(split, "sum")
    index = index.clone()
    position = index.shape[dim] * 3 // 4
    groups = dim_size or int(index.max()) + 1
    value = groups if bad == "past the last group" else -1
    index.select(dim, position).fill_(value)  # every entry of that position
    for op in OPS:
        with pytest.raises(
            RuntimeError, match=rf"index value {value} at position {position} along dim is out of range"
        ):
            with_threads(2, lambda: package(op, src, index, dim, None, groups))


# Outputs too large to copy per thread, with one index value per row (wide rows: split by groups; narrow: one task)
# or a full index (split by columns), on 2 and 3 threads: with 3, two outer rows are split by groups too.
LARGE_OUTPUTS = {
    "[N, 40] along 0": ((4_000, 40), 0, (4_000,)),
    "[2, N, 40] along 1": ((2, 4_000, 40), 1, (4_000,)),
    "[N, 40] along 0, a full index": ((4_000, 40), 0, (4_000, 40)),
    "[N, 4] along 0": ((20_000, 4), 0, (20_000,)),
}


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("case", list(LARGE_OUTPUTS))
def test_outputs_too_large_to_copy_per_thread_match_the_reference_fresh_and_into_out(package, case, threads):
    shape, dim, index_shape = LARGE_OUTPUTS[case]
    g = torch.Generator().manual_seed(5)
    groups = shape[dim] * 3 // 4
    src = integer_valued(shape, torch.float32, g)
    index = torch.randint(0, groups, index_shape, generator=g)
    out_shape = list(shape)
    out_shape[dim] = groups
    start = integer_valued(out_shape, torch.float32, g)
    for op in OPS:
        expected = reference(op, src, index, dim, dim_size=groups)
        assert_same(op, with_threads(threads, lambda: package(op, src, index, dim, dim_size=groups)), expected)
        out = start.clone()
        expected = reference(op, src, index, dim, out=start)
        assert_same(op, with_threads(threads, lambda: package(op, src, index, dim, out=out)), expected)


# ---- out= and the accumulate overloads -----------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_out_is_reduced_into_written_and_returned(package, op):
    g = torch.Generator().manual_seed(2)
    src, index = integer_valued((6, 4), torch.float32, g), torch.randint(0, 3, (6,), generator=g)
    start = integer_valued((3, 4), torch.float32, g)
    out = start.clone()
    got = package(op, src, index, 0, out=out)
    assert_same(op, got, reference(op, src, index, 0, out=start))
    assert values(op, got) is out


@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_out_is_written_in_place(package, op):
    g = torch.Generator().manual_seed(3)
    src, index = integer_valued((4, 6), torch.float64, g), torch.randint(0, 3, (4, 6), generator=g)
    start = integer_valued((3, 4), torch.float64, g).t()  # shape (4, 3), not contiguous
    out = start.clone().t().contiguous().t()
    assert not out.is_contiguous()
    got = package(op, src, index, 1, out=out)
    assert_same(op, got, reference(op, src, index, 1, out=start))
    assert values(op, got) is out


@pytest.mark.parametrize("op", OPS)
def test_schemas_declare_what_is_written_and_returned(package, op):
    packet = getattr(package.ops, f"scatter_{op}")
    functional, accumulate = packet.default._schema, packet.accumulate._schema
    assert not functional.is_mutable
    assert [a.name for a in accumulate.arguments if a.alias_info and a.alias_info.is_write] == ["out"]
    # accumulate returns nothing (sum, mean) or the fresh argindex (min, max), never an alias of out
    assert all(r.alias_info is None for r in accumulate.returns)
    assert len(accumulate.returns) == (1 if op in ARG_REDUCE else 0)


@pytest.mark.parametrize("op", OPS)
def test_accumulate_overload_writes_out_returns_only_fresh_tensors_and_bumps_the_version(package, op):
    src, index = (
        integer_valued((6, 3), torch.float32, torch.Generator().manual_seed(4)),
        torch.tensor([0, 2, 2, 0, 3, 0]),
    )
    out = torch.zeros(4, 3)
    before = out._version
    returned = getattr(package.ops, f"scatter_{op}").accumulate(src, index, 0, out)
    expected = reference(op, src, index, 0, out=torch.zeros(4, 3))
    if op in ARG_REDUCE:
        assert torch.equal(out, expected[0]) and torch.equal(returned, expected[1])
    else:
        assert returned is None and torch.equal(out, expected)
    assert out._version > before  # autograd sees the write


# ---- gradients -----------------------------------------------------------------------------------


def _differentiable(package, op, index, dim, dim_size=None, with_out=False):
    def f(src, *start):
        out = start[0].clone() if with_out else None  # clone: out= is written in place
        return values(op, package(op, src, index, dim, out=out, dim_size=dim_size))

    return f


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gradcheck(package, op, dim):
    g = torch.Generator().manual_seed(5)
    src = torch.randn(5, 4, dtype=torch.double, generator=g, requires_grad=True)  # distinct values: no ties
    index = torch.randint(0, 3, (5, 4), generator=g)
    assert torch.autograd.gradcheck(_differentiable(package, op, index, dim, dim_size=4), (src,))


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_with_out_and_broadcast_index(package, op):
    g = torch.Generator().manual_seed(6)
    src = torch.randn(6, 3, dtype=torch.double, generator=g, requires_grad=True)
    start = torch.randn(4, 3, dtype=torch.double, generator=g, requires_grad=True)
    index = torch.tensor([0, 2, 2, 0, 3, 0])
    assert torch.autograd.gradcheck(_differentiable(package, op, index, 0, with_out=True), (src, start))


@pytest.mark.parametrize("op", OPS)
def test_gradients_equal_the_references_for_a_non_contiguous_incoming_gradient(package, op):
    g = torch.Generator().manual_seed(7)
    src = torch.randn(8, 3, dtype=torch.double, generator=g)
    index = torch.randint(0, 4, (8,), generator=g)
    incoming = torch.randn(3, 4, dtype=torch.double, generator=g).t()  # (4, 3), not contiguous
    grads = []
    for function in (package, reference):
        x = src.clone().requires_grad_()
        values(op, function(op, x, index, 0, dim_size=4)).backward(incoming)
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_gradient_of_a_nan_group_goes_to_its_first_nan(package):
    src = torch.tensor(NAN_SRC, dtype=torch.float64, requires_grad=True)
    package("min", src, torch.tensor(NAN_INDEX), dim_size=6)[0].sum().backward()
    expected = torch.zeros(len(NAN_SRC), dtype=torch.float64)
    expected[[0, 4, 8, 9, 12]] = 1.0
    assert torch.equal(src.grad, expected)


def test_autograd_with_the_schema_defaults(package):
    x = torch.tensor([1.0, 4.0, 2.0, 3.0], requires_grad=True)
    package.ops.scatter_mean(x, torch.tensor([0, 1, 1, 0])).sum().backward()  # dim, dim_size omitted
    assert x.grad.tolist() == [0.5, 0.5, 0.5, 0.5]


@pytest.mark.parametrize("op", OPS)
def test_out_view_under_autograd_is_refused_naming_out_and_fine_without_grad(package, op):
    index = torch.tensor([0, 2, 2, 0, 3, 0])
    base = torch.zeros(3, 8).requires_grad_().mul(1)
    with pytest.raises(RuntimeError, match="out is a view of another tensor"):
        package(op, torch.randn(6, 3, requires_grad=True), index, 0, out=base.t()[::2])
    with torch.no_grad():  # nothing to record: a view is fine
        view = base.detach().t()[::2]
        assert values(op, package(op, torch.randn(6, 3, requires_grad=True), index, 0, out=view)) is view


# ---- opcheck, torch.compile, a symbolic dim_size ------------------------------------------------


def _opcheck_sample(accumulate):
    """One sample per overload, each exercising strides, autograd and a dynamic size (opcheck runs every sub-test
    on it, test_aot_dispatch_dynamic included). tests/test_opcheck_ops.py has many more for the ATen package."""
    g = torch.Generator().manual_seed(5)
    src = torch.randn(3, 6, dtype=torch.double, generator=g, requires_grad=True).t()  # (6, 3), not contiguous
    index = torch.randint(0, 4, (6, 3), generator=g)
    if not accumulate:  # (src, index, dim, dim_size)
        return src, index, -2, 4
    # (src, index, dim, out); an out that requires grad is not a leaf (it is written in place)
    return src, index, 0, torch.randn(3, 5, dtype=torch.double, generator=g, requires_grad=True).t() * 1


@pytest.mark.parametrize("overload", ["default", "accumulate"])
@pytest.mark.parametrize("op", OPS)
def test_opcheck(package, op, overload):
    operator = getattr(getattr(package.ops, f"scatter_{op}"), overload)
    results = torch.library.opcheck(operator, _opcheck_sample(overload == "accumulate"))
    assert all(result == "SUCCESS" for result in results.values()), results


def pooled(package, src, index, out):
    total = package("sum", src, index, 0, dim_size=out.size(0))
    top, argindex = package("max", src, index, 0, out=out)  # the accumulate overload, out written in place
    return total * top, argindex


def test_compile_with_dynamic_shapes_matches_eager_and_keeps_dim_size_symbolic(package):
    """Dynamo, AOTAutograd and the fake kernels (backend aot_eager: no code generation) on two sizes and group
    counts. The schemas say `SymInt? dim_size`, and nothing on the way (the ATen package's C++ autograd kernels, the
    stable package's Python ones, the fake kernels) turns the group count into a number: one graph serves both.
    (With `int? dim_size` each group count would compile again: tests/test_compile_export.py shows it.)"""
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda *args: pooled(package, *args), backend=counter, fullgraph=True, dynamic=True)
    for n, groups in ((10, 5), (17, 6)):
        g = torch.Generator().manual_seed(n)
        src, index = torch.randn(n, 3, dtype=torch.double, generator=g), torch.randint(0, groups, (n,), generator=g)
        start = torch.randn(groups, 3, dtype=torch.double, generator=g)
        results = []
        for function in (lambda *args: pooled(package, *args), compiled):
            x, out = src.clone().requires_grad_(), start.clone()
            value, argindex = function(x, index, out)
            value.pow(2).sum().backward()
            results.append((value, argindex, out, x.grad))
        torch.testing.assert_close(results[1], results[0])
    assert all("SymInt? dim_size" in str(p.default._schema) for p in (package.ops.scatter_sum, package.ops.scatter_max))
    assert counter.frame_count == 1


def test_compiled_gradients_through_the_accumulate_overloads_equal_eager(package):
    """AOTAutograd differentiates the accumulate overloads as eager autograd does: out's initial values get the
    incoming gradient masked to the groups they won (min/max) or divided by the group's count (mean), not passed
    on unchanged. (It used to be, while the write into out happened with grad mode off inside the Function.)"""

    def function(src, index, *outs):  # the outs are graph inputs that the ops write into
        return [values(op, package(op, src, index, 0, out=out)) * 2 for op, out in zip(OPS, outs)]

    g = torch.Generator().manual_seed(0)
    src, index = torch.randn(6, 3, dtype=torch.double, generator=g), torch.randint(0, 4, (6,), generator=g)
    starts = [torch.randn(4, 3, dtype=torch.double, generator=g) for _ in OPS]
    grads = []
    for f in (function, torch.compile(function, backend="aot_eager", fullgraph=True)):
        x, leaves = src.clone().requires_grad_(), [start.clone().requires_grad_() for start in starts]
        sum(result.pow(2).sum() for result in f(x, index, *[leaf.clone() for leaf in leaves])).backward()
        grads.append([x.grad] + [leaf.grad for leaf in leaves])
    torch.testing.assert_close(grads[1], grads[0])


def test_dim_size_stays_a_symbol_when_traced(package):
    """Issue 18: `SymInt? dim_size`, and no C++ code on the way that turns the symbol into a number."""

    def f(src, index, groups):
        return package("max", src, index, 0, dim_size=groups.size(0))[0] + groups.unsqueeze(1)

    src = torch.randn(6, 3, requires_grad=True)  # the Autograd kernel runs while tracing
    graph = make_fx(f, tracing_mode="symbolic")(src, torch.tensor([0, 2, 2, 0, 3, 0]), torch.zeros(4)).graph
    (call,) = [node for node in graph.nodes if node.target is package.ops.scatter_max.default]
    assert isinstance(call.args[3], torch.fx.Node), f"dim_size was traced as the constant {call.args[3]!r}"

    class Pool(torch.nn.Module):
        def forward(self, src, index, groups):
            return f(src, index, groups)

    groups = torch.export.Dim("groups")
    example = (src.detach(), torch.tensor([0, 2, 2, 0, 3, 0]), torch.zeros(4))
    exported = torch.export.export(Pool(), example, dynamic_shapes=(None, None, {0: groups}))
    (call,) = [node for node in exported.graph.nodes if node.target is package.ops.scatter_max.default]
    assert isinstance(call.args[3], torch.fx.Node), f"torch.export made dim_size the constant {call.args[3]!r}"
    bigger = (torch.randn(6, 3), torch.tensor([0, 6, 6, 1, 0, 2]), torch.zeros(7))  # 7 groups, the same program
    torch.testing.assert_close(exported.module()(*bigger), f(*bigger))


# ---- torch_scatter-style cases ----------------------------------------------------------------------
# Small worked examples in the style of torch_scatter's own tests (hand-computed expectations, checked against
# the reference too), each run for several dtypes, with out= given, on non-contiguous copies and through
# torch_scatter's `scatter(src, index, dim, out, dim_size, reduce)`.
#   1-D, dim=-1:  groups 0 <- 7 (pos 1), 2 (pos 4); 1 <- 2 (pos 0), 1 (pos 2), 9 (pos 5); 2 empty; 3 <- 8 (pos 3)
#   2-D, dim=0, a 1-D index broadcast over two features: the same groups, second feature = first + 10
#   2-D, dim=1, a full index: row 0 as above; row 1 groups 0 <- 4, 6 (pos 0, 2); 1 <- 5 (pos 1); 2 <- 3 (pos 3);
#                             3 <- 1, 0 (pos 4, 5)
# No ties within a group (gradcheck needs distinct values). Integer means round down (4.5 -> 4; 0.5 -> 0).
WORKED = {
    "1-D, dim=-1": dict(
        src=[2, 7, 1, 8, 2, 9],
        index=[1, 0, 1, 3, 0, 1],
        dim=-1,
        sum=[9, 12, 0, 8],
        mean=[4.5, 4, 0, 8],
        min=([2, 1, 0, 8], [4, 2, 6, 3]),
        max=([7, 9, 0, 8], [1, 5, 6, 3]),
    ),
    "2-D, dim=0, 1-D index broadcast": dict(
        src=[[2, 12], [7, 17], [1, 11], [8, 18], [2, 12], [9, 19]],
        index=[1, 0, 1, 3, 0, 1],
        dim=0,
        sum=[[9, 29], [12, 42], [0, 0], [8, 18]],
        mean=[[4.5, 14.5], [4, 14], [0, 0], [8, 18]],
        min=([[2, 12], [1, 11], [0, 0], [8, 18]], [[4, 4], [2, 2], [6, 6], [3, 3]]),
        max=([[7, 17], [9, 19], [0, 0], [8, 18]], [[1, 1], [5, 5], [6, 6], [3, 3]]),
    ),
    "2-D, dim=1, full index": dict(
        src=[[2, 7, 1, 8, 2, 9], [4, 5, 6, 3, 1, 0]],
        index=[[1, 0, 1, 3, 0, 1], [0, 1, 0, 2, 3, 3]],
        dim=1,
        sum=[[9, 12, 0, 8], [10, 5, 3, 1]],
        mean=[[4.5, 4, 0, 8], [5, 5, 3, 0.5]],
        min=([[2, 1, 0, 8], [4, 5, 3, 0]], [[4, 2, 6, 3], [0, 1, 3, 5]]),
        max=([[7, 9, 0, 8], [6, 5, 3, 1]], [[1, 5, 6, 3], [2, 1, 3, 4]]),
    ),
}
WORKED_DTYPES = [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]


def worked(name, op, dtype):
    """(src, index, dim, expected) of a worked example; integer dtypes floor the mean."""
    example = WORKED[name]
    src, index = torch.tensor(example["src"], dtype=dtype), torch.tensor(example["index"])
    if op in ARG_REDUCE:
        expected = (torch.tensor(example[op][0], dtype=dtype), torch.tensor(example[op][1]))
    else:
        expected = torch.tensor(example[op], dtype=torch.float64)
        expected = (expected.floor() if not dtype.is_floating_point else expected).to(dtype)
    return src, index, example["dim"], expected


@pytest.mark.parametrize("dtype", WORKED_DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", list(WORKED))
def test_torch_scatter_style_worked_examples(package, name, op, dtype):
    src, index, dim, expected = worked(name, op, dtype)
    assert_same(op, reference(op, src, index, dim), expected)  # the table itself is right
    assert_same(op, package(op, src, index, dim), expected)
    # non-contiguous copies of src and index (torch_scatter's test_non_contiguous)
    if src.dim() > 1:
        src = src.t().contiguous().t()
    if index.dim() > 1:
        index = index.t().contiguous().t()
    assert_same(op, package(op, src, index, dim), expected)
    # out given, every element -2 to start with (torch_scatter's test_out)
    start = torch.full_like(values(op, expected), -2)
    out = start.clone()
    got = package(op, src, index, dim, out=out)
    assert values(op, got) is out
    assert_same(op, got, reference(op, src, index, dim, out=start))
    if op == "sum":
        assert torch.equal(out, expected - 2)


@pytest.mark.parametrize("reduce", ["sum", "add", "mean", "min", "max"])
@pytest.mark.parametrize("name", list(WORKED))
def test_torch_scatter_style_gradcheck_through_scatter(package, name, reduce):
    src, index, dim, _ = worked(name, "sum", torch.float64)
    src = src.requires_grad_()
    # torch_scatter's positional order: (src, index, dim, out, dim_size, reduce)
    assert torch.autograd.gradcheck(package.functions.scatter, (src, index, dim, None, None, reduce))


@pytest.mark.parametrize("op", OPS)
def test_torch_scatter_style_broadcasting(package, op):
    g = torch.Generator().manual_seed(8)
    B, C, H, W = 4, 3, 8, 8
    src = torch.randn(B, C, H, W, generator=g)
    for index in (torch.randint(0, H, (H,), generator=g), torch.randint(0, H, (B, 1, H, W), generator=g)):
        got = package(op, src, index, 2, dim_size=H)
        assert values(op, got).shape == (B, C, H, W)
        torch.testing.assert_close(got, reference(op, src, index, 2, dim_size=H))


@pytest.mark.parametrize("op", OPS)
def test_torch_scatter_style_dim_size_larger_smaller_and_zero_elements(package, op):
    src, index, dim, expected = worked("2-D, dim=0, 1-D index broadcast", op, torch.float32)
    larger = package(op, src, index, dim, dim_size=6)  # two more groups, both empty
    assert values(op, larger).shape == (6, 2) and torch.equal(values(op, larger)[4:], torch.zeros(2, 2))
    assert torch.equal(values(op, larger)[:4], values(op, expected))
    with pytest.raises(RuntimeError, match=r"index value 3 at position 3 along dim is out of range: .* \[0, 3\)"):
        package(op, src, index, dim, dim_size=3)  # smaller than index.max() + 1
    x = torch.randn(0, 0, 0, 16, dtype=torch.float64, requires_grad=True)  # torch_scatter's test_zero_elements
    out = values(op, package(op, x, torch.tensor([], dtype=torch.long), 0, dim_size=0))
    out.backward(torch.randn_like(out))
    assert out.shape == (0, 0, 0, 16) and x.grad.shape == x.shape


# ---- bad input: a RuntimeError naming the argument, the same message in both packages --------------

BAD_INPUTS = {
    "float index": (
        lambda p, op: p(op, SRC, INDEX.float(), 0),
        r"index must be an integer tensor \(int64\), got dtype Float",
    ),
    "int32 index": (
        lambda p, op: p(op, SRC, INDEX.int(), 0),
        r"index must be an int64 tensor, got dtype Int \(convert",
    ),
    "index out of range": (
        lambda p, op: p(op, SRC, INDEX, 0, dim_size=3),
        r"index value 3 at position 4 along dim is out of range",
    ),
    "negative index": (
        lambda p, op: p(op, SRC, torch.tensor([0, -1, 2, 0, 3, 0]), 0),
        "index contains the negative value -1",
    ),
    "negative index with dim_size": (
        lambda p, op: p(op, SRC, torch.tensor([0, -1, 2, 0, 3, 0]), 0, dim_size=4),
        r"index value -1 at position 1 along dim is out of range",
    ),
    "index at int64 max": (
        lambda p, op: p(op, SRC, torch.tensor([0, 1, 2, 2**63 - 1, 0, 0]), 0),
        r"index contains the value 9223372036854775807, so dim_size = index.max\(\) \+ 1 cannot be",
    ),
    "huge index without dim_size": (
        lambda p, op: p(op, SRC, torch.tensor([0, 1, 2, 2**40, 0, 0]), 0),
        r"index.max\(\) is 1099511627776, .*pass dim_size.*more than this machine",
    ),
    "huge dim_size": (
        lambda p, op: p(op, SRC, INDEX, 0, dim_size=2**62),
        r"dim_size is 4611686018427387904: the result would have shape",
    ),
    "shape mismatch": (
        lambda p, op: p(op, SRC, torch.tensor([0, 1, 2]), 0),
        r"index of shape \[3\] cannot be broadcast against src of shape \[6, 3\] along dim 0 \(lined up as \[3, 1\]",
    ),
    "index with more dims": (
        lambda p, op: p(op, SRC, INDEX.view(6, 1, 1), 0),
        "index has 3 dimensions but src has only 2",
    ),
    "index on another device": (lambda p, op: p(op, SRC, INDEX.to("meta"), 0), "index is on meta but src is on cpu"),
    "out on another device": (
        lambda p, op: p(op, SRC, INDEX, 0, out=torch.zeros(4, 3, device="meta")),
        "out is on meta but src is on cpu",
    ),
    "out of wrong shape": (
        lambda p, op: p(op, SRC, INDEX, 0, out=torch.zeros(4, 4)),
        r"out has shape \[4, 4\] but must have src's shape \[6, 3\] except at dim 0",
    ),
    "out of wrong dtype": (
        lambda p, op: p(op, SRC, INDEX, 0, out=torch.zeros(4, 3, dtype=torch.double)),
        "out has dtype Double but src has dtype Float",
    ),
    "out with elements sharing memory": (
        lambda p, op: p(op, SRC, INDEX, 0, out=torch.zeros(1, 3).expand(4, 3)),
        r"out has shape \[4, 3\] and strides \[0, 1\]: some of its elements share",
    ),
    "out sharing memory with src": (lambda p, op: _out_is_src(p, op), "out shares memory with src"),
    "out a leaf that requires grad": (
        lambda p, op: p(op, SRC, INDEX, 0, out=torch.zeros(4, 3, requires_grad=True)),
        "out is a leaf Variable that requires grad",
    ),
    "dim out of range": (
        lambda p, op: p(op, SRC, INDEX, 2),
        r"dim must be in \[-2, 2\) for src of shape \[6, 3\], got 2",
    ),
    "dim_size disagrees with out": (
        lambda p, op: p(op, SRC, INDEX, 0, out=torch.zeros(4, 3), dim_size=5),
        r"dim_size is 5 but out.size\(0\) is 4",
    ),
    "negative dim_size": (lambda p, op: p(op, SRC, INDEX, 0, dim_size=-1), "dim_size must be >= 0, got -1"),
    "0-d src": (lambda p, op: p(op, torch.tensor(1.0), torch.tensor(0), 0), "src must have at least one dimension"),
    "bool src": (lambda p, op: p(op, SRC > 0, INDEX, 0), "src has dtype Bool; supported: uint8"),
    "src is None": (lambda p, op: p(op, None, INDEX), r"src must be a tensor, got None \(an undefined tensor\)"),
    "index is None": (lambda p, op: p(op, SRC, None, 0), r"index must be a tensor, got None \(an undefined tensor\)"),
    "meta tensors without dim_size": (
        lambda p, op: p(op, SRC.to("meta"), INDEX.to("meta"), 0),
        r"dim_size=None reads index.max\(\)",
    ),
}


def _out_is_src(package, op):
    src = torch.randn(6, 3)
    return package(op, src, INDEX, 0, out=src)


def message(error) -> str:
    """The error's message as the user reads it, without STD_TORCH_CHECK's "function, file:line, " prefix."""
    return scatter_stable.error_text(error).splitlines()[0]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_raises_the_same_runtime_error_in_both_packages(packages, op, name):
    call, pattern = BAD_INPUTS[name]
    messages = []
    for package in packages:
        with pytest.raises(RuntimeError, match=pattern) as error:
            call(package, op)
        messages.append(message(error.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("reduce", ["prod", "Sum", None])
def test_unknown_reduce_is_a_value_error_naming_reduce(package, reduce):
    with pytest.raises(ValueError, match=r"reduce must be 'sum', 'mean', 'min' or 'max', got"):
        package.functions.scatter(SRC, INDEX, 0, reduce=reduce)


def test_out_that_is_not_a_tensor_is_a_type_error_naming_out(package):
    with pytest.raises(TypeError, match="out must be a tensor or None, got int"):
        package("sum", SRC, INDEX, 0, out=3, dim_size=4)
