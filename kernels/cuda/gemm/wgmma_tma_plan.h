// The arithmetic of the `wgmma_tma` rung (wgmma_tma.cu): which boxes the TMA copy engine fetches
// for one stage, where it puts them, and the phases of the two barriers per stage through which the
// producer warpgroup and the two consumer warpgroups hand the ring back and forth. Plain C++ with
// host/device functions (HL_HOST_DEVICE), so that the kernel calls exactly this code and a CPU test
// (tests/kernels/test_wgmma_layout.cpp, WgmmaTma*) can check it without a GPU: the boxes against a
// model of the TMA unit's 128-byte swizzle, which must reproduce the layout rung 7's copies write
// (wgmma_layout.h) and its descriptors read; the barrier schedule by playing the three roles through
// it in every order a seeded scheduler picks.
//
// Why a test of this: a wrong box lands a permuted tile, which wgmma multiplies into a plausible wrong
// product; a wrong barrier phase does not fail at all, it hangs (a consumer waiting for a phase that
// already completed, or a producer waiting for one that never will) or races (the copy engine
// overwriting a stage a wgmma still reads). Both are cheaper to find here than on a GPU.
#pragma once

#include <atomic>
#include <cstdint>

#include "kernels/tuning_hook.h"
#include "kernels/cuda/gemm/ring_phases.h"
#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::wgmma_tma_plan {

using wgmma_layout::kAtomBytes;
using wgmma_layout::kBK;
using wgmma_layout::kBM;
using wgmma_layout::kRowBytes;

// ---- the block ------------------------------------------------------------------------------------------

// Three warpgroups: two consumers, each computing 64 rows of the 128 x BN tile with wgmma as in rung 7,
// and one producer, whose one elected thread issues the TMA copies. The producer is the last warpgroup
// so that the consumers are warpgroups 0 and 1, the numbering rung 7's accumulator map assumes.
inline constexpr int kConsumers = wgmma_layout::kWarpgroups;  // 2
inline constexpr int kConsumerThreads = 128 * kConsumers;     // 256
inline constexpr int kProducer = kConsumers;                  // warpgroup 2
inline constexpr int kThreads = kConsumerThreads + 128;       // 384

// setmaxnreg: the producer needs few registers (one thread computes coordinates), the consumers hold
// BN / 2 FP32 accumulators each; 128 x 40 + 256 x 232 = 64512 of the SM's 65536 registers, the split
// every Hopper GEMM of this shape uses. The values must be multiples of 8 in [24, 256].
inline constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
static_assert(128 * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= 65536, "one block per SM");

// The candidate tiles: N per block, the stages of the ring, and how many groups of wgmma a consumer
// leaves running when it hands a stage back (0: it waits for this step's multiply-adds and releases
// this step's stage; 1: it waits only for the previous step's and releases that one, so the Tensor
// Cores always have a group queued). own_tile() below picks among them per shape; `gemm_bench --sweep`
// times each through tile_for_tuning(). One block per SM for all: 384 threads at 168 registers fill the
// register file, whatever the shared memory would allow.
struct TileConfig {
  int bn, stages, in_flight;
};
inline constexpr TileConfig kTiles[] = {
    {128, 4, 1},  // #0: 32 KiB per stage, 129 KiB
    {256, 4, 1},  // #1: 48 KiB per stage, 193 KiB: twice the multiply-adds per byte of A copied
    {128, 4, 0},  // #2: #0 with each stage released only after its own multiply-adds completed
    {64, 6, 1},   // #3: 24 KiB per stage, 145 KiB; for outputs 64 or fewer columns wide
};
inline constexpr int kTileCount = static_cast<int>(sizeof(kTiles) / sizeof(kTiles[0]));
inline constexpr int kWideTile = 1, kNarrowTile = 3;

// The rung's choice of tile for an M x N output on a GPU of `sms` multiprocessors, from the H100 sweep of
// 2026-11-27 (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt, `wgmma_tma #0` to `#3`):
//   - 64 or fewer columns: #3, whose 64-wide tile does not multiply zeros in half its columns;
//   - #1 (128 x 256) wherever its tiles still number at least 3/4 of the SMs (one block per SM): it copies
//     half the A per multiply-add of #0 and won every such shape, 2048^3 by 12% (0.0310 against 0.0348 ms),
//     4096^3 by 21% (691 against 573 TFLOP/s), 8192^3 by 14%, and LeNet conv2's data gradient (25088 x 800);
//   - #3 where #0's tiles would leave more than half the SMs idle: twice the blocks, and it won those shapes
//     (512^3, 1024^3 and the MLP-512 and LeNet fully connected layers at batch 128) by 3-20%;
//   - #0 in between.
HL_HOST_DEVICE constexpr int own_tile(int64_t m, int64_t n, int sms) {
  if (n <= kTiles[kNarrowTile].bn) return kNarrowTile;
  const int64_t rows = (m + 127) / 128;  // the block's 128 rows (wgmma_layout::kBM)
  const int64_t wide = rows * ((n + kTiles[kWideTile].bn - 1) / kTiles[kWideTile].bn);
  const int64_t own = rows * ((n + kTiles[0].bn - 1) / kTiles[0].bn);
  if (4 * wide >= 3 * static_cast<int64_t>(sms)) return kWideTile;
  if (2 * own < sms) return kNarrowTile;
  return 0;
}

// ---- the boxes --------------------------------------------------------------------------------------------

// The tensor maps (wgmma_tma.cu, make_tensor_map) describe each operand as it is stored: a 2-D array
// of halves whose dimension 0 (contiguous) is K for a K-major operand and M or N for an MN-major one.
// The box is 64 halves (128 bytes, the widest a 128-byte swizzle allows) along dimension 0, and so
// many rows along dimension 1. The unit writes a box row r at r x 128 bytes from the box's destination
// and XORs the 16-byte chunk index with r % 8: exactly rung 7's two layouts, if
//   K-major (X x 64 tile: X rows of M or N, each 64 K values): one box of X rows at (k0, x0);
//   MN-major (64 rows of K, each X values of M or N): X / 64 boxes of 64 x 64, box j at
//     (x0 + 64 j, k0), landing 64 x 128 bytes apart (mn_major_offset's x / 64 blocks).
inline constexpr int kBoxInner = kRowBytes / 2;  // 64 halves

template <bool kKMajor, int X>
struct Boxes {
  static_assert(X % 64 == 0 && X <= 256, "a box has at most 256 rows; the MN-major boxes are 64 wide");
  static constexpr int kCount = kKMajor ? 1 : X / 64;
  static constexpr int kRows = kKMajor ? X : kBK;  // the box's extent along dimension 1
  static constexpr uint32_t kBytes = static_cast<uint32_t>(kBoxInner * kRows * 2);
};

// Box j of an operand tile whose first element (as op() sees it) is (x0, k0): its coordinates in the
// tensor map (dimension 0 first) and its offset in the tile.
struct Box {
  int64_t c0, c1;
  uint32_t bytes;
};
template <bool kKMajor, int X>
HL_HOST_DEVICE Box box(int j, int64_t x0, int64_t k0) {
  if constexpr (kKMajor) {
    return {k0, x0, 0};
  } else {
    return {x0 + 64 * j, k0, static_cast<uint32_t>(j) * Boxes<false, X>::kBytes};
  }
}

// ---- the barriers -------------------------------------------------------------------------------------------

// Each stage s has two mbarriers. full[s]: one arrival (the producer's, announcing the stage's bytes)
// and the copy engine's byte count complete a phase: the stage holds its tile. empty[s]: every consumer
// thread's arrival completes a phase: no wgmma reads the stage any more. Which stage a K tile uses and
// which phase each waiter names is ring_phases.h's arithmetic, shared with wmma_pipelined's cluster
// tiles.
using ring::empty_parity;
using ring::full_parity;
using ring::producer_waits;
using ring::stage_of;

// The tile whose stage a consumer releases at step kt (after waiting until at most in_flight groups of
// wgmma run), or -1 for none: with in_flight = 1 the previous step's, whose group has just completed.
HL_HOST_DEVICE constexpr int64_t released_at(int64_t kt, int in_flight) { return kt - in_flight; }
// The barrier counts.
inline constexpr int kFullArrivals = 1, kEmptyArrivals = kConsumerThreads;

}  // namespace hl::kernels::cuda::wgmma_tma_plan

namespace hl::kernels::wgmma_tma {

// The tuning hook of `gemm_bench --sweep`: -1 (the default) runs every problem with the rung's own tile;
// I in [0, kTileCount) forces tile #I. Only the benchmark and the tests set it (ScopedTile).
inline std::atomic<int>& tile_for_tuning() {
  static std::atomic<int> tile{-1};
  return tile;
}
class ScopedTile : public ScopedHook<int> {
 public:
  explicit ScopedTile(int tile) : ScopedHook<int>(tile_for_tuning(), tile) {}
};

}  // namespace hl::kernels::wgmma_tma
