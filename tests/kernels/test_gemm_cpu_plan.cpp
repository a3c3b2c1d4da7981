// How the blocked CPU GEMM cuts a product into blocks and tasks (kernels/cpu/gemm_cpu_plan.h). The
// results are checked in test_gemm_cpu.cpp; they stay right whatever the plan gives as long as the
// blocks cover the problem, and even a plan with a block too many computes the right numbers (it packs
// and multiplies nothing). So only these tests see a plan that wastes work or memory: the sixteenth
// mutation sweep found the block arithmetic and the budgets unchecked (docs/hardening.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cpu/gemm_cpu_plan.h"

namespace hl::kernels::cpu::gemm_plan {
namespace {

TEST(GemmCpuPlan, CeilDivAndRoundUpAreExact) {
  for (int64_t b = 1; b <= 40; ++b) {
    for (int64_t a = 0; a <= 300; ++a) {
      const int64_t q = ceil_div(a, b);
      ASSERT_TRUE(q * b >= a && (q - 1) * b < a) << a << " / " << b << " rounded up gave " << q;
      ASSERT_EQ(round_up(a, b), q * b) << a << " rounded up to a multiple of " << b;
    }
  }
}

// As few blocks as max_block allows, all of one size (a multiple of unit), none past what n needs.
TEST(GemmCpuPlan, EvenBlocksAreAsFewAsPossibleAndNoneIsEmpty) {
  for (const int64_t unit : {int64_t{1}, int64_t{4}, int64_t{6}, int64_t{12}}) {
    for (const int64_t max_block : {int64_t{96}, int64_t{256}}) {
      for (int64_t n = 1; n <= 1100; ++n) {
        const int64_t block = even_block(n, max_block, unit), blocks = ceil_div(n, block);
        SCOPED_TRACE("n = " + std::to_string(n) + ", max " + std::to_string(max_block) + ", unit " +
                     std::to_string(unit) + ": blocks of " + std::to_string(block));
        ASSERT_EQ(block % unit, 0);
        ASSERT_LE(block, round_up(max_block, unit));
        ASSERT_EQ(blocks, ceil_div(n, max_block)) << "more blocks than needed";
        ASSERT_GT(n - (blocks - 1) * block, 0) << "an empty last block";
      }
    }
  }
  EXPECT_EQ(even_block(257, 256, 1), 129);  // K = 257: two blocks of 129 and 128, not 256 and a tail of 1
  EXPECT_EQ(even_block(512, 256, 1), 256);
  EXPECT_EQ(even_block(100, 96, 6), 54);    // 100 rows for a 6-row kernel: two tasks of 54 and 46
}

// Every blocking covers its product exactly, keeps each block within its cache budget, and packs as
// many columns of B at once as 16 MiB of f32 allows, one task's worth at least.
TEST(GemmCpuPlan, BlocksCoverTheProductWithinTheirBudgets) {
  const int64_t sizes[] = {1, 2, 5, 16, 17, 95, 96, 97, 255, 256, 257, 784, 1000, 4096, 30011};
  const int64_t kernels[][2] = {{4, 8}, {4, 4}, {6, 16}, {6, 8}, {12, 32}, {12, 16}};
  for (const int64_t M : sizes)
    for (const int64_t N : sizes)
      for (const int64_t K : sizes)
        for (const auto& mr_nr : kernels) {
          const int64_t MR = mr_nr[0], NR = mr_nr[1];
          const Blocking b = blocking(M, N, K, MR, NR);
          SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) + " on a " +
                       std::to_string(MR) + "x" + std::to_string(NR) + " kernel");
          ASSERT_TRUE(b.kc_step >= 1 && b.kc_step <= std::min(K, kMaxKC)) << "a block deeper than K";
          ASSERT_EQ(b.k_blocks, ceil_div(K, kMaxKC));
          ASSERT_TRUE(b.k_blocks * b.kc_step >= K && (b.k_blocks - 1) * b.kc_step < K);
          ASSERT_EQ(b.mc_step % MR, 0);
          ASSERT_LE(b.mc_step, round_up(kMaxMC, MR));
          ASSERT_TRUE(b.m_tasks * b.mc_step >= M && (b.m_tasks - 1) * b.mc_step < M);
          ASSERT_EQ(b.nt_step % NR, 0);
          ASSERT_LE(b.nt_step, round_up(kMaxNT, NR));
          ASSERT_LT((ceil_div(N, b.nt_step) - 1) * b.nt_step, N) << "a task of no columns";
          ASSERT_EQ(b.nc_step % b.nt_step, 0);
          ASSERT_LE(b.nc_step, round_up(N, b.nt_step));
          ASSERT_TRUE(b.nc_step == b.nt_step || K * b.nc_step <= kMaxPackedB) << "the packed panel is over budget";
          ASSERT_TRUE(b.nc_step == round_up(N, b.nt_step) || K * (b.nc_step + b.nt_step) > kMaxPackedB)
              << "another task's columns would have fit";
          ASSERT_EQ(b.packed_b, K * round_up(std::min(b.nc_step, N), NR));
          ASSERT_EQ(b.parallel, M * N * K >= kMinParallelWork);
        }
}

// The budgets' numbers, as gemm_cpu_plan.h states them.
TEST(GemmCpuPlan, BudgetsAreTheStatedOnes) {
  EXPECT_EQ(kMaxPackedB * int64_t{sizeof(float)}, int64_t{16} << 20);  // the packed B panel: 16 MiB of f32
  EXPECT_EQ(kMaxMC * kMaxKC * int64_t{sizeof(float)}, int64_t{96} << 10);  // a packed A block: 96 KiB, for L2
  EXPECT_EQ(32 * kMaxKC * int64_t{sizeof(float)}, int64_t{32} << 10);  // a B sliver of the AVX-512 kernel: L1
  // Threads from 2^20 multiply-adds on: a 64 x 128 x 128 product is the first, one less is not.
  EXPECT_TRUE(blocking(64, 128, 128, 6, 16).parallel);
  EXPECT_FALSE(blocking(64, 128, 127, 6, 16).parallel);
  // test_gemm_cpu.cpp's DeepKBeyondThePackingBudgetCoversEveryColumn: N = 300 is two tasks of 160
  // columns on a 16-wide kernel, and K = 30011 leaves room for 139 columns (2^22 / 30011), fewer than one
  // task's: one task's columns are packed at a time anyway, in two passes.
  const Blocking deep = blocking(2, 300, 30011, 6, 16);
  EXPECT_EQ(deep.nt_step, 160);
  EXPECT_EQ(deep.nc_step, 160);
  // MLP-512's first layer (128 x 512 x 784): all of B in one panel, K in four blocks of 196.
  const Blocking mlp = blocking(128, 512, 784, 12, 32);
  EXPECT_EQ(mlp.kc_step, 196);
  EXPECT_EQ(mlp.k_blocks, 4);
  EXPECT_EQ(mlp.nc_step, 512);
  EXPECT_EQ(mlp.packed_b, 784 * 512);
}

}  // namespace
}  // namespace hl::kernels::cpu::gemm_plan
