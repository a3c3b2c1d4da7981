// The lane arithmetic of the `mma_sync` GEMM rung (kernels/cuda/gemm/mma_sync_lanes.h), played through
// on the CPU, so that it is exercised on every build, with or without a GPU.
//
// The kernel hands ldmatrix.x4 one shared-memory row address per lane, feeds the registers it gets to
// mma.sync.m16n8k16, and stores the accumulators by their lane-to-element map. Here a whole block
// (4 warps, one K tile of 32) runs through the header's functions, with the two instructions replaced
// by models written from the PTX ISA's description of them (below, independent of the header). The
// 128 x 128 result must equal the float64 product exactly (small integers), every element must be
// written once, no lane may read the padding of a tile, every ldmatrix row must be 16-byte aligned,
// and neither ldmatrix nor the epilogue's float2 stores may hit one shared-memory bank twice in one
// pass (a conflict is not wrong, but it is the difference between this rung being fast or not). What
// this cannot check is the cp.async ring and the barriers: tests/kernels/test_gemm_cuda.cpp does that
// on a GPU, with the rest of the rung.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/cuda/gemm/mma_sync_lanes.h"

namespace hl {
namespace {

namespace ml = kernels::cuda::mma_lanes;
using ml::TilePos;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- the two instructions, from the PTX ISA ----------------------------------------------------------

// A .b32 register holding two 16-bit values, the lower-addressed (or lower-indexed) one first.
using Reg = std::array<double, 2>;
// Four registers per lane, for the 32 lanes of a warp.
using Regs4 = std::array<std::array<Reg, 4>, 32>;

// A shared-memory operand tile: `rows` rows of `cols` values, each row padded to `ld`; the padding
// holds NaN, so a lane that reads it poisons the product.
struct Smem {
  ml::StoredTile shape;
  std::vector<double> v;
  explicit Smem(ml::StoredTile s) : shape(s), v(static_cast<size_t>(s.rows) * s.ld, kNaN) {}
};

// What the simulation found wrong, as readable lines (empty: nothing).
struct Findings {
  std::vector<std::string> lines;
  void add(const std::string& s) {
    if (lines.size() < 20) lines.push_back(s);
    ++count;
  }
  int count = 0;
};

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: lanes 8j .. 8j + 7 give the addresses of rows 0..7
// of 8 x 8 matrix j, each row 8 consecutive 16-bit values (16 bytes, 16-byte aligned). Register j of
// lane l receives two values of matrix j: without .trans row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1;
// with .trans column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1. One matrix (8 rows of 16 bytes, 128
// bytes) is one pass through the 32 four-byte banks: conflict-free when its 8 rows start in 8
// different 16-byte bank groups.
Regs4 ldmatrix_x4(const Smem& s, const std::array<TilePos, 32>& addr, bool trans, Findings& f, const std::string& what) {
  std::array<std::array<std::array<double, 8>, 8>, 4> mat{};
  for (int j = 0; j < 4; ++j) {
    std::set<int> groups;
    for (int r = 0; r < 8; ++r) {
      const TilePos p = addr[8 * j + r];
      const int64_t at = static_cast<int64_t>(p.row) * s.shape.ld + p.col;
      if (p.row < 0 || p.row >= s.shape.rows || p.col < 0 || p.col + 8 > s.shape.cols) {
        f.add(what + ": lane " + std::to_string(8 * j + r) + " points at row " + std::to_string(p.row) + " column " +
              std::to_string(p.col) + ", outside the " + std::to_string(s.shape.rows) + " x " +
              std::to_string(s.shape.cols) + " tile");
        for (auto& x : mat[j][r]) x = kNaN;
        continue;
      }
      if (at % 8 != 0) f.add(what + ": lane " + std::to_string(8 * j + r) + "'s row is not 16-byte aligned");
      groups.insert(static_cast<int>((at * 2 / 16) % 8));
      for (int c = 0; c < 8; ++c) mat[j][r][c] = s.v[static_cast<size_t>(at + c)];
    }
    if (groups.size() != 8)
      f.add(what + ": matrix " + std::to_string(j) + "'s 8 rows fall in " + std::to_string(groups.size()) +
            " bank groups (a bank conflict)");
  }
  Regs4 out{};
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 2; ++e)
        out[l][j][e] = trans ? mat[j][2 * (l % 4) + e][l / 4] : mat[j][l / 4][2 * (l % 4) + e];
  return out;
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 d, a, b, c, with g = l / 4 (groupID) and
// t = l % 4 (threadID_in_group):
//   A (16 x 16): a0,a1 = A[g][2t], A[g][2t+1]; a2,a3 = A[g+8][2t..]; a4,a5 = A[g][2t+8..]; a6,a7 = A[g+8][2t+8..]
//   B (16 x 8):  b0,b1 = B[2t][g], B[2t+1][g]; b2,b3 = B[2t+8][g], B[2t+9][g]
//   C, D (16 x 8): c0,c1 = C[g][2t], C[g][2t+1]; c2,c3 = C[g+8][2t], C[g+8][2t+1]
// (a0..a7 in registers 0..3, two per register; b0..b3 in two registers.) D = A * B + C.
using Acc = std::array<std::array<double, 4>, 32>;
void mma_16816(Acc& acc, const std::array<std::array<Reg, 4>, 32>& a, const std::array<std::array<Reg, 2>, 32>& b) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = a[l][0][e];
      A[g + 8][2 * t + e] = a[l][1][e];
      A[g][2 * t + 8 + e] = a[l][2][e];
      A[g + 8][2 * t + 8 + e] = a[l][3][e];
      B[2 * t + e][g] = b[l][0][e];
      B[2 * t + 8 + e][g] = b[l][1][e];
    }
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
      double sum = 0;
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      acc[l][e] += sum;
    }
  }
}

// ---- the block, through the header's functions ---------------------------------------------------------

// The lane functions under test; a test below swaps one for a wrong formula to see the simulation fail.
struct Lanes {
  std::function<TilePos(int, int, int)> a_row, b_row;  // (m or n, kk, lane) -> the row handed to ldmatrix
};

template <bool kAK, bool kBK>
Lanes header_lanes() {
  return {ml::a_ldmatrix_row<kAK>, ml::b_ldmatrix_row<kBK>};
}

// One block tile of the kernel for one K tile: op(A) is kBM x kBK, op(B) kBK x kBN, stored as the
// kernel stores them (K contiguous or not). Returns what went wrong.
Findings run_block(bool a_k_contiguous, bool b_k_contiguous, const Lanes& lanes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-8, 8);
  std::vector<double> A(ml::kBM * ml::kBK), B(ml::kBK * ml::kBN);
  for (auto& x : A) x = value(rng);
  for (auto& x : B) x = value(rng);

  Smem sa(ml::stored_tile(a_k_contiguous, ml::kBM)), sb(ml::stored_tile(b_k_contiguous, ml::kBN));
  for (int m = 0; m < ml::kBM; ++m)
    for (int k = 0; k < ml::kBK; ++k)
      sa.v[a_k_contiguous ? m * sa.shape.ld + k : k * sa.shape.ld + m] = A[m * ml::kBK + k];
  for (int k = 0; k < ml::kBK; ++k)
    for (int n = 0; n < ml::kBN; ++n)
      sb.v[b_k_contiguous ? n * sb.shape.ld + k : k * sb.shape.ld + n] = B[k * ml::kBN + n];

  Findings f;
  std::vector<double> Cs(static_cast<size_t>(ml::kBM) * ml::kLdC, kNaN);
  std::vector<int> writes(Cs.size(), 0);
  for (int warp = 0; warp < ml::kThreads / 32; ++warp) {
    const TilePos w0 = ml::warp_origin(warp);
    std::vector<std::vector<Acc>> acc(ml::kMT, std::vector<Acc>(ml::kNT, Acc{}));
    for (int kk = 0; kk < ml::kBK; kk += 16) {
      std::vector<Regs4> a(ml::kMT), b(ml::kNT / 2);
      for (int i = 0; i < ml::kMT; ++i) {
        std::array<TilePos, 32> addr;
        for (int l = 0; l < 32; ++l) addr[l] = lanes.a_row(w0.row + 16 * i, kk, l);
        a[i] = ldmatrix_x4(sa, addr, ml::ldmatrix_trans(a_k_contiguous), f,
                           "A tile " + std::to_string(i) + " of warp " + std::to_string(warp));
      }
      for (int j = 0; j < ml::kNT / 2; ++j) {
        std::array<TilePos, 32> addr;
        for (int l = 0; l < 32; ++l) addr[l] = lanes.b_row(w0.col + 16 * j, kk, l);
        b[j] = ldmatrix_x4(sb, addr, ml::ldmatrix_trans(b_k_contiguous), f,
                           "B tiles " + std::to_string(2 * j) + "-" + std::to_string(2 * j + 1) + " of warp " +
                               std::to_string(warp));
      }
      for (int i = 0; i < ml::kMT; ++i)
        for (int j = 0; j < ml::kNT; ++j) {
          const ml::BRegs br = ml::b_regs_of_tile(j);
          std::array<std::array<Reg, 2>, 32> bj;
          for (int l = 0; l < 32; ++l) bj[l] = {b[br.pair][l][br.first], b[br.pair][l][br.first + 1]};
          mma_16816(acc[i][j], a[i], bj);
        }
    }
    // The epilogue's staging stores: pairs (0, 1) and (2, 3) as float2, 8-byte aligned, and each
    // half-warp's 16 stores (one pass of 64-bit stores) on 32 distinct banks.
    for (int i = 0; i < ml::kMT; ++i)
      for (int j = 0; j < ml::kNT; ++j)
        for (int pair = 0; pair < 4; pair += 2)
          for (int half = 0; half < 2; ++half) {
            std::set<int> banks;
            for (int l = 16 * half; l < 16 * half + 16; ++l) {
              const TilePos p = ml::accumulator_pos(l, pair), q = ml::accumulator_pos(l, pair + 1);
              if (q.row != p.row || q.col != p.col + 1) f.add("accumulators " + std::to_string(pair) + ", " +
                                                             std::to_string(pair + 1) + " are not a float2 pair");
              const int64_t at = static_cast<int64_t>(w0.row + 16 * i + p.row) * ml::kLdC + w0.col + 8 * j + p.col;
              if (at % 2 != 0) f.add("an epilogue float2 store is not 8-byte aligned");
              banks.insert(static_cast<int>(at % 32));
              banks.insert(static_cast<int>((at + 1) % 32));
              for (int e = pair; e < pair + 2; ++e) {
                const TilePos pe = ml::accumulator_pos(l, e);
                const int row = w0.row + 16 * i + pe.row, col = w0.col + 8 * j + pe.col;
                if (row < 0 || row >= ml::kBM || col < 0 || col >= ml::kBN) {
                  f.add("accumulator stored outside the block tile");
                  continue;
                }
                Cs[static_cast<size_t>(row) * ml::kLdC + col] = acc[i][j][l][e];
                ++writes[static_cast<size_t>(row) * ml::kLdC + col];
              }
            }
            if (banks.size() != 32)
              f.add("epilogue stores of a half-warp hit " + std::to_string(banks.size()) + " of 32 banks");
          }
  }

  for (int m = 0; m < ml::kBM; ++m)
    for (int n = 0; n < ml::kBN; ++n) {
      double want = 0;
      for (int k = 0; k < ml::kBK; ++k) want += A[m * ml::kBK + k] * B[k * ml::kBN + n];
      const size_t at = static_cast<size_t>(m) * ml::kLdC + n;
      if (writes[at] != 1)
        f.add("C(" + std::to_string(m) + ", " + std::to_string(n) + ") written " + std::to_string(writes[at]) + " times");
      else if (!(Cs[at] == want))
        f.add("C(" + std::to_string(m) + ", " + std::to_string(n) + ") = " + std::to_string(Cs[at]) + ", want " +
              std::to_string(want));
    }
  return f;
}

std::string report(const Findings& f) {
  std::string s = std::to_string(f.count) + " finding(s):";
  for (const auto& line : f.lines) s += "\n  " + line;
  return s;
}

TEST(MmaSyncLanes, EveryLayoutComputesTheBlockProduct) {
  // op_a N stores A with K contiguous, op_a T without; op_b T stores B with K contiguous, op_b N without.
  struct Case {
    const char* layout;
    bool a_k, b_k;
    Lanes lanes;
  };
  const Case cases[] = {{"NN", true, false, header_lanes<true, false>()},
                        {"NT", true, true, header_lanes<true, true>()},
                        {"TN", false, false, header_lanes<false, false>()},
                        {"TT", false, true, header_lanes<false, true>()}};
  for (const Case& c : cases) {
    for (uint32_t seed : {1u, 2u}) {
      const Findings f = run_block(c.a_k, c.b_k, c.lanes, seed);
      EXPECT_EQ(f.count, 0) << "layout " << c.layout << ", seed " << seed << ": " << report(f);
    }
  }
}

TEST(MmaSyncLanes, WarpsTileTheBlockAndTheTilesMatchTheKernelsStorage) {
  std::set<std::pair<int, int>> corners;
  for (int w = 0; w < ml::kThreads / 32; ++w) {
    const TilePos p = ml::warp_origin(w);
    EXPECT_TRUE(p.row >= 0 && p.row + ml::kWM <= ml::kBM && p.col >= 0 && p.col + ml::kWN <= ml::kBN) << "warp " << w;
    corners.insert({p.row, p.col});
  }
  EXPECT_EQ(corners.size(), static_cast<size_t>(ml::kWarpsM * ml::kWarpsN)) << "two warps share a tile";
  EXPECT_EQ(ml::kWarpsM * ml::kWM, ml::kBM);
  EXPECT_EQ(ml::kWarpsN * ml::kWN, ml::kBN);
  // The padded rows keep 16-byte alignment (ldmatrix, cp.async) in both storages.
  for (bool k_contiguous : {true, false})
    for (int x : {ml::kBM, ml::kBN}) EXPECT_EQ(ml::stored_tile(k_contiguous, x).ld % 8, 0);
}

// The simulation can fail: each plausible slip in a lane formula is caught, and by the check that
// names it.
TEST(MmaSyncLanes, SimulationCatchesAWrongLaneFormula) {
  // B stored [k][n] with the halves of the x4 swapped (q / 2 and q % 2 exchanged): the fragments of
  // the two n-tiles trade their K halves, a wrong product with every read in bounds.
  Lanes swapped = header_lanes<true, false>();
  swapped.b_row = [](int n, int kk, int lane) {
    const int q = lane / 8;
    return TilePos{kk + 8 * (q / 2) + lane % 8, n + 8 * (q % 2)};
  };
  const Findings wrong = run_block(true, false, swapped, 1);
  EXPECT_GT(wrong.count, 0);
  EXPECT_NE(report(wrong).find(", want "), std::string::npos) << report(wrong);

  // A stored [m][k] read 16 columns on instead of 8 for the second half-warp: past the 32 columns of
  // data into the padding.
  Lanes past = header_lanes<true, false>();
  past.a_row = [](int m, int kk, int lane) { return TilePos{m + lane % 16, kk + 16 * (lane / 16)}; };
  const Findings outside = run_block(true, false, past, 1);
  EXPECT_NE(report(outside).find("outside the"), std::string::npos) << report(outside);

  // Rows 2 apart instead of 1 (a stride slip): 16-byte aligned, in bounds for the first warp rows,
  // and two rows of each 8 x 8 matrix land in the same bank group.
  Lanes strided = header_lanes<true, false>();
  strided.a_row = [](int m, int kk, int lane) { return TilePos{(m + 2 * (lane % 16)) % ml::kBM, kk + 8 * (lane / 16)}; };
  const Findings conflict = run_block(true, false, strided, 1);
  EXPECT_NE(report(conflict).find("bank"), std::string::npos) << report(conflict);
}

}  // namespace
}  // namespace hl
