// The arithmetic of the `wgmma` rung (wgmma.cu): where each operand value goes in shared memory, the
// 64-bit descriptors that tell wgmma.mma_async where to find a 64 x 16 (or N x 16) slice of it, and
// where each accumulator sits in the block tile. Plain C++ with host/device functions
// (HL_HOST_DEVICE), so that the kernel calls exactly this code and a CPU test
// (tests/kernels/test_wgmma_layout.cpp) can play a whole block through it against a model of the
// instruction written from the PTX ISA's description of its shared-memory layouts, without a GPU.
//
// Why a test of this: wgmma reads its operands straight from shared memory, through a descriptor
// (start address, two strides, a swizzle mode), in a layout the ISA calls canonical. A wrong stride or
// swizzle does not crash: the Tensor Cores multiply a permuted matrix and the product is plausible and
// wrong. The simulation finds that on any machine; what it cannot find is a misreading of the ISA
// itself, which only the GPU tests can.
#pragma once

#include <atomic>
#include <cstdint>

#include "kernels/tuning_hook.h"
#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::wgmma_layout {

// ---- the block tile --------------------------------------------------------------------------------

// 128 rows of C per block, two warpgroups of 4 warps, each computing 64 of those rows with
// wgmma.m64nNk16; 64 values of K per stage, so that a K-major operand row is exactly 128 bytes: one
// row of the 128-byte swizzle pattern.
inline constexpr int kBM = 128, kBK = 64;
inline constexpr int kWarpgroups = 2, kThreads = 128 * kWarpgroups;
inline constexpr int kWgRows = kBM / kWarpgroups;  // 64: the M of wgmma.m64nNk16
inline constexpr int kInstrK = 16;                 // the K of one wgmma (f16 inputs)
inline constexpr int kRowBytes = 128;              // a swizzle row: 64 halves
inline constexpr int kAtomBytes = 8 * kRowBytes;   // the swizzle pattern repeats every 8 rows: 1024 bytes

// The candidate tiles: N per block (the N of the instruction: both warpgroups share the B tile), the
// cp.async stages, and how many groups of wgmma a warpgroup leaves running when it reaches the next
// barrier (0: it waits for its multiply-adds first; 1: they overlap the barrier and the next step's
// copies, and the ring refills the buffer of two steps back, so one stage fewer is in flight). Entry 0
// is the rung's own; `gemm_bench --sweep` times the others through tile_for_tuning() below. The
// shared memory and the blocks an SM holds follow from them (Tile).
struct TileConfig {
  int bn, stages, in_flight;
};
inline constexpr TileConfig kTiles[] = {
    {128, 3, 0},  // #0: 32 KiB per stage, 97 KiB: two blocks (16 warps) per SM
    {256, 4, 0},  // #1: 48 KiB per stage, 193 KiB: one block per SM, twice the work per byte of A
    {128, 4, 1},  // #2: 129 KiB, one block per SM, one group of wgmma always running
    {64, 4, 0},   // #3: 24 KiB per stage, 97 KiB: two blocks per SM; for outputs 64 or fewer columns
                  //     wide (LeNet's conv2 as an im2col GEMM: N = 64), which #0 would half waste
};
inline constexpr int kTileCount = static_cast<int>(sizeof(kTiles) / sizeof(kTiles[0]));

// The rung's own choice (the tuning hook aside): #3 where C has 64 columns or fewer, whose 128-wide
// tiles would multiply zeros in half their columns; #0 otherwise. Written before any measurement; the
// H100 sweep (2026-11-27, gemm_bench --sweep, which times every tile on every shape) agreed on LeNet
// conv2's forward: #3 0.0218 ms against #0's 0.0251.
inline constexpr int kNarrowTile = 3;
HL_HOST_DEVICE constexpr int own_tile(int64_t n) { return n <= kTiles[kNarrowTile].bn ? kNarrowTile : 0; }

// The ring's schedule (wgmma.cu's K loop). Step kt waits for its tile's copies, then (after the
// barrier) refills the buffer of tile kt + ring_ahead, then issues tile kt's wgmma and waits until at
// most in_flight groups of them are still running. The refilled buffer is that of tile
// kt - 1 - in_flight, whose wgmma every warpgroup has waited for before the barrier; so the ring keeps
// stages - 1 - in_flight tiles copied ahead, and a thread may leave that many, less the one it needs
// now, of its copy groups pending (cp.async.wait_group). tests/kernels/test_wgmma_layout.cpp plays the
// schedule through for every tile and K.
HL_HOST_DEVICE constexpr int ring_ahead(int stages, int in_flight) { return stages - 1 - in_flight; }
HL_HOST_DEVICE constexpr int copies_left_pending(int stages, int in_flight) {
  return ring_ahead(stages, in_flight) - 1;
}

// The epilogue's FP32 staging tile (wgmma_ops.cuh): 128 rows of BN floats, padded by 8 so that the
// pairs the accumulator map stores from one warp spread over the banks.
HL_HOST_DEVICE constexpr int staging_ld(int bn) { return bn + 8; }

template <int BN, int Stages>
struct Tile {
  static_assert(BN % 64 == 0 && BN >= 64 && BN <= 256, "wgmma's N: a multiple of 64 up to 256 here");
  static constexpr int kBN = BN, kStages = Stages;
  static constexpr int kABytes = kBM * kBK * 2;  // 16 KiB
  static constexpr int kBBytes = BN * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kAccPerThread = BN / 2;  // FP32 accumulators of one thread: 64 x BN over 128 threads
  static constexpr int kLdC = staging_ld(BN);   // the epilogue's FP32 staging tile, padded
  // The ring, and 1024 bytes of slack to start it on a 1024-byte boundary (the swizzle pattern is
  // anchored to the address: the descriptors below assume every tile starts on one).
  static constexpr int kSmemBytes = kStages * kStageBytes + kAtomBytes;
  // Blocks of this tile an H100 or H200 SM holds: 228 KiB of shared memory, 1 KiB of it kept per block.
  static constexpr int kBlocksPerSm = 2 * (kSmemBytes + 1024) <= 228 * 1024 ? 2 : 1;
  static_assert(kABytes % kAtomBytes == 0 && kStageBytes % kAtomBytes == 0, "tiles start on 1024-byte boundaries");
  static_assert(4 * kBM * kLdC <= kStages * kStageBytes, "the epilogue's staging tile fits in the ring");
};

// ---- where each value goes: the 128-byte swizzle ----------------------------------------------------

// Both layouts are made of 1024-byte atoms: 8 rows of 128 bytes, in which the 16-byte chunk c of row r
// is stored at chunk position c ^ r. Without the XOR, the 8 rows that the Tensor Cores (or a warp's
// copies) touch together would start in the same bank; with it, they cover all 32 banks.
HL_HOST_DEVICE uint32_t swizzled(uint32_t row_in_atom, uint32_t chunk, uint32_t byte_in_chunk) {
  return row_in_atom * kRowBytes + ((chunk ^ row_in_atom) * 16) + byte_in_chunk;
}

// K-major (the operand's K is contiguous in memory: A with op N, B with op T): row x of the tile
// (along M or N) holds its 64 K values, 128 bytes. Byte offset of element (x, k) in the tile.
HL_HOST_DEVICE uint32_t k_major_offset(int x, int k) {
  return static_cast<uint32_t>(x / 8) * kAtomBytes +
         swizzled(static_cast<uint32_t>(x % 8), static_cast<uint32_t>(k / 8), static_cast<uint32_t>(k % 8) * 2);
}

// MN-major (M or N contiguous: A with op T, B with op N): the tile is cut into 64-wide column blocks
// along M (or N), each holding its 64 rows of K: [x / 64][k][x % 64]. Byte offset of element (x, k).
HL_HOST_DEVICE uint32_t mn_major_offset(int x, int k) {
  return static_cast<uint32_t>(x / 64) * (kBK * kRowBytes) + static_cast<uint32_t>(k / 8) * kAtomBytes +
         swizzled(static_cast<uint32_t>(k % 8), static_cast<uint32_t>((x % 64) / 8), static_cast<uint32_t>(x % 8) * 2);
}

// One 16-byte copy of a stage: which 8 values of the stored matrix (row `row`, columns col .. col + 7
// of the tile as the operand is stored: rows are M/N for a K-major operand, K for an MN-major one)
// and where they go in the tile. Copy v of an X x 64 tile (X along M or N), v in [0, X * 8).
struct Chunk {
  int row, col;    // in the tile, as stored
  uint32_t bytes;  // the destination's offset in the tile
};
template <bool kKMajor, int X>
HL_HOST_DEVICE Chunk chunk_of(int v) {
  if constexpr (kKMajor) {
    const int x = v / (kBK / 8), k = (v % (kBK / 8)) * 8;  // 8 chunks per row: consecutive threads, one row
    return {x, k, k_major_offset(x, k)};
  } else {
    const int k = v / (X / 8), x = (v % (X / 8)) * 8;  // X / 8 chunks per K row
    return {k, x, mn_major_offset(x, k)};
  }
}

// ---- the descriptors ---------------------------------------------------------------------------------

// The 64-bit shared-memory matrix descriptor of wgmma.mma_async (PTX ISA, "Matrix Descriptor Format"):
// bits 0-13 the start address, 16-29 the leading-dimension byte offset, 32-45 the stride-dimension byte
// offset, each as (x & 0x3FFFF) >> 4; bits 49-51 the base offset (0: every atom starts on a 1024-byte
// boundary); bits 62-63 the swizzle mode (1: 128-byte).
HL_HOST_DEVICE uint64_t encode(uint32_t x) { return (x & 0x3FFFFu) >> 4; }
HL_HOST_DEVICE uint64_t descriptor(uint32_t start, uint32_t lbo, uint32_t sbo) {
  return encode(start) | encode(lbo) << 16 | encode(sbo) << 32 | uint64_t{1} << 62;
}

// The strides the two layouts above have, as the ISA defines them for 128-byte swizzling:
//   K-major: the stride byte offset is the distance from one group of 8 rows (M or N) to the next,
//     1024 bytes; the leading byte offset is not used ("assumed 1": 16 bytes).
//   MN-major: the leading byte offset is the distance from one 64-wide block of M (or N) to the next,
//     64 rows of K x 128 bytes; the stride byte offset from one group of 8 K rows to the next, 1024.
inline constexpr uint32_t kKMajorLbo = 16, kKMajorSbo = kAtomBytes;
inline constexpr uint32_t kMnMajorLbo = kBK * kRowBytes, kMnMajorSbo = kAtomBytes;

// The descriptor of the 16-deep K slice `slice` (0..3) of a tile at shared address `tile`, starting at
// row x0 along M or N (a warpgroup's 64 rows of A; 0 for B). The start is simply the offset of element
// (x0, 16 slice): inside an atom the hardware applies the swizzle to the address it computes, so a
// K-major slice starts 32 bytes further along the first row (the XOR with the row then lands on the
// chunk where the copy put it), and an MN-major slice 16 rows of K further on.
template <bool kKMajor>
HL_HOST_DEVICE uint64_t slice_descriptor(uint32_t tile, int x0, int slice) {
  if constexpr (kKMajor) {
    return descriptor(tile + k_major_offset(x0, kInstrK * slice), kKMajorLbo, kKMajorSbo);
  } else {
    return descriptor(tile + mn_major_offset(x0, kInstrK * slice), kMnMajorLbo, kMnMajorSbo);
  }
}

// ---- the accumulators ---------------------------------------------------------------------------------

struct TilePos {
  int row, col;
};

// Where accumulator i of thread t (0..127) of a warpgroup sits in the warpgroup's 64 x N tile of C
// (PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16", accumulator D): warp w = t / 32 owns rows
// 16 w .. 16 w + 15; within them lane l holds, of each 8-column block j = i / 4, rows l / 4 and
// l / 4 + 8 and columns 2 (l % 4) and 2 (l % 4) + 1 (the layout of mma.sync's m16n8, repeated N / 8
// times).
HL_HOST_DEVICE TilePos accumulator_pos(int t, int i) {
  const int warp = t / 32, lane = t % 32;
  return {16 * warp + lane / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (lane % 4) + i % 2};
}

}  // namespace hl::kernels::cuda::wgmma_layout

namespace hl::kernels::wgmma {

// The tuning hook of `gemm_bench --sweep`: -1 (the default) runs every problem with the rung's own tile
// (own_tile: #3 for C of 64 columns or fewer, #0 otherwise); I in [0, kTileCount) forces tile #I.
// Only the benchmark and the tests set it (ScopedTile).
inline std::atomic<int>& tile_for_tuning() {
  static std::atomic<int> tile{-1};
  return tile;
}
class ScopedTile : public ScopedHook<int> {
 public:
  explicit ScopedTile(int tile) : ScopedHook<int>(tile_for_tuning(), tile) {}
};

}  // namespace hl::kernels::wgmma
