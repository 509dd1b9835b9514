// CPU kernel of workbook_cv::warp_perspective: OpenCV does the work on the tensor's own memory.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <array>
#include <cmath>

namespace workbook_cv {
namespace {

// OpenCV's remap (which warpPerspective uses) indexes pixels with 16-bit shorts.
constexpr int64_t kMaxSide = 32766;
constexpr int64_t kMaxChannels = 4;

at::Tensor warp_perspective_cpu(const at::Tensor& image, const at::Tensor& warp, int64_t height, int64_t width) {
  TORCH_CHECK(image.device().is_cpu(), "warp_perspective: image must be a CPU tensor, got one on ", image.device());
  TORCH_CHECK(image.scalar_type() == at::kFloat, "warp_perspective: image must be float32, got ", image.scalar_type());
  TORCH_CHECK(image.dim() == 2 || image.dim() == 3,
              "warp_perspective: image must be 2-D (H x W) or 3-D (H x W x C), got ", image.dim(),
              "-D with shape ", image.sizes());
  const int64_t rows = image.size(0), cols = image.size(1);
  const int64_t channels = image.dim() == 3 ? image.size(2) : 1;
  TORCH_CHECK(rows >= 1 && cols >= 1 && rows <= kMaxSide && cols <= kMaxSide,
              "warp_perspective: image height and width must be between 1 and ", kMaxSide, ", got shape ",
              image.sizes());
  TORCH_CHECK(channels >= 1 && channels <= kMaxChannels, "warp_perspective: image must have 1 to ", kMaxChannels,
              " channels (its last dimension), got ", channels);
  TORCH_CHECK(warp.device().is_cpu(), "warp_perspective: warp must be a CPU tensor, got one on ", warp.device());
  TORCH_CHECK(warp.scalar_type() == at::kFloat || warp.scalar_type() == at::kDouble,
              "warp_perspective: warp must be float32 or float64, got ", warp.scalar_type());
  TORCH_CHECK(warp.dim() == 2 && warp.size(0) == 3 && warp.size(1) == 3,
              "warp_perspective: warp must be a 3 x 3 matrix, got shape ", warp.sizes());
  TORCH_CHECK(height >= 1 && height <= kMaxSide, "warp_perspective: height must be between 1 and ", kMaxSide,
              ", got ", height);
  TORCH_CHECK(width >= 1 && width <= kMaxSide, "warp_perspective: width must be between 1 and ", kMaxSide,
              ", got ", width);

  // The 3 x 3 matrix as doubles, read through its strides (any layout, any of the two dtypes).
  std::array<double, 9> m{};
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t offset = i * warp.stride(0) + j * warp.stride(1);
      m[i * 3 + j] = warp.scalar_type() == at::kFloat ? static_cast<double>(warp.const_data_ptr<float>()[offset])
                                                       : warp.const_data_ptr<double>()[offset];
      TORCH_CHECK(std::isfinite(m[i * 3 + j]), "warp_perspective: warp must be finite, got ", m[i * 3 + j],
                  " at (", i, ", ", j, ")");
    }
  }
  const double det = m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) +
                     m[2] * (m[3] * m[7] - m[4] * m[6]);
  TORCH_CHECK(det != 0.0, "warp_perspective: warp must be invertible, got a singular matrix");

  // cv::Mat headers over the tensors' memory: no copies (contiguous() copies only a strided view).
  const at::Tensor source = image.contiguous();
  const int type = CV_32FC(static_cast<int>(channels));
  const cv::Mat source_mat(static_cast<int>(rows), static_cast<int>(cols), type,
                           const_cast<float*>(source.const_data_ptr<float>()));
  const cv::Mat warp_mat(3, 3, CV_64F, m.data());

  at::Tensor output = image.dim() == 3 ? at::empty({height, width, channels}, source.options())
                                       : at::empty({height, width}, source.options());
  cv::Mat output_mat(static_cast<int>(height), static_cast<int>(width), type, output.mutable_data_ptr<float>());
  cv::warpPerspective(source_mat, output_mat, warp_mat, output_mat.size());
  // Same size and type, so OpenCV wrote into our buffer instead of allocating its own.
  TORCH_INTERNAL_ASSERT(output_mat.data == static_cast<uchar*>(output.data_ptr()));
  return output;
}

}  // namespace

TORCH_LIBRARY_IMPL(workbook_cv, CPU, m) {
  m.impl("warp_perspective", &warp_perspective_cpu);
}

}  // namespace workbook_cv
