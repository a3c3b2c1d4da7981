// Shared helpers for the CPU backend: typed loads/stores and dtype dispatch.
//
// The CPU backend is the reference semantics of halfling (DESIGN.md §2): f16 is storage only,
// every value is widened to float (double for f64) for the arithmetic and rounded to nearest-even
// on store, exactly what the CUDA kernels do.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace hl::kernels::cpu {

// The arithmetic type for a storage type: float for f16 and f32; double for f64, and for i32, whose
// values above 2^24 a float cannot hold (a cast from i32 then rounds once, from the exact value).
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, int32_t>, double, float>;

// f16 <-> f32 without branches, so that the loops that call them vectorize (a branch per value kept
// every f16 loop of the CPU backend scalar: under `mixed`, LeNet spent 40% more time converting than
// computing). They give the same bits as kernels/half.h's half_bits_to_float and float_to_half_bits,
// which stay the readable definitions: tests/kernels/test_half.cpp compares all 65536 halves and all
// 2^32 floats.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t mag = h & 0x7FFFu;  // exponent and mantissa
  // normal: re-bias the exponent from 15 to 127 (+112 << 23); inf/NaN: once more, to 255.
  // subnormal: mantissa * 2^-24, where the int -> float conversion and the scaling are exact.
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(mag < 0x0400u);  // all ones or zero
  const uint32_t is_special = 0u - static_cast<uint32_t>(mag >= 0x7C00u);
  const uint32_t normal = (mag << 13) + 0x38000000u + (is_special & 0x38000000u);
  const uint32_t subnormal = float_bits(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-24f);
  return bits_float(sign | (subnormal & is_subnormal) | (normal & ~is_subnormal));
}

// Round to nearest, ties to even. All four outcomes are computed and one is selected:
//   normal     re-bias the exponent (127 -> 15) and drop 13 mantissa bits, rounding by integer addition
//              (just under half an ulp, plus the lowest kept bit: ties go to even);
//   subnormal  |f| + 0.5: in [0.5, 1) a float's ulp is 2^-24, the unit of a subnormal half, so the
//              FPU's own round-to-nearest-even rounds |f| exactly as a half must, and the mantissa
//              bits of the sum are the half's (a carry into 2^-14 gives the smallest normal, as it
//              should). This relies on the default rounding mode, which halfling never changes;
//   overflow   |f| >= 65520 (65504 + half an ulp): infinity;
//   NaN        quiet, with the top of the payload, as float_to_half_bits.
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  const uint32_t normal = (a + 0x0FFFu + ((a >> 13) & 1u) - 0x38000000u) >> 13;  // wraps below 2^-14: unused there
  const uint32_t subnormal = float_bits(bits_float(a) + 0.5f) - 0x3F000000u;
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x03FFu);
  // Selects as masks of all ones or zeros (the compilers leave `?:` here as branches).
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(a < 0x38800000u);
  const uint32_t is_overflow = 0u - static_cast<uint32_t>(a >= 0x477FF000u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(a > 0x7F800000u);
  uint32_t r = (subnormal & is_subnormal) | (normal & ~is_subnormal);
  r = (0x7C00u & is_overflow) | (r & ~is_overflow);
  r = (nan & is_nan) | (r & ~is_nan);
  return static_cast<uint16_t>(sign | r);
}

// The same conversions over runs of values (kernels/cpu/half_convert_cpu.cpp): on x86 with F16C one
// instruction converts 8 values; the bits are the same as above, value for value.
void widen_f16_run(const half* src, float* dst, int64_t n);
void narrow_f16_run(const float* src, half* dst, int64_t n);

// c ? a : b, for float as a bit mask. With `?:` the compiler may move the computation of a (an f16
// widening, say) into the branch that uses it, and then leaves the branch in place, because it does
// not turn a branch around floating-point arithmetic into a select: the loop stays scalar. Same
// result as `?:` for every input, -0 and NaN included (the bits are copied, not computed).
template <class C>
inline C select(bool c, C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    const uint32_t keep = 0u - static_cast<uint32_t>(c);
    return bits_float((float_bits(a) & keep) | (float_bits(b) & ~keep));
  } else {
    return c ? a : b;  // f64 (gradient checks) and integers: not on a hot path
  }
}

template <class T>
inline compute_t<T> load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, half>) {
    return f16_to_f32(p[i].bits);
  } else {
    return static_cast<compute_t<T>>(p[i]);
  }
}

template <class T, class V>
inline void store(T* p, int64_t i, V v) {
  if constexpr (std::is_same_v<T, half> && std::is_same_v<V, double>) {
    p[i] = half::from_bits(double_to_half_bits(v));  // one rounding, not two
  } else if constexpr (std::is_same_v<T, half>) {
    p[i] = half::from_bits(f32_to_f16(static_cast<float>(v)));
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

// sum of term(i) for i in [0, n), in double, the same bits for any thread count: chunks of a fixed
// size are summed in order, in parallel, then the chunks' sums are added in order. (An OpenMP
// reduction adds in an order that depends on the thread count: a crafted f32 sum came out 1.0 with one
// thread and 1.00000012 with two; found by review, 2026-11-29.) Full sums and the gradient norm use it.
template <class Term>
double ordered_sum(int64_t n, Term term) {
  constexpr int64_t kChunk = 32768;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0.0;
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) sum += term(i);
    partial[static_cast<size_t>(c)] = sum;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace hl::kernels::cpu
