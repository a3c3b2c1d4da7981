// gather_rows on the GPU (see kernels/gather.h): the DataLoader's batch assembly for a data set
// resident in device memory. One grid-stride loop over the rows x row_elems outputs; consecutive
// threads handle consecutive elements of a row, so both the reads (within one source row) and the
// writes are coalesced. The dtype conversion happens in registers, on the way through.
//
// No previous rung: this is the only version. A copy kernel is bound by memory bandwidth, and this
// one already reads and writes every byte once. Paper: none of the three techniques of §3 (it feeds
// them: a data set kept on the device is converted here to the batch's dtype, once per batch).
#include "kernels/cuda/common.cuh"
#include "kernels/gather.h"

namespace hl::kernels::cuda {
namespace {

// C is the compute type: float for f16/f32 pairs, double when an i32 or f64 is involved (a double
// holds every i32 and f32 exactly, so the only rounding is the store's).
template <class C>
__global__ void gather_rows_kernel(const void* __restrict__ src, DType src_t, int64_t src_rows, int64_t row_elems,
                                   const int32_t* __restrict__ indices, int64_t rows, void* __restrict__ dst,
                                   DType dst_t) {
  const int64_t total = rows * row_elems;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    const int64_t r = i / row_elems, k = i - r * row_elems;
    const int32_t s = indices[r];
    // An index outside the source would be an out-of-bounds read; make the row visibly wrong instead.
    const C v = (s >= 0 && s < src_rows) ? load_as<C>(src, src_t, static_cast<int64_t>(s) * row_elems + k)
                                         : (dst_t == DType::i32 ? C(0) : C(NAN));
    store_as<C>(dst, dst_t, i, v);
  }
}

}  // namespace

void gather_rows(const GatherArgs& a) {
  const int64_t total = a.rows * a.row_elems;
  const bool exact = a.src_dtype == DType::i32 || a.src_dtype == DType::f64 || a.dst_dtype == DType::f64;
  if (exact) {
    gather_rows_kernel<double><<<grid_for(total), kBlock, 0, stream()>>>(a.src, a.src_dtype, a.src_rows, a.row_elems,
                                                                         a.indices, a.rows, a.dst, a.dst_dtype);
  } else {
    gather_rows_kernel<float><<<grid_for(total), kBlock, 0, stream()>>>(a.src, a.src_dtype, a.src_rows, a.row_elems,
                                                                        a.indices, a.rows, a.dst, a.dst_dtype);
  }
  HL_LAUNCH_CHECK("gather_rows_kernel");
}

}  // namespace hl::kernels::cuda
