// The arithmetic of the CUDA reduce_sum's setup (kernels/reduce_plan.h), checked on the host where it
// runs everywhere:
//   - merged() keeps every output's elements and their order, whatever size-1 and same-kind neighbours
//     the reduction had;
//   - plan_channel_sum() takes exactly the sums of the [A, C, B] shape, chooses the widest vector that
//     B and the address allow, cuts each channel into slices with none empty, and its vector_offset()
//     meets every element of every channel exactly once and nothing else.
// The GPU tests (CudaReduce.*, test_cuda_kernels.cpp) run the kernels themselves against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce_plan.h"
#include "tests/test_util.h"

namespace hl::kernels::reduce_plan {
namespace {

std::string describe(const ReduceIndex& ix) {
  std::string s = "[";
  for (int d = 0; d < ix.ndim; ++d) {
    s += std::to_string(ix.shape[d]) + (ix.reduced[d] ? "r" : "k") + (d + 1 < ix.ndim ? "," : "");
  }
  return s + "]";
}

// For every output, the row-major input offsets summed into it, in the order a row-major walk meets them.
std::vector<std::vector<int64_t>> members(const ReduceIndex& ix) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(ix.out_numel()));
  int64_t n = 1;
  for (int d = 0; d < ix.ndim; ++d) n *= ix.shape[d];
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(ix.output_of(i))].push_back(i);
  return out;
}

// A random reduction of up to 8 dimensions, sizes 1 to 4 (size 1 often, to exercise the dropping).
ReduceIndex random_reduction(std::mt19937_64& rng) {
  ReduceIndex ix;
  ix.ndim = static_cast<int>(rng() % 9);
  for (int d = 0; d < ix.ndim; ++d) {
    ix.shape[d] = static_cast<int64_t>(rng() % 4) + 1;
    ix.reduced[d] = rng() % 2 == 0;
  }
  return ix;
}

TEST(ReducePlan, MergedKeepsEveryOutputsElementsInOrder) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    const ReduceIndex ix = random_reduction(rng);
    const ReduceIndex m = merged(ix);
    SCOPED_TRACE(describe(ix) + " -> " + describe(m) + ", seed " + std::to_string(seed));
    ASSERT_GE(m.ndim, 1);
    for (int d = 0; d < m.ndim; ++d) {
      if (m.ndim > 1) {
        EXPECT_GT(m.shape[d], 1) << "a size-1 dimension was left in";
      }
      if (d > 0) {
        EXPECT_NE(m.reduced[d], m.reduced[d - 1]) << "two neighbours of one kind were left apart";
      }
    }
    EXPECT_EQ(m.out_numel(), ix.out_numel());
    EXPECT_EQ(m.reduce_numel(), ix.reduce_numel());
    EXPECT_EQ(members(m), members(ix));
  }
}

TEST(ReducePlan, MergedOfTheShapesTrainingSums) {
  const ReduceIndex bias = merged(ReduceIndex::of({128, 32, 28, 28}, {0, 2, 3}));  // a conv bias gradient
  ASSERT_EQ(bias.ndim, 3);
  EXPECT_EQ(bias.shape[0], 128);
  EXPECT_EQ(bias.shape[1], 32);
  EXPECT_EQ(bias.shape[2], 784);
  EXPECT_TRUE(bias.reduced[0] && !bias.reduced[1] && bias.reduced[2]);
  const ReduceIndex all = merged(ReduceIndex::of({}, {}));  // a 0-d tensor: one element, kept
  ASSERT_EQ(all.ndim, 1);
  EXPECT_EQ(all.shape[0], 1);
  EXPECT_FALSE(all.reduced[0]);
  const ReduceIndex ones = merged(ReduceIndex::of({1, 1, 1}, {1}));  // only size-1 dims, one reduced
  ASSERT_EQ(ones.ndim, 1);
  EXPECT_EQ(ones.shape[0], 1);
  EXPECT_TRUE(ones.reduced[0]);
}

TEST(ReducePlan, ChannelPathTakesOnlyTheAcbShape) {
  // Taken: one kept run, the innermost run reduced, more than one output.
  for (const auto& [shape, reduced] : std::vector<std::pair<std::vector<int64_t>, std::vector<int>>>{
           {{128, 32, 28, 28}, {0, 2, 3}},  // LeNet conv1's bias gradient
           {{128, 64, 14, 14}, {0, 2, 3}},  // conv2's
           {{7, 9}, {1}},                   // row sums (A = 1)
           {{2, 1, 5, 1, 3, 4}, {0, 4, 5}},
       }) {
    const ReduceIndex ix = ReduceIndex::of(shape, reduced);
    EXPECT_TRUE(plan_channel_sum(ix, 2, 16, 132, 256).applies) << describe(ix);
  }
  // Left to CUB.
  for (const auto& [shape, reduced] : std::vector<std::pair<std::vector<int64_t>, std::vector<int>>>{
           {{128, 256}, {0}},               // column sums: a linear bias gradient keeps the innermost dim
           {{128, 64, 1, 1}, {0, 2, 3}},    // the same after merging
           {{5, 7, 9, 3}, {1, 3}},          // two kept runs
           {{5, 7, 9, 3}, {0, 1, 2, 3}},    // one output: cub::DeviceReduce
           {{5, 7}, {}},                    // nothing reduced
           {{1, 6, 1, 4}, {0, 2}},          // only size-1 dims reduced: a copy
       }) {
    const ReduceIndex ix = ReduceIndex::of(shape, reduced);
    EXPECT_FALSE(plan_channel_sum(ix, 2, 16, 132, 256).applies) << describe(ix);
  }
}

// The channel path's two limits, each at its edge: the channels are the grid's x dimension, so C = 2^31 - 1
// is taken and 2^31 is not; an element of 0 bytes is refused, and one of 1 byte (any 1-byte dtype) reads 16
// at a time. Plans only: no tensor of that size is made.
TEST(ReducePlan, ChannelPathAtItsLimitsOfChannelsAndElementSize) {
  const int64_t most = (int64_t{1} << 31) - 1;
  const ChannelSum widest = plan_channel_sum(ReduceIndex::of({most, 2}, {1}), 2, 16, 132, 256);
  EXPECT_TRUE(widest.applies);
  EXPECT_EQ(widest.C, most);
  EXPECT_FALSE(plan_channel_sum(ReduceIndex::of({most + 1, 2}, {1}), 2, 16, 132, 256).applies);
  EXPECT_FALSE(plan_channel_sum(ReduceIndex::of({4, 32}, {1}), 0, 16, 132, 256).applies);
  const ChannelSum bytes = plan_channel_sum(ReduceIndex::of({4, 32}, {1}), 1, 16, 132, 256);
  EXPECT_TRUE(bytes.applies);
  EXPECT_EQ(bytes.vec, 16);
}

// reduce_sum's own choice is the channel path (since its H100 run, reduce_plan.h), and the hook forces either
// path for one scope and gives the choice back after it, also nested. Both paths give correct sums, so no
// GPU test of the sums would notice a default flipped back to CUB.
TEST(ReducePlan, ChannelPathIsTheDefaultAndTheHookForcesEitherForOneScope) {
  ASSERT_LT(channel_path_for_tuning().load(), 0);  // no test left it set
  EXPECT_TRUE(channel_path_chosen());
  {
    const ScopedChannelPath cub(false);
    EXPECT_EQ(channel_path_for_tuning().load(), 0);
    EXPECT_FALSE(channel_path_chosen());
    {
      const ScopedChannelPath channel(true);
      EXPECT_EQ(channel_path_for_tuning().load(), 1);
      EXPECT_TRUE(channel_path_chosen());
    }
    EXPECT_FALSE(channel_path_chosen());
  }
  EXPECT_LT(channel_path_for_tuning().load(), 0);
  EXPECT_TRUE(channel_path_chosen());
}

TEST(ReducePlan, LenetBiasGradientsFillTheGpu) {
  // An H100 (132 SMs), 256 threads, f16, batch 128, 16-byte aligned.
  const ChannelSum c1 = plan_channel_sum(ReduceIndex::of({128, 32, 28, 28}, {0, 2, 3}), 2, 16, 132, 256);
  EXPECT_EQ(c1.A, 128);
  EXPECT_EQ(c1.C, 32);
  EXPECT_EQ(c1.B, 784);
  EXPECT_EQ(c1.vec, 8);
  EXPECT_EQ(c1.vectors, 128 * 784 / 8);
  // min(ceil(4 x 132 / 32) = 17 for four blocks per SM, 12,544 vectors / (8 x 256) = 6): 192 blocks, not 32.
  EXPECT_EQ(c1.slices, 6);
  // 14 x 14 = 196 is not a multiple of 8: 8-byte vectors of 4 halves.
  const ChannelSum c2 = plan_channel_sum(ReduceIndex::of({128, 64, 14, 14}, {0, 2, 3}), 2, 16, 132, 256);
  EXPECT_EQ(c2.vec, 4);
  EXPECT_EQ(c2.slices, 3);
  // A view 2 bytes past a 16-byte boundary reads one half at a time; f32 vectors are 4 wide.
  EXPECT_EQ(plan_channel_sum(ReduceIndex::of({128, 32, 28, 28}, {0, 2, 3}), 2, 2, 132, 256).vec, 1);
  EXPECT_EQ(plan_channel_sum(ReduceIndex::of({128, 32, 28, 28}, {0, 2, 3}), 4, 16, 132, 256).vec, 4);
  EXPECT_EQ(plan_channel_sum(ReduceIndex::of({128, 32, 28, 28}, {0, 2, 3}), 8, 16, 132, 256).vec, 2);
  EXPECT_EQ(plan_channel_sum(ReduceIndex::of({128, 32, 28, 28}, {0, 2, 3}), 8, 8, 132, 256).vec, 1);
}

// slice_channels (channel_slices.h, shared with batch norm's `split`) aims at ceil(4 x SMs / channels)
// blocks per channel when the channel is long enough: at exact quotients and one past them, with one
// channel, and with what a caller without a GPU or a tensor might pass (0 SMs, 0 channels).
TEST(ReducePlan, SliceChannelsRoundsFourBlocksPerSmUp) {
  const int64_t long_channel = int64_t{1} << 30;  // never the limit: 2^30 / (8 x 256) = 524,288 blocks
  EXPECT_EQ(slice_channels(long_channel, 33, 132, 256).count, 16);   // 528 / 33 = 16 exactly
  EXPECT_EQ(slice_channels(long_channel, 32, 132, 256).count, 17);   // 16.5 up to 17
  EXPECT_EQ(slice_channels(long_channel, 527, 132, 256).count, 2);   // 528 = 527 + 1: just past one
  EXPECT_EQ(slice_channels(long_channel, 528, 132, 256).count, 1);
  EXPECT_EQ(slice_channels(long_channel, 1, 132, 256).count, 528);
  EXPECT_EQ(slice_channels(long_channel, 4096, 132, 256).count, 1);  // more channels than blocks wanted
  // The slices' length: 2^30 / 17 rounded up, so that 17 of them hold the channel and none is empty.
  const ChannelSlices s = slice_channels(long_channel, 32, 132, 256);
  EXPECT_EQ(s.chunk, (long_channel + 16) / 17);
  EXPECT_GE(s.count * s.chunk, long_channel);
  EXPECT_LT((s.count - 1) * s.chunk, long_channel);
  // 0 SMs (none known): one block per channel, not a division by zero.
  EXPECT_EQ(slice_channels(1000, 4, 0, 256).count, 1);
  EXPECT_EQ(slice_channels(1000, 4, 0, 256).chunk, 1000);
  // No channels, no vectors: one empty slice, nothing divided by zero.
  const ChannelSlices none = slice_channels(0, 0, 132, 256);
  EXPECT_EQ(none.count, 1);
  EXPECT_EQ(none.chunk, 0);
}

TEST(ReducePlan, OutputOfEveryElement) {
  // [2, 3, 4] summed over dimension 1: element (a, b, c) goes to output (a, c).
  const ReduceIndex ix = ReduceIndex::of({2, 3, 4}, {1});
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(ix.output_of((a * 3 + b) * 4 + c), a * 4 + c) << a << b << c;
  // Everything summed: one output; nothing summed: each element its own.
  EXPECT_EQ(ReduceIndex::of({5, 7}, {0, 1}).output_of(34), 0);
  EXPECT_EQ(ReduceIndex::of({5, 7}, {}).output_of(34), 34);
  EXPECT_EQ(ReduceIndex::of({}, {}).output_of(0), 0);
}

TEST(ReducePlan, ReduceIndexOfRefusesWhatItCannotHold) {
  EXPECT_EQ(ReduceIndex::of({2, 3, 4}, {0, 2}).out_numel(), 3);
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] { ReduceIndex::of({2, 3}, {2}); }),
            "ReduceIndex::of: dimension 2 out of range for 2 dimensions");
  EXPECT_EQ(message([] { ReduceIndex::of({2, 3}, {-1}); }),
            "ReduceIndex::of: dimension -1 out of range for 2 dimensions");
  EXPECT_EQ(message([] { ReduceIndex::of(std::vector<int64_t>(9, 1), {}); }),
            "ReduceIndex::of: at most 8 dimensions, got 9");
}

TEST(ReducePlan, AddressAlignment) {
  alignas(16) unsigned char buf[64] = {};
  EXPECT_EQ(address_alignment(buf), 16u);
  EXPECT_EQ(address_alignment(buf + 8), 8u);
  EXPECT_EQ(address_alignment(buf + 4), 4u);
  EXPECT_EQ(address_alignment(buf + 6), 2u);
  EXPECT_EQ(address_alignment(buf + 3), 1u);
  EXPECT_EQ(address_alignment(buf + 32), 16u) << "capped at 16";
}

// Every channel's slices, walked through vector_offset as the kernel walks them, meet each of the
// channel's elements exactly once; the vectors are aligned to their width; no slice is empty.
TEST(ReducePlan, ChannelSlicesCoverEveryElementOnce) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  int taken = 0;
  for (int trial = 0; trial < 400; ++trial) {
    ReduceIndex ix;
    // [A, C, B] in up to 8 dims: A and B spread over neighbours (sizes 1 to 6), sometimes with size-1
    // kept dims between reduced ones.
    ix.ndim = 0;
    const auto add = [&](bool reduced, int64_t size) {
      if (ix.ndim < kMaxDims) {
        ix.shape[ix.ndim] = size;
        ix.reduced[ix.ndim++] = reduced;
      }
    };
    for (int d = static_cast<int>(rng() % 3); d > 0; --d) add(true, static_cast<int64_t>(rng() % 6) + 1);
    for (int d = static_cast<int>(rng() % 2) + 1; d > 0; --d) add(false, static_cast<int64_t>(rng() % 6) + 1);
    for (int d = static_cast<int>(rng() % 3) + 1; d > 0; --d) add(true, static_cast<int64_t>(rng() % 8) + 1);
    if (rng() % 4 == 0) add(false, 1);
    const size_t elem = size_t{2} << (rng() % 3);  // 2, 4, 8 bytes
    const size_t align = size_t{1} << (rng() % 5);  // 1 .. 16
    const int sms = 1 + static_cast<int>(rng() % 140), threads = 32 << (rng() % 4);
    const ChannelSum p = plan_channel_sum(ix, elem, align, sms, threads);
    SCOPED_TRACE(describe(ix) + " elem " + std::to_string(elem) + " align " + std::to_string(align) + " sms " +
                 std::to_string(sms) + " threads " + std::to_string(threads) + ", seed " + std::to_string(seed));
    const ReduceIndex m = merged(ix);
    const bool shape_fits =
        (m.ndim == 2 || m.ndim == 3) && m.reduced[m.ndim - 1] && !m.reduced[m.ndim - 2];
    ASSERT_EQ(p.applies, shape_fits);
    if (!p.applies) continue;
    ++taken;
    ASSERT_EQ(p.A * p.C * p.B, ix.out_numel() * ix.reduce_numel());
    ASSERT_EQ(p.C, ix.out_numel());
    ASSERT_EQ(p.B % p.vec, 0);
    ASSERT_EQ(align % (p.vec * elem) == 0 || p.vec == 1, true);
    // The widest: doubling the vector would break B, the address or the 16 bytes.
    const size_t wider = static_cast<size_t>(p.vec) * 2;
    EXPECT_TRUE(wider * elem > 16 || p.B % static_cast<int64_t>(wider) != 0 || align % (wider * elem) != 0)
        << "vec " << p.vec << " could have been " << wider;
    ASSERT_GE(p.slices, 1);
    ASSERT_GE(p.chunk, 1);
    EXPECT_LT((p.slices - 1) * p.chunk, p.vectors) << "an empty slice";
    EXPECT_GE(p.slices * p.chunk, p.vectors);
    const std::vector<std::vector<int64_t>> want = members(ix);
    for (int64_t c = 0; c < p.C; ++c) {
      std::vector<int64_t> got;
      for (int64_t s = 0; s < p.slices; ++s)
        for (int64_t k = s * p.chunk; k < std::min((s + 1) * p.chunk, p.vectors); ++k) {
          const int64_t o = p.vector_offset(c, k);
          ASSERT_EQ(o % p.vec, 0) << "a misaligned vector";
          for (int e = 0; e < p.vec; ++e) got.push_back(o + e);
        }
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, want[static_cast<size_t>(c)]) << "channel " << c;
    }
  }
  EXPECT_GT(taken, 100) << "the generator should mostly make [A, C, B] shapes";
}

}  // namespace
}  // namespace hl::kernels::reduce_plan
