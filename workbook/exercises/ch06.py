"""Checks for chapter 06 (TorchScript custom operators).

* 6.1 ``check_gaussian_blur(op)``: the learner's C++ `gaussian_blur` operator (from a library loaded with
  `workbook.build.fresh_namespace`, so that a corrected version loads without a restart) against cv2, on images of
  every channel count and of sizes drawn when the check runs, strided ones included; the image given must be
  left as it was, and no Python may run in place of the C++ kernel; bad arguments must be refused with a
  message that names the argument.
* 6.2 ``check_blur_then_warp(function)``: a scripted function calling that operator and warp_perspective,
  with every one of its arguments passed through, and no call back into Python.
* 6.3 ``check_thumbnail(Thumbnail)``: a module that TorchScript compiles, that is right for gray and colour
  images of any size and for any thumbnail size, and that the chapter's C++ program runs from the saved file.

Every input is drawn from a seeded generator inside the check: nothing here is data to read back.
"""

from __future__ import annotations

from workbook.build import errors
from workbook.course.checking import Mistake, exercise, expect_close, raise_if_not_attempted, watched


def _blur_reference(image, ksize: int, sigma: float):
    import cv2
    import torch

    blurred = cv2.GaussianBlur(image.contiguous().numpy(), (ksize, ksize), sigma)
    return torch.from_numpy(blurred).reshape(image.shape)


def _warp_reference(image, warp, height: int, width: int):
    import cv2
    import torch

    warped = cv2.warpPerspective(image.contiguous().numpy(), warp.numpy(), (width, height))
    return torch.from_numpy(warped).reshape((height, width, *image.shape[2:]))


def _randint(generator, low: int, high: int) -> int:
    """An int in [low, high], from `generator`."""
    import torch

    return int(torch.randint(low, high + 1, (), generator=generator))


def _uniform(generator, low: float, high: float) -> float:
    import torch

    return round(low + (high - low) * float(torch.rand((), generator=generator)), 3)


def _random_image(generator, height: int, width: int, channels: int | None, *, transposed: bool = False):
    """A float32 image; `transposed`: the same kind of image as a strided (non-contiguous) view."""
    import torch

    shape = (height, width) if channels is None else (height, width, channels)
    if not transposed:
        return torch.rand(shape, generator=generator)
    return torch.rand((shape[1], shape[0], *shape[2:]), generator=generator).transpose(0, 1)


def _describe(image) -> str:
    layout = "" if image.is_contiguous() else " (a strided view: not contiguous)"
    return f"{tuple(image.shape)} {str(image.dtype).removeprefix('torch.')} image{layout}"


def _random_warp(generator):
    """An invertible homography near the identity: rotation, scale, shear, shift and a little perspective."""
    import math

    import torch

    angle = _uniform(generator, -0.3, 0.3)
    scale_x, scale_y = _uniform(generator, 0.7, 1.3), _uniform(generator, 0.7, 1.3)
    shear = _uniform(generator, -0.2, 0.2)
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor(
        [
            [c * scale_x, -s * scale_y + shear, _uniform(generator, -3, 3)],
            [s * scale_x, c * scale_y, _uniform(generator, -3, 3)],
            [_uniform(generator, -0.002, 0.002), _uniform(generator, -0.002, 0.002), 1.0],
        ],
        dtype=torch.float64,
    )


def _cpp_operator_name(op, what: str) -> str:
    """The qualified name of `op`, which must be an operator from torch.ops with a kernel written in C++."""
    import torch

    if isinstance(op, torch._ops.OpOverloadPacket):
        name = op._qualified_op_name
    elif isinstance(op, torch._ops.OpOverload):
        name = op.name()
    else:
        raise Mistake(
            f"{what} should be your C++ operator from torch.ops (blur_ops.gaussian_blur), got a "
            f"{type(op).__name__}: the exercise is the C++ kernel, not a Python function calling cv2"
        )
    # A kernel registered from C++ can be called unboxed (with C++ arguments); one registered from Python
    # (torch.library) is boxed only.
    if "unboxed" not in torch._C._dispatch_dump(name):
        raise Mistake(
            f"{name} has no kernel written in C++ (its kernels are registered from Python): write the "
            "kernel in C++, in the GAUSSIAN_BLUR source"
        )
    return name


def _calling(call, *arguments):
    """`call(*arguments)`, and the name of the first Python function outside torch that torch (its dispatcher's
    Python glue, or the TorchScript interpreter) called meanwhile, or None: a kernel, an override or a mode
    written in Python, or a function that scripted code calls back into (@torch.jit.ignore). What such a
    function calls in turn, imports, installed packages (helpers torch may call) and the workbook's own Python
    parts of workbook_cv do not count."""
    import os
    import sys
    import sysconfig

    import torch

    from workbook.ops import warp_perspective

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    # "<...>": frozen modules (the import system) and code generated at run time (a dataclass's __init__).
    installed = ("stdlib", "platstdlib", "purelib", "platlib")
    not_learners = (torch_dir, "<", *{sysconfig.get_paths()[key] + os.sep for key in installed})
    this_frame, entered = sys._getframe(), []

    def profile(frame, event, _):
        if event != "call" or entered:
            return
        filename, caller = frame.f_code.co_filename, frame.f_back
        if filename.startswith(not_learners) or filename == warp_perspective.__file__ or caller is None:
            return
        if caller is this_frame or caller.f_code.co_filename.startswith(torch_dir):
            entered.append(frame.f_code.co_name)

    with watched(sys.setprofile, profile):
        result = call(*arguments)
    return result, entered[0] if entered else None


@exercise("6.1 gaussian_blur operator")
def check_gaussian_blur(op):
    """`op(image, ksize, sigma)` (your library's C++ gaussian_blur) matches cv2.GaussianBlur on gray and 1- to
    4-channel images of several sizes, strided ones included, leaves the image it is given unchanged, runs no
    Python function in place of its C++ kernel, and refuses bad arguments by name."""
    import torch

    name = _cpp_operator_name(op, "gaussian_blur")
    generator = torch.Generator().manual_seed(6)
    images = [_random_image(generator, _randint(generator, 6, 40), _randint(generator, 6, 40), None)]
    images += [
        _random_image(generator, _randint(generator, 6, 40), _randint(generator, 6, 40), channels)
        for channels in (1, 2, 3, 4)
    ]
    images += [
        _random_image(generator, _randint(generator, 6, 30), _randint(generator, 6, 30), channels, transposed=True)
        for channels in (None, 3)
    ]
    images.append(_random_image(generator, 12, 16, 4)[..., 1:3])  # two of four channels: strided, too
    for image in images:
        ksize, sigma = 2 * _randint(generator, 0, 4) + 1, _uniform(generator, 0.3, 3.0)
        what = f"gaussian_blur of a {_describe(image)} with ksize={ksize}, sigma={sigma}"
        expected, before = _blur_reference(image, ksize, sigma), image.clone()
        got, python = _calling(op, image, ksize, sigma)
        if python is not None:
            raise Mistake(
                f"{name} ran the Python function {python}() when it was called: the exercise is the kernel "
                "in C++ (in the GAUSSIAN_BLUR source), not Python registered over it"
            )
        if not torch.equal(image, before):
            raise Mistake(f"{what} changed the image it was given: write the blur into a new output tensor")
        expect_close(got, expected, what)

    image = images[3]  # 3 channels
    bad_arguments = [
        ("ksize", (image, 4, 1.0), "ksize=4", "ksize must be odd"),
        ("ksize", (image, 0, 1.0), "ksize=0", "ksize must be positive"),
        ("ksize", (image, -3, 1.0), "ksize=-3", "ksize must be positive"),
        ("image", (image.double(), 3, 1.0), "a float64 image", "the kernel reads float32 pixels only"),
        ("image", (image.unsqueeze(0), 3, 1.0), "a 4-D image (a batch of one)", "an image is H x W or H x W x C"),
        ("image", (image.flatten(), 3, 1.0), "a 1-D image", "an image is H x W or H x W x C"),
        ("image", (torch.rand(9, 8, 5, generator=generator), 3, 1.0), "a 5-channel image", "1 to 4 channels"),
        ("image", (image[:0], 3, 1.0), "an image with no rows", "OpenCV cannot blur an empty image"),
        ("image", (image[:, :0], 3, 1.0), "an image with no columns", "OpenCV cannot blur an empty image"),
    ]
    for argument, arguments, what, rule in bad_arguments:
        try:
            op(*arguments)
        except Exception as error:  # TORCH_CHECK raises RuntimeError; ATen and OpenCV raise others
            raise_if_not_attempted(error)
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            if argument not in message:
                raise Mistake(
                    f"{name}({what}) raised, but its message does not name the argument '{argument}' "
                    f"({rule}; check it with TORCH_CHECK and say so): {message}"
                ) from None
        else:
            raise Mistake(f"{name}({what}) should raise an error that names '{argument}' ({rule}); it returned")


@exercise("6.2 a scripted function calling both operators")
def check_blur_then_warp(function):
    """`function(image, warp, height, width, ksize, sigma)` is scripted, blurs with your operator, then warps,
    using every argument it is given (checked on several drawn images, homographies and sizes), and calls no
    Python function while it runs."""
    import torch

    if not isinstance(function, torch.jit.ScriptFunction):
        raise Mistake(f"blur_then_warp should be compiled with @torch.jit.script, got a {type(function).__name__}")
    generator = torch.Generator().manual_seed(62)
    for channels in (3, None, 4):
        image = _random_image(generator, _randint(generator, 12, 40), _randint(generator, 12, 40), channels)
        warp = _random_warp(generator)
        height, width = _randint(generator, 8, 36), _randint(generator, 8, 36)
        ksize, sigma = 2 * _randint(generator, 1, 4) + 1, _uniform(generator, 0.5, 3.0)
        got, python = _calling(function, image, warp, height, width, ksize, sigma)
        if python is not None:
            raise Mistake(
                f"blur_then_warp ran the Python function {python}() while it computed: the scripted function "
                "should call the C++ operators (your 6.1 gaussian_blur and warp_perspective), not Python"
            )
        graph = str(function.inlined_graph)
        for op in ("::gaussian_blur(", "workbook_cv::warp_perspective("):
            if op not in graph:
                raise Mistake(
                    f"the scripted graph never calls {op.strip(':(')} (an operator of your 6.1 library, "
                    "and workbook_cv's warp_perspective)"
                )
        expected = _warp_reference(_blur_reference(image, ksize, sigma), warp, height, width)
        expect_close(
            got,
            expected,
            f"blur_then_warp of a {_describe(image)} with height={height}, width={width}, ksize={ksize}, "
            f"sigma={sigma} (each argument must reach the operators)",
        )


def _thumbnail_reference(image, size: int):
    import torch

    scale = torch.tensor([[size / image.size(1), 0, 0], [0, size / image.size(0), 0], [0, 0, 1]], dtype=torch.float64)
    out = _warp_reference(image, scale, size, size)
    return out.mean(dim=-1) if image.dim() == 3 else out


def _thumbnail_cases(generator):
    """(thumbnail size, image): gray and 1- to 4-channel images, a gray one only 3 pixels wide, a strided one."""
    small, large = _randint(generator, 9, 15), _randint(generator, 17, 24)

    def side():
        return _randint(generator, 20, 64)

    return [
        (small, _random_image(generator, side(), side(), 3)),
        (small, _random_image(generator, side(), side(), None)),
        (large, _random_image(generator, side(), side(), 2)),
        (large, _random_image(generator, side(), side(), 4)),
        (small, _random_image(generator, side(), side(), 1)),
        (large, _random_image(generator, side(), 3, None)),  # gray, and its last size is 3
        (small, _random_image(generator, side(), side(), 3, transposed=True)),
    ]


@exercise("6.3 a scripted Thumbnail that the C++ program runs")
def check_thumbnail(thumbnail_class):
    """`thumbnail_class(size)` is an nn.Module: TorchScript compiles it; its forward(image) warps with
    workbook_cv::warp_perspective and is right for gray and colour images of several sizes and thumbnail sizes;
    saved, it runs in the chapter's C++ program (example_app)."""
    import torch

    from workbook.ops import example_app

    generator = torch.Generator().manual_seed(63)
    scripted_by_size = {}
    for size, image in _thumbnail_cases(generator):
        if size not in scripted_by_size:
            try:
                scripted_by_size[size] = torch.jit.script(thumbnail_class(size))
            except Exception as error:  # the TorchScript compiler raises several kinds
                raise_if_not_attempted(error)
                raise Mistake(
                    f"TorchScript cannot compile Thumbnail ({type(error).__name__}): "
                    f"{errors.error_summary(str(error), 2)}"
                ) from None
        scripted = scripted_by_size[size]
        try:
            got = scripted(image)
        except Exception as error:  # torch.jit.Error, or the RuntimeError of an op that failed in the interpreter
            raise_if_not_attempted(error)
            raise Mistake(
                f"the scripted Thumbnail({size}) raised for a {_describe(image)}: {str(error).strip().splitlines()[-1]}"
            ) from None
        if "workbook_cv::warp_perspective" not in str(scripted.inlined_graph):
            raise Mistake(
                "Thumbnail's forward never calls workbook_cv::warp_perspective: the exercise is to warp with it"
            )
        expect_close(
            got, _thumbnail_reference(image, size), f"Thumbnail({size}) of a {_describe(image)}", rtol=1e-5, atol=1e-5
        )

    size, image = _randint(generator, 10, 20), _random_image(generator, 33, 47, 3)
    run, result = example_app.run_scripted(torch.jit.script(thumbnail_class(size)), (image,))
    if result is None:
        raise Mistake(f"the C++ program could not run the saved Thumbnail: {errors.error_summary(run.stderr, 2)}")
    expect_close(
        result,
        _thumbnail_reference(image, size),
        f"the C++ program's Thumbnail({size}) of a {_describe(image)}",
        rtol=1e-5,
        atol=1e-5,
    )
