// The address arithmetic of the implicit-GEMM convolution (kernels/cuda/conv/implicit_gemm_index.h),
// checked on the CPU, so it is exercised on every build, with or without a GPU.
//
// The kernels in implicit_gemm_wmma.cu gather their GEMM operands through the functions of that
// header (make_column / make_tap_offsets (rung 3) or make_tap_entry (rung 3b's table) /
// offset_gather_index / offset_weight_index / output_column for forward and stride-1 backward_data,
// make_tap / strided_gather_index / weight_index for strided backward_data, make_wrow / make_wcol /
// wgrad_*_index for backward_weight). Here the same functions
// fill the same shared-memory tiles, walked block by block, K step by K step and thread by thread
// with the kernels' thread-to-element maps (replicated below: change them together), and plain
// float64 products stand in for the Tensor Cores. The result must equal the float64 CPU reference
// to rounding, every output element must be written exactly once, and every read must stay inside
// its tensor (std::vector::at throws otherwise). What this cannot check is the WMMA fragment
// handling and the barriers: tests/kernels/test_conv_cuda.cpp does that on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cuda/conv/implicit_gemm_index.h"
#include "tests/kernels/tile_emulation.h"
#include "tests/test_util.h"

namespace hl {
namespace {

using kernels::ConvArgs;
using kernels::ConvPass;
namespace ig = kernels::cuda::igemm;

struct Shape {
  const char* name;
  int64_t N, C, H, W, K, R, S, sh, sw, ph, pw;
};

// Corners as in test_conv_cuda.cpp (C = 1 and 3, odd H/W, stride 2 and unequal strides, padding
// 0/1/2, K not a multiple of 16, kernels 1/3/5 and 3x5), plus shapes with several row, column and
// K-step tiles.
const std::vector<Shape> kShapes = {
    {"n1_c1_7x9_k10_3x3_s1_p1", 1, 1, 7, 9, 10, 3, 3, 1, 1, 1, 1},
    {"c3_7x9_k33_5x5_s2_p2", 2, 3, 7, 9, 33, 5, 5, 2, 2, 2, 2},
    {"c3_8x8_k16_1x1_s1_p0", 3, 3, 8, 8, 16, 1, 1, 1, 1, 0, 0},
    {"c16_9x7_k17_3x3_s2_p0", 2, 16, 9, 7, 17, 3, 3, 2, 2, 0, 0},
    {"c8_5x5_k8_5x5_s1_p0", 1, 8, 5, 5, 8, 5, 5, 1, 1, 0, 0},
    {"c5_11x6_k24_3x3_s1_p2", 2, 5, 11, 6, 24, 3, 3, 1, 1, 2, 2},
    {"c4_9x8_k12_3x5_s2x1_p1x2", 2, 4, 9, 8, 12, 3, 5, 2, 1, 1, 2},
    {"c40_6x6_k130_3x3_s1_p1", 3, 40, 6, 6, 130, 3, 3, 1, 1, 1, 1},
    {"lenet_conv1_n2", 2, 1, 28, 28, 32, 5, 5, 1, 1, 2, 2},
    {"lenet_conv2_n2", 2, 32, 14, 14, 64, 5, 5, 1, 1, 2, 2},
};

ConvArgs args_for(const Shape& s, ConvPass pass) {
  ConvArgs a;
  a.pass = pass;
  a.N = s.N, a.C = s.C, a.H = s.H, a.W = s.W, a.K = s.K, a.R = s.R, a.S = s.S;
  a.stride_h = s.sh, a.stride_w = s.sw, a.pad_h = s.ph, a.pad_w = s.pw;
  return a;
}

// The float64 CPU reference of one pass on the given operands.
std::vector<double> reference(ConvArgs a, const std::vector<double>& in1, const std::vector<double>& in2) {
  a.device = DeviceType::cpu;
  a.in_type = a.out_type = DType::f64;
  std::vector<double> out(static_cast<size_t>(a.out_numel()));
  switch (a.pass) {
    case ConvPass::forward: a.x = in1.data(), a.w = in2.data(), a.y = out.data(); break;
    case ConvPass::backward_data: a.dy = in1.data(), a.w = in2.data(), a.dx = out.data(); break;
    case ConvPass::backward_weight: a.x = in1.data(), a.dy = in2.data(), a.dw = out.data(); break;
  }
  kernels::conv2d(a, "reference");
  return out;
}

// How the loaders find a tap: as rung 3b (read from the tap table), as rung 3 (offsets computed in the
// loop, forward and stride-1 backward_data), or decomposed and divided by the stride (backward_data
// with a stride above 1, both rungs).
enum class Taps { table, offsets, strided };

// conv_implicit_gemm_kernel, one block at a time: src is x (forward) or dy (backward_data), w the
// weights. Returns the output and counts the writes per element.
template <bool kBackwardData, Taps kTaps>
std::vector<double> emulate(const ConvArgs& a, const std::vector<double>& src, const std::vector<double>& w,
                            std::vector<int>& writes) {
  static_assert(kTaps != Taps::strided || kBackwardData, "only backward_data divides by the stride");
  const ig::Geometry g = ig::make_geometry(a);
  // conv_tap_table_kernel: one entry per reduction index.
  std::vector<ig::TapEntry> taps;
  for (int kk = 0; kk < g.kred; ++kk) taps.push_back(ig::make_tap_entry<kBackwardData>(g, kk));
  const auto tap = [&](int kk) { return kk < g.kred ? taps.at(static_cast<size_t>(kk)) : ig::TapEntry{0, 0, 0, 0}; };
  std::vector<double> out(static_cast<size_t>(a.out_numel()), std::numeric_limits<double>::quiet_NaN());
  writes.assign(out.size(), 0);
  std::vector<double> As(ig::kBM * ig::kLdA), Bs(ig::kBK * ig::kLdB), acc(ig::kBM * ig::kBN);
  const int64_t col_tiles = (g.cols + ig::kBN - 1) / ig::kBN, row_tiles = (g.M + ig::kBM - 1) / ig::kBM;
  for (int64_t by = 0; by < row_tiles; ++by) {
    for (int64_t bx = 0; bx < col_tiles; ++bx) {
      const int m0 = static_cast<int>(by * ig::kBM);
      const int64_t n0 = bx * ig::kBN;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int k0 = 0; k0 < g.kred; k0 += ig::kBK) {
        std::fill(As.begin(), As.end(), std::numeric_limits<double>::quiet_NaN());  // unfilled slots show
        std::fill(Bs.begin(), Bs.end(), std::numeric_limits<double>::quiet_NaN());
        for (int tid = 0; tid < ig::kThreads; ++tid) {
          const int warp = tid / 32, lane = tid % 32;
          ig::Column cols[4];
          for (int j = 0; j < 4; ++j) cols[j] = ig::make_column<kBackwardData>(g, n0 + lane + 32 * j);
          // The A index of reduction index kk and row m, and the B index of kk and column j, as the
          // kernel's loaders compute them in this mode: through the tap's offsets (read from the table,
          // a TapEntry, or computed, a TapOffsets<int64_t>), or through the decomposed tap.
          const auto through_offsets = [&](int kk, const auto& index) -> int64_t {
            if constexpr (kTaps == Taps::table) return index(tap(kk));
            return index(kk < g.kred ? ig::make_tap_offsets<kBackwardData>(g, kk) : ig::TapOffsets<int64_t>{0, 0, 0, 0});
          };
          const auto a_index = [&](int kk, int m) -> int64_t {
            if constexpr (kTaps == Taps::strided) return ig::weight_index(g, m, ig::make_tap(g, kk));
            return through_offsets(kk, [&](const auto& t) { return ig::offset_weight_index(g, m, t, kk < g.kred); });
          };
          const auto b_index = [&](int kk, const ig::Column& col) -> int64_t {
            if constexpr (kTaps == Taps::strided) return ig::strided_gather_index(g, col, ig::make_tap(g, kk));
            return through_offsets(kk, [&](const auto& t) { return ig::offset_gather_index(g, col, t, kk < g.kred); });
          };
          // A reduction index past the end reads nothing from either operand: a zero from one side
          // would not do, since 0 times an Inf or NaN read from the other is NaN.
          for (int i = 0; i < 8; ++i) {
            const int64_t idx = a_index(k0 + lane, m0 + warp + 8 * i);
            if (k0 + lane >= g.kred) {
              EXPECT_EQ(idx, -1) << "A read past the reduction";
            }
            As[(warp + 8 * i) * ig::kLdA + lane] = idx >= 0 ? w.at(static_cast<size_t>(idx)) : 0.0;
          }
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) {
              const int64_t idx = b_index(k0 + warp + 8 * i, cols[j]);
              if (k0 + warp + 8 * i >= g.kred) {
                EXPECT_EQ(idx, -1) << "B read past the reduction";
              }
              Bs[(warp + 8 * i) * ig::kLdB + lane + 32 * j] = idx >= 0 ? src.at(static_cast<size_t>(idx)) : 0.0;
            }
          }
        }
        for (int mi = 0; mi < ig::kBM; ++mi)
          for (int ni = 0; ni < ig::kBN; ++ni)
            for (int kk = 0; kk < ig::kBK; ++kk) acc[mi * ig::kBN + ni] += As[mi * ig::kLdA + kk] * Bs[kk * ig::kLdB + ni];
      }
      // The epilogue: thread t keeps column t % kBN, rows t / kBN + kThreads / kBN * i.
      for (int tid = 0; tid < ig::kThreads; ++tid) {
        const int ni = tid % ig::kBN;
        const int64_t col_out = ig::output_column(g, n0 + ni);
        for (int mi = tid / ig::kBN; mi < ig::kBM && col_out >= 0; mi += ig::kThreads / ig::kBN) {
          const int m = m0 + mi;
          if (m >= g.M) break;
          const int64_t idx = col_out + static_cast<int64_t>(m) * g.col_hw;
          EXPECT_EQ(idx, ig::output_index(g, m, n0 + ni));
          out.at(static_cast<size_t>(idx)) = acc[mi * ig::kBN + ni];
          ++writes[static_cast<size_t>(idx)];
        }
      }
    }
  }
  return out;
}

// conv_implicit_gemm_wgrad_kernel over `splits` slices, then the slice reduction.
std::vector<double> emulate_wgrad(const ConvArgs& a, const std::vector<double>& x, const std::vector<double>& dy,
                                  int64_t splits, std::vector<int>& writes) {
  const int64_t npq = a.N * a.P() * a.Q();
  const kernels::SplitCut cut = kernels::cut_reduction(npq, splits, ig::kBK);  // as run_wgrad cuts it
  splits = cut.splits;
  const ig::WGeometry g = ig::make_wgeometry(a, cut.slice);
  const int64_t n = a.K * a.C * a.R * a.S;
  std::vector<double> partial(static_cast<size_t>(splits * n), std::numeric_limits<double>::quiet_NaN());
  std::vector<int> slice_writes(partial.size(), 0);
  std::vector<double> As(ig::kBM * ig::kLdA), Bs(ig::kBN * ig::kLdBt), acc(ig::kBM * ig::kBN);
  for (int64_t z = 0; z < splits; ++z) {
    for (int by = 0; by < (g.K + ig::kBM - 1) / ig::kBM; ++by) {
      for (int bx = 0; bx < (g.crs + ig::kBN - 1) / ig::kBN; ++bx) {
        const int m0 = by * ig::kBM, n0 = bx * ig::kBN;
        const int64_t j_begin = z * g.split, j_end = std::min(j_begin + g.split, g.npq);
        EXPECT_LT(j_begin, j_end) << "empty slice " << z;
        ig::WCol colinfo[ig::kBN];
        for (int t = 0; t < ig::kBN; ++t) colinfo[t] = ig::make_wcol(g, n0 + t);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t k0 = j_begin; k0 < j_end; k0 += ig::kBK) {
          std::fill(As.begin(), As.end(), std::numeric_limits<double>::quiet_NaN());
          std::fill(Bs.begin(), Bs.end(), std::numeric_limits<double>::quiet_NaN());
          for (int tid = 0; tid < ig::kThreads; ++tid) {
            const int warp = tid / 32, lane = tid % 32;
            const ig::WRow row = ig::make_wrow(g, k0 + lane, j_end);
            // A position past the slice reads nothing from either operand (0 times an Inf is NaN).
            for (int i = 0; i < 8; ++i) {
              const int64_t idx = ig::wgrad_dy_index(g, row, m0 + warp + 8 * i);
              if (!row.ok) {
                EXPECT_EQ(idx, -1) << "dy read past the slice";
              }
              As[(warp + 8 * i) * ig::kLdA + lane] = idx >= 0 ? dy.at(static_cast<size_t>(idx)) : 0.0;
            }
            for (int i = 0; i < 16; ++i) {
              const int64_t idx = ig::wgrad_x_index(g, row, colinfo[warp + 8 * i]);
              if (!row.ok) {
                EXPECT_EQ(idx, -1) << "x read past the slice";
              }
              Bs[(warp + 8 * i) * ig::kLdBt + lane] = idx >= 0 ? x.at(static_cast<size_t>(idx)) : 0.0;  // column-major
            }
          }
          for (int mi = 0; mi < ig::kBM; ++mi)
            for (int ni = 0; ni < ig::kBN; ++ni)
              for (int kk = 0; kk < ig::kBK; ++kk)
                acc[mi * ig::kBN + ni] += As[mi * ig::kLdA + kk] * Bs[ni * ig::kLdBt + kk];
        }
        for (int e = 0; e < ig::kBM * ig::kBN; ++e) {
          const int m = m0 + e / ig::kBN, c = n0 + e % ig::kBN;
          if (m >= g.K || c >= g.crs) continue;
          const size_t i = static_cast<size_t>(z * n + static_cast<int64_t>(m) * g.crs + c);
          partial.at(i) = acc[e];
          ++slice_writes[i];
        }
      }
    }
  }
  // Every slice writes every element of its partial tile once; the reduction then covers dw.
  writes.assign(static_cast<size_t>(n), 0);
  std::vector<double> dw(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t z = 0; z < splits; ++z) {
      dw[static_cast<size_t>(i)] += partial[static_cast<size_t>(z * n + i)];
      writes[static_cast<size_t>(i)] += slice_writes[static_cast<size_t>(z * n + i)] == 1 ? 0 : 1000;
    }
    writes[static_cast<size_t>(i)] += 1;
  }
  return dw;
}

// |out - ref| <= 1e-12 * (sum of |terms|): float64 sums in two different orders.
void expect_match(const std::vector<double>& out, const std::vector<double>& ref, const std::vector<double>& absref,
                  const std::vector<int>& writes, const std::string& what) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool ok = writes[i] == 1 && std::fabs(out[i] - ref[i]) <= 1e-12 * absref[i] + 1e-300;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << out[i] << " want " << ref[i] << " (written " << writes[i]
                    << " times)";
  }
  EXPECT_EQ(bad, 0u) << what;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

TEST(ConvImplicitIndex, ForwardAndBackwardDataTilesMatchTheReference) {
  uint64_t seed = test::fresh_seed();
  for (const Shape& s : kShapes) {
    ConvArgs a = args_for(s, ConvPass::forward);
    const auto x = test::random_values(static_cast<size_t>(a.N * a.C * a.H * a.W), seed += 3, -1.0, 1.0, DType::f64);
    const auto w = test::random_values(static_cast<size_t>(a.K * a.C * a.R * a.S), seed += 3, -1.0, 1.0, DType::f64);
    const auto dy = test::random_values(static_cast<size_t>(a.N * a.K * a.P() * a.Q()), seed += 3, -1.0, 1.0, DType::f64);
    std::vector<int> writes;

    const auto y_ref = reference(a, x, w), y_abs = reference(a, abs_of(x), abs_of(w));
    const auto y = emulate<false, Taps::table>(a, x, w, writes);  // rung 3b
    expect_match(y, y_ref, y_abs, writes, std::string("forward, tap table ") + s.name);
    const auto y3 = emulate<false, Taps::offsets>(a, x, w, writes);  // rung 3
    expect_match(y3, y_ref, y_abs, writes, std::string("forward, offsets in the loop ") + s.name);

    a.pass = ConvPass::backward_data;
    const auto dx_ref = reference(a, dy, w), dx_abs = reference(a, abs_of(dy), abs_of(w));
    // Every stride through the strided path (run() takes it for strides above 1; it is right for 1 too).
    const auto dx = emulate<true, Taps::strided>(a, dy, w, writes);
    expect_match(dx, dx_ref, dx_abs, writes, std::string("backward_data, strided path ") + s.name);
    if (s.sh == 1 && s.sw == 1) {  // the kernels' stride-1 instantiations (run() picks them for these)
      const auto dx1 = emulate<true, Taps::table>(a, dy, w, writes);
      expect_match(dx1, dx_ref, dx_abs, writes, std::string("backward_data, stride 1, tap table ") + s.name);
      const auto dx2 = emulate<true, Taps::offsets>(a, dy, w, writes);
      expect_match(dx2, dx_ref, dx_abs, writes, std::string("backward_data, stride 1, offsets in the loop ") + s.name);
    }
  }
}

// Where the epilogue writes, at the GEMM's edges: the last row and column are written, a row or a column
// one past them is -1 (the kernels test for it), whichever of the two is past.
TEST(ConvImplicitIndex, OutputIndexAtTheEdgesOfTheGemm) {
  for (const ConvPass pass : {ConvPass::forward, ConvPass::backward_data}) {
    const ig::Geometry g = ig::make_geometry(args_for(kShapes[6], pass));  // 2 images: 5 x 8 out, 9 x 8 back
    const int64_t last = g.cols - 1;
    EXPECT_EQ(ig::output_column(g, g.cols), -1);
    EXPECT_EQ(ig::output_column(g, g.cols + ig::kBN - 1), -1);  // the last tile's padding
    EXPECT_EQ(ig::output_column(g, last), g.out_img + (last - g.col_hw));  // image 1's last position
    EXPECT_EQ(ig::output_index(g, g.M - 1, last), g.out_img + (last - g.col_hw) + (g.M - 1) * int64_t{g.col_hw});
    EXPECT_EQ(ig::output_index(g, g.M, 0), -1);
    EXPECT_EQ(ig::output_index(g, 0, g.cols), -1);
    // A row other than 0 too: there output_column's -1 plus the row's offset would not be -1.
    EXPECT_EQ(ig::output_index(g, g.M - 1, g.cols), -1);
    EXPECT_EQ(ig::output_index(g, g.M, g.cols), -1);
    EXPECT_EQ(ig::output_index(g, 0, 0), 0);
  }
}

// tap_table_fits at its limit, 2^31 - 1, both ways. backward_data: only the taps' reach, (R - 1) rows of
// the width and (S - 1) columns; forward: also the planes before the last, (C - 1) x H x W.
TEST(ConvImplicitIndex, TapTableFitsUpToTwoToTheThirtyOneMinusOne) {
  const int64_t w = int64_t{1} << 30;
  EXPECT_TRUE(ig::tap_table_fits(1000, 1, w, 2, w, true));  // 2^30 + 2^30 - 1
  EXPECT_FALSE(ig::tap_table_fits(1000, 1, w, 2, w + 1, true));
  EXPECT_TRUE(ig::tap_table_fits(1, 7, 5, 3, 3, true));
  // Forward: 2 x 1024 x 1024 + 2095103 x 1024 + 1023 = 2^31 - 1.
  EXPECT_TRUE(ig::tap_table_fits(3, 1024, 1024, 2095104, 1024, false));
  EXPECT_FALSE(ig::tap_table_fits(3, 1024, 1024, 2095104, 1025, false));
  EXPECT_FALSE(ig::tap_table_fits(4, 1024, 1024, 2095104, 1024, false));
  // The same reach backward fits with room to spare: the planes do not count there.
  EXPECT_TRUE(ig::tap_table_fits(4, 1024, 1024, 2095104, 1024, true));
}

// The shared memory of implicit_gemm_wmma.cu's blocks, from the header's constants: the forward and
// backward_data kernel's A tile ([kBM][kLdA] halves) then B tile ([kBK][kLdB]), and after the K loop the
// FP32 staging tile ([kBM][kLdC]) over both; the weight-gradient kernel's A tile then a column-major B tile
// ([kBN][kLdBt]). Each padded row is one 16-byte vector longer than its data: whole vectors for the
// 16-byte copies and WMMA's leading dimension, and consecutive rows 4 banks apart. Both kernels declare the
// array statically, which CUDA caps at 48 KiB. Only a GPU run (or none: a padding that is merely slower)
// would otherwise see these sizes wrong.
TEST(ConvImplicitIndex, SharedMemoryHoldsTheTilesAndTheStagingTile) {
  EXPECT_EQ(ig::kBM * ig::kBN, ig::kThreads * 32) << "8 warps of 32 x 32: 2 x 2 WMMA tiles each";
  test::expect_smem_holds({.stages = 1, .a_rows = ig::kBM, .a_cols = ig::kBK, .a_ld = ig::kLdA,
                           .b_rows = ig::kBK, .b_cols = ig::kBN, .b_ld = ig::kLdB, .c_rows = ig::kBM,
                           .c_cols = ig::kBN, .c_ld = ig::kLdC, .stage_elems = ig::kTileBytes / 2,
                           .ring_bytes = ig::kTileBytes, .c_bytes = ig::kCBytes, .smem_bytes = ig::kSmemBytes});
  EXPECT_EQ(ig::kTileBytes % 2, 0);
  EXPECT_EQ(ig::kLdA - ig::kBK, 8) << "one 16-byte vector of halves of padding";
  EXPECT_EQ(ig::kLdB - ig::kBN, 8);
  EXPECT_EQ(ig::kLdC - ig::kBN, 4) << "one 16-byte vector of floats";
  EXPECT_EQ(ig::kLdBt - ig::kBK, 8);
  EXPECT_LE(ig::kSmemBytes, 48 * 1024) << "static shared memory";
  const int wgrad_tiles = (ig::kBM * ig::kLdA + ig::kBN * ig::kLdBt) * 2;  // as the weight-gradient kernel has it
  EXPECT_LE(std::max(wgrad_tiles, ig::kCBytes), 48 * 1024);
}

TEST(ConvImplicitIndex, BackwardWeightSlicesMatchTheReference) {
  uint64_t seed = test::fresh_seed();
  for (const Shape& s : kShapes) {
    ConvArgs a = args_for(s, ConvPass::backward_weight);
    const auto x = test::random_values(static_cast<size_t>(a.N * a.C * a.H * a.W), seed += 3, -1.0, 1.0, DType::f64);
    const auto dy = test::random_values(static_cast<size_t>(a.N * a.K * a.P() * a.Q()), seed += 3, -1.0, 1.0, DType::f64);
    const auto ref = reference(a, x, dy), absref = reference(a, abs_of(x), abs_of(dy));
    // One slice, and as many as the reduction allows in K steps of 32 (the last one short).
    const int64_t npq = a.N * a.P() * a.Q();
    for (int64_t splits : {int64_t{1}, std::max<int64_t>(1, npq / 40)}) {
      std::vector<int> writes;
      const auto dw = emulate_wgrad(a, x, dy, splits, writes);
      expect_match(dw, ref, absref, writes, std::string("backward_weight ") + s.name + " in " + std::to_string(splits) +
                                                " slices");
    }
  }
}

}  // namespace
}  // namespace hl
