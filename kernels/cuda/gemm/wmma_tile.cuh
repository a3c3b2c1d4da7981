// Building blocks of the shared-memory WMMA rungs (wmma_smem, wmma_pipelined): how an operand tile
// is laid out in shared memory, how it is copied there (128-bit vectors, predicated at the edges),
// and how a warp writes its accumulators through the epilogue. Each rung's .cu file holds its
// kernel; this header holds what the two share, so that their difference stays visible.
#pragma once
#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/gemm/copy_plan.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/gemm.h"

namespace hl::kernels::cuda::gemm_detail {

// 8 halves (16 bytes) of padding at the end of every shared-memory row. Without it, a tile row of
// 32 halves is 64 bytes and the 16 rows a fragment load touches fall on the same few of the 32
// shared-memory banks (many-way bank conflicts); shifting each row by 16 bytes spreads them out. The
// pad keeps rows 16-byte aligned (for the 128-bit stores) and the leading dimension a multiple of 8
// halves (what load_matrix_sync requires).
constexpr int kPad = 8;

// One operand tile in shared memory. X is the tile's extent along M (for op(A)) or N (for op(B)),
// BK its extent along K. The tile keeps the operand's storage order: when K is the contiguous
// dimension in global memory (A with op N, B with op T) it is stored [X][BK + pad], otherwise
// [BK][X + pad], so that the global->shared copy moves whole 16-byte runs of a row.
template <bool kKContiguous_, int X, int BK>
struct SmemOperand {
  static constexpr bool kKContiguous = kKContiguous_;
  static constexpr int kRows = kKContiguous ? X : BK;  // as stored
  static constexpr int kCols = kKContiguous ? BK : X;
  static constexpr int kLd = kCols + kPad;
  static constexpr int kElems = kRows * kLd;
  // The 16 x 16 slice at offset x along M/N and kk along K.
  __device__ static const __half* slice(const __half* tile, int x, int kk) {
    return kKContiguous ? tile + x * kLd + kk : tile + kk * kLd + x;
  }
};

// The operand tiles of op(A) (M x K) and op(B) (K x N), and the wmma layout tags that read them:
// op(A)[m][k] at m * ld + k is row_major, at k * ld + m col_major; op(B)[k][n] at k * ld + n is
// row_major, at n * ld + k col_major.
template <Op op_a, int BM, int BK>
using ATile = SmemOperand<op_a == Op::N, BM, BK>;
template <Op op_b, int BN, int BK>
using BTile = SmemOperand<op_b == Op::T, BN, BK>;
template <Op op_a>
using ALayout = std::conditional_t<op_a == Op::N, nvcuda::wmma::row_major, nvcuda::wmma::col_major>;
template <Op op_b>
using BLayout = std::conditional_t<op_b == Op::N, nvcuda::wmma::row_major, nvcuda::wmma::col_major>;

// ---- global -> shared copies ----------------------------------------------------------------------

// One 16-byte copy. kAsync: on sm_80+ a cp.async (the copy engine moves the data while the warp goes
// on to other work; completion is awaited with cp_async_wait); below sm_80 there is no cp.async
// and the copy is an ordinary synchronous 128-bit load and store, which is still correct.
template <bool kAsync>
__device__ __forceinline__ void copy16(__half* smem, const __half* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kAsync) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
    return;
  }
#endif
  *reinterpret_cast<uint4*>(smem) = *reinterpret_cast<const uint4*>(gmem);
}

// Close the group of cp.async copies issued so far (one group per pipeline stage).
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most N groups are still in flight (this thread's copies only: a __syncthreads must
// follow before other threads read the data).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");  // no shared-memory read moves above it
#endif
}

// Copy the Tile::kRows x Tile::kCols tile of a stored row-major matrix (rows x cols, row stride ld)
// starting at (r0, c0) into shared memory, zero outside the matrix (so that the K edge adds 0 * 0
// and never a stale or NaN value). Each thread moves whole 8-half vectors: 128-bit copies when the
// matrix is vector-aligned (vec_ok, see vector_aligned) and the vector is inside it; the scalar
// fallback for a vector that straddles an edge, or for a matrix whose pointer or ld does not allow
// 16-byte accesses. kThreads is the block size.
template <class Tile, int kThreads, bool kAsync>
__device__ __forceinline__ void load_tile(__half* tile, const __half* src, int64_t ld, int64_t rows, int64_t cols,
                                          int64_t r0, int64_t c0, bool vec_ok) {
  constexpr int kVecsPerRow = Tile::kCols / 8;
  static_assert(Tile::kCols % 8 == 0, "tile rows are copied in 8-half vectors");
  for (int v = threadIdx.x; v < Tile::kRows * kVecsPerRow; v += kThreads) {
    const int r = v / kVecsPerRow, c = (v % kVecsPerRow) * 8;
    const int64_t gr = r0 + r, gc = c0 + c;
    __half* dst = tile + r * Tile::kLd + c;
    if (gr >= rows || gc >= cols) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);  // wholly outside: zeros
    } else if (vec_ok && gc + 8 <= cols) {
      copy16<kAsync>(dst, src + gr * ld + gc);
    } else {
      for (int j = 0; j < 8; ++j) dst[j] = gc + j < cols ? src[gr * ld + gc + j] : __float2half(0.0f);
    }
  }
}

// One K step's operand tiles: op(A) rows [m0, m0 + BM) and op(B) columns [n0, n0 + BN), K values
// [k0, k0 + BK), each copied from its stored layout (op N: K along a row; op T: K down a column) into
// the tile layouts TA and TB. The pipelined rungs call it once per stage (kAsync: cp.async on sm_80+).
template <Op op_a, Op op_b, class TA, class TB, int kThreads, bool kAsync>
__device__ __forceinline__ void load_operand_tiles(__half* a_tile, __half* b_tile, const GemmArgs& g, int64_t m0,
                                                   int64_t n0, int64_t k0, bool a_vec, bool b_vec) {
  const int64_t a_rows = op_a == Op::N ? g.M : g.K, a_cols = op_a == Op::N ? g.K : g.M;
  const int64_t b_rows = op_b == Op::N ? g.K : g.N, b_cols = op_b == Op::N ? g.N : g.K;
  load_tile<TA, kThreads, kAsync>(a_tile, static_cast<const __half*>(g.A), g.lda, a_rows, a_cols,
                                  op_a == Op::N ? m0 : k0, op_a == Op::N ? k0 : m0, a_vec);
  load_tile<TB, kThreads, kAsync>(b_tile, static_cast<const __half*>(g.B), g.ldb, b_rows, b_cols,
                                  op_b == Op::N ? k0 : n0, op_b == Op::N ? n0 : k0, b_vec);
}

// ---- planned copies (copy_plan.h): each thread's vectors worked out once, before the K loop ---------

template <class Tile, int kThreads>
using PlanOf = copy_plan::Plan<copy_plan::Shape<Tile::kRows, Tile::kCols, Tile::kLd, kThreads>>;

// Both operands' plans for one block. The K steps of a block whose tiles lie inside both matrices are
// copied through them: with kAsync (wmma_pipelined's lean tiles), one cp.async per vector; without
// (wmma_smem's batched copy), every load of the step first, into registers, then every store, so that
// the step waits for memory once rather than once per vector (the general copy, a loop whose every
// iteration stores what it has just loaded, waits for each load in turn).
template <Op op_a, Op op_b, class TA, class TB, int BM, int BN, int BK, int kThreads, bool kAsync>
struct PlannedCopies {
  PlanOf<TA, kThreads> a;
  PlanOf<TB, kThreads> b;
  bool inside;  // this block's tiles lie inside both matrices along M and N, and both allow 16-byte copies

  // The stored matrices as load_operand_tiles reads them: op(A) rows [m0, m0 + BM) and op(B) columns
  // [n0, n0 + BN), from K step 0. vec_ok: both matrices are vector_aligned.
  __device__ PlannedCopies(const GemmArgs& g, int64_t m0, int64_t n0, bool vec_ok)
      : a(threadIdx.x, g.lda, op_a == Op::N ? m0 : 0, op_a == Op::N ? 0 : m0, op_a == Op::N),
        b(threadIdx.x, g.ldb, op_b == Op::N ? 0 : n0, op_b == Op::N ? n0 : 0, op_b == Op::T),
        inside(vec_ok && m0 + BM <= g.M && n0 + BN <= g.N) {}

  // Copies the K step that starts at k0 if the block is inside and the step lies wholly inside K, and
  // says whether it did; otherwise the caller uses the general copy, which checks every edge. The steps
  // must come in order (0, BK, 2 BK, ...: the plans carry their offsets from one to the next), as a
  // kernel's K loop takes them; only the last one can be partial. Block-uniform, so no warp diverges.
  __device__ bool copy(__half* a_tile, __half* b_tile, const GemmArgs& g, int64_t k0) {
    if (!inside || k0 + BK > g.K) return false;
    const __half* A = static_cast<const __half*>(g.A);
    const __half* B = static_cast<const __half*>(g.B);
    constexpr int kA = decltype(a)::Shape::kPerThread, kB = decltype(b)::Shape::kPerThread;
    if constexpr (kAsync) {
#pragma unroll
      for (int i = 0; i < kA; ++i) copy16<true>(a_tile + a.dst_of(i), A + a.src_of(i));
#pragma unroll
      for (int i = 0; i < kB; ++i) copy16<true>(b_tile + b.dst_of(i), B + b.src_of(i));
    } else {
      uint4 va[kA], vb[kB];
#pragma unroll
      for (int i = 0; i < kA; ++i) va[i] = *reinterpret_cast<const uint4*>(A + a.src_of(i));
#pragma unroll
      for (int i = 0; i < kB; ++i) vb[i] = *reinterpret_cast<const uint4*>(B + b.src_of(i));
#pragma unroll
      for (int i = 0; i < kA; ++i) *reinterpret_cast<uint4*>(a_tile + a.dst_of(i)) = va[i];
#pragma unroll
      for (int i = 0; i < kB; ++i) *reinterpret_cast<uint4*>(b_tile + b.dst_of(i)) = vb[i];
    }
    a.advance();
    b.advance();
    return true;
  }
};

// What a kernel declares in place of PlannedCopies when it does not use them: nothing, so that the
// rungs and tiles that copy only the general way stay exactly as they were.
struct NoPlannedCopies {
  template <class... Args>
  __device__ explicit NoPlannedCopies(const Args&...) {}
};

template <bool kOn, Op op_a, Op op_b, class TA, class TB, int BM, int BN, int BK, int kThreads, bool kAsync>
using PlannedCopiesIf =
    std::conditional_t<kOn, PlannedCopies<op_a, op_b, TA, TB, BM, BN, BK, kThreads, kAsync>, NoPlannedCopies>;

// ---- the epilogue of one warp ----------------------------------------------------------------------

// Write a warp's FM x FN accumulator fragments (its WM x WN tile of C at (wm0, wn0)) through the
// epilogue. The fragment-to-thread mapping is opaque, so each fragment goes through a 16 x 16 FP32
// scratch tile of this warp in shared memory (32-byte aligned), from which every lane handles 8
// elements with the m < M, n < N checks, the bias of its column and the rounding into C's dtype.
template <int FM, int FN>
__device__ __forceinline__ void warp_epilogue(
    const GemmArgs& g, nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> (&acc)[FM][FN],
    float* scratch, int64_t wm0, int64_t wn0) {
  // Fully unrolled: indexing acc with a loop counter the compiler cannot resolve would move the
  // accumulators from registers to local memory for the whole kernel.
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      const int64_t fm = wm0 + i * 16, fn = wn0 + j * 16;
      if (fm < g.M && fn < g.N) {  // the same for every lane: the warp stays converged
        nvcuda::wmma::store_matrix_sync(scratch, acc[i][j], 16, nvcuda::wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * 16; e += 32) {
          const int64_t m = fm + e / 16, n = fn + e % 16;
          if (m < g.M && n < g.N) epilogue_store(g, m, n, scratch[e]);
        }
        __syncwarp();  // the scratch tile is read before the next fragment overwrites it
      }
    }
  }
}

}  // namespace hl::kernels::cuda::gemm_detail
