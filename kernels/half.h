// IEEE 754 binary16 ("FP16", "half"): 1 sign bit, 5 exponent bits, 10 mantissa bits.
//
// This is the storage type of the whole project (paper §3: FP16 storage and arithmetic). The
// conversions below are written out bit by bit on purpose: they are the lesson of tutorial 01 and
// they make the CPU backend emulate the GPU bit-exactly (DESIGN.md §2). They are usable on the host
// and in CUDA device code; CUDA kernels may also use the hardware intrinsics (__float2half_rn),
// which round the same way (round to nearest, ties to even), as the CUDA cast tests check
// (tests/kernels/test_cuda_kernels.cpp). One difference is allowed: a NaN stays a NaN, but its
// payload bits may not be the same (the GPU's conversion may give one canonical NaN, 0x7FFF, where
// float_to_half_bits keeps the top of the payload), so tests compare NaNs as NaN, not bit for bit.
//
// Facts worth remembering (DESIGN.md §1):
//   largest finite       65504        (0x7BFF)
//   smallest normal      2^-14        (0x0400)
//   smallest subnormal   2^-24 ~ 5.96e-8 (0x0001)
//   machine epsilon      2^-10; a weight 2048x larger than its update swallows the update.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define HL_HOST_DEVICE inline
#endif

namespace hl {

HL_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HL_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// float -> binary16 bits, round to nearest, ties to even. Handles overflow to infinity, gradual
// underflow to subnormals and flush of values below half the smallest subnormal to (signed) zero.
HL_HOST_DEVICE uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7FFFFFFFu;

  if (abs >= 0x7F800000u) {  // inf or NaN: keep NaN quiet and non-zero in the mantissa
    const uint16_t mant = abs > 0x7F800000u ? static_cast<uint16_t>(0x0200u | ((abs >> 13) & 0x03FFu)) : 0;
    return static_cast<uint16_t>(sign | 0x7C00u | mant);
  }
  if (abs >= 0x477FF000u) {  // >= 65520 = 65504 + half an ulp: rounds to infinity
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs >= 0x38800000u) {  // >= 2^-14: a normal half
    // Re-bias the exponent (127 -> 15) and drop 13 mantissa bits with RNE.
    const uint32_t mant_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0x0FFFu + mant_odd;  // RNE: add just under half, plus the odd bit
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  if (abs > 0x33000000u) {  // (2^-25, 2^-14): a subnormal half (exactly 2^-25 ties to even = 0)
    // value = mant * 2^-24. Shift the full 24-bit significand right so that it counts 2^-24 units.
    const uint32_t exp = abs >> 23;                    // biased float exponent, 102..112
    const uint32_t sig = (abs & 0x007FFFFFu) | 0x00800000u;  // 1.m as a 24-bit integer
    const uint32_t shift = 126u - exp;                 // 14..24
    const uint32_t mant = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    const uint32_t up = (rem > halfway) || (rem == halfway && (mant & 1u));
    return static_cast<uint16_t>(sign | (mant + up));  // a carry into 0x0400 is the correct normal
  }
  return sign;  // |f| <= 2^-25: rounds to zero
}

// binary16 bits -> float. Exact: every half is representable as a float.
HL_HOST_DEVICE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x03FFu;
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));  // normal
  if (mant == 0) return bits_float(sign);                                      // +-0
  // subnormal: normalize the mantissa into a float
  int e = 113;  // float exponent of 2^-14
  while ((mant & 0x0400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x03FFu) << 13));
}

// The storage type. Arithmetic is deliberately not overloaded: halfling computes in float and
// rounds on store, exactly like the GPU kernels (FP16 storage, FP32 math).
struct half {
  uint16_t bits = 0;
  half() = default;
  HL_HOST_DEVICE explicit half(float f) : bits(float_to_half_bits(f)) {}
  HL_HOST_DEVICE static half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  HL_HOST_DEVICE explicit operator float() const { return half_bits_to_float(bits); }
};
static_assert(sizeof(half) == 2, "hl::half must be 2 bytes");

// double -> binary16 with a single correct rounding. Going double -> float -> half would round
// twice and can land on the wrong side of a tie, so first round to float *to odd* (truncate, then
// set the last bit if anything was lost); float keeps 13 more bits than half, so the final RNE
// step then sees exactly the right tie-breaking information.
inline uint16_t double_to_half_bits(double d) {
  if (!(d == d)) return float_to_half_bits(static_cast<float>(d));  // NaN
  float f = static_cast<float>(d);
  if (f != f || f == 0.0f || (f - f) != 0.0f) return float_to_half_bits(f);  // inf or zero
  if ((f > 0 && static_cast<double>(f) > d) || (f < 0 && static_cast<double>(f) < d)) {
    uint32_t u = float_bits(f);  // rounded away from zero: step one ulp back toward zero
    f = bits_float(u - 1u);
  }
  if (static_cast<double>(f) != d) f = bits_float(float_bits(f) | 1u);  // sticky bit: round to odd
  return float_to_half_bits(f);
}

// Round a float to the nearest representable half and back (what storing to FP16 does).
HL_HOST_DEVICE float round_to_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }

}  // namespace hl
