"""GPU tests of the scatter CUDA kernels (csrc/scatter/cuda/scatter_cuda.cu): every op and dtype against the
CPU kernels, the accumulate overload, opcheck and gradcheck on the device, a non-default stream,
multi-dimensional, broadcast, non-contiguous and empty inputs, ties and NaN, bad input, the second GPU;
and exercise 5.1's check on the GPU.

Skipped without a CUDA GPU; WORKBOOK_CUDA_TESTS_DEVICE=cpu is a dry run of the tests' own logic
(tests/cuda_device.py).
"""

import pytest
import torch
from cuda_device import (
    DEVICE,
    MARKS,
    back_on_current_stream,
    divide_by_count_solution,
    needs_real_gpu,
    needs_two_gpus,
    side_stream,
)
from scatter_device import as_tuple, assert_equal, assert_equal_or_close, check_empty_inputs, integer_valued, run_both

from workbook.course.checking import FAILED, PASSED
from workbook.exercises import ch05
from workbook.ops import scatter

pytestmark = MARKS


@pytest.fixture(scope="module", autouse=True)
def extension():
    scatter.load()


# ---- scatter ----------------------------------------------------------------------------------

SCATTER_OPS = ["sum", "mean", "min", "max"]


def scatter_op(name):
    return getattr(scatter, f"scatter_{name}")


@pytest.mark.parametrize("dtype", scatter.DTYPES, ids=str)
@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_matches_cpu_exactly(name, dtype):
    src = integer_valued((4, 50, 3), dtype, seed=1)
    index = torch.randint(0, 20, (4, 50, 3), generator=torch.Generator().manual_seed(2))
    got, expected = run_both(scatter_op(name), src, index, dim=1, dim_size=23)  # groups 20-22 stay empty
    assert_equal(got, expected, f"scatter_{name} {dtype}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16], ids=str)
@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_into_out_matches_cpu(name, dtype):
    src = integer_valued((30, 4), dtype, seed=3)
    index = torch.randint(0, 6, (30, 4), generator=torch.Generator().manual_seed(4))
    for out in [
        integer_valued((7, 4), dtype, seed=5),  # contiguous
        integer_valued((4, 7), dtype, seed=6).t(),
    ]:  # column-major
        got, expected = run_both(scatter_op(name), src, index, dim=0, out=out)
        assert_equal(got, expected, f"scatter_{name} {dtype} out= (contiguous: {out.is_contiguous()})")
    device_out = integer_valued((7, 4), dtype, seed=5).to(DEVICE)
    result = as_tuple(scatter_op(name)(src.to(DEVICE), index.to(DEVICE), 0, device_out))[0]
    assert result.data_ptr() == device_out.data_ptr()  # out= is written and returned


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_random_floats_match_cpu(name):
    generator = torch.Generator().manual_seed(7)
    src = torch.randn(3, 2000, 5, generator=generator, dtype=torch.float64).float()
    index = torch.randint(0, 300, (3, 2000, 5), generator=generator)
    got, expected = run_both(scatter_op(name), src, index, dim=1)
    assert_equal_or_close(name, got, expected, f"scatter_{name}")


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_accumulate_overload_matches_cpu(name):
    """The overload behind out=, called directly: out is written in place, min/max return the argindex."""
    src = integer_valued((5, 40, 2), torch.float32, seed=17)
    index = torch.randint(0, 12, (5, 40, 2), generator=torch.Generator().manual_seed(18))
    accumulate = getattr(torch.ops.wb_scatter, f"scatter_{name}").accumulate
    expected_out = integer_valued((5, 14, 2), torch.float32, seed=19)
    got_out = expected_out.to(DEVICE, copy=True)  # a copy in a dry run too: both calls write their out
    expected = accumulate(src, index, 1, expected_out)
    got = accumulate(src.to(DEVICE), index.to(DEVICE), 1, got_out)
    assert_equal((got_out.cpu(),), (expected_out,), f"scatter_{name}.accumulate out")
    if name in ("min", "max"):
        assert_equal((got.cpu(),), (expected,), f"scatter_{name}.accumulate argindex")
    else:
        assert got is None and expected is None


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_opcheck_on_the_device(name):
    """torch.library.opcheck with device tensors: fake kernels and autograd are device-generic."""
    generator = torch.Generator().manual_seed(20)
    src = torch.randn(6, 3, generator=generator).to(DEVICE).requires_grad_()
    index = torch.tensor([0, 2, 2, 0, 3, 0], device=DEVICE)
    out = torch.randn(4, 3, generator=generator).to(DEVICE).requires_grad_() * 1  # not a leaf: written in place
    packet = getattr(torch.ops.wb_scatter, f"scatter_{name}")
    for overload, args in [
        (packet.default, (src, index, 0, None)),
        (packet.default, (src, index, 0, 5)),
        (packet.accumulate, (src, index, 0, out)),
    ]:
        results = torch.library.opcheck(overload, args)
        assert all(result == "SUCCESS" for result in results.values()), (overload, results)


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_one_long_column_matches_cpu(name):
    generator = torch.Generator().manual_seed(8)
    src = torch.randint(-1000, 1000, (300_000,), generator=generator).float()
    index = torch.randint(0, 50, (300_000,), generator=generator)  # thousands of atomics per output element
    got, expected = run_both(scatter_op(name), src, index, dim=0)
    assert_equal(got, expected, f"scatter_{name} 1-D")


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_broadcast_index_and_default_dim(name):
    src = integer_valued((40, 6), torch.float32, seed=9)
    index = torch.randint(0, 8, (40,), generator=torch.Generator().manual_seed(10))
    got, expected = run_both(
        scatter_op(name), src, index, dim=0
    )  # a 1-D index lines up with dim 0, stride 0 across columns
    assert_equal(got, expected, f"scatter_{name} broadcast")
    src = integer_valued((3, 4, 25), torch.int32, seed=11)
    index = torch.randint(0, 5, (3, 4, 25), generator=torch.Generator().manual_seed(12))
    got, expected = run_both(scatter_op(name), src, index)  # dim=-1
    assert_equal(got, expected, f"scatter_{name} last dim")


@pytest.mark.parametrize("name", ["min", "max"])
def test_scatter_ties_go_to_the_first_position(name):
    src = torch.full((2, 30), 3.0)
    index = torch.arange(30).remainder(4).expand(2, 30)
    got, expected = run_both(scatter_op(name), src, index, dim=1, dim_size=5)
    assert_equal(got, expected, f"scatter_{name} ties")
    assert got[1].tolist() == [[0, 1, 2, 3, 30]] * 2


@pytest.mark.parametrize("name", ["min", "max"])
def test_scatter_nan_follows_the_cpu_rule(name):
    src = torch.tensor([float("nan"), 1.0, 2.0, 5.0, float("nan"), 4.0, float("nan"), float("nan")])
    index = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    got, expected = run_both(scatter_op(name), src, index, dim=0, dim_size=4)
    assert_equal(got, expected, f"scatter_{name} NaN")
    out = torch.tensor([float("nan"), 0.0, 9.0, -9.0])
    got, expected = run_both(scatter_op(name), src, index, dim=0, out=out)
    assert_equal(got, expected, f"scatter_{name} NaN out=")


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_empty_inputs(name):
    check_empty_inputs(scatter_op(name), f"scatter_{name}")


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_gradcheck_on_device(name):
    generator = torch.Generator().manual_seed(13)
    src = torch.randn(12, 3, generator=generator, dtype=torch.float64).to(DEVICE).requires_grad_()
    index = torch.tensor([0, 1, 0, 2, 2, 2, 4, 0, 1, 4, 4, 1], device=DEVICE)  # group 3 is empty

    def function(s):
        return as_tuple(scatter_op(name)(s, index, 0, None, 5))[0]

    assert torch.autograd.gradcheck(function, (src,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_on_a_side_stream_matches_the_default_stream(name):
    generator = torch.Generator().manual_seed(14)
    src = torch.randn(100_000, 4, generator=generator)
    index = torch.randint(0, 1000, (100_000,), generator=generator)
    expected = tuple(t.cpu() for t in as_tuple(scatter_op(name)(src.to(DEVICE), index.to(DEVICE), 0, None, 1000)))
    context = side_stream()
    with context:
        got = as_tuple(scatter_op(name)(src.to(DEVICE), index.to(DEVICE), 0, None, 1000))
    back_on_current_stream(context)
    got = tuple(t.cpu() for t in got)
    assert_equal_or_close(name, got, expected, f"scatter_{name} side stream")


@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_out_of_range_index_raises_and_the_device_stays_usable(name):
    src = torch.ones(4, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"index value 7 at position 2 along dim is out of range"):
        scatter_op(name)(src, torch.tensor([0, 1, 7, 1], device=DEVICE), 0, None, 3)
    with pytest.raises(RuntimeError, match=r"index value -1 at position 1 along dim is out of range"):
        scatter_op(name)(src, torch.tensor([0, -1, 2, 1], device=DEVICE), 0, torch.zeros(3, device=DEVICE))
    with pytest.raises(RuntimeError, match="index contains the negative value -2"):
        scatter_op(name)(src, torch.tensor([0, -2, 2, 1], device=DEVICE), 0)
    # no device-side assert happened: the same device still computes
    result = as_tuple(scatter_op(name)(src, torch.tensor([0, 1, 2, 1], device=DEVICE), 0, None, 3))[0]
    assert result.cpu().tolist() == ([1.0, 2.0, 1.0] if name == "sum" else [1.0, 1.0, 1.0])


@needs_real_gpu
def test_scatter_arguments_on_two_devices_raise_naming_the_argument():
    src = torch.ones(4, device="cuda")
    with pytest.raises(RuntimeError, match="index is on cpu"):
        scatter.scatter_sum(src, torch.tensor([0, 1, 0, 1]), 0)
    with pytest.raises(RuntimeError, match="out is on cpu"):
        scatter.scatter_max(src, torch.tensor([0, 1, 0, 1], device="cuda"), 0, torch.zeros(2))
    with pytest.raises(RuntimeError, match="src"):
        scatter.scatter_mean(torch.ones(4), torch.tensor([0, 1, 0, 1], device="cuda"), 0)


@needs_two_gpus
@pytest.mark.parametrize("name", SCATTER_OPS)
def test_scatter_on_the_second_gpu_runs_there(name):
    src = integer_valued((20, 3), torch.float32, seed=15)
    index = torch.randint(0, 4, (20, 3), generator=torch.Generator().manual_seed(16))
    expected = as_tuple(scatter_op(name)(src, index, 0))
    with torch.cuda.device(0):
        got = as_tuple(scatter_op(name)(src.to("cuda:1"), index.to("cuda:1"), 0))
    assert all(t.device == torch.device("cuda:1") for t in got)
    assert_equal(tuple(t.cpu() for t in got), expected, f"scatter_{name} on cuda:1")


# ---- exercise 5.1 on the GPU ---------------------------------------------------------------------


@pytest.fixture
def lenient(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)


@needs_real_gpu
def test_exercise_solution_passes_on_the_gpu(lenient):
    outcome = ch05.check_divide_by_count(divide_by_count_solution())
    assert outcome.status == PASSED, str(outcome)


@needs_real_gpu
@pytest.mark.parametrize(
    "mistake, replacement, says",
    [
        ("counts[(e / inner) % groups]", "counts[e % groups]", "is wrong at index"),  # ignores the layout
        (
            "c > 1 ? sums[e] / static_cast<scalar_t>(c) : sums[e]",
            "sums[e] / static_cast<scalar_t>(c)",
            "is wrong at index",
        ),  # divides empty groups by 0
        ("(n + threads - 1) / threads", "n / threads", ""),  # too few blocks: the tail stays NaN, or 0 blocks
    ],
)
def test_exercise_mistakes_fail_on_the_gpu(lenient, mistake, replacement, says):
    source = divide_by_count_solution()
    assert mistake in source
    outcome = ch05.check_divide_by_count(source.replace(mistake, replacement))
    assert outcome.status == FAILED, str(outcome)
    assert says in outcome.explanation
