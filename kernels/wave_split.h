// Split-K by whole waves: how many slices to cut a long reduction into, counting the waves a grid runs.
//
// The split-K rules (the GEMM's in kernels/gemm_split.h, and before 2026-11-27 the convolution weight
// gradients' in kernels/cuda/conv/) aim at a number of blocks per SM ("about two", "about four") and do
// not count how many blocks an SM holds at once. A grid of B blocks on a GPU that holds `slots` of them runs in
// ceil(B / slots) waves, and a grid that passes a whole number of waves by a little runs its last wave
// on a few SMs while the rest idle. Rung 3's weight gradient on VGG-small's 256->256 layer at batch 128
// is the case that called for this: 72 output tiles of 64 x 128, the old rule's 8 slices, 576 blocks,
// and two 256-thread blocks of 94 registers per SM on 132 SMs (264 slots; Nsight Compute, H100,
// bench/results/gpu_ncu_nvidia_h100_80gb_hbm3_2026-11-27.txt): 2.18 waves, so three in time, the
// third 18% full.
//
// The model: each block of a split walks ceil(slice / step) steps of the reduction, then writes its FP32
// partial tile, which costs about `epilogue_steps` steps (the tile's bytes over one step's operand
// bytes); the blocks of a wave run side by side, so a split of s slices takes
//     waves(s) x (steps(s) + epilogue_steps),   waves(s) = ceil(tiles * s / slots).
// choose_by_waves takes the count with the least, and the fewest slices among equals (fewer partial
// tiles for the second pass to add). For the 256->256 layer: 7 slices, 504 blocks in 2 waves of 37
// steps, against 3 waves of 32 for the old rule's 8 (74.0 + 2 x 2.7 against 96 + 3 x 2.7 in the model).
// It is a model, not a measurement: a last wave with fewer blocks per SM runs each of them faster than
// a full one, which the model does not count, so it overstates what a partial wave costs; and the second
// pass, which reads every slice's partial tile back, is left out, so it understates what more slices
// cost (it matters most on grids with more tiles than slots, which it may still split).
// bench/conv_bench --sweep-splits times every count on the real kernels (wgrad_splits_for_tuning).
//
// Plain C++, no CUDA headers: tests/kernels/test_wave_split.cpp checks it on any machine.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>

namespace hl::kernels {

struct SplitCut {
  int64_t splits = 1;  // non-empty slices
  int64_t slice = 0;   // reduction positions per slice, a multiple of the step (the last may be shorter)
};

// `splits` slices of a reduction of `len` positions walked `step` at a time: each slice a whole number of
// steps, so that the number of non-empty slices may come out lower than asked (len >= 1, splits >= 1).
constexpr SplitCut cut_reduction(int64_t len, int64_t splits, int64_t step) {
  const int64_t slice = ((len + splits - 1) / splits + step - 1) / step * step;
  return SplitCut{(len + slice - 1) / slice, slice};
}

// The most slices a reduction of `len` positions may be cut into: none shorter than `min_slice`, at
// most `max_splits`, and at least one.
constexpr int64_t most_slices(int64_t len, int64_t min_slice, int64_t max_splits) {
  return std::clamp<int64_t>(len / min_slice, 1, std::max<int64_t>(max_splits, 1));
}

// The model's time for a cut, in reduction steps of one block (see the top of the file).
constexpr double wave_cost(int64_t tiles, int64_t slots, const SplitCut& c, int64_t step, double epilogue_steps) {
  const int64_t blocks = tiles * c.splits;
  const int64_t waves = (blocks + slots - 1) / slots;
  return static_cast<double>(waves) * (static_cast<double>((c.slice + step - 1) / step) + epilogue_steps);
}

// The FP32 partial tile of bm x bn values a block of a split writes, in steps of its operands' loads
// (bm + bn rows of bk halves): choose_by_waves's epilogue_steps.
constexpr double partial_tile_steps(int64_t bm, int64_t bn, int64_t bk) {
  return static_cast<double>(bm * bn * 4) / static_cast<double>((bm + bn) * bk * 2);
}

// The cut of a reduction of `len` positions (step `step`) over `tiles` output tiles, on a GPU that
// holds `slots` blocks of the kernel at once, into at most `most` slices, with the least wave_cost.
constexpr SplitCut choose_by_waves(int64_t tiles, int64_t slots, int64_t len, int64_t step, int64_t most,
                                   double epilogue_steps) {
  tiles = std::max<int64_t>(tiles, 1);
  slots = std::max<int64_t>(slots, 1);
  most = std::max<int64_t>(most, 1);
  SplitCut best = cut_reduction(len, 1, step);
  double best_cost = wave_cost(tiles, slots, best, step, epilogue_steps);
  for (int64_t s = 2; s <= most; ++s) {
    const SplitCut c = cut_reduction(len, s, step);
    if (c.splits != s) continue;  // the rounding to whole steps gave another count, tried on its own
    const double cost = wave_cost(tiles, slots, c, step, epilogue_steps);
    if (cost < best_cost) best = c, best_cost = cost;  // strictly less: the fewest slices among equals
  }
  return best;
}

// For bench/conv_bench --sweep-splits only: while non-zero, the convolution's weight-gradient rungs
// (implicit_gemm_wmma and implicit_gemm_table's rung 3 kernel, implicit_gemm_nhwc_wgrad) cut the
// reduction into this many slices, as far as their own limits allow (the most slices and the shortest
// slice they take), instead of their rules' count. 0: the rules.
inline std::atomic<int>& wgrad_splits_for_tuning() {
  static std::atomic<int> splits{0};
  return splits;
}

// The cut both weight-gradient rungs take (rung 3's wgrad_cut, rung 4b's split_for): the tuning hook's
// count where one is set (at most `most`), else choose_by_waves for bm x bn tiles.
inline SplitCut wgrad_cut_by_waves(int64_t tiles, int64_t slots, int64_t len, int64_t bm, int64_t bn, int64_t bk,
                                   int64_t most) {
  if (const int forced = wgrad_splits_for_tuning().load(); forced > 0)
    return cut_reduction(len, std::min<int64_t>(forced, most), bk);
  return choose_by_waves(tiles, slots, len, bk, most, partial_tile_steps(bm, bn, bk));
}

}  // namespace hl::kernels
