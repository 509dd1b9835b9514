// csrc/scatter/cpu/scatter_cpu_loops.h — the CPU loops of the wb_scatter ops (declared in scatter_cpu.h).
//
// The workbook's own loops (not a call to torch's native scatter ops), run in parallel with
// at::parallel_for. Every tensor is viewed as [outer, n, inner] around `dim` (src and index:
// n = src.size(dim); the output: m = dim_size), and a "column" is one (outer, inner) pair.
//  - As many rows as threads (outer >= threads: a batch reduced along its last dim), or an output
//    too large to copy per thread with an index value per element: threads split the columns; each
//    writes only its own columns of the output, so no two threads ever touch the same output element.
//  - An output too large to copy per thread, with one index value per src row: rows of kWideRow
//    features or more are split by groups (each thread folds the rows of its own groups); narrower
//    rows and a 1-D src run as one task.
//  - Otherwise (a 1-D src, or [edges, features] along dim 0) threads split the n elements of a
//    row instead; each reduces its slice into a private copy of the output row, and the copies
//    are merged in order, which keeps the "first position wins a tie" rule of min/max.
// The rules themselves (identity, ties, NaN, integer mean, accumulation type) are those of
// ../scatter_reduce_rules.h, shared with the CUDA kernels.
// Included only by the four files that compile the loops, one reduction each (scatter_cpu.h).
#pragma once

#include <ATen/Parallel.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "scatter_cpu.h"

namespace wb_scatter {

// min/max: fold value x (at position j along dim) into a group. `empty`: the group holds no value
// yet (so x wins even if it equals the identity, e.g. +inf for min).
template <typename acc_t, Reduce R>
inline void update_extreme(acc_t& val, int64_t& argindex, acc_t x, int64_t j, bool empty) {
  if (wins<R>(x, val, empty)) {
    val = x;
    argindex = j;
  }
}

// update_extreme without a branch on the values, for floating-point groups: the winner is chosen by a mask, and
// both the value and the argindex are written back whether the element wins or not. With a few elements per group
// (a random index over about as many groups as elements), whether an element wins is a coin toss, which the branch
// of update_extreme mispredicts; with many, it almost never wins and the branch is predicted. Measured side by
// side, 1-D float32 max and float64 min: 1.1-1.8x faster with 1 to 10 elements per group (10^6 elements in 10^6
// groups, random: no faster, within the 5-8% two builds of the same loop differed by), but 1.2-2.4x slower with 33
// to 100,000 (hence kMaskedPerGroup; nothing was measured between 10 and 33). Written with bool operators and
// `?:`, GCC 12 compiled it to branches again.
template <typename acc_t, Reduce R>
inline void update_extreme_masked(acc_t& val, int64_t& argindex, acc_t x, int64_t j, bool empty) {
  if constexpr (std::is_same_v<acc_t, float> || std::is_same_v<acc_t, double>) {
    using bits_t = std::conditional_t<sizeof(acc_t) == 4, uint32_t, uint64_t>;
    const acc_t v = val;
    // wins<R>, bit by bit: an empty group, a strictly better value, or a NaN replacing a number.
    const bits_t better = static_cast<bits_t>(R == Reduce::Min ? x < v : x > v);
    const bits_t nan_replaces = static_cast<bits_t>(x != x) & static_cast<bits_t>(v == v);
    const bits_t win = better | nan_replaces | static_cast<bits_t>(empty);
    const bits_t mask = bits_t(0) - win;
    bits_t x_bits, v_bits;
    std::memcpy(&x_bits, &x, sizeof(acc_t));
    std::memcpy(&v_bits, &v, sizeof(acc_t));
    v_bits = (x_bits & mask) | (v_bits & ~mask);
    std::memcpy(&val, &v_bits, sizeof(acc_t));
    const uint64_t mask64 = uint64_t(0) - static_cast<uint64_t>(win);
    argindex = static_cast<int64_t>((static_cast<uint64_t>(j) & mask64) | (static_cast<uint64_t>(argindex) & ~mask64));
  } else {
    update_extreme<acc_t, R>(val, argindex, x, j, empty);
  }
}

[[noreturn]] inline void bad_index(int64_t k, int64_t j, int64_t m) {
  TORCH_CHECK(false, "index value ", k, " at position ", j,
              " along dim is out of range: index values must lie in [0, dim_size) = [0, ", m, ")");
}

// Fold src row (o, j), columns [i0, i1), into output row k of `val`/`extra`. __restrict: src never
// shares memory with the output (prepare_scatter refuses such an out); without it GCC made the
// float64 sum of [N, 64] rows a third slower.
template <typename scalar_t, typename acc_t, Reduce R>
inline void fold_row(const scalar_t* __restrict s, acc_t* __restrict v, int64_t* __restrict e, int64_t j, int64_t i0,
                     int64_t i1, int64_t n, bool fresh) {
  if constexpr (R == Reduce::Sum) {
    for (int64_t i = i0; i < i1; ++i) v[i] += static_cast<acc_t>(s[i]);  // vectorizes
  } else if constexpr (R == Reduce::Mean) {
    for (int64_t i = i0; i < i1; ++i) {
      v[i] += static_cast<acc_t>(s[i]);
      e[i] += 1;
    }
  } else {
    for (int64_t i = i0; i < i1; ++i)
      update_extreme<acc_t, R>(v[i], e[i], static_cast<acc_t>(s[i]), j, fresh && e[i] == n);
  }
}

// Fold the run src[j0, j1) of one group into its value `v` and `e` (sum/mean: the count; min/max: the
// argindex). The run is reduced in a register first, so a sorted index costs one read-modify-write
// of the output per run, not per element (every add would otherwise wait for the previous one to
// the same address).
template <typename scalar_t, typename acc_t, Reduce R>
inline void fold_run(const scalar_t* s, int64_t j0, int64_t j1, acc_t& v, int64_t* e, int64_t n, bool fresh) {
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    // Eight partial sums, so that the adds of a long run do not each wait for the previous one. Integers add
    // up in int64 and wrap once, at the end, as adding one at a time would: GCC 12 at -O3 vectorized int8
    // partial sums wrongly (a run of 16 values of 100 summed to 32, not 64).
    using part_t = std::conditional_t<std::is_integral_v<acc_t>, int64_t, acc_t>;
    part_t part[8] = {};
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8)
      for (int l = 0; l < 8; ++l) part[l] += static_cast<part_t>(s[j + l]);
    part_t sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    for (; j < j1; ++j) sum += static_cast<part_t>(s[j]);
    const acc_t total = static_cast<acc_t>(sum);
    v += total;
    if constexpr (R == Reduce::Mean) *e += j1 - j0;
  } else {
    // The run's extreme in eight lanes (no chain of compare-and-select through one register), and
    // whether it holds a NaN; then the first position holding the winner, which wins a tie.
    acc_t lane[8];
    for (int l = 0; l < 8; ++l) lane[l] = static_cast<acc_t>(s[j0]);
    bool nan = false;
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8)
      for (int l = 0; l < 8; ++l) {
        acc_t x = static_cast<acc_t>(s[j + l]);
        if constexpr (R == Reduce::Min)
          lane[l] = x < lane[l] ? x : lane[l];
        else
          lane[l] = x > lane[l] ? x : lane[l];
        nan |= at::_isnan(x);
      }
    acc_t best = lane[0];
    for (int l = 1; l < 8; ++l) {
      if constexpr (R == Reduce::Min)
        best = lane[l] < best ? lane[l] : best;
      else
        best = lane[l] > best ? lane[l] : best;
    }
    for (; j < j1; ++j) {
      acc_t x = static_cast<acc_t>(s[j]);
      if constexpr (R == Reduce::Min)
        best = x < best ? x : best;
      else
        best = x > best ? x : best;
      nan |= at::_isnan(x);
    }
    int64_t first = j0;
    if (nan) {
      while (!at::_isnan(static_cast<acc_t>(s[first]))) ++first;
    } else {
      while (!(static_cast<acc_t>(s[first]) == best)) ++first;
    }
    best = static_cast<acc_t>(s[first]);  // the first of equal values (0.0 and -0.0 compare equal)
    // v holds earlier positions only: the same rule as folding one element at a time.
    update_extreme<acc_t, R>(v, *e, best, first, fresh && *e == n);
  }
}

// Fold src element j, value x, into group k. `masked`: min/max through update_extreme_masked.
template <typename acc_t, Reduce R, bool masked = false>
inline void fold_one(acc_t* val, int64_t* extra, int64_t k, acc_t x, int64_t j, int64_t n, bool fresh) {
  if constexpr (R == Reduce::Sum) {
    val[k] += x;
  } else if constexpr (R == Reduce::Mean) {
    val[k] += x;
    extra[k] += 1;
  } else if constexpr (masked) {
    update_extreme_masked<acc_t, R>(val[k], extra[k], x, j, fresh & (extra[k] == n));
  } else {
    update_extreme<acc_t, R>(val[k], extra[k], x, j, fresh && extra[k] == n);
  }
}

// The end of the run of value k that starts at j (< c1): the first position after j holding another value,
// or c1. Whole blocks are compared with XOR and OR, which vectorize (and mispredict about once per run, where
// a binary search mispredicted at about two steps in five), then the block where the run ends one at a time.
// 32 to a block: GCC 12 unrolls a block of 16 into scalar code instead.
inline int64_t run_end(const int64_t* ix, int64_t step, int64_t j, int64_t c1, int64_t k) {
  constexpr int64_t kBlock = 32;
  int64_t end = j + 1;
  if (end < c1 && ix[end * step] != k) return end;  // a run of one: no block read
  if (step == 1) {
    for (; end + kBlock <= c1; end += kBlock) {
      uint64_t other = 0;
      for (int64_t l = 0; l < kBlock; ++l) other |= static_cast<uint64_t>(ix[end + l] ^ k);
      if (other != 0) break;
    }
  }
  while (end < c1 && ix[end * step] == k) ++end;
  return end;
}

// Fold the positions [c0, c1) run by run: each run of equal index values is checked once and costs one update
// of its group. The index need not be sorted. Returns where it stopped: c1, or earlier where eight runs in a row
// averaged under kMinRun elements, leaving the rest of the chunk to the element loop (measured: runs of 8 were
// slower this way than one element at a time, for max by half; runs of 12 faster).
template <typename scalar_t, typename acc_t, Reduce R>
int64_t fold_runs(const scalar_t* s, const int64_t* ix, int64_t step, int64_t c0, int64_t c1, const Geometry& g,
                  acc_t* val, int64_t* extra, bool fresh) {
  constexpr int64_t kMinRun = 12;
  int64_t runs = 0, mark = c0, j = c0;
  while (j < c1) {
    const int64_t k = ix[j * step];
    if (k < 0 || k >= g.m) bad_index(k, j, g.m);
    const int64_t end = run_end(ix, step, j, c1, k);
    fold_run<scalar_t, acc_t, R>(s, j, end, val[k], extra ? extra + k : nullptr, g.n, fresh);
    j = end;
    if (++runs == 8) {
      if (j - mark < 8 * kMinRun) return j;
      runs = 0;
      mark = j;
    }
  }
  return j;
}

// Fold the run of src rows [j0, j1), all of one group, columns [i0, i1), into that group's output row
// (sum and mean only). A block of columns at a time, the output's values are loaded into registers, the run's
// rows added to them in order (the order of one row at a time) and stored once per run, not once per src
// row. Loaded first, not added at the end: GCC 12 vectorized that last add into scalar code with shuffles.
// Runs of eight rows or more fold 64 float columns per block where the row is that wide (256 bytes, as much as
// the sixteen SSE registers of the x86-64 baseline these files compile for hold; GCC 12 keeps fourteen in
// registers and spills two), then blocks of sixteen. Each block is one pass down the run; in blocks of sixteen,
// rows of 64 floats were read in four strided streams. Side by side (2 threads), sorted [N, 64] float32 sums of
// 10^7 elements in 10 or 1,000 groups took 0.53-0.55 of the time, and means 0.6. Runs of 3-4 rows were up to
// 1.27x slower in blocks of 64 (the setup and the spills are paid per block), hence the eight. Blocks of 32
// (no spills) were no faster. 8-byte sums keep blocks of sixteen: float64 in blocks of 32 was no faster overall.
// The columns left over (all of them below sixteen) are added a row at a time, as fold_row does: down a
// column, one at a time, they were up to 2.7x slower. Integers add up in int64 and wrap once, as in fold_run.
template <int64_t kColumns, typename part_t, typename scalar_t, typename acc_t>
inline void fold_rows_block(const scalar_t* __restrict s, int64_t inner, int64_t j0, int64_t j1, int64_t i,
                            acc_t* __restrict v) {
  part_t part[kColumns];
  for (int64_t l = 0; l < kColumns; ++l) part[l] = static_cast<part_t>(v[i + l]);
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t l = 0; l < kColumns; ++l) part[l] += static_cast<part_t>(s[j * inner + i + l]);
  for (int64_t l = 0; l < kColumns; ++l) v[i + l] = static_cast<acc_t>(part[l]);
}

template <typename scalar_t, typename acc_t, Reduce R>
inline void fold_rows(const scalar_t* __restrict s, int64_t inner, int64_t j0, int64_t j1, int64_t i0, int64_t i1,
                      acc_t* __restrict v, int64_t* __restrict e) {
  static_assert(R == Reduce::Sum || R == Reduce::Mean);
  using part_t = std::conditional_t<std::is_integral_v<acc_t>, int64_t, acc_t>;
  int64_t i = i0;
  if constexpr (sizeof(part_t) == 4)
    if (j1 - j0 >= 8)
      for (; i + 64 <= i1; i += 64) fold_rows_block<64, part_t>(s, inner, j0, j1, i, v);
  for (; i + 16 <= i1; i += 16) fold_rows_block<16, part_t>(s, inner, j0, j1, i, v);
  if (i < i1)
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t c = i; c < i1; ++c) v[c] += static_cast<acc_t>(s[j * inner + c]);
  if constexpr (R == Reduce::Mean)
    for (int64_t c = i0; c < i1; ++c) e[c] += j1 - j0;
}

// The rows [c0, c1) of a src with one index value per row (sum and mean), run by run as fold_runs does, giving
// up on the rest of the chunk where eight runs in a row averaged under kMinRunOfRows rows.
constexpr int64_t kMinRunOfRows = 2;
template <typename scalar_t, typename acc_t, Reduce R>
[[gnu::noinline]] int64_t fold_row_runs(const scalar_t* s, const int64_t* ix, const Geometry& g, int64_t c0, int64_t c1,
                                        int64_t i0, int64_t i1, acc_t* val, int64_t* extra) {
  int64_t runs = 0, mark = c0, j = c0;
  while (j < c1) {
    const int64_t k = ix[j * g.is1];
    if (k < 0 || k >= g.m) bad_index(k, j, g.m);
    const int64_t end = run_end(ix, g.is1, j, c1, k);
    fold_rows<scalar_t, acc_t, R>(s, g.inner, j, end, i0, i1, val + k * g.inner, extra ? extra + k * g.inner : nullptr);
    j = end;
    if (++runs == 8) {
      if (j - mark < 8 * kMinRunOfRows) return j;
      runs = 0;
      mark = j;
    }
  }
  return j;
}

constexpr int64_t kShortRun = 16;       // a chunk is tried run by run if its ends leave room for runs this long
constexpr int64_t kChunk = 2048;        // positions whose ends decide between runs and elements (16 KiB of index)
constexpr int64_t kRowChunk = 256;      // the same for rows of an [N, C] src
constexpr int64_t kPrefetchAhead = 16;  // elements ahead whose output element a random index prefetches
constexpr int64_t kMaskedPerGroup = 8;  // min/max elements per group (on average) up to which updates are masked

// reduce_block for one element per src row (inner == 1): the elements j in [j0, j1) of row o. A
// function of its own (noinline), so its loops compile the same wherever reduce_block goes (inlined
// into reduce_block, the 1-D float32 sum got slower).
template <typename scalar_t, typename acc_t, Reduce R, bool masked>
[[gnu::noinline]] void reduce_elements(const scalar_t* s, const int64_t* ix, const Geometry& g, int64_t j0, int64_t j1,
                                       acc_t* val, int64_t* extra, bool fresh) {
  const int64_t step = g.is1;
  // Ask for the output element of a later position early when the output outgrows a core's L2 (512 KiB on the
  // machine these limits were measured on). A sum writes only `val` and does without it up to 1 MiB: 10^5
  // float32 or float64 elements summed into 10^5 random groups (400 or 800 KB, one task) ran 5-11 % faster
  // without it. Mean, min and max also update `extra` (the count or the argument index), so they prefetch above
  // 256 KiB of both: float32 max over 8.5 x 10^4 groups (1 MB with its argument index) ran 1.5x slower without.
  const int64_t output_bytes = g.m * static_cast<int64_t>(sizeof(acc_t) + (extra ? sizeof(int64_t) : 0));
  const bool large = output_bytes > (extra ? (1 << 18) : (1 << 20));
  for (int64_t c0 = j0; c0 < j1; c0 += kChunk) {
    const int64_t c1 = std::min(j1, c0 + kChunk);
    // Runs averaging kShortRun or more are possible only if the chunk's ends lie close together (a sorted index
    // has at most last - first + 1 runs). A random index over few groups passes too; fold_runs then gives up.
    const int64_t first = ix[c0 * step], last = ix[(c1 - 1) * step];
    const uint64_t span = static_cast<uint64_t>(last) - static_cast<uint64_t>(first);  // if first <= last
    int64_t j = c0;
    if (first <= last && span < static_cast<uint64_t>((c1 - c0) / kShortRun))
      j = fold_runs<scalar_t, acc_t, R>(s, ix, step, c0, c1, g, val, extra, fresh);
    // A prefetch only pays where the chunk's ends lie far apart (a sorted index reads few output lines, in
    // order, which the hardware prefetches by itself).
    const bool prefetch = large && !(first <= last && span <= static_cast<uint64_t>(4 * kChunk));
    for (; j < c1; ++j) {
#if defined(__GNUC__)
      if (prefetch && j + kPrefetchAhead < c1) {
        const int64_t ahead = ix[(j + kPrefetchAhead) * step];
        if (ahead >= 0 && ahead < g.m) {
          __builtin_prefetch(val + ahead, 1);
          if (extra) __builtin_prefetch(extra + ahead, 1);
        }
      }
#endif
      const int64_t k = ix[j * step];
      if (k < 0 || k >= g.m) bad_index(k, j, g.m);
      fold_one<acc_t, R, masked>(val, extra, k, static_cast<acc_t>(s[j]), j, g.n, fresh);
    }
  }
}

// reduce_block's src rows [j0, j1) one at a time, columns [i0, i1), where each row has one index value: read and
// check it once, then fold the row, a contiguous loop. An output larger than the caches: ask for the output row of
// a later src row (before `stop`) early, as reduce_elements does. A function of its own (noinline): compiled inside
// reduce_block's loop over chunks, a random index on [N, 8] rows ran 1.2x slower.
template <typename scalar_t, typename acc_t, Reduce R>
[[gnu::noinline]] void reduce_rows(const scalar_t* s, const int64_t* ix, const Geometry& g, int64_t j0, int64_t j1,
                                   int64_t stop, int64_t i0, int64_t i1, acc_t* val, int64_t* extra, bool fresh) {
  const bool large = g.m * g.inner * static_cast<int64_t>(sizeof(acc_t)) > (1 << 18);
  constexpr int64_t kRowsAhead = 4, kLine = 64 / static_cast<int64_t>(sizeof(acc_t));
  for (int64_t j = j0; j < j1; ++j) {
#if defined(__GNUC__)
    if (large && j + kRowsAhead < stop) {
      const int64_t ahead = ix[(j + kRowsAhead) * g.is1];
      if (ahead >= 0 && ahead < g.m)
        for (int64_t i = i0; i < i1; i += kLine) __builtin_prefetch(val + ahead * g.inner + i, 1);
    }
#endif
    const int64_t k = ix[j * g.is1];
    if (k < 0 || k >= g.m) bad_index(k, j, g.m);
    fold_row<scalar_t, acc_t, R>(s + j * g.inner, val + k * g.inner, extra ? extra + k * g.inner : nullptr, j, i0, i1,
                                 g.n, fresh);
  }
}

// Reduce the elements j in [j0, j1), columns i in [i0, i1) of row o of src into `val` and
// `extra`, which point at an [m, inner] block (the output's row o, or a private buffer).
// noinline: called once per block of work, its loops then compile the same whichever threading
// function calls it (inlined into them, the [N, 64] float64 sum and float32 min lost a third).
template <typename scalar_t, typename acc_t, Reduce R>
[[gnu::noinline]] void reduce_block(const scalar_t* src, const int64_t* index, const Geometry& g, int64_t o, int64_t j0,
                                    int64_t j1, int64_t i0, int64_t i1, acc_t* val, int64_t* extra, bool fresh) {
  const scalar_t* s = src + o * g.n * g.inner;
  const int64_t* ix = index + o * g.is0;
  if (g.inner == 1) {  // one element per src row
    // Min/max with a few elements per group: masked updates (update_extreme_masked).
    if constexpr (R == Reduce::Min || R == Reduce::Max) {
      if (g.n <= kMaskedPerGroup * g.m) {
        reduce_elements<scalar_t, acc_t, R, true>(s, ix, g, j0, j1, val, extra, fresh);
        return;
      }
    }
    reduce_elements<scalar_t, acc_t, R, false>(s, ix, g, j0, j1, val, extra, fresh);
    return;
  }
  if (g.is2 == 0) {
    // One index value per src row (a 1-D src, or an index broadcast over the trailing dims): read
    // and check it once, then fold the whole row of columns, a contiguous loop. An output larger
    // than the caches: ask for the output row of a later src row early, as reduce_elements does.
    for (int64_t c0 = j0; c0 < j1; c0 += kRowChunk) {
      const int64_t c1 = std::min(j1, c0 + kRowChunk);
      int64_t j = c0;
      if constexpr (R == Reduce::Sum || R == Reduce::Mean) {  // runs of rows, tried as reduce_elements tries runs
        const int64_t first = ix[c0 * g.is1], last = ix[(c1 - 1) * g.is1];
        const uint64_t span = static_cast<uint64_t>(last) - static_cast<uint64_t>(first);  // if first <= last
        if (first <= last && span < static_cast<uint64_t>((c1 - c0) / kMinRunOfRows))
          j = fold_row_runs<scalar_t, acc_t, R>(s, ix, g, c0, c1, i0, i1, val, extra);
      }
      if (j < c1) reduce_rows<scalar_t, acc_t, R>(s, ix, g, j, c1, j1, i0, i1, val, extra, fresh);
    }
    return;
  }
  for (int64_t j = j0; j < j1; ++j) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t k = ix[j * g.is1 + i * g.is2];
      if (k < 0 || k >= g.m) bad_index(k, j, g.m);
      fold_row<scalar_t, acc_t, R>(s + j * g.inner, val + k * g.inner, extra ? extra + k * g.inner : nullptr, j, i,
                                   i + 1, g.n, fresh);
    }
  }
}

// Threading strategy 1: threads split the columns (o, i); each reduces all n elements of its
// columns and writes only its own columns of the output, so no two threads touch one element.
// `one_task`: run everything as one task on the calling thread.
template <typename scalar_t, typename acc_t, Reduce R>
void reduce_by_columns(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                       bool fresh, bool one_task) {
  const int64_t row = g.m * g.inner;  // one row (fixed o) of the output
  const int64_t columns = g.outer * g.inner;
  const int64_t grain = one_task ? columns : std::max<int64_t>(1, kGrain / std::max<int64_t>(g.n, 1));
  at::parallel_for(0, columns, grain, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end;) {
      int64_t o = c / g.inner, i0 = c % g.inner;
      int64_t i1 = std::min(g.inner, i0 + (end - c));  // stay within row o
      reduce_block<scalar_t, acc_t, R>(src, index, g, o, 0, g.n, i0, i1, acc + o * row,
                                       extra ? extra + o * row : nullptr, fresh);
      c += i1 - i0;
    }
  });
}

// Threading strategy 2: for each row o, the n elements are split into one slice per thread. (Splitting
// the features instead would make the threads write the same output rows at the same time: a row of a
// few features is one cache line, which the cores would pass back and forth on every write.) Slice 0
// reduces straight into the output, the others into private [m, inner] buffers, merged afterwards in
// slice order, so that the first position still wins a tie.
template <typename scalar_t, typename acc_t, Reduce R>
void reduce_by_slices(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                      bool fresh, int64_t slices) {
  const int64_t row = g.m * g.inner;
  const int64_t per = (g.n + slices - 1) / slices;
  std::vector<acc_t> vals((slices - 1) * row);
  std::vector<int64_t> extras(R == Reduce::Sum ? 0 : (slices - 1) * row);
  for (int64_t o = 0; o < g.outer; ++o) {
    acc_t* a = acc + o * row;
    int64_t* e = extra ? extra + o * row : nullptr;
    at::parallel_for(0, slices, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t j0 = std::min(g.n, t * per), j1 = std::min(g.n, j0 + per);
        if (t == 0) {
          reduce_block<scalar_t, acc_t, R>(src, index, g, o, j0, j1, 0, g.inner, a, e, fresh);
          continue;
        }
        acc_t* v = vals.data() + (t - 1) * row;
        int64_t* x = extras.empty() ? nullptr : extras.data() + (t - 1) * row;
        std::fill(v, v + row, identity<acc_t, R>());
        if (x) std::fill(x, x + row, (R == Reduce::Mean) ? 0 : g.n);
        reduce_block<scalar_t, acc_t, R>(src, index, g, o, j0, j1, 0, g.inner, v, x, /*fresh=*/true);
      }
    });
    at::parallel_for(0, row, kGrain, [&](int64_t begin, int64_t end) {
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
            // a[k] holds the earlier positions: the same rule as folding one element at a time.
            update_extreme<acc_t, R>(a[k], e[k], v[k], x[k], fresh && e[k] == g.n);
          }
        }
      }
    });
  }
}

// reduce_by_groups' work for one thread and row o of a src with one index value per row: every index value is
// read, and the src rows whose group k lies in [k0, k1) are folded.
template <typename scalar_t, typename acc_t, Reduce R>
[[gnu::noinline]] void reduce_owned_rows(const scalar_t* s, const int64_t* ix, const Geometry& g, int64_t k0,
                                         int64_t k1, acc_t* val, int64_t* extra, bool fresh) {
  const uint64_t owned = static_cast<uint64_t>(k1 - k0);
  for (int64_t j = 0; j < g.n; ++j) {
    const int64_t k = ix[j * g.is1];
    if (k < 0 || k >= g.m) bad_index(k, j, g.m);
    if (static_cast<uint64_t>(k - k0) < owned)
      fold_row<scalar_t, acc_t, R>(s + j * g.inner, val + k * g.inner, extra ? extra + k * g.inner : nullptr, j, 0,
                                   g.inner, g.n, fresh);
  }
}

// Threading strategy 3, for wide rows of features with one index value per row (an [edges, features] src along
// dim 0, kWideRow features or more) when the output is too large to copy per thread: threads split the groups. Each
// reads the whole index, folds the src rows of its own groups, and writes only those groups' output rows, in
// position order (so the first position still wins a tie, and a sum adds up in the order of one thread). Measured
// side by side, 10^6 elements, 2 threads against 1: 0.5-0.6x the time for max and for a sorted index, 0.7-1.1x for
// a sum over a random index at 32 to 128 features. The threads used to split the columns instead: on [N, 64]
// float32 sums with a few rows per group, 2 threads then ran up to 2.5x slower than 1. Narrower rows, and one
// element per row (1-D), run as one task: split by groups, sums of 10^4 to 10^5 rows of 2 to 16 features ran
// 1.5-3.6x slower on 2 threads than on 1 (each thread reads every index value for a few elements of work), 1-D
// ones 1.8-5.8x slower at 10^5 to 10^6 elements in up to half as many groups.
template <typename scalar_t, typename acc_t, Reduce R>
void reduce_by_groups(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                      bool fresh, int64_t threads) {
  const int64_t row = g.m * g.inner;
  for (int64_t o = 0; o < g.outer; ++o) {
    at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        reduce_owned_rows<scalar_t, acc_t, R>(src + o * g.n * g.inner, index + o * g.is0, g, g.m * t / threads,
                                              g.m * (t + 1) / threads, acc + o * row, extra ? extra + o * row : nullptr,
                                              fresh);
    });
  }
}

// The private copies of the output that splitting a row takes must be this many times smaller than
// the row's elements: filling, merging and (for large ones) page-faulting fresh buffers costs as much
// per group as reducing costs per element.
constexpr int64_t kBufferShare = 4;
constexpr int64_t kWideRow = 32;  // features per row from which threads split the groups (strategy 3)

template <typename scalar_t, typename acc_t, Reduce R>
void scatter_loops(const scalar_t* src, const int64_t* index, const Geometry& g, acc_t* acc, int64_t* extra,
                   bool fresh) {
  const int64_t threads = at::get_num_threads();
  // Few elements: one thread. As many rows as threads (a batch reduced along its last dim): split the
  // columns. Few rows (a 1-D src, or [edges, features] along dim 0): split each row, unless private
  // copies of the output would cost more than the reduction; then split the groups of wide rows, and
  // run anything else with one index value per row as one task.
  const bool small = g.n * g.outer * g.inner < kGrain;
  const bool buffers_cheap = (threads - 1) * g.m * kBufferShare <= g.n;
  const bool index_per_row = g.inner == 1 || g.is2 == 0;
  if (small || threads == 1 || g.outer >= threads)
    reduce_by_columns<scalar_t, acc_t, R>(src, index, g, acc, extra, fresh, /*one_task=*/small);
  else if (buffers_cheap)
    reduce_by_slices<scalar_t, acc_t, R>(src, index, g, acc, extra, fresh, /*slices=*/threads);
  else if (index_per_row && g.inner >= kWideRow)
    reduce_by_groups<scalar_t, acc_t, R>(src, index, g, acc, extra, fresh, threads);
  else  // one task for an index value per row: split by columns, 2 threads ran 2-8x slower than 1
    reduce_by_columns<scalar_t, acc_t, R>(src, index, g, acc, extra, fresh, /*one_task=*/index_per_row);
}

// The explicit instantiation of scatter_loops for one dtype and reduction R. A file that compiles
// the loops for R says, with a macro of its own that passes R on,
//   AT_FORALL_SCALAR_TYPES_AND2(Half, BFloat16, <its macro>)
// which lists the nine dtypes scatter_cpu.cpp dispatches on (AT_DISPATCH_ALL_TYPES_AND2(kHalf, kBFloat16)).
#define WB_SCATTER_CPU_LOOPS(scalar_t, R)                                                                        \
  template void scatter_loops<scalar_t, acc_type<scalar_t>, R>(const scalar_t*, const int64_t*, const Geometry&, \
                                                               acc_type<scalar_t>*, int64_t*, bool)

}  // namespace wb_scatter
