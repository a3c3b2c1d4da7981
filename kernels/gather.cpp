// Dispatch and argument checks for gather_rows (see gather.h). Kept out of kernels/dispatch.cpp so
// that the op family lives in its own files, like the GEMM registry.
#include "kernels/gather.h"

#include "kernels/error.h"

namespace hl::kernels {

void gather_rows(DeviceType dev, const GatherArgs& a) {
  HL_CHECK(a.src_rows >= 0 && a.row_elems >= 0 && a.rows >= 0, "gather_rows: negative size (src_rows ", a.src_rows,
           ", row_elems ", a.row_elems, ", rows ", a.rows, ")");
  if (a.rows == 0 || a.row_elems == 0) return;
  HL_CHECK(a.src && a.indices && a.dst, "gather_rows: null pointer (src, indices or dst)");
  HL_CHECK((a.src_dtype == DType::i32) == (a.dst_dtype == DType::i32), "gather_rows: cannot convert ",
           dtype_name(a.src_dtype), " to ", dtype_name(a.dst_dtype), " (i32 gathers only to i32)");
  if (dev == DeviceType::cpu) return cpu::gather_rows(a);
#if defined(HALFLING_WITH_CUDA)
  return cuda::gather_rows(a);
#else
  throw Error("gather_rows: a cuda buffer reached a build without CUDA (rebuild with -DHALFLING_CUDA=ON)");
#endif
}

}  // namespace hl::kernels
