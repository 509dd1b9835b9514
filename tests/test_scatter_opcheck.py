"""The wb_scatter ops under torch.library.opcheck and torch.compile.

opcheck's sub-tests: test_schema and test_faketensor (the schema tells the truth about mutation and
aliasing; the fake kernel gives the real result's shapes, strides and dtypes) run on every sample for
every op; they are cheap, and the samples differ in what those check (dtypes, layouts, empty tensors,
dim_size given or not). The costly ones, test_autograd_registration and test_aot_dispatch_dynamic
(AOTAutograd traces forward and backward with dynamic shapes), run on each sample for one op, in turn,
so that every op meets several samples; tests/test_scatter_packages.py runs them all on one sample
per op and overload, in both packages.
"""

import pytest
import torch

from workbook.ops import scatter

OPS = ["scatter_sum", "scatter_mean", "scatter_min", "scatter_max"]


@pytest.fixture(scope="module", autouse=True)
def ops():
    return scatter.load()


def _random(shape, dtype, seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


def _index(shape, groups, seed):
    return torch.randint(0, groups, shape, generator=torch.Generator().manual_seed(seed))


# (src, index, dim, dim_size) for the functional overloads.
FUNCTIONAL = {
    "1-D index broadcast, dim_size=None": lambda: (
        _random((6, 3), torch.float32, 1, True),
        _index((6,), 4, 2),
        0,
        None,
    ),
    "1-D index broadcast, dim_size given": lambda: (_random((6, 3), torch.float32, 1, True), _index((6,), 4, 2), 0, 5),
    "non-contiguous src, 2-D index": lambda: (_random((3, 6), torch.float64, 3, True).t(), _index((6, 3), 4, 4), 0, 4),
    "leading-dims index, dim=-2": lambda: (_random((2, 5, 3), torch.float64, 5, True), _index((2, 5), 3, 6), -2, None),
    "empty src, dim_size given": lambda: (_random((0, 3), torch.float32, 7, True), _index((0,), 1, 8), 0, 4),
    "empty src, dim_size=None": lambda: (_random((0, 3), torch.float32, 7, True), _index((0,), 1, 8), 0, None),
    "int32": lambda: (_random((6, 3), torch.int32, 9), _index((6,), 4, 10), 0, None),
    "int64, dim=1": lambda: (_random((3, 6), torch.int64, 9), _index((3, 6), 4, 10), 1, 4),
    "float16": lambda: (_random((6, 3), torch.float16, 11, True), _index((6,), 4, 12), 0, None),
    "bfloat16": lambda: (_random((6, 3), torch.bfloat16, 11, True), _index((6,), 4, 12), 0, 4),
}

# (src, index, dim, out) for the accumulate overloads. An out that requires grad must not be a
# leaf (it is written in place), so it is the result of an op on a leaf.
ACCUMULATE = {
    "float32, src requires grad": lambda: (
        _random((6, 3), torch.float32, 1, True),
        _index((6,), 4, 2),
        0,
        _random((4, 3), torch.float32, 13),
    ),
    "out requires grad": lambda: (
        _random((6, 3), torch.float64, 1),
        _index((6,), 4, 2),
        0,
        _random((4, 3), torch.float64, 13, True) * 1,
    ),
    "both require grad, non-contiguous out": lambda: (
        _random((6, 3), torch.float64, 1, True),
        _index((6, 3), 4, 2),
        0,
        _random((3, 5), torch.float64, 14, True).t() * 1,
    ),
    "empty src": lambda: (
        _random((0, 3), torch.float32, 7, True),
        _index((0,), 1, 8),
        0,
        _random((2, 3), torch.float32, 15),
    ),
    "int64, dim=-1": lambda: (
        _random((3, 6), torch.int64, 9),
        _index((3, 6), 4, 10),
        -1,
        _random((3, 4), torch.int64, 16),
    ),
    "float16": lambda: (
        _random((6, 3), torch.float16, 11, True),
        _index((6,), 4, 12),
        0,
        _random((4, 3), torch.float16, 17),
    ),
    "bfloat16": lambda: (
        _random((6, 3), torch.bfloat16, 11, True),
        _index((6,), 4, 12),
        0,
        _random((4, 3), torch.bfloat16, 17),
    ),
}


CHEAP = ("test_schema", "test_faketensor")


def _opcheck_every_op(ops, overload, samples, sample):
    """opcheck of each op's overload on one sample; the full set of sub-tests for one op (in turn per sample)."""
    full_for = OPS[list(samples).index(sample) % len(OPS)]
    for name in OPS:
        operator = getattr(getattr(ops, name), overload)
        if name == full_for:  # opcheck's default: every sub-test
            results = torch.library.opcheck(operator, samples[sample]())
        else:
            results = torch.library.opcheck(operator, samples[sample](), test_utils=CHEAP)
        failed = {test: result for test, result in results.items() if result != "SUCCESS"}
        assert not failed, (name, failed)


@pytest.mark.parametrize("sample", list(FUNCTIONAL))
def test_opcheck_functional(ops, sample):
    _opcheck_every_op(ops, "default", FUNCTIONAL, sample)


@pytest.mark.parametrize("sample", list(ACCUMULATE))
def test_opcheck_accumulate(ops, sample):
    _opcheck_every_op(ops, "accumulate", ACCUMULATE, sample)


def test_fake_kernel_size_is_data_dependent_only_without_dim_size(ops):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        src = mode.from_tensor(torch.randn(6, 3))
        index = mode.from_tensor(_index((6,), 4, 2))
        unknown = ops.scatter_sum(src, index, 0)
        known = ops.scatter_max(src, index, 0, 5)
    assert free_unbacked_symbols(unknown.shape[0]) and unknown.shape[1] == 3
    assert tuple(known[0].shape) == (5, 3) and known[1].dtype == torch.int64


# ---- torch.compile -------------------------------------------------------------------------------


def pooled(src, index, dim_size):
    total = scatter.scatter_sum(src, index, 0, dim_size=dim_size)
    mean = scatter.scatter_mean(src, index, 0, dim_size=dim_size)
    top, argindex = scatter.scatter_max(src, index, 0, dim_size=dim_size)
    # Without dim_size the three results have sizes the compiler only knows as three separate
    # symbols, so they are returned side by side rather than added.
    return total.sin(), mean * 2, top, argindex


def _forward_backward(function, src, index, dim_size):
    src = src.clone().requires_grad_()
    outputs = function(src, index, dim_size)
    sum(output.pow(2).sum() for output in outputs[:3]).backward()
    return outputs, src.grad


def test_compile_matches_eager_with_dynamic_shapes(ops):
    """Inductor on results whose group counts are three unbacked symbols (dim_size=None). A given dim_size, and the
    accumulate overloads, are compiled (aot_eager) in tests/test_scatter_packages.py, for both packages."""
    dim_size = None
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(pooled, backend=counter, fullgraph=True, dynamic=True)
    for n in (10, 17):  # two sizes, one graph: dynamic=True keeps n symbolic
        src = _random((n, 3), torch.float64, n)
        index = _index((n,), 5, n + 1)
        expected = _forward_backward(pooled, src, index, dim_size)
        got = _forward_backward(compiled, src, index, dim_size)
        torch.testing.assert_close(got, expected)
    assert counter.frame_count == 1


def accumulate_into(src, index, out):
    total = scatter.scatter_sum(src, index, 0, out=out)
    top, argindex = scatter.scatter_max(src, index, 0, out=total.clone())
    return total, top, argindex


def test_compile_of_the_accumulate_overloads_writes_out(ops):
    compiled = torch.compile(accumulate_into, fullgraph=True)
    src, index = _random((6, 3), torch.float32, 20), _index((6,), 4, 21)
    start = _random((4, 3), torch.float32, 22)
    expected_out, got_out = start.clone(), start.clone()
    expected = accumulate_into(src, index, expected_out)
    got = compiled(src, index, got_out)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_out, expected_out)
    assert not torch.equal(got_out, start)  # out was written
