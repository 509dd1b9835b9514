// Stand-in for the header a CUDA build of PyTorch generates at configure time.
//
// The CPU-only torch wheel ships c10/cuda/*.h but not this generated file, so a .cu that includes
// c10/cuda headers cannot even be parsed against it. workbook/diagnostics/cuda_check.py puts this folder on
// nvcc's include path *after* torch's own folders: with a CUDA build of torch the real file wins.
// It is only ever used to compile-check kernels (`nvcc -c`), never to link or run them.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
