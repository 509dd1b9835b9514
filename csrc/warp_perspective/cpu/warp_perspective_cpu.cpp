// CPU kernels of workbook_cv::warp_perspective (OpenCV does the work on the tensor's own memory) and
// of its gradient, workbook_cv::warp_perspective_backward.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace workbook_cv {
namespace {

// OpenCV's remap (which warpPerspective uses) indexes pixels with 16-bit shorts.
constexpr int64_t kMaxSide = 32766;
constexpr int64_t kMaxChannels = 4;

double determinant(const std::array<double, 9>& m) {
  return m[0] * (m[4] * m[8] - m[5] * m[7]) - m[1] * (m[3] * m[8] - m[5] * m[6]) + m[2] * (m[3] * m[7] - m[4] * m[6]);
}

// The inverse as cv::invert computes it for a 3 x 3 double matrix (cofactors times 1 / determinant),
// operation for operation, so that the backward maps pixels exactly as cv::warpPerspective does.
std::array<double, 9> inverse(const std::array<double, 9>& m) {
  const double d = 1. / determinant(m);
  return {(m[4] * m[8] - m[5] * m[7]) * d, (m[2] * m[7] - m[1] * m[8]) * d, (m[1] * m[5] - m[2] * m[4]) * d,
          (m[5] * m[6] - m[3] * m[8]) * d, (m[0] * m[8] - m[2] * m[6]) * d, (m[2] * m[3] - m[0] * m[5]) * d,
          (m[3] * m[7] - m[4] * m[6]) * d, (m[1] * m[6] - m[0] * m[7]) * d, (m[0] * m[4] - m[1] * m[3]) * d};
}

// The 3 x 3 matrix as doubles, read through its strides (any layout, either of two dtypes), checked.
std::array<double, 9> read_warp(const at::Tensor& warp, const char* op) {
  TORCH_CHECK(warp.defined(), op, ": warp must be a tensor, got None");
  TORCH_CHECK(warp.device().is_cpu(), op, ": warp must be a CPU tensor, got one on ", warp.device());
  TORCH_CHECK(warp.scalar_type() == at::kFloat || warp.scalar_type() == at::kDouble, op,
              ": warp must be float32 or float64, got ", warp.scalar_type());
  TORCH_CHECK(warp.dim() == 2 && warp.size(0) == 3 && warp.size(1) == 3, op,
              ": warp must be a 3 x 3 matrix, got shape ", warp.sizes());
  std::array<double, 9> m{};
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t offset = i * warp.stride(0) + j * warp.stride(1);
      m[i * 3 + j] = warp.scalar_type() == at::kFloat ? static_cast<double>(warp.const_data_ptr<float>()[offset])
                                                      : warp.const_data_ptr<double>()[offset];
      TORCH_CHECK(std::isfinite(m[i * 3 + j]), op, ": warp must be finite, got ", m[i * 3 + j], " at (", i, ", ", j,
                  ")");
    }
  }
  TORCH_CHECK(determinant(m) != 0.0, op, ": warp must be invertible, got a singular matrix");
  return m;
}

// Checks an image-like tensor (the image, or the gradient of an output): float32 on the CPU,
// H x W or H x W x C with 1 to 4 channels. Returns C (1 for a 2-D tensor).
int64_t check_image(const at::Tensor& image, const char* op, const char* name) {
  TORCH_CHECK(image.defined(), op, ": ", name, " must be a tensor, got None");
  TORCH_CHECK(image.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got one on ", image.device());
  TORCH_CHECK(image.scalar_type() == at::kFloat, op, ": ", name, " must be float32, got ", image.scalar_type());
  TORCH_CHECK(image.dim() == 2 || image.dim() == 3, op, ": ", name, " must be 2-D (H x W) or 3-D (H x W x C), got ",
              image.dim(), "-D with shape ", image.sizes());
  const int64_t channels = image.dim() == 3 ? image.size(2) : 1;
  TORCH_CHECK(image.size(0) >= 1 && image.size(1) >= 1 && image.size(0) <= kMaxSide && image.size(1) <= kMaxSide, op,
              ": ", name, " height and width must be between 1 and ", kMaxSide, ", got shape ", image.sizes());
  TORCH_CHECK(channels >= 1 && channels <= kMaxChannels, op, ": ", name, " must have 1 to ", kMaxChannels,
              " channels (its last dimension), got ", channels);
  return channels;
}

void check_side(int64_t value, const char* op, const char* name) {
  TORCH_CHECK(value >= 1 && value <= kMaxSide, op, ": ", name, " must be between 1 and ", kMaxSide, ", got ", value);
}

at::Tensor warp_perspective_cpu(const at::Tensor& image, const at::Tensor& warp, int64_t height, int64_t width) {
  constexpr const char* op = "warp_perspective";
  const int64_t channels = check_image(image, op, "image");
  std::array<double, 9> m = read_warp(warp, op);
  check_side(height, op, "height");
  check_side(width, op, "width");

  // cv::Mat headers over the tensors' memory: no copies (contiguous() copies only a strided view).
  const at::Tensor source = image.contiguous();
  const int type = CV_32FC(static_cast<int>(channels));
  const cv::Mat source_mat(static_cast<int>(image.size(0)), static_cast<int>(image.size(1)), type,
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

// The gradient of warp_perspective with respect to the image.
//
// Each output pixel is a weighted sum of (up to) four neighbouring image pixels, with weights that
// depend on the warp only, so the output is linear in the image and its gradient is the transpose
// (adjoint) of that sum: every output pixel hands grad_output * weight back to each of its four
// source pixels. The weights must be OpenCV's own, so the source position and the weights are
// computed exactly as OpenCV 4.x does inside cv::warpPerspective (INTER_LINEAR, BORDER_CONSTANT 0):
// - it inverts the matrix (the closed-form 3 x 3 inverse of cv::invert) and maps each output pixel
//   (x, y) back into the image, in double, blockwise: output columns in blocks of `block_width`,
//   X = (X0 + M[0] * x1) * W with X0 computed at the block's first column;
// - it rounds the source position to 1/32 pixel (INTER_TAB_SIZE) with round-half-to-even, so
//   x_source = X >> 5 and the fraction is (X & 31) / 32;
// - its bilinear weights are float products (1 - fy, fy) x (1 - fx, fx) from a table;
// - a neighbour outside the image reads the border value 0, so it receives no gradient.
at::Tensor warp_perspective_backward_cpu(const at::Tensor& grad, const at::Tensor& warp, int64_t image_height,
                                         int64_t image_width) {
  constexpr const char* op = "warp_perspective_backward";
  const int64_t channels = check_image(grad, op, "grad");
  const std::array<double, 9> forward = read_warp(warp, op);
  check_side(image_height, op, "image_height");
  check_side(image_width, op, "image_width");

  const std::array<double, 9> M = inverse(forward);
  const at::Tensor g = grad.contiguous();
  at::Tensor grad_image = grad.dim() == 3 ? at::zeros({image_height, image_width, channels}, g.options())
                                          : at::zeros({image_height, image_width}, g.options());
  const int height = static_cast<int>(g.size(0)), width = static_cast<int>(g.size(1));
  const float* g_data = g.const_data_ptr<float>();
  float* out = grad_image.mutable_data_ptr<float>();

  // OpenCV's block shape (WarpPerspectiveInvoker): 16 rows (fewer for short outputs), as many
  // columns as make 1024 pixels.
  constexpr int kBlock = 32;
  int block_height = std::min(kBlock / 2, height);
  const int block_width = std::min(kBlock * kBlock / block_height, width);
  constexpr int kTabSize = 32;  // INTER_TAB_SIZE: 1/32-pixel positions
  const float scale = 1.f / kTabSize;

  // One thread: neighbouring output pixels add into the same image pixels.
  for (int y = 0; y < height; ++y) {
    for (int block_x = 0; block_x < width; block_x += block_width) {
      const double X0 = M[0] * block_x + M[1] * y + M[2];
      const double Y0 = M[3] * block_x + M[4] * y + M[5];
      const double W0 = M[6] * block_x + M[7] * y + M[8];
      for (int x1 = 0; x1 < std::min(block_width, width - block_x); ++x1) {
        double W = W0 + M[6] * x1;
        W = W != 0 ? kTabSize / W : 0;
        const double fX = std::max(double(INT_MIN), std::min(double(INT_MAX), (X0 + M[0] * x1) * W));
        const double fY = std::max(double(INT_MIN), std::min(double(INT_MAX), (Y0 + M[3] * x1) * W));
        const int X = static_cast<int>(std::nearbyint(fX));  // round half to even, like cvRound
        const int Y = static_cast<int>(std::nearbyint(fY));
        const int sx = std::clamp(X >> 5, -32768, 32767);  // saturate_cast<short>
        const int sy = std::clamp(Y >> 5, -32768, 32767);
        const float fx = (X & (kTabSize - 1)) * scale, fy = (Y & (kTabSize - 1)) * scale;
        const float wx[2] = {1.f - fx, fx}, wy[2] = {1.f - fy, fy};
        const float* g_pixel = g_data + (static_cast<int64_t>(y) * width + block_x + x1) * channels;
        for (int dy = 0; dy < 2; ++dy) {
          const int64_t row = int64_t(sy) + dy;
          if (row < 0 || row >= image_height) continue;
          for (int dx = 0; dx < 2; ++dx) {
            const int64_t column = int64_t(sx) + dx;
            if (column < 0 || column >= image_width) continue;
            const float weight = wy[dy] * wx[dx];
            float* target = out + (row * image_width + column) * channels;
            for (int64_t c = 0; c < channels; ++c) target[c] += weight * g_pixel[c];
          }
        }
      }
    }
  }
  return grad_image;
}

}  // namespace

TORCH_LIBRARY_IMPL(workbook_cv, CPU, m) {
  m.impl("warp_perspective", &warp_perspective_cpu);
  m.impl("warp_perspective_backward", &warp_perspective_backward_cpu);
}

}  // namespace workbook_cv
