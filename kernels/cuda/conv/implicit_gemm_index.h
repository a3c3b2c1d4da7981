// The address arithmetic of implicit_gemm_wmma.cu: which element of x, dy or w each entry of the
// virtual GEMM operands is, and where each output element goes. Plain C++ with host/device
// functions (HL_HOST_DEVICE), so that the kernels call exactly this code and a CPU test
// (tests/kernels/test_conv_implicit_index.cpp) can walk the same tiles without a GPU.
#pragma once
#include <cstdint>

#include "kernels/conv.h"
#include "kernels/divisor.h"
#include "kernels/half.h"
#include "kernels/wave_split.h"

namespace hl::kernels::cuda::igemm {

// Tile sizes (see the kernel file for why).
inline constexpr int kBM = 64;    // output rows (channels) per block
inline constexpr int kBN = 128;   // output columns (positions) per block
inline constexpr int kBK = 32;    // reduction step
inline constexpr int kThreads = 256;
inline constexpr int kLdA = kBK + 8;  // padded shared-memory row lengths (halves, halves, floats)
inline constexpr int kLdB = kBN + 8;
inline constexpr int kLdC = kBN + 4;
inline constexpr int kTileBytes = (kBM * kLdA + kBK * kLdB) * 2;
inline constexpr int kCBytes = kBM * kLdC * 4;
inline constexpr int kSmemBytes = kTileBytes > kCBytes ? kTileBytes : kCBytes;

static_assert(kThreads == 256 && kBM == 64 && kBN == 128 && kBK == 32,
              "the loaders' thread-to-element maps assume these sizes");

inline constexpr int kLdBt = kBK + 8;  // column-major B tile: each column's 32 reduction values, padded


// The GEMM as the kernel sees it. "gathered" is the tensor the B loader reads (x forward, dy
// backward_data), "out" the output tensor; all per-image sizes fit in 32 bits (unsupported() checks).
// Every size that an index is divided by also comes as a Divisor (kernels/divisor.h), made on the
// host: a multiply and a shift on the GPU instead of an integer division of about 20 instructions,
// with the same quotient.
struct Geometry {
  int M;          // GEMM rows: K (forward) or C (backward_data)
  int64_t cols;   // GEMM columns: N*P*Q or N*H*W
  int kred;       // reduction length: C*R*S or K*R*S
  int RS, S;
  int a_stride_m, a_stride_ch;  // weight element (row m, reduction (ch, rs)) = w[ch*a_stride_ch + m*a_stride_m + rs]
  int col_hw, col_w;            // output positions per image, and per output row
  int g_img, g_ch, g_h, g_w;    // gathered tensor: elements per image and per channel, height, width
  int sh, sw, ph, pw;
  int out_img;                  // output elements per image
  Divisor RS_div, S_div, col_hw_div, col_w_div, sh_div, sw_div;  // RS, S, col_hw, col_w, sh, sw
};

// ---- the address arithmetic of the virtual matrices ------------------------------------------------
// Host and device functions, so that the index math can also be exercised on the CPU; the kernel
// below calls exactly these.

// One column of the virtual B matrix (an output position for forward, an input position for
// backward_data), decomposed once per kernel.
//   forward:        column (n, p, q): y, x = first input row/column of its window, p*sh - ph, q*sw - pw
//   backward_data:  column (n, h, w): y, x = h + ph, w + pw, from which each tap's p, q follow
struct Column {
  int64_t base;  // offset of image n in the gathered tensor
  int y, x;
  int64_t off;   // base + y * width + x: where tap (0, 0) of channel 0 would be (the tap table adds the rest)
  bool ok;       // inside the GEMM (columns past N*P*Q resp. N*H*W are padding of the last tile)
};

template <bool kBackwardData>
HL_HOST_DEVICE Column make_column(const Geometry& g, int64_t col) {
  Column c;
  c.ok = col < g.cols;
  const int64_t cc = c.ok ? col : 0;
  const int64_t img = divide(cc, g.col_hw_div);
  const int rem = static_cast<int>(cc - img * g.col_hw);
  const int oy = divide(rem, g.col_w_div), ox = rem - oy * g.col_w;
  c.base = img * g.g_img;
  if (kBackwardData) {
    c.y = oy + g.ph;
    c.x = ox + g.pw;
  } else {
    c.y = oy * g.sh - g.ph;
    c.x = ox * g.sw - g.pw;
  }
  c.off = c.base + static_cast<int64_t>(c.y) * g.g_w + c.x;
  return c;
}

// One reduction index kk = (ch, r, s) (ch = c forward, k backward_data), decomposed once per K step:
// rung 3's loaders do this for 5 indices per thread and step, which is why its two divisions go
// through Divisors (kernels/divisor.h).
struct Tap {
  int ch, rs, r, s;
  bool ok;  // kk < C*R*S (resp. K*R*S): rows past it are padding of the last K step
};

HL_HOST_DEVICE Tap make_tap(const Geometry& g, int kk) {
  Tap t{0, 0, 0, 0, kk < g.kred};
  if (t.ok) {
    t.ch = divide(kk, g.RS_div);
    t.rs = kk - t.ch * g.RS;
    t.r = divide(t.rs, g.S_div);
    t.s = t.rs - t.r * g.S;
  }
  return t;
}

// backward_data with a stride above 1: where dy[n, k, p, q] for column (n, h, w) and tap (k, r, s)
// lives, or -1 for a zero: p = (h + ph - r) / sh must be whole and inside [0, P), and the same for q
// (three taps in four of a stride-2 layer fall between two strided outputs: zeros). Forward and
// stride-1 backward_data gather through a tap's offsets instead (offset_gather_index, below), which
// need no division at all. As `%` and `/` by the run-time stride, these were four integer divisions
// of tens of instructions each per gathered element (before the stride-1 path existed they made
// backward_data twice as slow as forward on an H200: 0.68 ms against 0.34 ms, VGG-small 64 -> 64);
// since 2026-11-28 they are two Divisor quotients, and the conditions are combined with `&` so that
// the load is predicated rather than branched around (as in wgrad_x_index).
HL_HOST_DEVICE int64_t strided_gather_index(const Geometry& g, const Column& c, const Tap& t) {
  const int y = c.y - t.r, x = c.x - t.s;  // p * sh and q * sw, when whole
  // Negative y or x are refused below; dividing 0 in their place keeps every product in range.
  const int py = divide(y < 0 ? 0 : y, g.sh_div), px = divide(x < 0 ? 0 : x, g.sw_div);
  const bool inside = c.ok & t.ok & (y >= 0) & (x >= 0) & (py * g.sh == y) & (px * g.sw == x) & (py < g.g_h) &
                      (px < g.g_w);
  return inside ? c.base + static_cast<int64_t>(t.ch) * g.g_ch + static_cast<int64_t>(py) * g.g_w + px : -1;
}

// Where A[m, kk] lives in w ([K, C, R, S]), or -1 past the edges.
HL_HOST_DEVICE int64_t weight_index(const Geometry& g, int m, const Tap& t) {
  if (!t.ok || m >= g.M) return -1;
  return static_cast<int64_t>(t.ch) * g.a_stride_ch + static_cast<int64_t>(m) * g.a_stride_m + t.rs;
}

// ---- a tap's offsets (forward, and backward_data with stride 1) -----------------------------------
// A reduction index's place in the gathered tensor does not depend on the column: relative to a
// column's Column::off it is ch * (plane size) + dy * width + dx, and in the weights ch * a_stride_ch
// + rs. With these offsets, gathering an element costs two adds, two compares and one add, where
// strided_gather_index multiplies out the whole address for each of the thread's 4 columns. Rung 3 computes
// them for each of its 5 taps per K step (make_tap_offsets: two Divisor quotients and a few
// multiply-adds); rung 3b computes them once per call into a table (below) and reads them back.
template <class Off>
struct TapOffsets {
  Off b_off;   // ch * (plane size) + dy * width + dx: added to Column::off
  int dy, dx;  // the input row/column relative to the column's (c.y, c.x): +r, +s forward, -r, -s backward_data
  int a_off;   // ch * a_stride_ch + rs: added to m * a_stride_m for the weight
};

// In 64 bits: rung 3 has no table, and no limit on how far a tap reaches (large padding lets R pass H).
template <bool kBackwardData>
HL_HOST_DEVICE TapOffsets<int64_t> make_tap_offsets(const Geometry& g, int kk) {
  const Tap t = make_tap(g, kk);
  const int dy = kBackwardData ? -t.r : t.r, dx = kBackwardData ? -t.s : t.s;
  const int64_t b_off = static_cast<int64_t>(t.ch) * g.g_ch + static_cast<int64_t>(dy) * g.g_w + dx;
  return TapOffsets<int64_t>{b_off, dy, dx, t.ch * g.a_stride_ch + t.rs};
}

// ---- the tap table (rung 3b) -----------------------------------------------------------------------
// Before the Divisors (2026-11-28), make_tap's two integer divisions by run-time values (kk / RS,
// rs / S) were tens of instructions each, and measured on an H200 the address arithmetic, not the
// Tensor Cores, set rung 3's pace (about 30 TFLOP/s on every VGG-small layer). Rung 3b's answer: the
// decomposition is done once per call, by a small kernel, into a table of one 16-byte entry per
// reduction index, and the loaders read it back (L1/L2-resident: 9 KiB per 576 taps).
using TapEntry = TapOffsets<int>;

// The offsets are computed in 64 bits and stored in 32: implicit_gemm_table's unsupported() refuses
// the shapes whose taps reach further than 2^31 - 1 elements (tap_table_fits below).
template <bool kBackwardData>
HL_HOST_DEVICE TapEntry make_tap_entry(const Geometry& g, int kk) {
  const TapOffsets<int64_t> t = make_tap_offsets<kBackwardData>(g, kk);
  return TapEntry{static_cast<int>(t.b_off), t.dy, t.dx, t.a_off};
}

// Whether every TapEntry::b_off of a forward (gathering x: C planes of H x W, taps +r, +s) or a
// backward_data (gathering dy: K planes of P x Q, taps -r, -s) convolution fits in an int. The
// per-image limits of unsupported() bound ch * plane; the taps' reach, (R - 1) rows of the gathered
// width, is bounded only by this (large padding lets R exceed H).
inline bool tap_table_fits(int64_t planes, int64_t height, int64_t width, int64_t R, int64_t S, bool backward_data) {
  constexpr int64_t kMax = 2147483647;
  const int64_t reach = (R - 1) * width + (S - 1);
  return backward_data ? reach <= kMax : (planes - 1) * height * width + reach <= kMax;
}

// gather_index through a tap's offsets (forward, or backward_data with stride 1); tap_ok: kk < kred.
template <class Off>
HL_HOST_DEVICE int64_t offset_gather_index(const Geometry& g, const Column& c, const TapOffsets<Off>& t, bool tap_ok) {
  const int y = c.y + t.dy, x = c.x + t.dx;
  if (!c.ok || !tap_ok || static_cast<unsigned>(y) >= static_cast<unsigned>(g.g_h) ||
      static_cast<unsigned>(x) >= static_cast<unsigned>(g.g_w))
    return -1;
  return c.off + t.b_off;
}

// weight_index through a tap's offsets.
template <class Off>
HL_HOST_DEVICE int64_t offset_weight_index(const Geometry& g, int m, const TapOffsets<Off>& t, bool tap_ok) {
  if (!tap_ok || m >= g.M) return -1;
  return static_cast<int64_t>(m) * g.a_stride_m + t.a_off;
}

// Where column col of the output goes in NCHW (y forward, dx backward_data): row m of the column is
// at the returned offset + m * col_hw. -1 for columns past the GEMM. One division per column, so
// the epilogue computes it once per thread, not per element.
HL_HOST_DEVICE int64_t output_column(const Geometry& g, int64_t col) {
  if (col >= g.cols) return -1;
  const int64_t img = divide(col, g.col_hw_div);
  return img * g.out_img + (col - img * g.col_hw);
}

// Where output element (m, col) goes, or -1 outside.
HL_HOST_DEVICE int64_t output_index(const Geometry& g, int m, int64_t col) {
  if (m >= g.M || col >= g.cols) return -1;
  return output_column(g, col) + static_cast<int64_t>(m) * g.col_hw;
}

struct WGeometry {
  int K, crs, RS, S;
  int64_t npq;      // reduction length N*P*Q
  int64_t split;    // reduction positions per blockIdx.z (a multiple of kBK)
  int PQ, Q, HW, H, W;
  int sh, sw, ph, pw;
  int64_t x_img, dy_img;  // C*H*W and K*P*Q
  Divisor RS_div, S_div, PQ_div, Q_div;  // as Geometry's (kernels/divisor.h)
};

// Reduction index j = (n, p, q), decomposed once per K step and shared by the A and B loads.
struct WRow {
  int64_t dy_base;  // offset of image n in dy
  int64_t x_off;    // n * C*H*W + h0 * W + w0: where tap (0, 0) of channel 0 would be in x (a WCol adds the rest)
  int pq, h0, w0;   // p*Q + q; the window's first input row and column
  bool ok;          // j inside this block's slice of the reduction
};

HL_HOST_DEVICE WRow make_wrow(const WGeometry& g, int64_t j, int64_t j_end) {
  WRow r{0, 0, 0, 0, 0, j < j_end};
  if (r.ok) {
    const int64_t n = divide(j, g.PQ_div);  // 64-bit: N*P*Q may pass 2^32
    r.pq = static_cast<int>(j - n * g.PQ);
    const int p = divide(r.pq, g.Q_div), q = r.pq - p * g.Q;
    r.dy_base = n * g.dy_img;
    r.h0 = p * g.sh - g.ph;
    r.w0 = q * g.sw - g.pw;
    r.x_off = n * g.x_img + static_cast<int64_t>(r.h0) * g.W + r.w0;
  }
  return r;
}

// Output column (c, r, s) of dW, decomposed once per block. As with the forward pass's TapOffsets,
// the column's place relative to a WRow's x_off does not depend on the row, so the block works it out
// once and each gathered element costs an add and two bounds checks.
struct WCol {
  int64_t off;  // c*H*W + r*W + s: added to WRow::x_off (64-bit: large padding lets r*W pass 2^31)
  int r, s;     // the tap
  bool ok;
};

HL_HOST_DEVICE WCol make_wcol(const WGeometry& g, int crs) {
  WCol w{0, 0, 0, crs < g.crs};
  if (w.ok) {
    const int c = divide(crs, g.RS_div), rs = crs - c * g.RS;
    w.r = divide(rs, g.S_div);
    w.s = rs - w.r * g.S;
    w.off = static_cast<int64_t>(c) * g.HW + static_cast<int64_t>(w.r) * g.W + w.s;
  }
  return w;
}

// A[k, j] = dy[n, k, p, q], or -1.
HL_HOST_DEVICE int64_t wgrad_dy_index(const WGeometry& g, const WRow& row, int k) {
  if (!row.ok || k >= g.K) return -1;
  return row.dy_base + static_cast<int64_t>(k) * g.PQ + row.pq;
}

// B[j, crs] = x[n, c, p*sh - ph + r, q*sw - pw + s], or -1 for padding and partial tiles.
// The four conditions are combined with `&`, not `||`: with short-circuit tests the compiler reads the
// column (from shared memory, in the kernel) only on the paths that need it, and put a branch and a
// reconvergence point around each of a thread's 16 loads per K step; evaluated together, they become
// one predicate and the load a predicated one (machine code: the README's "Rung 3's integer work").
HL_HOST_DEVICE int64_t wgrad_x_index(const WGeometry& g, const WRow& row, const WCol& col) {
  const int h = row.h0 + col.r, w = row.w0 + col.s;
  const bool inside = row.ok & col.ok & (static_cast<unsigned>(h) < static_cast<unsigned>(g.H)) &
                      (static_cast<unsigned>(w) < static_cast<unsigned>(g.W));
  return inside ? row.x_off + col.off : -1;
}

// backward_weight's split-K limits: no slice shorter than kWgradMinSlice positions (shorter slices would
// spend more time writing partials than multiplying), at most kWgradMaxSplits slices.
inline constexpr int64_t kWgradMinSlice = 8 * kBK;
inline constexpr int64_t kWgradMaxSplits = 256;
inline int64_t wgrad_most_splits(int64_t npq) { return most_slices(npq, kWgradMinSlice, kWgradMaxSplits); }

inline Geometry make_geometry(const ConvArgs& a) {
  const auto i32 = [](int64_t v) { return static_cast<int>(v); };
  Geometry g{};
  const int64_t P = a.P(), Q = a.Q(), RS = a.R * a.S;
  g.RS = i32(RS);
  g.S = i32(a.S);
  g.sh = i32(a.stride_h), g.sw = i32(a.stride_w), g.ph = i32(a.pad_h), g.pw = i32(a.pad_w);
  if (a.pass == ConvPass::forward) {
    g.M = i32(a.K);
    g.cols = a.N * P * Q;
    g.kred = i32(a.C * RS);
    g.a_stride_m = i32(a.C * RS), g.a_stride_ch = i32(RS);
    g.col_hw = i32(P * Q), g.col_w = i32(Q);
    g.g_img = i32(a.C * a.H * a.W), g.g_ch = i32(a.H * a.W), g.g_h = i32(a.H), g.g_w = i32(a.W);
    g.out_img = i32(a.K * P * Q);
  } else {  // backward_data
    g.M = i32(a.C);
    g.cols = a.N * a.H * a.W;
    g.kred = i32(a.K * RS);
    g.a_stride_m = i32(RS), g.a_stride_ch = i32(a.C * RS);
    g.col_hw = i32(a.H * a.W), g.col_w = i32(a.W);
    g.g_img = i32(a.K * P * Q), g.g_ch = i32(P * Q), g.g_h = i32(P), g.g_w = i32(Q);
    g.out_img = i32(a.C * a.H * a.W);
  }
  g.RS_div = Divisor(g.RS), g.S_div = Divisor(g.S), g.col_hw_div = Divisor(g.col_hw), g.col_w_div = Divisor(g.col_w);
  g.sh_div = Divisor(g.sh), g.sw_div = Divisor(g.sw);
  return g;
}

inline WGeometry make_wgeometry(const ConvArgs& a, int64_t split) {
  const auto i32 = [](int64_t v) { return static_cast<int>(v); };
  WGeometry g{};
  const int64_t P = a.P(), Q = a.Q();
  g.K = i32(a.K), g.crs = i32(a.C * a.R * a.S), g.RS = i32(a.R * a.S), g.S = i32(a.S);
  g.npq = a.N * P * Q;
  g.split = split;
  g.PQ = i32(P * Q), g.Q = i32(Q), g.HW = i32(a.H * a.W), g.H = i32(a.H), g.W = i32(a.W);
  g.sh = i32(a.stride_h), g.sw = i32(a.stride_w), g.ph = i32(a.pad_h), g.pw = i32(a.pad_w);
  g.x_img = a.C * a.H * a.W;
  g.dy_img = a.K * P * Q;
  g.RS_div = Divisor(g.RS), g.S_div = Divisor(g.S), g.PQ_div = Divisor(g.PQ), g.Q_div = Divisor(g.Q);
  return g;
}

}  // namespace hl::kernels::cuda::igemm
