// The arithmetic of the softmax rung `packed_kept` (kernels/cuda/softmax/kept_frames.h), checked on the
// CPU, on every build, with or without a GPU: the frames, the lags a thread's fold keeps against a
// record of every pack's frame, the factors they give, and the merge of the threads' pairs. What this
// cannot check: the kernel's loads, stores and shuffles (tests/kernels/test_softmax_cuda.cpp,
// SoftmaxCuda.PackedKept*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/softmax/kept_frames.h"
#include "kernels/half.h"

namespace hl {
namespace {

namespace kf = kernels::cuda::kept_frames;
constexpr float kInf = INFINITY;

// What a block asks of shared memory: the kept values (7 of 8 packs in FP32) at the stride its size rounds
// up to, and the merge's 256 bytes, which the check against a GPU's limit per block must count too.
TEST(KeptFrames, SharedMemoryOfABlock) {
  EXPECT_EQ(kf::shared_bytes(1024, 8), 224 * 1024);  // a 65536-column row: 1024 threads x 7 packs x 32 bytes
  EXPECT_EQ(kf::shared_bytes(512, 8), 112 * 1024);   // 32768 columns: two blocks on an H100's SM
  EXPECT_EQ(kf::shared_bytes(300, 8), kf::shared_bytes(512, 8)) << "the stride rounds 300 threads up to 512";
  EXPECT_EQ(kf::shared_bytes(1024, 1), 0) << "one pack: recomputed, nothing kept";
  // The stride's steps on both sides (256 threads still take 256, 257 take 512), and two packs, of which
  // the first is kept: a stride of 256 x 2 float4s (values 0-3, 4-7) x 1 pack x 16 bytes.
  EXPECT_EQ(kf::shared_bytes(256, 8), 256 * 2 * 7 * 16);
  EXPECT_EQ(kf::shared_bytes(1, 8), 256 * 2 * 7 * 16);
  EXPECT_EQ(kf::shared_bytes(257, 8), 512 * 2 * 7 * 16);
  EXPECT_EQ(kf::shared_bytes(513, 8), 1024 * 2 * 7 * 16);
  EXPECT_EQ(kf::shared_bytes(256, 2), 256 * 2 * 1 * 16);
  EXPECT_EQ(kf::kMergeBytes, 256);
  EXPECT_EQ(kf::block_shared_bytes(1024, 8), 224 * 1024 + 256);
  EXPECT_LE(kf::block_shared_bytes(1024, 8), 227 * 1024) << "an H100's limit per block holds the largest block";
}

TEST(KeptFrames, Exp2IntIsExactAndFlushes) {
  for (int k = 0; k >= -126; --k) EXPECT_EQ(kf::exp2_int(static_cast<float>(k)), std::ldexp(1.0f, k)) << k;
  EXPECT_EQ(kf::exp2_int(-127.0f), 0.0f);  // below the normal range: flushed, as the kernel's EX2s
  EXPECT_EQ(kf::exp2_int(-1e6f), 0.0f);
  EXPECT_EQ(kf::exp2_int(-kInf), 0.0f);
  EXPECT_EQ(kf::exp2_int(NAN), 0.0f);
}

TEST(KeptFrames, FrameIsAWholeNumberAtOrAboveEveryTermOfItsMaximum) {
  // Every finite FP16 value as a maximum m: its frame is a whole number, and the largest term it gives,
  // 2^fl(m log2e - h) (the kernel's fmaf), is at most 2^(2^-8): the sums cannot overflow.
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float m = half_bits_to_float(static_cast<uint16_t>(bits));
    if (!std::isfinite(m)) continue;
    const float h = kf::frame_of(m);
    ASSERT_EQ(h, std::floor(h)) << m;
    const float t = std::fma(m, kf::kLog2e, -h);
    ASSERT_LE(t, 1.0f / 256) << m;
    ASSERT_GT(t, -1.01f) << m;  // and the largest term at least about 1/2: nothing is lost to the frame
  }
  EXPECT_EQ(kf::frame_of(-kInf), 0.0f);
  EXPECT_EQ(kf::frame_of(kInf), kInf);
}

// A thread's fold over packs with these maxima, played through kf::Fold, against a record of the frame
// each pack was taken in: the factor of every pack with a finite value must be 2^(its frame - H) for
// every row frame H at or above the thread's, exactly; a pack taken while the thread had seen only
// -inf (its terms are 0) must have a finite factor.
void check_fold(const std::vector<float>& maxima, const std::string& what) {
  kf::Fold f;
  std::vector<float> frame(maxima.size());
  std::vector<bool> finite_seen(maxima.size());
  for (size_t i = 0; i < maxima.size(); ++i) {
    f.enter(static_cast<int>(i), maxima[i]);
    frame[i] = f.h;
    finite_seen[i] = f.m != -kInf;
  }
  for (float rise : {0.0f, 1.0f, 7.0f, 126.0f, 127.0f, 300.0f}) {
    const float H = f.m == -kInf ? 0.0f : f.h + rise;
    for (size_t i = 0; i < maxima.size(); ++i) {
      const float got = f.factor(static_cast<int>(i), H, 1.0f);
      if (!finite_seen[i]) {
        EXPECT_TRUE(std::isfinite(got)) << what << ", pack " << i;
        continue;
      }
      EXPECT_EQ(got, kf::exp2_int(frame[i] - H)) << what << ", pack " << i << " (frame " << frame[i] << ", H " << H
                                                  << ", lag " << f.lags.of(static_cast<int>(i)) << ")";
    }
  }
}

TEST(KeptFrames, LagsGiveEveryPackItsFrame) {
  check_fold({1.0f, 1.2f, 1.9f, 2.5f, 3.4f, 3.5f, 5.0f, 9.0f}, "rising by less than a frame and by several");
  check_fold({100.0f, 50.0f, 101.0f, 0.0f, 130.0f, 130.0f, -5.0f, 131.0f}, "rising and falling");
  check_fold({-kInf, -kInf, -144.0f, -100.0f, -kInf, 20.0f, 21.0f, 22.0f}, "from -inf to negative frames");
  check_fold({-kInf, -kInf, -kInf, -kInf}, "only -inf");
  check_fold({-60000.0f, -1000.0f, 0.0f, 200.0f, 60000.0f}, "lags past 255 saturate");
  check_fold({NAN, 2.0f, NAN, 3.0f}, "NaN maxima ignored");
  // Random sequences: steps of a fraction of a frame to hundreds of frames, and -inf prefixes.
  std::mt19937_64 rng(20261128);
  std::uniform_real_distribution<float> step(-3.0f, 6.0f), big(-200.0f, 400.0f), start(-500.0f, 500.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<float> maxima;
    const int n = 1 + trial % 8;
    float x = start(rng);
    const int inf_prefix = trial % 3 == 0 ? static_cast<int>(rng() % 4) : 0;
    for (int i = 0; i < n; ++i) {
      if (i < inf_prefix) {
        maxima.push_back(-kInf);
        continue;
      }
      x += trial % 5 == 0 ? big(rng) : step(rng);
      maxima.push_back(round_to_half(x));
    }
    check_fold(maxima, "random sequence " + std::to_string(trial));
  }
}

TEST(KeptFrames, ANaNAmongMinusInfinityStaysInTheSum) {
  // A thread whose first pack holds only -inf and a NaN (its maximum stays -inf, its sum NaN), then
  // finite values: the NaN must reach the row's sum, which makes the row NaN.
  kf::Fold f;
  f.enter(0, -kInf);
  f.s += NAN;
  f.enter(1, 3.0f);
  f.s += 1.0f;
  EXPECT_TRUE(std::isnan(f.s));
}

TEST(KeptFrames, AFirstFiniteMaximumRescalesNothing) {
  // From -inf the packs so far hold only zeros, so a first finite maximum sets the frame and rescales
  // nothing: not even by a factor past exp2_int's range. -88.75 has frame -128, where a rescale of the
  // zero sum by 2^128 would make it inf x 0 = NaN.
  kf::Fold f;
  f.enter(0, -kInf);
  f.enter(1, -88.75f);
  EXPECT_EQ(f.h, -128.0f);
  EXPECT_EQ(f.s, 0.0f);
  EXPECT_EQ(f.lags.of(0), 0.0f);
  EXPECT_EQ(f.lags.of(1), 0.0f);
}

TEST(KeptFrames, PairAndFactorOfAFold) {
  // A thread that has seen only -inf gives the merge the pair (-inf, 0); one with a finite maximum gives
  // its frame and sum.
  kf::Fold none;
  none.enter(0, -kInf);
  EXPECT_EQ(none.pair().h, -kInf);
  EXPECT_EQ(none.pair().s, 0.0f);
  kf::Fold f;
  f.enter(0, 2.0f);  // frame ceil(2 log2e) = 3
  f.s = 5.0f;
  f.enter(1, 4.0f);  // frame 6: pack 0 lies 3 frames behind
  EXPECT_EQ(f.pair().h, 6.0f);
  EXPECT_EQ(f.pair().s, 5.0f / 8.0f);
  // The factor of pack i: 2^(h - row_h - lag(i)) times 1 / S. In a row whose frame is 8, with S = 4:
  EXPECT_EQ(f.factor(1, 8.0f, 0.25f), 0.25f * 0.25f);        // 2^(6 - 8) / 4
  EXPECT_EQ(f.factor(0, 8.0f, 0.25f), 0.25f * 0.25f / 8.0f);  // and 3 frames further behind
  // A thread without a finite value keeps frame 0 and exponentials 0: its factor stays finite in a row
  // of a negative frame (min(0 + 20, 0) = 0, not 2^20).
  EXPECT_EQ(none.factor(0, -20.0f, 0.25f), 0.25f);
  EXPECT_EQ(none.factor(0, 8.0f, 0.25f), 0.25f / 256.0f);
}

TEST(KeptFrames, FoldRescalesItsSumExactly) {
  // The sum of a thread, kept in its current frame: 2^(x log2e - h) summed pack by pack, rescaled by
  // exact powers of two, equals the same terms summed directly in the final frame (terms that are
  // powers of two within 24 bits of each other here, so that no addition rounds).
  kf::Fold f;
  const std::vector<float> maxima = {0.5f, 2.0f, 4.0f, 4.2f, 9.0f};  // frames 1, 3, 6, 7, 13: 13 bits apart
  double direct = 0.0;
  std::vector<float> frames;
  for (size_t i = 0; i < maxima.size(); ++i) {
    f.enter(static_cast<int>(i), maxima[i]);
    f.s += 1.0f;  // one term of 2^0 in the frame of the moment
    frames.push_back(f.h);
  }
  for (float h : frames) direct += std::ldexp(1.0, static_cast<int>(h - f.h));
  EXPECT_EQ(static_cast<double>(f.s), direct);
}

TEST(KeptFrames, MergeOfPairsIsTheSumInTheLargestFrame) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> frame(-40, 40);
  std::uniform_real_distribution<float> sum(0.5f, 1000.0f);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<kf::FrameSum> pairs;
    for (int i = 0; i < 1 + trial % 64; ++i)
      pairs.push_back({trial % 7 == 0 && i % 3 == 0 ? -kInf : static_cast<float>(frame(rng)), sum(rng)});
    if (trial % 7 == 0) pairs[0].s = 0.0f, pairs[0].h = -kInf;
    for (auto& p : pairs)
      if (p.h == -kInf) p.s = 0.0f;  // a thread without a finite value has sum 0
    float H = -kInf;
    for (const auto& p : pairs) H = std::max(H, p.h);
    double want = 0.0;
    for (const auto& p : pairs)
      if (p.h != -kInf) want += static_cast<double>(p.s) * std::ldexp(1.0, static_cast<int>(p.h - H));
    // Merged in the order of a warp's shuffles (pairs at distance 16, 8, ... ) and left to right.
    std::vector<kf::FrameSum> tree = pairs;
    tree.resize(64, {-kInf, 0.0f});
    for (size_t width = 32; width >= 1; width /= 2)
      for (size_t i = 0; i < width; ++i) tree[i] = kf::combine(tree[i], tree[i + width]);
    kf::FrameSum chain = pairs[0];
    for (size_t i = 1; i < pairs.size(); ++i) chain = kf::combine(chain, pairs[i]);
    for (const kf::FrameSum& got : {tree[0], chain}) {
      EXPECT_EQ(got.h, H) << trial;
      if (H == -kInf) {
        EXPECT_EQ(got.s, 0.0f) << trial;
      } else {
        EXPECT_NEAR(got.s, want, 1e-6 * want) << trial;
      }
    }
  }
  // A +inf maximum: its frame wins, and its own sum (NaN: x - inf for x = +inf) makes the row's NaN.
  const kf::FrameSum inf = kf::combine({3.0f, 2.0f}, {kInf, NAN});
  EXPECT_EQ(inf.h, kInf);
  EXPECT_TRUE(std::isnan(inf.s));
}

}  // namespace
}  // namespace hl
