// gather_rows: dst[r, :] = src[indices[r], :], converting the dtype on the way.
//
// What a DataLoader does for every batch: pick the shuffled rows of a data set and lay them out as
// one contiguous batch. When the whole data set is resident on the GPU (MNIST is 188 MB as f32),
// doing this there turns a batch into one kernel launch, with no host work and no copy over PCIe;
// converting to f16 in the same pass halves what the first layer reads (paper §3: FP16 storage).
//
// Raw pointers, sizes and dtypes only (DESIGN.md §2): no Tensor here.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace hl::kernels {

struct GatherArgs {
  const void* src = nullptr;  // [src_rows, row_elems] of src_dtype
  DType src_dtype = DType::f32;
  int64_t src_rows = 0;
  int64_t row_elems = 0;
  const int32_t* indices = nullptr;  // [rows], each in [0, src_rows); on the same device as src
  int64_t rows = 0;
  void* dst = nullptr;  // [rows, row_elems] of dst_dtype
  DType dst_dtype = DType::f32;
};

// Floating dtypes convert with one round to nearest even (f16 on store); i32 copies exactly to i32.
// An out-of-range index throws on the CPU. The CUDA kernel cannot throw: it fills that row with
// NaN (0 for i32) instead, and the caller (the DataLoader) only passes indices of its permutation.
void gather_rows(DeviceType dev, const GatherArgs& args);

namespace cpu {
void gather_rows(const GatherArgs& args);
}
namespace cuda {
void gather_rows(const GatherArgs& args);
}

}  // namespace hl::kernels
