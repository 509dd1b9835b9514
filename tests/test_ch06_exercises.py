"""Exercise checks of chapter 06: 6.1 gaussian_blur (a C++ operator over OpenCV), 6.2 blur_then_warp (a
scripted function calling the operators) and 6.3 Thumbnail (a scripted module).

Each check passes on the solution, reports the stub as not attempted, passes right answers written differently
(a false rejection is a defect too), and rejects the catalogue of wrong and cheating answers with a message
that says what is wrong (WRONG_ANSWERS). A corrected blur library loads in the process that loaded the stub.
The C++ answers of 6.1 come from the build tests/torchscript_answers.py shares with chapter 07's tests.
"""

import functools
import warnings

import cv2
import numpy as np
import pytest
import torch
import wrong_answers
from torchscript_answers import load_libraries, mistake, notebook_string
from torchscript_warning import IGNORE_JIT_DEPRECATION
from wrong_answers import WrongAnswer

from workbook.build import fresh_namespace
from workbook.course import checking
from workbook.exercises import ch06

pytestmark = IGNORE_JIT_DEPRECATION


@pytest.fixture(scope="module", autouse=True)
def libraries():
    load_libraries()


# ---- 6.1 gaussian_blur ------------------------------------------------------------------------------------


def test_gaussian_blur_check_passes_on_the_solution():
    assert ch06.check_gaussian_blur(torch.ops.workbook_cv.gaussian_blur).passed


def blur_with_cv2(image, ksize, sigma):
    """A Python function calling cv2, with the ksize check the exercise asks for: the C++ kernel skipped."""
    if ksize <= 0 or ksize % 2 == 0:
        raise RuntimeError(f"gaussian_blur: ksize must be odd and positive, got {ksize}")
    return torch.from_numpy(cv2.GaussianBlur(image.contiguous().numpy(), (ksize, ksize), sigma)).reshape(image.shape)


@functools.cache
def blur_as_python_custom_op():
    """A torch.library operator whose kernel is Python calling cv2: an operator, but no C++."""

    @torch.library.custom_op("wb_test_python_mistakes::gaussian_blur", mutates_args=())
    def gaussian_blur(image: torch.Tensor, ksize: int, sigma: float) -> torch.Tensor:
        return blur_with_cv2(image, ksize, sigma)

    return torch.ops.wb_test_python_mistakes.gaussian_blur


@functools.cache
def blur_as_python_library_op():
    """The same through torch.library.Library's define and impl: cheaper to call for the first time than a
    custom_op (whose first call imports torch's compiler stack)."""
    library = torch.library.Library("wb_test_python_kernels", "DEF")
    library.define("gaussian_blur(Tensor image, int ksize, float sigma) -> Tensor")
    library.impl("gaussian_blur", blur_with_cv2, "CPU")
    return library, torch.ops.wb_test_python_kernels.gaussian_blur


def blur_reading_the_checks_reference(image, ksize, sigma):
    return ch06._blur_reference(image, ksize, sigma)


@functools.cache
def blur_python_over_cpp():
    """The C++ stub kept, and a Python kernel calling cv2 registered over its CPU kernel."""
    library = torch.library.Library(load_libraries(), "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel": what this answer does
        warnings.simplefilter("ignore")
        library.impl("blur_stub", blur_with_cv2_checked, "CPU")
    return library, mistake("blur_stub")


@functools.cache
def blur_by_the_checks_reference_behind_cpp():
    """C++ that checks the arguments, then calls an op whose CPU kernel is the check's own reference."""
    library = torch.library.Library(load_libraries(), "IMPL")
    library.impl("blur_impl", ch06._blur_reference, "CPU")
    return library, mistake("blur_forwards_to_python")


def blur_with_cv2_checked(image, ksize, sigma):
    """blur_with_cv2, refusing the images the exercise says to refuse."""
    if image.dtype != torch.float32 or image.dim() not in (2, 3) or (image.dim() == 3 and image.size(2) > 4):
        raise RuntimeError(f"gaussian_blur: image must be a float32 H x W (x C <= 4) tensor, got {image.shape}")
    if image.size(0) < 1 or image.size(1) < 1:
        raise RuntimeError(f"gaussian_blur: image must not be empty, got {image.shape}")
    return blur_with_cv2(image, ksize, sigma)


class BlurMode(torch.overrides.TorchFunctionMode):
    """A mode that answers calls of the C++ stub with cv2 from Python."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if "blur_stub" in str(func):
            return blur_with_cv2_checked(*args)
        return func(*args, **(kwargs or {}))


def check_blur_stub_under_a_mode():
    with BlurMode():
        return ch06.check_gaussian_blur(mistake("blur_stub"))


# ---- 6.2 blur_then_warp -----------------------------------------------------------------------------------


def blur_then_warp(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    blurred = torch.ops.workbook_cv.gaussian_blur(image, ksize, sigma)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, height, width)


def test_blur_then_warp_check_passes_on_the_solution():
    assert ch06.check_blur_then_warp(torch.jit.script(blur_then_warp)).passed


def test_blur_then_warp_stub_is_not_attempted():
    assert ch06.check_blur_then_warp(torch.jit.script(stub_blur_then_warp)).status == checking.NOT_ATTEMPTED


def stub_blur_then_warp(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    raise NotImplementedError("not attempted yet")


def warp_then_blur(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    warped = torch.ops.workbook_cv.warp_perspective(image, warp, height, width)
    return torch.ops.workbook_cv.gaussian_blur(warped, ksize, sigma)


def warp_only(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    return torch.ops.workbook_cv.warp_perspective(image, warp, height, width)


def blur_then_warp_to_the_shown_size(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    blurred = torch.ops.workbook_cv.gaussian_blur(image, ksize, sigma)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, 20, 30)


def blur_then_warp_with_the_shown_kernel(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    blurred = torch.ops.workbook_cv.gaussian_blur(image, 5, 1.2)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, height, width)


def blur_then_warp_with_a_python_operator(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    blurred = torch.ops.wb_test_python_kernels.gaussian_blur(image, ksize, sigma)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, height, width)


def scripted_with_a_python_operator():
    blur_as_python_library_op()  # registers wb_test_python_kernels::gaussian_blur before scripting
    return ch06.check_blur_then_warp(torch.jit.script(blur_then_warp_with_a_python_operator))


@torch.jit.ignore
def blur_in_python(image: torch.Tensor, ksize: int, sigma: float) -> torch.Tensor:
    return blur_with_cv2(image, ksize, sigma)


def blur_then_warp_calling_back_into_python(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    blurred = blur_in_python(image, ksize, sigma)
    if ksize < 0:  # never true: only there to put the operator into the graph
        blurred = torch.ops.workbook_cv.gaussian_blur(image, ksize, sigma)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, height, width)


def blur_then_warp_with_keywords(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    """Right, written differently: keyword arguments, a contiguous copy first."""
    blurred = torch.ops.workbook_cv.gaussian_blur(image.contiguous(), sigma=sigma, ksize=ksize)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, width=width, height=height)


def test_blur_then_warp_check_passes_on_keyword_arguments():
    outcome = ch06.check_blur_then_warp(torch.jit.script(blur_then_warp_with_keywords))
    assert outcome.passed, outcome


# ---- 6.1 in the notebook: the stub, then a corrected library, in one process ------------------------------


def test_a_corrected_gaussian_blur_loads_after_the_stub_without_a_restart():
    sources = [notebook_string("06_torchscript_custom_ops", "ch06-gaussian-blur", stub=stub) for stub in (True, False)]
    stub_ops, solved_ops = (fresh_namespace.ops("wb_ch06_blur", source, opencv=True) for source in sources)
    assert ch06.check_gaussian_blur(stub_ops.gaussian_blur).status == checking.NOT_ATTEMPTED
    assert ch06.check_gaussian_blur(solved_ops.gaussian_blur).passed


def test_a_source_without_the_namespace_word_is_refused():
    with pytest.raises(ValueError, match="under the word NAMESPACE"):
        fresh_namespace.load("wb_test_fixed", "TORCH_LIBRARY(fixed, m) {}")


# ---- 6.3 Thumbnail ----------------------------------------------------------------------------------------


class Thumbnail(torch.nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.size(0), image.size(1)
        scaling = torch.tensor(
            [[self.size / width, 0.0, 0.0], [0.0, self.size / height, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64
        )
        out = torch.ops.workbook_cv.warp_perspective(image, scaling, self.size, self.size)
        if out.dim() == 3:
            out = out.mean(dim=-1)
        return out


class ThumbnailStub(Thumbnail):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("not attempted yet")


class ThumbnailAlwaysAverages(Thumbnail):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        scaling = torch.tensor(
            [[self.size / image.size(1), 0.0, 0.0], [0.0, self.size / image.size(0), 0.0], [0.0, 0.0, 1.0]],
            dtype=torch.float64,
        )
        return torch.ops.workbook_cv.warp_perspective(image, scaling, self.size, self.size).mean(dim=-1)


class ThumbnailSwapsSides(Thumbnail):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        scaling = torch.tensor(
            [[self.size / image.size(0), 0.0, 0.0], [0.0, self.size / image.size(1), 0.0], [0.0, 0.0, 1.0]],
            dtype=torch.float64,
        )
        out = torch.ops.workbook_cv.warp_perspective(image, scaling, self.size, self.size)
        return out.mean(dim=-1) if out.dim() == 3 else out


class ThumbnailWithNumpy(Thumbnail):
    def forward(self, image: torch.Tensor) -> torch.Tensor:
        scaling = torch.from_numpy(np.diag([self.size / image.size(1), self.size / image.size(0), 1.0]))
        return torch.ops.workbook_cv.warp_perspective(image, scaling, self.size, self.size)


class ThumbnailOfTheShownSize(Thumbnail):
    """Always 16 x 16, the size the notebook shows."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        scaling = torch.tensor(
            [[16 / image.size(1), 0.0, 0.0], [0.0, 16 / image.size(0), 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64
        )
        out = torch.ops.workbook_cv.warp_perspective(image, scaling, 16, 16)
        return out.mean(dim=-1) if out.dim() == 3 else out


class ThumbnailGuessesColourFromTheLastSize(Thumbnail):
    """Takes any image whose last size is at most 4 for a colour one: a gray image 3 pixels wide too."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.size(0), image.size(1)
        scaling = torch.tensor(
            [[self.size / width, 0.0, 0.0], [0.0, self.size / height, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64
        )
        out = torch.ops.workbook_cv.warp_perspective(image, scaling, self.size, self.size)
        if image.size(-1) <= 4:
            out = out.mean(dim=-1)
        return out


class ThumbnailWithInterpolate(Thumbnail):
    """torch's bilinear resize instead of the operator."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        planes = image.unsqueeze(-1) if image.dim() == 2 else image
        resized = torch.nn.functional.interpolate(
            planes.permute(2, 0, 1).unsqueeze(0), size=[self.size, self.size], mode="bilinear"
        )
        return resized[0].mean(dim=0)


class ThumbnailAveragingFirst(Thumbnail):
    """Right, written differently: the channels averaged before the warp (which is linear in the image)."""

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if image.dim() == 3:
            image = image.mean(dim=-1)
        scaling = torch.tensor(
            [[self.size / image.size(1), 0.0, 0.0], [0.0, self.size / image.size(0), 0.0], [0.0, 0.0, 1.0]],
            dtype=torch.float64,
        )
        return torch.ops.workbook_cv.warp_perspective(image, scaling, self.size, self.size)


def test_thumbnail_check_passes_on_the_solution():
    assert ch06.check_thumbnail(Thumbnail).passed


def test_thumbnail_stub_is_not_attempted():
    assert ch06.check_thumbnail(ThumbnailStub).status == checking.NOT_ATTEMPTED


def test_thumbnail_check_passes_with_the_channels_averaged_before_the_warp():
    outcome = ch06.check_thumbnail(ThumbnailAveragingFirst)
    assert outcome.passed, outcome


# ---- the catalogue ----------------------------------------------------------------------------------------


def blur(name):
    return lambda: ch06.check_gaussian_blur(mistake(name))


def scripted(function):
    return lambda: ch06.check_blur_then_warp(torch.jit.script(function))


WRONG_ANSWERS = [
    # 6.1 gaussian_blur
    WrongAnswer("6.1", "wrong math", "sigma ignored", blur("blur_sigma_ignored"), ("is wrong at index",)),
    WrongAnswer(
        "6.1",
        "wrong math",
        "a strided image read as if contiguous",
        blur("blur_not_contiguous"),
        ("not contiguous", "is wrong at index"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "a float64 image read as float32",
        blur("blur_any_dtype"),
        ("a float64 image", "should raise", "'image'"),
    ),
    WrongAnswer(
        "6.1",
        "shown sizes only",
        "only 1 or 3 channels (the notebook shows those)",
        blur("blur_one_or_three_channels"),
        ("2) float32 image", "is wrong at index"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "no check of the image's shape",
        blur("blur_shape_unchecked"),
        ("a 4-D image", "should raise"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "an empty image left to OpenCV's assertion",
        blur("blur_empty_unchecked"),
        ("an image with no rows", "does not name the argument 'image'"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "ksize left to OpenCV, which takes 0 to mean 'from sigma'",
        blur("blur_ksize_unchecked"),
        ("ksize=0", "should raise"),
    ),
    WrongAnswer(
        "6.1",
        "concept skipped",
        "a Python function calling cv2",
        lambda: ch06.check_gaussian_blur(blur_with_cv2),
        ("should be your C++ operator", "not a Python function"),
    ),
    WrongAnswer(
        "6.1",
        "concept skipped",
        "a torch.library custom_op whose kernel is Python",
        lambda: ch06.check_gaussian_blur(blur_as_python_custom_op()),
        ("has no kernel written in C++",),
    ),
    WrongAnswer(
        "6.1",
        "private data",
        "the check's own reference function",
        lambda: ch06.check_gaussian_blur(blur_reading_the_checks_reference),
        ("should be your C++ operator",),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "no check of the channel count (5 channels let through)",
        blur("blur_channel_count_unchecked"),
        ("a 5-channel image", "should raise", "'image'"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "rows checked, columns not: an image with no columns left to OpenCV",
        blur("blur_columns_unchecked"),
        ("an image with no columns", "does not name the argument 'image'"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "blurs the caller's image in place and returns it",
        blur("blur_in_place"),
        ("changed the image it was given",),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "output from empty_like (a strided image's strides kept)",
        blur("blur_into_empty_like"),
        ("not contiguous", "is wrong at index"),
    ),
    WrongAnswer(
        "6.1",
        "wrong math",
        "BORDER_CONSTANT instead of OpenCV's default border",
        blur("blur_border_constant"),
        ("is wrong at index (0, 0)",),
    ),
    WrongAnswer(
        "6.1",
        "concept skipped",
        "the C++ stub kept, a Python kernel registered over its CPU kernel",
        lambda: ch06.check_gaussian_blur(blur_python_over_cpp()[1]),
        ("ran the Python function blur_with_cv2_checked()", "kernel in C++"),
    ),
    WrongAnswer(
        "6.1",
        "private data",
        "C++ checks the arguments, then calls an op whose kernel is the check's own Python reference",
        lambda: ch06.check_gaussian_blur(blur_by_the_checks_reference_behind_cpp()[1]),
        ("ran the Python function _blur_reference()", "kernel in C++"),
    ),
    WrongAnswer(
        "6.1",
        "concept skipped",
        "the C++ stub kept, a TorchFunctionMode answering its calls",
        check_blur_stub_under_a_mode,
        ("ran the Python function __torch_function__()",),
    ),
    # 6.2 blur_then_warp
    WrongAnswer(
        "6.2",
        "concept skipped",
        "plain Python, not scripted",
        lambda: ch06.check_blur_then_warp(blur_then_warp),
        ("@torch.jit.script",),
    ),
    WrongAnswer("6.2", "concept skipped", "never blurs", scripted(warp_only), ("never calls gaussian_blur",)),
    WrongAnswer("6.2", "wrong math", "warps, then blurs", scripted(warp_then_blur), ("is wrong at index",)),
    WrongAnswer(
        "6.2",
        "hard-coded",
        "the output size the notebook shows (20 x 30)",
        scripted(blur_then_warp_to_the_shown_size),
        ("has shape (20, 30",),
    ),
    WrongAnswer(
        "6.2",
        "hard-coded",
        "the ksize and sigma the notebook shows",
        scripted(blur_then_warp_with_the_shown_kernel),
        ("is wrong at index", "each argument must reach the operators"),
    ),
    WrongAnswer(
        "6.2",
        "concept skipped",
        "a torch.library operator whose kernel is Python (cv2) for the blur",
        scripted_with_a_python_operator,
        ("ran the Python function blur_with_cv2()", "C++ operators"),
    ),
    WrongAnswer(
        "6.2",
        "concept skipped",
        "cv2 through @torch.jit.ignore, the operator in a branch that never runs",
        scripted(blur_then_warp_calling_back_into_python),
        ("ran the Python function blur_in_python()",),
    ),
    # 6.3 Thumbnail
    WrongAnswer(
        "6.3",
        "wrong math",
        "averages a gray image's columns",
        lambda: ch06.check_thumbnail(ThumbnailAlwaysAverages),
        ("has shape",),
    ),
    WrongAnswer(
        "6.3",
        "wrong math",
        "height and width swapped",
        lambda: ch06.check_thumbnail(ThumbnailSwapsSides),
        ("is wrong at index",),
    ),
    WrongAnswer(
        "6.3",
        "concept skipped",
        "numpy in forward",
        lambda: ch06.check_thumbnail(ThumbnailWithNumpy),
        ("TorchScript cannot compile Thumbnail",),
    ),
    WrongAnswer(
        "6.3",
        "hard-coded",
        "always 16 x 16",
        lambda: ch06.check_thumbnail(ThumbnailOfTheShownSize),
        ("has shape (16, 16)",),
    ),
    WrongAnswer(
        "6.3",
        "shown sizes only",
        "colour guessed from a last size of at most 4",
        lambda: ch06.check_thumbnail(ThumbnailGuessesColourFromTheLastSize),
        ("3) float32 image", "has shape"),
    ),
    WrongAnswer(
        "6.3",
        "concept skipped",
        "torch's interpolate instead of the operator",
        lambda: ch06.check_thumbnail(ThumbnailWithInterpolate),
        ("never calls workbook_cv::warp_perspective",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
