// Element types and devices, shared by the kernels and the framework.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/half.h"

namespace hl {

// f16 is storage (compute in f32, round on store); f64 exists for gradient checks on the CPU.
enum class DType : uint8_t { f32, f16, i32, f64 };
enum class DeviceType : uint8_t { cpu, cuda };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f16: return 2;
    case DType::f64: return 8;
    default: return 4;
  }
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::f64: return "f64";
  }
  return "?";
}
inline bool is_floating(DType t) { return t != DType::i32; }

// Floating -> i32 by the rule of CUDA's cvt.rzi.s32.f32/f64, which the CUDA cast kernels compile to, so
// that both backends give the same integers: truncate toward zero, saturate what does not fit (and
// +-inf) to INT32_MIN / INT32_MAX, NaN -> 0. A plain static_cast of such a value is undefined behaviour
// in C++ (x86's cvttsd2si gives INT32_MIN for all of them, ARM saturates). Every float and half is
// exactly a double, so one function serves all three input dtypes: the CPU cast, and the fill value of
// both backends (the CUDA fill converts its value on the host).
inline int32_t saturating_i32(double v) {
  if (v != v) return 0;
  if (v <= -2147483648.0) return INT32_MIN;
  if (v >= 2147483647.0) return INT32_MAX;  // [2^31 - 1, 2^31) truncates to INT32_MAX as well
  return static_cast<int32_t>(v);           // in range: truncation toward zero is defined
}
inline const char* device_name(DeviceType d) { return d == DeviceType::cpu ? "cpu" : "cuda"; }

// Whether the bytes [a, a + a_bytes) and [b, b + b_bytes) share any byte (pointers into one address
// space): an operation that reads one while it writes the other may need a copy, or must refuse.
inline bool bytes_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace hl
