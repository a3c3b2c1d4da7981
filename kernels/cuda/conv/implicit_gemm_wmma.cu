// Convolution ladder, rung 3: "implicit_gemm_wmma" — the GEMM without the im2col matrix.
//
// What changes from rung 2 (im2col_gemm): X_col is never written. Rung 2 spends most of its memory
// traffic writing C*R*S*P*Q values per image to global memory (9x the input for a 3x3 kernel, 25x for
// 5x5) only for the GEMM to read them back. Here the GEMM's tile loader computes, for each element of
// the *virtual* X_col tile it needs, which input element (n, c, h, w) that is — or that it is a zero of
// the padding — and loads it straight from x into shared memory. The arithmetic is the same Tensor
// Core product as the GEMM ladder's WMMA rungs: FP16 operands, FP32 accumulation (paper §3.3), with
// the result rounded once, on the store, after a fused epilogue (beta, bias, ReLU with NaN passing
// through). It was the registry's default until rungs 3b and 4 ran on a GPU (2026-11-26); it still
// computes every call they hand on that the tap table cannot take.
//
// The GEMMs (kernels/conv.h):
//   forward          Y[k, npq]  = W[k, crs] * X_col[crs, npq]            M = K   N = N*P*Q  K = C*R*S
//   backward_data    dX[c, nhw] = W'[c, krs] * dY_col[krs, nhw]          M = C   N = N*H*W  K = K*R*S
//   backward_weight  dW[k, crs] = dY[k, npq] * X_col^T[npq, crs]         M = K   N = C*R*S  K = N*P*Q
// backward_data is itself an implicit GEMM over dx: column (n, h, w) of the virtual dY_col gathers, for
// every (k, r, s), dy[n, k, p, q] with p = (h + pad_h - r) / stride_h when that division is exact and
// p lies in [0, P) (and the same for q), else 0. With stride 1 this is the convolution of dY with the
// flipped, transposed filters; with stride 2 three taps in four are zeros of the "dilated" dY, which
// the loader predicates away (correct, if wasteful: a stride-aware decomposition is a later rung).
// Stride 1 (every layer of LeNet and VGG-small) gets its own instantiation without the tests "is this
// tap on the stride grid" (strided_gather_index keeps them for the others).
// W'[c, krs] = w[k, c, r, s] is the same weight tensor read with the roles of k and c swapped.
// backward_weight has a small output and an N*P*Q-long reduction, so it splits the reduction across
// blocks (split-K, with a deterministic second pass that adds the slices): see its kernel below.
//
// Not covered here (unsupported() says so, and the registry's automatic choice then runs im2col_gemm,
// the next variant; a pinned variant stops with the reason instead): f32 inputs (Tensor Cores
// multiply FP16; direct and im2col_gemm take f32), GPUs older than compute capability 7.0 (no FP16
// Tensor Cores), tensors whose per-image index exceeds 32 bits, strides or padding above 2^31 - 1, and
// the shapes whose padded rows or columns, or reduction index, would pass 2^31 - 1 (the gather's are ints).
//
// The kernel, per block of 256 threads (8 warps):
//   * a 64 x 128 output tile (64 output channels x 128 output positions); each warp owns 32 x 32 of it,
//     as 2 x 2 WMMA 16x16x16 fragments with FP32 accumulators;
//   * a K loop in steps of 32: the A tile (64 x 32 weights) and the B tile (32 x 128 gathered inputs)
//     are staged in shared memory, rows padded by 8 halves (16 bytes) so that the WMMA fragment loads
//     of consecutive rows start in different banks;
//   * software prefetch: the global loads of tile t+1 go to registers before the Tensor Cores work
//     on tile t, so their latency hides behind the math;
//   * address arithmetic: each thread always loads the same 4 columns of the B tile, so the column's
//     (n, p, q) decomposition — image offset, first input row and column — is computed once per
//     kernel; each row (c, r, s) is decomposed once per K step into its offsets (TapOffsets: where it
//     lies relative to any column, and in the weights), shared by the thread's 4 columns, so that an
//     element costs two adds, two compares and an add. Every division by a size of the layer (R*S, S,
//     P*Q, Q, the stride) is a Divisor (kernels/divisor.h): a multiply-high and shifts with the
//     quotient of `/`, made on the host, instead of the ~20-instruction routine a division by a
//     run-time value compiles to. Reduction rows past C*R*S (C = 1 or 3 gives CRS = 25 or 27, not a
//     multiple of 32), columns past N*P*Q and channels past K are predicated to zero (the loads are
//     predicated, not branched around), so any shape works;
//   * epilogue: the accumulators go through shared memory (reusing the tile buffers) so that each
//     thread writes consecutive output positions of one channel: coalesced stores into NCHW.
//
// Rung 3b, "implicit_gemm_table" (kTable), changes only where the taps' offsets come from. Measured on
// an H200, rung 3 ran at about 30 TFLOP/s on every VGG-small layer: then it divided each tap by R*S
// and S with `/` (two integer divisions of tens of instructions, for 5 taps per thread and K step)
// and multiplied out every gathered address. Rung 3b decomposes the reduction index once per call: a
// small kernel writes a table of one 16-byte entry per index (TapEntry), and the loaders read it.
// Its epilogue keeps one column per thread, whose place in NCHW is then computed once.
// backward_data with a stride above 1 keeps rung 3's per-step decomposition (its taps need the
// divisibility tests anyway). Written in a session without a GPU, it was verified on an H200 on
// 2026-11-26 (its output equal to rung 3's bit for bit, the sanitizers clean) and measured there:
// forward 1.4x to 1.9x faster than rung 3 on LeNet's and VGG-small's layers, backward_weight the same
// (bench/results/gpu_short_nvidia_h200_2026-11-26.txt). So it is in the automatic choice, above rung 3.
//
// Rung 3 took the other road on 2026-11-28 (without a GPU; kernels/cuda/conv/README.md, "Rung 3's
// integer work"): Divisor quotients for every division, the same per-tap offsets as the table's but
// computed in the loop, and the loads' conditions folded into predicates. Its K loop went from 950 to
// 572 instructions per thread in the sm_90 machine code (forward; 3b's: 443), the weight gradient's
// from 794 to 547 (SASS_LOOPS=1 scripts/sass.sh). Its output is meant to be unchanged bit for bit
// (the same indices, so the same tiles); the GPU tests and the speed are for the next GPU session.
//
// NCHW is what makes the loader work hard: the reduction index (c, r, s) walks across channel planes,
// so the 8 consecutive values a 16-byte vector load would need are not consecutive in memory. With
// NHWC, c is innermost and each (r, s) tap is a contiguous run of C halves (kernels/cuda/conv/README.md).
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>

#include "kernels/conv.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv/implicit_gemm_index.h"
#include "kernels/cuda/conv/workspace.cuh"
#include "kernels/runtime.h"
#include "kernels/wave_split.h"

namespace hl::kernels::cuda {

namespace {

using namespace igemm;  // the tile sizes and the address arithmetic (implicit_gemm_index.h)

__device__ __forceinline__ __half half_zero() { return __ushort_as_half(static_cast<unsigned short>(0)); }

// Whether the loaders gather through a tap's offsets (TapOffsets: computed by rung 3, read from the
// tap table by rung 3b): forward, and backward_data with stride 1.
constexpr bool uses_tap_offsets(bool backward_data, bool unit_stride) { return !backward_data || unit_stride; }

// The tap table: entry kk for every reduction index kk < kred (implicit_gemm_index.h, make_tap_entry).
template <bool kBackwardData>
__global__ void conv_tap_table_kernel(Geometry g, int4* __restrict__ table) {
  for (int64_t kk = global_thread_index(); kk < g.kred; kk += global_thread_count()) {
    const TapEntry e = make_tap_entry<kBackwardData>(g, static_cast<int>(kk));
    table[kk] = make_int4(e.b_off, e.dy, e.dx, e.a_off);
  }
}

__device__ __forceinline__ TapEntry load_tap(const int4* __restrict__ table, int kk) {
  const int4 v = __ldg(table + kk);
  return TapEntry{v.x, v.y, v.z, v.w};
}

// kUnitStride: backward_data with stride 1 x 1, whose gather needs no integer division (gather_index).
// kTable: the implicit_gemm_table rung: the loaders read the tap table `taps` (else unused, nullptr)
// and the epilogue keeps one column per thread. Its kernels are compiled for 2 resident blocks per
// SM: left free, ptxas gave them 132 registers on sm_90 (rung 3: 126; 118 since 2026-11-28), which
// leaves room for one 256-thread block; capped at 128 they do not spill (-Xptxas -v). Rung 3 keeps its
// bounds.
template <bool kBackwardData, bool kUnitStride, bool kTable>
__global__ void __launch_bounds__(kThreads, kTable ? 2 : 0)
    conv_implicit_gemm_kernel(ConvArgs a, Geometry g, const int4* __restrict__ taps) {
  static_assert(!kTable || uses_tap_offsets(kBackwardData, kUnitStride), "no tap table for strided backward_data");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  using namespace nvcuda;
  __shared__ __align__(128) unsigned char smem[kSmemBytes];
  __half* As = reinterpret_cast<__half*>(smem);  // [kBM][kLdA]
  __half* Bs = As + kBM * kLdA;                  // [kBK][kLdB]
  float* Cs = reinterpret_cast<float*>(smem);    // [kBM][kLdC], after the K loop

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.y * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const __half* wgt = static_cast<const __half*>(a.w);
  const __half* src = static_cast<const __half*>(kBackwardData ? a.dy : a.x);

  // This thread's 4 columns of the B tile (lane, lane + 32, lane + 64, lane + 96), decomposed once.
  Column cols[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) cols[j] = make_column<kBackwardData>(g, n0 + lane + 32 * j);

  __half a_reg[8], b_reg[16];

  // Global -> registers for the K step starting at k0.
  const auto load_tile = [&](int k0) {
    // A: lane picks the reduction index, warp + 8i the row: 32 consecutive weights per warp and row.
    // B: rows warp + 8i (one tap each), columns lane + 32j: a warp reads 32 consecutive output
    // positions of one tap, i.e. consecutive input columns when the stride is 1.
    if constexpr (uses_tap_offsets(kBackwardData, kUnitStride)) {
      // Each tap's offsets: read from the table (rung 3b) or computed here, two Divisor quotients and a
      // few multiply-adds (rung 3). The gather is then the same two adds and compares for both.
      const auto offsets = [&](int kk) {
        if constexpr (kTable) {
          return kk < g.kred ? load_tap(taps, kk) : TapEntry{0, 0, 0, 0};
        } else {
          return kk < g.kred ? make_tap_offsets<kBackwardData>(g, kk) : TapOffsets<int64_t>{0, 0, 0, 0};
        }
      };
      {
        const int kk = k0 + lane;
        const auto t = offsets(kk);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int64_t idx = offset_weight_index(g, m0 + warp + 8 * i, t, kk < g.kred);
          a_reg[i] = idx >= 0 ? wgt[idx] : half_zero();
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int kk = k0 + warp + 8 * i;  // the same for the whole warp: one broadcast load (rung 3b)
        const auto t = offsets(kk);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t idx = offset_gather_index(g, cols[j], t, kk < g.kred);
          b_reg[i * 4 + j] = idx >= 0 ? src[idx] : half_zero();
        }
      }
    } else {
      // Strided backward_data: the divisibility tests of strided_gather_index need each tap's r and s.
      {
        const Tap t = make_tap(g, k0 + lane);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int64_t idx = weight_index(g, m0 + warp + 8 * i, t);
          a_reg[i] = idx >= 0 ? wgt[idx] : half_zero();
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const Tap t = make_tap(g, k0 + warp + 8 * i);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t idx = strided_gather_index(g, cols[j], t);
          b_reg[i * 4 + j] = idx >= 0 ? src[idx] : half_zero();
        }
      }
    }
  };

  // Registers -> shared memory: a warp writes 32 consecutive halves of one row (no bank conflicts).
  const auto store_tile = [&]() {
#pragma unroll
    for (int i = 0; i < 8; ++i) As[(warp + 8 * i) * kLdA + lane] = a_reg[i];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) Bs[(warp + 8 * i) * kLdB + lane + 32 * j] = b_reg[i * 4 + j];
  };

  const int wm = warp / 4, wn = warp % 4;  // this warp's 32 x 32 sub-tile
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const int steps = (g.kred + kBK - 1) / kBK;
  load_tile(0);
  store_tile();
  __syncthreads();
  for (int t = 0; t < steps; ++t) {
    if (t + 1 < steps) load_tile((t + 1) * kBK);  // in flight while the Tensor Cores work
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> af[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bf[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(af[i], As + (wm * 32 + i * 16) * kLdA + ks, kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], Bs + ks * kLdB + wn * 32 + j * 16, kLdB);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
    __syncthreads();  // every warp is done reading this step's tiles
    if (t + 1 < steps) {
      store_tile();
      __syncthreads();
    }
  }

  // Epilogue: accumulators -> shared memory (the tiles are dead: the loop ended with a barrier), then
  // each thread takes consecutive columns of one row, i.e. consecutive positions of one NCHW plane.
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();

  void* out = kBackwardData ? a.dx : a.y;
  const auto store = [&](int m, int64_t idx, float v) {
    if (a.beta != 0.0f) v += a.beta * load_float(out, a.out_type, idx);  // beta == 0: out is not read
    if (a.bias != nullptr) v += load_float(a.bias, a.bias_type, m);
    if (a.relu) v = v > 0.0f || v != v ? v : 0.0f;  // NaN stays NaN: an overflow must stay visible
    store_float(out, a.out_type, idx, v);
  };
  if constexpr (kTable) {
    // Thread t writes column t % kBN of the tile (consecutive threads: consecutive output positions),
    // rows t / kBN, + kThreads / kBN, ...: one division for the column's place, not one per element.
    static_assert(kThreads % kBN == 0, "each thread keeps one column in the epilogue");
    const int ni = threadIdx.x % kBN;
    const int64_t col_out = output_column(g, n0 + ni);
    for (int mi = threadIdx.x / kBN; mi < kBM && col_out >= 0; mi += kThreads / kBN) {
      const int m = m0 + mi;
      if (m >= g.M) break;
      store(m, col_out + static_cast<int64_t>(m) * g.col_hw, Cs[mi * kLdC + ni]);
    }
  } else {
    for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
      const int mi = e / kBN, ni = e % kBN;
      const int m = m0 + mi;
      const int64_t idx = output_index(g, m, n0 + ni);
      if (idx >= 0) store(m, idx, Cs[mi * kLdC + ni]);
    }
  }
#endif
}


// ---- backward_weight: dW[k, crs] = sum over j = (n, p, q) of dY[n, k, p, q] * x[n, c, h, w] ------------
//
// The GEMM has M = K, N = C*R*S and a reduction over all N*P*Q output positions: a small output and a
// very long sum. One block per 64 x 128 output tile would leave most of the GPU idle (a 64 -> 64 3x3
// layer has 5 tiles), so the reduction is split ("split-K"): blockIdx.z takes one slice of the
// N*P*Q positions, writes its partial tile in FP32 to a workspace, and a second kernel adds the
// slices in a fixed order and applies beta and the rounding: deterministic, no atomics.
//
// Both operands are gathered along the reduction index j, which the lanes of a warp walk: 32
// consecutive j are 32 consecutive output positions, so both dY (contiguous along p, q) and x
// (contiguous along w at stride 1) are read in coalesced runs. The B tile is therefore stored
// column-major (each of its 128 columns (c, r, s) a run of 32 reduction values), which is the
// layout a WMMA col_major matrix_b fragment reads.

__global__ void __launch_bounds__(kThreads)
    conv_implicit_gemm_wgrad_kernel(WGeometry g, const __half* __restrict__ dy, const __half* __restrict__ x,
                                    float* __restrict__ partial) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  using namespace nvcuda;
  constexpr int kTiles = (kBM * kLdA + kBN * kLdBt) * 2;
  __shared__ __align__(128) unsigned char smem[kTiles > kCBytes ? kTiles : kCBytes];
  __shared__ WCol colinfo[kBN];
  __half* As = reinterpret_cast<__half*>(smem);  // [kBM][kLdA]: row m, reduction j
  __half* Bs = As + kBM * kLdA;                  // [kBN][kLdBt]: column n, reduction j (column-major)
  float* Cs = reinterpret_cast<float*>(smem);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int64_t j_begin = static_cast<int64_t>(blockIdx.z) * g.split;
  const int64_t j_end = j_begin + g.split < g.npq ? j_begin + g.split : g.npq;

  if (threadIdx.x < kBN) colinfo[threadIdx.x] = make_wcol(g, n0 + threadIdx.x);
  __syncthreads();

  __half a_reg[8], b_reg[16];
  const auto load_tile = [&](int64_t k0) {
    const WRow row = make_wrow(g, k0 + lane, j_end);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t idx = wgrad_dy_index(g, row, m0 + warp + 8 * i);
      a_reg[i] = idx >= 0 ? dy[idx] : half_zero();
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int64_t idx = wgrad_x_index(g, row, colinfo[warp + 8 * i]);  // same column for the warp: broadcast
      b_reg[i] = idx >= 0 ? x[idx] : half_zero();
    }
  };
  const auto store_tile = [&]() {
#pragma unroll
    for (int i = 0; i < 8; ++i) As[(warp + 8 * i) * kLdA + lane] = a_reg[i];
#pragma unroll
    for (int i = 0; i < 16; ++i) Bs[(warp + 8 * i) * kLdBt + lane] = b_reg[i];
  };

  const int wm = warp / 4, wn = warp % 4;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  load_tile(j_begin);
  store_tile();
  __syncthreads();
  for (int64_t k0 = j_begin; k0 < j_end; k0 += kBK) {
    const bool more = k0 + kBK < j_end;
    if (more) load_tile(k0 + kBK);
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> af[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> bf[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(af[i], As + (wm * 32 + i * 16) * kLdA + ks, kLdA);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(bf[j], Bs + (wn * 32 + j * 16) * kLdBt + ks, kLdBt);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], af[i], bf[j], acc[i][j]);
    }
    __syncthreads();
    if (more) {
      store_tile();
      __syncthreads();
    }
  }

#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[i][j], kLdC, wmma::mem_row_major);
  __syncthreads();
  // This slice's partial tile, FP32, at partial[z][k][crs] (coalesced along crs).
  float* slice = partial + static_cast<int64_t>(blockIdx.z) * g.K * g.crs;
  for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
    const int mi = e / kBN, ni = e % kBN, m = m0 + mi, n = n0 + ni;
    if (m < g.K && n < g.crs) slice[static_cast<int64_t>(m) * g.crs + n] = Cs[mi * kLdC + ni];
  }
#endif
}

// dw[i] = sum of the slices' partials in slice order (deterministic), + beta * dw, rounded once.
__global__ void conv_wgrad_reduce_kernel(ConvArgs a, const float* __restrict__ partial, int splits, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += global_thread_count()) {
    float v = 0.0f;
    for (int z = 0; z < splits; ++z) v += partial[z * n + i];
    if (a.beta != 0.0f) v += a.beta * load_float(a.dw, a.out_type, i);
    store_float(a.dw, a.out_type, i, v);
  }
}

// How the reduction is cut into slices (SplitCut: no slice empty). Every slice at least kWgradMinSlice
// positions long, at most kWgradMaxSplits of them (implicit_gemm_index.h), and among those the
// count that fills whole waves of the blocks the GPU holds at once (kernels/wave_split.h). The rule
// before 2026-11-27 asked for about 4 blocks per SM, ceil(4 x SMs / tiles) slices, where only 2 of
// these blocks fit (94 registers x 256 threads): on VGG-small's 256->256 layer, 8 slices, 576 blocks
// in 2.18 waves of 264 (wave_split.h's example). A count set by bench/conv_bench --sweep-splits
// (wgrad_splits_for_tuning) takes the place of the rule, within the same limits.
SplitCut wgrad_cut(const ConvArgs& a) {
  const int64_t tiles = ((a.K + kBM - 1) / kBM) * ((a.C * a.R * a.S + kBN - 1) / kBN);
  const int64_t npq = a.N * a.P() * a.Q();
  // The blocks of this kernel the GPU holds at once, asked once; the partial tile a block writes is
  // 64 x 128 FP32 against 64 + 128 rows of 32 halves, about 2.7 steps.
  static const int64_t slots = blocks_at_once(conv_implicit_gemm_wgrad_kernel, kThreads, 0);
  return wgrad_cut_by_waves(tiles, slots, npq, kBM, kBN, kBK, wgrad_most_splits(npq));
}

void run_wgrad(const ConvArgs& a) {
  const SplitCut cut = wgrad_cut(a);  // no slice is empty
  const int64_t splits = cut.splits;
  const WGeometry g = make_wgeometry(a, cut.slice);
  const int64_t n = a.K * a.C * a.R * a.S;

  Scratch& ws = conv_detail::workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);
  float* partial = static_cast<float*>(ws.reserve(static_cast<size_t>(splits * n) * sizeof(float)));
  const dim3 grid(static_cast<unsigned>((g.crs + kBN - 1) / kBN), static_cast<unsigned>((g.K + kBM - 1) / kBM),
                  static_cast<unsigned>(splits));
  conv_implicit_gemm_wgrad_kernel<<<grid, kThreads, 0, stream()>>>(g, static_cast<const __half*>(a.dy),
                                                                   static_cast<const __half*>(a.x), partial);
  HL_LAUNCH_CHECK("conv_implicit_gemm_wgrad_kernel");
  conv_wgrad_reduce_kernel<<<grid_for(n), kBlock, 0, stream()>>>(a, partial, static_cast<int>(splits), n);
  HL_LAUNCH_CHECK("conv_wgrad_reduce_kernel");
}

// kTable: the implicit_gemm_table rung (forward and stride-1 backward_data read the tap table).
template <bool kTable>
void run(const ConvArgs& a) {
  if (a.pass == ConvPass::backward_weight) {
    run_wgrad(a);
    return;
  }
  const Geometry g = make_geometry(a);
  const dim3 grid(static_cast<unsigned>((g.cols + kBN - 1) / kBN), static_cast<unsigned>((g.M + kBM - 1) / kBM));
  const bool unit_stride = a.stride_h == 1 && a.stride_w == 1;
  if (a.pass == ConvPass::backward_data && !unit_stride) {
    conv_implicit_gemm_kernel<true, false, false><<<grid, kThreads, 0, stream()>>>(a, g, nullptr);
    HL_LAUNCH_CHECK("conv_implicit_gemm_kernel<backward_data>");
    return;
  }
  if constexpr (!kTable) {
    if (a.pass == ConvPass::forward) {
      conv_implicit_gemm_kernel<false, false, false><<<grid, kThreads, 0, stream()>>>(a, g, nullptr);
      HL_LAUNCH_CHECK("conv_implicit_gemm_kernel<forward>");
    } else {
      conv_implicit_gemm_kernel<true, true, false><<<grid, kThreads, 0, stream()>>>(a, g, nullptr);
      HL_LAUNCH_CHECK("conv_implicit_gemm_kernel<backward_data, stride 1>");
    }
    return;
  }
  // The tap table lives in the workspace, held until both kernels are queued.
  Scratch& ws = conv_detail::workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);
  int4* taps = static_cast<int4*>(ws.reserve(static_cast<size_t>(g.kred) * sizeof(int4)));
  if (a.pass == ConvPass::forward) {
    conv_tap_table_kernel<false><<<grid_for(g.kred), kBlock, 0, stream()>>>(g, taps);
    HL_LAUNCH_CHECK("conv_tap_table_kernel<forward>");
    conv_implicit_gemm_kernel<false, false, true><<<grid, kThreads, 0, stream()>>>(a, g, taps);
    HL_LAUNCH_CHECK("conv_implicit_gemm_kernel<forward, tap table>");
  } else {
    conv_tap_table_kernel<true><<<grid_for(g.kred), kBlock, 0, stream()>>>(g, taps);
    HL_LAUNCH_CHECK("conv_tap_table_kernel<backward_data>");
    conv_implicit_gemm_kernel<true, true, true><<<grid, kThreads, 0, stream()>>>(a, g, taps);
    HL_LAUNCH_CHECK("conv_implicit_gemm_kernel<backward_data, stride 1, tap table>");
  }
}

const char* unsupported(const ConvArgs& a) {
  if (a.in_type != DType::f16) {
    return "the implicit GEMM rungs (implicit_gemm_wmma, implicit_gemm_table) take f16 inputs only (FP16 Tensor "
           "Core products); direct and im2col_gemm compute f32 convolutions";
  }
  if (a.out_type != DType::f16 && a.out_type != DType::f32) return "the output must be f16 or f32";
  if (a.bias != nullptr && a.bias_type != DType::f16 && a.bias_type != DType::f32) {
    return "the bias must be f16 or f32";
  }
  const int cc = runtime::cuda_compute_capability();  // cached; 0 when no GPU is present
  if (cc != 0 && cc < 70) return "the implicit GEMM rungs need compute capability 7.0 or newer (FP16 Tensor Cores)";
  // The loaders index within one image, and within the weights, in 32-bit integers (Geometry's
  // strides and padding are ints too).
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (std::max({a.stride_h, a.stride_w, a.pad_h, a.pad_w}) > kMax) return "a stride or padding above 2^31 - 1";
  const int64_t P = a.P(), Q = a.Q();
  if (a.K * a.C * a.R * a.S > kMax || a.C * a.H * a.W > kMax || a.K * P * Q > kMax) {
    return "one image (or the weight tensor) has more than 2^31 - 1 elements";
  }
  // So are a gathered element's row and column (implicit_gemm_index.h: oy * sh - ph forward, h + ph in
  // the strided data gradient, then a tap's r or s off them), and the reduction index of a K step's rows
  // (up to kBK past the last). Within an image of 2^31 - 1 elements these still pass 2^31 with a stride
  // or padding near it, and a row that wraps below 0 reads as padding: a zero where dy has a value.
  const auto coordinates_fit = [&](int64_t in, int64_t out, int64_t stride, int64_t pad, int64_t taps) {
    return std::max(in, (out - 1) * stride) + pad + taps <= kMax;
  };
  if (!coordinates_fit(a.H, P, a.stride_h, a.pad_h, a.R) || !coordinates_fit(a.W, Q, a.stride_w, a.pad_w, a.S))
    return "a padded row or column coordinate passes 2^31 - 1 (the gather computes them in 32 bits)";
  if (std::max(a.C, a.K) * a.R * a.S > kMax - kBK) return "a reduction (C*R*S or K*R*S) within 32 of 2^31 - 1";
  if (a.pass == ConvPass::backward_weight) {
    if ((a.C * a.R * a.S + kBN - 1) / kBN > kMax) return "more than 2^31 - 1 column tiles";
    if ((a.K + kBM - 1) / kBM > 65535) return "more than 65535 row tiles (gridDim.y)";
    return nullptr;
  }
  if ((a.N * std::max(P * Q, a.H * a.W) + kBN - 1) / kBN > kMax) return "more than 2^31 - 1 column tiles";
  if ((std::max(a.K, a.C) + kBM - 1) / kBM > 65535) return "more than 65535 row tiles (gridDim.y)";
  return nullptr;
}

// Rung 3b also needs every tap's offset to fit TapEntry's 32-bit fields (backward_weight and strided
// backward_data use no table), and a table of a sensible size: 16 bytes per reduction index, at most
// 2^24 of them (256 MiB of workspace, which is never given back; a 3x3 layer of 512 channels needs
// 4608).
constexpr int64_t kMaxTapEntries = int64_t{1} << 24;

const char* unsupported_table(const ConvArgs& a) {
  if (const char* why = unsupported(a)) return why;
  const bool unit_stride = a.stride_h == 1 && a.stride_w == 1;
  const bool tabled = a.pass == ConvPass::forward || (a.pass == ConvPass::backward_data && unit_stride);
  if (tabled && (a.pass == ConvPass::forward ? a.C : a.K) * a.R * a.S > kMaxTapEntries)
    return "the tap table would hold more than 2^24 reduction indices (256 MiB); implicit_gemm_wmma needs no table";
  if (a.pass == ConvPass::forward && !tap_table_fits(a.C, a.H, a.W, a.R, a.S, false))
    return "a tap reaches more than 2^31 - 1 elements from its column (TapEntry's offsets are 32-bit)";
  if (a.pass == ConvPass::backward_data && unit_stride && !tap_table_fits(a.K, a.P(), a.Q(), a.R, a.S, true))
    return "a tap reaches more than 2^31 - 1 elements from its column (TapEntry's offsets are 32-bit)";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(ConvArgs, {"implicit_gemm_wmma", DeviceType::cuda, 30,
                               "implicit GEMM on Tensor Cores: addresses computed in the tile loader, no im2col "
                               "buffer, fused epilogue",
                               run<false>, unsupported});

// The tap table takes implicit_gemm_wmma's place where its table fits (the header says why).
HL_REGISTER_VARIANT(ConvArgs, {"implicit_gemm_table", DeviceType::cuda, 35,
                               "implicit_gemm_wmma with the reduction index decomposed once per call into a tap "
                               "table, one output column per thread in the epilogue",
                               run<true>, unsupported_table});

}  // namespace hl::kernels::cuda
