// Reductions. On the GPU these go through CUB (generic reductions are not the lesson; DESIGN.md §7),
// but for the per-channel sums of bias gradients, which take kernels of their own (reduce_plan.h's
// channel path); on the CPU they accumulate in double. Inputs of any floating dtype; the math is never done in f16.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"
#include "kernels/error.h"

namespace hl::kernels {

// Which dimensions of x are summed away. The output holds the kept dimensions in order.
struct ReduceIndex {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  bool reduced[kMaxDims] = {};
  int64_t out_numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= reduced[i] ? 1 : shape[i];
    return n;
  }
  int64_t reduce_numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= reduced[i] ? shape[i] : 1;
    return n;
  }

  // The output that element i of the dense input (row-major order) is summed into: the plain reading of
  // the reduction, which the tests hold every path to.
  int64_t output_of(int64_t i) const {
    int64_t o = 0, o_stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t c = i % shape[d];
      i /= shape[d];
      if (!reduced[d]) {
        o += c * o_stride;
        o_stride *= shape[d];
      }
    }
    return o;
  }

  // A dense tensor of `shape` summed over `dims` (0-based): how the tests and benchmarks write one.
  // The framework's sum() builds its own, with negative dimensions and its op's name in the errors.
  static ReduceIndex of(const std::vector<int64_t>& shape, const std::vector<int>& dims) {
    HL_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "ReduceIndex::of: at most ", kMaxDims,
             " dimensions, got ", shape.size());
    ReduceIndex ix;
    ix.ndim = static_cast<int>(shape.size());
    for (int d = 0; d < ix.ndim; ++d) ix.shape[d] = shape[static_cast<size_t>(d)];
    for (int d : dims) {
      HL_CHECK(d >= 0 && d < ix.ndim, "ReduceIndex::of: dimension ", d, " out of range for ", ix.ndim, " dimensions");
      ix.reduced[d] = true;
    }
    return ix;
  }
};

// out[o] = scale * sum over the reduced dims of x. scale = 1/count gives the mean.
void reduce_sum(DeviceType dev, const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout,
                double scale);

// out[r] = index of the largest element of row r of a [rows, cols] matrix (first one on ties). Rows of
// more than 2^31 - 1 columns are refused: the index is an i32. So are rows of 0 columns (no maximum),
// unless there are no rows.
void argmax_rows(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out);

// count[0] = number of i with a[i] == b[i] (i32 inputs), written as an i32 on the device of the data;
// n is at most 2^31 - 1, so that the count fits.
void count_equal(DeviceType dev, int64_t n, const int32_t* a, const int32_t* b, int32_t* count);

// flag[0] = 1 if any element of x is inf or NaN, else 0 (i32, on the device of x).
void any_nonfinite(DeviceType dev, int64_t n, const void* x, DType tx, int32_t* flag);

}  // namespace hl::kernels
