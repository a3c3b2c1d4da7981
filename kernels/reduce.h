// Reductions. On the GPU these go through CUB (generic reductions are not the lesson; DESIGN.md §7);
// on the CPU they accumulate in double. Inputs of any floating dtype; the math is never done in f16.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/elementwise.h"

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
};

// out[o] = scale * sum over the reduced dims of x. scale = 1/count gives the mean.
void reduce_sum(DeviceType dev, const ReduceIndex& ix, const void* x, DType tx, void* out, DType tout,
                double scale);

// out[r] = index of the largest element of row r of a [rows, cols] matrix (first one on ties).
void argmax_rows(DeviceType dev, int64_t rows, int64_t cols, const void* x, DType tx, int32_t* out);

// count[0] = number of i with a[i] == b[i] (i32 inputs), written as an i32 on the device of the data.
void count_equal(DeviceType dev, int64_t n, const int32_t* a, const int32_t* b, int32_t* count);

// flag[0] = 1 if any element of x is inf or NaN, else 0 (i32, on the device of x).
void any_nonfinite(DeviceType dev, int64_t n, const void* x, DType tx, int32_t* flag);

}  // namespace hl::kernels
