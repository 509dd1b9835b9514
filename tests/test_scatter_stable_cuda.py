"""GPU tests of the stable-ABI CUDA kernels (csrc/scatter_stable/cuda/scatter_stable_cuda.cu): every op and dtype
against the package's CPU kernel and against the ATen package on the device, the accumulate overload, opcheck
and gradcheck on the device, the current stream (obtained through the C shim), ties and NaN, the 8- and 16-bit
atomics, empty inputs, bad input, the second GPU.

Skipped without a CUDA GPU (or where CUDA extensions cannot be built); `python -m workbook.diagnostics.gpu_report` runs them.
WORKBOOK_CUDA_TESTS_DEVICE=cpu is a dry run of the tests' own logic on the CPU (tests/cuda_device.py).
"""

import pytest
import torch
from cuda_device import DEVICE, MARKS, back_on_current_stream, needs_real_gpu, needs_two_gpus, side_stream
from scatter_device import as_tuple, assert_equal, assert_equal_or_close, check_empty_inputs, integer_valued, run_both

from workbook.ops import scatter, scatter_stable

pytestmark = MARKS
OPS = ["sum", "mean", "min", "max"]


@pytest.fixture(scope="module", autouse=True)
def packages():
    scatter.load()
    scatter_stable.load()


def op(name):
    import wb_scatter_stable

    return getattr(wb_scatter_stable, f"scatter_{name}")


@pytest.mark.parametrize("dtype", scatter.DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_every_dtype_matches_the_cpu_kernel_and_the_aten_kernel(name, dtype):
    src = integer_valued((4, 50, 3), dtype, seed=1)
    index = torch.randint(0, 20, (4, 50, 3), generator=torch.Generator().manual_seed(2))
    got, expected = run_both(op(name), src, index, dim=1, dim_size=23)  # groups 20-22 stay empty
    assert_equal(got, expected, f"scatter_{name} {dtype}")
    aten = as_tuple(getattr(scatter, f"scatter_{name}")(src.to(DEVICE), index.to(DEVICE), 1, None, 23))
    assert_equal(got, tuple(t.cpu() for t in aten), f"scatter_{name} {dtype} vs wb_scatter")


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("name", OPS)
def test_contended_atomics_match_the_cpu_kernel(name, dtype):
    """Thousands of updates per output element: the compare-and-swap loops (8/16-bit words, float min/max)."""
    src = integer_valued((200_000,), dtype, seed=3, low=-3, high=4)  # small values: 8-bit sums wrap the same way
    index = torch.randint(0, 7, (200_000,), generator=torch.Generator().manual_seed(4))
    got, expected = run_both(op(name), src, index, dim=0)
    assert_equal(got, expected, f"scatter_{name} {dtype} contended")


@pytest.mark.parametrize("name", OPS)
def test_out_and_the_accumulate_overload_match_the_cpu_kernel(name):
    src = integer_valued((30, 4), torch.float32, seed=5)
    index = torch.randint(0, 6, (30, 4), generator=torch.Generator().manual_seed(6))
    for out in (integer_valued((7, 4), torch.float32, seed=7), integer_valued((4, 7), torch.float32, seed=8).t()):
        got, expected = run_both(op(name), src, index, dim=0, out=out)
        assert_equal(got, expected, f"scatter_{name} out= (contiguous: {out.is_contiguous()})")
    accumulate = getattr(torch.ops.wb_scatter_stable, f"scatter_{name}").accumulate
    expected_out = integer_valued((7, 4), torch.float32, seed=9)
    got_out = expected_out.to(DEVICE, copy=True)
    returned = accumulate(src.to(DEVICE), index.to(DEVICE), 0, got_out)
    expected = accumulate(src, index, 0, expected_out)
    assert_equal((got_out.cpu(),), (expected_out,), f"scatter_{name}.accumulate out")
    if name in ("min", "max"):
        assert_equal((returned.cpu(),), (expected,), f"scatter_{name}.accumulate argindex")


@pytest.mark.parametrize("name", OPS)
def test_random_floats_broadcast_index_and_last_dim_match_the_cpu_kernel(name):
    g = torch.Generator().manual_seed(10)
    src, index = torch.randn(3, 2000, 5, generator=g), torch.randint(0, 300, (2000,), generator=g)
    got, expected = run_both(op(name), src, index, dim=1)  # a 1-D index along dim 1, broadcast over the rest
    assert_equal_or_close(name, got, expected, f"scatter_{name}")
    got, expected = run_both(
        op(name), integer_valued((3, 4, 25), torch.int32, seed=11), torch.randint(0, 5, (3, 4, 25), generator=g)
    )
    assert_equal(got, expected, f"scatter_{name} dim=-1")


@pytest.mark.parametrize("name", ["min", "max"])
def test_ties_go_to_the_first_position_and_nan_follows_the_cpu_rule(name):
    got, _ = run_both(
        op(name), torch.full((2, 30), 3.0), torch.arange(30).remainder(4).expand(2, 30), dim=1, dim_size=5
    )
    assert got[1].tolist() == [[0, 1, 2, 3, 30]] * 2
    nan = float("nan")
    src = torch.tensor([nan, 1.0, 2.0, 5.0, nan, 4.0, nan, nan])
    index = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    for out in (None, torch.tensor([nan, 0.0, 9.0, -9.0])):
        got, expected = run_both(op(name), src, index, dim=0, out=out, dim_size=None if out is not None else 4)
        assert_equal(got, expected, f"scatter_{name} NaN, out={out}")


@pytest.mark.parametrize("name", OPS)
def test_empty_inputs(name):
    check_empty_inputs(op(name), f"scatter_{name}")


@pytest.mark.parametrize("name", OPS)
def test_opcheck_and_gradcheck_on_the_device(name):
    g = torch.Generator().manual_seed(12)
    src = torch.randn(6, 3, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_()
    index = torch.tensor([0, 2, 2, 0, 3, 0], device=DEVICE)
    out = torch.randn(5, 3, generator=g, dtype=torch.float64).to(DEVICE).requires_grad_() * 1  # not a leaf
    packet = getattr(torch.ops.wb_scatter_stable, f"scatter_{name}")
    for overload, args in [(packet.default, (src, index, 0, None)), (packet.accumulate, (src, index, 0, out))]:
        results = torch.library.opcheck(overload, args)
        assert all(result == "SUCCESS" for result in results.values()), (overload, results)
    assert torch.autograd.gradcheck(lambda s: as_tuple(op(name)(s, index, 0, None, 5))[0], (src,))


@needs_real_gpu
@pytest.mark.parametrize("name", OPS)
def test_kernels_run_on_the_current_stream(name):
    """src is written on a side stream behind a 50 ms spin; a kernel launched on any other stream reads it early."""
    g = torch.Generator().manual_seed(13)
    values, index = torch.randn(100_000, 4, generator=g), torch.randint(0, 1000, (100_000,), generator=g)
    expected = tuple(t.cpu() for t in as_tuple(op(name)(values.to(DEVICE), index.to(DEVICE), 0, None, 1000)))
    src, device_values, device_index = torch.zeros(100_000, 4, device=DEVICE), values.to(DEVICE), index.to(DEVICE)
    torch.cuda.synchronize()
    context = side_stream()
    with context:
        torch.cuda._sleep(50_000_000)  # about 50 ms of spinning on the side stream
        src.copy_(device_values)
        got = as_tuple(op(name)(src, device_index, 0, None, 1000))
    back_on_current_stream(context)
    got = tuple(t.cpu() for t in got)
    assert_equal_or_close(name, got, expected, f"scatter_{name} side stream")


BAD_INDEX = {  # index, out, dim_size
    "too large, dim_size given": (torch.tensor([0, 1, 7, 1]), None, 3),
    "negative, out given": (torch.tensor([0, -1, 2, 1]), torch.zeros(3), None),
    "negative, dim_size from index.max()": (torch.tensor([0, -2, 2, 1]), None, None),
}


@pytest.mark.parametrize("case", list(BAD_INDEX))
@pytest.mark.parametrize("name", OPS)
def test_bad_index_gives_the_aten_kernels_message_and_the_device_stays_usable(name, case):
    index, out, dim_size = BAD_INDEX[case]
    messages = []
    for function in (op(name), getattr(scatter, f"scatter_{name}")):
        device_out = None if out is None else out.to(DEVICE)
        with pytest.raises(RuntimeError, match="index") as error:
            function(torch.ones(4, device=DEVICE), index.to(DEVICE), 0, device_out, dim_size)
        messages.append(scatter_stable.error_text(error.value).splitlines()[0])
    assert messages[0] == messages[1]
    # the kernel skips a bad value instead of a device-side assert, so the device still computes
    got, expected = run_both(op(name), torch.ones(4), torch.tensor([0, 1, 2, 1]), dim=0, dim_size=3)
    assert_equal(got, expected, f"scatter_{name} after a bad index")


@needs_real_gpu
def test_arguments_on_two_devices_raise_naming_the_argument():
    src = torch.ones(4, device="cuda")
    with pytest.raises(RuntimeError, match="index is on cpu but src is on cuda:0"):
        op("sum")(src, torch.tensor([0, 1, 0, 1]), 0)
    with pytest.raises(RuntimeError, match="out is on cpu but src is on cuda:0"):
        op("max")(src, torch.tensor([0, 1, 0, 1], device="cuda"), 0, torch.zeros(2))


@needs_two_gpus
def test_on_the_second_gpu_it_runs_there_whatever_the_current_device():
    """DeviceGuard and the stream of src's device: tensors on cuda:1 while cuda:0 is the current device."""
    src = integer_valued((20, 3), torch.float32, seed=15).to("cuda:1")
    index = torch.randint(0, 4, (20, 3), generator=torch.Generator().manual_seed(16)).to("cuda:1")
    for name in OPS:
        with torch.cuda.device(0):
            got = as_tuple(op(name)(src, index, 0, None, 5))  # dim_size given: the bad-index check reads back too
        assert all(t.device == src.device for t in got)
        expected = as_tuple(getattr(scatter, f"scatter_{name}")(src.cpu(), index.cpu(), 0, None, 5))
        assert_equal(tuple(t.cpu() for t in got), expected, f"scatter_{name} on cuda:1")
