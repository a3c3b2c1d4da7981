// The K step of the `wmma_smem` GEMM rung (wmma_smem.cu), and the tuning hooks through which
// `bench/gemm_bench --sweep` times the candidates: other K steps, and the batched copy (below). Plain C++ with no CUDA in it, so that the benchmark
// and the tests name the same steps as the kernel.
//
// Why a candidate: the rung loads a tile, waits for it, computes, and only then loads the next (it has
// no pipeline: that is rung 5's lesson). At 4096^3 on an H200 it ran at 14% of cuBLAS
// (bench/results/gpu_short_nvidia_h200_2026-11-26.txt) against issue #4's 25%. A 64-deep step doubles
// the bytes each load phase puts in flight and the multiply-adds each wait pays for, and halves the
// barriers, with the same warps; its shared memory (about 43 KiB with the epilogue's scratch) still
// fits the 48 KiB a block gets without asking, and two blocks still share an SM (registers). Measured
// on an H100 (2026-11-27), the depth alone moved the rung from 14% to 15%; with the batched copy it
// reached 36% (kKStep below).
#pragma once
#include <atomic>

#include "kernels/tuning_hook.h"

namespace hl::kernels::wmma_smem {

// The rung's own since the H100 run of 2026-11-27 (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27.txt,
// 4096^3): 64, with the batched copy below, 265.1 TFLOP/s (36% of cuBLAS); 32 with the batched copy
// 201.3 (27%), 64 with the general copy 108.0 (15%), and 32 with the general copy, the rung as first
// written, 101.6 (14%). So what held the rung back was the copy's waits, not its depth alone.
inline constexpr int kKStep = 64;
inline constexpr int kCandidateKSteps[] = {32, 64};  // what the kernel is compiled for

// The tuning hook of `bench/gemm_bench --sweep`: when above 0, wmma_smem runs every problem with this
// K step (one of kCandidateKSteps; any other is refused at launch). Process-wide and for measuring
// only; training and the tests' default runs leave it at 0.
inline std::atomic<int>& k_step_for_tuning() {
  static std::atomic<int> k{0};
  return k;
}

// The hook set to `k` for one scope (tuning_hook.h).
class ScopedKStep : public ScopedHook<int> {
 public:
  explicit ScopedKStep(int k) : ScopedHook(k_step_for_tuning(), k) {}
};

// The second candidate, with either K step: the batched copy (added 2026-11-26). The
// rung's copy (wmma_tile.cuh's load_tile, synchronous below rung 5) is a loop whose every iteration
// stores to shared memory the vector it has just loaded, and in the sm_90 code each store waits for
// its load (scripts/sass.sh: LDG.E.128 then STS.128 of the same registers): a thread waits for global
// memory once per vector, 4 times per 32-deep K step, where the rung means to wait once per step. In
// blocks that lie inside both matrices, on full K steps, the batched copy (PlannedCopies in
// wmma_tile.cuh, from plans made before the K loop: copy_plan.h) issues every load of the step, then
// every store. The rest of the rung, and its lesson (no overlap of copies with math: rung 5's), stay.
// The rung's own since 2026-11-27 (the numbers above).
inline constexpr bool kBatchedCopy = true;

// The hook for the copy: -1 (the rung's own, kBatchedCopy), or 0 / 1 to force the general or the
// batched copy (tuning_hook.h). Process-wide and for measuring only.
inline std::atomic<int>& batched_copy_for_tuning() {
  static std::atomic<int> forced{-1};
  return forced;
}

// The batched copy (or, with false, the general copy) forced for one scope (tuning_hook.h).
class ScopedBatchedCopy : public ScopedHook<int> {
 public:
  explicit ScopedBatchedCopy(bool on = true) : ScopedHook(batched_copy_for_tuning(), on ? 1 : 0) {}
};

}  // namespace hl::kernels::wmma_smem
