// Host-side helpers of the CUDA kernel tests (test_cuda_kernels.cpp, test_gemm_cuda.cpp,
// test_conv_cuda.cpp): encoding values into any dtype, device buffers filled from float64 values and
// read back, NaN poisoning, and the element-by-element comparison with a stated tolerance
// (DESIGN.md §6).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/runtime.h"
#include "tests/test_util.h"

namespace hl::test::gpu {

using runtime::CopyKind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kF32Eps = 1.0 / (1 << 24);  // unit roundoff of f32: half an ulp at 1.0, 2^-24
constexpr double kF16Eps = 1.0 / (1 << 11);  // unit roundoff of f16, 2^-11

// ---- host-side encoding of values in each dtype -----------------------------------------------------

// What storing v into dtype t leaves (single rounding, like the kernels).
inline double round_to(DType t, double v) {
  switch (t) {
    case DType::f16: return half_bits_to_float(double_to_half_bits(v));
    case DType::f32: return static_cast<float>(v);
    case DType::f64: return v;
    case DType::i32: return static_cast<int32_t>(v);
  }
  return v;
}

inline std::vector<uint8_t> encode(const std::vector<double>& v, DType t) {
  std::vector<uint8_t> bytes(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = bytes.data() + i * dtype_size(t);
    if (t == DType::f16) {
      const uint16_t h = double_to_half_bits(v[i]);
      std::memcpy(p, &h, 2);
    } else if (t == DType::f32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(p, &f, 4);
    } else if (t == DType::f64) {
      std::memcpy(p, &v[i], 8);
    } else {
      const int32_t k = std::isnan(v[i]) ? std::numeric_limits<int32_t>::min() : static_cast<int32_t>(v[i]);
      std::memcpy(p, &k, 4);
    }
  }
  return bytes;
}

inline std::vector<double> decode(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<double> v(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    const uint8_t* p = bytes.data() + i * dtype_size(t);
    if (t == DType::f16) {
      uint16_t h;
      std::memcpy(&h, p, 2);
      v[i] = half_bits_to_float(h);
    } else if (t == DType::f32) {
      float f;
      std::memcpy(&f, p, 4);
      v[i] = f;
    } else if (t == DType::f64) {
      std::memcpy(&v[i], p, 8);
    } else {
      int32_t k;
      std::memcpy(&k, p, 4);
      v[i] = k;
    }
  }
  return v;
}

// Device memory holding n elements of dtype t.
class DeviceBuffer {
 public:
  DeviceBuffer(size_t n, DType t) : n_(n), t_(t), ptr_(runtime::cuda_malloc(n * dtype_size(t))) {}
  DeviceBuffer(const std::vector<double>& values, DType t) : DeviceBuffer(values.size(), t) { upload(values); }
  ~DeviceBuffer() { runtime::cuda_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  DType dtype() const { return t_; }

  void upload(const std::vector<double>& values) {
    const std::vector<uint8_t> bytes = encode(values, t_);
    runtime::cuda_memcpy_async(ptr_, bytes.data(), bytes.size(), CopyKind::host_to_device);
    runtime::cuda_synchronize();  // `bytes` dies at the end of this function
  }
  // NaN in every element (the most negative i32 for integer buffers): a value no kernel should leave.
  void poison() { upload(std::vector<double>(n_, kNaN)); }
  std::vector<double> download() const {
    std::vector<uint8_t> bytes(n_ * dtype_size(t_));
    runtime::cuda_memcpy_async(bytes.data(), ptr_, bytes.size(), CopyKind::device_to_host);
    runtime::cuda_synchronize();
    return decode(bytes, t_);
  }

 private:
  size_t n_;
  DType t_;
  void* ptr_;
};

// Check every element: |out - ref| <= tol(i); a NaN reference requires NaN, an infinite one the same
// infinity. Reports the first few failures with their index.
template <class Tol>
void expect_all_close(const std::vector<double>& out, const std::vector<double>& ref, Tol tol,
                      const std::string& what) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  size_t bad = 0;
  std::ostringstream first;
  first << std::setprecision(17);
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = out[i], r = ref[i];
    bool ok;
    if (std::isnan(r)) {
      ok = std::isnan(o);
    } else if (std::isinf(r)) {
      ok = o == r;
    } else {
      ok = std::isfinite(o) && std::fabs(o - r) <= tol(i);
    }
    if (!ok && bad++ < 5) first << "\n    [" << i << "] got " << o << ", want " << r << " (tolerance " << tol(i) << ")";
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << out.size() << " elements wrong (rel_error "
                     << ::hl::test::rel_error(out, ref) << ")" << first.str();
}

inline void expect_all_equal(const std::vector<double>& out, const std::vector<double>& ref, const std::string& what) {
  expect_all_close(out, ref, [](size_t) { return 0.0; }, what);
}

inline std::string name(DType a) { return dtype_name(a); }
inline std::string name(DType a, DType b) { return name(a) + "->" + name(b); }

}  // namespace hl::test::gpu
