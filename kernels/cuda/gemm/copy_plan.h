// A thread's share of one operand tile's global -> shared copies, worked out once before the K loop
// instead of once per vector per K step. Written for the GEMM rungs' tuning candidates, timed on an
// H100 on 2026-11-27 and each rung's own copy since (kernels/cuda/gemm/README.md): the "lean copy" of
// wmma_pipelined's tiles #12-#14 (wmma_pipelined_tiles.h) and of mma_sync (mma_sync_lanes.h), one
// cp.async per vector; and wmma_smem's "batched copy" (wmma_smem_k_step.h),
// every load of a K step before any store. Plain C++ with host/device functions (HL_HOST_DEVICE), so
// that the kernels call exactly this code and a CPU test (tests/kernels/test_copy_plan.cpp) plays
// every thread of a block through it against the tile the general copy (wmma_tile.cuh, load_tile)
// writes.
//
// Why (issue #4): the general copy finds each 16-byte vector's row and column with a division, checks
// both against the matrix in 64-bit arithmetic, and branches three ways (a 128-bit copy, zeros, or the
// scalar fallback for a vector that straddles an edge or a misaligned matrix). In the sm_90 code that
// is 41 instructions per vector on the common path, and a thread copies 4 (wmma_pipelined's 128 x 128
// x 32 tile, 8 warps) or 8 vectors (mma_sync, 4 warps) per K step: about 200 or 360 instructions per
// thread per K step, next to a warp's 32 or 64 HMMAs (bench/results/sass_gemm_copy_2026-11-26.txt;
// kernels/cuda/gemm/README.md, "Reading the machine code"). If the Tensor Cores take an HMMA.16816
// every few cycles and an SM sub-partition issues one instruction per cycle, the copy code alone takes
// most of the issue slots, which would explain why every tile of the sweep stopped near 30% of cuBLAS
// whatever its shape. (The H100 confirmed it in part: tile #0 went from 213.5 to 274.3 TFLOP/s at
// 4096^3 with the lean copy, where no block shape had moved it.) In wmma_smem, whose copies are synchronous,
// the same loop stores each vector right after loading it, so a thread waits for memory once per
// vector instead of once per K step.
//
// What a plan does instead. A thread's vectors in a tile of kRows x kCols halves (kVecsPerRow vectors
// per row, numbered row by row, vector v going to thread v % kThreads) share one column and lie
// kRowStep rows apart, so the whole set is a first vector and a stride, in the tile and in the matrix;
// from one K step to the next the source moves by a fixed amount. For a block whose tile lies wholly
// inside the matrices, and a K step that does too (every one but a partial last step), nothing needs
// checking: each vector is one 16-byte copy from a pointer the thread carries from step to step.
// Blocks on the matrices' edges, the partial last step, and matrices whose pointer or leading
// dimension does not allow 16-byte copies keep the general copy, which handles all of those.
#pragma once

#include <cstdint>

#include "kernels/half.h"  // HL_HOST_DEVICE

namespace hl::kernels::cuda::copy_plan {

// The tile as stored in shared memory (wmma_tile.cuh's SmemOperand): kRows rows of kCols halves,
// each padded to kLd; kThreads threads copy it.
template <int kRows_, int kCols_, int kLd_, int kThreads_>
struct Shape {
  static constexpr int kRows = kRows_, kCols = kCols_, kLd = kLd_, kThreads = kThreads_;
  static_assert(kCols % 8 == 0 && kLd % 8 == 0, "tile rows are copied in 8-half (16-byte) vectors");
  static constexpr int kVecsPerRow = kCols / 8;
  static_assert(kThreads % kVecsPerRow == 0 && (kRows * kVecsPerRow) % kThreads == 0,
                "every thread copies the same number of vectors, all in one column");
  static constexpr int kPerThread = kRows * kVecsPerRow / kThreads;  // vectors per thread per K step
  static constexpr int kRowStep = kThreads / kVecsPerRow;            // rows between a thread's vectors
};

// One thread's plan for one operand (S: its Shape), for a block whose tile lies inside the matrix.
// The stored matrix is row-major with leading dimension `ld`; the block's tile starts at stored row
// r0, column c0 for K step 0. k_contiguous: K runs along the stored rows (A with op N, B with op T),
// so each K step moves the tile kCols columns right; otherwise K runs down the columns (A with op T,
// B with op N) and each step moves it kRows rows down.
template <class S>
struct Plan {
  using Shape = S;
  int dst;           // the first vector's place in the tile (halves from the tile's start)
  int64_t src;       // the first vector's element offset in the matrix at the current K step
  int64_t row_step;  // kRowStep * ld: from one of the thread's vectors to the next, in the matrix
  int64_t k_step;    // from one K step to the next, in the matrix

  HL_HOST_DEVICE Plan(int thread, int64_t ld, int64_t r0, int64_t c0, bool k_contiguous)
      : dst((thread / S::kVecsPerRow) * S::kLd + (thread % S::kVecsPerRow) * 8),
        src((r0 + thread / S::kVecsPerRow) * ld + c0 + (thread % S::kVecsPerRow) * 8),
        row_step(static_cast<int64_t>(S::kRowStep) * ld),
        k_step(k_contiguous ? static_cast<int64_t>(S::kCols) : static_cast<int64_t>(S::kRows) * ld) {}

  // Vector i of this thread at the current K step: where it goes in the tile (halves) and where its 8
  // halves come from in the matrix (an element offset).
  HL_HOST_DEVICE int dst_of(int i) const { return dst + i * S::kRowStep * S::kLd; }
  HL_HOST_DEVICE int64_t src_of(int i) const { return src + i * row_step; }

  // On to the next K step. The kernel issues the steps in order, so the offset is carried from one
  // to the next (an add) rather than recomputed from the step's index.
  HL_HOST_DEVICE void advance() { src += k_step; }
};

}  // namespace hl::kernels::cuda::copy_plan
