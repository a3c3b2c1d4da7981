// The block tiles of the `wmma_pipelined` GEMM rung (wmma_pipelined.cu) on sm_80+: kOwnTile (#12) for
// large problems, the others candidates, and the tuning hook through which `bench/gemm_bench --sweep` times
// each of them on every shape it measures. Plain C++ with no
// CUDA in it, so that the benchmark and the tests name the same tiles as the kernels.
//
// Why a sweep: at 4096^3 on an H200 the rung's tile (entry 0) ran at 29% of cuBLAS
// (bench/results/gemm_nvidia_h200_2026-11-23.txt) against issue #4's 50%. Its warps own 64 x 32 of C,
// so each 16-deep step loads 6 fragments from shared memory for 8 mma_syncs; a 64 x 64 warp tile loads
// 8 for 16, and a 64-deep K step halves the barriers per multiply-add. Which of these wins on a given
// GPU is a measurement, not a guess: the entries below are the candidates, each instantiated for every
// layout and checked by the tests (CudaGemm.WmmaPipelinedEveryTileTheSweepTimes) like the rung itself.
#pragma once
#include <atomic>
#include <string>

#include "kernels/tuning_hook.h"

namespace hl::kernels::wmma_pipelined {

struct Tile {
  int bm, bn, bk;        // block tile M x N, K step
  int warps_m, warps_n;  // warps per block along M and N: each owns (bm / warps_m) x (bn / warps_n) of C
  int stages;            // cp.async buffers in the shared-memory ring
  bool lean = false;     // the full K steps copied through per-thread plans made before the loop (copy_plan.h)
  // A thread-block cluster of cluster_n x cluster_m blocks (along N and M) that share their operand
  // tiles (cluster_share.h): 1 x 1, no cluster. Compute capability 9.0 or newer only.
  int cluster_m = 1, cluster_n = 1;
  // The next K step's first fragments loaded before this step's last multiply-adds, across the barrier
  // that publishes the step (wmma_pipelined.cu's kernel, point 5): no load waits right after a barrier.
  bool ahead = false;
  constexpr bool clustered() const { return cluster_m * cluster_n > 1; }
};

// Noted for each entry: registers per thread on sm_90 (ptxas -v, the same within 4 in every layout, no
// spills in any) and shared memory per block (its range over the four layouts: the padding of a tile
// depends on which dimension is contiguous). An H100/H200 SM has 64K registers and 227 KiB of shared
// memory, which sets the resident blocks per SM.
inline constexpr Tile kBigTiles[] = {
    {128, 128, 32, 2, 4, 4},  // 0: the rung's until #12; 8 warps of 64 x 32; 120 regs, 68-80 KiB: 2 blocks/SM
    {128, 128, 64, 2, 4, 3},  // 1: K step 64, half the barriers per multiply-add; 116 regs, 102-108 KiB: 2/SM
    {128, 256, 32, 2, 4, 3},  // 2: 8 warps of 64 x 64; 170 regs, 75-90 KiB: 1 block/SM
    {256, 128, 32, 4, 2, 3},  // 3: the same warps, the block tall instead of wide; 170 regs, 75-90 KiB: 1/SM
    {128, 128, 32, 2, 2, 4},  // 4: 4 warps of 64 x 64; 196 regs, 68-80 KiB: 2 blocks/SM
    {128, 256, 32, 2, 4, 4},  // 5: as 2 with one more stage in flight; 170 regs, 100-120 KiB: 1/SM
    // 6-8, added 2026-11-26 (timed on an H100 since): 16 warps of entry 0's 64 x 32 (or 32 x 64) in a block twice
    // its size. Why: at 4096^3 every tile above stayed at or below 222 TFLOP/s, and the 64 x 64 warp tiles
    // (2-5), which need fewer shared-memory loads per multiply-add, were the slowest, while each of them
    // left only 8 warps on an SM. What a block tile does change is the traffic from L2: a 128 x 128 tile
    // brings in 16 KiB per 32-deep step for 1 MFLOP (64 FLOP per byte; 222 TFLOP/s is then 3.5 TB/s of
    // L2 reads across the GPU), a 256 x 128 tile 24 KiB for 2 MFLOP (85 FLOP per byte). These keep entry
    // 0's warps and 16 of them per SM, so only the block's size, and with it the L2 traffic, moves.
    {256, 128, 32, 4, 4, 4},  // 6: 16 warps of 64 x 32; 100 regs, 100-120 KiB: 1 block/SM
    {128, 256, 32, 4, 4, 4},  // 7: 16 warps of 32 x 64; 96 regs, 100-120 KiB: 1/SM
    {256, 128, 64, 4, 4, 3},  // 8: as 6 with K step 64, half the barriers; 126 regs, 150-162 KiB: 1/SM
    // 9-11, added 2026-11-26 (timed on an H100 since): smaller blocks for issue #4's MNIST-sized shapes, where the
    // fastest rung is still beyond 2x of cuBLAS's time. LeNet conv2's forward as a GEMM (25088 x 64 x 800)
    // runs 128 x 128 blocks of which half the columns are past N = 64; its data gradient (25088 x 800 x 64)
    // gives each block only two 32-deep steps, so (the likely reading, untested) a block mostly waits,
    // for its first tile and then for its stores, and what hides waiting is more blocks per SM. The
    // sweep now times every tile on the training shapes too.
    {128, 64, 32, 4, 2, 4},  // 9: 8 warps of 32 x 32, nothing wasted at N = 64; 70 regs, 52-60 KiB: 3/SM
    {64, 64, 32, 2, 2, 3},   // 10: the rung's own small tile (4 warps of 32 x 32), forced on every shape; 70 regs, 27-30 KiB: 7/SM
    {128, 64, 32, 2, 2, 4},  // 11: 4 warps of entry 0's 64 x 32; 120 regs, 52-60 KiB: 3/SM
    // 12-14, added 2026-11-26 (timed on an H100 since): entries 0, 1 and 6 with the lean copy (copy_plan.h). Why: in
    // the sm_90 code, the general copy spends 41 instructions per 16-byte vector (index division, 64-bit
    // edge checks, three-way branch), 4 vectors per thread per K step for entry 0, so a warp issues about
    // 200 copy instructions per 32 HMMAs: if issue slots, not Tensor Cores, are what every tile above ran
    // out of, the block shape could not have moved it. Tile #12's copies of a K step are 65 instructions
    // (bench/results/sass_gemm_copy_2026-11-26.txt).
    {128, 128, 32, 2, 4, 4, true},  // 12: entry 0, lean copy
    {128, 128, 64, 2, 4, 3, true},  // 13: entry 1, lean copy
    {256, 128, 32, 4, 4, 4, true},  // 14: entry 6, lean copy
    // 15-18, added 2026-11-27 (timed on an H100 since): 8 warps of 64 x 64 in a block of twice #12's size, with the
    // lean copy. Why (docs/gpu_status.md, "Leads"): Nsight Compute found #12 bound by L2 (80% of its
    // peak, the Tensor pipe at 43%), and a 128 x 256 or 256 x 128 block reads a third less from L2 per
    // multiply-add. Entries 2, 3 and 5 are these blocks with the general copy, whose copy instructions
    // (6 vectors per thread per K step, about 40 instructions each) are what the lean copy removed from
    // #12; #14, the same blocks as 16 warps of 64 x 32, ran at 224.6 TFLOP/s, and its warps' smaller
    // tiles need more fragment loads per multiply-add than 64 x 64. 18 has a 64-deep K step, whose
    // 144-byte rows also leave the cp.async stores free of bank conflicts (a 32-deep tile's 80-byte rows
    // put two rows of a quarter-warp's stores on 4 common banks). The plans' 64-bit offsets cost
    // registers: 166-214 (more than 2, 3 and 5's 170 in three of the four layouts), no spills.
    {128, 256, 32, 2, 4, 3, true},  // 15: entry 2, lean copy; 166-210 regs, 75-90 KiB: 1 block/SM
    {256, 128, 32, 4, 2, 3, true},  // 16: entry 3, lean copy; 170-210 regs, 75-90 KiB: 1/SM
    {128, 256, 32, 2, 4, 4, true},  // 17: entry 5, lean copy; 166-208 regs, 100-120 KiB: 1/SM
    {128, 256, 64, 2, 4, 3, true},  // 18: 15 with a 64-deep K step; 170-214 regs, 150-162 KiB: 1/SM
    // 19-20, added 2026-11-28 (not yet run on a GPU): #12's block in a thread-block cluster whose blocks
    // share the operand tiles they have in common (cluster_share.h): each copies a part from L2 and sends
    // it to the peers that need it through distributed shared memory. Why: #12 looked bound by L2 (80% of
    // its peak at 4096^3 on an H100; docs/gpu_status.md's leads since question it), and #14-#18 showed that
    // bigger blocks lose more in warps per SM than they gain in L2 traffic; a cluster cuts the traffic and
    // keeps #12's block (ptxas -v on sm_90: 116-126 registers, no spills, 85-100 KiB: 2 blocks/SM, as
    // #12). 5 stages, because a block sends
    // round kt + 1 while it computes round kt, which takes one stage from the ring's depth: 5 leave #12's 3
    // rounds in flight. 19: 2 blocks along M share B (12 KiB from L2 per K step instead of 16); 20: 2 x 2
    // blocks share A and B (8 KiB). sm_90 only: refused on older GPUs.
    {128, 128, 32, 2, 4, 5, true, 2, 1},  // 19: #12, 5 stages, clusters of 2 along M sharing B
    {128, 128, 32, 2, 4, 5, true, 2, 2},  // 20: #12, 5 stages, clusters of 2 x 2 sharing A and B
    // 21-23, added 2026-11-29 (not yet run on a GPU): #12, #13 and #17 with the next K step's fragments
    // loaded ahead (wmma_pipelined.cu, point 5). Why: the H100's counters for #12 (2026-11-27) put the
    // Tensor pipe at 43% and the issue slots at 42%, with 0.78 of 3.86 warps eligible per cycle: the
    // warps wait more than they issue. Its sm_90 K loop starts every K step with the barrier, then the
    // step's 65 or so copy instructions, then the first 6 fragment loads (ldmatrix), whose results the
    // first multiply-add needs at once: the block's 8 warps leave the barrier together, and none has a
    // multiply-add to issue until its loads return. With `ahead`, the barrier comes after the
    // multiply-adds of a K tile's second-to-last 16-deep step, and the next K tile's first fragments are
    // loaded before the last step's multiply-adds, so each warp has multiply-adds to issue right after
    // both waits. The tiles and everything else are unchanged. #23 is #17's
    // block of 8 warps of 64 x 64, 1 per SM: with 2 warps per scheduler, it has the fewest other warps to
    // hide a wait behind. Its base is #17 (4 stages), not #15 (3, 6% slower on the H100), because this
    // order issues a K tile's copy later and needs it earlier: S - 1 K tiles of 16-deep steps between the
    // two become (S - 1) x BK / 16 - 2 steps, which would leave 3 stages of 32-deep tiles 2 steps (one K
    // tile) where #15 has 4; 4 stages give it #15's 4. (#21 keeps 4 of #12's 6, #22 6 of #13's 8.) One
    // fragment set is now live where #12 has none (across the copies, the barrier and the loop's back
    // edge): left to itself, ptxas gave #21 and #22 154-158 registers (one block per SM), so their kernels
    // ask for two blocks per SM
    // (Config::kMinBlocks), which holds them to 128. #22 fits with no spills; #21 spills 60-100 bytes
    // (a 40-48 byte stack frame; in its sm_90 K loop the lean copy's plans are read back from local
    // memory, 6 LDL and 4 STL per K step). Shared memory as their base tiles'.
    {128, 128, 32, 2, 4, 4, true, 1, 1, true},  // 21: #12, fragments ahead; 128 regs (spills), 68-80 KiB: 2/SM
    {128, 128, 64, 2, 4, 3, true, 1, 1, true},  // 22: #13, fragments ahead; 128 regs, 102-108 KiB: 2/SM
    {128, 256, 32, 2, 4, 4, true, 1, 1, true},  // 23: #17, fragments ahead; 233-237 regs, 100-120 KiB: 1/SM
};
inline constexpr int kBigTileCount = static_cast<int>(sizeof(kBigTiles) / sizeof(kBigTiles[0]));

// The tile the rung uses for large problems on sm_80+. Entry 0 until the H100 run of 2026-11-27
// (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt), where its lean-copy twin, #12, ran
// 274.3 TFLOP/s at 4096^3 against 213.5 (and 283.6 against 229.5 at 8192^3, 230.8 against 186.2 at
// 2048^3): the copy's instructions, not the block's shape, were what the tiles above had in common.
// #13 (the same with a 64-deep K step) was as fast within 2-6%, but needs 102-108 KiB of shared memory,
// more than the 99 KiB an sm_86/89 block may have; #12 needs entry 0's 68-80 KiB and fits every GPU.
inline constexpr int kOwnTile = 12;

// "128x256x32, 2x4 warps of 64x64, 3 stages" (and ", lean copy" for a tile that uses it, and its cluster)
inline std::string describe(const Tile& t) {
  std::string d = std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" + std::to_string(t.bk) + ", " +
                  std::to_string(t.warps_m) + "x" + std::to_string(t.warps_n) + " warps of " +
                  std::to_string(t.bm / t.warps_m) + "x" + std::to_string(t.bn / t.warps_n) + ", " +
                  std::to_string(t.stages) + " stages" + (t.lean ? ", lean copy" : "");
  if (t.ahead) d += ", fragments ahead";
  if (t.cluster_m > 1 && t.cluster_n > 1) {
    d += ", clusters of " + std::to_string(t.cluster_m) + " x " + std::to_string(t.cluster_n) + " sharing A and B";
  } else if (t.cluster_m > 1) {
    d += ", clusters of " + std::to_string(t.cluster_m) + " along M sharing B";
  } else if (t.cluster_n > 1) {
    d += ", clusters of " + std::to_string(t.cluster_n) + " along N sharing A";
  }
  return d;
}

// The tuning hook of `bench/gemm_bench --sweep`: when 0 or above, wmma_pipelined (and
// wmma_pipelined_split_k) on an sm_80+ GPU runs every problem with kBigTiles[index], whatever its
// size, instead of choosing its tile (no small tile, no split-K). Process-wide and for measuring only;
// training and the tests' default runs leave it at -1. An index past the table is refused at launch.
inline std::atomic<int>& big_tile_for_tuning() {
  static std::atomic<int> index{-1};
  return index;
}

// The hook set to `index` for one scope (tuning_hook.h): what the benchmark and the tests use.
class ScopedBigTile : public ScopedHook<int> {
 public:
  explicit ScopedBigTile(int index) : ScopedHook(big_tile_for_tuning(), index) {}
};

}  // namespace hl::kernels::wmma_pipelined
