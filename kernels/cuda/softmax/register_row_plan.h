// The launch plan of the `register_row` softmax rung (register_row.cu): how many threads own a row
// and how many values each one keeps in registers. Plain C++ with no CUDA in it, so that the default
// chooser (kernels/softmax.cpp) and a CPU test (tests/kernels/test_softmax_cuda.cpp) use the same
// numbers as the kernels.
//
// A thread keeps its share of the row in a register array indexed only with compile-time constants,
// so the per-thread count is a template parameter: one kernel is compiled for each count listed in
// compiled_for(). A 16-byte pack is 8 FP16 or 4 FP32 values; the scalar path (a row that is not a
// whole number of packs, or a misaligned buffer) moves one value at a time ("width" 1).
#pragma once
#include <atomic>
#include <cstdint>

namespace hl::kernels::register_row {

constexpr int kMaxThreads = 1024;  // one block per row; also the kernels' __launch_bounds__

// FP32 values one thread keeps. A 1024-thread block leaves 64 registers per thread. 32 values fit when
// they arrive as FP16 packs (4 loads into 16 registers, widened one pack at a time); loaded as FP32
// packs or one by one, 32 values leave too few registers for the loads in flight and ptxas spills to
// local memory (-Xptxas -v), so those paths keep 16.
constexpr int max_values(int width) { return width == 8 ? 32 : 16; }

// The longest row, by path: 1024 threads x 4 FP16 packs x 8 = 32768 columns; FP32 packs (4 x 4) and
// the scalar path (16 values) 16384. Longer rows: packed_online or packed_row (FP16 packs), block_row (up
// to 65536) or online (kernels/softmax.cpp).
constexpr int64_t kMaxCols = static_cast<int64_t>(kMaxThreads) * 32;  // the FP16 packed path
constexpr int64_t max_cols(int width) { return static_cast<int64_t>(kMaxThreads) * max_values(width); }

// Below this block size a row gets the fewest values per thread that still cover it (many threads,
// many blocks resident per SM); longer rows get the most values per thread (fewest threads).
// The first guess was 256. `bench/softmax_bench --sweep` on an H100 (2026-11-27,
// bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt, f16) timed every plan, and the most
// packs per thread won on both shapes: 4096x4096 at 128x4 in 26.37 us (96% of the copy's bandwidth)
// against 29.66 at 256x2 and 33.67 at 512x1; 4096x1024 at 32x4 in 6.84 us against 7.35 at 64x2 and
// 8.56 at 128x1. Fewer threads per row means fewer steps in the block's reductions and more rows per
// SM. So 32: a row gets 32 threads if the most values per thread fit it in one warp, else the fewest
// threads there are.
constexpr int kPreferredThreads = 32;

// The tuning hook of `bench/softmax_bench --sweep`: when above 0, register_row's launches use it in
// place of kPreferredThreads. Process-wide and for measuring only; the tests and training leave it 0.
inline std::atomic<int>& preferred_threads_for_tuning() {
  static std::atomic<int> threads{0};
  return threads;
}

// The per-thread counts (packs of `width` values, width 8, 4 or 1) that register_row.cu instantiates:
// FP16 packs 1, 2, 4; FP32 packs 1, 2, 4; single values 2, 8, 16. Each is one kernel per dtype pair.
constexpr bool compiled_for(int per_thread, int width) {
  if (width == 1) return per_thread == 2 || per_thread == 8 || per_thread == 16;
  if (width != 4 && width != 8) return false;
  return per_thread >= 1 && per_thread * width <= max_values(width) && (per_thread & (per_thread - 1)) == 0;
}

// The packs member `rank` of a group of `size` threads owns in a row of `packs` packs: packs rank,
// rank + size, rank + 2 * size, ... below `packs`. The kernels (register_row.cuh) keep a member's
// packs i < owned of its P; a plan must therefore give every member owned <= P.
constexpr int packs_owned(int packs, int rank, int size) { return packs > rank ? (packs - rank + size - 1) / size : 0; }

struct Plan {
  int threads = 0;     // block size: a multiple of 32, 32..1024; 0 if the row does not fit
  int per_thread = 0;  // packs (or single values) per thread: a count compiled_for(.., width)
};

// The plan for a row of `cols` values moved `width` at a time (cols a multiple of width when width > 1).
// Rule: the smallest compiled count whose block has at most `preferred` threads; else the largest
// compiled count (the fewest threads), if its block has at most kMaxThreads.
constexpr Plan plan(int64_t cols, int width, int preferred = kPreferredThreads) {
  if (cols < 1 || width < 1 || cols > max_cols(width)) return {};
  const int64_t units = (cols + width - 1) / width;  // packs (or values) in the row
  Plan fallback{};
  for (int p = 1; p * width <= max_values(width); p *= 2) {
    if (!compiled_for(p, width)) continue;
    const int64_t threads = ((units + p - 1) / p + 31) / 32 * 32;
    if (threads > kMaxThreads) continue;
    if (threads <= preferred) return {static_cast<int>(threads), p};
    fallback = {static_cast<int>(threads), p};  // larger p, fewer threads: the last one wins
  }
  return fallback;
}

// The plan register_row.cu launches: the rule above, with the tuning hook's block size when it is set.
inline Plan launch_plan(int64_t cols, int width) {
  const int tuned = preferred_threads_for_tuning().load(std::memory_order_relaxed);
  return plan(cols, width, tuned > 0 ? tuned : kPreferredThreads);
}

// ---- register_warp: one warp per row (register_warp.cu) ---------------------------------------------
// The same register-resident row, owned by one warp, several rows per block. A lane's share of the row
// is the smallest compiled count that covers it (rows are short, so no count needs a choice between
// more threads and more values).
namespace warp {

constexpr int kWarpsPerBlock = 8;  // 256 threads

// FP32 values one lane keeps: 32, the same 4 FP16 packs (or 8 FP32 packs of 4, or 32 single values)
// whatever the path, so the longest row is 32 lanes x 32 = 1024 columns. The kernels are compiled for 4
// resident 256-thread blocks per SM (64 registers), 2 where the 32 values arrive as FP32 (128), and
// none spills (register_warp.cu, min_blocks; check with -Xptxas -v). 64 FP16 values per lane spilled
// at 128 registers, or took 204 registers and left one block per SM. Longer rows get a block:
// register_row.
constexpr int kMaxValues = 32;
constexpr int64_t kMaxCols = static_cast<int64_t>(32) * kMaxValues;

// The per-lane counts register_warp.cu instantiates: packs 1, 2, 4 (FP16) and 1, 2, 4, 8 (FP32);
// single values 1, 2, 8, 32 (the scalar path: a 10-class head takes 1).
constexpr bool compiled_for(int per_thread, int width) {
  if (width == 1) return per_thread == 1 || per_thread == 2 || per_thread == 8 || per_thread == 32;
  if (width != 4 && width != 8) return false;
  return per_thread >= 1 && per_thread * width <= kMaxValues && (per_thread & (per_thread - 1)) == 0;
}

// The per-lane count for a row of `cols` values moved `width` at a time: the smallest compiled count
// whose 32 lanes cover the row; 0 if the row is empty or longer than kMaxCols.
constexpr int per_lane(int64_t cols, int width) {
  if (cols < 1 || width < 1 || cols > kMaxCols) return 0;
  const int64_t units = (cols + width - 1) / width;  // packs (or values) in the row
  for (int p = 1; p <= 32; p *= 2)
    if (compiled_for(p, width) && static_cast<int64_t>(32) * p >= units) return p;
  return 0;
}

}  // namespace warp

// ---- cluster_row: one row over a cluster of blocks (cluster_row.cu, Hopper) -------------------------
// A row too long for one block's registers, or rows too few to fill the GPU one block each, is cut
// into G contiguous chunks, one per block of a thread-block cluster (G = 2, 4 or 8: 8 is the portable
// cluster size). Each block keeps its chunk in registers with register_row's plan, and the G blocks
// combine their maxima and sums through distributed shared memory.
namespace cluster {

constexpr int kMaxBlocks = 8;  // the portable cluster size (sm_90)

// Threads per block at most (the kernels' __launch_bounds__): 512 leaves 128 registers per thread.
// At register_row's 1024 (64 registers) the cluster kernels, which keep a little more state per row,
// spilled up to 96 bytes (ptxas -v, sm_90); at 512 none does.
constexpr int kMaxThreads = 512;

// Columns one block of the cluster aims to hold: 256 threads x 4 FP16 packs, so that a block leaves
// room for several more on its SM while the cluster's G blocks keep the whole row in flight.
constexpr int64_t kBlockCols = 8192;

struct Plan {
  int blocks = 0;  // G, the cluster size: 2, 4 or 8; 0 if the row does not fit
  int chunk = 0;   // columns per block (a multiple of the width; the last block may have fewer, or none)
  register_row::Plan block;  // threads and packs per thread of each block, for `chunk` columns
};

// The longest row: 8 blocks x 512 threads x 32 values = 131072 FP16 columns in whole packs; 8 x 512 x 16
// = 65536 for FP32 rows and on the scalar path.
constexpr int64_t max_cols(int width) {
  return static_cast<int64_t>(kMaxBlocks) * kMaxThreads * register_row::max_values(width);
}

// The smallest G in {2, 4, 8} whose chunks are at most kBlockCols columns (8 for longer rows); each
// block then takes register_row's plan for its chunk, which must need at most kMaxThreads threads.
constexpr Plan plan(int64_t cols, int width) {
  if (cols < 1 || width < 1 || cols > max_cols(width)) return {};
  int g = 2;
  while (g < kMaxBlocks && (cols + g - 1) / g > kBlockCols) g *= 2;
  const int64_t units = (cols + width - 1) / width;                         // packs (or values) in the row
  const int64_t chunk = (units + g - 1) / g * static_cast<int64_t>(width);  // whole packs per block
  const register_row::Plan block = register_row::plan(chunk, width);
  if (block.threads == 0 || block.threads > kMaxThreads) return {};
  return {g, static_cast<int>(chunk), block};
}

}  // namespace cluster

// ---- packed_row: the row kept in registers as its FP16 packs (packed_row.cu) --------------------------
// register_row widens its row to FP32 as it loads it, so a thread's 32 values take 32 registers. Kept
// as the 16-byte FP16 packs they arrive in, 64 values take the same 32 registers, and a 1024-thread
// block holds 65536 columns; a row of 32768 needs only 512 threads, so an SM can hold two. The price:
// the exponentials are not kept, so exp() runs twice per element (once for the sum, once for the
// output) instead of once. FP16 rows of whole packs only (width 8): an FP32 row gains nothing (its packs
// are already FP32).
namespace packed {

constexpr int kMaxThreads = 1024;  // one block per row; also the kernel's __launch_bounds__ (64 registers)
constexpr int kMaxPacks = 8;       // 16-byte FP16 packs per thread: 64 values in 32 registers
constexpr int kWidth = 8;          // FP16 values per pack
constexpr int64_t kMaxCols = static_cast<int64_t>(kMaxThreads) * kMaxPacks * kWidth;  // 65536

// The per-thread counts packed_row.cu instantiates: 1, 2, 4 or 8 FP16 packs.
constexpr bool compiled_for(int per_thread, int width) {
  return width == kWidth && (per_thread == 1 || per_thread == 2 || per_thread == 4 || per_thread == 8);
}

// Rule: the most packs per thread (8), so that a block has the fewest threads and an SM the most
// blocks, in blocks of at least one warp; a row of at most 256 packs gets one warp and the fewest packs
// per lane that cover it. {0, 0} when the row is not FP16 packs (width 8) or longer than kMaxCols.
constexpr Plan plan(int64_t cols, int width) {
  if (width != kWidth || cols < 1 || cols > kMaxCols || cols % kWidth != 0) return {};
  const int64_t packs = cols / kWidth;
  if (packs <= static_cast<int64_t>(32) * kMaxPacks) {
    int p = 1;
    while (32 * p < packs) p *= 2;
    return {32, p};
  }
  return {static_cast<int>(((packs + kMaxPacks - 1) / kMaxPacks + 31) / 32 * 32), kMaxPacks};
}

}  // namespace packed

// ---- packed_warp: a warp per row, the row kept as its FP16 packs (packed_warp.cu) ---------------------
// register_warp's warp per row (no shared memory, no barriers, eight rows to a 256-thread block) with
// packed_row's FP16 packs: a lane keeps up to 16 packs, 128 values in 64 registers, so a warp holds a
// row of 4096 columns, where register_warp's FP32 values stop at 1024 (64 FP16 values per lane as FP32
// spilled or left one block per SM: the warp namespace above). exp() runs twice per element, as in
// packed_row. FP16 rows of whole packs only (width 8).
namespace packed_warp {

constexpr int kWarpsPerBlock = 8;  // 256 threads
constexpr int kMaxPacks = 16;      // 16-byte FP16 packs per lane: 128 values in 64 registers
constexpr int kWidth = 8;          // FP16 values per pack
constexpr int64_t kMaxCols = static_cast<int64_t>(32) * kMaxPacks * kWidth;  // 4096

// The per-lane counts packed_warp.cu instantiates: 1, 2, 4, 8 or 16 FP16 packs.
constexpr bool compiled_for(int per_thread, int width) {
  return width == kWidth && per_thread >= 1 && per_thread <= kMaxPacks && (per_thread & (per_thread - 1)) == 0;
}

// The smallest compiled count whose 32 lanes cover the row's packs; 0 when the row is not FP16 packs
// (width 8, whole packs) or longer than kMaxCols.
constexpr int per_lane(int64_t cols, int width) {
  if (width != kWidth || cols < 1 || cols > kMaxCols || cols % kWidth != 0) return 0;
  const int64_t packs = cols / kWidth;
  int p = 1;
  while (static_cast<int64_t>(32) * p < packs) p *= 2;
  return p;
}

}  // namespace packed_warp

}  // namespace hl::kernels::register_row
