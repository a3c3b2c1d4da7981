// The address arithmetic of rung 4b, the NHWC weight gradient (kernels/cuda/conv/implicit_gemm_nhwc_wgrad.h),
// checked on the CPU, so it is exercised on every build, with or without a GPU.
//
// The kernels in implicit_gemm_nhwc_wgrad.cu copy x and dY to NHWC (rung 4's nhwc_source), then fill
// each stage of their ring with tile_vec's thread-to-vector map, the row cursors (cursor_at, advance,
// row_at), dy_index and x_index, write
// one FP32 partial tile per block and reduction slice (split_for), and add the slices into the weight
// gradient through kcrs_index. Here the same functions fill the same tiles, block by block, slice by
// slice, K step by K step and thread by thread, and float64 products stand in for the Tensor Cores.
// The result must equal the float64 CPU reference of backward_weight, every partial element must be
// written exactly once and every weight exactly once, every 16-byte copy must start on a 16-byte
// boundary and stay inside its tensor (std::vector::at throws otherwise), and every slot of a tile
// must be filled (they start as NaN). What this cannot check is the cp.async ring, the WMMA fragments
// and the barriers: tests/kernels/test_conv_cuda.cpp does that on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cuda/conv/implicit_gemm_nhwc.h"  // nhwc_source: the layout change rung 4b shares
#include "kernels/cuda/conv/implicit_gemm_nhwc_wgrad.h"
#include "tests/kernels/conv_reference.h"
#include "tests/kernels/tile_emulation.h"

namespace hl {
namespace {

using kernels::ConvArgs;
using kernels::ConvPass;
namespace wg = kernels::cuda::nhwc_wgrad;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using test::ConvShape;

// The rung's own shapes: C and K multiples of 8. Several row tiles (K > 128) and column tiles (R*S*C
// > 128) with partial last ones, columns that straddle filter taps (C = 8, 24, 40), odd H/W, padding
// 0/1/2, strides 1 and 2 (and unequal ones), kernels 1/3/5 and 3x5, reductions split into many slices
// with a short last one, and VGG-small's and LeNet's layers (at small batches).
const std::vector<ConvShape> kShapes = {
    {2, 32, 7, 9, 32, 3, 3, 1, 1, 1, 1},   {1, 64, 9, 7, 160, 3, 3, 1, 1, 0, 0}, {2, 32, 11, 6, 64, 5, 5, 1, 1, 2, 2},
    {3, 96, 5, 5, 32, 1, 1, 1, 1, 0, 0},   {2, 32, 9, 8, 96, 3, 5, 1, 1, 1, 2},  {2, 160, 6, 6, 64, 3, 3, 1, 1, 1, 1},
    {2, 32, 13, 13, 64, 3, 3, 2, 2, 1, 1}, {1, 64, 10, 9, 32, 5, 5, 2, 1, 2, 0}, {2, 8, 10, 10, 24, 3, 3, 1, 1, 1, 1},
    {3, 24, 7, 5, 8, 5, 5, 1, 2, 2, 1},    {4, 40, 6, 6, 136, 3, 3, 1, 1, 1, 1},
    {4, 16, 32, 32, 16, 3, 3, 1, 1, 1, 1},   // N*P*Q = 4096: split into 16 slices
    {9, 8, 13, 11, 8, 3, 3, 1, 1, 1, 1},     // N*P*Q = 1287: 5 slices of 288, the last 135 long
    {4, 128, 8, 8, 128, 3, 3, 1, 1, 1, 1},   // VGG-small's 128-channel layer (at 8 x 8)
    {2, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1},   // VGG-small's 256 -> 256 layer
    {2, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2},   // LeNet's second layer
};

// The blocks of the kernel a GPU holds at once (split_for's slots): an H100's or H200's 132 SMs, two
// blocks each.
constexpr int64_t kSlots = 2 * 132;

// The NHWC copy of an NCHW tensor [N, C, H, W], as copy_nchw_to_nhwc makes it.
std::vector<double> to_nhwc(const std::vector<double>& src, int64_t N, int C, int H, int W) {
  std::vector<double> out(static_cast<size_t>(N * C * H * W));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = src.at(static_cast<size_t>(kernels::cuda::nhwc::nhwc_source(static_cast<int64_t>(i), C, H, W)));
  return out;
}

struct Emulated {
  std::vector<double> dw;
  std::vector<int> weight_writes, partial_writes;
};

// The rung on one call: the layout changes, conv_nhwc_wgrad_kernel block by block (x: column tile, y:
// row tile, z: slice), then conv_nhwc_wgrad_reduce_kernel. `beta` and `old` as the call's.
Emulated emulate(const ConvArgs& a, const std::vector<double>& x, const std::vector<double>& dy, int64_t slots, double beta,
                 const std::vector<double>& old) {
  const wg::Problem g = wg::problem_for(a);
  const wg::Split sp = wg::split_for(g, slots);
  const std::vector<double> xh = to_nhwc(x, g.N, g.C, g.H, g.W);
  const std::vector<double> dyh = to_nhwc(dy, g.N, g.K, g.P, g.Q);

  const int64_t n = static_cast<int64_t>(g.K) * g.rsc();
  Emulated e;
  std::vector<double> partial(static_cast<size_t>(sp.splits * n), kNaN);
  e.partial_writes.assign(partial.size(), 0);
  std::vector<double> As(wg::kBK * wg::kLdA), Bs(wg::kBK * wg::kLdB), acc(wg::kBM * wg::kBN);
  const int col_tiles = (g.rsc() + wg::kBN - 1) / wg::kBN, row_tiles = (g.K + wg::kBM - 1) / wg::kBM;
  for (int bz = 0; bz < sp.splits; ++bz) {
    const int j_begin = bz * sp.slice, j_end = std::min(j_begin + sp.slice, g.npq());
    for (int by = 0; by < row_tiles; ++by) {
      for (int bx = 0; bx < col_tiles; ++bx) {
        const int m0 = by * wg::kBM, n0 = bx * wg::kBN;
        std::fill(acc.begin(), acc.end(), 0.0);
        // Each thread's row cursors, decomposed once per block and advanced once per stage.
        const wg::Stride stride = wg::stride_of(g, wg::kBK);
        std::vector<wg::RowCursor> cursors(static_cast<size_t>(wg::kThreads * wg::kVecs));
        for (int tid = 0; tid < wg::kThreads; ++tid)
          for (int i = 0; i < wg::kVecs; ++i)
            cursors[static_cast<size_t>(tid * wg::kVecs + i)] = wg::cursor_at(g, j_begin + wg::tile_vec(tid, i).row);
        for (int k0 = j_begin; k0 < j_end; k0 += wg::kBK) {
          std::fill(As.begin(), As.end(), kNaN);  // a slot no thread fills poisons its products
          std::fill(Bs.begin(), Bs.end(), kNaN);
          for (int tid = 0; tid < wg::kThreads; ++tid) {
            const int vec = wg::tile_vec(tid, 0).vec;
            const wg::Column col = wg::make_column(g, n0 + 8 * vec);
            for (int i = 0; i < wg::kVecs; ++i) {
              const wg::TileVec t = wg::tile_vec(tid, i);
              EXPECT_EQ(t.vec, vec) << "thread " << tid << " copy " << i << " changes tile column";
              wg::RowCursor& cursor = cursors[static_cast<size_t>(tid * wg::kVecs + i)];
              EXPECT_EQ(cursor.j, k0 + t.row) << "thread " << tid << " copy " << i;
              const wg::Row row = wg::row_at(g, cursor, j_end);
              wg::advance(g, stride, cursor);
              test::copy8(&As[static_cast<size_t>(t.row * wg::kLdA + 8 * t.vec)], dyh,
                          wg::dy_index(g, row, m0 + 8 * vec), "A (dY)");
              test::copy8(&Bs[static_cast<size_t>(t.row * wg::kLdB + 8 * t.vec)], xh, wg::x_index(g, row, col),
                          "B (x)");
            }
          }
          // The warps' WMMA products: A stored [j][m] (col_major) times B stored [j][n] (row_major).
          for (int mi = 0; mi < wg::kBM; ++mi)
            for (int ni = 0; ni < wg::kBN; ++ni) {
              double sum = 0.0;
              for (int k = 0; k < wg::kBK; ++k) sum += As[k * wg::kLdA + mi] * Bs[k * wg::kLdB + ni];
              acc[static_cast<size_t>(mi * wg::kBN + ni)] += sum;
            }
        }
        // The epilogue: 4-column groups of the staged tile, inside the output or not at all.
        constexpr int kGroups = wg::kBN / 4;
        for (int el = 0; el < wg::kBM * kGroups; ++el) {
          const int mi = el / kGroups, ni = 4 * (el % kGroups);
          const int row = m0 + mi, c = n0 + ni;
          if (row >= g.K || c >= g.rsc()) continue;
          EXPECT_LE(c + 4, g.rsc()) << "a 16-byte store straddles the last column";
          for (int q = 0; q < 4; ++q) {
            const size_t at = static_cast<size_t>(bz * n + static_cast<int64_t>(row) * g.rsc() + c + q);
            partial.at(at) = acc[static_cast<size_t>(mi * wg::kBN + ni + q)];
            ++e.partial_writes.at(at);
          }
        }
      }
    }
  }
  // The second pass.
  e.dw = old;
  e.weight_writes.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    double v = 0.0;
    for (int z = 0; z < sp.splits; ++z) v += partial.at(static_cast<size_t>(z * n + i));
    const size_t o = static_cast<size_t>(wg::kcrs_index(g, i));
    e.dw.at(o) = beta != 0.0 ? v + beta * e.dw.at(o) : v;
    ++e.weight_writes.at(o);
  }
  return e;
}

void check_call(const ConvShape& s, uint32_t seed, int64_t slots, double beta) {
  ConvArgs a = s.args();
  a.pass = ConvPass::backward_weight;
  const std::string what = s.str() + " with " + std::to_string(slots) + " slots, beta " + std::to_string(beta);
  ASSERT_EQ(wg::hand_off_reason(a, 90, 90, slots), nullptr) << what << ": the rung should compute this call";
  const std::vector<double> x = test::small_integers(static_cast<size_t>(a.N * a.C * a.H * a.W), seed);
  const std::vector<double> dy = test::small_integers(static_cast<size_t>(a.N * a.K * a.P() * a.Q()), seed + 1);
  const size_t nw = static_cast<size_t>(a.K * a.C * a.R * a.S);
  const std::vector<double> old = beta != 0.0 ? test::small_integers(nw, seed + 2) : std::vector<double>(nw, kNaN);
  const Emulated got = emulate(a, x, dy, slots, beta, old);
  std::vector<double> want = test::conv_reference(a, ConvPass::backward_weight, x, {}, dy).value;
  if (beta != 0.0)
    for (size_t i = 0; i < want.size(); ++i) want[i] += beta * old[i];
  ASSERT_EQ(got.dw.size(), want.size()) << what;
  size_t bad = 0;
  std::ostringstream first;  // not chained operator+: g++ 12 raises a false -Wrestrict on it
  for (size_t i = 0; i < want.size(); ++i)
    if (!(got.dw[i] == want[i]) && bad++ == 0) first << "[" << i << "] = " << got.dw[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " weights wrong, the first " << first.str();
  size_t weights_not_once = 0, partials_not_once = 0;
  for (int w : got.weight_writes) weights_not_once += w != 1;
  for (int w : got.partial_writes) partials_not_once += w != 1;
  EXPECT_EQ(weights_not_once, 0u) << what << ": weights not written exactly once";
  EXPECT_EQ(partials_not_once, 0u) << what << ": partial sums not written exactly once";
}

// A row cursor advanced by any stride keeps the digits (n, p, q) of its index: the same as dividing,
// for output sizes smaller and larger than the stride (several images per step: P * Q < step), one
// row or one column, and strides that are and are not multiples of Q.
TEST(ConvNhwcWgradIndex, RowCursorsAdvanceLikeDividing) {
  const int sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {2, 2}, {3, 5}, {8, 8}, {16, 16}, {32, 32}, {14, 14}, {5, 33}, {40, 3}};
  for (const auto& [P, Q] : sizes) {
    wg::Problem g{};
    g.N = 1000;
    g.P = P;
    g.Q = Q;
    for (int step : {1, 7, 32, 33, 64, 1000}) {
      for (int j0 : {0, 1, Q - 1, P * Q - 1, 3 * P * Q + 2}) {
        wg::RowCursor c = wg::cursor_at(g, j0);
        const wg::Stride d = wg::stride_of(g, step);
        for (int k = 0; k < 200; ++k) {
          const int j = j0 + k * step;
          const int n = j / (P * Q), p = (j % (P * Q)) / Q, q = j % Q;
          ASSERT_EQ(c.j, j);
          ASSERT_TRUE(c.n == n && c.p == p && c.q == q)
              << "P " << P << " Q " << Q << " step " << step << " from " << j0 << ": at " << j << " (" << c.n << ", "
              << c.p << ", " << c.q << "), want (" << n << ", " << p << ", " << q << ")";
          wg::advance(g, d, c);
        }
      }
    }
  }
}

TEST(ConvNhwcWgradIndex, WeightGradientEqualsTheReference) {
  uint32_t seed = 1;
  for (const ConvShape& s : kShapes) check_call(s, seed += 3, kSlots, 0.0);
}

// Other GPUs, other cuts, the same sums: one slot (one slice: a wave per tile makes more slices only
// longer), 8, and more than any grid fills (as many slices as the limits allow, the shortest kMinSlice).
TEST(ConvNhwcWgradIndex, OtherSplitsGiveTheSameSums) {
  uint32_t seed = 200;
  for (const ConvShape& s : kShapes) check_call(s, seed += 3, 8, 0.0);
  for (const ConvShape& s : kShapes) check_call(s, seed += 3, 1, 0.0);
  for (const ConvShape& s : kShapes) check_call(s, seed += 3, int64_t{1} << 20, 0.0);
}

TEST(ConvNhwcWgradIndex, BetaAddsTheOldGradient) {
  uint32_t seed = 400;
  for (const ConvShape& s : {kShapes[1], kShapes[8], kShapes[12]}) {
    check_call(s, seed += 3, kSlots, 1.0);
    check_call(s, seed += 3, kSlots, 0.5);
  }
}

// The split covers the reduction exactly: slices of a multiple of kBK, none empty, none shorter than
// kMinSlice unless the whole reduction is, and at most kMaxSplits.
TEST(ConvNhwcWgradIndex, SplitCoversTheReduction) {
  for (const ConvShape& s : kShapes) {
    for (int64_t slots : {int64_t{1}, int64_t{8}, int64_t{216}, kSlots, int64_t{1} << 20}) {
      ConvArgs a = s.args();
      a.pass = ConvPass::backward_weight;
      const wg::Problem g = wg::problem_for(a);
      const wg::Split sp = wg::split_for(g, slots);
      const std::string what = s.str() + " with " + std::to_string(slots) + " slots";
      EXPECT_EQ(sp.slice % wg::kBK, 0) << what;
      EXPECT_GE(sp.splits, 1) << what;
      EXPECT_LE(sp.splits, wg::kMaxSplits) << what;
      EXPECT_GE(static_cast<int64_t>(sp.splits) * sp.slice, g.npq()) << what << ": the slices miss the end";
      EXPECT_LT(static_cast<int64_t>(sp.splits - 1) * sp.slice, g.npq()) << what << ": an empty slice";
      if (sp.splits > 1) {
        EXPECT_GE(sp.slice, wg::kMinSlice) << what;
      }
    }
  }
  // VGG-small's 256 -> 256 layer at batch 128 on an H100 or H200: 2 x 18 tiles, 7 slices of 1184
  // positions, 252 blocks in one wave of 264 (the old rule's 8 slices made 288, a second wave of 24;
  // the H100 timed 0.0972 against 0.1146 ms, bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27_seventh.txt).
  ConvArgs vgg = ConvShape{128, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1}.args();
  vgg.pass = ConvPass::backward_weight;
  const wg::Split sp = wg::split_for(wg::problem_for(vgg), kSlots);
  EXPECT_EQ(sp.splits, 7);
  EXPECT_EQ(sp.slice, 1184);
}

// kcrs_index is a permutation of the weights: the reordering loses and duplicates nothing.
TEST(ConvNhwcWgradIndex, ReorderIsAPermutation) {
  for (const ConvShape& s : kShapes) {
    ConvArgs a = s.args();
    a.pass = ConvPass::backward_weight;
    const wg::Problem g = wg::problem_for(a);
    const int64_t n = static_cast<int64_t>(g.K) * g.rsc();
    std::vector<int> seen(static_cast<size_t>(n), 0);
    for (int64_t i = 0; i < n; ++i) ++seen.at(static_cast<size_t>(wg::kcrs_index(g, i)));
    for (int c : seen) ASSERT_EQ(c, 1) << s.str();
  }
}

// Which calls rung 4b computes and which it hands to rung 4: every backward_weight of VGG-small and
// LeNet after the first layer, on an sm_80+ GPU; never another pass, a first layer (C = 1 or 3), a
// channel count off a multiple of 8, an older GPU, a build without sm_80 code or an oversized workspace.
TEST(ConvNhwcWgradIndex, HandsOnExactlyWhatItDoesNotCompute) {
  const ConvShape layers[] = {{128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1},   {128, 64, 16, 16, 128, 3, 3, 1, 1, 1, 1},
                              {128, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1}, {128, 128, 8, 8, 256, 3, 3, 1, 1, 1, 1},
                              {128, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1},   {128, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2}};
  for (const ConvShape& s : layers) {
    ConvArgs a = s.args();
    a.pass = ConvPass::backward_weight;
    EXPECT_EQ(wg::hand_off_reason(a, 90, 90, kSlots), nullptr) << s.str();
    EXPECT_EQ(wg::hand_off_reason(a, 80, 80, 108), nullptr) << s.str();
    EXPECT_EQ(wg::hand_off_reason(a, 0, 0, 80), nullptr) << s.str() << ": no GPU, nothing known against it";
    EXPECT_NE(wg::hand_off_reason(a, 75, 75, kSlots), nullptr) << s.str();
    EXPECT_NE(wg::hand_off_reason(a, 90, 75, kSlots), nullptr) << s.str() << ": an sm_75-only build on an H100";
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data}) {
      a.pass = pass;
      EXPECT_NE(wg::hand_off_reason(a, 90, 90, kSlots), nullptr) << s.str() << " " << kernels::conv_pass_name(pass);
    }
  }
  const auto why = [](const ConvShape& s) {
    ConvArgs a = s.args();
    a.pass = ConvPass::backward_weight;
    const char* r = wg::hand_off_reason(a, 90, 90, kSlots);
    return std::string(r != nullptr ? r : "(computed)");
  };
  EXPECT_NE(why({128, 3, 32, 32, 64, 3, 3, 1, 1, 1, 1}).find("multiple of 8"), std::string::npos);  // VGG's first
  EXPECT_NE(why({128, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2}).find("multiple of 8"), std::string::npos);  // LeNet's first
  EXPECT_NE(why({2, 16, 8, 8, 10, 3, 3, 1, 1, 1, 1}).find("output channel"), std::string::npos);
  // The workspace cap: x and dY copies of 2 * 2 * 256 * 64 * 64 * 128 bytes are 512 MiB.
  EXPECT_NE(why({256, 128, 64, 64, 128, 3, 3, 1, 1, 1, 1}).find("256 MiB"), std::string::npos);
  // VGG-small's largest call stays far below it: about 42 MB on an H200.
  ConvArgs first64 = ConvShape{128, 64, 32, 32, 64, 3, 3, 1, 1, 1, 1}.args();
  first64.pass = ConvPass::backward_weight;
  const wg::Problem g = wg::problem_for(first64);
  EXPECT_LT(wg::workspace_bytes(g, wg::split_for(g, kSlots)), int64_t{42} << 20);
}

// hand_off_reason's bounds, each on both sides and each by the reason it gives (so that a later check
// cannot stand in for the one meant): "" where rung 4b computes the call itself.
std::string wgrad_why(const ConvShape& s, int cc = 90, int loaded_arch = 90, int64_t slots = kSlots) {
  ConvArgs a = s.args();
  a.pass = ConvPass::backward_weight;
  const char* reason = wg::hand_off_reason(a, cc, loaded_arch, slots);
  return reason == nullptr ? std::string() : std::string(reason);
}
using test::kIntMax;
using test::says;

// The 32-bit bounds, each product alone past 2^31 - 1 (a padding or a stride keeps the others small)
// and, where a product of multiples of 8 can reach it, just below: there the call goes on to the
// workspace check, which hands such large calls on for their size instead. K*C*R*S, C*H*W and K*P*Q
// hold K or C, multiples of 8, so they never equal 2^31 - 1 itself.
TEST(ConvNhwcWgradIndex, HandOffAtTheThirtyTwoBitBounds) {
  const char* bits = "32-bit";
  const char* big = "256 MiB";
  // K*C*R*S: 64 x 16384^2 = 2^34 and 64 x 5792^2 = 2,147,024,896 (a padding makes P = Q = 2).
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8, 16384, 16384, 1, 1, 8192, 8192}), bits));
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8, 5792, 5792, 1, 1, 2896, 2896}), big));
  // C*H*W: 8 x 16384^2 = 2^31 and 8 x 16384 x 16383 (a stride of 16384 makes P = Q = 1).
  EXPECT_TRUE(says(wgrad_why({1, 8, 16384, 16384, 8, 1, 1, 16384, 16384, 0, 0}), bits));
  EXPECT_TRUE(says(wgrad_why({1, 8, 16384, 16383, 8, 1, 1, 16384, 16384, 0, 0}), big));
  // K*P*Q: 8 x 16385^2 = 2,147,745,800 and 8 x 16385 x 16383 = 2,147,483,640 (from H = W = 1 by padding).
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8, 1, 1, 1, 1, 8192, 8192}), bits));
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8, 1, 1, 1, 1, 8192, 8191}), big));
  // N*P*Q, the reduction, up to 2^31 - 1 - 64 (a row cursor runs up to 2 x kBK past its end).
  EXPECT_TRUE(says(wgrad_why({kIntMax - 63, 8, 1, 1, 8, 1, 1, 1, 1, 0, 0}), bits));
  EXPECT_TRUE(says(wgrad_why({kIntMax - 64, 8, 1, 1, 8, 1, 1, 1, 1, 0, 0}), big));
  // A row's offsets, P x stride + R (and Q x stride + S): 2 x (2^30 - 1) + 2 = 2^31 is past, + 1 is at
  // the bound, where the call is small enough to compute (P = 2 through a padding of 2^29).
  const int64_t s30 = (int64_t{1} << 30) - 1, p29 = int64_t{1} << 29;
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8, 2, 1, s30, 1, p29, 0}), bits));
  EXPECT_EQ(wgrad_why({1, 8, 1, 1, 8, 1, 1, s30, 1, p29, 0}), "");
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8, 1, 2, 1, s30, 0, p29}), bits));
  EXPECT_EQ(wgrad_why({1, 8, 1, 1, 8, 1, 1, 1, s30, 0, p29}), "");
  // A batch so large that N*P*Q would wrap in 64 bits (2^40 x 4096^2 = 2^64): the bound on each size
  // comes first and refuses it before any product is formed.
  EXPECT_TRUE(says(wgrad_why({int64_t{1} << 40, 8, 4096, 4096, 8, 1, 1, 1, 1, 0, 0}), bits));
  EXPECT_TRUE(says(wgrad_why({kIntMax + 1, 8, 1, 1, 8, 1, 1, 1, 1, 0, 0}), bits));
}

// 65535 row tiles of 128 output channels (K = 8,388,480) and the next multiple of 8 past them; the
// channel counts and the GPU, each on both sides.
TEST(ConvNhwcWgradIndex, HandOffAtTheRowTileChannelAndGpuBounds) {
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8388488, 1, 1, 1, 1, 0, 0}), "row tiles"));
  EXPECT_TRUE(says(wgrad_why({1, 8, 1, 1, 8388480, 1, 1, 1, 1, 0, 0}), "256 MiB"));

  EXPECT_TRUE(says(wgrad_why({2, 12, 8, 8, 16, 3, 3, 1, 1, 1, 1}), "input channel"));
  EXPECT_TRUE(says(wgrad_why({2, 16, 8, 8, 12, 3, 3, 1, 1, 1, 1}), "output channel"));
  const ConvShape small{2, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1};
  EXPECT_EQ(wgrad_why(small), "");
  EXPECT_TRUE(says(wgrad_why(small, 79, 0), "compute capability 8.0"));
  EXPECT_TRUE(says(wgrad_why(small, 0, 79), "a build without code"));
  EXPECT_EQ(wgrad_why(small, 80, 0), "");
  EXPECT_EQ(wgrad_why(small, 0, 80), "");
}

// The workspace, in bytes: the NHWC copies of x and dY (2 bytes a value, ending on a 16-byte boundary),
// then one FP32 partial tile of K x R*S*C per slice. A shape with every size different: N = 2, C = 8,
// H = 3, W = 5, K = 16, a 3 x 3 filter with strides 2 and 1 and paddings 1 and 0: P = 2, Q = 3.
TEST(ConvNhwcWgradIndex, WorkspaceHoldsTheCopiesAndThePartialTiles) {
  ConvArgs a = ConvShape{2, 8, 3, 5, 16, 3, 3, 2, 1, 1, 0}.args();
  a.pass = ConvPass::backward_weight;
  const wg::Problem g = wg::problem_for(a);
  ASSERT_EQ(g.P, 2);
  ASSERT_EQ(g.Q, 3);
  // x: 2 x 3 x 5 x 8 = 240 values, dY: 2 x 2 x 3 x 16 = 192: 864 bytes, a multiple of 16 (C and K are
  // multiples of 8, so the copies always are).
  EXPECT_EQ(wg::copies_bytes(g), 864);
  // 3 slices of 16 x 72 floats: 13,824 bytes more.
  EXPECT_EQ(wg::workspace_bytes(g, wg::Split{3, 32}), 864 + 13824);
  EXPECT_EQ(wg::workspace_bytes(g, wg::Split{1, 32}), 864 + 4608);
  // At the cap of 256 MiB exactly, the call is computed, and 8 channels more are handed on: one image
  // of 1 x 1 (one reduction step, so one slice) with C = 7,895,160 and K = 8 takes 2 x (C + K) bytes of
  // copies and 4 x K x C of partial tile, 15,790,336 + 252,645,120 = 2^28.
  ConvArgs cap = ConvShape{1, 7895160, 1, 1, 8, 1, 1, 1, 1, 0, 0}.args();
  cap.pass = ConvPass::backward_weight;
  const wg::Problem at = wg::problem_for(cap);
  EXPECT_EQ(wg::workspace_bytes(at, wg::split_for(at, kSlots)), int64_t{1} << 28);
  EXPECT_EQ(wgrad_why({1, 7895160, 1, 1, 8, 1, 1, 1, 1, 0, 0}), "");
  EXPECT_TRUE(says(wgrad_why({1, 7895168, 1, 1, 8, 1, 1, 1, 1, 0, 0}), "256 MiB"));
}

// The shared memory the kernel asks for holds what it puts there: dY's [kBK][kLdA] and x's [kBK][kLdB]
// per stage, channels contiguous, and the staging tile [kBM][kLdC] (test::expect_smem_holds); 8 warps
// of 64 x 32 over the 128 x 128 tile.
TEST(ConvNhwcWgradIndex, SharedMemoryHoldsTheRingAndTheStagingTile) {
  EXPECT_EQ(wg::kWarpsM * wg::kWarpsN * 32, wg::kThreads);
  EXPECT_EQ(wg::kBM, wg::kWarpsM * 64);
  EXPECT_EQ(wg::kBN, wg::kWarpsN * 32);
  test::expect_smem_holds({.stages = wg::kStages, .a_rows = wg::kBK, .a_cols = wg::kBM, .a_ld = wg::kLdA,
                           .b_rows = wg::kBK, .b_cols = wg::kBN, .b_ld = wg::kLdB, .c_rows = wg::kBM,
                           .c_cols = wg::kBN, .c_ld = wg::kLdC, .stage_elems = wg::kStageElems,
                           .ring_bytes = wg::kRingBytes, .c_bytes = wg::kCBytes, .smem_bytes = wg::kSmemBytes});
  EXPECT_LE(wg::kSmemBytes, 68 * 1024) << "the hand-off names 68 KiB for sm_80";
}

// The emulation can fail: the weight gradient written in the GEMM's [k][r][s][c] order, without
// kcrs_index's reordering (the slip the second pass exists to avoid), is caught.
TEST(ConvNhwcWgradIndex, EmulationCatchesAMissingReorder) {
  const ConvShape s = kShapes[0];
  ConvArgs a = s.args();
  a.pass = ConvPass::backward_weight;
  const std::vector<double> x = test::small_integers(static_cast<size_t>(a.N * a.C * a.H * a.W), 7);
  const std::vector<double> dy = test::small_integers(static_cast<size_t>(a.N * a.K * a.P() * a.Q()), 8);
  const std::vector<double> none(static_cast<size_t>(a.K * a.C * a.R * a.S), kNaN);
  const Emulated got = emulate(a, x, dy, kSlots, 0.0, none);
  const std::vector<double> want = test::conv_reference(a, ConvPass::backward_weight, x, {}, dy).value;
  // Undo the reordering: the values in GEMM order.
  const wg::Problem g = wg::problem_for(a);
  std::vector<double> gemm_order(got.dw.size());
  for (size_t i = 0; i < gemm_order.size(); ++i)
    gemm_order[i] = got.dw.at(static_cast<size_t>(wg::kcrs_index(g, static_cast<int64_t>(i))));
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += gemm_order[i] != want[i];
  EXPECT_GT(differ, want.size() / 2);
}

}  // namespace
}  // namespace hl
