// csrc/scatter/geometry.h — how every backend's loops see the tensors: src and index as
// [outer, n, inner] around `dim`, the output as [outer, m, inner] with m = dim_size. Index strides
// may be 0 (a broadcast view). No ATen tensor header, so that the CPU loops (cpu/scatter_cpu_loops.h)
// need none; scatter.h makes a Geometry from tensors (geometry_around, index_in_geometry).
#pragma once

#include <c10/macros/Macros.h>

#include <cstdint>

namespace wb_scatter {

struct Geometry {
  int64_t outer, n, inner, m;
  int64_t is0, is1, is2;  // index strides
  C10_HOST_DEVICE int64_t src_numel() const { return outer * n * inner; }
  C10_HOST_DEVICE int64_t out_numel() const { return outer * m * inner; }
};

}  // namespace wb_scatter
