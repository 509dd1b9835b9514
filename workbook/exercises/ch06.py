"""Checks for chapter 06 (TorchScript custom operators).

* 6.1 ``check_gaussian_blur(op)``: the learner's `gaussian_blur` operator (from a library loaded with
  `workbook.fresh_library`, so that a corrected version loads without a restart) against cv2.
* 6.2 ``check_blur_then_warp(function)``: a scripted function calling that operator and warp_perspective.
* 6.3 ``check_thumbnail(Thumbnail)``: a module that TorchScript compiles, that is right for gray and colour
  images of any size, and that the chapter's C++ program runs from the saved file.
"""

from __future__ import annotations

from ..checking import Mistake, exercise, expect_close, raise_if_not_attempted


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
def check_gaussian_blur(op):
    """`op(image, ksize, sigma)` (your library's gaussian_blur) matches cv2.GaussianBlur and rejects bad arguments."""
    import torch

    for image, ksize, sigma in _cases():
        got = op(image, ksize, sigma)
        expect_close(
            got,
            _blur_reference(image, ksize, sigma),
            f"gaussian_blur of a {tuple(image.shape)} image with ksize={ksize}, sigma={sigma}",
        )
    image = torch.rand(8, 8)
    for bad_ksize in (4, 0, -3):
        try:
            op(image, bad_ksize, 1.0)
        except RuntimeError as error:
            if "ksize" not in str(error):
                raise Mistake(
                    f"gaussian_blur(image, {bad_ksize}, 1.0) raised, but its message does not name "
                    f"'ksize': {str(error).splitlines()[0]}"
                ) from None
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
    for op in ("::gaussian_blur(", "workbook_cv::warp_perspective("):
        if op not in graph:
            raise Mistake(
                f"the scripted graph never calls {op.strip(':(')} (an operator of your 6.1 library, "
                "and workbook_cv's warp_perspective)"
            )
    blurred = _blur_reference(image, 5, 1.2)
    expected = torch.from_numpy(cv2.warpPerspective(blurred.numpy(), warp.numpy(), (30, 20)))
    expect_close(got, expected, "blur_then_warp(image, warp, 20, 30, 5, 1.2)")


def _thumbnail_reference(image, size: int):
    import cv2
    import torch

    scale = torch.tensor([[size / image.size(1), 0, 0], [0, size / image.size(0), 0], [0, 0, 1]], dtype=torch.float64)
    out = torch.from_numpy(cv2.warpPerspective(image.numpy(), scale.numpy(), (size, size)))
    return out.reshape(size, size, -1).mean(dim=-1) if image.dim() == 3 else out


@exercise("6.3 a scripted Thumbnail that the C++ program runs")
def check_thumbnail(thumbnail_class):
    """`thumbnail_class(size)` is an nn.Module: TorchScript compiles it; its forward(image) is right for gray
    and colour images of several sizes; saved, it runs in the chapter's C++ program (example_app)."""
    import torch

    from .. import BUILD_DIR, torchscript

    generator = torch.Generator().manual_seed(63)
    images = [
        torch.rand(30, 40, 3, generator=generator),
        torch.rand(25, 50, generator=generator),
        torch.rand(64, 48, 2, generator=generator),
    ]
    module = thumbnail_class(16)
    try:
        scripted = torch.jit.script(module)
    except Exception as error:  # the TorchScript compiler raises several kinds
        raise Mistake(
            f"TorchScript cannot compile Thumbnail ({type(error).__name__}): {torchscript.error_summary(str(error), 2)}"
        ) from None
    for image in images:
        try:
            got = scripted(image)
        except torch.jit.Error as error:
            raise_if_not_attempted(error)
            raise Mistake(
                f"the scripted Thumbnail(16) raised for a {tuple(image.shape)} image: "
                f"{torchscript.error_summary(str(error), 1)}"
            ) from None
        expect_close(
            got, _thumbnail_reference(image, 16), f"Thumbnail(16) of a {tuple(image.shape)} image", rtol=1e-5, atol=1e-5
        )
    folder = BUILD_DIR / "ch06"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "thumbnail.pt"
    scripted.save(str(path))
    run = torchscript.run_app(torchscript.example_app(), path, (images[0],), check=False)
    if run.returncode != 0:
        raise Mistake(f"the C++ program could not run the saved Thumbnail: {torchscript.error_summary(run.stderr, 2)}")
    expect_close(
        torchscript.read_app_output(path),
        _thumbnail_reference(images[0], 16),
        "the C++ program's Thumbnail(16) of a (30, 40, 3) image",
        rtol=1e-5,
        atol=1e-5,
    )
