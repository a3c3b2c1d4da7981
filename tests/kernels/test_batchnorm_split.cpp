// The arithmetic of the `split` batch-norm kernels (kernels/batchnorm.h), checked on the host where it
// runs everywhere: the plan's slices cover each channel's vectors exactly once with none empty, the
// vector width is 16 bytes only where no vector straddles two images and the pointers allow it, the
// per-channel offsets visit every element of the channel exactly once, and the elementwise pass finds
// the right channel for every vector. The GPU tests (CudaBatchNorm.*, test_cnn_cuda.cpp) run the
// kernels themselves against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/batchnorm.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

std::string describe(const BatchNormShape& s, DType t) {
  std::ostringstream o;
  o << "N" << s.N << " C" << s.C << " HW" << s.HW << " " << dtype_name(t);
  return o.str();
}

TEST(BatchNormSplit, VggSmallLayersFillTheGpuWithWholeVectors) {
  // An H200 (132 SMs), 256 threads per block, f16, batch 128.
  const BatchNormSplit first = plan_batch_norm_split({128, 64, 32 * 32}, DType::f16, 132, 256, true);
  EXPECT_EQ(first.vec, 8);
  EXPECT_EQ(first.vectors, 128 * 1024 / 8);
  // min(ceil(4 x 132 / 64) = 9 for 4 blocks per SM, 16,384 vectors / (8 per thread x 256) = 8):
  // 512 blocks instead of 64.
  EXPECT_EQ(first.blocks_per_channel, 8);
  EXPECT_EQ(first.chunk, 2048);
  const BatchNormSplit last = plan_batch_norm_split({128, 256, 8 * 8}, DType::f16, 132, 256, true);
  EXPECT_EQ(last.vec, 8);
  EXPECT_EQ(last.blocks_per_channel, 1) << "1,024 vectors per channel: 4 per thread, not worth a split";
  const BatchNormSplit f32 = plan_batch_norm_split({128, 64, 32 * 32}, DType::f32, 132, 256, true);
  EXPECT_EQ(f32.vec, 4);
}

TEST(BatchNormSplit, VectorsOnlyWhereTheyFitAndThePointersAllow) {
  EXPECT_EQ(plan_batch_norm_split({4, 3, 25}, DType::f16, 132, 256, true).vec, 1) << "25 is not a multiple of 8";
  EXPECT_EQ(plan_batch_norm_split({4, 3, 12}, DType::f16, 132, 256, true).vec, 1) << "12 is not a multiple of 8";
  EXPECT_EQ(plan_batch_norm_split({4, 3, 12}, DType::f32, 132, 256, true).vec, 4);
  EXPECT_EQ(plan_batch_norm_split({4, 3, 64}, DType::f16, 132, 256, false).vec, 1) << "misaligned pointers";
  EXPECT_EQ(plan_batch_norm_split({4, 3, 1}, DType::f32, 132, 256, true).vec, 1) << "BatchNorm1d-style input";
}

// For random shapes: the slices tile [0, vectors) with no gap, overlap or empty slice; the offsets of
// a channel's vectors hit each of its elements exactly once; and the whole-tensor pass assigns every
// vector to the channel that owns its elements.
TEST(BatchNormSplit, SlicesAndOffsetsCoverEveryElementOnce) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t hw_choices[] = {1, 3, 4, 7, 8, 16, 24, 25, 49, 64, 196, 256, 1024};
    BatchNormShape s{static_cast<int64_t>(rng() % 40 + 1), static_cast<int64_t>(rng() % 70 + 1),
                     hw_choices[rng() % std::size(hw_choices)]};
    if (s.N * s.HW < 2) s.N = 2;
    const DType t = rng() % 2 ? DType::f16 : DType::f32;
    const int sms = static_cast<int>(rng() % 140 + 1);
    const int threads = rng() % 2 ? 256 : 32;
    const BatchNormSplit p = plan_batch_norm_split(s, t, sms, threads, rng() % 4 != 0);
    SCOPED_TRACE(describe(s, t) + " sms " + std::to_string(sms) + " threads " + std::to_string(threads) +
                 " vec " + std::to_string(p.vec) + " seed " + std::to_string(seed));
    ASSERT_EQ(s.HW % p.vec, 0);
    ASSERT_EQ(p.vectors * p.vec, s.N * s.HW);
    ASSERT_GE(p.blocks_per_channel, 1);
    ASSERT_LE(p.blocks_per_channel, std::max<int64_t>(1, (4 * sms + s.C - 1) / s.C));
    // Slices as the kernels compute them: [slice * chunk, min(+chunk, vectors)).
    int64_t next = 0;
    for (int64_t slice = 0; slice < p.blocks_per_channel; ++slice) {
      const int64_t begin = slice * p.chunk, end = std::min(begin + p.chunk, p.vectors);
      ASSERT_EQ(begin, next) << "slice " << slice;
      ASSERT_LT(begin, end) << "slice " << slice << " is empty";
      next = end;
    }
    ASSERT_EQ(next, p.vectors) << "the slices stop short of the channel's end";
    // Offsets: channel c's vectors cover exactly its elements.
    std::vector<int> hits(static_cast<size_t>(s.N * s.C * s.HW), 0);
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t k = 0; k < p.vectors; ++k) {
        const int64_t o = bn_channel_vector_offset(s, p.vec, c, k);
        ASSERT_EQ(o % p.vec, 0);
        for (int64_t e = 0; e < p.vec; ++e) {
          const int64_t i = o + e;
          ASSERT_EQ((i / s.HW) % s.C, c) << "vector " << k << " of channel " << c << " reads channel " << (i / s.HW) % s.C;
          ++hits[static_cast<size_t>(i)];
        }
      }
    ASSERT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
    // The elementwise pass: the vector at element k*vec belongs to the channel of that element.
    for (int64_t k = 0; k < s.N * s.C * s.HW / p.vec; ++k)
      ASSERT_EQ(bn_vector_channel(s, p.vec, k), (k * p.vec / s.HW) % s.C) << "vector " << k;
  }
}

}  // namespace
}  // namespace hl::kernels
