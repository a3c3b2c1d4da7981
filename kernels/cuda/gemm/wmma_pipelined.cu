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
//      overlaps nothing, so the big tile there has 2 stages (the 64 x 64 tile keeps its 3).
//   2. Register double buffering: inside a K tile, the fragments for the next 16-step are loaded
//      from shared memory into a second set of registers before the mma_syncs of the current step
//      are issued, so shared-memory latency hides behind Tensor Core work.
//   3. The tile fits the problem: 128 x 128 blocks (8 warps of 64 x 32) keep a big GEMM's Tensor
//      Cores fed, but the GEMMs of an MNIST-sized layer (128 x 512 x 784, 128 x 10 x 512) would make
//      only 4 or 1 such blocks for a GPU with 100+ SMs. When the big tiles would number fewer than
//      the SMs the rung uses 64 x 64 blocks of 4 warps (32 x 32 warp tiles), 4x more blocks. When even those
//      are too few for a long reduction (LeNet's fc1 forward: 8 tiles, K = 3136; a convolution's
//      weight gradient as an im2col GEMM: 1 to 7 tiles, K = 25088 or 100352), the variant
//      wmma_pipelined_split_k also splits K across blocks (split-K, kernels/gemm_split.h):
//      blockIdx.z takes a slice of K, and a second pass (split_k.cu) adds the slices' FP32 partial
//      tiles and applies the epilogue. Written in a session without a GPU, it has been the default f16
//      GEMM on GPUs other than compute capability 9.0 (and there for the operands rung 8 declines)
//      since its tests, sanitizers and benchmark ran on an H200 (2026-11-26): LeNet fc1's forward
//      went from 0.0660 to 0.0161 ms (21% to 87% of cuBLAS), conv2's weight gradient as a GEMM from
//      0.4673 to 0.0426 ms (one gemm_bench run), and nothing that does not split moved.
//      Which big tile is best on a GPU is measured, not guessed: wmma_pipelined_tiles.h lists the
//      candidates (kOwnTile is the one used here) and `bench/gemm_bench --sweep` times each of them.
//      Some candidates (LEAN) also copy differently: the general copy spends about 40 instructions
//      per 16-byte vector, the lean one a plan made before the K loop (copy_plan.h; the README's
//      "Reading the machine code"). Since the H100 run of 2026-11-27 the rung's own tile is #12,
//      entry 0 with the lean copy: 29% to 37% of cuBLAS at 4096^3.
//   4. (Candidates #19 and #20, written 2026-11-28 without a GPU; Hopper only.) #12's block in a
//      thread-block cluster whose blocks share the operand tiles they have in common: each copies a
//      part of a shared tile and sends it into its peers' stages through distributed shared memory
//      (st.async, counted on an mbarrier of the receiver), which cuts the reads from L2 that seemed to
//      hold #12 at 37% (docs/gpu_status.md's leads question that since; gemm_wmma_pipelined_cluster_kernel
//      below; the schedule and why it is safe in cluster_share.h; README.md, "Sharing operands in a
//      thread-block cluster").
//   5. (Candidates #21-#23, written 2026-11-29 without a GPU.) Point 2 overlaps the loads of a K tile's
//      second 16-deep step with its first step's mma_syncs, but not the first step's: in #12's sm_90
//      code each K tile starts with the wait and the barrier, then about 65 copy instructions, then 6
//      ldmatrix whose results the first mma_sync needs at once. The 8 warps of a block leave the barrier
//      together, and none has an mma_sync to issue until its copies are issued and its loads return.
//      With AHEAD the order within a K tile
//      is the one CUTLASS's multistage loops use: the next step's fragments are loaded before this
//      step's mma_syncs, also across K tiles (the last step's next step is the next tile's first), and
//      the wait and the barrier come right after the mma_syncs of the second-to-last step. Each warp
//      then has a step's mma_syncs to issue right after the barrier and while its loads are in flight,
//      and the copies are issued behind the first step's mma_syncs. The steps, and why they are safe:
//      ahead_schedule.h. Which is faster is for `gemm_bench --sweep` to say (wmma_pipelined_tiles.h).
//
// Everything else is as in wmma_smem: padded shared-memory rows, predicated edges with zero fill,
// 128-bit copies with a scalar fallback inside the kernel for misaligned matrices (so this rung too
// accepts any alignment), FP16 fragments with FP32 accumulators and one rounding on the store
// (paper §3.3). f16 inputs only; f32 inputs fall back to smem_tiled_split_k.
#include <cuda_fp16.h>
#include <mma.h>

#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/ahead_schedule.h"
#include "kernels/cuda/gemm/cluster_share.h"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/ring_phases.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "kernels/cuda/gemm/wmma_tile.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/error.h"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace nvcuda;
using namespace gemm_detail;

// A tile configuration: block tile BM x BN, K step BK, warps arranged WARPS_M x WARPS_N, STAGES
// shared-memory buffers in the ring; LEAN: the full K steps copied through plans made before the loop
// (copy_plan.h); CM x CN: a thread-block cluster whose blocks share their operand tiles (cluster_share.h).
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, bool LEAN_ = false, int CM_ = 1,
          int CN_ = 1, bool AHEAD_ = false>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr bool LEAN = LEAN_;
  static constexpr int CM = CM_, CN = CN_;  // the cluster's blocks along M and N (cluster_share.h); 1 x 1: none
  static constexpr bool AHEAD = AHEAD_;     // the next K step's first fragments loaded ahead (point 5 above)
  static_assert(!AHEAD || CM * CN == 1, "the cluster kernel's K loop has no fragments-ahead form");
  // The blocks per SM the kernel asks ptxas to leave room for (__launch_bounds__' second argument; 0
  // asks nothing, and compiles exactly as the one-argument form the other tiles were verified with).
  // Left to itself, ptxas gave the AHEAD forms of #12 and #13 154-158 registers, which fit one block of
  // 256 threads per SM where #12's 118 fit two: 2 holds them to 128.
  static constexpr int kMinBlocks = AHEAD && BM * BN <= 128 * 128 ? 2 : 0;
  static_assert((CM == 1 || CM == 2) && (CN == 1 || CN == 2), "clusters of 1 or 2 blocks along M and N");
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
                       wmma_pipelined::kBigTiles[I].stages, wmma_pipelined::kBigTiles[I].lean,
                       wmma_pipelined::kBigTiles[I].cluster_m, wmma_pipelined::kBigTiles[I].cluster_n,
                       wmma_pipelined::kBigTiles[I].ahead>;
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

// One warp's share of a block tile: its FP32 accumulators for the whole K loop, and two sets of input
// fragments (register double buffering: [buf]), in plain view. The cluster kernel's; the main kernel
// below spells the same code out inline, as it did when it was verified on a GPU: moved into this
// struct, its PTX numbers the accumulators' registers in another order, which makes it a changed
// kernel to verify again (scripts/ptx_changed.sh). It moves here when it next changes anyway.
template <Op op_a, Op op_b, class Cfg>
struct WarpMma {
  using TA = ATile<op_a, Cfg::BM, Cfg::BK>;
  using TB = BTile<op_b, Cfg::BN, Cfg::BK>;
  static constexpr int FM = Cfg::FM, FN = Cfg::FN;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, ALayout<op_a>> a_frag[2][FM];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, BLayout<op_b>> b_frag[2][FN];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
  const int wm, wn;  // the warp tile's place in the block tile

  __device__ WarpMma(int wm_, int wn_) : wm(wm_), wn(wn_) {
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  }

  __device__ __forceinline__ void load_frags(int buf, const __half* as, const __half* bs, int kk) {
#pragma unroll
    for (int i = 0; i < FM; ++i) wmma::load_matrix_sync(a_frag[buf][i], TA::slice(as, wm + i * 16, kk), TA::kLd);
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::load_matrix_sync(b_frag[buf][j], TB::slice(bs, wn + j * 16, kk), TB::kLd);
  }

  // The multiply-adds of one K tile, whose A and B tiles are at as and bs: the fragments of each 16-step
  // are loaded while the previous step's mma_syncs are issued.
  __device__ __forceinline__ void multiply(const __half* as, const __half* bs) {
    load_frags(0, as, bs, 0);
#pragma unroll
    for (int step = 0; step < Cfg::BK / 16; ++step) {
      const int cur = step % 2;
      if (step + 1 < Cfg::BK / 16) load_frags(1 - cur, as, bs, (step + 1) * 16);  // the next step's fragments
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_frag[cur][i], b_frag[cur][j], acc[i][j]);
    }
  }
};

// kSplit: this block computes the slice blockIdx.z of K into its FP32 partial tile (slice_for_block).
template <Op op_a, Op op_b, class Cfg, bool kSplit>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
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

  if constexpr (Cfg::AHEAD) {
    // Point 5 above: the same copies, fragments and multiply-adds, in another order; the steps, and why
    // they are safe, are ahead_schedule.h's (1-4 below).
    constexpr int kSteps = BK / 16;
    static_assert(kSteps % 2 == 0, "each K tile starts on fragment set 0");
    static_assert(STAGES >= 3, "with fewer stages no copy is in flight while a K tile is computed");
    cp_async_wait<ahead::in_flight_at_barrier(STAGES)>();
    __syncthreads();
    load_frags(0, a_stage(0), b_stage(0), 0);
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      const __half* as = a_stage(static_cast<int>(kt % STAGES));
      const __half* bs = b_stage(static_cast<int>(kt % STAGES));
#pragma unroll
      for (int step = 0; step < kSteps; ++step) {
        const int cur = step % 2;
        // 1. The next step's fragments: this tile's (its stage's pointers are at hand), or the next
        // tile's first. (Which, the compiler knows for each unrolled step.)
        const int64_t t = ahead::loaded_tile(kt, step, kSteps);
        const int kk = ahead::loaded_step(step, kSteps) * 16;
        if (t == kt) {
          load_frags(1 - cur, as, bs, kk);
        } else if (t < k_tiles) {
          const int s = static_cast<int>(t % STAGES);
          load_frags(1 - cur, a_stage(s), b_stage(s), kk);
        }
        // 2. This step's multiply-adds.
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
          for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a_frag[cur][i], b_frag[cur][j], acc[i][j]);
        // 3. The copies of tile kt + STAGES - 1, into the stage tile kt - 1 had.
        if (ahead::copies_at(step)) {
          const int64_t next = ahead::copied_tile(kt, STAGES);
          if (next < k_tiles) load_stage(static_cast<int>(next % STAGES), next);
          cp_async_commit();
        }
        // 4. Tile kt + 1 landed (this thread's copies) and published (everyone's).
        if (ahead::barrier_after(step, kSteps)) {
          cp_async_wait<ahead::in_flight_at_barrier(STAGES)>();
          __syncthreads();
        }
      }
    }
  } else {
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
  }

  // Drain the (empty) trailing groups and let every warp finish reading the ring before it becomes
  // the epilogue's scratch space.
  cp_async_wait<0>();
  __syncthreads();
  float* scratch = reinterpret_cast<float*>(smem_raw) + warp * 256;
  warp_epilogue<FM, FN>(g, acc, scratch, m0 + wm, n0 + wn);
}

// The cluster tiles (wmma_pipelined_tiles.h #19, #20; sm_90): gemm_wmma_pipelined_kernel's K loop, with
// the blocks of a CN x CM cluster sharing the operand tiles they have in common. Each copies only its
// part of a shared tile (cluster_share.h's Part) and sends it to the peer that needs it too; the
// schedule, and why it is safe, is cluster_share.h's header (steps 1-4 below). Never split-K.
template <Op op_a, Op op_b, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    gemm_wmma_pipelined_cluster_kernel(GemmArgs g, bool a_vec, bool b_vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cs = cluster_share;
  using namespace mbarrier_ops;
  using S = Smem<op_a, op_b, Cfg>;
  using TA = typename S::TA;
  using TB = typename S::TB;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::STAGES;
  constexpr bool kShareA = Cfg::CN == 2, kShareB = Cfg::CM == 2;
  static_assert((Cfg::CM == 1 || Cfg::CM == 2) && (Cfg::CN == 1 || Cfg::CN == 2) && (kShareA || kShareB),
                "a cluster of 2 blocks along M, N or both");
  static_assert(STAGES >= 3, "step 1 needs round kt + 1 landed while later rounds stay in flight");
  using PA = cs::Part<TA, kShareA ? 2 : 1>;  // the part of the A tile this block copies
  using PB = cs::Part<TB, kShareB ? 2 : 1>;
  // What the peers send into each stage, per round: the parts of the shared tiles this block does not copy.
  constexpr uint32_t kReceived = cs::received_bytes(Cfg::CM, Cfg::CN, PA::kBytes, PB::kBytes);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  __half* const ring = reinterpret_cast<__half*>(smem_raw);
  const auto a_stage = [&](int s) { return ring + s * S::kStageElems; };
  const auto b_stage = [&](int s) { return ring + s * S::kStageElems + TA::kElems; };

  const int warp = threadIdx.x / 32;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int wm = (warp / Cfg::WARPS_N) * Cfg::WM, wn = (warp % Cfg::WARPS_N) * Cfg::WN;
  const int64_t k_tiles = (g.K + BK - 1) / BK;

  // This block's place in the cluster, the parts it copies, and its peers.
  const int x = static_cast<int>(cluster_ctaid_x()), y = static_cast<int>(cluster_ctaid_y());
  // The peers' ranks below assume x varies fastest in a rank, as in a thread's rank in its block, and a
  // cluster of exactly CN x CM blocks (launched without one, a block is a cluster of 1, and its peers'
  // addresses would name blocks that do not exist). Were it otherwise, a block would send to the wrong
  // peer and wait forever: a launch error is clearer.
  if (cluster_nctarank() != static_cast<uint32_t>(Cfg::CM * Cfg::CN) ||
      cluster_ctarank() != static_cast<uint32_t>(cs::rank_of(x, y, Cfg::CN)))
    __trap();
  const int a_part = kShareA ? x : 0, b_part = kShareB ? y : 0;
  const uint32_t a_peer = static_cast<uint32_t>(cs::a_peer(x, y, Cfg::CN));
  const uint32_t b_peer = static_cast<uint32_t>(cs::b_peer(x, y, Cfg::CN));
  const int64_t m_own = m0 + (kShareA ? a_part * (BM / 2) : 0);
  const int64_t n_own = n0 + (kShareB ? b_part * (BN / 2) : 0);

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(shared_address(&full[s]), 1);
      mbarrier_init(shared_address(&empty[s]), cs::peers(Cfg::CM, Cfg::CN));
    }
    // The first S rounds' bytes announced before any peer can send them (step 2 announces the rest).
    for (int64_t r = 0; r < STAGES && r < k_tiles; ++r)
      mbarrier_arrive_expect_tx(shared_address(&full[ring::stage_of(r, STAGES)]), kReceived);
    fence_mbarrier_init_cluster();
  }
  // No block sends to a peer, or arrives on its barriers, before the peer has initialized them.
  cluster_arrive();
  cluster_wait();

  // This block's parts of K tile kt into stage s, as gemm_wmma_pipelined_kernel copies whole tiles.
  [[maybe_unused]] PlannedCopiesIf<Cfg::LEAN, op_a, op_b, PA, PB, BM / (kShareA ? 2 : 1), BN / (kShareB ? 2 : 1), BK,
                                   Cfg::kThreads, true>
      lean(g, m_own, n_own, a_vec && b_vec);
  const auto load_stage = [&](int s, int64_t kt) {
    __half* const a_dst = a_stage(s) + PA::offset(a_part);
    __half* const b_dst = b_stage(s) + PB::offset(b_part);
    if constexpr (Cfg::LEAN) {
      if (lean.copy(a_dst, b_dst, g, kt * BK)) return;
    }
    load_operand_tiles<op_a, op_b, PA, PB, Cfg::kThreads, true>(a_dst, b_dst, g, m_own, n_own, kt * BK, a_vec, b_vec);
  };

  // Step 1: this thread's vectors of its parts of round r (copied by this thread, so landed once its
  // own cp.async groups say so) to the same places in the peers' stage, counted on their full[s].
  // Each thread sends the same number of vectors (every copy path gives vector v to thread v % kThreads),
  // counted at compile time: with threadIdx.x as the loop's start, nvcc unrolled a loop that runs once.
  // The vector is read into registers first, one 16-byte shared load: read through the reference that
  // st_async_16 takes, nvcc split some of these reads into 4-byte ones.
  const auto send_part = [&](auto part, const __half* own, uint32_t peer, uint32_t full_bar) {
    using P = decltype(part);
    static_assert(P::kVectors % Cfg::kThreads == 0, "every thread sends as many vectors of a part");
    const uint32_t bar = map_to_rank(full_bar, peer);
#pragma unroll
    for (int i = 0; i < P::kVectors / Cfg::kThreads; ++i) {
      const __half* src = own + P::vector_at(static_cast<int>(threadIdx.x) + i * Cfg::kThreads);
      const uint4 vector = *reinterpret_cast<const uint4*>(src);
      st_async_16(map_to_rank(shared_address(src), peer), vector, bar);
    }
  };
  const auto send = [&](int64_t r) {
    const int s = ring::stage_of(r, STAGES);
    // The peers are done with what this stage held S rounds ago (their step 3 released it).
    if (ring::producer_waits(r, STAGES)) mbarrier_wait<true>(shared_address(&empty[s]), ring::empty_parity(r, STAGES));
    if constexpr (kShareA) send_part(PA{}, a_stage(s) + PA::offset(a_part), a_peer, shared_address(&full[s]));
    if constexpr (kShareB) send_part(PB{}, b_stage(s) + PB::offset(b_part), b_peer, shared_address(&full[s]));
  };

  WarpMma<op_a, op_b, Cfg> mma(wm, wn);

  // Prologue: rounds 0 .. S - 2 in flight (one commit group each, possibly empty), then round 0 sent.
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  cp_async_wait<STAGES - 2>();
  if (k_tiles > 0) send(0);  // K = 0 never comes here (gemm.cpp refuses it), but a round 0 is only sent if announced

  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    const int s = ring::stage_of(kt, STAGES);
    // 1. This thread's copies of round kt + 1 have landed: send them.
    cp_async_wait<cs::groups_in_flight_at_push(STAGES)>();
    if (cs::pushed_at(kt) < k_tiles) send(cs::pushed_at(kt));
    // 2. The peers' parts of round kt have landed here; announce round kt + S's on the same barrier.
    mbarrier_wait<true>(shared_address(&full[s]), ring::full_parity(kt, STAGES));
    if (threadIdx.x == 0 && cs::expected_at(kt, STAGES) < k_tiles)
      mbarrier_arrive_expect_tx(shared_address(&full[s]), kReceived);
    // 3. Every thread's own copies of round kt visible to all; every warp done with round kt - 1, whose
    // stage the peers may now fill again.
    __syncthreads();
    const int64_t released = cs::released_at(kt, k_tiles, STAGES);
    if (threadIdx.x == 0 && released >= 0) {
      const uint32_t bar = shared_address(&empty[ring::stage_of(released, STAGES)]);
      if constexpr (kShareA) mbarrier_arrive_remote(map_to_rank(bar, a_peer));
      if constexpr (kShareB) mbarrier_arrive_remote(map_to_rank(bar, b_peer));
    }
    // 4. Round kt + S - 1 into that stage, and the multiply-adds of round kt.
    const int64_t next = kt + STAGES - 1;
    if (next < k_tiles) load_stage(ring::stage_of(next, STAGES), next);
    cp_async_commit();
    mma.multiply(a_stage(s), b_stage(s));
  }

  cp_async_wait<0>();
  __syncthreads();
  // From here no peer sends to this block or arrives on its barriers: every round it receives it has
  // waited for, and every release it hears comes before the peer's arrival here. The block may not
  // exit before that arrival, though, so the wait comes after the epilogue.
  cluster_arrive();
  float* scratch = reinterpret_cast<float*>(smem_raw) + warp * 256;
  warp_epilogue<Cfg::FM, Cfg::FN>(g, mma.acc, scratch, m0 + wm, n0 + wn);
  cluster_wait();
#else
  // launch_cluster refuses GPUs below compute capability 9.0. (The static_assert names what the body
  // above uses of Cfg, which the compile for older GPUs would otherwise report as never referenced.)
  static_assert(Cfg::FM > 0 && Cfg::FN > 0 && (Cfg::LEAN || !Cfg::LEAN), "a tile with fragments");
  __trap();
#endif
}

// A tile forced by the tuning hook may need more shared memory than this GPU allows a block (the tiles
// the rung chooses fit every GPU it runs on): refused with the numbers. More than 48 KiB of dynamic
// shared memory must be allowed explicitly, once per kernel.
template <class Cfg, class Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes, std::once_flag& opted_in) {
  const int allowed = max_shared_memory_per_block();
  HL_CHECK(bytes <= static_cast<size_t>(allowed), "wmma_pipelined: a ", Cfg::BM, "x", Cfg::BN, "x", Cfg::BK,
           " tile with ", Cfg::STAGES, " stages needs ", bytes, " bytes of shared memory per block; this GPU allows ",
           allowed);
  std::call_once(opted_in, [&] {
    HL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  });
}

// slices > 1: a split-K launch (gridDim.z = slices, each block's sums go to split.partial).
template <Op op_a, Op op_b, class Cfg, bool kSplit = false>
void launch(const GemmArgs& g, const SplitK& split = {}, int64_t slices = 1) {
  const auto kernel = gemm_wmma_pipelined_kernel<op_a, op_b, Cfg, kSplit>;
  constexpr size_t bytes = Smem<op_a, op_b, Cfg>::kBytes;
  static std::once_flag opted_in;
  allow_shared_memory<Cfg>(kernel, bytes, opted_in);
  check_grid_y(g, Cfg::BM, "wmma_pipelined");
  const dim3 grid(blocks_for(g.N, Cfg::BN), blocks_for(g.M, Cfg::BM), static_cast<unsigned>(slices));
  // A slice starts k_len (a multiple of 8) along K from the last one, so the 16-byte alignment of its
  // rows is that of the whole matrix.
  kernel<<<grid, Cfg::kThreads, bytes, stream()>>>(g, vector_aligned(g.A, g.lda), vector_aligned(g.B, g.ldb), split);
  HL_LAUNCH_CHECK("gemm_wmma_pipelined_kernel");
}

// A cluster tile: a grid of whole CN x CM clusters (the blocks past the matrix's last tile row or
// column copy zeros for their own tile and write nothing, but still copy and send the parts their
// peers need), launched through cudaLaunchKernelEx, which takes the cluster's shape.
template <Op op_a, Op op_b, class Cfg>
void launch_cluster(const GemmArgs& g) {
  const int cc = runtime::cuda_compute_capability();
  HL_CHECK(cc >= 90, "wmma_pipelined: a tile whose blocks share operands in a ", Cfg::CN, " x ", Cfg::CM,
           " thread-block cluster needs compute capability 9.0 or newer; this GPU has ", cc / 10, ".", cc % 10);
  const auto kernel = gemm_wmma_pipelined_cluster_kernel<op_a, op_b, Cfg>;
  // The kernel's body exists only in code for sm_90 or newer: a build without it (CMAKE_CUDA_ARCHITECTURES
  // with no 90) would run the trap on this GPU by JIT and leave the CUDA context unusable. Refused instead.
  static const int loaded_arch = loaded_ptx_version(kernel);  // 0: unknown, which the launch reports
  HL_CHECK(loaded_arch == 0 || loaded_arch >= 90, "wmma_pipelined: this build has no code for compute capability "
           "9.0 or newer, which a tile whose blocks share operands in a thread-block cluster needs (add 90 to "
           "CMAKE_CUDA_ARCHITECTURES)");
  constexpr size_t bytes = Smem<op_a, op_b, Cfg>::kBytes;
  static std::once_flag opted_in;
  allow_shared_memory<Cfg>(kernel, bytes, opted_in);
  const auto whole = [](unsigned blocks, int per_cluster) {
    return (blocks + per_cluster - 1) / per_cluster * per_cluster;
  };
  const unsigned rows = whole(blocks_for(g.M, Cfg::BM), Cfg::CM);
  HL_CHECK(rows <= 65535, "gemm wmma_pipelined: M=", g.M, " needs more than 65535 row tiles of ", Cfg::BM, " (",
           g.describe(), ")");
  const ClusterLaunch grid(dim3(whole(blocks_for(g.N, Cfg::BN), Cfg::CN), rows), dim3(Cfg::kThreads), bytes,
                           dim3(Cfg::CN, Cfg::CM));
  // The status is left for HL_LAUNCH_CHECK (ClusterLaunch says why).
  (void)cudaLaunchKernelEx(&grid.config, kernel, g, vector_aligned(g.A, g.lda), vector_aligned(g.B, g.ldb));
  HL_LAUNCH_CHECK("gemm_wmma_pipelined_cluster_kernel");
}

// Big tile `index` of the table (the tuning hook's choice), through a compile-time index.
template <Op op_a, Op op_b, int I = 0>
void launch_big_tile(const GemmArgs& g, int index) {
  if constexpr (I < wmma_pipelined::kBigTileCount) {
    if (index == I) {
      if constexpr (wmma_pipelined::kBigTiles[I].clustered()) {
        launch_cluster<op_a, op_b, BigTile<I>>(g);
      } else {
        launch<op_a, op_b, BigTile<I>>(g);
      }
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
