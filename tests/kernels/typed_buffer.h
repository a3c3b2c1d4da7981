// Host buffers of any dtype, read and written as double: the host side of the kernel tests
// (tests/kernels/conv_reference.h, test_cnn_*.cpp, test_conv_cpu.cpp, test_gemm_cpu.cpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace hl::test {

// Bytes of n elements of dtype t, readable and writable as double.
class TypedBuffer {
 public:
  TypedBuffer() = default;
  TypedBuffer(DType t, size_t n) : type_(t), bytes_(n * dtype_size(t)) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t size() const { return type_ == DType::i32 ? bytes_.size() / 4 : bytes_.size() / dtype_size(type_); }
  size_t nbytes() const { return bytes_.size(); }
  const std::vector<unsigned char>& bytes() const { return bytes_; }
  DType type() const { return type_; }
  double get(size_t i) const {
    switch (type_) {
      case DType::f16: return static_cast<double>(static_cast<float>(read<half>(i)));
      case DType::f64: return read<double>(i);
      case DType::i32: return read<int32_t>(i);
      default: return static_cast<double>(read<float>(i));
    }
  }
  void set(size_t i, double v) {
    switch (type_) {
      case DType::f16: return write(i, half::from_bits(double_to_half_bits(v)));
      case DType::f64: return write(i, v);
      // NaN (fill_nan's poison) as the most negative i32, encode()'s rule in cuda_test_util.h: a cast of
      // NaN to an integer is undefined behaviour (x86 gives INT_MIN, aarch64 0: a valid index to miss).
      case DType::i32:
        return write(i, std::isnan(v) ? std::numeric_limits<int32_t>::min() : static_cast<int32_t>(v));
      default: return write(i, static_cast<float>(v));
    }
  }
  void set_all(const std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); ++i) set(i, v[i]);
  }
  // NaN in every element; in an i32 buffer the most negative i32 (set()'s rule for NaN, stored here
  // bounded by the bytes themselves: through set(), GCC 12 warns of a store past the buffer).
  void fill_nan() {
    if (type_ == DType::i32) {
      const int32_t poison = std::numeric_limits<int32_t>::min();
      for (size_t at = 0; at + sizeof(poison) <= bytes_.size(); at += sizeof(poison))
        std::memcpy(bytes_.data() + at, &poison, sizeof(poison));
      return;
    }
    for (size_t i = 0; i < size(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
  }
  std::vector<double> values() const {
    std::vector<double> out(size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = get(i);
    return out;
  }

 private:
  template <class T>
  T read(size_t i) const {
    T v;
    std::memcpy(&v, bytes_.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  template <class T>
  void write(size_t i, T v) {
    std::memcpy(bytes_.data() + i * sizeof(T), &v, sizeof(T));
  }
  DType type_ = DType::f32;
  std::vector<unsigned char> bytes_;
};

}  // namespace hl::test
