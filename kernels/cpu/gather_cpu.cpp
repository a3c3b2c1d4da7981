// gather_rows on the CPU (see kernels/gather.h): one memcpy per row when the dtypes match, else
// an element loop that widens to float (or double for f64) and rounds on store. Single-threaded:
// it is bound by memory, and the DataLoader calls it from its own worker thread on the GPU path.
#include <cstring>

#include "kernels/error.h"
#include "kernels/gather.h"
#include "kernels/half.h"

namespace hl::kernels::cpu {
namespace {

double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return static_cast<float>(static_cast<const half*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
  }
  return 0.0;
}

// double -> f16 rounds once (double_to_half_bits); every f32/f16 value is exact in double, so
// f32 -> f16 through here equals the direct float rounding.
void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::f16: static_cast<half*>(p)[i] = half::from_bits(double_to_half_bits(v)); return;
    case DType::f64: static_cast<double*>(p)[i] = v; return;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
  }
}

}  // namespace

void gather_rows(const GatherArgs& a) {
  for (int64_t r = 0; r < a.rows; ++r)
    HL_CHECK(a.indices[r] >= 0 && a.indices[r] < a.src_rows, "gather_rows: index ", a.indices[r], " at position ", r,
             " is out of range for ", a.src_rows, " rows");
  const size_t src_row = static_cast<size_t>(a.row_elems) * dtype_size(a.src_dtype);
  const size_t dst_row = static_cast<size_t>(a.row_elems) * dtype_size(a.dst_dtype);
  const auto* src = static_cast<const unsigned char*>(a.src);
  auto* dst = static_cast<unsigned char*>(a.dst);
  for (int64_t r = 0; r < a.rows; ++r) {
    const unsigned char* s = src + static_cast<size_t>(a.indices[r]) * src_row;
    unsigned char* d = dst + static_cast<size_t>(r) * dst_row;
    if (a.src_dtype == a.dst_dtype) {
      std::memcpy(d, s, src_row);
    } else if (a.src_dtype == DType::f32 && a.dst_dtype == DType::f16) {  // the common case: one rounding
      const float* sf = reinterpret_cast<const float*>(s);
      half* dh = reinterpret_cast<half*>(d);
      for (int64_t k = 0; k < a.row_elems; ++k) dh[k] = half(sf[k]);
    } else {
      for (int64_t k = 0; k < a.row_elems; ++k) store(d, a.dst_dtype, k, load(s, a.src_dtype, k));
    }
  }
}

}  // namespace hl::kernels::cpu
