// CUDA kernels of the wb_lltm ops (schema: ../lltm.cpp; CPU kernels: ../cpu/lltm_cpu.cpp).
//
// The math is the CPU file's, step for step (see the comment at its top). The split is the same too:
// the two matrix products go to ATen, which sends them to cuBLAS on a CUDA tensor; the elementwise
// steps between them run in one kernel per direction, each thread computing one (row, column)
// element of the state. Fusing them matters more on a GPU than on a CPU: each separate ATen call
// would be a kernel launch (a few microseconds) and a round trip through GPU memory.
//
// Every launch here
//   * runs on the *current* stream (c10::cuda::getCurrentCUDAStream()), so it is ordered after the
//     work that produced its inputs and before the work that reads its outputs, whatever stream
//     the caller chose with torch.cuda.stream(...);
//   * happens under a device guard (c10::cuda::CUDAGuard) set to the inputs' GPU, so a tensor on
//     cuda:1 is processed on cuda:1 even if the current device is cuda:0;
//   * is followed by C10_CUDA_KERNEL_LAUNCH_CHECK(), which turns a failed launch (bad grid size,
//     no kernel image for this GPU) into a RuntimeError at the call, not at some later call.
//
// Headers: c10/cuda/CUDAStream.h and CUDAGuard.h, not ATen/cuda/CUDAContext.h, which also pulls in
// cuBLAS and cuSPARSE headers this file does not need.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>

#include "../lltm_checks.h"
#include "../lltm_glue.h"

namespace wb_lltm {
namespace {

constexpr int kThreadsPerBlock = 256;
// A grid-stride loop lets a bounded grid cover any number of elements; 65535 blocks of 256 threads
// is far more than any GPU runs at once, so the cap never leaves the GPU idle.
constexpr int64_t kMaxBlocks = 65535;

int blocks_for(int64_t elements) {
  return static_cast<int>(std::min<int64_t>((elements + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxBlocks));
}

// One thread per element k of the (batch, state_size) state, row = k / state_size.
// gates is the contiguous (batch, 3 * state_size) tensor [input | output | candidate] per row; each
// thread reads the pre-activations of its three gates and overwrites them with the activated values.
template <typename scalar_t>
__global__ void lltm_forward_kernel(scalar_t* __restrict__ gates, const scalar_t* __restrict__ c_old,
                                    scalar_t* __restrict__ h_out, scalar_t* __restrict__ c_out, int64_t elements,
                                    int64_t state_size) {
  using opmath_t = at::opmath_type<scalar_t>;  // float for half/bfloat16, else scalar_t itself
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < elements; k += stride) {
    const int64_t row = k / state_size;
    scalar_t* g = gates + row * 3 * state_size + k % state_size;  // this element's input gate
    const opmath_t i = opmath_t(1) / (opmath_t(1) + exp(-opmath_t(g[0])));
    const opmath_t o = opmath_t(1) / (opmath_t(1) + exp(-opmath_t(g[state_size])));
    const opmath_t pre = g[2 * state_size];
    const opmath_t z = pre > opmath_t(0) ? pre : expm1(pre);  // elu with alpha = 1
    const opmath_t c = opmath_t(c_old[k]) + z * i;
    g[0] = i;
    g[state_size] = o;
    g[2 * state_size] = z;
    c_out[k] = c;
    h_out[k] = tanh(c) * o;
  }
}

// d_gates is laid out like gates (batch, 3 * state_size).
template <typename scalar_t>
__global__ void lltm_backward_kernel(const scalar_t* __restrict__ gh, const scalar_t* __restrict__ gc,
                                     const scalar_t* __restrict__ c_new, const scalar_t* __restrict__ gates,
                                     scalar_t* __restrict__ d_g, scalar_t* __restrict__ d_c_old, int64_t elements,
                                     int64_t state_size) {
  using opmath_t = at::opmath_type<scalar_t>;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < elements; k += stride) {
    const int64_t offset = (k / state_size) * 3 * state_size + k % state_size;  // input-gate column
    const opmath_t i = gates[offset];
    const opmath_t o = gates[offset + state_size];
    const opmath_t z = gates[offset + 2 * state_size];
    const opmath_t tanh_c = tanh(opmath_t(c_new[k]));
    // new_h = tanh(new_cell) * o: the gradient reaches new_cell through tanh and adds to grad_cell.
    const opmath_t d_c = opmath_t(gc[k]) + opmath_t(gh[k]) * o * (opmath_t(1) - tanh_c * tanh_c);
    const opmath_t d_i = d_c * z * i * (opmath_t(1) - i);  // sigmoid' = s (1 - s)
    const opmath_t d_o = opmath_t(gh[k]) * tanh_c * o * (opmath_t(1) - o);
    // elu'(x) = 1 for x > 0, exp(x) = elu(x) + 1 otherwise; elu(x) > 0 exactly when x > 0.
    const opmath_t elu_slope = z > opmath_t(0) ? opmath_t(1) : z + opmath_t(1);
    d_g[offset] = d_i;
    d_g[offset + state_size] = d_o;
    d_g[offset + 2 * state_size] = d_c * i * elu_slope;
    d_c_old[k] = d_c;
  }
}

void check_on_cuda(const char* op, const at::Tensor& first, const char* name) {
  // The dispatcher chose this kernel because some argument is a CUDA tensor; the shared checks then
  // insist that all arguments are on the device of `first`.
  TORCH_CHECK(first.is_cuda(), op, ": ", name, " must be a CUDA tensor like the other arguments, got one on ",
              first.device());
}

ForwardOutputs lltm_forward_cuda(const at::Tensor& input, const at::Tensor& weights, const at::Tensor& bias,
                                 const at::Tensor& old_h, const at::Tensor& old_cell) {
  TORCH_CHECK(input.defined(), "lltm_forward: input is an undefined tensor");
  check_on_cuda("lltm_forward", input, "input");
  const auto [batch_size, state_size, input_features] = check_forward_arguments(input, weights, bias, old_h, old_cell);
  (void)input_features;
  const c10::cuda::CUDAGuard device_guard(input.device());

  ForwardTensors t = prepare_forward(input, weights, bias, old_h, old_cell, batch_size, state_size);

  const int64_t elements = batch_size * state_size;
  if (elements > 0) {  // a launch with zero blocks is an error, not a no-op
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(), "lltm_forward_cuda", [&] {
      lltm_forward_kernel<scalar_t><<<blocks_for(elements), kThreadsPerBlock, 0, stream>>>(
          t.gates.mutable_data_ptr<scalar_t>(), t.old_cell.const_data_ptr<scalar_t>(),
          t.new_h.mutable_data_ptr<scalar_t>(), t.new_cell.mutable_data_ptr<scalar_t>(), elements, state_size);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  return t.outputs();
}

BackwardOutputs lltm_backward_cuda(const at::Tensor& grad_h, const at::Tensor& grad_cell, const at::Tensor& new_cell,
                                   const at::Tensor& gates, const at::Tensor& X, const at::Tensor& weights) {
  TORCH_CHECK(grad_h.defined(), "lltm_backward: grad_h is an undefined tensor");
  check_on_cuda("lltm_backward", grad_h, "grad_h");
  const auto [batch_size, state_size, input_features] =
      check_backward_arguments(grad_h, grad_cell, new_cell, gates, X, weights);
  (void)input_features;
  const c10::cuda::CUDAGuard device_guard(grad_h.device());

  BackwardTensors t = prepare_backward(grad_h, grad_cell, new_cell, gates, batch_size, state_size);
  const int64_t elements = batch_size * state_size;
  if (elements > 0) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad_h.scalar_type(), "lltm_backward_cuda", [&] {
      lltm_backward_kernel<scalar_t><<<blocks_for(elements), kThreadsPerBlock, 0, stream>>>(
          t.grad_h.const_data_ptr<scalar_t>(), t.grad_cell.const_data_ptr<scalar_t>(),
          t.new_cell.const_data_ptr<scalar_t>(), t.gates.const_data_ptr<scalar_t>(),
          t.d_gates.mutable_data_ptr<scalar_t>(), t.d_old_cell.mutable_data_ptr<scalar_t>(), elements, state_size);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }

  return finish_backward(t, X, weights, state_size);  // cuBLAS, on the current stream, via ATen
}

}  // namespace

TORCH_LIBRARY_IMPL(wb_lltm, CUDA, m) {
  m.impl("lltm_forward", &lltm_forward_cuda);
  m.impl("lltm_backward", &lltm_backward_cuda);
}

}  // namespace wb_lltm
