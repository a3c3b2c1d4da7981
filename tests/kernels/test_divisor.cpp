// kernels/divisor.h: division by a launch-invariant number as a multiply and a shift. The kernels call
// exactly this code (HL_HOST_DEVICE), so the quotients checked here against `/` are the ones the GPU
// computes; only mulhi differs, and it is the hardware's __umulhi / __umul64hi, the high half of the
// same product. Plain C++: no GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/divisor.h"
#include "kernels/error.h"

namespace {

using hl::kernels::Divisor;

// The dividends most likely to expose an off-by-one in the magic number: around 0, around every
// multiple of d near the start and near the top of the range, and the top itself.
template <class U>
std::vector<U> dividends_around_multiples(U d, U top) {
  std::vector<U> n = {0, 1, 2, top, static_cast<U>(top - 1), static_cast<U>(top / 2), static_cast<U>(top / 2 + 1)};
  for (U k = 1; k <= 64; ++k) {
    for (const U q : {k, static_cast<U>(top / d - k + 1)}) {  // q * d fits: q <= top / d
      if (q == 0 || q > top / d) continue;
      const U m = q * d;
      n.push_back(m);
      n.push_back(m - 1);
      if (m < top) n.push_back(m + 1);
    }
  }
  return n;
}

template <class U>
void expect_exact(const Divisor& div, U top, std::mt19937_64& rng, int random_draws) {
  const U d = static_cast<U>(div.value());
  for (const U n : dividends_around_multiples<U>(d, top)) {
    ASSERT_EQ(div.quotient(n), n / d) << n << " / " << d << " (" << sizeof(U) * 8 << "-bit)";
  }
  for (int i = 0; i < random_draws; ++i) {
    const U n = static_cast<U>(rng());
    ASSERT_EQ(div.quotient(n), n / d) << n << " / " << d << " (" << sizeof(U) * 8 << "-bit)";
  }
}

// Every divisor a convolution's shapes give in practice, and the powers of two and their neighbours,
// and the largest divisors, at both widths.
std::vector<uint32_t> divisors_to_check() {
  std::vector<uint32_t> d;
  for (uint32_t v = 1; v <= 4096; ++v) d.push_back(v);
  for (int b = 12; b < 32; ++b) {
    const uint32_t p = uint32_t{1} << b;
    d.insert(d.end(), {p - 1, p, p + 1});
  }
  d.insert(d.end(), {0x7fffffffu, 0xfffffffeu, 0xffffffffu, 100352u, 1000003u, 2147483629u});
  return d;
}

TEST(Divisor, ThirtyTwoBitQuotientsMatchDivisionForEveryDividendChecked) {
  std::mt19937_64 rng(20261128);
  for (const uint32_t d : divisors_to_check()) expect_exact<uint32_t>(Divisor(d), 0xffffffffu, rng, 64);
}

TEST(Divisor, SixtyFourBitQuotientsMatchDivisionForEveryDividendChecked) {
  std::mt19937_64 rng(20261129);
  for (const uint32_t d : divisors_to_check()) expect_exact<uint64_t>(Divisor(d), ~uint64_t{0}, rng, 64);
}

// Exhaustive where it is cheap: every 32-bit dividend below 2^20 for the divisors of LeNet's and
// VGG-small's layers (R*S = 25, 9; S = 5, 3; P*Q and Q of 28x28, 14x14, 32x32, 16x16, 8x8, 10x10).
TEST(Divisor, EveryDividendBelowTwoToTheTwentyForTheCanonicalModelsDivisors) {
  for (const uint32_t d : {1u, 3u, 5u, 8u, 9u, 10u, 14u, 16u, 25u, 28u, 32u, 64u, 100u, 196u, 256u, 784u, 1024u}) {
    const Divisor div(d);
    for (uint32_t n = 0; n < (1u << 20); ++n) ASSERT_EQ(div.quotient(n), n / d) << n << " / " << d;
  }
}

TEST(Divisor, IntHelpersDivideNonNegativeIndices) {
  const Divisor nine(9);
  EXPECT_EQ(hl::kernels::divide(0, nine), 0);
  EXPECT_EQ(hl::kernels::divide(2303, nine), 255);  // VGG's 256 -> 256: the last reduction index's channel
  EXPECT_EQ(hl::kernels::divide(int64_t{128} * 32 * 32 * 9 - 1, nine), int64_t{128} * 32 * 32 - 1);
  EXPECT_EQ(hl::kernels::divide(int64_t{1} << 40, Divisor(1024)), int64_t{1} << 30);
  const Divisor one;  // the default divides by 1
  EXPECT_EQ(one.value(), 1u);
  EXPECT_EQ(hl::kernels::divide(123456789, one), 123456789);
}

TEST(Divisor, RefusesZeroNegativeAndTooLargeDivisorsByName) {
  for (const int64_t bad : {int64_t{0}, int64_t{-3}, int64_t{1} << 32}) {
    try {
      Divisor d(bad);
      FAIL() << "Divisor(" << bad << ") was accepted";
    } catch (const hl::Error& e) {
      EXPECT_NE(std::string(e.what()).find("Divisor: the divisor must be in [1, 2^32 - 1], got " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
