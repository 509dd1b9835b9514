// csrc/scatter/scatter.h — helpers shared by every backend of the wb_scatter kernel op.
//
// A backend (cpu/scatter_cpu.cpp, cuda/scatter_cuda.cu) calls `prepare_scatter` first: it checks
// everything that does not need to read tensor *values* (dtypes, devices, shapes, dim, dim_size,
// out=) and allocates the outputs on src's device with device-generic ATen calls. The backend's
// loop then only has to check the index *values* (negative or >= dim_size) as it reads them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <string>

namespace wb_scatter {

enum class Reduce { Sum, Mean, Min, Max };

// "sum" | "mean" | "min" | "max"; anything else is a TORCH_CHECK error naming `reduce`.
Reduce parse_reduce(const std::string& reduce);

// The outputs a backend fills, already allocated and initialised (see scatter.cpp for the contract).
struct ScatterOutputs {
  at::Tensor out;    // what the op returns: the caller's out= tensor itself when one was given
  at::Tensor arg;    // min/max: int64 argindex, shape of out, filled with src.size(dim); mean: int64
                     // counts, shape of out, filled with 0; sum: undefined
  int64_t dim_size;  // out.size(dim)
  bool fresh;        // true when out was allocated here (no out= given): it holds zeros
};

// Validates the kernel op's arguments (naming the bad one in a RuntimeError) and allocates outputs.
// `out` is returned as given; whether to compute in place or through a contiguous/float buffer is
// the backend's choice (it must write its result back into `out`).
ScatterOutputs prepare_scatter(const at::Tensor& src, const at::Tensor& index, int64_t dim,
                               const c10::optional<at::Tensor>& out, c10::optional<int64_t> dim_size,
                               Reduce reduce);


}  // namespace wb_scatter
