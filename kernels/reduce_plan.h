// How the CUDA reduce_sum (kernels/cuda/reduce.cu) sets up a sum: the reduction brought to its fewest
// dimensions, and the plan of its "channel path" for sums that keep one run of dimensions and reduce the
// innermost ones (a convolution's bias gradient, sum(dy, {0, 2, 3}) over [N, K, P, Q]). Plain C++, so
// that a CPU test (tests/kernels/test_reduce_plan.cpp) checks every rule here against a brute-force
// reading of the same reduction.
//
// Why a channel path (issue #10's profile, docs/gpu_status.md): `bench/train --profile` put 54% of
// LeNet's mixed step on an H100 (1.017 of 1.871 ms) in its first convolution's backward, whose weight
// gradient `conv_bench` times at 0.05 ms. What else that backward does is one elementwise pass (the
// ReLU's mask) and the bias gradient, 32 sums of 100,352 values each, which CUB's segmented reduction
// takes with one block per output (32 blocks on 132 SMs), locating every value through an iterator that
// divides its index by each dimension's size in 64 bits (8 dimensions' worth of arrays, which ptxas puts
// on the stack). So the bias gradient is the likely cost, not yet profiled kernel by kernel. The channel
// path reads the same values 16 bytes at a time with one division per vector, and spreads each sum over
// several blocks whose partial sums a second, one-thread-per-output kernel adds in a fixed order (the
// same bits every run).
// Measured against the CUB path by `bench/reduce_bench`, which forces either through the hook below;
// reduce_sum's own choice since its H100 run (kChannelPathIsDefault).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "kernels/channel_slices.h"
#include "kernels/half.h"  // HL_HOST_DEVICE
#include "kernels/reduce.h"
#include "kernels/tuning_hook.h"

namespace hl::kernels::reduce_plan {

// The same reduction over the fewest dimensions: size-1 dimensions dropped, and each run of neighbours
// that are all reduced or all kept merged into one. Row-major order within a run is the merged
// dimension's order, so every output sums the same elements, met in the same order, and the outputs
// keep their order. A 0-d input, or one whose dimensions all have size 1, becomes a 1-d reduction of
// one element (reduced when the input had a reduced dimension). Sizes of 0 are kept as they are:
// reduce_sum handles empty tensors before it plans anything.
inline ReduceIndex merged(const ReduceIndex& ix) {
  ReduceIndex m;
  bool any_reduced = false;
  for (int d = 0; d < ix.ndim; ++d) {
    any_reduced = any_reduced || ix.reduced[d];
    if (ix.shape[d] == 1) continue;
    if (m.ndim > 0 && m.reduced[m.ndim - 1] == ix.reduced[d]) {
      m.shape[m.ndim - 1] *= ix.shape[d];
    } else {
      m.shape[m.ndim] = ix.shape[d];
      m.reduced[m.ndim] = ix.reduced[d];
      ++m.ndim;
    }
  }
  if (m.ndim == 0) {
    m.ndim = 1;
    m.shape[0] = 1;
    m.reduced[0] = any_reduced;
  }
  return m;
}

// reduce_sum's channel path for x seen as [A, C, B]: out[c] = scale * the sum over a < A, b < B of
// x[(a * C + c) * B + b]. Each of the C sums is cut into `slices` runs of `chunk` vectors of `vec`
// consecutive elements (vector k of channel c: a = k / (B / vec), b = (k % (B / vec)) * vec). One block
// sums each run (grid C x slices); when slices > 1 a second kernel adds the C x slices partial sums in
// slice order.
struct ChannelSum {
  bool applies = false;          // whether the reduction has this shape (else the CUB path takes it)
  int64_t A = 1, C = 1, B = 1;   // reduced outer extent, kept extent (the outputs), reduced inner extent
  int vec = 1;                   // elements per load: 16, 8 or 4 bytes' worth, or 1
  int64_t vectors = 0;           // per channel: A * B / vec
  int64_t slices = 1;            // blocks per channel
  int64_t chunk = 0;             // vectors per block (the last block of a channel may have fewer)

  // The element offset in x of vector k (k < vectors) of channel c: what the kernel loads, and what the
  // CPU test walks to see every element of a channel met exactly once.
  HL_HOST_DEVICE int64_t vector_offset(int64_t c, int64_t k) const {
    const int64_t row_vectors = B / vec, a = k / row_vectors;
    return (a * C + c) * B + (k - a * row_vectors) * vec;
  }
};

// Plan the channel path for `ix`, whose elements are `elem_bytes` wide and start at an address that is a
// multiple of `base_align` bytes (the largest power of two that divides it, or any smaller one), on a GPU
// with `sm_count` SMs and blocks of `threads` threads.
//
// It applies when, after merged(), exactly one run of dimensions is kept, the innermost run is reduced
// (B > 1, so each sum reads runs of contiguous elements) and there is more than one output (a full sum
// goes to cub::DeviceReduce, which spreads one sum over the whole GPU). A sum that keeps the innermost
// dimension (a linear layer's bias gradient over [N, F]: column sums) or two separate runs stays with CUB.
// The grid's x dimension holds the channels, so C must stay below 2^31.
//
// The vector: the widest of 16, 8, 4 bytes (or one element) that divides B (so no vector straddles two
// rows) and the base address. The slices: slice_channels (channel_slices.h), as batch norm's `split`.
inline ChannelSum plan_channel_sum(const ReduceIndex& ix, size_t elem_bytes, size_t base_align, int sm_count,
                                   int threads) {
  ChannelSum p;
  const ReduceIndex m = merged(ix);
  int kept_runs = 0;
  for (int d = 0; d < m.ndim; ++d) kept_runs += m.reduced[d] ? 0 : 1;
  if (kept_runs != 1 || !m.reduced[m.ndim - 1] || ix.out_numel() <= 1) return p;
  // [A reduced,] C kept, B reduced: the kept run is second to last.
  const int kept = m.ndim - 2;
  p.A = kept == 1 ? m.shape[0] : 1;
  p.C = m.shape[kept];
  p.B = m.shape[m.ndim - 1];
  if (p.B <= 1 || p.C >= (int64_t{1} << 31) || elem_bytes == 0) return p;
  for (int bytes = 16; bytes >= 4; bytes /= 2) {
    const int v = bytes / static_cast<int>(elem_bytes);
    if (v > 1 && static_cast<size_t>(bytes) % elem_bytes == 0 && p.B % v == 0 && base_align % bytes == 0) {
      p.vec = v;
      break;
    }
  }
  p.vectors = p.A * p.B / p.vec;
  const ChannelSlices slices = slice_channels(p.vectors, p.C, sm_count, threads);
  p.chunk = slices.chunk;
  p.slices = slices.count;
  p.applies = true;
  return p;
}

// The largest power of two (at most 16) that divides the address p: what plan_channel_sum's base_align
// wants.
inline size_t address_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  size_t align = 16;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// Whether reduce_sum takes the channel path on its own (where plan_channel_sum says it applies): yes
// since an H100 ran it (2026-11-27, seventh session, two runs: bench/results/gpu_short_nvidia_h100_
// 80gb_hbm3_2026-11-27_seventh.txt and _seventh_b.txt). Its tests passed in both, also under memcheck
// and racecheck, and `bench/reduce_bench` timed it far ahead of CUB on every sum it takes; FP16, the
// second run: LeNet conv1's bias gradient 8.84 us against 895.22 (the first: 10.68 against 901.67),
// conv2's 8.18 against 234.72, a VGG batch norm's 64 channels 9.88 against 1211.19. A linear layer's
// bias gradient (128 x 256, not the [A, C, B] shape it takes) stays with CUB. The tests and `bench/reduce_bench` still force either path through the hook.
inline constexpr bool kChannelPathIsDefault = true;

// The hook: -1, reduce_sum's own choice (kChannelPathIsDefault; what training and the tests' default
// runs get), or 0 / 1 to force CUB or the channel path for one scope, so that the two can be timed and
// checked on the same sums. Process-wide, for measuring and testing only.
inline std::atomic<int>& channel_path_for_tuning() {
  static std::atomic<int> forced{-1};
  return forced;
}

inline bool channel_path_chosen() { return chosen_by_hook(channel_path_for_tuning(), kChannelPathIsDefault); }

class ScopedChannelPath : public ScopedHook<int> {
 public:
  explicit ScopedChannelPath(bool enabled) : ScopedHook(channel_path_for_tuning(), enabled ? 1 : 0) {}
};

}  // namespace hl::kernels::reduce_plan
