// GEMM ladder, rung 5: "wmma_pipelined" — a multi-stage cp.async pipeline, double-buffered fragments,
// and a tile chosen for the problem and the GPU.
//
// What changes from rung 4 (wmma_smem): there the block loaded a tile, waited for it, computed, and
// only then asked for the next one, so the Tensor Cores sat idle for every trip to global memory
// (hundreds of cycles). Three changes overlap the trips with the math:
//   1. A ring of STAGES shared-memory buffers filled with cp.async (sm_80+): the copies for tile
//      kt + STAGES - 1 are issued, and the block computes tile kt while they are in flight; it waits
//      (cp.async.wait_group) only for the oldest group, the one it is about to use. One
//      __syncthreads per K step both publishes that tile and tells the block that the buffer of
//      tile kt - 1 is free to be refilled. Below sm_80 (the T4) there is no cp.async: the same loop
//      runs with ordinary synchronous 128-bit copies (wmma_tile.cuh, copy16), which is correct but
//      overlaps nothing, so that path uses 2 stages.
//   2. Register double buffering: inside a K tile, the fragments for the next 16-step are loaded
//      from shared memory into a second set of registers before the mma_syncs of the current step
//      are issued, so shared-memory latency hides behind Tensor Core work.
//   3. The tile fits the problem: 128 x 128 blocks (8 warps of 64 x 32) keep a big GEMM's Tensor
//      Cores fed, but the GEMMs of an MNIST-sized layer (128 x 512 x 784, 128 x 10 x 512) would make
//      only 4 or 1 such blocks for a GPU with 100+ SMs. When the big tile would leave most SMs idle
//      the rung uses 64 x 64 blocks of 4 warps (32 x 32 warp tiles), 4x more blocks. When even those
//      are too few for a long reduction (LeNet's fc1 forward: 8 tiles, K = 3136; a convolution's
//      weight gradient as an im2col GEMM: 1 to 7 tiles, K = 25088 or 100352), the variant
//      wmma_pipelined_split_k also splits K across blocks (split-K, kernels/gemm_split.h):
//      blockIdx.z takes a slice of K, and a second pass (split_k.cu) adds the slices' FP32 partial
//      tiles and applies the epilogue. Written in a session without a GPU, it is the default f16 GEMM
//      since its tests, sanitizers and benchmark ran on an H200 (2026-11-26): LeNet fc1's forward
//      went from 0.0660 to 0.0161 ms (21% to 87% of cuBLAS), conv2's weight gradient as a GEMM from
//      0.4673 to 0.0426 ms (one gemm_bench run), and nothing that does not split moved.
//      Which big tile is best on a GPU is measured, not guessed: wmma_pipelined_tiles.h lists the
//      candidates (kOwnTile is the one used here) and `bench/gemm_bench --sweep` times each of them.
//      Some candidates (LEAN) also copy differently: the general copy spends about 40 instructions
//      per 16-byte vector, the lean one a plan made before the K loop (copy_plan.h; the README's
//      "Reading the machine code"). Since the H100 run of 2026-11-27 the rung's own tile is #12,
//      entry 0 with the lean copy: 29% to 37% of cuBLAS at 4096^3.
//
// Everything else is as in wmma_smem: padded shared-memory rows, predicated edges with zero fill,
// 128-bit copies with a scalar fallback inside the kernel for misaligned matrices (so this rung too
// accepts any alignment), FP16 fragments with FP32 accumulators and one rounding on the store
// (paper §3.3). f16 inputs only; f32 inputs fall back to smem_tiled.
#include <cuda_fp16.h>
#include <mma.h>

#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "kernels/cuda/gemm/wmma_tile.cuh"
#include "kernels/error.h"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace nvcuda;
using namespace gemm_detail;

// A tile configuration: block tile BM x BN, K step BK, warps arranged WARPS_M x WARPS_N, STAGES
// shared-memory buffers in the ring; LEAN: the full K steps copied through plans made before the loop
// (copy_plan.h; the sweep's candidates only, until a GPU has timed them).
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, bool LEAN_ = false>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr bool LEAN = LEAN_;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int FM = WM / 16, FN = WN / 16;            // accumulator fragments per warp
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "warp tiles are made of 16x16x16 steps");
};

// Entry I of the big tiles for sm_80+ (wmma_pipelined_tiles.h): kOwnTile (#12: entry 0's 128 x 128 x 32,
// 4 stages and 68 to 80 KiB of shared memory, with the lean copy) is the rung's; the others are the
// candidates that gemm_bench --sweep times.
template <int I>
using BigTile = Config<wmma_pipelined::kBigTiles[I].bm, wmma_pipelined::kBigTiles[I].bn, wmma_pipelined::kBigTiles[I].bk,
                       wmma_pipelined::kBigTiles[I].warps_m, wmma_pipelined::kBigTiles[I].warps_n,
                       wmma_pipelined::kBigTiles[I].stages, wmma_pipelined::kBigTiles[I].lean>;
using BigAmpere = BigTile<wmma_pipelined::kOwnTile>;  // sm_80+ (wmma_pipelined_tiles.h says why)
using BigTuring = Config<128, 128, 32, 2, 4, 2>;  // sm_75: synchronous copies, 2 buffers suffice
using Small = Config<64, 64, 32, 2, 2, 3>;        // small GEMMs: 4x the blocks of the big tile

template <Op op_a, Op op_b, class Cfg>
struct Smem {
  using TA = ATile<op_a, Cfg::BM, Cfg::BK>;
  using TB = BTile<op_b, Cfg::BN, Cfg::BK>;
  static constexpr int kStageElems = TA::kElems + TB::kElems;  // halves per stage
  static constexpr size_t kBytes = sizeof(__half) * kStageElems * Cfg::STAGES;
  // The epilogue reuses the ring (one 16 x 16 FP32 tile per warp) once the K loop is done.
  static_assert(sizeof(float) * 256 * Cfg::WARPS_M * Cfg::WARPS_N <= kBytes, "epilogue scratch fits in the ring");
  // Every stage starts 128-byte aligned, as the fragment loads and 16-byte copies need.
  static_assert((sizeof(__half) * TA::kElems) % 128 == 0 && (sizeof(__half) * kStageElems) % 128 == 0,
                "stage buffers stay aligned");
};

// kSplit: this block computes the slice blockIdx.z of K into its FP32 partial tile (slice_for_block).
template <Op op_a, Op op_b, class Cfg, bool kSplit>
__global__ void __launch_bounds__(Cfg::kThreads)
    gemm_wmma_pipelined_kernel(GemmArgs args, bool a_vec, bool b_vec, SplitK split) {
  const GemmArgs g = kSplit ? slice_for_block(args, split) : args;
  using S = Smem<op_a, op_b, Cfg>;
  using TA = typename S::TA;
  using TB = typename S::TB;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::STAGES;
  constexpr int FM = Cfg::FM, FN = Cfg::FN;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* const ring = reinterpret_cast<__half*>(smem_raw);
  // Stage s: the A tile, then the B tile.
  const auto a_stage = [&](int s) { return ring + s * S::kStageElems; };
  const auto b_stage = [&](int s) { return ring + s * S::kStageElems + TA::kElems; };

  const int warp = threadIdx.x / 32;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int wm = (warp / Cfg::WARPS_N) * Cfg::WM, wn = (warp % Cfg::WARPS_N) * Cfg::WN;

  const int64_t k_tiles = (g.K + BK - 1) / BK;

  // Issue the copies of K tile kt into stage s (asynchronous on sm_80+): through the plans when the
  // tile is LEAN and the step allows it, else the general copy.
  [[maybe_unused]] PlannedCopiesIf<Cfg::LEAN, op_a, op_b, TA, TB, BM, BN, BK, Cfg::kThreads, true> lean(g, m0, n0,
                                                                                                     a_vec && b_vec);
  const auto load_stage = [&](int s, int64_t kt) {
    if constexpr (Cfg::LEAN) {
      if (lean.copy(a_stage(s), b_stage(s), g, kt * BK)) return;
    }
    load_operand_tiles<op_a, op_b, TA, TB, Cfg::kThreads, true>(a_stage(s), b_stage(s), g, m0, n0, kt * BK, a_vec,
                                                                 b_vec);
  };

  // The fragments, in plain view. Two sets of input fragments (register double buffering: [buf]),
  // one set of FP32 accumulators for the whole K loop.
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, ALayout<op_a>> a_frag[2][FM];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, BLayout<op_b>> b_frag[2][FN];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const auto load_frags = [&](int buf, const __half* as, const __half* bs, int kk) {
#pragma unroll
    for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a_frag[buf][i], TA::slice(as, wm + i * 16, kk), TA::kLd);
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b_frag[buf][j], TB::slice(bs, wn + j * 16, kk), TB::kLd);
  };

  // Prologue: put the first STAGES - 1 tiles in flight, one commit group each (a group may be empty
  // when K is short; the counting below relies on one group per tile either way).
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }

  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    // Groups committed so far: STAGES - 1 + kt. Tile kt is ready when at most STAGES - 2 newer
    // groups are still in flight; the barrier then makes every thread's copies visible to all, and
    // guarantees that every warp finished computing tile kt - 1, whose buffer is refilled next.
    cp_async_wait<STAGES - 2>();
    __syncthreads();

    const int64_t next = kt + STAGES - 1;
    if (next < k_tiles) load_stage(static_cast<int>(next % STAGES), next);
    cp_async_commit();

    const __half* as = a_stage(static_cast<int>(kt % STAGES));
    const __half* bs = b_stage(static_cast<int>(kt % STAGES));
    load_frags(0, as, bs, 0);
#pragma unroll
    for (int step = 0; step < BK / 16; ++step) {
      const int cur = step % 2;
      if (step + 1 < BK / 16) load_frags(1 - cur, as, bs, (step + 1) * 16);  // the next step's fragments
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_frag[cur][i], b_frag[cur][j], acc[i][j]);
    }
  }

  // Drain the (empty) trailing groups and let every warp finish reading the ring before it becomes
  // the epilogue's scratch space.
  cp_async_wait<0>();
  __syncthreads();
  float* scratch = reinterpret_cast<float*>(smem_raw) + warp * 256;
  warp_epilogue<FM, FN>(g, acc, scratch, m0 + wm, n0 + wn);
}

// slices > 1: a split-K launch (gridDim.z = slices, each block's sums go to split.partial).
template <Op op_a, Op op_b, class Cfg, bool kSplit = false>
void launch(const GemmArgs& g, const SplitK& split = {}, int64_t slices = 1) {
  const auto kernel = gemm_wmma_pipelined_kernel<op_a, op_b, Cfg, kSplit>;
  constexpr size_t bytes = Smem<op_a, op_b, Cfg>::kBytes;
  // More than 48 KiB of dynamic shared memory must be allowed explicitly, once per kernel.
  // (The tiles the rung chooses fit every GPU it runs on; a tile forced by the tuning hook may not.)
  const int allowed = max_shared_memory_per_block();
  HL_CHECK(bytes <= static_cast<size_t>(allowed), "wmma_pipelined: a ", Cfg::BM, "x", Cfg::BN, "x", Cfg::BK,
           " tile with ", Cfg::STAGES, " stages needs ", bytes, " bytes of shared memory per block; this GPU allows ",
           allowed);
  static std::once_flag opted_in;
  std::call_once(opted_in, [&] {
    HL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  });
  check_grid_y(g, Cfg::BM, "wmma_pipelined");
  const dim3 grid(blocks_for(g.N, Cfg::BN), blocks_for(g.M, Cfg::BM), static_cast<unsigned>(slices));
  // A slice starts k_len (a multiple of 8) along K from the last one, so the 16-byte alignment of its
  // rows is that of the whole matrix.
  kernel<<<grid, Cfg::kThreads, bytes, stream()>>>(g, vector_aligned(g.A, g.lda), vector_aligned(g.B, g.ldb), split);
  HL_LAUNCH_CHECK("gemm_wmma_pipelined_kernel");
}

// Big tile `index` of the table (the tuning hook's choice), through a compile-time index.
template <Op op_a, Op op_b, int I = 0>
void launch_big_tile(const GemmArgs& g, int index) {
  if constexpr (I < wmma_pipelined::kBigTileCount) {
    if (index == I) {
      launch<op_a, op_b, BigTile<I>>(g);
    } else {
      launch_big_tile<op_a, op_b, I + 1>(g, index);
    }
  }
}

// The tile for this problem on this GPU (see point 3 above); kSplitK: the wmma_pipelined_split_k
// variant, which may also split K.
template <Op op_a, Op op_b, bool kSplitK>
void launch_for_device(const GemmArgs& g) {
  // bench/gemm_bench --sweep: one big tile for every problem (sm_80+; the T4 keeps its own tile).
  const int tuned = wmma_pipelined::big_tile_for_tuning().load(std::memory_order_relaxed);
  if (tuned >= 0 && runtime::cuda_compute_capability() >= 80) {
    HL_CHECK(tuned < wmma_pipelined::kBigTileCount, "wmma_pipelined: tuning tile ", tuned, " is not one of the ",
             wmma_pipelined::kBigTileCount, " in wmma_pipelined_tiles.h");
    launch_big_tile<op_a, op_b>(g, tuned);
    return;
  }
  const int64_t big_blocks = static_cast<int64_t>(blocks_for(g.M, 128)) * blocks_for(g.N, 128);
  if (big_blocks < sm_count()) {
    const int64_t small_blocks = static_cast<int64_t>(blocks_for(g.M, Small::BM)) * blocks_for(g.N, Small::BN);
    const SplitKPlan plan = kSplitK ? plan_split_k(small_blocks, g.K, sm_count(), Small::BK) : SplitKPlan{1, g.K};
    if (plan.slices > 1) {
      run_split_k(g, plan, [&](const SplitK& s) { launch<op_a, op_b, Small, true>(g, s, plan.slices); });
    } else {
      launch<op_a, op_b, Small>(g);
    }
  } else if (runtime::cuda_compute_capability() >= 80) {
    launch<op_a, op_b, BigAmpere>(g);
  } else {
    launch<op_a, op_b, BigTuring>(g);
  }
}

template <bool kSplitK>
void run(const GemmArgs& g) {
  if (g.op_a == Op::N) {
    g.op_b == Op::N ? launch_for_device<Op::N, Op::N, kSplitK>(g) : launch_for_device<Op::N, Op::T, kSplitK>(g);
  } else {
    g.op_b == Op::N ? launch_for_device<Op::T, Op::N, kSplitK>(g) : launch_for_device<Op::T, Op::T, kSplitK>(g);
  }
}

const char* unsupported(const GemmArgs& g) { return unsupported_wmma(g); }

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"wmma_pipelined", DeviceType::cuda, 50,
                               "multi-stage cp.async pipeline, double-buffered fragments, tile per problem and GPU",
                               run<false>, unsupported});

// Split-K (point 3) takes wmma_pipelined's place: the same rung wherever it does not split, and
// measured faster where it does (the header; bench/results/gpu_short_nvidia_h200_2026-11-26.txt).
HL_REGISTER_VARIANT(GemmArgs, {"wmma_pipelined_split_k", DeviceType::cuda, 55,
                               "wmma_pipelined, and a long reduction over few output tiles split across blocks",
                               run<true>, unsupported});

}  // namespace hl::kernels::cuda
