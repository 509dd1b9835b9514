"""The stable-ABI scatter ops (csrc/scatter_stable) against the reference and the ATen ops.

Both libraries are loaded in this process: their namespaces differ (wb_scatter_stable, wb_scatter).
The stable wheel is built once into build/stable/ and reused while csrc/scatter_stable is unchanged.
"""

import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbook import scatter as S
from workbook import stable

OPS = ["sum", "mean", "min", "max"]
NAN = float("nan")


@pytest.fixture(scope="module", autouse=True)
def ops():
    S.load()
    return stable.load()


def ours(op, src, index, dim=-1, dim_size=None):
    return getattr(torch.ops.wb_scatter_stable, f"scatter_{op}")(src, index, dim, dim_size)


def aten(op, src, index, dim=-1, dim_size=None):
    return getattr(S, f"scatter_{op}")(src, index, dim, dim_size=dim_size)


def reference(op, src, index, dim=-1, dim_size=None):
    return getattr(S, f"reference_{op}")(src, index, dim, dim_size=dim_size)


def assert_same(op, got, expected, what=""):
    """Exact equality (NaN where NaN): integer-valued inputs keep every sum exact in every dtype."""
    if op not in ("min", "max"):
        got, expected = (got, None), (expected, None)
    assert got[0].dtype == expected[0].dtype and got[0].shape == expected[0].shape, f"{what}: {got[0]} vs {expected[0]}"
    assert torch.equal(got[0].isnan(), expected[0].isnan()), f"{what}: NaN differs:\n{got[0]}\n{expected[0]}"
    assert torch.equal(got[0].nan_to_num(), expected[0].nan_to_num()), (
        f"{what}: values differ:\n{got[0]}\n{expected[0]}"
    )
    if expected[1] is not None:
        assert torch.equal(got[1], expected[1]), f"{what}: argindex differs:\n{got[1]}\n{expected[1]}"


def integer_valued(shape, dtype, generator):
    low = 0 if dtype == torch.uint8 else -8
    return torch.randint(low, 9, shape, generator=generator).to(dtype)


def with_threads(count, function):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(count)
        return function()
    finally:
        torch.set_num_threads(threads)


def case(name, g):
    """(src, index, dim, dim_size) for the layouts the ATen tests cover."""
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
        assert not src.is_contiguous() and not index.is_contiguous()
        return src, index, 1, None
    if name == "permuted 3-D index (copied, strides do not fold)":
        index = torch.randint(0, 3, (5, 4, 2), generator=g).permute(1, 2, 0)  # shape (4, 2, 5)
        return integer_valued((4, 2, 5), torch.float32, g), index, 0, 4
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
    "permuted 3-D index (copied, strides do not fold)",
    "empty src",
    "empty src, dim_size given",
    "empty trailing dimension",
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", CASES)
def test_matches_the_reference_and_the_aten_ops(op, name):
    src, index, dim, dim_size = case(name, torch.Generator().manual_seed(len(name)))
    got = ours(op, src, index, dim, dim_size)
    assert_same(op, got, reference(op, src, index, dim, dim_size), "vs reference")
    assert_same(op, got, aten(op, src, index, dim, dim_size), "vs ATen")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", S.DTYPES)
def test_every_dtype(op, dtype):
    g = torch.Generator().manual_seed(3)
    src = integer_valued((40, 3), dtype, g)
    index = torch.randint(0, 6, (40,), generator=g)
    got = ours(op, src, index, 0, 7)
    assert_same(op, got, reference(op, src, index, 0, 7), "vs reference")
    assert_same(op, got, aten(op, src, index, 0, 7), "vs ATen")


@st.composite
def problems(draw):
    """A random src (1-3 dims, sizes 0-5), dim, index form (full, 1-D along dim, leading dims), dtype, op."""
    ndim = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim))
    dim = draw(st.integers(-ndim, ndim - 1))
    form = draw(st.sampled_from(["full", "1-D", "leading"]))
    index_shape = {"full": shape, "1-D": [shape[dim]], "leading": shape[: dim % ndim + 1]}[form]
    groups = draw(st.integers(1, 6))
    dim_size = draw(st.one_of(st.none(), st.integers(groups, groups + 2)))
    return dict(
        shape=shape,
        dim=dim,
        index_shape=index_shape,
        groups=groups,
        dim_size=dim_size,
        dtype=draw(st.sampled_from(S.DTYPES)),
        op=draw(st.sampled_from(OPS)),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_random_shapes_dims_and_dtypes_match_the_reference_and_the_aten_ops(p):
    g = torch.Generator().manual_seed(p["seed"])
    src = integer_valued(p["shape"], p["dtype"], g)
    index = torch.randint(0, p["groups"], p["index_shape"], generator=g)
    got = ours(p["op"], src, index, p["dim"], p["dim_size"])
    assert_same(p["op"], got, reference(p["op"], src, index, p["dim"], p["dim_size"]), "vs reference")
    assert_same(p["op"], got, aten(p["op"], src, index, p["dim"], p["dim_size"]), "vs ATen")


# Shapes that take each of the CPU kernel's ways of splitting the work between threads.
SPLITS = {
    "slices of one row (1-D)": ((70_000,), 0, 20, None),
    "slices of one row ([n, 3] along dim 0)": ((70_000, 3), 0, 20, None),
    "columns: as many rows as threads": ((4, 40_000), 1, 50, None),
    "columns: output too large to copy per thread": ((60_000,), 0, 20, 100_000),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("split", list(SPLITS))
def test_each_thread_split_matches_the_reference_with_one_and_two_threads(op, split):
    shape, dim, groups, dim_size = SPLITS[split]
    g = torch.Generator().manual_seed(1)
    src = integer_valued(shape, torch.float32, g)
    index = torch.randint(0, groups, shape if len(shape) == 1 or dim else shape[:1], generator=g)
    expected = reference(op, src, index, dim, dim_size)
    for threads in (1, 2):
        got = with_threads(threads, lambda: ours(op, src, index, dim, dim_size))
        assert_same(op, got, expected, f"{threads} threads")


# Groups: 0 NaN first, 1 NaN in the middle, 2 NaN last, 3 no NaN, 4 two NaNs, 5 empty.
NAN_SRC = [NAN, 1.0, 2.0, 3.0, NAN, 0.0, 4.0, -1.0, NAN, 6.0, 7.0, 5.0, NAN, NAN]
NAN_INDEX = [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4]


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_nan_propagates_with_the_first_nan_as_argindex(op, dtype):
    src, index = torch.tensor(NAN_SRC, dtype=dtype), torch.tensor(NAN_INDEX)
    got = ours(op, src, index, 0, 6)
    assert got[0][[0, 1, 2, 4]].isnan().all() and got[1].tolist()[:3] == [0, 4, 8] and got[1][5] == len(NAN_SRC)
    assert_same(op, got, reference(op, src, index, 0, 6), "vs reference")
    assert_same(op, got, aten(op, src, index, 0, 6), "vs ATen")


@pytest.mark.parametrize("op", ["min", "max"])
def test_nan_in_long_columns_does_not_depend_on_the_thread_count(op):
    g = torch.Generator().manual_seed(11)
    n = 150_000
    src = integer_valued((n,), torch.float32, g)
    src[torch.randint(0, n, (40,), generator=g)] = NAN
    index = torch.randint(0, 100, (n,), generator=g)
    expected = reference(op, src, index, 0)
    assert expected[0].isnan().any() and not expected[0].isnan().all()
    for threads in (1, 2):
        assert_same(op, with_threads(threads, lambda: ours(op, src, index, 0)), expected, f"{threads} threads")


def test_first_position_wins_a_tie_empty_groups_are_zero_and_infinities_are_kept():
    src = torch.tensor([3.0, 1.0, 3.0, 1.0, 2.0])
    index = torch.tensor([0, 0, 0, 0, 2])
    values, arg = ours("max", src, index, 0, 4)
    assert values.tolist() == [3.0, 0.0, 2.0, 0.0] and arg.tolist() == [0, 5, 4, 5]
    values, arg = ours("min", src, index, 0, 4)
    assert values.tolist() == [1.0, 0.0, 2.0, 0.0] and arg.tolist() == [1, 5, 4, 5]
    values, arg = ours("min", torch.tensor([float("inf"), -float("inf")]), torch.tensor([0, 1]))
    assert values.tolist() == [float("inf"), -float("inf")] and arg.tolist() == [0, 1]


def test_integer_mean_rounds_down():
    assert ours("mean", torch.tensor([-3, -4, 5, 2]), torch.tensor([0, 0, 1, 1])).tolist() == [-4, 3]


def test_half_precision_sums_accumulate_in_float32():
    # Adding 1.0 to 2048.0 in float16 gives 2048.0 again (its spacing there is 2), so a float16
    # accumulator stops at 2048; a float32 one reaches 4097, which rounds to 4096 on the way out.
    src = torch.ones(4097, dtype=torch.float16)
    assert ours("sum", src, torch.zeros(4097, dtype=torch.long)).item() == 4096.0


# ---- opcheck and autograd --------------------------------------------------------------------


def opcheck_samples():
    g = torch.Generator().manual_seed(5)
    return [
        (
            torch.randn(5, 4, dtype=torch.double, generator=g, requires_grad=True),
            torch.randint(0, 3, (5, 4), generator=g),
            0,
            4,
        ),
        (torch.randn(6, 3, generator=g, requires_grad=True), torch.tensor([0, 2, 2, 0, 3, 0]), 0, None),
        (torch.randn(2, 7, generator=g), torch.randint(0, 3, (7,), generator=g), -1, 3),
    ]


@pytest.mark.parametrize("op", OPS)
def test_opcheck(op):
    for args in opcheck_samples():
        torch.library.opcheck(getattr(torch.ops.wb_scatter_stable, f"scatter_{op}"), args)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", [0, -1])
def test_gradcheck(op, dim):
    g = torch.Generator().manual_seed(5)
    src = torch.randn(5, 4, dtype=torch.double, generator=g, requires_grad=True)  # distinct values: no ties
    index = torch.randint(0, 3, (5, 4), generator=g)

    def f(x):
        result = ours(op, x, index, dim, 4)
        return result[0] if op in ("min", "max") else result

    assert torch.autograd.gradcheck(f, (src,))


@pytest.mark.parametrize("op", OPS)
def test_gradients_equal_the_reference_and_the_aten_ops(op):
    g = torch.Generator().manual_seed(7)
    src = torch.randn(8, 3, dtype=torch.double, generator=g)
    index = torch.randint(0, 4, (8,), generator=g)
    weight = torch.randn(4, 3, dtype=torch.double, generator=g)
    grads = []
    for fn in (ours, reference, aten):
        x = src.clone().requires_grad_()
        result = fn(op, x, index, 0, 4)
        ((result[0] if op in ("min", "max") else result) * weight).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])
    torch.testing.assert_close(grads[0], grads[2])


def test_autograd_with_the_schema_defaults():
    x = torch.tensor([1.0, 4.0, 2.0, 3.0], requires_grad=True)
    torch.ops.wb_scatter_stable.scatter_mean(x, torch.tensor([0, 1, 1, 0])).sum().backward()  # dim, dim_size omitted
    assert x.grad.tolist() == [0.5, 0.5, 0.5, 0.5]


def test_gradient_of_a_nan_group_goes_to_its_first_nan():
    src = torch.tensor(NAN_SRC, dtype=torch.float64, requires_grad=True)
    values, _ = ours("min", src, torch.tensor(NAN_INDEX), 0, 6)
    values.sum().backward()
    expected = torch.zeros(len(NAN_SRC), dtype=torch.float64)
    expected[[0, 4, 8, 9, 12]] = 1.0
    assert torch.equal(src.grad, expected)


# ---- bad input -------------------------------------------------------------------------------

SRC = torch.randn(6, 3)
INDEX = torch.tensor([0, 2, 2, 0, 3, 0])
BAD_INPUTS = {
    "float index": (lambda op: ours(op, SRC, INDEX.float(), 0), "index must be an integer tensor .* got dtype Float"),
    "int32 index": (lambda op: ours(op, SRC, INDEX.int(), 0), "index must be an int64 tensor, got dtype Int"),
    "index out of range": (lambda op: ours(op, SRC, INDEX, 0, 3), r"index value 3 at position 4 .* out of range"),
    "negative index": (
        lambda op: ours(op, SRC, torch.tensor([0, -1, 2, 0, 3, 0]), 0),
        "index contains the negative value -1",
    ),
    "negative index with dim_size": (
        lambda op: ours(op, SRC, torch.tensor([0, -1, 2, 0, 3, 0]), 0, 4),
        r"index value -1 at position 1 .* out of range",
    ),
    "shape mismatch": (
        lambda op: ours(op, SRC, torch.tensor([0, 1, 2]), 0),
        r"index of shape \[3\] cannot be broadcast against src of shape \[6, 3\]",
    ),
    "index with more dims": (lambda op: ours(op, SRC, INDEX.view(6, 1, 1), 0), "index has 3 dimensions"),
    "dim out of range": (lambda op: ours(op, SRC, INDEX, 2), r"dim must be in \[-2, 2\) .* got 2"),
    "negative dim_size": (lambda op: ours(op, SRC, INDEX, 0, -1), "dim_size must be >= 0, got -1"),
    "0-d src": (lambda op: ours(op, torch.tensor(1.0), torch.tensor(0), 0), "src must have at least one dimension"),
    "bool src": (lambda op: ours(op, SRC > 0, INDEX, 0), "src has dtype Bool"),
    "index on another device": (lambda op: ours(op, SRC, INDEX.to("meta"), 0), "index is on meta but src is on cpu"),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_raises_runtime_error_naming_the_argument(op, name):
    call, message = BAD_INPUTS[name]
    with pytest.raises(RuntimeError, match=message):
        call(op)


def test_out_of_range_error_names_the_first_bad_value_whatever_the_threads():
    index = torch.full((200_000,), 7)
    index[:3] = 0
    for threads in (1, 2):
        with pytest.raises(RuntimeError) as error:
            with_threads(threads, lambda: ours("sum", torch.ones(200_000), index, 0, 3))
        # error_text drops STD_TORCH_CHECK's "function, /path/file.cpp:LINE, " prefix
        assert stable.error_text(error.value) == (
            "index value 7 at position 3 along dim is out of range: index values must lie in [0, dim_size) = [0, 3)"
        )


# ---- the package -----------------------------------------------------------------------------


def test_an_unchanged_source_tree_is_neither_rebuilt_nor_reinstalled():
    wheel, library = stable.wheel_path(), next((stable.SITE / "wb_scatter_stable").glob("_C*.so"))
    before = wheel.stat().st_mtime_ns, library.stat().st_mtime_ns
    stable.install()
    assert (wheel.stat().st_mtime_ns, library.stat().st_mtime_ns) == before


def test_the_wheel_is_tagged_abi3():
    assert re.fullmatch(r"cp3\d+-abi3-[a-z0-9_]+", stable.wheel_tag()), stable.wheel_tag()


def test_the_library_needs_neither_libpython_nor_libtorch_python():
    needed = stable.library_dependencies()
    assert any(name.startswith("libtorch_cpu") for name in needed), needed
    assert not any(name.startswith(("libpython", "libtorch_python")) for name in needed), needed


def test_the_library_imports_only_the_c_shim_from_torch():
    stable_imports, aten_imports = stable.torch_imports("stable"), stable.torch_imports("aten")
    assert "torch_parallel_for" in stable_imports["c"] and stable_imports["c++"] == []
    # the ATen build of the same ops, for contrast: C++ symbols of one torch build
    assert any(name.startswith("c10::") for name in aten_imports["c++"]), aten_imports


def test_python_functions_and_reduce_names():
    import wb_scatter_stable as W

    assert torch.equal(W.scatter(SRC, INDEX, 0, reduce="max"), S.reference_max(SRC, INDEX, 0)[0])
    assert torch.equal(W.scatter_mean(SRC, INDEX, 0), ours("mean", SRC, INDEX, 0))
    with pytest.raises(ValueError, match="reduce must be"):
        W.scatter(SRC, INDEX, reduce="prod")


def test_a_second_copy_of_the_library_is_refused_not_loaded(tmp_path):
    """Loading another copy of the library would kill the process; the package raises ImportError instead."""
    other_copy = tmp_path / "other_copy.so"
    other_copy.write_bytes(next((stable.SITE / "wb_scatter_stable").glob("_C*.so")).read_bytes())
    code = (
        "import torch\n"
        f"torch.ops.load_library({str(other_copy)!r})\n"
        "try:\n"
        "    import wb_scatter_stable\n"
        "except ImportError as error:\n"
        "    print(str(error).split(';')[0])\n"
    )
    printed = S.run_python(code, path=stable.SITE)
    assert printed.strip() == (
        "the wb_scatter_stable ops are already registered in this process by another copy of the library"
    )


def test_ninja_log_times_reads_the_last_entry_of_each_output(tmp_path):
    (tmp_path / ".ninja_log").write_text(
        "# ninja log v5\n"
        "0\t12000\t1\ta/scatter.o\tf00\n"
        "5\t9005\t1\ta/scatter_cpu.o\tf01\n"
        "0\t500\t2\ta/scatter.o\tf02\n"  # rebuilt later (a ccache hit, say)
    )
    assert stable.ninja_log_times(tmp_path) == {"scatter.o": 0.5, "scatter_cpu.o": 9.0}


def test_the_stable_build_targets_torch_2_10_and_python_3_10():
    commands = stable.compile_commands("stable")
    assert sorted(Path(entry["file"]).name for entry in commands) == ["scatter_cpu.cpp", "scatter_stable.cpp"]
    for entry in commands:
        assert "-DTORCH_TARGET_VERSION=0x020a000000000000" in entry["command"]
        assert "-DPy_LIMITED_API=0x030A0000" in entry["command"]  # added by torch's BuildExtension


def test_compile_times_lists_both_stable_translation_units():
    assert set(stable.compile_times()["stable"]) >= {"scatter_stable.o", "scatter_cpu.o"}
