// GEMM ladder, rung 4: "wmma_smem" — block tiles staged in shared memory, warp tiles, 128-bit loads.
//
// What changes from rung 3 (wmma): there every warp fetched its own 16 x 16 slices from global
// memory, so a value of A was loaded once per warp that needed it. Here a block of 8 warps computes
// a 128 x 128 tile of C. For each step along K (64 deep: below) the whole block copies a 128 x 64 tile
// of op(A) and a 64 x 128 tile of op(B) into shared memory once, 8 halves (16 bytes) per thread per copy,
// and each warp then computes a 64 x 32 warp tile from it: 4 x 2 accumulator fragments, reading
// 4 A-slices and 2 B-slices per 16-step of K for 8 mma_syncs. Each value loaded from global memory
// now feeds 128 outputs instead of 16, and the loads are wide and coalesced.
//
// Three details make shared memory fast, each a lesson of its own:
//   - 128-bit copies: one 16-byte load per thread instead of eight 2-byte ones (fewer instructions,
//     full memory transactions). They need a 16-byte aligned matrix and ld % 8 == 0; when either
//     fails (or a vector straddles the matrix edge) the same code copies element by element — the
//     scalar fallback is inside the kernel, so this rung accepts any alignment (wmma_tile.cuh).
//   - padding: every shared-memory row is 8 halves longer than the tile, so that the rows a fragment
//     load touches fall on different banks (wmma_tile.cuh, kPad).
//   - many warps per block: while one warp waits for shared memory another issues mma_sync.
//
// Still missing (next rung): the block loads a tile, waits for it (__syncthreads), computes, and
// only then loads the next one, so the Tensor Cores idle during every global-memory trip.
//
// The K step is a template parameter, and the copy has two forms: the general copy, which waits for
// each vector's load before it stores it, and the batched copy, which issues every load of a K step
// before any store (wmma_smem_k_step.h). The rung was written 32 deep with the general copy and ran at
// 14% of cuBLAS at 4096^3; on an H100 (2026-11-27) 64 deep with the batched copy ran at 36%, and that
// is the rung's own since. `bench/gemm_bench --sweep` still times the other three through tuning hooks
// that only the benchmark and the tests set. Neither change overlaps copies with math: the lesson of
// this rung, and the gap rung 5 closes, stay.
//
// Precision as in every rung (paper §3.3): FP16 fragments, FP32 accumulators, one rounding on the
// store. f16 inputs only; f32 inputs get a clear "unsupported" and fall back to smem_tiled_split_k.
#include <cuda_fp16.h>
#include <mma.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/wmma_smem_k_step.h"
#include "kernels/cuda/gemm/wmma_tile.cuh"
#include "kernels/error.h"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace nvcuda;
using namespace gemm_detail;

constexpr int kBM = 128, kBN = 128;      // block tile of C (the K step, kBK, is a template parameter)
constexpr int kWarpsM = 2, kWarpsN = 4;  // 8 warps
constexpr int kWM = kBM / kWarpsM, kWN = kBN / kWarpsN;  // 64 x 32 warp tile
constexpr int kFM = kWM / 16, kFN = kWN / 16;            // 4 x 2 accumulator fragments per warp
constexpr int kThreads = 32 * kWarpsM * kWarpsN;

// kBatched: the batched copy of wmma_smem_k_step.h (a tuning candidate) where it applies.
template <Op op_a, Op op_b, int kBK, bool kBatched>
__global__ void __launch_bounds__(kThreads) gemm_wmma_smem_kernel(GemmArgs g, bool a_vec, bool b_vec) {
  using TA = ATile<op_a, kBM, kBK>;
  using TB = BTile<op_b, kBN, kBK>;
  __shared__ __align__(128) __half As[TA::kElems];
  __shared__ __align__(128) __half Bs[TB::kElems];
  __shared__ __align__(128) float scratch[kWarpsM * kWarpsN][16 * 16];  // per-warp epilogue tile

  const int warp = threadIdx.x / 32;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int wm = (warp / kWarpsN) * kWM, wn = (warp % kWarpsN) * kWN;  // the warp tile inside the block tile

  const __half* A = static_cast<const __half*>(g.A);
  const __half* B = static_cast<const __half*>(g.B);
  const int64_t a_rows = op_a == Op::N ? g.M : g.K, a_cols = op_a == Op::N ? g.K : g.M;
  const int64_t b_rows = op_b == Op::N ? g.K : g.N, b_cols = op_b == Op::N ? g.N : g.K;

  // The fragments, in plain view: per 16-step of K a warp holds kFM slices of op(A) and kFN slices of
  // op(B), and keeps kFM x kFN FP32 accumulators for the whole K loop.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, ALayout<op_a>> a_frag[kFM];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, BLayout<op_b>> b_frag[kFN];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFM][kFN];
#pragma unroll
  for (int i = 0; i < kFM; ++i)
#pragma unroll
    for (int j = 0; j < kFN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  [[maybe_unused]] PlannedCopiesIf<kBatched, op_a, op_b, TA, TB, kBM, kBN, kBK, kThreads, false> batched(
      g, m0, n0, a_vec && b_vec);
  for (int64_t k0 = 0; k0 < g.K; k0 += kBK) {
    bool copied = false;
    if constexpr (kBatched) copied = batched.copy(As, Bs, g, k0);
    if (!copied) {
      // Tile origins in stored coordinates: op(A)[m0.., k0..] is stored at (m0, k0) for N, (k0, m0) for T.
      load_tile<TA, kThreads, false>(As, A, g.lda, a_rows, a_cols, op_a == Op::N ? m0 : k0,
                                     op_a == Op::N ? k0 : m0, a_vec);
      load_tile<TB, kThreads, false>(Bs, B, g.ldb, b_rows, b_cols, op_b == Op::N ? k0 : n0,
                                     op_b == Op::N ? n0 : k0, b_vec);
    }
    __syncthreads();  // the tiles are complete

#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
#pragma unroll
      for (int i = 0; i < kFM; ++i) wmma::load_matrix_sync(a_frag[i], TA::slice(As, wm + i * 16, kk), TA::kLd);
#pragma unroll
      for (int j = 0; j < kFN; ++j) wmma::load_matrix_sync(b_frag[j], TB::slice(Bs, wn + j * 16, kk), TB::kLd);
#pragma unroll
      for (int i = 0; i < kFM; ++i)
#pragma unroll
        for (int j = 0; j < kFN; ++j) wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();  // every warp is done with the tiles before they are overwritten
  }

  warp_epilogue<kFM, kFN>(g, acc, scratch[warp], m0 + wm, n0 + wn);
}

template <Op op_a, Op op_b, int kBK, bool kBatched>
void launch(const GemmArgs& g) {
  const dim3 grid(blocks_for(g.N, kBN), blocks_for(g.M, kBM));
  gemm_wmma_smem_kernel<op_a, op_b, kBK, kBatched>
      <<<grid, kThreads, 0, stream()>>>(g, vector_aligned(g.A, g.lda), vector_aligned(g.B, g.ldb));
  HL_LAUNCH_CHECK("gemm_wmma_smem_kernel");
}

template <Op op_a, Op op_b, bool kBatched>
void launch_k_step(const GemmArgs& g) {
  const int tuned = wmma_smem::k_step_for_tuning().load(std::memory_order_relaxed);
  const int k = tuned > 0 ? tuned : wmma_smem::kKStep;
  static_assert(sizeof(wmma_smem::kCandidateKSteps) / sizeof(int) == 2, "one launch per candidate below");
  if (k == 32) {
    launch<op_a, op_b, 32, kBatched>(g);
  } else if (k == 64) {
    launch<op_a, op_b, 64, kBatched>(g);
  } else {
    throw Error(detail::concat("wmma_smem: tuning K step ", k, " is not one of those in wmma_smem_k_step.h (32, 64)"));
  }
}

template <bool kBatched>
void run_layout(const GemmArgs& g) {
  if (g.op_a == Op::N) {
    g.op_b == Op::N ? launch_k_step<Op::N, Op::N, kBatched>(g) : launch_k_step<Op::N, Op::T, kBatched>(g);
  } else {
    g.op_b == Op::N ? launch_k_step<Op::T, Op::N, kBatched>(g) : launch_k_step<Op::T, Op::T, kBatched>(g);
  }
}

void run(const GemmArgs& g) {
  check_grid_y(g, kBM, "wmma_smem");
  chosen_by_hook(wmma_smem::batched_copy_for_tuning(), wmma_smem::kBatchedCopy) ? run_layout<true>(g)
                                                                                     : run_layout<false>(g);
}

const char* unsupported(const GemmArgs& g) { return unsupported_wmma(g); }

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"wmma_smem", DeviceType::cuda, 40,
                               "128x128 block tiles in padded shared memory, 128-bit loads, 8 warps of 64x32", run,
                               unsupported});

}  // namespace hl::kernels::cuda
