// The lean copy of the `wmma_pipelined` sweep tiles (kernels/cuda/gemm/copy_plan.h), played through on
// the CPU, so that its arithmetic is exercised on every build, with or without a GPU.
//
// The kernel gives each thread a Plan per operand before the K loop, and at each full K step of a
// block that lies inside both matrices issues one 16-byte copy per vector, from src_of(i) to dst_of(i),
// then advances the plan. Here every thread of a block does the same for every full K step of every
// lean tile of wmma_pipelined_tiles.h, in all four layouts, on matrices of fresh random sizes and
// leading dimensions, from blocks anywhere inside them. Each step's tile must equal the matrix's
// block (the values are their own positions, so a wrong one says where it came from), every slot of
// the tile must be written exactly once, the padding never, and every copy must start on a 16-byte
// boundary and lie within one row of the matrix. What this cannot check is the kernel's choice
// between this copy and the general one (blocks on an edge, a partial last step, misaligned
// matrices), the cp.async ring and the barriers: tests/kernels/test_gemm_cuda.cpp does that on a GPU
// (CudaGemm.WmmaPipelinedEveryTile*, with shapes where every one of those cases occurs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/gemm/copy_plan.h"
#include "kernels/cuda/gemm/mma_sync_lanes.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "kernels/cuda/gemm/wmma_smem_k_step.h"
#include "tests/test_util.h"

namespace hl {
namespace {

namespace cp = kernels::cuda::copy_plan;
namespace tiles = kernels::wmma_pipelined;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kPad = 8;  // wmma_tile.cuh's row padding (its SmemOperand: kLd = kCols + 8)

// One operand of one layout: its tile as stored in shared memory (as wmma_tile.cuh's SmemOperand
// stores it: [X][BK + 8] when K is contiguous in the matrix, else [BK][X + 8]) and the block's extent
// X along M (for A) or N (for B).
template <int X, int BK, int kThreads, bool kKContiguous>
using ShapeOf = cp::Shape<kKContiguous ? X : BK, kKContiguous ? BK : X, (kKContiguous ? BK : X) + kPad, kThreads>;

// A stored row-major matrix whose every element holds its own offset, and NaN in the columns
// between `cols` and `ld` (a copy that reads them poisons its tile).
struct Stored {
  int64_t rows, cols, ld;
  std::vector<double> v;
  Stored(int64_t r, int64_t c, int64_t l) : rows(r), cols(c), ld(l), v(static_cast<size_t>(r * l), kNaN) {
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) v[static_cast<size_t>(i * l + j)] = static_cast<double>(i * l + j);
  }
};

// Plays one block's copies of one operand through every full K step of a matrix `x_len` long along M
// (or N) and `k_len` along K; x0 is the block's origin along M (or N), inside the matrix. Returns the
// findings as readable lines (empty: none).
template <class S, bool kKContiguous>
std::vector<std::string> play_block(int64_t x_len, int64_t k_len, int64_t ld, int64_t x0) {
  std::vector<std::string> bad;
  const auto note = [&](const std::string& s) {
    if (bad.size() < 10) bad.push_back(s);
  };
  // Stored: K along the rows when K is contiguous (rows = M or N), else down the columns (rows = K).
  const Stored m(kKContiguous ? x_len : k_len, kKContiguous ? k_len : x_len, ld);
  const int64_t r0 = kKContiguous ? x0 : 0, c0 = kKContiguous ? 0 : x0;
  const int64_t steps = k_len / (kKContiguous ? S::kCols : S::kRows);  // the full ones

  std::vector<cp::Plan<S>> plans;
  for (int t = 0; t < S::kThreads; ++t) plans.emplace_back(t, ld, r0, c0, kKContiguous);

  for (int64_t step = 0; step < steps; ++step) {
    std::vector<double> tile(static_cast<size_t>(S::kRows) * S::kLd, kNaN);
    std::vector<int> writes(tile.size(), 0);
    for (int t = 0; t < S::kThreads; ++t) {
      cp::Plan<S>& p = plans[static_cast<size_t>(t)];
      for (int i = 0; i < S::kPerThread; ++i) {
        const int dst = p.dst_of(i);
        const int64_t src = p.src_of(i);
        std::ostringstream who;
        who << "step " << step << " thread " << t << " vector " << i << " (dst " << dst << ", src " << src << ")";
        if (dst < 0 || dst % 8 != 0 || dst + 8 > static_cast<int64_t>(tile.size()) || dst % S::kLd + 8 > S::kCols) {
          note(who.str() + ": the destination is not 8 halves of one tile row, 16-byte aligned");
          continue;
        }
        if (src < 0 || src % 8 != 0 || src / ld >= m.rows || src % ld + 8 > m.cols) {
          note(who.str() + ": the source is not 8 halves of one matrix row, 16-byte aligned");
          continue;
        }
        for (int e = 0; e < 8; ++e) {
          tile[static_cast<size_t>(dst + e)] = m.v[static_cast<size_t>(src + e)];
          ++writes[static_cast<size_t>(dst + e)];
        }
      }
      p.advance();
    }
    // The block of the matrix this step covers: stored rows r0 + (K-strided: step * kRows) + r,
    // columns c0 + (K-contiguous: step * kCols) + c.
    const int64_t sr = r0 + (kKContiguous ? 0 : step * S::kRows), sc = c0 + (kKContiguous ? step * S::kCols : 0);
    for (int r = 0; r < S::kRows; ++r) {
      for (int c = 0; c < S::kLd; ++c) {
        const size_t slot = static_cast<size_t>(r) * S::kLd + c;
        std::ostringstream where;
        where << "step " << step << " tile row " << r << " column " << c;
        if (c >= S::kCols) {
          if (writes[slot] != 0) note(where.str() + ": padding written");
          continue;
        }
        const double want = static_cast<double>((sr + r) * ld + sc + c);
        if (writes[slot] != 1) note(where.str() + ": written " + std::to_string(writes[slot]) + " times");
        if (!(tile[slot] == want))
          note(where.str() + ": holds element " + std::to_string(tile[slot]) + ", wants " + std::to_string(want));
      }
    }
  }
  return bad;
}

// Both operands of one layout of one tile, on `cases` random problems (sizes, leading dimensions and
// block origins inside them) from `rng`.
template <int BM, int BN, int BK, int kThreads, bool kAContiguous, bool kBContiguous>
void play_layout(std::mt19937_64& rng, int cases, const std::string& label) {
  using SA = ShapeOf<BM, BK, kThreads, kAContiguous>;
  using SB = ShapeOf<BN, BK, kThreads, kBContiguous>;
  std::uniform_int_distribution<int64_t> blocks(1, 4), k_steps(1, 5), extra(0, 40), pad8(0, 3);
  for (int c = 0; c < cases; ++c) {
    // M and N: whole blocks and a ragged edge (the kernel's edge blocks use the general copy, but the
    // matrix around a block inside it may be any size); K: full steps and a partial one.
    const int64_t m = blocks(rng) * BM + extra(rng), n = blocks(rng) * BN + extra(rng), k = k_steps(rng) * BK + extra(rng);
    const int64_t m0 = std::uniform_int_distribution<int64_t>(0, m / BM - 1)(rng) * BM;
    const int64_t n0 = std::uniform_int_distribution<int64_t>(0, n / BN - 1)(rng) * BN;
    // Leading dimensions: the stored row length rounded up to a multiple of 8 (vector_aligned), plus 0
    // to 24 more halves.
    const auto ld_for = [&](int64_t cols) { return (cols + 7) / 8 * 8 + 8 * pad8(rng); };
    const int64_t lda = ld_for(kAContiguous ? k : m), ldb = ld_for(kBContiguous ? k : n);
    std::ostringstream what;
    what << label << ", M " << m << " N " << n << " K " << k << ", lda " << lda << " ldb " << ldb << ", block at m0 "
         << m0 << " n0 " << n0;
    for (const std::string& s : play_block<SA, kAContiguous>(m, k, lda, m0)) ADD_FAILURE() << what.str() << ", A: " << s;
    for (const std::string& s : play_block<SB, kBContiguous>(n, k, ldb, n0)) ADD_FAILURE() << what.str() << ", B: " << s;
  }
}

// Every layout of a BM x BN x BK block of kThreads threads (A with op N is K-contiguous, B with op T is).
template <int BM, int BN, int BK, int kThreads>
void play_every_layout(std::mt19937_64& rng, int cases, const std::string& label) {
  play_layout<BM, BN, BK, kThreads, true, false>(rng, cases, label + ", op N,N");
  play_layout<BM, BN, BK, kThreads, true, true>(rng, cases, label + ", op N,T");
  play_layout<BM, BN, BK, kThreads, false, false>(rng, cases, label + ", op T,N");
  play_layout<BM, BN, BK, kThreads, false, true>(rng, cases, label + ", op T,T");
}

template <int I>
void play_tile(std::mt19937_64& rng, int cases) {
  constexpr tiles::Tile t = tiles::kBigTiles[I];
  play_every_layout<t.bm, t.bn, t.bk, 32 * t.warps_m * t.warps_n>(
      rng, cases, "tile #" + std::to_string(I) + " (" + tiles::describe(t) + ")");
}

// Tile I if it uses the lean copy (1: played), else nothing (0): the other tiles never build a plan,
// and some of their shapes would not divide into equal shares, which Shape refuses at compile time.
template <int I>
int play_if_lean(std::mt19937_64& rng, int cases) {
  if constexpr (tiles::kBigTiles[I].lean) {
    play_tile<I>(rng, cases);
    return 1;
  } else {
    return 0;
  }
}

template <int... I>
int play_lean_tiles(std::mt19937_64& rng, int cases, std::integer_sequence<int, I...>) {
  return (play_if_lean<I>(rng, cases) + ...);
}

TEST(CopyPlan, EveryLeanTileCopiesEveryFullStepOfABlockInside) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  const int played = play_lean_tiles(rng, 6, std::make_integer_sequence<int, tiles::kBigTileCount>{});
  EXPECT_GE(played, 1) << "no tile of wmma_pipelined_tiles.h uses the lean copy: this test checks nothing";
}

TEST(CopyPlan, WmmaSmemBatchedCopyCopiesEveryFullStepOfABlockInside) {
  // wmma_smem's batched copy: its 128 x 128 block of 8 warps (wmma_smem.cu) with each K step of
  // wmma_smem_k_step.h, every layout.
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  static_assert(sizeof(kernels::wmma_smem::kCandidateKSteps) / sizeof(int) == 2 &&
                    kernels::wmma_smem::kCandidateKSteps[0] == 32 && kernels::wmma_smem::kCandidateKSteps[1] == 64,
                "play each K step of wmma_smem_k_step.h below");
  play_every_layout<128, 128, 32, 256>(rng, 6, "wmma_smem, K step 32");
  play_every_layout<128, 128, 64, 256>(rng, 6, "wmma_smem, K step 64");
}

TEST(CopyPlan, MmaSyncLeanCopyCopiesEveryFullStepOfABlockInside) {
  // mma_sync's block: 128 x 128 x 32, 4 warps (mma_sync_lanes.h), every layout.
  namespace ml = kernels::cuda::mma_lanes;
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  play_every_layout<ml::kBM, ml::kBN, ml::kBK, ml::kThreads>(rng, 6, "mma_sync");
}

TEST(CopyPlan, SharesAreEqualAndSpacedAsDocumented) {
  // Entry 0's A tile with op N: 128 rows of 32 halves (4 vectors a row), 256 threads: each thread
  // copies 2 vectors, 64 rows apart; thread 5 starts at row 1, column 8.
  using S = cp::Shape<128, 32, 40, 256>;
  static_assert(S::kPerThread == 2 && S::kRowStep == 64);
  const cp::Plan<S> p(5, /*ld=*/1000, /*r0=*/256, /*c0=*/0, /*k_contiguous=*/true);
  EXPECT_EQ(p.dst_of(0), 1 * 40 + 8);
  EXPECT_EQ(p.dst_of(1), 65 * 40 + 8);
  EXPECT_EQ(p.src_of(0), 257 * 1000 + 8);
  EXPECT_EQ(p.src_of(1), (257 + 64) * 1000 + 8);
  EXPECT_EQ(p.k_step, 32);  // K runs along the row: the next step is 32 columns right
  // Its B tile with op N: 32 rows (K) of 128 halves (16 vectors a row): 2 vectors per thread, 16 rows
  // apart; thread 5 starts at row 0, column 40.
  using SB = cp::Shape<32, 128, 136, 256>;
  static_assert(SB::kPerThread == 2 && SB::kRowStep == 16);
  const cp::Plan<SB> q(5, 1000, /*r0=*/0, /*c0=*/256, /*k_contiguous=*/false);
  EXPECT_EQ(q.dst_of(1), 16 * 136 + 40);
  EXPECT_EQ(q.src_of(1), 16 * 1000 + 256 + 40);
  EXPECT_EQ(q.k_step, 32 * 1000);  // K runs down the columns: the next step is 32 rows down
}

// The hooks through which the GPU tests and `bench/gemm_bench --sweep` run both copies of wmma_smem and
// of mma_sync, and wmma_smem's other K step: each forces what it is asked to for one scope, also nested,
// and gives the rung's own choice back after it. Both copies give the same product, so a hook that
// forced the wrong copy would pass every GPU test, which would then check one copy twice.
TEST(CopyPlan, TheCopyHooksForceEitherCopyForOneScope) {
  namespace ws = kernels::wmma_smem;
  namespace ms = kernels::mma_sync;
  using kernels::chosen_by_hook;
  ASSERT_LT(ws::batched_copy_for_tuning().load(), 0) << "the rung's own copy unless a scope forces one";
  ASSERT_LT(ms::lean_copy_for_tuning().load(), 0);
  ASSERT_EQ(ws::k_step_for_tuning().load(), 0) << "the rung's own K step unless a scope forces one";
  for (const bool own : {false, true}) {
    EXPECT_EQ(chosen_by_hook(ws::batched_copy_for_tuning(), own), own);
    EXPECT_EQ(chosen_by_hook(ms::lean_copy_for_tuning(), own), own);
  }
  {
    const ws::ScopedBatchedCopy batched;  // the batched copy unless told otherwise
    const ms::ScopedLeanCopy lean;
    EXPECT_TRUE(chosen_by_hook(ws::batched_copy_for_tuning(), false));
    EXPECT_TRUE(chosen_by_hook(ms::lean_copy_for_tuning(), false));
    {
      const ws::ScopedBatchedCopy general(false);
      const ms::ScopedLeanCopy general_too(false);
      EXPECT_FALSE(chosen_by_hook(ws::batched_copy_for_tuning(), true));
      EXPECT_FALSE(chosen_by_hook(ms::lean_copy_for_tuning(), true));
    }
    EXPECT_TRUE(chosen_by_hook(ws::batched_copy_for_tuning(), false));
    EXPECT_TRUE(chosen_by_hook(ms::lean_copy_for_tuning(), false));
    const ws::ScopedBatchedCopy batched_again(true);
    const ms::ScopedLeanCopy lean_again(true);
    EXPECT_EQ(ws::batched_copy_for_tuning().load(), 1);  // the values tuning_hook.h documents
    EXPECT_EQ(ms::lean_copy_for_tuning().load(), 1);
  }
  EXPECT_LT(ws::batched_copy_for_tuning().load(), 0);
  EXPECT_LT(ms::lean_copy_for_tuning().load(), 0);
  {
    const ws::ScopedKStep step(32);
    EXPECT_EQ(ws::k_step_for_tuning().load(), 32);
  }
  EXPECT_EQ(ws::k_step_for_tuning().load(), 0);
}

}  // namespace
}  // namespace hl
