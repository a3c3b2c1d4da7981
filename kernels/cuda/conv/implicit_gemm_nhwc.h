// The address arithmetic of implicit_gemm_nhwc.cu (rung 4 of the convolution ladder): where each
// 8-channel vector of the gathered operand comes from, where each weight row starts, where each
// output element goes, and the two layout changes that feed the kernel. Plain C++ with host/device
// functions (HL_HOST_DEVICE), so that the kernels call exactly this code and a CPU test
// (tests/kernels/test_conv_nhwc_index.cpp) walks the same tiles without a GPU.
//
// The rung computes one kind of problem, a forward convolution over an NHWC input,
//   out[n, m, p, q] (NCHW) = sum over r, s, c of in[n, p*sh + r - ph, q*sw + s - pw, c] * wt[m, r, s, c],
// and both passes it takes are that problem:
//   forward         in = x as NHWC, wt = w as KRSC (w is KCRS), m = output channel k.
//   backward_data   (stride 1) dx = the convolution of dy with the weights flipped and transposed:
//                   in = dy as NHWC ([N, P, Q, K]), wt[c, r, s, k] = w[k, c, R-1-r, S-1-s], m = c,
//                   padding R-1-ph and S-1-pw, and the output's P x Q is H x W.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "kernels/conv.h"
#include "kernels/half.h"  // HL_HOST_DEVICE
#include "kernels/tuning_hook.h"

namespace hl::kernels::cuda::nhwc {

// Tile sizes (the kernel file says why): 128 output channels x 128 output positions per block, the
// reduction in steps of 32 (one filter tap's 32 channels), 8 warps of 64 x 32, a 4-stage cp.async ring.
inline constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;
inline constexpr int kWarpsM = 2, kWarpsN = 4;
inline constexpr int kLdA = kBK + 8;  // A stage: [kBM][kLdA] weights, K contiguous (16-byte padded rows)
inline constexpr int kLdB = kBK + 8;  // B stage: [kBN][kLdB] gathered inputs, K contiguous
inline constexpr int kLdC = kBN + 4;  // the epilogue's FP32 staging tile [kBM][kLdC], in the dead ring
inline constexpr int kStageElems = kBM * kLdA + kBN * kLdB;
inline constexpr int kRingBytes = kStages * kStageElems * 2;
inline constexpr int kCBytes = kBM * kLdC * 4;
inline constexpr int kSmemBytes = kRingBytes > kCBytes ? kRingBytes : kCBytes;
inline constexpr int kVecsPerRow = kBK / 8;  // 16-byte vectors per tile row
static_assert((kBM * kVecsPerRow) % kThreads == 0 && (kBN * kVecsPerRow) % kThreads == 0,
              "every thread copies the same number of vectors of each tile");
inline constexpr int kAVecs = kBM * kVecsPerRow / kThreads, kBVecs = kBN * kVecsPerRow / kThreads;

// The convolution the kernel computes (see the top of the file), all sizes per call.
struct Problem {
  int N, H, W, C;  // the gathered input, NHWC
  int M;           // output channels
  int R, S, sh, sw, ph, pw;
  int P, Q;        // output positions
  HL_HOST_DEVICE int64_t cols() const { return static_cast<int64_t>(N) * P * Q; }  // GEMM columns: (n, p, q)
  HL_HOST_DEVICE int kred() const { return R * S * C; }  // GEMM reduction: (r, s, c), c fastest
};

// The most workspace the NHWC copies may take (N*H*W*C + K*C*R*S halves; VGG-small at batch 128 needs
// 17 MB): the buffer is grow-only and never given back, so a larger call is handed on instead.
inline constexpr int64_t kMaxWorkspaceBytes = int64_t{256} << 20;

// Why rung 4 hands a call to rung 3, implicit_gemm_wmma (nullptr: it computes the call itself). cc is
// the GPU's compute capability and loaded_arch the virtual architecture of the kernel code the driver
// loaded for it (both 0 when unknown, e.g. without a GPU). A pure function, so that a CPU test pins
// which calls the rung computes (tests/kernels/test_conv_nhwc_index.cpp).
inline const char* hand_off_reason(const ConvArgs& a, int cc, int loaded_arch) {
  if (a.pass == ConvPass::backward_weight) return "backward_weight";
  const bool bwd = a.pass == ConvPass::backward_data;
  if (bwd && (a.stride_h != 1 || a.stride_w != 1)) return "backward_data with a stride above 1";
  if (bwd && (a.pad_h > a.R - 1 || a.pad_w > a.S - 1)) return "backward_data with a padding past the filter";
  if ((bwd ? a.K : a.C) % kBK != 0) return "a channel count that is not a multiple of 32";
  if (cc != 0 && cc < 80) return "a GPU below compute capability 8.0 (cp.async, 80 KiB of shared memory)";
  // The kernel's body exists only where it was compiled for sm_80 or newer: a build for older
  // architectures alone would run its empty version by JIT on an Ampere GPU and leave the output
  // unwritten (mma_sync.cu checks the same).
  if (loaded_arch != 0 && loaded_arch < 80) return "a build without code for compute capability 8.0 or newer";
  // 32-bit per-image sizes and tile counts (Problem's fields are ints), the same bounds as rung 3's.
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  const int64_t P = a.P(), Q = a.Q();
  if (std::max({a.N, a.K, a.C, a.H, a.W, P, Q, a.R, a.S, a.stride_h, a.stride_w, a.pad_h, a.pad_w}) > kMax ||
      a.K * a.C * a.R * a.S > kMax || a.C * a.H * a.W > kMax || a.K * P * Q > kMax)
    return "tensors past 32-bit per-image sizes";
  if ((std::max(a.K, a.C) + kBM - 1) / kBM > 65535) return "more than 65535 row tiles";
  if ((a.N * std::max(P * Q, a.H * a.W) + kBN - 1) / kBN > kMax) return "more than 2^31 - 1 column tiles";
  const int64_t gathered = bwd ? a.N * a.K * P * Q : a.N * a.C * a.H * a.W;
  if ((gathered + a.K * a.C * a.R * a.S) * 2 > kMaxWorkspaceBytes) return "NHWC copies above 256 MiB";
  return nullptr;
}

// How many calls rung 4 has computed itself (not handed on), for the GPU tests: a hand-off is not
// wrong, only not this rung, so a test of the rung checks that it really ran.
inline std::atomic<int64_t>& calls_computed() {
  static std::atomic<int64_t> n{0};
  return n;
}

// The problem of a pass (forward, or backward_data with stride 1; unsupported() checks).
inline Problem problem_for(const ConvArgs& a) {
  Problem g;
  const bool bwd = a.pass == ConvPass::backward_data;
  g.N = static_cast<int>(a.N);
  g.H = static_cast<int>(bwd ? a.P() : a.H);
  g.W = static_cast<int>(bwd ? a.Q() : a.W);
  g.C = static_cast<int>(bwd ? a.K : a.C);
  g.M = static_cast<int>(bwd ? a.C : a.K);
  g.R = static_cast<int>(a.R);
  g.S = static_cast<int>(a.S);
  g.sh = bwd ? 1 : static_cast<int>(a.stride_h);
  g.sw = bwd ? 1 : static_cast<int>(a.stride_w);
  g.ph = static_cast<int>(bwd ? a.R - 1 - a.pad_h : a.pad_h);
  g.pw = static_cast<int>(bwd ? a.S - 1 - a.pad_w : a.pad_w);
  g.P = static_cast<int>(bwd ? a.H : a.P());
  g.Q = static_cast<int>(bwd ? a.W : a.Q());
  return g;
}

// ---- the layout changes (one thread per destination element) -------------------------------------------

// Element i of the NHWC copy of an NCHW tensor [N, C, H, W]: its index in the NCHW source.
HL_HOST_DEVICE int64_t nhwc_source(int64_t i, int C, int H, int W) {
  const int c = static_cast<int>(i % C);
  const int64_t pix = i / C;  // n * H * W + h * W + w
  const int64_t hw = static_cast<int64_t>(H) * W;
  const int64_t n = pix / hw, yx = pix % hw;
  return (n * C + c) * hw + yx;
}

// ---- the tiled layout change (2026-11-28, written without a GPU; opt-in until a GPU has run it) ---------
// The copy above gives each thread one destination element, so a warp writes 32 consecutive channels
// of one pixel (64 contiguous bytes) but reads them H*W halves apart: 32 sectors for 64 useful bytes.
// Nsight Compute on the H100 (2026-11-27) found the loads using 2.0 of each sector's 32 bytes, and the
// two copies of rung 4b's 256->256 weight gradient took 38.6 us of the call's 115.4, where moving 8 MiB
// at the copy bandwidth takes about 2.5. Each element also costs four 64-bit divisions (nhwc_source).
// The tiled copy is the classic transpose through shared memory: a block of 32 x 8 threads moves a
// tile of 32 channels x 32 pixels of one image ([C][H*W] -> [H*W][C]). It reads the tile row by row
// (a warp: 32 consecutive pixels of one channel), and writes it column by column (a warp: 32
// consecutive channels of one pixel), so both sides move whole 64-byte runs, and the only index
// arithmetic is the tile's corner. The grid is pixel tiles x channel tiles x images, the images in
// steps of gridDim.z (at most 65535 of them in flight).
inline constexpr int kLayoutTile = 32;                            // channels and pixels per tile
inline constexpr int kLayoutRows = 8;                             // threadIdx.y: each thread moves 4 elements
inline constexpr int kLayoutSteps = kLayoutTile / kLayoutRows;    // 4
inline constexpr int kLayoutPitch = kLayoutTile + 2;              // halves per shared row (why: above layout_read)
inline constexpr int64_t kLayoutMaxGridZ = 65535;

// The tiled copy is not yet the default: it was written without a GPU (kernels/cuda/conv/README.md,
// "The layout change, tiled"). The tests and `bench/conv_bench --tiled-layout` force it through the hook.
inline constexpr bool kTiledLayoutChangeIsDefault = false;

// The hook: -1, the rungs' own choice (kTiledLayoutChangeIsDefault; what training and the tests'
// default runs get), or 0 / 1 to force the per-element copy or the tiled one for one scope.
inline std::atomic<int>& tiled_layout_change_for_tuning() {
  static std::atomic<int> forced{-1};
  return forced;
}
inline bool tiled_layout_change_chosen() {
  return chosen_by_hook(tiled_layout_change_for_tuning(), kTiledLayoutChangeIsDefault);
}
class ScopedTiledLayoutChange : public ScopedHook<int> {
 public:
  explicit ScopedTiledLayoutChange(bool enabled) : ScopedHook(tiled_layout_change_for_tuning(), enabled ? 1 : 0) {}
};

// The tiled copy's grid for N images of C channels and HW pixels; z_cap: the most images in flight
// (kLayoutMaxGridZ on a GPU; the CPU test passes less, to walk the loop over images cheaply). x is
// 0 when the tiles do not fit a grid (more than 2^31 - 1 pixel tiles or 65535 channel tiles): the
// per-element copy then does the work.
struct LayoutGrid {
  int64_t x, y, z;
};
inline LayoutGrid layout_grid(int64_t N, int64_t C, int64_t HW, int64_t z_cap = kLayoutMaxGridZ) {
  const int64_t x = (HW + kLayoutTile - 1) / kLayoutTile, y = (C + kLayoutTile - 1) / kLayoutTile;
  if (x > std::numeric_limits<int>::max() || y > 65535) return LayoutGrid{0, 0, 0};
  return LayoutGrid{x, y, std::min(N, z_cap)};
}

// Step k (< kLayoutSteps) of thread (tx, ty) in tile (bx, by): the element it moves and its place in
// the shared tile [channel][pixel]. Reading, a warp (one ty) takes one channel row and 32 consecutive
// pixels; writing, it takes one pixel column and 32 consecutive channels. The rows of the shared tile
// are kLayoutPitch = 34 halves (68 bytes, 17 banks) apart, so the 32 rows a warp reads in one column
// fall in 32 different banks; with 32 halves (16 banks) they would fall in 2.
struct LayoutStep {
  int c;       // channel
  int64_t p;   // pixel, h * W + w
  int row, col;  // tile[row][col]: row = c - c0, col = p - p0
};
HL_HOST_DEVICE LayoutStep layout_read(int64_t bx, int64_t by, int tx, int ty, int k) {
  const int row = ty + kLayoutRows * k, col = tx;
  return LayoutStep{static_cast<int>(by * kLayoutTile) + row, bx * kLayoutTile + col, row, col};
}
HL_HOST_DEVICE LayoutStep layout_write(int64_t bx, int64_t by, int tx, int ty, int k) {
  const int row = tx, col = ty + kLayoutRows * k;
  return LayoutStep{static_cast<int>(by * kLayoutTile) + row, bx * kLayoutTile + col, row, col};
}

// Element i of wt ([M][R][S][C], c fastest): its index in the weight tensor w [K][C][R][S].
//   forward:        wt[k, r, s, c] = w[k, c, r, s]               (M = K, C = C)
//   backward_data:  wt[c, r, s, k] = w[k, c, R-1-r, S-1-s]       (M = C, "C" = K)
template <bool kBackwardData>
HL_HOST_DEVICE int64_t weight_source(int64_t i, const Problem& g) {
  const int ch = static_cast<int>(i % g.C);  // the reduction channel: c forward, k backward_data
  const int64_t rest = i / g.C;
  const int s = static_cast<int>(rest % g.S);
  const int64_t rest2 = rest / g.S;
  const int r = static_cast<int>(rest2 % g.R);
  const int64_t m = rest2 / g.R;  // the output channel: k forward, c backward_data
  const int64_t RS = static_cast<int64_t>(g.R) * g.S;
  if constexpr (kBackwardData) {
    // w[ch = k][m = c][R-1-r][S-1-s]; w has g.M (= C) channels per filter
    return ((static_cast<int64_t>(ch) * g.M + m) * g.R + (g.R - 1 - r)) * g.S + (g.S - 1 - s);
  } else {
    return (m * g.C + ch) * RS + static_cast<int64_t>(r) * g.S + s;
  }
}

// ---- the kernel's gathers ------------------------------------------------------------------------------

// One GEMM column (an output position), decomposed once per kernel: where its image starts in the
// NHWC input, the first input row and column of its window, and where it goes in the NCHW output.
struct Column {
  int64_t in_base;   // n * H * W * C
  int y0, x0;        // p * sh - ph, q * sw - pw
  int64_t out_base;  // n * M * P * Q + p * Q + q; output channel m adds m * P * Q
  bool ok;           // a column past N * P * Q (the last tile's padding) gathers and writes nothing
};

HL_HOST_DEVICE Column make_column(const Problem& g, int64_t col) {
  Column c{0, 0, 0, 0, false};
  if (col >= g.cols()) return c;
  const int64_t pq = static_cast<int64_t>(g.P) * g.Q;
  const int64_t n = col / pq, rem = col % pq;
  const int p = static_cast<int>(rem / g.Q), q = static_cast<int>(rem % g.Q);
  c.in_base = n * g.H * g.W * g.C;
  // In 64 bits: p * sh can pass 2^31 even where p * sh - ph (what is kept) fits in an int.
  c.y0 = static_cast<int>(static_cast<int64_t>(p) * g.sh - g.ph);
  c.x0 = static_cast<int>(static_cast<int64_t>(q) * g.sw - g.pw);
  c.out_base = n * g.M * pq + rem;
  c.ok = true;
  return c;
}

// The filter tap and first channel of the K step that starts at reduction index k0 (a multiple of
// kBK; C is a multiple of kBK, so the whole step lies in one tap): the same for every thread.
struct Step {
  int r, s, c0;
};
HL_HOST_DEVICE Step make_step(const Problem& g, int k0) {
  const int tap = k0 / g.C;
  return Step{tap / g.S, tap % g.S, k0 - tap * g.C};
}

// Where the 8 channels [c0 + 8v, c0 + 8v + 8) of column `col` for step `st` start in the NHWC input,
// or -1 where the tap falls in the padding (or the column past the end): the vector is 8 zeros.
HL_HOST_DEVICE int64_t gather_index(const Problem& g, const Column& col, const Step& st, int v) {
  const int y = col.y0 + st.r, x = col.x0 + st.s;
  if (!col.ok || y < 0 || y >= g.H || x < 0 || x >= g.W) return -1;
  return col.in_base + (static_cast<int64_t>(y) * g.W + x) * g.C + st.c0 + 8 * v;
}

// Where the 8 weights [k0 + 8v, k0 + 8v + 8) of output channel m start in wt, or -1 past M.
HL_HOST_DEVICE int64_t weight_index(const Problem& g, int m, int k0, int v) {
  if (m >= g.M) return -1;
  return static_cast<int64_t>(m) * g.kred() + k0 + 8 * v;
}

// Which rows (A: output channels) or columns (B: output positions) of the tile, and which 8-channel
// vector of the K step, thread t copies in its j-th copy: consecutive threads take consecutive
// vectors of a row, so a warp moves 8 whole 64-byte rows.
struct TileVec {
  int row, vec;
};
HL_HOST_DEVICE TileVec tile_vec(int thread, int j) {
  const int e = thread + j * kThreads;
  return TileVec{e / kVecsPerRow, e % kVecsPerRow};
}

// Where output element (m, column) goes in the NCHW output: column's out_base + m * P * Q.
HL_HOST_DEVICE int64_t output_index(const Problem& g, const Column& col, int m) {
  return col.out_base + static_cast<int64_t>(m) * g.P * g.Q;
}

}  // namespace hl::kernels::cuda::nhwc

#if defined(__CUDACC__)
#include <cuda_fp16.h>

namespace hl::kernels::cuda::nhwc {
// dst (NHWC) = src (NCHW [N, C, H, W]), n = N*C*H*W halves, queued on the halfling stream: the layout
// change of rung 4 (implicit_gemm_nhwc.cu), which rung 4b (implicit_gemm_nhwc_wgrad.cu) also runs.
void copy_nchw_to_nhwc(const __half* src, __half* dst, int64_t n, int C, int H, int W);
}  // namespace hl::kernels::cuda::nhwc
#endif
