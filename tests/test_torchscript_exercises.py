"""Exercise checks of chapters 06 and 07 pass on the solutions, report the stubs as not attempted, explain
wrong implementations, and accept a corrected library in the process that loaded the stub."""

import ast
from typing import List

import nbformat
import numpy as np
import pytest
import torch

from workbook import checking, fresh_library, generate, torchscript
from workbook.exercises import ch06, ch07

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

# The notebooks' solutions (6.1 and 7.1) under fixed names, plus deliberately wrong versions.
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

at::Tensor blur(const at::Tensor& image, int64_t ksize, double sigma) {
  TORCH_CHECK(image.device().is_cpu() && image.scalar_type() == at::kFloat,
              "gaussian_blur: image must be a float32 CPU tensor, got ", image.scalar_type(), " on ", image.device());
  TORCH_CHECK(image.dim() == 2 || (image.dim() == 3 && image.size(2) >= 1 && image.size(2) <= 4),
              "gaussian_blur: image must be H x W or H x W x C with 1 to 4 channels, got shape ", image.sizes());
  TORCH_CHECK(ksize > 0 && ksize % 2 == 1, "gaussian_blur: ksize must be odd and positive, got ", ksize);
  TORCH_CHECK(sigma > 0, "gaussian_blur: sigma must be positive, got ", sigma);
  const at::Tensor source = image.contiguous();
  const int channels = image.dim() == 3 ? static_cast<int>(image.size(2)) : 1;
  const int rows = static_cast<int>(image.size(0)), cols = static_cast<int>(image.size(1));
  const cv::Mat source_mat(rows, cols, CV_32FC(channels), const_cast<float*>(source.const_data_ptr<float>()));
  at::Tensor output = at::empty(source.sizes(), source.options());
  cv::Mat output_mat(rows, cols, CV_32FC(channels), output.mutable_data_ptr<float>());
  cv::GaussianBlur(source_mat, output_mat, cv::Size(static_cast<int>(ksize), static_cast<int>(ksize)), sigma);
  return output;
}

// Wrong: ignores sigma.
at::Tensor blur_sigma_ignored(const at::Tensor& image, int64_t ksize, double) { return blur(image, ksize, 1.0); }

// One C++ type per registered class (registering a type twice aborts at load time).
template <bool forget_capacity>
class RecentStrings : public torch::CustomClassHolder {
 public:
  explicit RecentStrings(int64_t capacity) : capacity_(capacity) {}
  void push(std::string word) {
    words_.push_back(std::move(word));
    if (static_cast<int64_t>(words_.size()) > capacity_) words_.pop_front();
  }
  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  std::vector<std::string> items() const { return {words_.begin(), words_.end()}; }

 private:
  int64_t capacity_;
  std::deque<std::string> words_;
};

using State = std::tuple<int64_t, std::vector<std::string>>;

template <bool forget_capacity>
void register_recent_strings(torch::Library& m, const char* name) {
  using RecentStrings = RecentStrings<forget_capacity>;
  m.class_<RecentStrings>(name)
      .def(torch::init<int64_t>())
      .def("push", &RecentStrings::push)
      .def("capacity", &RecentStrings::capacity)
      .def("size", &RecentStrings::size)
      .def("items", &RecentStrings::items)
      .def_pickle(
          [](const c10::intrusive_ptr<RecentStrings>& self) -> State { return {self->capacity(), self->items()}; },
          [](State state) -> c10::intrusive_ptr<RecentStrings> {
            // The wrong one forgets the saved capacity and uses 10.
            auto recent = c10::make_intrusive<RecentStrings>(forget_capacity ? 10 : std::get<0>(state));
            for (auto& word : std::get<1>(state)) recent->push(std::move(word));
            return recent;
          });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(workbook_cv, m) {
  m.def("gaussian_blur(Tensor image, int ksize, float sigma) -> Tensor");
}
TORCH_LIBRARY_IMPL(workbook_cv, CPU, m) {
  m.impl("gaussian_blur", &blur);
}
TORCH_LIBRARY(workbook_ch07, m) {
  register_recent_strings<false>(m, "RecentStrings");
}
TORCH_LIBRARY(workbook_exercise_mistakes, m) {
  m.def("gaussian_blur_sigma_ignored(Tensor image, int ksize, float sigma) -> Tensor", &blur_sigma_ignored);
  register_recent_strings<true>(m, "ForgetfulRecentStrings");
}
"""


@pytest.fixture(scope="module", autouse=True)
def libraries():
    torchscript.load_ops()
    torchscript.load_library_source("test_torchscript_exercises", SOURCE, opencv=True)


def test_gaussian_blur_check_passes_on_the_solution():
    assert ch06.check_gaussian_blur(torch.ops.workbook_cv.gaussian_blur).passed


def test_gaussian_blur_check_explains_a_wrong_kernel():
    outcome = ch06.check_gaussian_blur(torch.ops.workbook_exercise_mistakes.gaussian_blur_sigma_ignored)
    assert outcome.status == "failed"
    assert "gaussian_blur of a (12, 17) image with ksize=3, sigma=0.8 is wrong at index (0, 0)" in outcome.explanation


def test_gaussian_blur_check_wants_ksize_validated():
    def unchecked(image, ksize, sigma):
        return torch.ops.workbook_cv.gaussian_blur(image, ksize, sigma) if ksize % 2 else image.clone()

    outcome = ch06.check_gaussian_blur(unchecked)
    assert outcome.status == "failed" and "should raise: ksize must be odd" in outcome.explanation


def blur_then_warp(
    image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
) -> torch.Tensor:
    blurred = torch.ops.workbook_cv.gaussian_blur(image, ksize, sigma)
    return torch.ops.workbook_cv.warp_perspective(blurred, warp, height, width)


def test_blur_then_warp_check_passes_on_the_solution():
    assert ch06.check_blur_then_warp(torch.jit.script(blur_then_warp)).passed


def test_blur_then_warp_check_explains_mistakes():
    outcome = ch06.check_blur_then_warp(blur_then_warp)  # plain Python, not scripted
    assert outcome.status == "failed" and "@torch.jit.script" in outcome.explanation

    @torch.jit.script
    def warp_then_blur(
        image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
    ) -> torch.Tensor:
        warped = torch.ops.workbook_cv.warp_perspective(image, warp, height, width)
        return torch.ops.workbook_cv.gaussian_blur(warped, ksize, sigma)

    outcome = ch06.check_blur_then_warp(warp_then_blur)
    assert outcome.status == "failed" and "is wrong at index" in outcome.explanation

    @torch.jit.script
    def warp_only(
        image: torch.Tensor, warp: torch.Tensor, height: int, width: int, ksize: int, sigma: float
    ) -> torch.Tensor:
        return torch.ops.workbook_cv.warp_perspective(image, warp, height, width)

    outcome = ch06.check_blur_then_warp(warp_only)
    assert outcome.status == "failed" and "never calls gaussian_blur" in outcome.explanation


def test_recent_strings_check_passes_on_the_solution():
    assert ch07.check_recent_strings(torch.classes.workbook_ch07.RecentStrings).passed


def test_recent_strings_check_explains_a_lost_capacity():
    outcome = ch07.check_recent_strings(torch.classes.workbook_exercise_mistakes.ForgetfulRecentStrings)
    assert outcome.status == "failed"
    assert "after torch.jit.save and torch.jit.load, capacity() is 10, expected 3" in outcome.explanation


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


def test_reverse_check_explains_mistakes():
    @torch.jit.script
    def same_order(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
        stack = torch.classes.workbook_classes.TensorStack(tensors)
        return stack.items()

    outcome = ch07.check_reverse(same_order)
    assert outcome.status == "failed" and "element 0 of the result is wrong" in outcome.explanation

    @torch.jit.script
    def without_the_class(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
        return tensors[::-1]

    outcome = ch07.check_reverse(without_the_class)
    assert outcome.status == "failed" and "never uses" in outcome.explanation


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


def test_thumbnail_check_passes_on_the_solution():
    assert ch06.check_thumbnail(Thumbnail).passed


def test_thumbnail_stub_is_not_attempted():
    assert ch06.check_thumbnail(ThumbnailStub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (ThumbnailAlwaysAverages, "(25, 50) image has shape (16,), expected (16, 16)"),
        (ThumbnailSwapsSides, "is wrong at index"),
        (ThumbnailWithNumpy, "TorchScript cannot compile Thumbnail"),
    ],
)
def test_thumbnail_check_explains_wrong_answers(wrong, says):
    outcome = ch06.check_thumbnail(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, outcome


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


def test_accumulator_check_passes_on_the_solution():
    assert ch07.check_accumulator(Accumulator).passed


def test_accumulator_stub_is_not_attempted():
    assert ch07.check_accumulator(AccumulatorStub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (AccumulatorReturnsTheInput, "the result of call 2"),
        (AccumulatorResetKeepsItems, "reset() returned 2 and left 2 tensor(s)"),
        (AccumulatorWithAList, "a torch.classes.workbook_classes.TensorStack; got list"),
    ],
)
def test_accumulator_check_explains_wrong_answers(wrong, says):
    outcome = ch07.check_accumulator(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, outcome
