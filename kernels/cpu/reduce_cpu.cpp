// CPU reductions: sums accumulate in double (never in f16), argmax, counts, the non-finite check.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backends.h"
#include "kernels/cpu/cpu_common.h"

namespace hl::kernels::cpu {

void reduce_sum(const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout, double scale) {
  // Output strides for the kept dims (0 for reduced dims): one pass over x in memory order adds each
  // element into its output slot.
  int64_t ostride[kMaxDims] = {};
  int64_t s = 1;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    ostride[d] = ix.reduced[d] ? 0 : s;
    if (!ix.reduced[d]) s *= ix.shape[d];
  }
  const int64_t out_n = ix.out_numel();
  int64_t in_n = 1;
  for (int d = 0; d < ix.ndim; ++d) in_n *= ix.shape[d];
  std::vector<double> acc(static_cast<size_t>(out_n), 0.0);

  visit_floating(tx, "reduce_sum", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    if (out_n == 1) {  // a full reduction: the same bits with any number of threads
      acc[0] = ordered_sum(in_n, [px](int64_t i) { return static_cast<double>(load(px, i)); });
      return;
    }
    // The trailing reduced dims form runs of `inner` consecutive elements that all go to one output
    // (a conv bias gradient sums [N, K, P, Q] over N, P, Q: runs of P*Q). Each run is summed in a
    // tight loop with four double accumulators, and the odometer below steps once per run, not once
    // per element (it cost 5% of LeNet's CPU time per element). Double sums of at most 2^24-ish f32
    // terms in another order: differences stay far below the output's f32/f16 rounding.
    int trail = ix.ndim;
    int64_t inner = 1;
    while (trail > 0 && ix.reduced[trail - 1]) inner *= ix.shape[--trail];
    if (inner == 0) return;  // an empty input: every sum is 0
    int64_t idx[kMaxDims] = {};
    int64_t o = 0;
    if (inner == 1) {
      // The last dim is kept (a Linear bias gradient sums [B, N] over B): the trailing kept dims form
      // runs of `kept` consecutive elements that go to `kept` consecutive outputs, one vector add per
      // run. Each output still receives its terms in memory order, as with one odometer step each.
      while (trail > 0 && !ix.reduced[trail - 1]) inner *= ix.shape[--trail];
      if (inner == 0) return;
      for (int64_t i = 0; i < in_n; i += inner) {
        double* __restrict a = acc.data() + o;
        for (int64_t j = 0; j < inner; ++j) a[j] += static_cast<double>(load(px, i + j));
        for (int d = trail - 1; d >= 0; --d) {  // the odometer over the leading dims
          o += ostride[d];
          if (++idx[d] < ix.shape[d]) break;
          o -= ostride[d] * ix.shape[d];
          idx[d] = 0;
        }
      }
      return;
    }
    for (int64_t i = 0; i < in_n; i += inner) {
      double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      int64_t j = 0;
      for (; j + 4 <= inner; j += 4) {
        a0 += static_cast<double>(load(px, i + j));
        a1 += static_cast<double>(load(px, i + j + 1));
        a2 += static_cast<double>(load(px, i + j + 2));
        a3 += static_cast<double>(load(px, i + j + 3));
      }
      for (; j < inner; ++j) a0 += static_cast<double>(load(px, i + j));
      acc[static_cast<size_t>(o)] += (a0 + a1) + (a2 + a3);
      for (int d = trail - 1; d >= 0; --d) {  // advance the multi-index of the kept dims like an odometer
        o += ostride[d];
        if (++idx[d] < ix.shape[d]) break;
        o -= ostride[d] * ix.shape[d];
        idx[d] = 0;
      }
    }
  });
  visit_floating(tout, "reduce_sum", [&](auto tag) {
    using T = decltype(tag);
    T* po = static_cast<T*>(out);
    for (int64_t o = 0; o < out_n; ++o) store(po, o, acc[static_cast<size_t>(o)] * scale);
  });
}

void argmax_rows(int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out) {
  visit_floating(tx, "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t best = 0;
      auto best_v = load(px, r * cols);
      for (int64_t c = 1; c < cols; ++c) {
        const auto v = load(px, r * cols + c);
        if (v > best_v || (std::isnan(v) && !std::isnan(best_v))) {  // NaN wins, like PyTorch
          best_v = v;
          best = c;
        }
      }
      out[r] = static_cast<int32_t>(best);
    }
  });
}

void count_equal(int64_t n, const int32_t* a, const int32_t* b, int32_t* count) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += a[i] == b[i];
  *count = static_cast<int32_t>(c);
}

void any_nonfinite(int64_t n, const void* x, DType tx, int32_t* flag) {
  int32_t found = 0;
  visit_floating(tx, "any_nonfinite", [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x);
    for (int64_t i = 0; i < n && !found; ++i) found = !std::isfinite(load(px, i));
  });
  *flag = found;
}

}  // namespace hl::kernels::cpu
