// Helpers of the CPU emulations of the NHWC convolution rungs' tile loaders
// (tests/kernels/test_conv_nhwc_index.cpp, tests/kernels/test_conv_nhwc_wgrad_index.cpp): inputs whose
// products and sums are exact in float64, and one 16-byte copy checked as the kernel would need it.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace hl::test {

// n small integers in [-4, 4]: every product and every sum of the emulation is exact, so its result
// must equal the float64 reference exactly.
inline std::vector<double> small_integers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> v(-4, 4);
  std::vector<double> out(n);
  for (double& x : out) x = v(rng);
  return out;
}

// One 16-byte copy of an emulated kernel: 8 consecutive values from `src` at `idx` (checked for
// alignment, and for bounds by std::vector::at, which throws), or zeros at -1.
inline void copy8(double* dst, const std::vector<double>& src, int64_t idx, const std::string& what) {
  if (idx < 0) {
    for (int e = 0; e < 8; ++e) dst[e] = 0.0;
    return;
  }
  EXPECT_EQ(idx % 8, 0) << what << ": a 16-byte copy from element " << idx << " is misaligned";
  for (int e = 0; e < 8; ++e) dst[e] = src.at(static_cast<size_t>(idx + e));
}

}  // namespace hl::test
