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
inline const char* device_name(DeviceType d) { return d == DeviceType::cpu ? "cpu" : "cuda"; }

}  // namespace hl
