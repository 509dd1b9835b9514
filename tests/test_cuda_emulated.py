"""The CUDA kernels' own code, run on the CPU one thread at a time, against the CPU kernels.

No GPU needed: each .cu file is copied under build/, its launches `k<<<grid, block, shared, stream>>>(args)`
rewritten into an emulated launch that calls the kernel body for every (block, thread) in turn, and it is
compiled as C++ with the stand-in headers of csrc/cuda_emulation/ (streams, guards, atomics) in front of
torch's, its host functions registered for the CPU key of separate op namespaces (wb_lltm_emu,
wb_scatter_emu). See csrc/cuda_emulation/README.md for what this can and cannot find: it catches index
arithmetic, grid sizes, tie/NaN rules and dispatch mistakes; races and real atomics need a GPU
(tests/test_lltm_cuda.py, tests/test_scatter_cuda.py).
"""

import pytest
import torch
from cuda_device import divide_by_count_solution

from workbook.ops import cuda_emulation, lltm, scatter
from workbook.ops.cuda_emulation import rewrite_launches


@pytest.fixture(scope="module")
def lltm_ops():
    lltm.load_extension()
    # An op library: the CUDA file alone, its ops defined with wb_lltm's schemas (not lltm.cpp, whose
    # autograd code would take most of this build's time).
    cuda_emulation.load_topic(
        "lltm", ["cuda/lltm_cuda.cu"], ops=["lltm_forward", "lltm_backward"], is_python_module=False
    )
    return torch.ops.wb_lltm_emu


@pytest.fixture(scope="module")
def scatter_ops():
    scatter.load()
    # The argument checks and the CUDA file, the ops defined with wb_scatter's schemas. Not the Autograd
    # kernels: they call the kernel below autograd on any device and are tested on the CPU
    # (test_scatter.py) and on a GPU (test_scatter_cuda.py); compiled here too, they doubled this build's time.
    sources = ["checks.cpp", "cuda/scatter_cuda.cu"]
    cuda_emulation.load_topic("scatter", sources, ops=scatter.OP_NAMES, is_python_module=False)
    return torch.ops.wb_scatter_emu


def test_define_like_names_a_library_that_is_not_loaded_and_registers_nothing():
    for _ in range(2):  # a second try gets the same message, not "Only a single TORCH_LIBRARY can be used ..."
        with pytest.raises(RuntimeError, match="load the wb_not_loaded library before emulating"):
            cuda_emulation.define_like("wb_not_loaded", ["an_op"])


def test_define_like_refuses_another_op_list_for_a_defined_namespace(scatter_ops):
    cuda_emulation.define_like("wb_scatter", scatter.OP_NAMES)  # the same list again: nothing to do
    with pytest.raises(ValueError, match="cannot define"):
        cuda_emulation.define_like("wb_scatter", ["scatter_sum"])


def test_rewrite_launches():
    text = "  f();\n    k<T, 2><<<blocks(n), 256, 0, s>>>(a, g(b, c),\n        d);\n  C();\n"
    assert rewrite_launches(text) == (
        "  f();\n    ::wb_emulation::launch(blocks(n), 256, 0, s, [&] { k<T, 2>(a, g(b, c),\n        d); });\n  C();\n"
    )


# ---- LLTM ---------------------------------------------------------------------------------------

TOLERANCE = {
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
    torch.float32: dict(rtol=1e-5, atol=1e-6),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("batch_size, state_size", [(5, 11), (3, 300), (0, 4), (4, 0)])  # 900 elements: 4 blocks
def test_emulated_lltm_kernels_match_the_cpu_kernels(lltm_ops, dtype, batch_size, state_size):
    inputs = lltm.make_inputs(batch_size, 7, state_size, dtype=dtype, seed=1)
    expected = torch.ops.wb_lltm.lltm_forward(*inputs)
    got = lltm_ops.lltm_forward(*inputs)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **TOLERANCE[dtype])
    generator = torch.Generator().manual_seed(2)
    grads = [torch.randn(batch_size, state_size, generator=generator).to(dtype) for _ in range(2)]
    grads[0] = grads[0].t().contiguous().t()  # a column-major gradient
    saved = list(expected[1:]) + [inputs[1]]
    for g, e in zip(lltm_ops.lltm_backward(*grads, *saved), torch.ops.wb_lltm.lltm_backward(*grads, *saved)):
        torch.testing.assert_close(g, e, **TOLERANCE[dtype])


# ---- scatter ------------------------------------------------------------------------------------

REDUCE = ["sum", "mean", "min", "max"]


def integer_valued(shape, dtype, seed):
    values = torch.randint(-20, 20, shape, generator=torch.Generator().manual_seed(seed))
    return (values.abs() if dtype == torch.uint8 else values).to(dtype)


def assert_same(got, expected, what):
    for position, (g, e) in enumerate(zip(got, expected)):
        if e is None:
            assert g is None, what
            continue
        assert g.dtype == e.dtype and g.shape == e.shape, (what, position)
        same = torch.equal(g, e) or (g.is_floating_point() and torch.allclose(g, e, rtol=0, atol=0, equal_nan=True))
        assert same, f"{what}: output {position} differs where {(g != e).nonzero()[:5].tolist()}: {g} vs {e}"


def run(namespace, src, index, dim, out, dim_size, reduce):
    """One op of `namespace`: the functional overload, or (out given) accumulate into a copy of out.

    Returns a tuple: (result,) or (values, argindex); for accumulate, the written copy of out first.
    """
    packet = getattr(namespace, f"scatter_{reduce}")
    if out is None:
        result = packet(src, index, dim, dim_size)
        return result if isinstance(result, tuple) else (result,)
    written = out.clone()
    argindex = packet.accumulate(src, index, dim, written)
    return (written,) if argindex is None else (written, argindex)


def both(scatter_ops, src, index, dim, out, dim_size, reduce):
    """(emulated CUDA kernel's result, CPU kernel's result)."""
    return (
        run(scatter_ops, src, index, dim, out, dim_size, reduce),
        run(torch.ops.wb_scatter, src, index, dim, out, dim_size, reduce),
    )


@pytest.mark.parametrize("dtype", scatter.DTYPES, ids=str)
@pytest.mark.parametrize("reduce", REDUCE)
def test_emulated_scatter_kernel_matches_the_cpu_kernel(scatter_ops, reduce, dtype):
    src = integer_valued((3, 40, 2), dtype, seed=3)
    index = torch.randint(0, 12, (3, 40, 2), generator=torch.Generator().manual_seed(4))
    assert_same(*both(scatter_ops, src, index, 1, None, 15, reduce), f"{reduce} {dtype}")
    out = integer_valued((2, 15, 3), dtype, seed=5).transpose(0, 2)  # out= with its own values, column-major
    assert_same(*both(scatter_ops, src, index, 1, out, None, reduce), f"{reduce} {dtype} out=")


@pytest.mark.parametrize("reduce", REDUCE)
def test_emulated_scatter_kernel_on_special_inputs(scatter_ops, reduce):
    nan = float("nan")
    cases = {
        "ties": (torch.full((2, 30), 3.0), torch.arange(30).remainder(4).expand(2, 30).contiguous(), 1, None, 5),
        "NaN": (
            torch.tensor([nan, 1.0, 2.0, 5.0, nan, 4.0, nan, nan]),
            torch.tensor([0, 0, 0, 1, 1, 1, 2, 2]),
            0,
            None,
            4,
        ),
        "NaN out=": (
            torch.tensor([nan, 1.0, 2.0, 5.0, nan, 4.0, nan, nan]),
            torch.tensor([0, 0, 0, 1, 1, 1, 2, 2]),
            0,
            torch.tensor([nan, 0.0, 9.0, -9.0]),
            None,
        ),
        "broadcast index": (
            integer_valued((30, 4), torch.float32, 6),
            torch.randint(0, 5, (30,), generator=torch.Generator().manual_seed(7)).view(30, 1).expand(30, 4),
            0,
            None,
            None,
        ),
        "long column": (
            integer_valued((70_000,), torch.float32, 8),
            torch.randint(0, 9, (70_000,), generator=torch.Generator().manual_seed(9)),
            0,
            None,
            None,
        ),
        # NaN propagates, argindex at the first NaN: the CPU kernel splits this column between threads.
        "NaN in a long column": (
            integer_valued((70_000,), torch.float32, 8).index_fill_(0, torch.tensor([5, 35_000, 35_001, 69_990]), nan),
            torch.randint(0, 9, (70_000,), generator=torch.Generator().manual_seed(9)),
            0,
            None,
            None,
        ),
        "empty src": (torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.long), 0, None, 4),
        "empty output": (torch.ones(4), torch.tensor([0, 0, 1, 1]), 0, None, 0),
    }
    for what, (src, index, dim, out, dim_size) in cases.items():
        assert_same(*both(scatter_ops, src, index, dim, out, dim_size, reduce), f"{reduce}: {what}")


@pytest.mark.parametrize("reduce", REDUCE)
def test_emulated_scatter_kernel_reports_bad_indices_like_the_cpu(scatter_ops, reduce):
    src = torch.ones(4)
    for index, out, dim_size in [
        (torch.tensor([0, 1, 7, 1]), None, 3),
        (torch.tensor([0, -1, 2, 1]), torch.zeros(3), None),
    ]:
        with pytest.raises(RuntimeError) as expected:
            run(torch.ops.wb_scatter, src, index, 0, out, dim_size, reduce)
        with pytest.raises(RuntimeError, match="index value") as got:
            run(scatter_ops, src, index, 0, out, dim_size, reduce)
        assert str(got.value).splitlines()[0] == str(expected.value).splitlines()[0]


def _index_with(shape, position, value):
    index = torch.zeros(shape, dtype=torch.long)
    index[position] = value
    return index


# An out-of-range value where the kernel's index is not a 3-D view of itself (2-D and 3-D src, an
# index broadcast along the features, a transposed index): the message still names the value.
BAD_LAYOUTS = {
    "[4, 2] along dim 0": (torch.ones(4, 2), _index_with((4, 2), (2, 1), 7), 0),
    "[2, 3, 2] along dim 0": (torch.ones(2, 3, 2), _index_with((2, 3, 2), (1, 2, 1), 9), 0),
    "[2, 3, 2] along dim 1": (torch.ones(2, 3, 2), _index_with((2, 3, 2), (1, 2, 1), 9), 1),
    "1-D index broadcast over [5, 3]": (torch.ones(5, 3), torch.tensor([0, 2, 8, 1, 0]), 0),
    "transposed [3, 4] index": (torch.ones(3, 4), _index_with((4, 3), (3, 0), 6).t(), 1),
}


@pytest.mark.parametrize("reduce", REDUCE)
@pytest.mark.parametrize("layout", BAD_LAYOUTS)
def test_emulated_scatter_kernel_names_the_bad_value_in_any_layout(scatter_ops, reduce, layout):
    src, index, dim = BAD_LAYOUTS[layout]
    with pytest.raises(RuntimeError) as expected:
        run(torch.ops.wb_scatter, src, index, dim, None, 3, reduce)
    with pytest.raises(RuntimeError, match="index value") as got:
        run(scatter_ops, src, index, dim, None, 3, reduce)
    assert str(got.value).splitlines()[0] == str(expected.value).splitlines()[0]


# ---- exercise 5.1 (its wrong answers: tests/test_ch05_exercises.py) ------------------------------


def test_check_5_1_passes_the_solution_through_the_emulation_where_there_is_no_gpu():
    from workbook.exercises import ch05

    if torch.cuda.is_available():
        pytest.skip("with a GPU, check 5.1 runs the kernel on it (the solution notebook shows that it passes)")
    assert ch05.check_divide_by_count(divide_by_count_solution()).passed
