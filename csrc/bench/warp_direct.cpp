// The benchmark's baseline for workbook_cv::warp_perspective: the same cv::warpPerspective call
// (bilinear, constant border 0, the output's size), made on cv::Mat headers over tensors the caller
// allocated once. The difference between the two is the operator's own cost: its checks, reading
// the matrix, allocating the output and the dispatcher.
//
//   torch.ops.wb_bench_cv.warp_perspective_into(image, warp, out)  # out: preallocated, written in place
//   torch.ops.wb_bench_cv.opencv_threads()                         # threads the system OpenCV uses,
//   torch.ops.wb_bench_cv.set_opencv_threads(1)                    # for every caller in this process
//
// Few headers, so the file compiles in seconds (workbook/bench/warp_cases.py builds it when the
// benchmark's warp section runs).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <opencv2/imgproc.hpp>

namespace {

// An H x W or H x W x C float32 tensor as a cv::Mat of C channels over the same memory.
cv::Mat mat_over(const at::Tensor& tensor, const char* name) {
  TORCH_CHECK(tensor.device().is_cpu() && tensor.scalar_type() == at::kFloat, "warp_perspective_into: ", name,
              " must be a float32 CPU tensor, got a ", tensor.scalar_type(), " tensor on ", tensor.device());
  TORCH_CHECK(tensor.is_contiguous(), "warp_perspective_into: ", name, " must be contiguous, got strides ",
              tensor.strides());
  TORCH_CHECK(tensor.dim() == 2 || (tensor.dim() == 3 && tensor.size(2) >= 1 && tensor.size(2) <= 4),
              "warp_perspective_into: ", name, " must be H x W or H x W x C with 1 to 4 channels, got shape ",
              tensor.sizes());
  const int channels = tensor.dim() == 3 ? static_cast<int>(tensor.size(2)) : 1;
  return cv::Mat(static_cast<int>(tensor.size(0)), static_cast<int>(tensor.size(1)), CV_32FC(channels),
                 tensor.data_ptr());
}

void warp_perspective_into(const at::Tensor& image, const at::Tensor& warp, const at::Tensor& out) {
  TORCH_CHECK(warp.device().is_cpu() && warp.scalar_type() == at::kDouble && warp.is_contiguous() &&
                  warp.sizes() == at::IntArrayRef({3, 3}),
              "warp_perspective_into: warp must be a contiguous 3 x 3 float64 CPU tensor, got shape ", warp.sizes(),
              " and dtype ", warp.scalar_type());
  const cv::Mat source = mat_over(image, "image");
  cv::Mat destination = mat_over(out, "out");
  TORCH_CHECK(source.type() == destination.type(), "warp_perspective_into: out must have image's channels, got ",
              destination.channels(), " and ", source.channels());
  const cv::Mat matrix(3, 3, CV_64F, warp.data_ptr());
  cv::warpPerspective(source, destination, matrix, destination.size());
  TORCH_INTERNAL_ASSERT(destination.data == out.data_ptr(), "OpenCV reallocated the output");
}

int64_t opencv_threads() {
  return cv::getNumThreads();
}

void set_opencv_threads(int64_t threads) {
  TORCH_CHECK(threads >= 1, "set_opencv_threads: threads must be at least 1, got ", threads);
  cv::setNumThreads(static_cast<int>(threads));
}

}  // namespace

TORCH_LIBRARY(wb_bench_cv, m) {
  m.def("warp_perspective_into(Tensor image, Tensor warp, Tensor(a!) out) -> ()", &warp_perspective_into);
  m.def("opencv_threads() -> int", &opencv_threads);
  m.def("set_opencv_threads(int threads) -> ()", &set_opencv_threads);
}
