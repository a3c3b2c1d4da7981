// kernels/wave_split.h: the cut of a reduction into slices, and the split-K count chosen by whole waves
// (rung 3's weight gradient, kernels/cuda/conv/implicit_gemm_wmma.cu). Plain C++: no GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/conv/implicit_gemm_index.h"
#include "kernels/tuning_hook.h"
#include "kernels/wave_split.h"

namespace {

using hl::kernels::choose_by_waves;
using hl::kernels::cut_reduction;
using hl::kernels::SplitCut;
using hl::kernels::wave_cost;

// Rung 3's weight gradient: the partial tile's cost in steps (64 x 128 FP32 against 64 + 128 rows of 32
// halves), written out: what partial_tile_steps(64, 128, 32) gives rung 3.
constexpr double kEpilogue = (64 * 128 * 4.0) / ((64 + 128) * 32 * 2.0);

TEST(WaveSplit, CutCoversTheReductionInWholeStepsWithNoEmptySlice) {
  for (int64_t len : {1, 31, 32, 33, 1000, 1600, 8192, 100352}) {
    for (int64_t splits = 1; splits <= 300; ++splits) {
      const SplitCut c = cut_reduction(len, splits, 32);
      ASSERT_EQ(c.slice % 32, 0) << len << " in " << splits;
      ASSERT_GE(c.splits, 1);
      ASSERT_LE(c.splits, splits) << len << " in " << splits;
      ASSERT_GE(c.splits * c.slice, len) << len << " in " << splits << ": the slices miss the end";
      ASSERT_LT((c.splits - 1) * c.slice, len) << len << " in " << splits << ": an empty slice";
    }
  }
}

// The case the rule was written for (wave_split.h): VGG-small's 256->256 layer at batch 128 on an H100,
// 72 tiles, two blocks per SM on 132 SMs. The old rule's 8 slices make 576 blocks, 3 waves; the wave
// rule takes 7 (504 blocks, 2 waves of 37 steps).
TEST(WaveSplit, VggSmall256LayerOnAnH100TakesSevenSlices) {
  const int64_t tiles = 72, slots = 2 * 132, npq = 128 * 8 * 8;
  const int64_t most = hl::kernels::cuda::igemm::wgrad_most_splits(npq);
  EXPECT_EQ(most, 32);
  const SplitCut c = choose_by_waves(tiles, slots, npq, 32, most, kEpilogue);
  EXPECT_EQ(c.splits, 7);
  EXPECT_EQ(c.slice, 1184);
  const double old_rule = wave_cost(tiles, slots, cut_reduction(npq, 8, 32), 32, kEpilogue);
  EXPECT_NEAR(old_rule, 3 * (32 + kEpilogue), 1e-9);
  EXPECT_NEAR(wave_cost(tiles, slots, c, 32, kEpilogue), 2 * (37 + kEpilogue), 1e-9);
}

TEST(WaveSplit, WholeWavesAreNotSplitAndALastWaveAlmostEmptyIs) {
  // Tiles that fill whole waves: every slice adds the epilogue to each block, and saves nothing.
  for (int64_t tiles : {264, 528, 1056})
    EXPECT_EQ(choose_by_waves(tiles, 264, 8192, 32, 32, kEpilogue).splits, 1) << tiles;
  // One block at a time: s slices cost s times a block's steps, never less than one slice.
  EXPECT_EQ(choose_by_waves(1, 1, 8192, 32, 32, kEpilogue).splits, 1);
  // 300 tiles on 264 slots: unsplit, a second wave of 36 blocks as long as the first (2 x 258.7 steps in
  // the model); 7 slices, 2100 blocks in 8 waves of 37 steps (317.3). The model splits, as the rule
  // before it did (ceil(4 x 132 / 300) = 2 slices).
  EXPECT_EQ(choose_by_waves(300, 264, 8192, 32, 32, kEpilogue).splits, 7);
}

TEST(WaveSplit, OneTileTakesTheFinestCutThatFitsInAWave) {
  // LeNet conv1's weight gradient at batch 128 (32 x 25 outputs: one tile; N*P*Q = 100352): every count
  // up to the limit fits in one wave, so the finest cut wins. 256 slices round to 242 of 416 positions.
  const int64_t npq = 128 * 28 * 28, most = hl::kernels::cuda::igemm::wgrad_most_splits(npq);
  EXPECT_EQ(most, 256);
  const SplitCut c = choose_by_waves(1, 264, npq, 32, most, kEpilogue);
  EXPECT_EQ(c.splits, 242);
  EXPECT_EQ(c.slice, 416);
  // With 100 slots, no more slices than one wave holds: 100 round to 98 of 1024 positions.
  EXPECT_EQ(choose_by_waves(1, 100, npq, 32, most, kEpilogue).splits, 98);
}

// Over many shapes and GPUs: the count is within the limits, covers the reduction, and the model never
// rates it worse than the rule it replaced (ceil(4 x SMs / tiles), clamped to the same limits).
TEST(WaveSplit, NeverWorseThanTheOldRuleInTheModel) {
  for (int64_t sms : {46, 80, 108, 132}) {
    for (int64_t per_sm : {1, 2, 3}) {
      const int64_t slots = sms * per_sm;
      for (int64_t tiles : {1, 2, 5, 18, 36, 72, 100, 144, 288}) {
        for (int64_t npq : {256, 1600, 8192, 32768, 131072, 100352}) {
          const int64_t most = hl::kernels::cuda::igemm::wgrad_most_splits(npq);
          const SplitCut c = choose_by_waves(tiles, slots, npq, 32, most, kEpilogue);
          ASSERT_GE(c.splits, 1);
          ASSERT_LE(c.splits, most);
          ASSERT_GE(c.splits * c.slice, npq);
          const int64_t old_splits = std::clamp<int64_t>((4 * sms + tiles - 1) / tiles, 1, most);
          const SplitCut old = cut_reduction(npq, old_splits, 32);
          EXPECT_LE(wave_cost(tiles, slots, c, 32, kEpilogue), wave_cost(tiles, slots, old, 32, kEpilogue))
              << "sms " << sms << " x " << per_sm << ", tiles " << tiles << ", npq " << npq;
        }
      }
    }
  }
}

TEST(WaveSplit, MostSplitsKeepsSlicesAtLeastTheMinimumLong) {
  namespace ig = hl::kernels::cuda::igemm;
  EXPECT_EQ(ig::wgrad_most_splits(1), 1);
  EXPECT_EQ(ig::wgrad_most_splits(ig::kWgradMinSlice - 1), 1);
  EXPECT_EQ(ig::wgrad_most_splits(2 * ig::kWgradMinSlice), 2);
  EXPECT_EQ(ig::wgrad_most_splits(int64_t{1} << 40), ig::kWgradMaxSplits);
}

// The model's pieces on their own. wave_cost counts a slice's steps rounded up (a slice one position past
// a whole step walks one step more) and its blocks' waves rounded up; partial_tile_steps is a tile's FP32
// bytes over one step's FP16 operand bytes.
TEST(WaveSplit, TheModelsCostsAreThoseWrittenAtTheTop) {
  using hl::kernels::partial_tile_steps;
  EXPECT_DOUBLE_EQ(partial_tile_steps(64, 128, 32), kEpilogue);
  EXPECT_DOUBLE_EQ(kEpilogue, 8.0 / 3.0);
  EXPECT_DOUBLE_EQ(partial_tile_steps(128, 128, 64), 2.0);  // 64 KiB against 2 x 128 rows of 128 bytes
  EXPECT_DOUBLE_EQ(partial_tile_steps(16, 48, 8), 3.0);  // 3 KiB against 64 rows of 16 bytes
  // One tile on one slot: a wave of ceil(33 / 32) = 2 steps, plus the epilogue.
  EXPECT_DOUBLE_EQ(wave_cost(1, 1, SplitCut{1, 33}, 32, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(wave_cost(1, 1, SplitCut{1, 32}, 32, 0.5), 1.5);
  // 5 tiles x 3 slices on 4 slots: 15 blocks in 4 waves of 2 steps and the epilogue.
  EXPECT_DOUBLE_EQ(wave_cost(5, 4, SplitCut{3, 64}, 32, 1.0), 4 * 3.0);
}

// choose_by_waves's ties and clamps: between cuts the model rates equal, the fewer slices (2 tiles on 3
// slots, no epilogue: one wave of 64 steps, or two of 32); no tiles are counted as one, which a single
// slot runs one block at a time.
TEST(WaveSplit, TiesGoToFewerSlicesAndNoTilesCountAsOne) {
  EXPECT_DOUBLE_EQ(wave_cost(2, 3, cut_reduction(2048, 1, 32), 32, 0.0),
                   wave_cost(2, 3, cut_reduction(2048, 2, 32), 32, 0.0));
  EXPECT_EQ(choose_by_waves(2, 3, 2048, 32, 2, 0.0).splits, 1);
  EXPECT_EQ(choose_by_waves(0, 264, 8192, 32, 32, kEpilogue).splits,
            choose_by_waves(1, 264, 8192, 32, 32, kEpilogue).splits);
  EXPECT_EQ(choose_by_waves(0, 264, 8192, 32, 32, kEpilogue).splits, 32);
  EXPECT_EQ(choose_by_waves(1, 0, 8192, 32, 32, kEpilogue).splits, 1);  // no slots: one, as on one slot
}

// The tuning hook of bench/conv_bench --sweep-splits: a count of 1 forces one slice (not the model's
// choice), a count above the limit is held to it, and 0 (the default) leaves the model's.
TEST(WaveSplit, TheTuningHookForcesItsCountUpToTheLimit) {
  using hl::kernels::wgrad_cut_by_waves;
  using hl::kernels::wgrad_splits_for_tuning;
  ASSERT_EQ(wgrad_splits_for_tuning().load(), 0);
  const SplitCut model = wgrad_cut_by_waves(1, 264, 100352, 64, 128, 32, 256);
  EXPECT_EQ(model.splits, 242);  // the finest cut that fits in a wave, as in OneTileTakesTheFinestCut...
  SplitCut one{};
  SplitCut capped{};
  {
    // Scoped, so that a failure inside cannot leave the hook set for the tests that follow.
    const hl::kernels::ScopedHook<int> forced(wgrad_splits_for_tuning(), 1);
    one = wgrad_cut_by_waves(1, 264, 100352, 64, 128, 32, 256);
  }
  {
    const hl::kernels::ScopedHook<int> forced(wgrad_splits_for_tuning(), 100);
    capped = wgrad_cut_by_waves(1, 264, 100352, 64, 128, 32, 4);
  }
  EXPECT_EQ(wgrad_splits_for_tuning().load(), 0);
  EXPECT_EQ(one.splits, 1);
  EXPECT_EQ(one.slice, 100352);
  EXPECT_EQ(capped.splits, 4);
  EXPECT_EQ(capped.slice, 25088);
}

// most_slices on its own, at the ends of its arguments: a cap of one slice, or none (0 or below, which
// no rung passes), still allows one slice and no more; a cap above what the minimum slice allows is not
// reached.
TEST(WaveSplit, MostSlicesIsAtLeastOneAndAtMostTheCap) {
  using hl::kernels::most_slices;
  EXPECT_EQ(most_slices(10000, 10, 1), 1);
  EXPECT_EQ(most_slices(10000, 10, 0), 1);
  EXPECT_EQ(most_slices(10000, 10, -3), 1);
  EXPECT_EQ(most_slices(10000, 10, 2), 2);
  EXPECT_EQ(most_slices(10000, 10, 5000), 1000);
  EXPECT_EQ(most_slices(9, 10, 8), 1);
}

}  // namespace
