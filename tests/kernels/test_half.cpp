// IEEE binary16 conversions: the values pinned by the foundation issue, plus exhaustive checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>

#include "kernels/half.h"
#include "tests/test_util.h"

namespace {

using hl::half;
using hl::round_to_half;

float h(float x) { return round_to_half(x); }

TEST(Half, PinnedValues) {
  const float two_m24 = std::ldexp(1.0f, -24);
  const float two_m25 = std::ldexp(1.0f, -25);
  EXPECT_EQ(h(two_m24), two_m24);                 // smallest subnormal stays
  EXPECT_EQ(h(two_m25), 0.0f);                    // exactly half of it: tie to even -> 0
  EXPECT_EQ(h(1.5f * two_m25), two_m24);          // above the tie -> rounds up to 2^-24
  EXPECT_EQ(h(65504.0f), 65504.0f);               // largest finite stays
  EXPECT_EQ(h(65519.0f), 65504.0f);               // below 65520 rounds down
  EXPECT_TRUE(std::isinf(h(65520.0f)) && h(65520.0f) > 0);  // 65504 + half an ulp -> +inf
  EXPECT_EQ(h(1.0f + std::ldexp(1.0f, -11)), 1.0f);          // a tie between 1 and 1+2^-10 -> even (1)
  EXPECT_EQ(h(2049.0f), 2048.0f);                 // spacing is 2 above 2048: tie -> even
  EXPECT_EQ(h(2051.0f), 2052.0f);                 // the other tie goes up to the even neighbour
  EXPECT_EQ(h(std::ldexp(1.0f, -14)), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(h(-two_m25), 0.0f);
  EXPECT_TRUE(std::signbit(h(-two_m25)));         // the sign of zero is kept
  EXPECT_TRUE(std::isnan(h(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(h(-std::numeric_limits<float>::infinity())));
}

TEST(Half, PrintsWithFourSignificantDigits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", static_cast<double>(h(0.123456789f)));
  EXPECT_EQ(std::string(buf), "0.1235");
  std::snprintf(buf, sizeof buf, "%.8g", static_cast<double>(0.123456789f));
  EXPECT_EQ(std::string(buf), "0.12345679");
}

TEST(Half, EveryBitPatternRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const half x = half::from_bits(static_cast<uint16_t>(b));
    const float f = static_cast<float>(x);
    const uint16_t back = half(f).bits;
    if (std::isnan(f)) {
      EXPECT_EQ(back & 0x7C00u, 0x7C00u) << b;
      EXPECT_NE(back & 0x03FFu, 0u) << b;  // still a NaN
    } else {
      ASSERT_EQ(back, b) << "bit pattern " << b << " -> " << f;
    }
  }
}

// Reference rounding by brute force: the nearest of all finite halves, ties to the even pattern.
float nearest_half_bruteforce(double x) {
  if (std::fabs(x) >= 65520.0) return x > 0 ? INFINITY : -INFINITY;
  double best = 0.0, best_err = INFINITY;
  uint16_t best_bits = 0;
  for (uint32_t b = 0; b < 0x7C00; ++b) {
    for (int sign = 0; sign < 2; ++sign) {
      const uint16_t bits = static_cast<uint16_t>(b | (sign ? 0x8000u : 0u));
      const double v = static_cast<double>(hl::half_bits_to_float(bits));
      const double err = std::fabs(v - x);
      if (err < best_err || (err == best_err && (bits & 1u) == 0 && (best_bits & 1u) == 1)) {
        best = v;
        best_err = err;
        best_bits = bits;
      }
    }
  }
  return static_cast<float>(best);
}

TEST(Half, RandomFloatsRoundToNearestEven) {
  const uint64_t seed = hl::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 300; ++i) {
    // Values across the whole range, including subnormals and the overflow boundary.
    const int e = static_cast<int>(rng() % 44) - 27;
    const double m = 1.0 + static_cast<double>(rng() % (1u << 23)) / (1u << 23);
    const float x = static_cast<float>(std::ldexp(m, e) * ((rng() & 1) ? -1 : 1));
    ASSERT_EQ(h(x), nearest_half_bruteforce(x)) << "x = " << x;
  }
}

TEST(Half, DoubleRoundsOnce) {
  // 1 + 2^-11 + 2^-40 is just above the tie between 1 and 1 + 2^-10: it must round up. Going through
  // float first would land exactly on the tie (float drops the 2^-40) and round down to 1.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(hl::half_bits_to_float(hl::double_to_half_bits(x)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(h(static_cast<float>(x)), 1.0f);  // the double-rounding trap, for contrast
  const uint64_t seed = hl::test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const double v = std::ldexp(1.0 + static_cast<double>(rng() >> 12) * 0x1p-52, static_cast<int>(rng() % 40) - 26);
    ASSERT_EQ(hl::half_bits_to_float(hl::double_to_half_bits(v)), nearest_half_bruteforce(v)) << v;
  }
}

}  // namespace
