"""What the exercise tests of chapters 06 and 07 share: one build of the C++ answers of 6.1 and 7.1 (the
reference solutions under fixed names and the wrong answers), and the C++ source an exercise cell of
solutions/ assigns."""

import ast

import nbformat
import torch

from workbook.build import fresh_namespace
from workbook.course import generate
from workbook.ops import warp_perspective

# One build for every C++ answer of 6.1 and 7.1: the reference solutions under fixed names (the blur as a
# fragment of workbook_cv, as chapter 06 says another library may add one), and the wrong answers.
SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
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
  kForwardsToPython,
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
  if constexpr (mistake == kForwardsToPython) {  // the checks in C++, the blur in whatever blur_impl runs
    static const auto impl = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("NAMESPACE::blur_impl", "")
                                 .typed<at::Tensor(const at::Tensor&, int64_t, double)>();
    return impl.call(image, ksize, sigma);
  }
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
TORCH_LIBRARY(wb_test_ch07, m) {
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
  m.def("blur_forwards_to_python(Tensor image, int ksize, float sigma) -> Tensor", &blur<kForwardsToPython>);
  m.def("blur_impl(Tensor image, int ksize, float sigma) -> Tensor");  // its kernel comes from Python
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


def load_libraries() -> str:
    """Load chapter 06's library (workbook_cv, workbook_classes) and SOURCE's; return SOURCE's namespace."""
    warp_perspective.load_ops()
    return fresh_namespace.load("wb_test_mistakes", SOURCE, opencv=True)


def mistake(name):
    """A wrong answer's operator or class from SOURCE's build (built and loaded on first use)."""
    namespace = load_libraries()
    return getattr(getattr(torch.ops, namespace), name, None) or getattr(getattr(torch.classes, namespace), name)


def notebook_string(chapter: str, grade_id: str, *, stub: bool) -> str:
    """The C++ source string that the exercise cell assigns (first statement), as solution or as stub."""
    notebook = nbformat.read(generate.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    source = generate.stub_source(cell.source) if stub else cell.source
    return ast.literal_eval(ast.parse(source).body[0].value)
