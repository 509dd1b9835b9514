"""Checks for chapter 06 (TorchScript custom operators)."""
from __future__ import annotations

from ..checking import Mistake, exercise, expect_close


def _blur_reference(image, ksize: int, sigma: float):
    import cv2
    import torch

    blurred = cv2.GaussianBlur(image.contiguous().numpy(), (ksize, ksize), sigma)
    return torch.from_numpy(blurred).reshape(image.shape)


def _cases():
    import torch

    generator = torch.Generator().manual_seed(6)
    for shape, ksize, sigma in [((12, 17), 3, 0.8), ((20, 9, 3), 5, 1.5), ((16, 16, 1), 7, 2.0), ((9, 11), 1, 0.5)]:
        yield torch.rand(shape, generator=generator), ksize, sigma


@exercise("6.1 gaussian_blur operator")
def check_gaussian_blur(op=None):
    """torch.ops.workbook_cv.gaussian_blur (or `op`) matches cv2.GaussianBlur and rejects bad arguments."""
    import torch

    try:
        op = op if op is not None else torch.ops.workbook_cv.gaussian_blur
    except (AttributeError, RuntimeError):
        raise Mistake("torch.ops.workbook_cv.gaussian_blur does not exist: build and load your library first, "
                      "with the schema registered in a TORCH_LIBRARY_FRAGMENT(workbook_cv, m) block") from None
    for image, ksize, sigma in _cases():
        got = op(image, ksize, sigma)
        expect_close(got, _blur_reference(image, ksize, sigma),
                     f"gaussian_blur of a {tuple(image.shape)} image with ksize={ksize}, sigma={sigma}")
    image = torch.rand(8, 8)
    for bad_ksize in (4, 0, -3):
        try:
            op(image, bad_ksize, 1.0)
        except RuntimeError as error:
            if "ksize" not in str(error):
                raise Mistake(f"gaussian_blur(image, {bad_ksize}, 1.0) raised, but its message does not name "
                              f"'ksize': {str(error).splitlines()[0]}") from None
        else:
            raise Mistake(f"gaussian_blur(image, {bad_ksize}, 1.0) should raise: ksize must be odd and positive")


@exercise("6.2 a scripted function calling both operators")
def check_blur_then_warp(function):
    """`function(image, warp, height, width, ksize, sigma)` is scripted and blurs, then warps."""
    import cv2
    import torch

    if not isinstance(function, torch.jit.ScriptFunction):
        raise Mistake(f"blur_then_warp should be compiled with @torch.jit.script, got a {type(function).__name__}")
    generator = torch.Generator().manual_seed(62)
    image = torch.rand(24, 32, 3, generator=generator)
    warp = torch.tensor([[1.1, 0.2, -3.0], [-0.1, 0.9, 2.0], [0.001, 0.0005, 1.0]], dtype=torch.float64)
    got = function(image, warp, 20, 30, 5, 1.2)
    graph = str(function.graph)
    for op in ("workbook_cv::gaussian_blur", "workbook_cv::warp_perspective"):
        if op not in graph:
            raise Mistake(f"the scripted graph never calls {op}")
    blurred = _blur_reference(image, 5, 1.2)
    expected = torch.from_numpy(cv2.warpPerspective(blurred.numpy(), warp.numpy(), (30, 20)))
    expect_close(got, expected, "blur_then_warp(image, warp, 20, 30, 5, 1.2)")
