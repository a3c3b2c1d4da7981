// The address arithmetic of implicit_gemm_wmma.cu: which element of x, dy or w each entry of the
// virtual GEMM operands is, and where each output element goes. Plain C++ with host/device
// functions (HL_HOST_DEVICE), so that the kernels call exactly this code and a CPU test
// (tests/kernels/test_conv_implicit_index.cpp) can walk the same tiles without a GPU.
#pragma once
#include <cstdint>

#include "kernels/conv.h"
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
  const int64_t img = cc / g.col_hw;
  const int rem = static_cast<int>(cc - img * g.col_hw);
  const int oy = rem / g.col_w, ox = rem - oy * g.col_w;
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

// One reduction index kk = (ch, r, s) (ch = c forward, k backward_data), decomposed once per K step.
struct Tap {
  int ch, rs, r, s;
  bool ok;  // kk < C*R*S (resp. K*R*S): rows past it are padding of the last K step
};

HL_HOST_DEVICE Tap make_tap(const Geometry& g, int kk) {
  Tap t{0, 0, 0, 0, kk < g.kred};
  if (t.ok) {
    t.ch = kk / g.RS;
    t.rs = kk - t.ch * g.RS;
    t.r = t.rs / g.S;
    t.s = t.rs - t.r * g.S;
  }
  return t;
}

// Where B[kk, col] lives in the gathered tensor, or -1 for a zero (padding, a tap between the
// strided outputs, or the padding of a partial tile).
// kUnitStride (backward_data with stride 1 x 1 only; the caller checks): p = h + ph - r needs no
// division. The general path's % and / by a run-time stride are integer divisions, tens of
// instructions each, four per gathered element: measured on an H200, they made backward_data twice
// as slow as forward on the same layer (0.68 ms against 0.34 ms, VGG-small 64 -> 64).
template <bool kBackwardData, bool kUnitStride = false>
HL_HOST_DEVICE int64_t gather_index(const Geometry& g, const Column& c, const Tap& t) {
  if (!c.ok || !t.ok) return -1;
  int y, x;
  if (kBackwardData && kUnitStride) {
    y = c.y - t.r;  // p = h + ph - r, q = w + pw - s, inside [0, P) and [0, Q)
    x = c.x - t.s;
    if (static_cast<unsigned>(y) >= static_cast<unsigned>(g.g_h) || static_cast<unsigned>(x) >= static_cast<unsigned>(g.g_w))
      return -1;
  } else if (kBackwardData) {
    // p = (h + ph - r) / sh must be whole and inside [0, P) (same for q).
    y = c.y - t.r;
    x = c.x - t.s;
    if (y < 0 || x < 0 || y % g.sh != 0 || x % g.sw != 0) return -1;
    y /= g.sh;
    x /= g.sw;
    if (y >= g.g_h || x >= g.g_w) return -1;
  } else {
    y = c.y + t.r;
    x = c.x + t.s;
    // Zero padding; the unsigned compare also rejects negative rows and columns.
    if (static_cast<unsigned>(y) >= static_cast<unsigned>(g.g_h) || static_cast<unsigned>(x) >= static_cast<unsigned>(g.g_w))
      return -1;
  }
  return c.base + static_cast<int64_t>(t.ch) * g.g_ch + static_cast<int64_t>(y) * g.g_w + x;
}

// Where A[m, kk] lives in w ([K, C, R, S]), or -1 past the edges.
HL_HOST_DEVICE int64_t weight_index(const Geometry& g, int m, const Tap& t) {
  if (!t.ok || m >= g.M) return -1;
  return static_cast<int64_t>(t.ch) * g.a_stride_ch + static_cast<int64_t>(m) * g.a_stride_m + t.rs;
}

// ---- the tap table (forward, and backward_data with stride 1) --------------------------------------
// make_tap's two integer divisions by run-time values (kk / RS, rs / S) are tens of instructions each,
// and the loaders need them for 5 taps per thread and K step, in every block: measured on an H200 the
// address arithmetic, not the Tensor Cores, set the rung's pace (about 30 TFLOP/s on every VGG-small
// layer). So the decomposition is done once per call, by a small kernel, into a table of one 16-byte
// entry per reduction index, and the loaders read it back (L1/L2-resident: 9 KiB per 576 taps).
// An entry holds the tap's offsets relative to a column's Column::off and its weight offset, so that
// gathering an element costs two adds, two compares and one add.
struct TapEntry {
  int b_off;   // ch * (plane size) + dy * width + dx: added to Column::off
  int dy, dx;  // the input row/column relative to the column's (c.y, c.x): +r, +s forward, -r, -s backward_data
  int a_off;   // ch * a_stride_ch + rs: added to m * a_stride_m for the weight
};

// The offsets are computed in 64 bits and stored in 32: implicit_gemm_table's unsupported() refuses
// the shapes whose taps reach further than 2^31 - 1 elements (tap_table_fits below).
template <bool kBackwardData>
HL_HOST_DEVICE TapEntry make_tap_entry(const Geometry& g, int kk) {
  const Tap t = make_tap(g, kk);
  const int dy = kBackwardData ? -t.r : t.r, dx = kBackwardData ? -t.s : t.s;
  const int64_t b_off = static_cast<int64_t>(t.ch) * g.g_ch + static_cast<int64_t>(dy) * g.g_w + dx;
  return TapEntry{static_cast<int>(b_off), dy, dx, t.ch * g.a_stride_ch + t.rs};
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

// gather_index through a table entry (forward, or backward_data with stride 1); tap_ok: kk < kred.
HL_HOST_DEVICE int64_t table_gather_index(const Geometry& g, const Column& c, const TapEntry& t, bool tap_ok) {
  const int y = c.y + t.dy, x = c.x + t.dx;
  if (!c.ok || !tap_ok || static_cast<unsigned>(y) >= static_cast<unsigned>(g.g_h) ||
      static_cast<unsigned>(x) >= static_cast<unsigned>(g.g_w))
    return -1;
  return c.off + t.b_off;
}

// weight_index through a table entry.
HL_HOST_DEVICE int64_t table_weight_index(const Geometry& g, int m, const TapEntry& t, bool tap_ok) {
  if (!tap_ok || m >= g.M) return -1;
  return static_cast<int64_t>(m) * g.a_stride_m + t.a_off;
}

// Where column col of the output goes in NCHW (y forward, dx backward_data): row m of the column is
// at the returned offset + m * col_hw. -1 for columns past the GEMM. One division per column, so
// the epilogue computes it once per thread, not per element.
HL_HOST_DEVICE int64_t output_column(const Geometry& g, int64_t col) {
  if (col >= g.cols) return -1;
  const int64_t img = col / g.col_hw;
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
};

// Reduction index j = (n, p, q), decomposed once per K step and shared by the A and B loads.
struct WRow {
  int64_t dy_base, x_base;  // offsets of image n in dy and x
  int pq, h0, w0;           // p*Q + q; the window's first input row and column
  bool ok;                  // j inside this block's slice of the reduction
};

HL_HOST_DEVICE WRow make_wrow(const WGeometry& g, int64_t j, int64_t j_end) {
  WRow r{0, 0, 0, 0, 0, j < j_end};
  if (r.ok) {
    const int64_t n = j / g.PQ;
    r.pq = static_cast<int>(j - n * g.PQ);
    const int p = r.pq / g.Q, q = r.pq - p * g.Q;
    r.dy_base = n * g.dy_img;
    r.x_base = n * g.x_img;
    r.h0 = p * g.sh - g.ph;
    r.w0 = q * g.sw - g.pw;
  }
  return r;
}

// Output column (c, r, s) of dW, decomposed once per block.
struct WCol {
  int c_off, r, s;  // c*H*W, and the tap
  bool ok;
};

HL_HOST_DEVICE WCol make_wcol(const WGeometry& g, int crs) {
  WCol w{0, 0, 0, crs < g.crs};
  if (w.ok) {
    const int c = crs / g.RS, rs = crs - c * g.RS;
    w.r = rs / g.S;
    w.s = rs - w.r * g.S;
    w.c_off = c * g.HW;
  }
  return w;
}

// A[k, j] = dy[n, k, p, q], or -1.
HL_HOST_DEVICE int64_t wgrad_dy_index(const WGeometry& g, const WRow& row, int k) {
  if (!row.ok || k >= g.K) return -1;
  return row.dy_base + static_cast<int64_t>(k) * g.PQ + row.pq;
}

// B[j, crs] = x[n, c, p*sh - ph + r, q*sw - pw + s], or -1 for padding and partial tiles.
HL_HOST_DEVICE int64_t wgrad_x_index(const WGeometry& g, const WRow& row, const WCol& col) {
  if (!row.ok || !col.ok) return -1;
  const int h = row.h0 + col.r, w = row.w0 + col.s;
  if (static_cast<unsigned>(h) >= static_cast<unsigned>(g.H) || static_cast<unsigned>(w) >= static_cast<unsigned>(g.W))
    return -1;
  return row.x_base + col.c_off + static_cast<int64_t>(h) * g.W + w;
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
  return g;
}

}  // namespace hl::kernels::cuda::igemm
