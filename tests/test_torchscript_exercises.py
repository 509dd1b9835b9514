"""Exercise checks of chapters 06 and 07 pass on the solutions, report the stubs as not attempted, reject a
catalogue of wrong and cheating answers with a message that says what is wrong (WRONG_ANSWERS), and accept a
corrected library in the process that loaded the stub."""

import ast
import functools
import warnings
from typing import List

import cv2
import nbformat
import numpy as np
import pytest
import torch
import wrong_answers
from wrong_answers import WrongAnswer

from workbook.build import fresh_namespace
from workbook.course import checking, generate
from workbook.exercises import ch06, ch07
from workbook.ops import warp_perspective

pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated"
)  # any category: 2.14 says FutureWarning

# One build for every C++ answer of 6.1 and 7.1: the reference solutions under fixed names (the blur as a
# fragment of workbook_cv, as chapter 06 says another library may add one), and the wrong answers.
SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <array>
#include <deque>
#include <sstream>
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
  kKsizeUnchecked,
  kChannelCountUnchecked,
  kColumnsUnchecked,
  kInPlace,
  kEmptyLike,
  kBorderConstant,
  kStub
};

template <Blur mistake>
at::Tensor blur(const at::Tensor& image, int64_t ksize, double sigma) {
  if constexpr (mistake == kStub) {
    TORCH_CHECK(false, "gaussian_blur: not attempted yet");
  }
  if constexpr (mistake != kAnyDtype) {
    TORCH_CHECK(image.device().is_cpu() && image.scalar_type() == at::kFloat,
                "gaussian_blur: image must be a float32 CPU tensor, got ", image.scalar_type(), " on ", image.device());
  }
  if constexpr (mistake == kChannelCountUnchecked) {
    TORCH_CHECK(image.dim() == 2 || image.dim() == 3, "gaussian_blur: image must be H x W or H x W x C, got shape ",
                image.sizes());
  } else if constexpr (mistake != kShapeUnchecked) {
    TORCH_CHECK(image.dim() == 2 || (image.dim() == 3 && image.size(2) >= 1 && image.size(2) <= 4),
                "gaussian_blur: image must be H x W or H x W x C with 1 to 4 channels, got shape ", image.sizes());
  }
  if constexpr (mistake == kColumnsUnchecked) {
    TORCH_CHECK(image.size(0) >= 1, "gaussian_blur: image must have at least one row, got shape ", image.sizes());
  } else if constexpr (mistake != kShapeUnchecked && mistake != kEmptyUnchecked) {
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
  const cv::Size size(static_cast<int>(ksize), static_cast<int>(ksize));
  if constexpr (mistake == kInPlace) {  // blurs the image itself (a contiguous one is `source`), returns it
    cv::Mat in_place = source_mat;
    cv::GaussianBlur(source_mat, in_place, size, sigma);
    return source;
  }
  // empty_like keeps a strided image's strides: the packed rows OpenCV writes are then read back transposed.
  at::Tensor output = mistake == kEmptyLike ? at::empty_like(image)
                                            : at::empty(source.sizes(), source.options().dtype(at::kFloat));
  cv::Mat output_mat(rows, cols, CV_32FC(channels), output.mutable_data_ptr<float>());
  cv::GaussianBlur(source_mat, output_mat, size, mistake == kSigmaIgnored ? 1.0 : sigma, 0,
                   mistake == kBorderConstant ? cv::BORDER_CONSTANT : cv::BORDER_DEFAULT);
  return output;
}

enum Recent {
  kKeeps,
  kForgetsCapacity,
  kCapacityFromCount,
  kKeepsThree,
  kOffByOne,
  kHardCodedState,
  kRingOfEight,
  kCommaJoinedState,
  kSixCharacters
};

// One C++ type per registered class (registering a type twice aborts at load time).
template <Recent mistake>
class RecentStrings : public torch::CustomClassHolder {
 public:
  explicit RecentStrings(int64_t capacity) : capacity_(capacity) {
    TORCH_CHECK(capacity >= 1, "RecentStrings: capacity must be at least 1, got ", capacity);
  }
  void push(std::string word) {
    if constexpr (mistake == kRingOfEight) {  // a fixed ring of 8 slots: right for capacities up to 8
      ring_[next_++ % ring_.size()] = std::move(word);
      held_ = std::min({held_ + 1, capacity_, static_cast<int64_t>(ring_.size())});
      return;
    }
    if constexpr (mistake == kSixCharacters) word.resize(std::min<size_t>(word.size(), 6));
    words_.push_back(std::move(word));
    const int64_t limit = mistake == kKeepsThree ? 3 : mistake == kOffByOne ? capacity_ - 1 : capacity_;
    while (static_cast<int64_t>(words_.size()) > limit && !words_.empty()) words_.pop_front();
  }
  int64_t capacity() const { return capacity_; }
  int64_t size() const { return mistake == kRingOfEight ? held_ : static_cast<int64_t>(words_.size()); }
  std::vector<std::string> items() const {
    if constexpr (mistake == kRingOfEight) {
      std::vector<std::string> items;
      for (int64_t i = next_ - held_; i < next_; ++i) items.push_back(ring_[i % ring_.size()]);
      return items;
    }
    return {words_.begin(), words_.end()};
  }

 private:
  int64_t capacity_;
  std::deque<std::string> words_;
  std::array<std::string, 8> ring_;
  int64_t next_ = 0, held_ = 0;
};

using State = std::tuple<int64_t, std::vector<std::string>>;
using JoinedState = std::tuple<int64_t, std::string>;  // the strings joined with commas

template <Recent mistake>
void register_recent_strings(torch::Library& m, const char* name) {
  using Class = RecentStrings<mistake>;
  auto registered = m.class_<Class>(name)
                        .def(torch::init<int64_t>())
                        .def("push", &Class::push)
                        .def("capacity", &Class::capacity)
                        .def("size", &Class::size)
                        .def("items", &Class::items);
  if constexpr (mistake == kCommaJoinedState) {
    registered.def_pickle(
        [](const c10::intrusive_ptr<Class>& self) -> JoinedState {
          std::string joined;
          for (const auto& word : self->items()) joined += (joined.empty() ? "" : ",") + word;
          return {self->capacity(), joined};
        },
        [](JoinedState state) -> c10::intrusive_ptr<Class> {
          auto recent = c10::make_intrusive<Class>(std::get<0>(state));
          std::stringstream joined(std::get<1>(state));
          for (std::string word; std::getline(joined, word, ',');) recent->push(word);
          return recent;
        });
  } else {
    registered.def_pickle(
        [](const c10::intrusive_ptr<Class>& self) -> State { return {self->capacity(), self->items()}; },
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
TORCH_LIBRARY(NAMESPACE, m) {
  m.def("blur_sigma_ignored(Tensor image, int ksize, float sigma) -> Tensor", &blur<kSigmaIgnored>);
  m.def("blur_not_contiguous(Tensor image, int ksize, float sigma) -> Tensor", &blur<kNotContiguous>);
  m.def("blur_any_dtype(Tensor image, int ksize, float sigma) -> Tensor", &blur<kAnyDtype>);
  m.def("blur_one_or_three_channels(Tensor image, int ksize, float sigma) -> Tensor", &blur<kOneOrThreeChannels>);
  m.def("blur_shape_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kShapeUnchecked>);
  m.def("blur_empty_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kEmptyUnchecked>);
  m.def("blur_ksize_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kKsizeUnchecked>);
  m.def("blur_channel_count_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kChannelCountUnchecked>);
  m.def("blur_columns_unchecked(Tensor image, int ksize, float sigma) -> Tensor", &blur<kColumnsUnchecked>);
  m.def("blur_in_place(Tensor image, int ksize, float sigma) -> Tensor", &blur<kInPlace>);
  m.def("blur_into_empty_like(Tensor image, int ksize, float sigma) -> Tensor", &blur<kEmptyLike>);
  m.def("blur_border_constant(Tensor image, int ksize, float sigma) -> Tensor", &blur<kBorderConstant>);
  // A C++ stub whose CPU kernel the tests override from Python (blur_python_over_cpp).
  m.def("blur_stub(Tensor image, int ksize, float sigma) -> Tensor");
  register_recent_strings<kForgetsCapacity>(m, "ForgetsCapacity");
  register_recent_strings<kCapacityFromCount>(m, "CapacityFromCount");
  register_recent_strings<kKeepsThree>(m, "KeepsThree");
  register_recent_strings<kOffByOne>(m, "OffByOne");
  register_recent_strings<kHardCodedState>(m, "HardCodedState");
  register_recent_strings<kRingOfEight>(m, "RingOfEight");
  register_recent_strings<kCommaJoinedState>(m, "CommaJoinedState");
  register_recent_strings<kSixCharacters>(m, "SixCharacters");
}
TORCH_LIBRARY_IMPL(NAMESPACE, CPU, m) {
  m.impl("blur_stub", &blur<kStub>);
}
"""


@pytest.fixture(scope="module", autouse=True)
def libraries():
    load_libraries()


def load_libraries() -> str:
    """Load the chapter's library and SOURCE's; return SOURCE's namespace."""
    warp_perspective.load_ops()
    return fresh_namespace.load("wb_test_mistakes", SOURCE, opencv=True)


def mistake(name):
    """A wrong answer's operator or class from SOURCE's build (built and loaded on first use)."""
    namespace = load_libraries()
    return getattr(getattr(torch.ops, namespace), name, None) or getattr(getattr(torch.classes, namespace), name)


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


@functools.cache
def blur_as_python_library_op():
    """The same through torch.library.Library's define and impl: cheaper to call for the first time than a
    custom_op (whose first call imports torch's compiler stack)."""
    library = torch.library.Library("workbook_python_kernels", "DEF")
    library.define("gaussian_blur(Tensor image, int ksize, float sigma) -> Tensor")
    library.impl("gaussian_blur", blur_with_cv2, "CPU")
    return library, torch.ops.workbook_python_kernels.gaussian_blur


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
    blurred = torch.ops.workbook_python_kernels.gaussian_blur(image, ksize, sigma)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, height, width)


def scripted_with_a_python_operator():
    blur_as_python_library_op()  # registers workbook_python_kernels::gaussian_blur before scripting
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


def reverse_by_slicing_beside_a_pop_that_never_runs(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack(tensors)
    if stack.size() > 1000000:
        stack.pop()
    return tensors[::-1]


def reverse_by_slicing_beside_one_pop(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    out = tensors[::-1]
    stack = torch.classes.workbook_classes.TensorStack(out)
    if not stack.empty():
        stack.pop()
    return out


def reverse_with_a_comprehension(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """Right, written differently."""
    stack = torch.classes.workbook_classes.TensorStack(tensors)
    return [stack.pop() for _ in range(len(tensors))]


def reverse_by_concatenation(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """Right, written differently: a new list on every pop."""
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    out: List[torch.Tensor] = []
    while not stack.empty():
        out = out + [stack.pop()]
    return out


# ---- 6.1 and 7.1 in the notebooks: the stub, then a corrected library, in one process ---------------------


def notebook_string(chapter: str, grade_id: str, *, stub: bool) -> str:
    """The C++ source string that the exercise cell assigns (first statement), as solution or as stub."""
    notebook = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    source = generate.stub_source(cell.source) if stub else cell.source
    return ast.literal_eval(ast.parse(source).body[0].value)


def test_a_corrected_gaussian_blur_loads_after_the_stub_without_a_restart():
    sources = [notebook_string("06_torchscript_custom_ops", "ch06-gaussian-blur", stub=stub) for stub in (True, False)]
    stub_ops, solved_ops = (fresh_namespace.ops("workbook_blur", source, opencv=True) for source in sources)
    assert ch06.check_gaussian_blur(stub_ops.gaussian_blur).status == checking.NOT_ATTEMPTED
    assert ch06.check_gaussian_blur(solved_ops.gaussian_blur).passed


def test_a_corrected_recent_strings_loads_after_the_stub_without_a_restart():
    sources = [
        notebook_string("07_torchscript_custom_classes", "ch07-recent-strings", stub=stub) for stub in (True, False)
    ]
    stub_classes, solved_classes = (fresh_namespace.classes("workbook_recent", source) for source in sources)
    assert ch07.check_recent_strings(stub_classes.RecentStrings).status == checking.NOT_ATTEMPTED
    assert ch07.check_recent_strings(solved_classes.RecentStrings).passed


def test_a_source_without_the_namespace_word_is_refused():
    with pytest.raises(ValueError, match="under the word NAMESPACE"):
        fresh_namespace.load("workbook_blur", "TORCH_LIBRARY(fixed, m) {}")


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


class AccumulatorWithARunningTotal(Accumulator):
    """Pushes onto the stack, but sums into a tensor attribute of its own: the stack's contents unused."""

    def __init__(self):
        super().__init__()
        self.total = torch.zeros(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        self.total = x.clone() if self.history.size() == 1 else self.total + x
        return self.total


class AccumulatorSummingInPlace(Accumulator):
    """Adds into the first tensor on the stack (an input of the caller's) with +=."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        items = self.history.items()
        total = items[0]
        for i in range(1, len(items)):
            total += items[i]
        return total


class AccumulatorResettingWithANewStack(Accumulator):
    """Right, written differently: reset() replaces the stack."""

    @torch.jit.export
    def reset(self) -> int:
        held = self.history.size()
        self.history = torch.classes.workbook_classes.TensorStack([])
        return held


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
    WrongAnswer(
        "7.1",
        "shown sizes only",
        "a ring of 8 slots: right up to capacity 8",
        lambda: ch07.check_recent_strings(mistake("RingOfEight")),
        ("items() is", "the newest"),
    ),
    WrongAnswer(
        "7.1",
        "wrong math",
        "the strings saved joined with commas",
        lambda: ch07.check_recent_strings(mistake("CommaJoinedState")),
        ("after torch.jit.save and torch.jit.load", "items()"),
    ),
    WrongAnswer(
        "7.1",
        "shown sizes only",
        "keeps the first 6 characters (the longest word the old check pushed)",
        lambda: ch07.check_recent_strings(mistake("SixCharacters")),
        ("items() is",),
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
    WrongAnswer(
        "7.2",
        "concept skipped",
        "slicing, beside a pop that never runs",
        reversal(reverse_by_slicing_beside_a_pop_that_never_runs),
        ("nothing reverse pops", "reaches the list it returns"),
    ),
    WrongAnswer(
        "7.2",
        "concept skipped",
        "slicing, beside one pop whose tensor is dropped",
        reversal(reverse_by_slicing_beside_one_pop),
        ("nothing reverse pops",),
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
    WrongAnswer(
        "7.3",
        "concept skipped",
        "a running total kept beside the stack",
        lambda: ch07.check_accumulator(AccumulatorWithARunningTotal),
        ("pushed onto self.history from Python", "is wrong at index"),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "+= into the first tensor on the stack",
        lambda: ch07.check_accumulator(AccumulatorSummingInPlace),
        ("changed the tensor given to call 1",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)


# ---- right answers written differently pass (a false rejection is a defect too) -----------------------


RIGHT_ANSWERS = {
    "6.2 keyword arguments": scripted(blur_then_warp_with_keywords),
    "6.3 channels averaged before the warp": lambda: ch06.check_thumbnail(ThumbnailAveragingFirst),
    "7.2 a list comprehension of pops": reversal(reverse_with_a_comprehension),
    "7.2 a new list on every pop": reversal(reverse_by_concatenation),
    "7.3 reset() replaces the stack": lambda: ch07.check_accumulator(AccumulatorResettingWithANewStack),
}


@pytest.mark.parametrize("name", RIGHT_ANSWERS)
def test_a_right_answer_written_differently_passes(name):
    outcome = RIGHT_ANSWERS[name]()
    assert outcome.passed, outcome
