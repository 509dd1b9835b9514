// CPU-emulation stand-in for c10/cuda/CUDAException.h: the emulated launch checks its configuration
// itself; the launch check only records that it was made (wb_cuda_emulation.h).
#pragma once
#define C10_CUDA_KERNEL_LAUNCH_CHECK() ::wb_emulation::launch_checked()
#define C10_CUDA_CHECK(expression) (void)(expression)
