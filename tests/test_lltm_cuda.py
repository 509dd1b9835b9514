"""GPU tests of the LLTM CUDA kernels (csrc/lltm/cuda/lltm_cuda.cu): forward and backward of every dtype
against the CPU kernels, non-contiguous gradients, gradcheck and a training step on the GPU, a non-default
stream, an empty batch, arguments on two devices, the second GPU. Skipped without a CUDA GPU (a dry run on
the CPU checks the tests themselves: tests/cuda_device.py).
"""

import pytest
import torch
from cuda_device import DEVICE, MARKS, back_on_current_stream, needs_real_gpu, needs_two_gpus, on_device, side_stream

from workbook.ops import lltm

pytestmark = MARKS

LLTM_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
LLTM_TOLERANCE = {
    torch.float16: dict(rtol=2e-2, atol=2e-2),
    torch.bfloat16: dict(rtol=6e-2, atol=6e-2),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float64: dict(rtol=1e-10, atol=1e-12),
}
FORWARD_NAMES = ["new_h", "new_cell", "gates", "X"]
BACKWARD_NAMES = ["d_old_h", "d_input", "d_weights", "d_bias", "d_old_cell"]


@pytest.fixture(scope="module", autouse=True)
def extension():
    lltm.load_extension()


def assert_all_close(got, expected, names, tolerance, device=DEVICE):
    assert len(got) == len(expected) == len(names)
    for name, g, e in zip(names, got, expected):
        assert g.device.type == torch.device(device).type, f"{name} is on {g.device}"
        assert g.dtype == e.dtype and g.shape == e.shape, name
        torch.testing.assert_close(g.cpu(), e, **tolerance, msg=lambda m: f"{name}: {m}")


def lltm_backward_inputs(dtype, batch_size=5, input_features=7, state_size=11, seed=0):
    inputs = lltm.make_inputs(batch_size, input_features, state_size, dtype=dtype, seed=seed)
    _, new_cell, gates, X = torch.ops.wb_lltm.lltm_forward(*inputs)
    generator = torch.Generator().manual_seed(seed + 1)
    grad_h = torch.randn(batch_size, state_size, generator=generator).to(dtype)
    grad_cell = torch.randn(batch_size, state_size, generator=generator).to(dtype)
    return [grad_h, grad_cell, new_cell, gates, X, inputs[1]]


@pytest.mark.parametrize("dtype", LLTM_DTYPES, ids=str)
def test_lltm_forward_matches_cpu(dtype):
    inputs = lltm.make_inputs(batch_size=5, input_features=7, state_size=11, dtype=dtype, seed=0)
    expected = torch.ops.wb_lltm.lltm_forward(*inputs)
    got = torch.ops.wb_lltm.lltm_forward(*on_device(inputs))
    assert_all_close(got, expected, FORWARD_NAMES, LLTM_TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", LLTM_DTYPES, ids=str)
def test_lltm_backward_matches_cpu(dtype):
    arguments = lltm_backward_inputs(dtype)
    expected = torch.ops.wb_lltm.lltm_backward(*arguments)
    got = torch.ops.wb_lltm.lltm_backward(*on_device(arguments))
    assert_all_close(got, expected, BACKWARD_NAMES, LLTM_TOLERANCE[dtype])


def test_lltm_backward_with_non_contiguous_gradients_matches_cpu():
    arguments = lltm_backward_inputs(torch.float64)
    batch_size, state_size = arguments[0].shape
    # the gradient of .sum() is an expanded tensor with stride 0; a transposed one is column-major
    arguments[0] = torch.tensor(0.5, dtype=torch.float64).expand(batch_size, state_size)
    arguments[1] = arguments[1].t().contiguous().t()
    expected = torch.ops.wb_lltm.lltm_backward(*arguments)
    device_arguments = on_device(arguments)
    device_arguments[0] = torch.tensor(0.5, dtype=torch.float64, device=DEVICE).expand(batch_size, state_size)
    device_arguments[1] = device_arguments[1].t().contiguous().t()
    assert not device_arguments[0].is_contiguous() and not device_arguments[1].is_contiguous()
    got = torch.ops.wb_lltm.lltm_backward(*device_arguments)
    assert_all_close(got, expected, BACKWARD_NAMES, LLTM_TOLERANCE[torch.float64])


def test_lltm_gradcheck_on_device():
    inputs = [t.to(DEVICE).requires_grad_() for t in lltm.make_inputs(3, 4, 5, dtype=torch.float64, seed=2)]
    assert torch.autograd.gradcheck(lltm.lltm_cpp, inputs, eps=1e-6, atol=1e-6)


def test_lltm_module_trains_on_device_like_on_cpu():
    torch.manual_seed(0)
    cell = lltm.LLTMCpp(6, 8)
    inputs = lltm.make_inputs(4, 6, 8, dtype=torch.float32, seed=3)
    x, old_h, old_cell = inputs[0], inputs[3], inputs[4]
    (h_cpu, c_cpu) = cell(x, (old_h, old_cell))
    (h_cpu.sum() + c_cpu.sum()).backward()
    grads_cpu = [p.grad.clone() for p in cell.parameters()]
    cell.zero_grad()
    cell.to(DEVICE)
    (h_dev, c_dev) = cell(*on_device([x]), tuple(on_device([old_h, old_cell])))
    (h_dev.sum() + c_dev.sum()).backward()
    torch.testing.assert_close(h_dev.cpu(), h_cpu, rtol=1e-4, atol=1e-5)
    for p, expected in zip(cell.parameters(), grads_cpu):
        assert p.grad.device.type == torch.device(DEVICE).type
        torch.testing.assert_close(p.grad.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_lltm_on_a_side_stream_matches_the_default_stream():
    inputs = lltm.make_inputs(64, 32, 128, dtype=torch.float32, seed=4)
    expected = torch.ops.wb_lltm.lltm_forward(*on_device(inputs))
    context = side_stream()
    with context:
        # the inputs are produced and consumed on the side stream: the kernels must run on it
        device_inputs = on_device(inputs)
        got = torch.ops.wb_lltm.lltm_forward(*device_inputs)
        grads = torch.ops.wb_lltm.lltm_backward(
            torch.ones_like(got[0]), torch.ones_like(got[1]), *got[1:], device_inputs[1]
        )
    back_on_current_stream(context)
    assert_all_close(got, [e.cpu() for e in expected], FORWARD_NAMES, LLTM_TOLERANCE[torch.float32])
    expected_grads = torch.ops.wb_lltm.lltm_backward(
        torch.ones_like(expected[0]), torch.ones_like(expected[1]), *expected[1:], on_device(inputs)[1]
    )
    assert_all_close(grads, [e.cpu() for e in expected_grads], BACKWARD_NAMES, LLTM_TOLERANCE[torch.float32])


def test_lltm_empty_batch():
    inputs = on_device(lltm.make_inputs(0, 3, 4, dtype=torch.float32))
    outputs = torch.ops.wb_lltm.lltm_forward(*inputs)
    assert [tuple(t.shape) for t in outputs] == [(0, 4), (0, 4), (0, 12), (0, 7)]  # new_h, new_cell, gates, X
    grads = torch.ops.wb_lltm.lltm_backward(
        torch.zeros(0, 4, device=DEVICE), torch.zeros(0, 4, device=DEVICE), *outputs[1:], inputs[1]
    )
    assert [tuple(t.shape) for t in grads] == [(0, 4), (0, 3), (12, 7), (12,), (0, 4)]
    assert not grads[2].any() and not grads[3].any()


@needs_real_gpu
def test_lltm_arguments_on_two_devices_raise_naming_the_argument():
    inputs = on_device(lltm.make_inputs(2, 3, 4))
    inputs[1] = inputs[1].cpu()
    with pytest.raises(RuntimeError, match="weights is on cpu"):
        torch.ops.wb_lltm.lltm_forward(*inputs)
    inputs = lltm.make_inputs(2, 3, 4)
    inputs[3] = inputs[3].cuda()  # old_h on the GPU picks the CUDA kernel; input is on the CPU
    with pytest.raises(RuntimeError, match="input must be a CUDA tensor"):
        torch.ops.wb_lltm.lltm_forward(*inputs)


@needs_two_gpus
def test_lltm_on_the_second_gpu_runs_there():
    inputs = lltm.make_inputs(4, 5, 6, dtype=torch.float64)
    expected = torch.ops.wb_lltm.lltm_forward(*inputs)
    with torch.cuda.device(0):
        got = torch.ops.wb_lltm.lltm_forward(*on_device(inputs, "cuda:1"))
    assert all(t.device == torch.device("cuda:1") for t in got)
    assert_all_close(got, expected, FORWARD_NAMES, LLTM_TOLERANCE[torch.float64], device="cuda")
