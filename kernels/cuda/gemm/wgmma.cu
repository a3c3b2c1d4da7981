// GEMM ladder, rung 7: "wgmma" — Hopper's warpgroup-wide Tensor Core instruction, wgmma.mma_async,
// reading both operands straight from shared memory.
//
// What changes from rung 5 (wmma_pipelined) and rung 6 (mma_sync): the instruction, and what it needs.
// Rungs 3 to 6 all end in mma.sync (nvcuda::wmma compiles to it): a warp multiplies 16 x 8 x 16 at a
// time from fragments it first loads into its own registers. On Hopper (compute capability 9.0) that
// instruction is the path the hardware keeps for compatibility; the Tensor Cores reach their rate
// through wgmma.mma_async, which
//   1. is issued by a warpgroup (4 warps, 128 threads) for a 64 x N x 16 product, N = 64 to 256 here:
//      one instruction does what 32 to 128 mma.sync (m16n8k16) do;
//   2. reads A and B from shared memory itself, through 64-bit descriptors (start address, two
//      strides, a swizzle mode), so no thread loads a fragment: the 200 or so instructions per thread
//      and K step that the lower rungs spend on copies and fragment loads shrink to the copies alone;
//   3. runs asynchronously: it is committed as a group and awaited (wgmma.commit_group,
//      wgmma.wait_group), with wgmma.fence before it touches accumulators that ordinary code wrote.
// The accumulators stay FP32 in registers (paper §3.3: FP16 products, FP32 sums), 32 to 128 per thread.
//
// What it demands: its operands in shared memory in one of the ISA's canonical layouts. This rung uses
// the 128-byte swizzle (wgmma_layout.h): rows of 128 bytes in atoms of 8, the 16-byte chunk c of row r
// stored at c ^ r, which is also what keeps the copies and the Tensor Cores' reads free of bank
// conflicts, with no padding. Both storage orders of each operand are taken as they are (K-major, or
// M/N-major with the instruction's transpose bit), so every layout of C = op(A) op(B) copies whole
// 16-byte runs with cp.async. Writes by cp.async (and the ordinary stores of the edges) are seen by
// wgmma, which reads through the "async proxy", only after fence.proxy.async in each writing thread and
// a barrier.
//
// Tiles (wgmma_layout.h): 128 x 128 by default, 128 x 64 where C has 64 columns or fewer, and two
// candidates for `gemm_bench --sweep` (128 x 256; one group of wgmma left running across the barrier).
//
// What stays: the cp.async ring of rung 5 (here 3 or 4 stages of 64-deep K tiles), the zero-filled
// edges and scalar fallback for any M, N, K >= 1 and any alignment, and the common epilogue (alpha,
// beta, bias, ReLU, f16 or f32 C) through an FP32 staging tile in shared memory, as in mma_sync.
// What it leaves for later rungs: the TMA copy engine and a producer warp (here every thread copies,
// and in the rung's own tiles every warpgroup waits for its wgmma before the next barrier): rung 8,
// wgmma_tma.cu; and split-K. The instructions' wrappers and the epilogue are in wgmma_ops.cuh, which
// both rungs share.
//
// Only compute capability 9.0 runs it: wgmma exists in the sm_90a target alone, so this file is built
// for 90a whatever CMAKE_CUDA_ARCHITECTURES says (CMakeLists.txt: the halfling_sm90a object library),
// and every other GPU is refused with the reason. f16 inputs only.
//
// Status: written in a session without a GPU (2026-11-27). The layouts, descriptors and accumulator map
// pass a CPU simulation against a model of the instruction written from the PTX ISA
// (tests/kernels/test_wgmma_layout.cpp); the GPU tests are the loop over every variant in
// tests/kernels/test_gemm_cuda.cpp and CudaGemm.Wgmma*. They, compute-sanitizer and gemm_bench ran on
// an H100 the same day (66% of cuBLAS at 4096^3); it stays opt-in for a measured reason (below).
#include <cuda_fp16.h>

#include <cstdint>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/cuda/gemm/wgmma_ops.cuh"  // the instructions, the epilogue
#include "kernels/cuda/gemm/wmma_tile.cuh"  // copy16, cp_async_commit, cp_async_wait
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace gemm_detail;
using namespace wgmma_layout;
using namespace wgmma_ops;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- the copies ------------------------------------------------------------------------------------------

// One operand's X x 64 tile of a stage, from the stored matrix (rows x cols, row stride ld; the tile's
// first stored element at (r0, c0)) into the swizzled layout: 16-byte cp.async where the 8 values lie
// inside the matrix and it allows 16-byte accesses (vec_ok), zeros where they lie wholly outside (the
// K edge then adds 0 * 0, never a stale or NaN value), and 8 scalar loads otherwise.
template <bool kKMajor, int X>
__device__ __forceinline__ void copy_tile(unsigned char* tile, const __half* src, int64_t ld, int64_t rows,
                                          int64_t cols, int64_t r0, int64_t c0, bool vec_ok) {
  constexpr int kChunks = X * kBK / 8;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const Chunk c = chunk_of<kKMajor, X>(static_cast<int>(threadIdx.x) + i * kThreads);
    const int64_t gr = r0 + c.row, gc = c0 + c.col;
    unsigned char* dst = tile + c.bytes;
    if (gr >= rows || gc >= cols) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
    } else if (vec_ok && gc + 8 <= cols) {
      copy16<true>(reinterpret_cast<__half*>(dst), src + gr * ld + gc);
    } else {
      alignas(16) __half v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = gc + j < cols ? src[gr * ld + gc + j] : __float2half(0.0f);
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
    }
  }
}

// The same copy for a tile that lies wholly inside a matrix allowing 16-byte accesses: no checks, one
// cp.async per chunk. The general copy above spends most of its instructions per chunk on the checks and
// the scalar path (about 70 per chunk in the sm_90a listing, against the Tensor Cores' 4 instructions
// per K step); here the chunks of a thread are a fixed stride apart in both memories, so each costs
// an address addition and the copy.
template <bool kKMajor, int X>
__device__ __forceinline__ void copy_tile_inside(unsigned char* tile, const __half* src, int64_t ld, int64_t r0,
                                                 int64_t c0) {
  constexpr int kChunks = X * kBK / 8;
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const Chunk c = chunk_of<kKMajor, X>(static_cast<int>(threadIdx.x) + i * kThreads);
    copy16<true>(reinterpret_cast<__half*>(tile + c.bytes), src + (r0 + c.row) * ld + c0 + c.col);
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// kInFlight: the groups of wgmma left running across the barrier (wgmma_layout.h, TileConfig). A tile
// whose shared memory leaves room for two blocks per SM gets them: at most 128 registers per thread.
template <Op op_a, Op op_b, int BN, int kStages, int kInFlight>
__global__ void __launch_bounds__(kThreads, (Tile<BN, kStages>::kBlocksPerSm))
    gemm_wgmma_kernel(GemmArgs g, bool a_vec, bool b_vec) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tile<BN, kStages>;
  static_assert(kInFlight == 0 || kInFlight == 1, "wgmma groups left running: none or one");
  constexpr int kAhead = ring_ahead(kStages, kInFlight);  // tiles copied ahead of the one being read
  static_assert(kAhead >= 1, "a ring with a tile in flight beside the one being read");
  constexpr bool kAKMajor = op_a == Op::N, kBKMajor = op_b == Op::T;

  // The ring starts on a 1024-byte boundary (Tile::kSmemBytes has the slack): the swizzle pattern is
  // anchored to addresses, and the descriptors' base offset of 0 says every atom starts on one.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* const ring = smem_raw + (kAtomBytes - smem_address(smem_raw) % kAtomBytes) % kAtomBytes;
  const uint32_t ring_addr = smem_address(ring);

  const int wg = static_cast<int>(threadIdx.x) / 128, t = static_cast<int>(threadIdx.x) % 128;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t k_tiles = (g.K + kBK - 1) / kBK;

  const __half* A = static_cast<const __half*>(g.A);
  const __half* B = static_cast<const __half*>(g.B);
  // The stored matrices: A is M x K (op N) or K x M (op T), B is K x N (op N) or N x K (op T).
  const int64_t a_rows = kAKMajor ? g.M : g.K, a_cols = kAKMajor ? g.K : g.M;
  const int64_t b_rows = kBKMajor ? g.N : g.K, b_cols = kBKMajor ? g.K : g.N;
  // Whether this block's tiles lie inside both matrices along M and N, both allowing 16-byte copies:
  // then every K step but a partial last one takes the copy without checks. Block-uniform.
  const bool inside = a_vec && b_vec && m0 + kBM <= g.M && n0 + BN <= g.N;
  const auto load_stage = [&](int s, int64_t kt) {
    unsigned char* stage = ring + s * T::kStageBytes;
    const int64_t k0 = kt * kBK;
    if (inside && k0 + kBK <= g.K) {
      copy_tile_inside<kAKMajor, kBM>(stage, A, g.lda, kAKMajor ? m0 : k0, kAKMajor ? k0 : m0);
      copy_tile_inside<kBKMajor, BN>(stage + T::kABytes, B, g.ldb, kBKMajor ? n0 : k0, kBKMajor ? k0 : n0);
      return;
    }
    copy_tile<kAKMajor, kBM>(stage, A, g.lda, a_rows, a_cols, kAKMajor ? m0 : k0, kAKMajor ? k0 : m0, a_vec);
    copy_tile<kBKMajor, BN>(stage + T::kABytes, B, g.ldb, b_rows, b_cols, kBKMajor ? n0 : k0, kBKMajor ? k0 : n0,
                            b_vec);
  };

  float acc[T::kAccPerThread];
#pragma unroll
  for (int i = 0; i < T::kAccPerThread; ++i) acc[i] = 0.0f;

  // The ring, as in wmma_pipelined: kAhead tiles in flight, one commit group per tile.
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<copies_left_pending(kStages, kInFlight)>();  // this thread's copies of tile kt have landed
    fence_proxy_async();          // ... and are visible to wgmma
    __syncthreads();  // everyone's are; every wgmma of tile kt - 1 - kInFlight has completed (waited below)
    const int64_t next = kt + kAhead;
    if (next < k_tiles) load_stage(static_cast<int>(next % kStages), next);  // into that tile's buffer
    cp_async_commit();

    const uint32_t a_tile = ring_addr + static_cast<uint32_t>(kt % kStages) * T::kStageBytes;
    const uint32_t b_tile = a_tile + T::kABytes;
    wgmma_fence();
#pragma unroll
    for (int slice = 0; slice < kBK / kInstrK; ++slice) {
      wgmma_m64k16<BN, kAKMajor ? 0 : 1, kBKMajor ? 0 : 1>(acc, slice_descriptor<kAKMajor>(a_tile, wg * kWgRows, slice),
                                                          slice_descriptor<kBKMajor>(b_tile, 0, slice));
    }
    wgmma_commit();
    // With kInFlight = 0 this step's buffer is free for the copies the next iteration issues after its
    // barrier; with 1, the previous step's is, while this step's multiply-adds go on.
    wgmma_wait<kInFlight>();
    pin_accumulators(acc);
  }
  wgmma_wait<0>();
  pin_accumulators(acc);
  cp_async_wait<0>();
  __syncthreads();  // every warpgroup is done reading the ring: it becomes the epilogue's staging tile

  // Epilogue: the accumulators to a 128 x BN FP32 staging tile in the ring, then every thread takes
  // consecutive columns of it: coalesced writes of C through the common epilogue, as in mma_sync.
  float* Cs = reinterpret_cast<float*>(ring);
  stage_accumulators<BN>(Cs, acc, wg, t);
  __syncthreads();
  store_staged<BN>(g, Cs, m0, n0, static_cast<int>(threadIdx.x), kThreads);
#elif defined(__CUDA_ARCH__)
  __trap();  // built for a target without wgmma: unsupported() refuses every GPU this could run on
#endif
}

template <Op op_a, Op op_b, int BN, int kStages, int kInFlight>
void launch(const GemmArgs& g) {
  const auto kernel = gemm_wgmma_kernel<op_a, op_b, BN, kStages, kInFlight>;
  constexpr int bytes = Tile<BN, kStages>::kSmemBytes;
  const int allowed = max_shared_memory_per_block();
  HL_CHECK(bytes <= allowed, "wgmma: a 128x", BN, "x64 tile with ", kStages, " stages needs ", bytes,
           " bytes of shared memory per block; this GPU allows ", allowed);
  static std::once_flag opted_in;  // more than 48 KiB of dynamic shared memory: allowed once per kernel
  std::call_once(opted_in, [&] {
    HL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    // All of the SM's unified L1 / shared memory as shared memory, so that the tiles meant to share an
    // SM between two blocks can (the copies bypass L1: cp.async.cg). A hint the driver may refine.
    HL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
  });
  check_grid_y(g, kBM, "wgmma");
  const dim3 grid(blocks_for(g.N, BN), blocks_for(g.M, kBM));
  kernel<<<grid, kThreads, bytes, stream()>>>(g, vector_aligned(g.A, g.lda), vector_aligned(g.B, g.ldb));
  HL_LAUNCH_CHECK("gemm_wgmma_kernel");
}

template <int I>
void run_tile(const GemmArgs& g) {
  constexpr int BN = kTiles[I].bn, S = kTiles[I].stages, F = kTiles[I].in_flight;
  if (g.op_a == Op::N) {
    g.op_b == Op::N ? launch<Op::N, Op::N, BN, S, F>(g) : launch<Op::N, Op::T, BN, S, F>(g);
  } else {
    g.op_b == Op::N ? launch<Op::T, Op::N, BN, S, F>(g) : launch<Op::T, Op::T, BN, S, F>(g);
  }
}

void run(const GemmArgs& g) {
  const int forced = wgmma::tile_for_tuning().load(std::memory_order_relaxed);
  const int tile = forced >= 0 ? forced : own_tile(g.N);
  HL_CHECK(tile < kTileCount, "gemm wgmma: the tuning hook names tile #", tile, "; wgmma_layout.h lists ", kTileCount);
  static_assert(kTileCount == 4, "run() dispatches every tile of wgmma_layout.h's table");
  switch (tile) {
    case 1:
      return run_tile<1>(g);
    case 2:
      return run_tile<2>(g);
    case 3:
      return run_tile<3>(g);
    default:
      return run_tile<0>(g);
  }
}

const char* unsupported(const GemmArgs& g) {
  if (const char* why = unsupported_wmma(g)) return why;
  const int cc = runtime::cuda_compute_capability();  // cached; 0 without a GPU
  if (cc != 0 && cc != 90)
    return "wgmma needs compute capability 9.0: wgmma.mma_async is an sm_90a instruction, for Hopper GPUs only";
  return nullptr;
}

}  // namespace

// Priority 60: the instruction Hopper's Tensor Cores are built for. Verified on an H100 (2026-11-27) and
// kept opt-in, a lesson: it does not split K, and rung 8 (wgmma_tma.cu, priority 65) is faster on the
// squares and most training shapes, so in the automatic choice it would mostly take the rows rung 8
// declines, such as LeNet conv1's im2col weight gradient (2.11 ms against wmma_pipelined_split_k's 0.032).
HL_REGISTER_VARIANT(GemmArgs, {"wgmma", DeviceType::cuda, 60,
                               "wgmma.mma_async (sm_90a) from 128-byte-swizzled shared memory, 2 warpgroups, "
                               "cp.async ring of 64-deep K tiles",
                               run, unsupported, /*opt_in=*/true});

}  // namespace hl::kernels::cuda
