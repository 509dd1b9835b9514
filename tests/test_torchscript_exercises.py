"""Exercise checks of chapters 06 and 07 pass on the solutions, report the stubs as not attempted, reject a
catalogue of wrong and cheating answers with a message that says what is wrong (WRONG_ANSWERS), and accept a
corrected library in the process that loaded the stub."""

import ast
import functools
from typing import List

import cv2
import nbformat
import numpy as np
import pytest
import torch
import wrong_answers
from wrong_answers import WrongAnswer

from workbook import checking, fresh_library, generate, torchscript
from workbook.exercises import ch06, ch07

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

# One build for every C++ answer of 6.1 and 7.1: the reference solutions under fixed names (the blur as a
# fragment of workbook_cv, as chapter 06 says another library may add one), and the wrong answers.
SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <deque>
#include <string>
#include <tuple>
#include <vector>

namespace {

// What the variants below get wrong.
enum Blur {
  kRight,
  kSigmaIgnored,
  kNotContiguous,
  kAnyDtype,
  kOneOrThreeChannels,
  kShapeUnchecked,
  kEmptyUnchecked,
  kKsizeUnchecked
};

template <Blur mistake>
at::Tensor blur(const at::Tensor& image, int64_t ksize, double sigma) {
  if constexpr (mistake != kAnyDtype) {
    TORCH_CHECK(image.device().is_cpu() && image.scalar_type() == at::kFloat,
                "gaussian_blur: image must be a float32 CPU tensor, got ", image.scalar_type(), " on ", image.device());
  }
  if constexpr (mistake != kShapeUnchecked) {
    TORCH_CHECK(image.dim() == 2 || (image.dim() == 3 && image.size(2) >= 1 && image.size(2) <= 4),
                "gaussian_blur: image must be H x W or H x W x C with 1 to 4 channels, got shape ", image.sizes());
  }
  if constexpr (mistake != kShapeUnchecked && mistake != kEmptyUnchecked) {
    TORCH_CHECK(image.size(0) >= 1 && image.size(1) >= 1, "gaussian_blur: image must not be empty, got shape ",
                image.sizes());
  }
  if constexpr (mistake != kKsizeUnchecked) {
    TORCH_CHECK(ksize > 0 && ksize % 2 == 1, "gaussian_blur: ksize must be odd and positive, got ", ksize);
  }
  TORCH_CHECK(sigma > 0, "gaussian_blur: sigma must be positive, got ", sigma);
  const at::Tensor source = mistake == kNotContiguous ? image : image.contiguous();
  int channels = image.dim() == 3 ? static_cast<int>(image.size(2)) : 1;
  if constexpr (mistake == kOneOrThreeChannels) channels = channels == 3 ? 3 : 1;
  const int rows = static_cast<int>(image.size(0)), cols = static_cast<int>(image.size(1));
  const auto* pixels = static_cast<const float*>(source.const_data_ptr());  // no dtype check of its own
  const cv::Mat source_mat(rows, cols, CV_32FC(channels), const_cast<float*>(pixels));
  at::Tensor output = at::empty(source.sizes(), source.options().dtype(at::kFloat));
  cv::Mat output_mat(rows, cols, CV_32FC(channels), output.mutable_data_ptr<float>());
  cv::GaussianBlur(source_mat, output_mat, cv::Size(static_cast<int>(ksize), static_cast<int>(ksize)),
                   mistake == kSigmaIgnored ? 1.0 : sigma);
  return output;
}

enum Recent { kKeeps, kForgetsCapacity, kCapacityFromCount, kKeepsThree, kOffByOne, kHardCodedState };

// One C++ type per registered class (registering a type twice aborts at load time).
template <Recent mistake>
class RecentStrings : public torch::CustomClassHolder {
 public:
  explicit RecentStrings(int64_t capacity) : capacity_(capacity) {
    TORCH_CHECK(capacity >= 1, "RecentStrings: capacity must be at least 1, got ", capacity);
  }
  void push(std::string word) {
    words_.push_back(std::move(word));
    const int64_t limit = mistake == kKeepsThree ? 3 : mistake == kOffByOne ? capacity_ - 1 : capacity_;
    while (static_cast<int64_t>(words_.size()) > limit && !words_.empty()) words_.pop_front();
  }
  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  std::vector<std::string> items() const { return {words_.begin(), words_.end()}; }

 private:
  int64_t capacity_;
  std::deque<std::string> words_;
};

using State = std::tuple<int64_t, std::vector<std::string>>;

template <Recent mistake>
void register_recent_strings(torch::Library& m, const char* name) {
  using Class = RecentStrings<mistake>;
  m.class_<Class>(name)
      .def(torch::init<int64_t>())
      .def("push", &Class::push)
      .def("capacity", &Class::capacity)
      .def("size", &Class::size)
      .def("items", &Class::items)
      .def_pickle([](const c10::intrusive_ptr<Class>& self) -> State { return {self->capacity(), self->items()}; },
                  [](State state) -> c10::intrusive_ptr<Class> {
                    auto& [capacity, words] = state;
                    if constexpr (mistake == kHardCodedState) {
                      capacity = 3;  // what the notebook shows: RecentStrings(3) after a, b, c, d, e
                      words = {"c", "d", "e"};
                    }
                    const int64_t restored = mistake == kForgetsCapacity    ? 10
                                             : mistake == kCapacityFromCount ? static_cast<int64_t>(words.size())
                                                                             : capacity;
                    auto recent = c10::make_intrusive<Class>(restored);
                    for (auto& word : words) recent->push(std::move(word));
                    return recent;
                  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(workbook_cv, m) {
  m.def("gaussian_blur(Tensor image, int ksize, float sigma) -> Tensor");
}
TORCH_LIBRARY_IMPL(workbook_cv, CPU, m) {
  m.impl("gaussian_blur", &blur<kRight>);
}
TORCH_LIBRARY(workbook_ch07, m) {
  register_recent_strings<kKeeps>(m, "RecentStrings");
}
TORCH_LIBRARY(workbook_exercise_mistakes, m) {
  m.def("blur_sigma_ignored(Tensor image, int ksize, float sigma) -> Tensor", &blur<kSigmaIgnored>);
  m.def("blur_not_contiguous(Tensor image, int ksize, float sigma) -> Tensor", &blur<kNotContiguous>);
  m.def("blur_any_dtype(Tensor image, int ksize, float sigma) -> Tensor", &blur<kAnyDtype>);
  m.def("blur_one_or_three_channels(Tensor image, int ksize, float sigma) -> Tensor", &blur<kOneOrThreeChannels>);
  m.def("blur_shape_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kShapeUnchecked>);
  m.def("blur_empty_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kEmptyUnchecked>);
  m.def("blur_ksize_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kKsizeUnchecked>);
  register_recent_strings<kForgetsCapacity>(m, "ForgetsCapacity");
  register_recent_strings<kCapacityFromCount>(m, "CapacityFromCount");
  register_recent_strings<kKeepsThree>(m, "KeepsThree");
  register_recent_strings<kOffByOne>(m, "OffByOne");
  register_recent_strings<kHardCodedState>(m, "HardCodedState");
}
"""


@pytest.fixture(scope="module", autouse=True)
def libraries():
    load_libraries()


def load_libraries():
    torchscript.load_ops()
    torchscript.load_library_source("test_torchscript_exercises", SOURCE, opencv=True)


def mistake(name):
    """A wrong answer's operator or class from SOURCE's build (built and loaded on first use)."""
    load_libraries()
    return getattr(torch.ops.workbook_exercise_mistakes, name, None) or getattr(
        torch.classes.workbook_exercise_mistakes, name
    )


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


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

    @torch.library.custom_op("workbook_python_mistakes::gaussian_blur", mutates_args=())
    def gaussian_blur(image: torch.Tensor, ksize: int, sigma: float) -> torch.Tensor:
        return blur_with_cv2(image, ksize, sigma)

    return torch.ops.workbook_python_mistakes.gaussian_blur


def blur_reading_the_checks_reference(image, ksize, sigma):
    return ch06._blur_reference(image, ksize, sigma)


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


# ---- 7.1 RecentStrings ------------------------------------------------------------------------------------


def test_recent_strings_check_passes_on_the_solution():
    assert ch07.check_recent_strings(torch.classes.workbook_ch07.RecentStrings).passed


# ---- 7.2 reverse ------------------------------------------------------------------------------------------


def reverse(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    out: List[torch.Tensor] = []
    while not stack.empty():
        out.append(stack.pop())
    return out


def test_reverse_check_passes_on_the_solution():
    assert ch07.check_reverse(torch.jit.script(reverse)).passed


def reverse_in_the_same_order(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack(tensors)
    return stack.items()


def reverse_without_the_class(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    return tensors[::-1]


def reverse_beside_an_unused_stack(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    return tensors[::-1]


def reverse_dropping_the_bottom(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    out: List[torch.Tensor] = []
    while stack.size() > 1:
        out.append(stack.pop())
    return out


def test_a_changed_library_is_refused_instead_of_aborting_the_process():
    same = torchscript.load_library_source("test_torchscript_exercises", SOURCE, opencv=True)
    assert same.exists()
    with pytest.raises(RuntimeError, match="Restart the kernel"):
        torchscript.load_library_source("test_torchscript_exercises", SOURCE + "// changed", opencv=True)


def test_a_second_torch_library_for_a_namespace_aborts_the_process(tmp_path):
    """What load_library_source protects against, shown in a throwaway process."""
    import shutil
    import signal

    first = torchscript.ops_library()
    copy = shutil.copy(first, tmp_path / "copy_of_the_library.so")  # another file: dlopen loads it again
    result = torchscript.load_both_in_fresh_process(first, copy)
    assert result.returncode == -signal.SIGABRT
    assert "Only a single TORCH_LIBRARY can be used to register the namespace workbook_cv" in result.stderr


# ---- 6.1 and 7.1 in the notebooks: the stub, then a corrected library, in one process ---------------------


def notebook_string(chapter: str, grade_id: str, *, stub: bool) -> str:
    """The C++ source string that the exercise cell assigns (first statement), as solution or as stub."""
    notebook = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    source = generate.stub_source(cell.source) if stub else cell.source
    return ast.literal_eval(ast.parse(source).body[0].value)


def test_a_corrected_gaussian_blur_loads_after_the_stub_without_a_restart():
    sources = [notebook_string("06_torchscript_custom_ops", "ch06-gaussian-blur", stub=stub) for stub in (True, False)]
    stub_ops, solved_ops = (fresh_library.ops("workbook_blur", source, opencv=True) for source in sources)
    assert ch06.check_gaussian_blur(stub_ops.gaussian_blur).status == checking.NOT_ATTEMPTED
    assert ch06.check_gaussian_blur(solved_ops.gaussian_blur).passed


def test_a_corrected_recent_strings_loads_after_the_stub_without_a_restart():
    sources = [
        notebook_string("07_torchscript_custom_classes", "ch07-recent-strings", stub=stub) for stub in (True, False)
    ]
    stub_classes, solved_classes = (fresh_library.classes("workbook_recent", source) for source in sources)
    assert ch07.check_recent_strings(stub_classes.RecentStrings).status == checking.NOT_ATTEMPTED
    assert ch07.check_recent_strings(solved_classes.RecentStrings).passed


def test_a_source_without_the_namespace_word_is_refused():
    with pytest.raises(ValueError, match="under the word NAMESPACE"):
        fresh_library.load("workbook_blur", "TORCH_LIBRARY(fixed, m) {}")


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


def test_thumbnail_check_passes_on_the_solution():
    assert ch06.check_thumbnail(Thumbnail).passed


def test_thumbnail_stub_is_not_attempted():
    assert ch06.check_thumbnail(ThumbnailStub).status == checking.NOT_ATTEMPTED


# ---- 7.3 Accumulator --------------------------------------------------------------------------------------


class Accumulator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.history = torch.classes.workbook_classes.TensorStack([])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        return torch.stack(self.history.items()).sum(dim=0)

    @torch.jit.export
    def reset(self) -> int:
        held = self.history.size()
        while not self.history.empty():
            self.history.pop()
        return held


class AccumulatorStub(Accumulator):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("not attempted yet")


class AccumulatorReturnsTheInput(Accumulator):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        return x


class AccumulatorResetKeepsItems(Accumulator):
    @torch.jit.export
    def reset(self) -> int:
        return self.history.size()


class AccumulatorWithAList(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.history: List[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.append(x)
        return torch.stack(self.history).sum(dim=0)


class AccumulatorOfTheShownShape(Accumulator):
    """Sums into zeros of the shape the notebook's check used to show, 3 x 4."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        total = torch.zeros(3, 4)
        for item in self.history.items():
            total = total + item
        return total


class AccumulatorInFloat32(Accumulator):
    """Sums into a float32 buffer, whatever the inputs' dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        total = torch.zeros(x.shape)
        for item in self.history.items():
            total += item
        return total


class AccumulatorResetCountsAfterPopping(Accumulator):
    @torch.jit.export
    def reset(self) -> int:
        while not self.history.empty():
            self.history.pop()
        return self.history.size()


def test_accumulator_check_passes_on_the_solution():
    assert ch07.check_accumulator(Accumulator).passed


def test_accumulator_stub_is_not_attempted():
    assert ch07.check_accumulator(AccumulatorStub).status == checking.NOT_ATTEMPTED


# ---- the catalogue ----------------------------------------------------------------------------------------


def blur(name):
    return lambda: ch06.check_gaussian_blur(mistake(name))


def scripted(function):
    return lambda: ch06.check_blur_then_warp(torch.jit.script(function))


def reversal(function):
    return lambda: ch07.check_reverse(torch.jit.script(function))


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
    # 7.1 RecentStrings
    WrongAnswer(
        "7.1",
        "wrong math",
        "__setstate__ forgets the capacity",
        lambda: ch07.check_recent_strings(mistake("ForgetsCapacity")),
        ("after torch.jit.save and torch.jit.load", "capacity() 10"),
    ),
    WrongAnswer(
        "7.1",
        "wrong math",
        "capacity rebuilt from the number of saved strings",
        lambda: ch07.check_recent_strings(mistake("CapacityFromCount")),
        ("save the capacity itself in the state",),
    ),
    WrongAnswer(
        "7.1",
        "shown sizes only",
        "push keeps the three the notebook shows",
        lambda: ch07.check_recent_strings(mistake("KeepsThree")),
        ("into RecentStrings(1)", "the newest 1"),
    ),
    WrongAnswer(
        "7.1",
        "wrong math",
        "off by one: keeps capacity - 1",
        lambda: ch07.check_recent_strings(mistake("OffByOne")),
        ("items() is []",),
    ),
    WrongAnswer(
        "7.1",
        "hard-coded",
        "__setstate__ rebuilds the notebook's ['c', 'd', 'e']",
        lambda: ch07.check_recent_strings(mistake("HardCodedState")),
        ("after torch.jit.save and torch.jit.load",),
    ),
    # 7.2 reverse
    WrongAnswer("7.2", "wrong math", "same order", reversal(reverse_in_the_same_order), ("pops",)),
    WrongAnswer("7.2", "concept skipped", "slicing, no stack", reversal(reverse_without_the_class), ("never uses",)),
    WrongAnswer(
        "7.2",
        "concept skipped",
        "a stack filled, then a slice returned",
        reversal(reverse_beside_an_unused_stack),
        ("never pops",),
    ),
    WrongAnswer(
        "7.2",
        "wrong math",
        "off by one: the bottom tensor is dropped",
        reversal(reverse_dropping_the_bottom),
        ("should return a list of",),
    ),
    # 7.3 Accumulator
    WrongAnswer(
        "7.3",
        "wrong math",
        "returns the input",
        lambda: ch07.check_accumulator(AccumulatorReturnsTheInput),
        ("the result of call 2",),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "reset() leaves the items",
        lambda: ch07.check_accumulator(AccumulatorResetKeepsItems),
        ("reset() returned", "it should empty the stack"),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "reset() counts after popping",
        lambda: ch07.check_accumulator(AccumulatorResetCountsAfterPopping),
        ("reset() returned 0",),
    ),
    WrongAnswer(
        "7.3",
        "concept skipped",
        "a Python list instead of the stack",
        lambda: ch07.check_accumulator(AccumulatorWithAList),
        ("a torch.classes.workbook_classes.TensorStack; got list",),
    ),
    WrongAnswer(
        "7.3",
        "shown sizes only",
        "sums into zeros(3, 4)",
        lambda: ch07.check_accumulator(AccumulatorOfTheShownShape),
        ("call 1 of the scripted Accumulator",),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "a float32 sum of float64 inputs",
        lambda: ch07.check_accumulator(AccumulatorInFloat32),
        ("float64 inputs", "has dtype torch.float32"),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
