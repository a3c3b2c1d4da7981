// Split-K of the CUDA GEMM rungs (kernels/gemm_split.h): the decision and the slicing are plain host
// code, so they are tested on every machine. Here each slice runs through the CPU GEMM, which is what
// a CUDA block does with its slice; the kernels themselves are tested on the GPU
// (test_gemm_cuda.cpp, CudaGemm.SplitK*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/gemm_split.h"
#include "kernels/half.h"
#include "tests/test_util.h"

namespace hl {
namespace {

using kernels::kMaxSlices;
using kernels::kMinSliceK;
using kernels::kMinSplitK;
using kernels::plan_split_k;
using kernels::SplitKPlan;

int64_t tiles(int64_t M, int64_t N, int64_t tm, int64_t tn) { return ((M + tm - 1) / tm) * ((N + tn - 1) / tn); }

TEST(GemmSplitK, TheLongReductionsOfTrainingAreSplit) {
  // An H200 has 132 SMs. wmma_pipelined_split_k's small tile is 64 x 64 with K steps of 32;
  // smem_tiled_split_k's tile is 128 x 128 with K steps of 8.
  // LeNet fc1 forward, 128 x 256 x 3136: 8 tiles. 12 slices wanted (3136 / 256), of 262 -> 288
  // (a multiple of 32), which covers K in 11: the last one (256 values) is shorter.
  const SplitKPlan fc1 = plan_split_k(tiles(128, 256, 64, 64), 3136, 132, 32);
  EXPECT_EQ(fc1.slices, 11);
  EXPECT_EQ(fc1.k_len, 288);
  // LeNet conv1's weight gradient as an FP32 im2col GEMM, 32 x 25 x 100352: one tile. Two blocks per
  // SM are 264 slices, more than kMaxSlices: 256 slices of 392 values (100352 / 256, a multiple of 8).
  const SplitKPlan conv1 = plan_split_k(tiles(32, 25, 128, 128), 100352, 132, 8);
  EXPECT_EQ(conv1.slices, 256);
  EXPECT_EQ(conv1.k_len, 392);
  // conv2's, 64 x 800 x 25088: 7 tiles of 128 x 128 -> 38 slices wanted, 25088 / 38 = 660.2 -> 664.
  const SplitKPlan conv2 = plan_split_k(tiles(64, 800, 128, 128), 25088, 132, 8);
  EXPECT_EQ(conv2.slices, 38);
  EXPECT_EQ(conv2.k_len, 664);
}

TEST(GemmSplitK, GemmsThatFillTheGpuOrHaveShortReductionsAreLeftAlone) {
  // MLP-512's GEMMs (K = 784 or 512 is too short to pay for the partial sums), a square GEMM with
  // plenty of tiles, and a tiny one.
  for (const auto& [t, K] : std::vector<std::pair<int64_t, int64_t>>{
           {tiles(128, 512, 64, 64), 784}, {tiles(128, 784, 64, 64), 512}, {tiles(4096, 4096, 128, 128), 4096},
           {tiles(1, 1, 64, 64), 1}, {1, kMinSplitK - 1}, {67, 1 << 20}}) {
    const SplitKPlan p = plan_split_k(t, K, 132, 32);
    EXPECT_EQ(p.slices, 1) << t << " tiles, K = " << K;
    EXPECT_EQ(p.k_len, K) << t << " tiles, K = " << K;
  }
}

// Each bound of the decision, on both sides: no tiles; K at kMinSplitK and one below; a GEMM whose tiles
// are exactly half the SMs (split) and one tile more (not); the blocks wanted per tile, ceil(2 x SMs /
// tiles), where the division is exact and where it leaves 1.
TEST(GemmSplitK, EachBoundOfTheDecisionOnBothSides) {
  const auto expect_plan = [](int64_t t, int64_t K, int64_t sms, int64_t step, int64_t slices, int64_t k_len) {
    const SplitKPlan p = plan_split_k(t, K, sms, step);
    EXPECT_EQ(p.slices, slices) << t << " tiles, K = " << K << ", " << sms << " SMs, step " << step;
    EXPECT_EQ(p.k_len, k_len) << t << " tiles, K = " << K << ", " << sms << " SMs, step " << step;
  };
  expect_plan(0, 1 << 20, 132, 32, 1, 1 << 20);
  expect_plan(1, kMinSplitK, 132, 32, 4, 256);      // K / kMinSliceK = 4 slices of 256
  expect_plan(1, kMinSplitK - 1, 132, 32, 1, kMinSplitK - 1);
  expect_plan(66, 1 << 20, 132, 32, 4, 1 << 18);    // 66 x 2 = 132 SMs: 4 slices (ceil(264 / 66))
  expect_plan(67, 1 << 20, 132, 32, 1, 1 << 20);
  expect_plan(45, 1 << 20, 132, 32, 6, 174784);     // ceil(264 / 45) = 6: 1048576 / 6 = 174762.7 -> 174784
  expect_plan(2, 65536, 132, 8, 131, 504);          // 264 / 2 = 132 exactly, not 133: 65536 / 132 -> 504,
                                                    // which covers K in 131 (133 would give 133 of 496)
  expect_plan(5, 1 << 20, 133, 8, 54, 19424);       // 266 / 5 = 53.2: 54, not 53 (1048576 / 54 -> 19424)
}

// How the slice length is rounded: up to whole K steps from ceil(K / slices), and the count of non-empty
// slices from ceil(K / length). Each case has a remainder of 1 where a floor would differ.
TEST(GemmSplitK, SliceLengthAndCountRoundUp) {
  // K = 1025, 4 slices: ceil(1025 / 4) = 257 -> 264 in steps of 8 (a floor, 256, would need a fifth slice).
  SplitKPlan p = plan_split_k(1, 1025, 132, 8);
  EXPECT_EQ(p.slices, 4);
  EXPECT_EQ(p.k_len, 264);
  // Steps of 256: 257 -> 512, and 1025 = 2 x 512 + 1 needs a third slice of one value.
  p = plan_split_k(1, 1025, 132, 256);
  EXPECT_EQ(p.slices, 3);
  EXPECT_EQ(p.k_len, 512);
  // Steps of 512 over K = 1024: two slices of 512 (the rounding left two of the four wanted).
  p = plan_split_k(1, 1024, 132, 512);
  EXPECT_EQ(p.slices, 2);
  EXPECT_EQ(p.k_len, 512);
  // A step longer than K: the rounding leaves one slice, which is no split at all: K whole, not a step.
  p = plan_split_k(1, 1025, 132, 2048);
  EXPECT_EQ(p.slices, 1);
  EXPECT_EQ(p.k_len, 1025);
}

// split_slice on FP16 operands (2 bytes a value; the CUDA rungs' case) and into an output that is neither
// FP32 nor dense: the slice's A and B move by k0 values in bytes of their dtype, and its partial matrix is
// always dense FP32, whatever C was.
TEST(GemmSplitK, SliceOfFp16OperandsIntoAnFp16Output) {
  kernels::GemmArgs g;
  g.device = DeviceType::cpu;
  g.M = 5, g.N = 3, g.K = 1000;
  g.ab_type = DType::f16;
  g.c_type = DType::f16;
  g.ldc = 11;
  static const char a = 0, b = 0;
  g.A = &a;
  g.B = &b;
  for (const auto& [op_a, op_b] : std::vector<std::pair<kernels::Op, kernels::Op>>{
           {kernels::Op::N, kernels::Op::N}, {kernels::Op::T, kernels::Op::T}}) {
    g.op_a = op_a;
    g.op_b = op_b;
    g.lda = 1009, g.ldb = 1013;
    std::vector<float> partial(3 * 5 * 3);
    const kernels::GemmArgs s = kernels::split_slice(g, 400, 2, partial.data());
    const int64_t a_step = op_a == kernels::Op::N ? 800 : 800 * g.lda;
    const int64_t b_step = op_b == kernels::Op::N ? 800 * g.ldb : 800;
    EXPECT_EQ(static_cast<const char*>(s.A) - &a, 2 * a_step);
    EXPECT_EQ(static_cast<const char*>(s.B) - &b, 2 * b_step);
    EXPECT_EQ(s.K, 200);  // the last slice: 1000 - 800
    EXPECT_EQ(s.C, partial.data() + 2 * 5 * 3);
    EXPECT_EQ(s.ldc, 3);
    EXPECT_EQ(s.c_type, DType::f32);
    EXPECT_EQ(s.ab_type, DType::f16);
  }
}

TEST(GemmSplitK, EveryPlanCoversKWithNoEmptySlice) {
  // The invariants the kernels rely on, over a grid of problems: slices start on a K step (the 16-byte
  // alignment of the operands' rows holds in every slice), cover K exactly once, none is empty, and
  // none is shorter than the minimum the plan promises (except the last).
  for (int64_t sms : {1, 8, 46, 80, 108, 132}) {
    for (int64_t k_step : {8, 32, 64}) {
      for (int64_t t : {1, 2, 3, 5, 7, 8, 13, 40, 66, 67, 200}) {
        for (int64_t K : {1, 7, 255, 511, 512, 513, 1000, 3136, 4099, 25088, 100352, 1000003}) {
          const SplitKPlan p = plan_split_k(t, K, sms, k_step);
          std::ostringstream what;
          what << "tiles=" << t << " K=" << K << " sms=" << sms << " step=" << k_step << ": slices=" << p.slices
               << " k_len=" << p.k_len;
          ASSERT_GE(p.slices, 1) << what.str();
          if (p.slices == 1) {
            EXPECT_EQ(p.k_len, K) << what.str();
            continue;
          }
          EXPECT_LE(p.slices, kMaxSlices) << what.str();
          EXPECT_EQ(p.k_len % k_step, 0) << what.str();
          EXPECT_GE(p.k_len, kMinSliceK) << what.str();
          EXPECT_GE(K, kMinSplitK) << what.str();
          EXPECT_LT((p.slices - 1) * p.k_len, K) << what.str();  // the last slice is not empty
          EXPECT_GE(p.slices * p.k_len, K) << what.str();        // and the slices reach the end of K
          EXPECT_LE(t * 2, sms) << what.str();                   // only GEMMs that leave half the GPU idle
          EXPECT_LE(t * p.slices, 2 * sms + t) << what.str();     // about two blocks per SM, no more
        }
      }
    }
  }
}

TEST(GemmSplitK, SlicesSummedWithOneEpilogueGiveTheWholeGemm) {
  // split_slice moves A and B along K by the layout and the leading dimensions, and points C at the
  // slice's partial matrix. Each slice is run through the CPU GEMM (f32 inputs and partial sums), the
  // slices are added in order and the epilogue applied once, as split_k.cu does; the result must be
  // the float64 GEMM. An offset along the wrong dimension, a slice too long or too short, or an
  // epilogue applied per slice is off by O(1), far outside the rounding bound.
  uint64_t seed = test::fresh_seed();
  const int64_t M = 13, N = 9, K = 1100, pad = 3;  // non-dense leading dimensions: ld = dense + pad
  for (const auto& [op_a, op_b] : std::vector<std::pair<kernels::Op, kernels::Op>>{
           {kernels::Op::N, kernels::Op::N}, {kernels::Op::N, kernels::Op::T}, {kernels::Op::T, kernels::Op::N},
           {kernels::Op::T, kernels::Op::T}}) {
    kernels::GemmArgs g;
    g.device = DeviceType::cpu;
    g.op_a = op_a;
    g.op_b = op_b;
    g.M = M, g.N = N, g.K = K;
    kernels::set_dense_ld(g);
    g.lda += pad;
    g.ldb += pad;
    g.ldc = N;
    g.ab_type = g.c_type = g.bias_type = DType::f32;
    g.alpha = -0.75f;
    g.beta = 1.0f;
    g.relu = true;
    const int64_t a_rows = op_a == kernels::Op::N ? M : K, b_rows = op_b == kernels::Op::N ? K : N;
    const auto a64 = test::random_values(static_cast<size_t>(a_rows * g.lda), seed++, -1, 1, DType::f16);
    const auto b64 = test::random_values(static_cast<size_t>(b_rows * g.ldb), seed++, -1, 1, DType::f16);
    const auto c64 = test::random_values(static_cast<size_t>(M * N), seed++, -1, 1, DType::f16);
    const auto bias64 = test::random_values(static_cast<size_t>(N), seed++, -1, 1, DType::f16);
    const std::vector<float> a(a64.begin(), a64.end()), b(b64.begin(), b64.end()), bias(bias64.begin(), bias64.end());
    g.A = a.data();
    g.B = b.data();
    g.bias = bias.data();

    // The plan for one tile on 132 SMs (4 slices of 280), and hand-made ones: 2 slices of 552, 3 of 400
    // (the last 300 long), 5 of 224 (the last 204).
    for (const kernels::SplitKPlan plan : {kernels::plan_split_k(1, K, 132, 8), kernels::SplitKPlan{2, 552},
                                           kernels::SplitKPlan{3, 400}, kernels::SplitKPlan{5, 224}}) {
      const int64_t slices = plan.slices;
      ASSERT_GE(slices, 2);
      std::vector<float> partial(static_cast<size_t>(plan.slices * M * N), std::nanf(""));
      int64_t covered = 0;
      for (int64_t z = 0; z < plan.slices; ++z) {
        const kernels::GemmArgs s = kernels::split_slice(g, plan.k_len, z, partial.data());
        EXPECT_EQ(s.C, partial.data() + z * M * N);
        EXPECT_EQ(s.alpha, 1.0f);
        EXPECT_EQ(s.beta, 0.0f);
        EXPECT_EQ(s.bias, nullptr);
        EXPECT_FALSE(s.relu);
        covered += s.K;
        kernels::gemm(s, "reference");
      }
      EXPECT_EQ(covered, K);
      std::vector<float> c(c64.begin(), c64.end());
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          float sum = 0.0f;
          for (int64_t z = 0; z < plan.slices; ++z) sum += partial[static_cast<size_t>(z * M * N + m * N + n)];
          double want = 0.0, mag = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double x = op_a == kernels::Op::N ? a64[static_cast<size_t>(m * g.lda + k)] : a64[static_cast<size_t>(k * g.lda + m)];
            const double y = op_b == kernels::Op::N ? b64[static_cast<size_t>(k * g.ldb + n)] : b64[static_cast<size_t>(n * g.ldb + k)];
            want += x * y;
            mag += std::fabs(x * y);
          }
          const size_t i = static_cast<size_t>(m * N + n);
          want = std::max(0.0, g.alpha * want + c64[i] + bias64[static_cast<size_t>(n)]);
          const float got = std::max(0.0f, g.alpha * sum + c[i] + bias[static_cast<size_t>(n)]);
          // FP32 sums of K products, in any order: (K + 3) 2^-24 of the magnitudes (scaled by alpha, plus C and bias).
          const double tol = (K + 3) * std::ldexp(1.0, -24) * (0.75 * mag + std::fabs(c64[i]) + 1.0);
          EXPECT_NEAR(got, want, tol) << "slices=" << slices << " op_a=" << static_cast<int>(op_a)
                                      << " op_b=" << static_cast<int>(op_b) << " m=" << m << " n=" << n;
        }
      }
    }
  }
}

// The second pass's sum (sum_slices, which split_k_reduce_kernel runs per element) is the plain loop's,
// slice 0 first and one addition at a time, bit for bit: for every slice count around the batch of
// loads (1 to 3 batches and remainders, and the 242 slices of LeNet conv1's weight gradient), on
// values of mixed magnitudes and signs where the order of the additions changes the result, with -0
// alone (it must stay -0) and with an inf and a NaN among them.
TEST(GemmSplitK, SliceSumsAreThePlainLoopsBitForBit) {
  const auto plain = [](const std::vector<float>& p, int64_t total, int64_t i, int64_t slices) {
    float sum = p[static_cast<size_t>(i)];
    for (int64_t z = 1; z < slices; ++z) sum += p[static_cast<size_t>(z * total + i)];
    return sum;
  };
  const int64_t total = 7;
  std::vector<int64_t> counts = {242};
  for (int64_t n = 1; n <= 3 * kernels::kSumBatch + 2; ++n) counts.push_back(n);
  int order_matters = 0;
  for (const int64_t slices : counts) {
    // Values of magnitudes 2^-20 to 2^20: float additions of these depend on their order.
    const std::vector<double> r =
        test::random_values(static_cast<size_t>(slices * total), static_cast<uint64_t>(slices), -1.0, 1.0, DType::f32);
    std::vector<float> p(r.size());
    for (size_t k = 0; k < p.size(); ++k)
      p[k] = static_cast<float>(std::ldexp(r[k], static_cast<int>(k * 7919 % 41) - 20));
    for (int64_t i = 0; i < total; ++i) {
      const float got = kernels::sum_slices(p.data(), total, i, slices), want = plain(p, total, i, slices);
      ASSERT_EQ(float_bits(got), float_bits(want)) << slices << " slices, element " << i;
      // The same values summed in reverse give another float somewhere: the check can see an order.
      float reverse = 0.0f;
      for (int64_t z = slices - 1; z >= 0; --z) reverse += p[static_cast<size_t>(z * total + i)];
      order_matters += float_bits(reverse) != float_bits(want);
    }
  }
  EXPECT_GT(order_matters, 0);
  const std::vector<float> zeros = {-0.0f};
  EXPECT_EQ(float_bits(kernels::sum_slices(zeros.data(), 1, 0, 1)), float_bits(-0.0f));
  std::vector<float> special(40, 1.0f);
  special[20] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(kernels::sum_slices(special.data(), 1, 0, 40)));
  special[30] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(kernels::sum_slices(special.data(), 1, 0, 40)));
}

}  // namespace
}  // namespace hl
