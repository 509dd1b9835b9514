// csrc/scatter_stable/cpu/scatter_cpu.cpp — CPU kernels of the wb_scatter_stable ops.
//
// The loops of csrc/scatter/cpu/scatter_cpu.cpp, rewritten against the stable ABI:
//   at::parallel_for, at::get_num_threads -> torch::stable::parallel_for, get_num_threads (they call
//       into libtorch through its C shim, so this file needs no -fopenmp);
//   AT_DISPATCH_ALL_TYPES_AND2            -> THO_DISPATCH_V2 (header-only);
//   at::zeros, at::full, Tensor::to       -> torch::stable::new_zeros, full, to.
// Threads split the work as in the ATen version: by columns (o, i) when there are as many rows as
// threads or the output is too large to copy per thread; otherwise by slices of the n elements of
// a row, each slice reduced into a private copy of the output row, merged in slice order so the
// first position still wins a tie.
// An out-of-range index value is not thrown from inside the parallel loop: an exception crossing
// the C shim comes back as a bare "torch_parallel_for(...) API call failed" when targeting torch
// 2.10 (targeting 2.13 keeps the message, and also prints it to stderr). The loops raise a flag
// and stop; the kernel then finds the first bad value and raises its error from outside the loop.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/Dispatch_v2.h>
#include <torch/headeronly/core/ScalarType.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../scatter_stable.h"

namespace wb_scatter_stable {
namespace {

using torch::headeronly::ScalarType;
constexpr int64_t kGrain = 32768;  // elements per task below which threads do not pay off

template <typename acc_t, Reduce R>
struct Reducer {
  static acc_t identity() {
    if constexpr (R == Reduce::Min)
      return std::numeric_limits<acc_t>::has_infinity ? std::numeric_limits<acc_t>::infinity()
                                                      : std::numeric_limits<acc_t>::max();
    else if constexpr (R == Reduce::Max)
      return std::numeric_limits<acc_t>::has_infinity ? -std::numeric_limits<acc_t>::infinity()
                                                      : std::numeric_limits<acc_t>::lowest();
    else
      return acc_t(0);
  }
  static bool is_nan(acc_t x) {
    if constexpr (std::is_floating_point_v<acc_t>)
      return std::isnan(x);
    else
      return false;
  }
  // min/max: does x, from a later position, replace the group's value `val`? The win rule of
  // csrc/scatter/scatter_reduce_rules.h (ties, NaN), copied: a stable-ABI build may not include it.
  static bool wins(acc_t x, acc_t val, bool empty) {
    if (empty) return true;
    if constexpr (R == Reduce::Min) {
      if (x < val) return true;
    } else {
      if (x > val) return true;
    }
    return is_nan(x) && !is_nan(val);
  }
};

// Set by the first task that meets an index value outside [0, m); the others then stop early.
using BadIndex = std::atomic<bool>;

// The first out-of-range index value in (o, j, i) order, for the error message: looked for only
// after a loop stopped, so the message does not depend on which thread got there first.
[[noreturn]] void raise_bad_index(const int64_t* index, const Geometry& g) {
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.inner; ++i) {
        int64_t k = index[o * g.is0 + j * g.is1 + i * g.is2];
        STD_TORCH_CHECK(k >= 0 && k < g.m, "index value ", k, " at position ", j,
                        " along dim is out of range: index values must lie in [0, dim_size) = [0, ", g.m, ")");
      }
  STD_TORCH_CHECK(false, "internal error: an out-of-range index value was reported but not found");
}

// Fold src value x (position j along dim) into group slot v/e.
template <typename acc_t, Reduce R>
inline void fold(acc_t& v, int64_t* e, acc_t x, int64_t j, int64_t n) {
  if constexpr (R == Reduce::Sum) {
    v += x;
  } else if constexpr (R == Reduce::Mean) {
    v += x;
    *e += 1;
  } else if (Reducer<acc_t, R>::wins(x, v, *e == n)) {
    v = x;
    *e = j;
  }
}

// Fold src elements j in [j0, j1), columns [i0, i1), of row o into the [m, inner] block `val`/`extra`.
// Returns false (after setting `bad`) at the first index value outside [0, m).
template <typename scalar_t, typename acc_t, Reduce R>
bool reduce_block(const scalar_t* src, const int64_t* index, const Geometry& g, int64_t o, int64_t j0, int64_t j1,
                  int64_t i0, int64_t i1, acc_t* val, int64_t* extra, BadIndex& bad) {
  const scalar_t* s = src + o * g.n * g.inner;
  const int64_t* ix = index + o * g.is0;
  if (g.inner == 1) {  // one element per src row: the plainest loop
    for (int64_t j = j0; j < j1; ++j) {
      int64_t k = ix[j * g.is1];
      if (k < 0 || k >= g.m) {
        bad.store(true);
        return false;
      }
      fold<acc_t, R>(val[k], R == Reduce::Sum ? nullptr : extra + k, static_cast<acc_t>(s[j]), j, g.n);
    }
    return true;
  }
  for (int64_t j = j0; j < j1; ++j) {
    const scalar_t* row = s + j * g.inner;
    for (int64_t i = i0; i < i1;) {
      int64_t k = ix[j * g.is1 + i * g.is2];
      if (k < 0 || k >= g.m) {
        bad.store(true);
        return false;
      }
      // With g.is2 == 0 (one index value per src row) the whole column range goes to group k.
      const int64_t stop = g.is2 == 0 ? i1 : i + 1;
      acc_t* v = val + k * g.inner;
      int64_t* e = R == Reduce::Sum ? nullptr : extra + k * g.inner;
      if constexpr (R == Reduce::Sum) {
        for (; i < stop; ++i) v[i] += static_cast<acc_t>(row[i]);  // vectorizes
      } else {
        for (; i < stop; ++i) fold<acc_t, R>(v[i], e + i, static_cast<acc_t>(row[i]), j, g.n);
      }
    }
    if (bad.load(std::memory_order_relaxed)) return false;  // another thread met a bad value
  }
  return true;
}

template <typename scalar_t, typename acc_t, Reduce R>
void scatter_loops(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                   BadIndex& bad) {
  const int64_t threads = torch::stable::get_num_threads();
  const int64_t row = g.m * g.inner;  // one row (fixed o) of the output
  const bool small = g.n * g.outer * g.inner < kGrain;
  const bool buffers_cheap = (threads - 1) * row <= g.n * g.inner;
  if (small || threads == 1 || g.outer >= threads || !buffers_cheap) {
    // Split the columns (o, i): each task owns its columns of the output.
    const int64_t columns = g.outer * g.inner;
    const int64_t grain = small ? columns : std::max<int64_t>(1, kGrain / std::max<int64_t>(g.n, 1));
    torch::stable::parallel_for(0, columns, grain, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end;) {
        int64_t o = c / g.inner, i0 = c % g.inner;
        int64_t i1 = std::min(g.inner, i0 + (end - c));  // stay within row o
        if (!reduce_block<scalar_t, acc_t, R>(src, index, g, o, 0, g.n, i0, i1, acc + o * row,
                                              extra ? extra + o * row : nullptr, bad))
          return;
        c += i1 - i0;
      }
    });
    return;
  }
  // Split the n elements of each row into one slice per thread. Slice 0 reduces straight into the
  // output, the others into private buffers, merged afterwards in slice order.
  const int64_t slices = threads;
  const int64_t per = (g.n + slices - 1) / slices;
  std::vector<acc_t> vals((slices - 1) * row);
  std::vector<int64_t> extras(R == Reduce::Sum ? 0 : (slices - 1) * row);
  for (int64_t o = 0; o < g.outer && !bad.load(); ++o) {
    acc_t* a = acc + o * row;
    int64_t* e = extra ? extra + o * row : nullptr;
    torch::stable::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t j0 = std::min(g.n, t * per), j1 = std::min(g.n, j0 + per);
        if (t == 0) {
          reduce_block<scalar_t, acc_t, R>(src, index, g, o, j0, j1, 0, g.inner, a, e, bad);
          continue;
        }
        acc_t* v = vals.data() + (t - 1) * row;
        int64_t* x = extras.empty() ? nullptr : extras.data() + (t - 1) * row;
        std::fill(v, v + row, Reducer<acc_t, R>::identity());
        if (x) std::fill(x, x + row, R == Reduce::Mean ? 0 : g.n);
        reduce_block<scalar_t, acc_t, R>(src, index, g, o, j0, j1, 0, g.inner, v, x, bad);
      }
    });
    if (bad.load()) return;
    torch::stable::parallel_for(0, row, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t t = 1; t < slices; ++t) {
        const acc_t* v = vals.data() + (t - 1) * row;
        const int64_t* x = extras.empty() ? nullptr : extras.data() + (t - 1) * row;
        for (int64_t k = begin; k < end; ++k) {
          if constexpr (R == Reduce::Sum) {
            a[k] += v[k];
          } else if constexpr (R == Reduce::Mean) {
            a[k] += v[k];
            e[k] += x[k];
          } else {
            if (x[k] == g.n) continue;  // this slice put nothing into this group
            if (Reducer<acc_t, R>::wins(v[k], a[k], e[k] == g.n)) {
              a[k] = v[k];
              e[k] = x[k];
            }
          }
        }
      }
    });
  }
}

template <typename acc_t>
acc_t divide(acc_t sum, int64_t count) {
  if (count <= 1) return sum;
  if constexpr (std::is_integral_v<acc_t>) {  // round down (floor division), like torch_scatter
    int64_t q = static_cast<int64_t>(sum) / count, r = static_cast<int64_t>(sum) % count;
    if (r < 0) q -= 1;
    return static_cast<acc_t>(q);
  } else {
    return sum / static_cast<acc_t>(count);
  }
}

// Runs reduction R on p for element type scalar_t; returns (out, argindex or counts).
template <typename scalar_t, Reduce R>
std::tuple<Tensor, Tensor> run(const Prepared& p) {
  constexpr bool half =
      std::is_same_v<scalar_t, torch::headeronly::Half> || std::is_same_v<scalar_t, torch::headeronly::BFloat16>;
  using acc_t = std::conditional_t<half, float, scalar_t>;
  const Geometry& g = p.g;
  // Accumulate in the output itself, or (float16/bfloat16) in a float32 buffer converted at the end.
  Tensor acc = torch::stable::new_zeros(p.src, p.out_shape, half ? ScalarType::Float : p.src.scalar_type());
  Tensor extra;  // min/max: argindex (n = empty group); mean: counts; sum: none (undefined)
  if constexpr (R == Reduce::Min || R == Reduce::Max)
    extra = torch::stable::full(p.out_shape, static_cast<double>(g.n), ScalarType::Long);
  else if constexpr (R == Reduce::Mean)
    extra = torch::stable::new_zeros(p.src, p.out_shape, ScalarType::Long);
  acc_t* a = acc.mutable_data_ptr<acc_t>();
  int64_t* e = R == Reduce::Sum ? nullptr : extra.mutable_data_ptr<int64_t>();
  const int64_t count = acc.numel();
  if (p.src.numel() > 0 && count > 0) {
    if constexpr (R == Reduce::Min || R == Reduce::Max) std::fill(a, a + count, Reducer<acc_t, R>::identity());
    BadIndex bad{false};
    scatter_loops<scalar_t, acc_t, R>(p.src.const_data_ptr<scalar_t>(), p.index_data, g, a, e, bad);
    if (bad.load()) raise_bad_index(p.index_data, g);
    // Finish: mean divides by the count; min/max turn empty groups (still the identity) into 0.
    torch::stable::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        if constexpr (R == Reduce::Mean)
          a[k] = divide<acc_t>(a[k], e[k]);
        else if constexpr (R == Reduce::Min || R == Reduce::Max)
          if (e[k] == g.n) a[k] = acc_t(0);
      }
    });
  }
  Tensor out = half ? torch::stable::to(acc, p.src.scalar_type()) : acc;
  return {out, extra};
}

// run<scalar_t, R> without a comma, which the dispatch macro below would split its argument at.
template <Reduce R>
struct Runner {
  template <typename scalar_t>
  static std::tuple<Tensor, Tensor> on(const Prepared& p) {
    return run<scalar_t, R>(p);
  }
};

template <Reduce R>
std::tuple<Tensor, Tensor> dispatch(const Tensor& src, const Tensor& index, int64_t dim,
                                    std::optional<int64_t> dim_size) {
  Prepared p = prepare(src, index, dim, dim_size);
  return THO_DISPATCH_V2(src.scalar_type(), "wb_scatter_stable",
                         AT_WRAP([&] { return Runner<R>::template on<scalar_t>(p); }), AT_EXPAND(AT_ALL_TYPES),
                         ScalarType::Half, ScalarType::BFloat16);
}

Tensor scatter_sum(Tensor src, Tensor index, int64_t dim, std::optional<int64_t> dim_size) {
  return std::get<0>(dispatch<Reduce::Sum>(src, index, dim, dim_size));
}

Tensor scatter_mean(Tensor src, Tensor index, int64_t dim, std::optional<int64_t> dim_size) {
  return std::get<0>(dispatch<Reduce::Mean>(src, index, dim, dim_size));
}

std::tuple<Tensor, Tensor> scatter_min(Tensor src, Tensor index, int64_t dim, std::optional<int64_t> dim_size) {
  return dispatch<Reduce::Min>(src, index, dim, dim_size);
}

std::tuple<Tensor, Tensor> scatter_max(Tensor src, Tensor index, int64_t dim, std::optional<int64_t> dim_size) {
  return dispatch<Reduce::Max>(src, index, dim, dim_size);
}

}  // namespace
}  // namespace wb_scatter_stable

STABLE_TORCH_LIBRARY_IMPL(wb_scatter_stable, CPU, m) {
  m.impl("scatter_sum", TORCH_BOX(&wb_scatter_stable::scatter_sum));
  m.impl("scatter_mean", TORCH_BOX(&wb_scatter_stable::scatter_mean));
  m.impl("scatter_min", TORCH_BOX(&wb_scatter_stable::scatter_min));
  m.impl("scatter_max", TORCH_BOX(&wb_scatter_stable::scatter_max));
}
