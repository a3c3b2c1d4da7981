// The lane arithmetic of the `mma_sync` rung (mma_sync.cu): which shared-memory row each lane hands
// to ldmatrix, and where each of its accumulators sits in the block tile. Plain C++ with host/device
// functions (HL_HOST_DEVICE), so that the kernel calls exactly this code and a CPU test
// (tests/kernels/test_mma_sync_lanes.cpp) can play a whole warp through it against a model of the
// two instructions written from the PTX ISA, without a GPU.
//
// Why a test of this, apart from the GPU tests: a wrong lane formula in a rung like this one does not
// crash. It feeds mma.sync a permuted fragment and produces a plausible, wrong product, or reads the
// padding of the tile, or makes ldmatrix's eight row addresses collide in the same shared-memory
// banks (correct, and several times slower). The simulation finds all three on any machine.
#pragma once

#include <atomic>

#include "kernels/tuning_hook.h"
#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::mma_lanes {

// The block tile (mma_sync.cu explains the choice): 128 x 128 x 32, 4 warps of 64 x 64, 4 stages.
inline constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4;
inline constexpr int kWarpsM = 2, kWarpsN = 2, kThreads = 32 * kWarpsM * kWarpsN;
inline constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;  // the 64 x 64 warp tile
inline constexpr int kMT = kWM / 16, kNT = kWN / 8;             // 4 x 8 mma tiles of 16 x 8 per warp
inline constexpr int kLdC = kBN + 8;                            // the epilogue's FP32 staging tile, padded

// An operand tile as wmma_tile.cuh's SmemOperand stores it (mma_sync.cu asserts that they agree): when
// K is the contiguous dimension in global memory (A with op N, B with op T) as [X][kBK + 8], else as
// [kBK][X + 8], X being the tile's extent along M (A) or N (B).
struct StoredTile {
  int rows, cols, ld;  // rows and columns of data as stored, and the padded row length (halves)
};
constexpr StoredTile stored_tile(bool k_contiguous, int x) {
  return k_contiguous ? StoredTile{x, kBK, kBK + 8} : StoredTile{kBK, x, x + 8};
}

// A place in a tile: its row and column (as stored, for an operand tile).
struct TilePos {
  int row, col;
};

// The corner of warp `warp`'s 64 x 64 tile in the block tile: row along M, column along N.
HL_HOST_DEVICE TilePos warp_origin(int warp) { return {(warp / kWarpsN) * kWM, (warp % kWarpsN) * kWN}; }

// ldmatrix.x4 with .trans or without: without, lane l receives row l / 4 of each 8 x 8 block as
// stored; with, column l / 4. An operand stored with K contiguous is read as it is (mma.sync's A
// fragment is row-major, its B fragment K-major per column), the other storage transposed.
constexpr bool ldmatrix_trans(bool k_contiguous) { return !k_contiguous; }

// The row that lane `lane` hands to ldmatrix.x4 for the A fragment of mma tile rows [m, m + 16) x
// K [kk, kk + 16). mma.sync wants its four registers as the 8 x 8 blocks (rows 0-7, k 0-7),
// (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15), and ldmatrix fills register j from the
// rows that lanes 8j .. 8j + 7 point at. Stored [m][k]: lane l points at row m + l % 16, column
// kk + 8 (l / 16). Stored [k][m]: block j is read transposed, from k rows kk + 8 (j / 2) + l % 8 at
// column m + 8 (j % 2), j = l / 8.
template <bool kKContiguous>
HL_HOST_DEVICE TilePos a_ldmatrix_row(int m, int kk, int lane) {
  if constexpr (kKContiguous) {
    return {m + lane % 16, kk + 8 * (lane / 16)};
  } else {
    const int q = lane / 8;
    return {kk + 8 * (q / 2) + lane % 8, m + 8 * (q % 2)};
  }
}

// The row for the B fragments of two neighbouring mma tiles, columns [n, n + 8) and [n + 8, n + 16),
// K [kk, kk + 16): registers 0, 1 are the first tile's (k 0-7, k 8-15), registers 2, 3 the second's.
// Stored [n][k]: lane l points at n row n + 8 (q / 2) + l % 8, column kk + 8 (q % 2), q = l / 8.
// Stored [k][n]: transposed; lane l points at k row kk + 8 (q % 2) + l % 8, column n + 8 (q / 2).
template <bool kKContiguous>
HL_HOST_DEVICE TilePos b_ldmatrix_row(int n, int kk, int lane) {
  const int q = lane / 8;
  if constexpr (kKContiguous) {
    return {n + 8 * (q / 2) + lane % 8, kk + 8 * (q % 2)};
  } else {
    return {kk + 8 * (q % 2) + lane % 8, n + 8 * (q / 2)};
  }
}

// Which of those four B registers feed mma tile j of a warp (j = 0 .. kNT - 1), loaded in pairs: the
// pair j / 2, registers 2 (j % 2) and 2 (j % 2) + 1.
struct BRegs {
  int pair, first;
};
HL_HOST_DEVICE BRegs b_regs_of_tile(int j) { return {j / 2, 2 * (j % 2)}; }

// Where accumulator e (0..3) of lane `lane` lies in its 16 x 8 mma tile: rows l / 4 and l / 4 + 8,
// columns 2 (l % 4) and 2 (l % 4) + 1, in the order (row, col), (row, col + 1), (row + 8, col),
// (row + 8, col + 1). The epilogue stores the pairs (e = 0, 1) and (e = 2, 3) as float2.
HL_HOST_DEVICE TilePos accumulator_pos(int lane, int e) {
  return {lane / 4 + 8 * (e / 2), 2 * (lane % 4) + e % 2};
}

}  // namespace hl::kernels::cuda::mma_lanes

namespace hl::kernels::mma_sync {

// The lean copy (added 2026-11-26): mma_sync copies the K steps of blocks that lie inside both matrices
// through per-thread plans made before the loop (copy_plan.h, PlannedCopies in wmma_tile.cuh), as
// wmma_pipelined's tiles #12-#14 do, instead of the general copy. This rung has 4 warps for a
// 128 x 128 x 32 block, so each thread copies 8 vectors per K step: about 360 instructions of the
// general copy next to a warp's 64 HMMAs (kernels/cuda/gemm/README.md, "Reading the machine code").
// The rung's own since the H100 run of 2026-11-27 (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt):
// 281.8 TFLOP/s at 4096^3 against 213.6 with the general copy, 291.7 against 236.3 at 8192^3.
inline constexpr bool kLeanCopy = true;

// The tuning hook of `bench/gemm_bench --sweep` and the tests: -1 (the rung's own copy, kLeanCopy), or
// 0 / 1 to force the general or the lean copy (tuning_hook.h). Process-wide and for measuring only.
inline std::atomic<int>& lean_copy_for_tuning() {
  static std::atomic<int> forced{-1};
  return forced;
}

// The lean copy (or, with false, the general copy) forced for one scope (tuning_hook.h).
class ScopedLeanCopy : public ScopedHook<int> {
 public:
  explicit ScopedLeanCopy(bool on = true) : ScopedHook(lean_copy_for_tuning(), on ? 1 : 0) {}
};

}  // namespace hl::kernels::mma_sync
