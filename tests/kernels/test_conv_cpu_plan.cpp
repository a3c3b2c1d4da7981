// How the CPU convolution cuts its work (kernels/cpu/conv_cpu_plan.h): the chunks' images, the weight
// gradient's groups, and when the threads take whole chunks. Every result stays right whatever these
// give (test_conv_cpu.cpp checks the results at every thread count), so only these tests see a budget
// that is wrong: a chunk that no longer fits the L2 cache, partial sums of hundreds of MiB, or threads
// left idle. The sixteenth mutation sweep found them unchecked (docs/hardening.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cpu/conv_cpu_plan.h"

namespace hl::kernels::cpu::conv_plan {
namespace {

// X_col of one chunk and the GEMM's packed copy of it, both f32, fit together in a 1 MiB L2 cache
// (the smallest of current x86 cores): the reason the chunks are small (conv_cpu_plan.h).
TEST(ConvCpuPlan, ChunkAndItsPackedCopyFitA1MiBL2) {
  EXPECT_LE(2 * kColBudget * int64_t{sizeof(float)}, int64_t{1} << 20);
}

// The images of a chunk: as many as the budget holds, at least one, at most the batch.
TEST(ConvCpuPlan, ChunksHoldAsManyImagesAsTheBudgetAllows) {
  for (const int64_t col : {int64_t{1}, int64_t{2}, int64_t{1000}, int64_t{19600}, kColBudget - 1, kColBudget,
                            kColBudget + 1, int64_t{589824}}) {
    for (const int64_t n : {int64_t{1}, int64_t{13}, int64_t{128}, int64_t{1} << 20}) {
      const int64_t c = chunk_images(n, col);
      SCOPED_TRACE("N = " + std::to_string(n) + ", X_col per image = " + std::to_string(col) + ": " +
                   std::to_string(c) + " images per chunk");
      EXPECT_GE(c, 1);
      EXPECT_LE(c, n);
      EXPECT_TRUE(c == 1 || c * col <= kColBudget) << "over the budget";
      EXPECT_TRUE(c == n || (c + 1) * col > kColBudget) << "one more image would have fit";
    }
  }
}

// The numbers the comments of test_conv_cpu.cpp rely on: LeNet's first layer (1*25*28*28 = 19600
// values per image) takes 6 images per chunk; a 3x3 layer of 64 channels on 32x32 (589824) one.
TEST(ConvCpuPlan, LeNetsFirstLayerTakesSixImagesPerChunk) {
  EXPECT_EQ(chunk_images(128, 1 * 25 * 28 * 28), 6);
  EXPECT_EQ(chunk_images(128, 64 * 9 * 32 * 32), 1);
  EXPECT_EQ(chunk_images(4, 1 * 25 * 28 * 28), 4);  // a small batch is one chunk
  EXPECT_EQ(chunk_images(5, 0), 5);                 // no values per image: no division by zero, one chunk
}

// The groups of the weight gradient: as many as chunks, up to 64, while their partial sums stay
// within 4 MiB of f32 (2^20 values); one group when a single dW is over that.
TEST(ConvCpuPlan, WeightGroupsStayWithinTheBudget) {
  for (const int64_t chunks : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{64}, int64_t{66}, int64_t{1000}}) {
    for (const int64_t dw : {int64_t{1}, int64_t{50}, int64_t{16384}, int64_t{16385}, int64_t{150000},
                             kGroupBudget, kGroupBudget + 1, int64_t{512} * 512 * 9}) {
      const int64_t g = weight_groups(chunks, dw);
      SCOPED_TRACE(std::to_string(chunks) + " chunks, dW of " + std::to_string(dw) + ": " + std::to_string(g) +
                   " groups");
      EXPECT_GE(g, 1);
      EXPECT_LE(g, std::min(chunks, kMaxGroups));
      EXPECT_TRUE(g == 1 || g * dw <= kGroupBudget) << "partial sums over the budget";
      EXPECT_TRUE(g == std::min(chunks, kMaxGroups) || (g + 1) * dw > kGroupBudget) << "one more group would have fit";
    }
  }
}

TEST(ConvCpuPlan, WeightGroupsAtTheirEdges) {
  EXPECT_EQ(kGroupBudget * int64_t{sizeof(float)}, int64_t{4} << 20);  // the 4 MiB of conv_cpu_plan.h
  EXPECT_EQ(kMaxGroups, 64);
  EXPECT_EQ(weight_groups(66, 2 * 1 * 5 * 5), 64);  // test_conv_cpu.cpp's 391 images: 66 chunks, 64 groups
  EXPECT_EQ(weight_groups(7, 50), 7);              // fewer chunks than 64: a group each
  EXPECT_EQ(weight_groups(64, 16384), 64);         // 64 partial dW of 2^14 values: exactly 2^20
  EXPECT_EQ(weight_groups(64, 16385), 63);         // one value more: a group less
  EXPECT_EQ(weight_groups(8, kGroupBudget), 1);    // one dW fills the budget
  EXPECT_EQ(weight_groups(8, 2 * kGroupBudget), 1);  // over it: still one group, the running sum
  EXPECT_EQ(weight_groups(1, 1), 1);
  EXPECT_EQ(weight_groups(5, 0), 5);  // an empty dW: no division by zero
}

// Whole chunks go to the threads only when each gets at least two; one thread never shares.
TEST(ConvCpuPlan, ThreadsShareChunksOnlyWhenEachGetsTwo) {
  EXPECT_TRUE(share_by_chunk(4, 2));
  EXPECT_FALSE(share_by_chunk(3, 2));
  EXPECT_TRUE(share_by_chunk(6, 3));
  EXPECT_FALSE(share_by_chunk(5, 3));
  EXPECT_TRUE(share_by_chunk(1000, 16));
  EXPECT_FALSE(share_by_chunk(31, 16));
  EXPECT_FALSE(share_by_chunk(100, 1));  // one thread (or inside a parallel region): in turn
  EXPECT_FALSE(share_by_chunk(1, 1));
  EXPECT_FALSE(share_by_chunk(0, 2));
}

}  // namespace
}  // namespace hl::kernels::cpu::conv_plan
