// Helpers of the CPU emulations of the NHWC convolution rungs' tile loaders
// (tests/kernels/test_conv_nhwc_index.cpp, tests/kernels/test_conv_nhwc_wgrad_index.cpp): inputs whose
// products and sums are exact in float64, one 16-byte copy checked as the kernel would need it, the
// hand-off tests' helpers, and the shared memory a block asks for checked against what it puts there.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
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

// The tests of the rungs' hand-off reasons: the largest int, where Problem's 32-bit sizes end, and
// whether a reason names the bound meant.
inline constexpr int64_t kIntMax = std::numeric_limits<int>::max();
inline bool says(const std::string& reason, const char* part) { return reason.find(part) != std::string::npos; }

// The shared memory of an NHWC rung's block, as its header's constants lay it out: a ring of `stages`
// stages, each an FP16 A tile of a_rows rows a_ld halves apart then a B tile of b_rows x b_ld (the
// kernel's a_stage and b_stage pointers), and after the K loop an FP32 staging tile of c_rows x c_ld in
// the same, dead, ring. The *_cols are the widths of data in a row, which the padded rows must hold in
// whole 16-byte vectors. Only a GPU run would otherwise see a stage that overlaps the next.
struct SmemPlan {
  int stages, a_rows, a_cols, a_ld, b_rows, b_cols, b_ld, c_rows, c_cols, c_ld;
  int stage_elems, ring_bytes, c_bytes, smem_bytes;  // the header's
};
inline void expect_smem_holds(const SmemPlan& p) {
  EXPECT_GE(p.a_ld, p.a_cols);
  EXPECT_GE(p.b_ld, p.b_cols);
  EXPECT_GE(p.c_ld, p.c_cols);
  EXPECT_EQ(p.a_ld % 8, 0) << "16-byte rows of halves";
  EXPECT_EQ(p.b_ld % 8, 0);
  EXPECT_EQ(p.c_ld % 4, 0) << "16-byte rows of floats";
  EXPECT_EQ(p.stage_elems, p.a_rows * p.a_ld + p.b_rows * p.b_ld);
  EXPECT_EQ(p.ring_bytes, p.stages * p.stage_elems * 2);
  EXPECT_EQ(p.c_bytes, p.c_rows * p.c_ld * 4);
  EXPECT_EQ(p.smem_bytes, std::max(p.ring_bytes, p.c_bytes));
}

}  // namespace hl::test
