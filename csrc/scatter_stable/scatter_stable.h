// csrc/scatter_stable/scatter_stable.h — what the stable-ABI scatter ops share between their files.
//
// Only stable-ABI headers: torch/csrc/stable/* (C++ wrappers over libtorch's C shim) and
// torch/headeronly/* (code compiled into this library, no libtorch symbols). The build defines
// TORCH_TARGET_VERSION, and with it any ATen/c10 header stops the compile with an #error, so
// nothing version-bound can slip in.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/util/Exception.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace wb_scatter_stable {

using torch::stable::Tensor;

enum class Reduce { Sum, Mean, Min, Max };

// Every tensor seen as [outer, n, inner] around `dim`: src and index have n = src.size(dim),
// the output has m = dim_size. Index strides may be 0 (a broadcast view).
struct Geometry {
  int64_t outer, n, inner, m;
  int64_t is0, is1, is2;  // index strides
};

// What a kernel receives once the arguments are checked (scatter_stable.cpp, `prepare`).
struct Prepared {
  Tensor src;                 // src made contiguous
  Tensor index;               // what `index_data` points into: the caller's index, or a copy
  const int64_t* index_data;  // index element (o, j, i) is index_data[o*is0 + j*is1 + i*is2]
  Geometry g;
  std::vector<int64_t> out_shape;  // src's shape with dim_size at dim
};

// Checks the public op's arguments (each error a std::runtime_error naming the argument and the
// offending value), broadcasts index against src with torch_scatter's rule and finds dim_size
// (index.max() + 1 when it is None). The kernel checks only the index *values* against [0, m).
Prepared prepare(const Tensor& src, const Tensor& index, int64_t dim, std::optional<int64_t> dim_size);

}  // namespace wb_scatter_stable
