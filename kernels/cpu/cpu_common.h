// Shared helpers for the CPU backend: typed loads/stores and dtype dispatch.
//
// The CPU backend is the reference semantics of halfling (DESIGN.md §2): f16 is storage only,
// every value is widened to float (double for f64) for the arithmetic and rounded to nearest-even
// on store, exactly what the CUDA kernels do.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace hl::kernels::cpu {

// The arithmetic type for a storage type: float for f16 and f32; double for f64, and for i32, whose
// values above 2^24 a float cannot hold (a cast from i32 then rounds once, from the exact value).
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, int32_t>, double, float>;

template <class T>
inline compute_t<T> load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, half>) {
    return static_cast<float>(p[i]);
  } else {
    return static_cast<compute_t<T>>(p[i]);
  }
}

template <class T, class V>
inline void store(T* p, int64_t i, V v) {
  if constexpr (std::is_same_v<T, half> && std::is_same_v<V, double>) {
    p[i] = half::from_bits(double_to_half_bits(v));  // one rounding, not two
  } else if constexpr (std::is_same_v<T, half>) {
    p[i] = half(static_cast<float>(v));
  } else {
    p[i] = static_cast<T>(v);
  }
}

// Call f(T{}) with T the C++ type of dtype t.
template <class F>
inline void visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f16: return f(half{});
    case DType::f64: return f(double{});
    case DType::i32: return f(int32_t{});
  }
}

// Like visit_dtype but only for floating dtypes; `op` names the caller in the error.
template <class F>
inline void visit_floating(DType t, const char* op, F&& f) {
  HL_CHECK(is_floating(t), op, ": needs a floating dtype, got ", dtype_name(t));
  visit_dtype(t, [&](auto tag) {
    if constexpr (!std::is_same_v<decltype(tag), int32_t>) f(tag);
  });
}

// 128-bit vectors in GCC's vector extension (clang has it too): SSE2 on any x86-64, NEON on ARM, so
// code written with them needs no run-time dispatch. Comparisons give i32x4 lanes of all ones or zeros.
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));

// Elementwise loops run in parallel once they are large enough to pay for the threads.
constexpr int64_t kParallelThreshold = 1 << 15;

}  // namespace hl::kernels::cpu
