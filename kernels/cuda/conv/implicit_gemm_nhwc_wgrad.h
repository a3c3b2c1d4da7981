// The address arithmetic of implicit_gemm_nhwc_wgrad.cu (rung 4b of the convolution ladder: rung 4's
// NHWC operands and cp.async ring for the weight gradient): where each 8-value vector of its two
// tiles comes from, how the reduction is split into slices, where each partial sum lands in the
// weight gradient, and which calls the rung hands on. Plain C++ with host/device functions
// (HL_HOST_DEVICE), so that the kernels call exactly this code and a CPU test
// (tests/kernels/test_conv_nhwc_wgrad_index.cpp) walks the same tiles without a GPU.
//
// The weight gradient is a GEMM whose reduction runs over every output position j = (n, p, q):
//   dW[k, (r, s, c)] = sum over j of dY[n, k, p, q] * x[n, c, p*sh + r - ph, q*sw + s - pw].
// With both tensors copied to NHWC (x as [N][H][W][C], dY as [N][P][Q][K]) the two operands of one
// reduction index are contiguous along the GEMM's output dimensions, not along the reduction:
//   A (m = k, j):        dYh[j * K + k]                         (K consecutive output channels)
//   B (j, col = r,s,c):  xh[((n * H + y) * W + x) * C + c]      (C consecutive channels of one tap)
// so a tile row is one reduction index and 8 neighbours of a row are one 16-byte vector, as long as
// C and K are multiples of 8 (then a vector of columns never straddles two taps).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "kernels/conv.h"
#include "kernels/half.h"  // HL_HOST_DEVICE
#include "kernels/wave_split.h"

namespace hl::kernels::cuda::nhwc_wgrad {

// Tile sizes (the kernel file says why): 128 output channels x 128 (r, s, c) columns per block, the
// reduction in steps of 32 output positions, 8 warps of 64 x 32, a 4-stage cp.async ring.
inline constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;
inline constexpr int kWarpsM = 2, kWarpsN = 4;
inline constexpr int kLdA = kBM + 8;  // A stage: [kBK][kLdA] of dY, output channels contiguous (16-byte padded)
inline constexpr int kLdB = kBN + 8;  // B stage: [kBK][kLdB] of x, (r, s, c) contiguous
inline constexpr int kLdC = kBN + 4;  // the epilogue's FP32 staging tile [kBM][kLdC], in the dead ring
inline constexpr int kStageElems = kBK * kLdA + kBK * kLdB;
inline constexpr int kRingBytes = kStages * kStageElems * 2;
inline constexpr int kCBytes = kBM * kLdC * 4;
inline constexpr int kSmemBytes = kRingBytes > kCBytes ? kRingBytes : kCBytes;
inline constexpr int kVecsPerRow = kBM / 8;  // 16-byte vectors per tile row (both tiles are 128 wide)
static_assert(kBM == kBN, "one thread-to-vector map serves both tiles");
static_assert((kBK * kVecsPerRow) % kThreads == 0, "every thread copies the same number of vectors");
static_assert(kThreads % kVecsPerRow == 0, "a thread's vectors all sit in the same tile column");
inline constexpr int kVecs = kBK * kVecsPerRow / kThreads;  // per tile, per thread, per stage

// Split-K: the shortest slice of the reduction a block takes (shorter ones would spend more time
// writing partial tiles than multiplying), and the most slices.
inline constexpr int kMinSlice = 8 * kBK;
inline constexpr int kMaxSplits = 256;

// The most workspace a call may take (the NHWC copies of x and dY plus the FP32 partial tiles; VGG-small
// at batch 128 needs at most 42 MB): the buffer is grow-only and never given back, so a larger call is
// handed on instead.
inline constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;

// The weight gradient the kernel computes (see the top of the file), all sizes per call.
struct Problem {
  int N, H, W, C;  // x, NHWC
  int K;           // output channels: the GEMM's rows
  int R, S, sh, sw, ph, pw;
  int P, Q;  // dY is [N][P][Q][K]
  HL_HOST_DEVICE int npq() const { return N * P * Q; }  // the reduction; below 2^31 - 64 (hand_off_reason)
  HL_HOST_DEVICE int rsc() const { return R * S * C; }  // the GEMM's columns: (r, s, c), c fastest
};

inline Problem problem_for(const ConvArgs& a) {
  const auto i32 = [](int64_t v) { return static_cast<int>(v); };
  return Problem{i32(a.N), i32(a.H), i32(a.W), i32(a.C), i32(a.K), i32(a.R), i32(a.S), i32(a.stride_h),
                 i32(a.stride_w), i32(a.pad_h), i32(a.pad_w), i32(a.P()), i32(a.Q())};
}

// How the reduction is cut: `splits` slices of `slice` positions each (a multiple of kBK; the last may
// be shorter, none is empty), no slice shorter than kMinSlice, at most kMaxSplits. The count is rung 3's
// rule (kernels/wave_split.h): the one whose blocks fill whole waves of the `slots` blocks the GPU holds
// at once (its SMs times the blocks of this kernel one SM holds: two on an H100, by registers), with
// the partial tile's write (128 x 128 FP32 against 128 + 128 rows of 32 halves: 4 steps) counted.
// Since 2026-11-27: bench/conv_bench --sweep-splits on an H100 timed every count, and this rule's
// beat the old "about two blocks per SM" (ceil(2 x SMs / tiles)) where they differ most, VGG-small's
// 256->256 layer (7 slices, 0.0972 ms, against 8, 0.1146 ms), and matched it within the run's noise on
// the others (bench/results/gpu_short_nvidia_h100_80gb_hbm3_2026-11-27_seventh.txt).
// A count set by that sweep (wgrad_splits_for_tuning) takes the rule's place, within the same limits.
struct Split {
  int splits, slice;
};
// The most slices: kMaxSplits, and none shorter than kMinSlice.
inline int64_t most_splits(const Problem& g) { return most_slices(g.npq(), kMinSlice, kMaxSplits); }
inline Split split_for(const Problem& g, int64_t slots) {
  const int64_t tiles = static_cast<int64_t>((g.K + kBM - 1) / kBM) * ((g.rsc() + kBN - 1) / kBN);
  const SplitCut c = wgrad_cut_by_waves(tiles, slots, g.npq(), kBM, kBN, kBK, most_splits(g));
  return Split{static_cast<int>(c.splits), static_cast<int>(c.slice)};
}

// The workspace of a call, in bytes: the NHWC copies of x and dY (halves), then the FP32 partial tiles
// [splits][K][R*S*C], which start on a 16-byte boundary.
inline int64_t copies_bytes(const Problem& g) {
  const int64_t halves = static_cast<int64_t>(g.N) * g.H * g.W * g.C + static_cast<int64_t>(g.N) * g.P * g.Q * g.K;
  return (halves * 2 + 15) / 16 * 16;
}
inline int64_t workspace_bytes(const Problem& g, const Split& sp) {
  return copies_bytes(g) + static_cast<int64_t>(sp.splits) * g.K * g.rsc() * 4;
}

// Why rung 4b hands a call on to rung 4, implicit_gemm_nhwc (which computes forward and stride-1
// backward_data itself, and hands the rest to rungs 3b and 3); nullptr: rung 4b computes it. cc is
// the GPU's compute capability, loaded_arch the virtual architecture of the kernel code the driver
// loaded for it (both 0 when unknown), slots the blocks of the kernel it holds at once (split_for: the
// split, and so the workspace, depend on it). A pure function, so that a CPU test pins which calls the rung computes.
inline const char* hand_off_reason(const ConvArgs& a, int cc, int loaded_arch, int64_t slots) {
  if (a.pass != ConvPass::backward_weight) return "forward and backward_data (rung 4 computes those)";
  if (a.C % 8 != 0) return "an input channel count that is not a multiple of 8";
  if (a.K % 8 != 0) return "an output channel count that is not a multiple of 8";
  if (cc != 0 && cc < 80) return "a GPU below compute capability 8.0 (cp.async, 68 KiB of shared memory)";
  if (loaded_arch != 0 && loaded_arch < 80) return "a build without code for compute capability 8.0 or newer";
  // 32-bit sizes: Problem's fields, the reduction index j (which a RowCursor carries up to 2 * kBK past
  // the reduction's end), the column index and a row's offsets.
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const int64_t P = a.P(), Q = a.Q();
  if (std::max({a.N, a.K, a.C, a.H, a.W, P, Q, a.R, a.S, a.stride_h, a.stride_w, a.pad_h, a.pad_w}) > kMax ||
      a.K * a.C * a.R * a.S > kMax || a.C * a.H * a.W > kMax || a.K * P * Q > kMax || a.N * P * Q > kMax - 2 * kBK ||
      P * a.stride_h + a.R > kMax || Q * a.stride_w + a.S > kMax)
    return "tensors past 32-bit sizes";
  if ((a.K + kBM - 1) / kBM > 65535) return "more than 65535 row tiles";
  const Problem g = problem_for(a);
  if (workspace_bytes(g, split_for(g, slots)) > kMaxWorkspaceBytes)
    return "NHWC copies and partial sums above 256 MiB";
  return nullptr;
}

// How many calls rung 4b has computed itself (not handed on), for the GPU tests: a hand-off is not
// wrong, only not this rung, so a test of the rung checks that it really ran.
inline std::atomic<int64_t>& calls_computed() {
  static std::atomic<int64_t> n{0};
  return n;
}

// ---- the kernel's gathers ------------------------------------------------------------------------------

// Which row (reduction index within the K step) and which 8-value vector of that row thread t copies
// in its i-th copy of each tile: 16 consecutive threads cover one 256-byte row. kThreads is a multiple
// of 16, so a thread's vector (its tile columns) is the same in every copy.
struct TileVec {
  int row, vec;
};
HL_HOST_DEVICE TileVec tile_vec(int thread, int i) {
  const int e = thread + i * kThreads;
  return TileVec{e / kVecsPerRow, e % kVecsPerRow};
}

// One tile column vector: the 8 GEMM columns [col, col + 8) are channels c0..c0+7 of filter tap (r, s).
struct Column {
  int r, s, c0;
  bool ok;  // past R*S*C (the last column tile's padding): zeros
};
HL_HOST_DEVICE Column make_column(const Problem& g, int col) {
  Column c{0, 0, 0, col < g.rsc()};
  if (c.ok) {
    const int tap = col / g.C;
    c.c0 = col - tap * g.C;
    c.r = tap / g.S;
    c.s = tap - c.r * g.S;
  }
  return c;
}

// A reduction index j = (n, p, q) as a thread walks it: each thread copies the same rows of every stage,
// so its indices advance by kBK from one stage to the next. Written as the digits of j in the mixed
// radix (N, P, Q), that is an addition with carries (advance), and the K loop has no division in it:
// the two divisions per row that decomposing j afresh costs were about 50 instructions each in the
// sm_90 machine code, four times per stage (bench/results/sass_conv_wgrad_2026-11-26.txt).
struct RowCursor {
  int j, n, p, q;
};
HL_HOST_DEVICE RowCursor cursor_at(const Problem& g, int j) {
  const int pq = g.P * g.Q;
  const int n = j / pq, rem = j - n * pq;
  const int p = rem / g.Q;
  return RowCursor{j, n, p, rem - p * g.Q};
}
// The stride `step` (kBK in the kernel) as digits, decomposed once per block.
struct Stride {
  int step, dn, dp, dq;
};
HL_HOST_DEVICE Stride stride_of(const Problem& g, int step) {
  const int a = step / g.Q;
  return Stride{step, a / g.P, a - (a / g.P) * g.P, step - a * g.Q};
}
// c.j += d.step, digit by digit: q + dq < 2Q and p + dp + 1 < 2P, so each carry is one subtraction.
HL_HOST_DEVICE void advance(const Problem& g, const Stride& d, RowCursor& c) {
  c.j += d.step;
  c.q += d.dq;
  c.p += d.dp;
  c.n += d.dn;
  if (c.q >= g.Q) {
    c.q -= g.Q;
    ++c.p;
  }
  if (c.p >= g.P) {
    c.p -= g.P;
    ++c.n;
  }
}

// One reduction index of a stage: where its dY row starts, where its image starts in x, and the
// top-left corner of its input window.
struct Row {
  int64_t dy_base;  // j * K
  int64_t x_base;   // n * H * W * C
  int y0, x0;       // p * sh - ph, q * sw - pw
  bool ok;          // past the slice's end (or the reduction's): zeros
};
HL_HOST_DEVICE Row row_at(const Problem& g, const RowCursor& c, int j_end) {
  Row r{0, 0, 0, 0, c.j < j_end};
  if (r.ok) {
    r.dy_base = static_cast<int64_t>(c.j) * g.K;
    r.x_base = static_cast<int64_t>(c.n) * g.H * g.W * g.C;
    r.y0 = c.p * g.sh - g.ph;  // hand_off_reason keeps P * sh + R below 2^31
    r.x0 = c.q * g.sw - g.pw;
  }
  return r;
}

// Where the 8 output channels [m, m + 8) of reduction row `row` start in dYh, or -1 (zeros) past K
// or past the slice. K is a multiple of 8: a vector is wholly inside or wholly outside.
HL_HOST_DEVICE int64_t dy_index(const Problem& g, const Row& row, int m) {
  if (!row.ok || m >= g.K) return -1;
  return row.dy_base + m;
}

// Where the 8 channels of column vector `col` for reduction row `row` start in xh, or -1 (zeros) where
// the tap falls in the padding, past R*S*C or past the slice.
HL_HOST_DEVICE int64_t x_index(const Problem& g, const Row& row, const Column& col) {
  if (!row.ok || !col.ok) return -1;
  const int y = row.y0 + col.r, x = row.x0 + col.s;
  if (y < 0 || y >= g.H || x < 0 || x >= g.W) return -1;
  return row.x_base + (static_cast<int64_t>(y) * g.W + x) * g.C + col.c0;
}

// ---- the second pass ------------------------------------------------------------------------------------

// The partial tiles are in the GEMM's order, [k][(r, s, c)]; the framework's weight gradient is
// [K][C][R][S]. Element i of a partial slice goes to dw[kcrs_index(g, i)].
HL_HOST_DEVICE int64_t kcrs_index(const Problem& g, int64_t i) {
  const int64_t k = i / g.rsc();
  const int col = static_cast<int>(i - k * g.rsc());
  const int tap = col / g.C, c = col - tap * g.C;
  return (k * g.C + c) * (g.R * g.S) + tap;
}

}  // namespace hl::kernels::cuda::nhwc_wgrad
