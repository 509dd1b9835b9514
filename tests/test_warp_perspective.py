"""workbook_cv::warp_perspective (csrc/warp_perspective, chapter 06) against pip's OpenCV, bit for bit."""

import cv2
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchscript_warning import IGNORE_JIT_DEPRECATION

from workbook.ops import warp_perspective as warp_library

pytestmark = IGNORE_JIT_DEPRECATION


@pytest.fixture(scope="module", autouse=True)
def library():
    return warp_library.load_ops()


def warp_perspective(image, warp, height, width):
    return torch.ops.workbook_cv.warp_perspective(image, warp, height, width)


def opencv(image, warp, height, width):
    result = cv2.warpPerspective(image.numpy(), warp.numpy(), (width, height))
    return torch.from_numpy(result).reshape((height, width) + tuple(image.shape[2:]))


@st.composite
def homographies(draw):
    """Rotation, anisotropic scale, shear, translation and a small perspective part: invertible by design."""
    angle = draw(st.floats(-np.pi, np.pi))
    sx, sy = draw(st.floats(0.3, 3.0)), draw(st.floats(0.3, 3.0))
    shear = draw(st.floats(-0.5, 0.5))
    tx, ty = draw(st.floats(-20, 20)), draw(st.floats(-20, 20))
    px, py = draw(st.floats(-0.02, 0.02)), draw(st.floats(-0.02, 0.02))
    c, s = np.cos(angle), np.sin(angle)
    affine = np.array([[c, -s], [s, c]]) @ np.array([[sx, shear], [0, sy]])
    warp = np.array([[*affine[0], tx], [*affine[1], ty], [px, py, 1.0]])
    return torch.from_numpy(warp)


shapes = st.tuples(st.integers(1, 24), st.integers(1, 24))
channels = st.sampled_from([None, 1, 2, 3, 4])  # None: a 2-D image


def random_image(shape, channels, seed):
    generator = torch.Generator().manual_seed(seed)
    full = shape if channels is None else (*shape, channels)
    return torch.rand(full, generator=generator) * 255


@settings(max_examples=50, deadline=None)
@given(
    warp=homographies(), shape=shapes, output=shapes, channels=st.sampled_from([2, 3, 4]), seed=st.integers(0, 2**16)
)
def test_multichannel_images_match_opencv_bit_for_bit(warp, shape, output, channels, seed):
    image = random_image(shape, channels, seed)
    assert torch.equal(warp_perspective(image, warp, *output), opencv(image, warp, *output))


@settings(max_examples=40, deadline=None)
@given(
    warp=homographies(), shape=shapes, output=shapes, channels=st.sampled_from([None, 1]), seed=st.integers(0, 2**16)
)
def test_single_channel_images_match_opencv(warp, shape, output, channels, seed):
    """OpenCV 4.6 (linked here) has one code path for every channel count; pip's OpenCV 4.1x added a
    vectorised single-channel float kernel that rounds the last bit differently. The op equals, bit for
    bit, pip OpenCV's general path (the same image as two identical channels) and is within float32
    rounding of its single-channel kernel."""
    image = random_image(shape, channels, seed)
    ours = warp_perspective(image, warp, *output)
    two_channels = torch.stack([image.reshape(shape)] * 2, dim=-1)
    general_path = opencv(two_channels, warp, *output)[..., 0].reshape(ours.shape)
    assert torch.equal(ours, general_path)
    torch.testing.assert_close(ours, opencv(image, warp, *output))


def test_identity_and_translation():
    image = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(warp_perspective(image, torch.eye(3), 3, 4), image)
    shift = torch.tensor([[1.0, 0, 1], [0, 1, 0], [0, 0, 1]])  # moves content one pixel right
    shifted = warp_perspective(image, shift, 3, 4)
    assert torch.equal(shifted[:, 1:], image[:, :-1])
    assert torch.equal(shifted[:, 0], torch.zeros(3))


def test_strided_image_and_float32_warp():
    generator = torch.Generator().manual_seed(1)
    image = torch.rand(20, 16, 3, generator=generator).transpose(0, 1)  # not contiguous
    warp32 = torch.tensor([[0.9, 0.2, 1.0], [-0.1, 1.1, 2.0], [0.001, 0.002, 1.0]])
    assert not image.is_contiguous()
    ours = warp_perspective(image, warp32, 18, 14)
    assert torch.equal(ours, warp_perspective(image.contiguous(), warp32.double(), 18, 14))
    assert torch.equal(ours, opencv(image.contiguous(), warp32, 18, 14))
    # a transposed matrix view is read through its strides
    assert torch.equal(warp_perspective(image, warp32.t().contiguous().t(), 18, 14), ours)


def test_schema_uses_torchscript_types():
    schema = str(torch.ops.workbook_cv.warp_perspective.default._schema)
    assert schema == "workbook_cv::warp_perspective(Tensor image, Tensor warp, int height, int width) -> Tensor"


@pytest.mark.parametrize(
    "image, warp, height, width, argument",
    [
        (torch.rand(4, 4, dtype=torch.float64), torch.eye(3), 4, 4, "image must be float32"),
        (torch.rand(4, 4).to(torch.int32), torch.eye(3), 4, 4, "image must be float32"),
        (torch.rand(2, 4, 4, 1), torch.eye(3), 4, 4, "image must be 2-D"),
        (torch.rand(4), torch.eye(3), 4, 4, "image must be 2-D"),
        (torch.rand(4, 4, 5), torch.eye(3), 4, 4, "image must have 1 to 4 channels"),
        (torch.rand(0, 4), torch.eye(3), 4, 4, "image height and width"),
        (torch.rand(4, 4), torch.eye(2), 4, 4, "warp must be a 3 x 3"),
        (torch.rand(4, 4), torch.eye(3).int(), 4, 4, "warp must be float32 or float64"),
        (torch.rand(4, 4), torch.zeros(3, 3), 4, 4, "warp must be invertible"),
        (torch.rand(4, 4), torch.full((3, 3), float("nan")), 4, 4, "warp must be finite"),
        (torch.rand(4, 4), torch.eye(3), 0, 4, "height must be between"),
        (torch.rand(4, 4), torch.eye(3), 4, -1, "width must be between"),
        (torch.rand(4, 4), torch.eye(3), 4, 40000, "width must be between"),
    ],
)
def test_bad_arguments_are_named(image, warp, height, width, argument):
    with pytest.raises(RuntimeError, match=argument):
        warp_perspective(image, warp, height, width)


def test_trace_and_script_call_the_operator():
    def rectify(image: torch.Tensor, warp: torch.Tensor) -> torch.Tensor:
        return torch.ops.workbook_cv.warp_perspective(image, warp, 8, 8) * 2.0

    image, warp = torch.rand(10, 10), torch.eye(3) * 1.2
    traced = torch.jit.trace(rectify, (image, warp))
    scripted = torch.jit.script(rectify)
    for compiled in (traced, scripted):
        assert "workbook_cv::warp_perspective" in str(compiled.graph)
        assert torch.equal(compiled(image, warp), rectify(image, warp))


# The same source built with cpp_extension.load and with setup.py, each checked against cv2 in a fresh process,
# is chapter 06's cell under "cpp_extension.load" and "setuptools"; nbval compares its stored output on every run.


def test_tensors_of_a_backend_without_a_kernel_are_refused_by_the_dispatcher():
    """Only a CPU kernel is registered (and the fake one, below): the dispatcher names the missing backend."""
    with pytest.raises(
        NotImplementedError,
        match="Could not run 'workbook_cv::warp_perspective' with arguments from the 'SparseCPU' backend",
    ):
        warp_perspective(torch.rand(4, 4).to_sparse(), torch.eye(3), 4, 4)


def test_meta_tensors_get_their_shape_from_the_fake_kernel():
    result = warp_perspective(torch.rand(4, 6, 3, device="meta"), torch.eye(3), 5, 7)
    assert result.device.type == "meta" and result.shape == (5, 7, 3) and result.dtype == torch.float32
