"""The wb_scatter ops (csrc/scatter) against a pure-PyTorch reference built on torch's native ops."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from scatter_common import (
    INDEX,
    NAN,
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

from workbook.ops import scatter as S


@pytest.fixture(scope="module", autouse=True)
def ops():
    return S.load()


def ours(op, *args, **kwargs):
    return getattr(S, f"scatter_{op}")(*args, **kwargs)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_matches_reference_over_random_shapes_dims_and_dtypes(p):
    g = torch.Generator().manual_seed(p["seed"])
    src = integer_valued(p["shape"], p["dtype"], g)
    index = torch.randint(0, p["groups"], p["index_shape"], generator=g)
    got = ours(p["op"], src, index, p["dim"], dim_size=p["dim_size"])
    assert_same(p["op"], got, reference(p["op"], src, index, p["dim"], dim_size=p["dim_size"]))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16])
@pytest.mark.parametrize("n", [100_000, 300_001])
def test_long_columns_split_across_threads(op, dtype, n):
    """A 1-D src takes the path where threads split one column and merge private buffers."""
    g = torch.Generator().manual_seed(n)
    src = integer_valued((n,), dtype, g)
    index = torch.randint(0, 50, (n,), generator=g)  # many ties: merging must keep the first one
    assert_same(op, ours(op, src, index, 0), reference(op, src, index, 0))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", list(SPLITS))
def test_each_thread_split_matches_the_reference_and_one_thread(op, split):
    shape, dim, groups, dim_size = SPLITS[split]
    g = torch.Generator().manual_seed(1)
    src = integer_valued(shape, torch.float32, g)
    index = torch.randint(0, groups, shape if len(shape) == 1 or dim else shape[:1], generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = ours(op, src, index, dim, dim_size=dim_size)
    finally:
        torch.set_num_threads(threads)
    expected = reference(op, src, index, dim, dim_size=dim_size)
    assert_same(op, single, expected)
    assert_same(op, ours(op, src, index, dim, dim_size=dim_size), expected)


def test_first_position_wins_a_tie_and_empty_groups_are_zero_with_argindex_n():
    src = torch.tensor([3.0, 1.0, 3.0, 1.0, 2.0])
    index = torch.tensor([0, 0, 0, 0, 2])
    values, arg = S.scatter_max(src, index, dim_size=4)
    assert values.tolist() == [3.0, 0.0, 2.0, 0.0] and arg.tolist() == [0, 5, 4, 5]
    values, arg = S.scatter_min(src, index, dim_size=4)
    assert values.tolist() == [1.0, 0.0, 2.0, 0.0] and arg.tolist() == [1, 5, 4, 5]


def test_infinite_values_are_kept_not_mistaken_for_empty_groups():
    src = torch.tensor([float("inf"), -float("inf")])
    values, arg = S.scatter_min(src, torch.tensor([0, 1]))
    assert values.tolist() == [float("inf"), -float("inf")] and arg.tolist() == [0, 1]


@pytest.mark.parametrize("op", ["min", "max"])
def test_nan_result_does_not_depend_on_the_thread_count(op):
    """One group, n = 200000 (two slices with two threads): the NaN opens the second slice.

    Before NaN propagated, two threads returned 5 (argindex 0) for min and one thread returned 1.
    """
    n = 200_000
    src = torch.full((n,), 7.0)
    src[0], src[100_000], src[199_995] = 5.0, NAN, 1.0
    if op == "max":
        src = -src
    index = torch.zeros(n, dtype=torch.long)
    one = with_threads(1, lambda: ours(op, src, index, 0))
    two = with_threads(2, lambda: ours(op, src, index, 0))
    assert_same_with_nan(two, one, "2 threads vs 1 thread")
    assert one[0].isnan().all() and one[1].tolist() == [100_000]
    assert_same_with_nan(one, reference(op, src, index, 0), "vs the reference")


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_nan_in_long_columns_matches_the_reference_with_one_and_two_threads(op, dtype):
    g = torch.Generator().manual_seed(11)
    n = 150_000
    src = integer_valued((n,), dtype, g)
    src[torch.randint(0, n, (40,), generator=g)] = NAN  # some groups get a NaN, most do not
    index = torch.randint(0, 100, (n,), generator=g)
    expected = reference(op, src, index, 0)
    assert expected[0].isnan().any() and not expected[0].isnan().all()
    for threads in (1, 2):
        assert_same_with_nan(with_threads(threads, lambda: ours(op, src, index, 0)), expected, f"{threads} threads")


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_nan_propagates_with_the_first_nan_as_argindex(op, dtype):
    src, index = torch.tensor(NAN_SRC, dtype=dtype), torch.tensor(NAN_INDEX)
    values, arg = NAN_EXPECTED[op]
    expected = (torch.tensor(values, dtype=dtype), torch.tensor(arg))
    assert_same_with_nan(ours(op, src, index, 0, dim_size=6), expected, "ours")
    assert_same_with_nan(reference(op, src, index, 0, dim_size=6), expected, "reference")
    # The same groups along dim 1 of a [2, 14] src, the second row reversed (the first NaN changes).
    src2 = torch.stack([src, src.flip(0)])
    index2 = torch.tensor([NAN_INDEX, NAN_INDEX[::-1]])
    assert_same_with_nan(ours(op, src2, index2, 1, dim_size=6), reference(op, src2, index2, 1, dim_size=6), "2-D")


@pytest.mark.parametrize("op", ["min", "max"])
def test_nan_propagates_into_out_and_a_nan_in_out_stays(op):
    src, index = torch.tensor(NAN_SRC), torch.tensor(NAN_INDEX)
    values, arg = NAN_OUT_EXPECTED[op]
    expected = (torch.tensor(values), torch.tensor(arg))
    out = torch.tensor(NAN_OUT)
    got = ours(op, src, index, 0, out=out)
    assert got[0] is out
    assert_same_with_nan(got, expected, "ours")
    assert_same_with_nan(reference(op, src, index, 0, out=torch.tensor(NAN_OUT)), expected, "reference")


def test_gradient_of_a_nan_group_goes_to_its_first_nan():
    src = torch.tensor(NAN_SRC, dtype=torch.float64, requires_grad=True)
    values, arg = S.scatter_min(src, torch.tensor(NAN_INDEX), dim_size=6)
    values.sum().backward()
    expected = torch.zeros(len(NAN_SRC), dtype=torch.float64)
    expected[[0, 4, 8, 9, 12]] = 1.0
    assert torch.equal(src.grad, expected)


def test_integer_mean_rounds_down():
    src = torch.tensor([-3, -4, 5, 2])
    assert S.scatter_mean(src, torch.tensor([0, 0, 1, 1])).tolist() == [-4, 3]


@pytest.mark.parametrize("op", OPS)
def test_out_is_reduced_into_written_and_returned(op):
    g = torch.Generator().manual_seed(2)
    src = integer_valued((6, 4), torch.float32, g)
    index = torch.randint(0, 3, (6,), generator=g)
    start = integer_valued((3, 4), torch.float32, g)
    out = start.clone()
    got = ours(op, src, index, 0, out=out)
    expected = reference(op, src, index, 0, out=start)
    assert_same(op, got, expected)
    result = got[0] if op in ("min", "max") else got
    assert result.data_ptr() == out.data_ptr() and torch.equal(out, result)


@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_out_is_written_in_place(op):
    g = torch.Generator().manual_seed(3)
    src = integer_valued((4, 6), torch.float64, g)
    index = torch.randint(0, 3, (4, 6), generator=g)
    start = integer_valued((3, 4), torch.float64, g).t()  # shape (4, 3), not contiguous
    out = start.clone().t().contiguous().t()
    assert not out.is_contiguous()
    got = ours(op, src, index, 1, out=out)
    assert_same(op, got, reference(op, src, index, 1, out=start))
    assert torch.equal(out, got[0] if op in ("min", "max") else got)


@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_src_and_index(op):
    g = torch.Generator().manual_seed(4)
    src = integer_valued((7, 5), torch.float32, g).t()[:, ::2]  # (5, 4) with odd strides
    index = torch.randint(0, 4, (8, 5), generator=g).t()[:, ::2]
    assert not src.is_contiguous() and not index.is_contiguous()
    assert_same(op, ours(op, src, index, 1), reference(op, src.contiguous(), index.contiguous(), 1))


@pytest.mark.parametrize("op", OPS)
def test_dim_size_adds_empty_groups(op):
    src = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    index = torch.tensor([1, 1])
    got = ours(op, src, index, 0, dim_size=4)
    result = got[0] if op in ("min", "max") else got
    assert result.shape == (4, 2) and torch.equal(result[[0, 2, 3]], torch.zeros(3, 2))
    if op in ("min", "max"):
        assert got[1][0].tolist() == [2, 2]


@pytest.mark.parametrize("op", OPS)
def test_empty_inputs(op):
    src = torch.zeros(0, 3)
    index = torch.zeros(0, dtype=torch.long)
    got = ours(op, src, index, 0)
    assert (got[0] if op in ("min", "max") else got).shape == (0, 3)
    got = ours(op, src, index, 0, dim_size=2)
    result = got[0] if op in ("min", "max") else got
    assert torch.equal(result, torch.zeros(2, 3))
    if op in ("min", "max"):
        assert torch.equal(got[1], torch.zeros(2, 3, dtype=torch.long))  # src.size(0) == 0
    # an empty trailing dimension: the broadcast index is empty too, so (as in torch_scatter)
    # dim_size comes out 0 unless it is given
    src = torch.zeros(4, 0)
    got = ours(op, src, torch.tensor([0, 1, 1, 0]), 0)
    assert (got[0] if op in ("min", "max") else got).shape == (0, 0)
    got = ours(op, src, torch.tensor([0, 1, 1, 0]), 0, dim_size=2)
    assert (got[0] if op in ("min", "max") else got).shape == (2, 0)


def _gradcheck_fn(op, index, dim, dim_size=None, with_out=False):
    def f(src, *start):
        out = start[0].clone() if with_out else None  # clone: out= is written in place
        result = ours(op, src, index, dim, out=out, dim_size=dim_size)
        return result[0] if op in ("min", "max") else result

    return f


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gradcheck(op, dim):
    g = torch.Generator().manual_seed(5)
    src = torch.randn(5, 4, dtype=torch.double, generator=g, requires_grad=True)  # distinct values: no ties
    index = torch.randint(0, 3, (5, 4), generator=g)
    assert torch.autograd.gradcheck(_gradcheck_fn(op, index, dim, dim_size=4), (src,))


@pytest.mark.parametrize("op", OPS)
def test_gradcheck_with_out_and_broadcast_index(op):
    g = torch.Generator().manual_seed(6)
    src = torch.randn(6, 3, dtype=torch.double, generator=g, requires_grad=True)
    start = torch.randn(4, 3, dtype=torch.double, generator=g, requires_grad=True)
    index = torch.tensor([0, 2, 2, 0, 3, 0])
    assert torch.autograd.gradcheck(_gradcheck_fn(op, index, 0, with_out=True), (src, start))


def test_gradients_match_the_reference_ops():
    g = torch.Generator().manual_seed(7)
    for op in OPS:
        a = torch.randn(8, 3, dtype=torch.double, generator=g, requires_grad=True)
        b = a.detach().clone().requires_grad_()
        index = torch.randint(0, 4, (8,), generator=g)
        weight = torch.randn(4, 3, dtype=torch.double, generator=g)
        for x, fn in ((a, ours), (b, reference)):
            result = fn(op, x, index, 0, dim_size=4)
            ((result[0] if op in ("min", "max") else result) * weight).sum().backward()
        torch.testing.assert_close(a.grad, b.grad)


def test_index_and_dim_size_are_not_differentiable_and_out_leaf_is_refused():
    src = torch.randn(3, requires_grad=True)
    out = torch.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        S.scatter_sum(src, torch.tensor([0, 1, 1]), out=out)


BAD_INPUTS = {
    "float index": (lambda op: ours(op, SRC, INDEX.float(), 0), "index must be an integer tensor"),
    "int32 index": (lambda op: ours(op, SRC, INDEX.int(), 0), "index must be an int64 tensor"),
    "index out of range": (lambda op: ours(op, SRC, INDEX, 0, dim_size=3), r"index value 3 .* out of range"),
    "negative index": (
        lambda op: ours(op, SRC, torch.tensor([0, -1, 2, 0, 3, 0]), 0),
        "index contains the negative value -1",
    ),
    "negative index with dim_size": (
        lambda op: ours(op, SRC, torch.tensor([0, -1, 2, 0, 3, 0]), 0, dim_size=4),
        r"index value -1 .* out of range",
    ),
    "shape mismatch": (
        lambda op: ours(op, SRC, torch.tensor([0, 1, 2]), 0),
        "index of shape .* cannot be broadcast against src",
    ),
    "index with more dims": (lambda op: ours(op, SRC, INDEX.view(6, 1, 1), 0), "index has 3 dimensions"),
    "wrong device (index)": (lambda op: ours(op, SRC, INDEX.to("meta"), 0), "index is on meta but src is on cpu"),
    "wrong device (out)": (lambda op: ours(op, SRC, INDEX, 0, out=torch.zeros(4, 3, device="meta")), "out is on meta"),
    "out of wrong shape": (lambda op: ours(op, SRC, INDEX, 0, out=torch.zeros(4, 4)), "out has shape"),
    "out of wrong dtype": (
        lambda op: ours(op, SRC, INDEX, 0, out=torch.zeros(4, 3, dtype=torch.double)),
        "out has dtype",
    ),
    "dim out of range": (lambda op: ours(op, SRC, INDEX, 2), r"dim must be in \[-2, 2\)"),
    "dim_size disagrees with out": (
        lambda op: ours(op, SRC, INDEX, 0, out=torch.zeros(4, 3), dim_size=5),
        "dim_size is 5",
    ),
    "negative dim_size": (lambda op: ours(op, SRC, INDEX, 0, dim_size=-1), "dim_size must be >= 0"),
    "0-d src": (lambda op: ours(op, torch.tensor(1.0), torch.tensor(0), 0), "src must have at least one dimension"),
    "bool src": (lambda op: ours(op, SRC > 0, INDEX, 0), "src has dtype Bool"),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_raises_runtime_error_naming_the_argument(op, case):
    call, message = BAD_INPUTS[case]
    with pytest.raises(RuntimeError, match=message):
        call(op)


@pytest.mark.parametrize("op", OPS)
def test_schemas_declare_what_is_written_and_returned(ops, op):
    functional = getattr(ops, f"scatter_{op}").default._schema
    accumulate = getattr(ops, f"scatter_{op}").accumulate._schema
    assert not functional.is_mutable
    assert [a.name for a in accumulate.arguments if a.alias_info and a.alias_info.is_write] == ["out"]
    # accumulate returns nothing (sum, mean) or the fresh argindex (min, max), never an alias of out
    assert all(r.alias_info is None for r in accumulate.returns)
    assert len(accumulate.returns) == (1 if op in ("min", "max") else 0)


@pytest.mark.parametrize("op", OPS)
def test_accumulate_overload_writes_out_and_returns_only_fresh_tensors(ops, op):
    out = torch.zeros(4, 3)
    before = out._version
    returned = getattr(ops, f"scatter_{op}").accumulate(SRC, INDEX, 0, out)
    expected = reference(op, SRC, INDEX, 0, out=torch.zeros(4, 3))
    if op in ("min", "max"):
        assert torch.equal(out, expected[0]) and torch.equal(returned, expected[1])
    else:
        assert returned is None and torch.allclose(out, expected)
    assert out._version > before  # autograd sees the write


def test_scatter_with_reduce_name():
    assert torch.equal(S.scatter(SRC, INDEX, 0, reduce="max"), S.reference_max(SRC, INDEX, 0)[0])


# ---- issue 12: messages the fuzz test (tests/test_fuzz.py) found or was asked to fix ----------------


def test_none_src_or_index_is_named():
    with pytest.raises(RuntimeError, match="src must be a tensor, got None"):
        S.scatter_sum(None, INDEX)
    with pytest.raises(RuntimeError, match="index must be a tensor, got None"):
        S.scatter_max(SRC, None, 0)


def test_index_at_int64_max_names_index_and_dim_size():
    with pytest.raises(RuntimeError, match=r"index contains the value 9223372036854775807, so dim_size = .* cannot be"):
        S.scatter_sum(SRC, torch.tensor([0, 1, 2, 2**63 - 1, 0, 0]), 0)


@pytest.mark.parametrize("op", OPS)
def test_huge_index_without_dim_size_is_refused_before_allocating(op):
    # 2**40 groups of 3 floats: 13 TB. The message comes from the check, not from the allocator.
    with pytest.raises(RuntimeError, match=r"index.max\(\) is 1099511627776, .*pass dim_size.*more than this machine"):
        ours(op, SRC, torch.tensor([0, 1, 2, 2**40, 0, 0]), 0)


def test_huge_dim_size_is_named():
    with pytest.raises(RuntimeError, match=r"dim_size is 4611686018427387904: the result would have shape"):
        S.scatter_sum(SRC, INDEX, 0, dim_size=2**62)


@pytest.mark.parametrize("reduce", ["prod", "Sum", None, ["max"]])
@pytest.mark.parametrize("wrapper", [S.scatter, S._python_half.scatter], ids=["workbook.ops.scatter", "wb_scatter.ops"])
def test_unknown_reduce_is_a_value_error_naming_reduce(wrapper, reduce):
    with pytest.raises(ValueError, match=r"reduce must be 'sum', 'mean', 'min' or 'max', got"):
        wrapper(SRC, INDEX, 0, reduce=reduce)


def test_out_that_is_not_a_tensor_is_named():
    with pytest.raises(TypeError, match="out must be a tensor or None, got int"):
        S.scatter_sum(SRC, INDEX, 0, out=3, dim_size=4)


@pytest.mark.parametrize("op", OPS)
def test_out_with_elements_sharing_memory_is_refused(op):
    with pytest.raises(RuntimeError, match="out has shape .* share one memory location"):
        ours(op, SRC, INDEX, 0, out=torch.zeros(1, 3).expand(4, 3))


@pytest.mark.parametrize("op", OPS)
def test_out_sharing_memory_with_src_is_refused(op):
    src = torch.randn(6, 3)
    with pytest.raises(RuntimeError, match="out shares memory with src"):
        ours(op, src, INDEX, 0, out=src)


@pytest.mark.parametrize("op", OPS)
def test_out_view_under_autograd_is_refused_naming_out(op):
    # Without the check: sum/mean fail inside torch's backward (an internal assert), min/max with a
    # message about "a view of another Tensor" that does not say which argument.
    base = torch.zeros(3, 8).requires_grad_().mul(1)
    with pytest.raises(RuntimeError, match="out is a view of another tensor"):
        ours(op, torch.randn(6, 3, requires_grad=True), INDEX, 0, out=base.t()[::2])
    with torch.no_grad():  # nothing to record: a view is fine
        ours(op, torch.randn(6, 3, requires_grad=True), INDEX, 0, out=base.detach().t()[::2])


def test_meta_tensors_without_dim_size_name_dim_size():
    with pytest.raises(RuntimeError, match="dim_size=None reads index.max"):
        S.scatter_sum(SRC.to("meta"), INDEX.to("meta"), 0)
    assert S.scatter_sum(SRC.to("meta"), INDEX.to("meta"), 0, dim_size=5).shape == (5, 3)
