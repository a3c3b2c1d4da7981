// GEMM ladder, rung 8: "wgmma_tma" — the copies handed to the Tensor Memory Accelerator (TMA), and the
// block split into a producer warpgroup and two consumer warpgroups that pass the ring's stages back
// and forth through mbarriers.
//
// What changes from rung 7 (wgmma): who copies, and how the two sides wait for each other.
//   1. The copies. In rung 7 every thread issues cp.async for its 16-byte chunks of every stage, with
//      bounds checks, zero-filling and a scalar fallback at the edges: on the order of 10 to 70
//      instructions per chunk, from the same warps that issue the wgmma. Here one thread asks the TMA
//      unit for a whole box (up to 256 rows x 128 bytes) with one instruction,
//      cp.async.bulk.tensor.2d, described by a tensor map made on the host (make_tensor_map): the
//      matrix's address, sizes and row stride, the box, and the 128-byte swizzle, which the unit
//      applies as it writes, landing exactly the layout rung 7's copies write by hand
//      (wgmma_tma_plan.h says why, and its CPU test checks it). Elements outside the matrix arrive as
//      zeros: the edges cost nothing.
//   2. The waiting. Rung 7's K loop is one __syncthreads per step, at which every warp must have
//      finished its copies and its multiply-adds. Here each stage has two mbarriers: `full`, which
//      completes when the TMA unit has written the stage's bytes (the producer announces how many:
//      mbarrier.arrive.expect_tx), and `empty`, which completes when every consumer thread has
//      arrived after its wgmma stopped reading the stage. The producer runs ahead as far as the ring
//      allows; a consumer waits only for the stage it needs. No barrier spans the whole block in
//      the K loop.
//   3. The registers. The producer needs almost none, the consumers a lot (BN / 2 FP32 accumulators
//      each): setmaxnreg moves them, 40 per producer thread and 232 per consumer thread, which is how
//      a 64 x 256 accumulator per warpgroup (tile #1) fits without spilling.
// What stays: wgmma.mma_async from the 128-byte-swizzled layout through the same descriptors
// (wgmma_layout.h), FP32 accumulators (paper §3.3: FP16 products, FP32 sums), and the common epilogue
// through an FP32 staging tile (wgmma_ops.cuh). And split-K, as a second variant,
// wgmma_tma_split_k: where the output has few tiles and K is long, blockIdx.z takes a slice of the K
// tiles (kernels/gemm_split.h) and split_k.cu's second pass adds the slices, so that the top rung can
// take the training shapes with long reductions too (LeNet's fc1 forward, 128 x 256 x 3136: 4 tiles of
// 128 x 64).
// What it leaves for later: thread-block clusters (one TMA copy multicast to the blocks that share a
// tile row), a persistent scheduler that overlaps one tile's epilogue with the next tile's loads, and
// a TMA store of C.
//
// What the TMA demands, and this rung refuses otherwise (the registry's automatic choice then takes
// wmma_pipelined_split_k; rung 7 is opt-in):
// both input matrices 16-byte aligned with a row stride that is a multiple of 8 halves (16 bytes),
// sizes up to 2^31 - 1 (the box coordinates are signed 32-bit), compute capability 9.0, f16 inputs.
//
// Status: written in a session without a GPU (2026-11-27). The boxes and the barrier schedule pass CPU
// tests (tests/kernels/test_wgmma_layout.cpp, WgmmaTma*); the GPU tests are the loop over every
// variant in tests/kernels/test_gemm_cuda.cpp and CudaGemm.WgmmaTma*. They, compute-sanitizer and
// gemm_bench ran on an H100 the same day, and it was promoted (the registration at the end).
#include <cuda.h>  // CUtensorMap and its enums (types only: the driver is reached through the runtime)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/cuda/gemm/wgmma_ops.cuh"
#include "kernels/cuda/gemm/wgmma_tma_plan.h"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace gemm_detail;
using namespace wgmma_ops;
using namespace mbarrier_ops;  // the mbarriers (mbarrier.cuh)
namespace wl = wgmma_layout;
namespace tp = wgmma_tma_plan;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- the copy engine ----------------------------------------------------------------------------------------

// One box of the tensor map at coordinates (c0, c1), dimension 0 first, into shared memory at dst; the
// unit counts its bytes on the mbarrier bar when they have landed. (.shared::cluster with no cluster:
// the block is a cluster of one, and its own shared addresses are valid cluster addresses.)
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int64_t c0, int64_t c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(static_cast<int>(c0)), "r"(static_cast<int>(c1)), "r"(bar)
      : "memory");
}

// The boxes of one operand tile (wgmma_tma_plan.h): one K-major box, or X / 64 MN-major ones.
template <bool kKMajor, int X>
__device__ __forceinline__ void tma_load_tile(uint32_t tile, const CUtensorMap* map, int64_t x0, int64_t k0,
                                              uint32_t bar) {
#pragma unroll
  for (int j = 0; j < tp::Boxes<kKMajor, X>::kCount; ++j) {
    const tp::Box b = tp::box<kKMajor, X>(j, x0, k0);
    tma_load(tile + b.bytes, map, b.c0, b.c1, bar);
  }
}

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// The consumers' own barrier (named barrier 1, 256 threads): the producer warpgroup has left by then.
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(tp::kConsumerThreads) : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The tensor maps go in as __grid_constant__ parameters: the TMA unit reads them from the kernel's
// parameter space, where they must stay unmodified (and 64-byte aligned, which CUtensorMap is).
// kSplit: this block computes slice blockIdx.z of K into its FP32 partial tile (wgmma_tma_split_k,
// below). The tensor maps describe the whole matrices, so the slice is a range of K tiles: it starts at
// K value blockIdx.z * k_len, a multiple of 64 (the plan's K step), and only the last slice's last
// tile reaches past K, where the unit fills zeros as at any edge.
template <Op op_a, Op op_b, int BN, int kStages, int kInFlight, bool kSplit>
__global__ void __launch_bounds__(tp::kThreads, 1)
    gemm_wgmma_tma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          GemmArgs args, SplitK split) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = wl::Tile<BN, kStages>;
  static_assert(kInFlight == 0 || kInFlight == 1, "wgmma groups left running: none or one");
  constexpr bool kAKMajor = op_a == Op::N, kBKMajor = op_b == Op::T;
  static_assert(tp::Boxes<kAKMajor, wl::kBM>::kCount * tp::Boxes<kAKMajor, wl::kBM>::kBytes == T::kABytes &&
                    tp::Boxes<kBKMajor, BN>::kCount * tp::Boxes<kBKMajor, BN>::kBytes == T::kBBytes,
                "the boxes fill the stage exactly: the bytes full[s] expects");

  // The ring on a 1024-byte boundary, as in rung 7: the swizzle, the TMA unit's and wgmma's, is
  // anchored to addresses.
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* const ring = smem_raw + (wl::kAtomBytes - smem_address(smem_raw) % wl::kAtomBytes) % wl::kAtomBytes;
  const uint32_t ring_addr = smem_address(ring);
  __shared__ __align__(8) uint64_t full[kStages], empty[kStages];

  const int wg = static_cast<int>(threadIdx.x) / 128, t = static_cast<int>(threadIdx.x) % 128;
  // g: what this block computes (the whole GEMM, or its slice into a partial tile, for the epilogue);
  // its K tiles start at K value k_first of the matrices the tensor maps describe.
  const GemmArgs g = kSplit ? slice_for_block(args, split) : args;
  const int64_t k_first = kSplit ? static_cast<int64_t>(blockIdx.z) * split.k_len : 0;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * wl::kBM, n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t k_tiles = (g.K + wl::kBK - 1) / wl::kBK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_address(&full[s]), tp::kFullArrivals);
      mbarrier_init(smem_address(&empty[s]), tp::kEmptyArrivals);
    }
    // The initialized barriers visible to the async proxy (the TMA unit completes transactions on them).
    fence_proxy_async();
  }
  __syncthreads();  // the last block-wide barrier: from here on the roles wait only on mbarriers

  if (wg == tp::kProducer) {
    setmaxnreg_dec<tp::kProducerRegisters>();
    if (t == 0) {
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        const int s = tp::stage_of(kt, kStages);
        if (tp::producer_waits(kt, kStages))
          mbarrier_wait(smem_address(&empty[s]), tp::empty_parity(kt, kStages));
        const uint32_t bar = smem_address(&full[s]);
        mbarrier_arrive_expect_tx(bar, T::kStageBytes);
        const uint32_t a_tile = ring_addr + static_cast<uint32_t>(s) * T::kStageBytes;
        const int64_t k0 = k_first + kt * wl::kBK;
        tma_load_tile<kAKMajor, wl::kBM>(a_tile, &map_a, m0, k0, bar);
        tma_load_tile<kBKMajor, BN>(a_tile + T::kABytes, &map_b, n0, k0, bar);
      }
    }
    return;  // the producer warpgroup is done: the consumers wait for its last copies on full[]
  }

  setmaxnreg_inc<tp::kConsumerRegisters>();
  float acc[T::kAccPerThread];
#pragma unroll
  for (int i = 0; i < T::kAccPerThread; ++i) acc[i] = 0.0f;

  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    const int s = tp::stage_of(kt, kStages);
    mbarrier_wait(smem_address(&full[s]), tp::full_parity(kt, kStages));  // tile kt has landed in stage s
    const uint32_t a_tile = ring_addr + static_cast<uint32_t>(s) * T::kStageBytes;
    const uint32_t b_tile = a_tile + T::kABytes;
    wgmma_fence();
#pragma unroll
    for (int slice = 0; slice < wl::kBK / wl::kInstrK; ++slice) {
      wgmma_m64k16<BN, kAKMajor ? 0 : 1, kBKMajor ? 0 : 1>(acc, wl::slice_descriptor<kAKMajor>(a_tile, wg * wl::kWgRows, slice),
                                                          wl::slice_descriptor<kBKMajor>(b_tile, 0, slice));
    }
    wgmma_commit();
    wgmma_wait<kInFlight>();  // every group but the last kInFlight has completed its reads
    pin_accumulators(acc);
    const int64_t done = tp::released_at(kt, kInFlight);
    if (done >= 0) mbarrier_arrive(smem_address(&empty[tp::stage_of(done, kStages)]));
  }
  wgmma_wait<0>();
  pin_accumulators(acc);
  // Both consumer warpgroups are done reading the ring (and every copy into it has landed: each was
  // waited for on full[]), so it becomes the epilogue's staging tile. The ring was last touched through
  // the async proxy (the TMA unit's writes, wgmma's reads) and is now written by ordinary stores: a
  // proxy fence in each writing thread orders the two, once per block.
  fence_proxy_async();
  consumers_sync();
  float* Cs = reinterpret_cast<float*>(ring);
  stage_accumulators<BN>(Cs, acc, wg, t);
  consumers_sync();
  store_staged<BN>(g, Cs, m0, n0, static_cast<int>(threadIdx.x), tp::kConsumerThreads);
#elif defined(__CUDA_ARCH__)
  __trap();  // built for a target without wgmma or TMA: unsupported() refuses every GPU this could run on
#endif
}

// ---- the host: tensor maps, launch, dispatch -------------------------------------------------------------

// cuTensorMapEncodeTiled is a driver function; the runtime hands out its address, so the library does
// not link the driver library itself. Looked up once.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    HL_CHECK(found == cudaDriverEntryPointSuccess && p != nullptr,
             "gemm wgmma_tma: the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12.0 or newer is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The tensor map of a stored operand: `cols` halves per row (dimension 0, contiguous), `rows` rows
// `ld` halves apart, read in boxes of 64 x box_rows with the 128-byte swizzle; outside the matrix the
// unit fills zeros.
CUtensorMap make_tensor_map(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows, const char* which,
                            const GemmArgs& g) {
  alignas(64) CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * sizeof(__half)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(tp::kBoxInner), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base), dims, strides,
                                    box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HL_CHECK(r == CUDA_SUCCESS, "gemm wgmma_tma: cuTensorMapEncodeTiled refused the tensor map of ", which, " (",
           rows, " x ", cols, ", row stride ", ld, ", box 64 x ", box_rows, "): CUresult ", static_cast<int>(r), " (",
           g.describe(), ")");
  return map;
}

// slices > 1: a split-K launch (gridDim.z = slices, each block's sums go to split.partial).
template <Op op_a, Op op_b, int BN, int kStages, int kInFlight, bool kSplit>
void launch(const GemmArgs& g, const SplitK& split, int64_t slices) {
  const auto kernel = gemm_wgmma_tma_kernel<op_a, op_b, BN, kStages, kInFlight, kSplit>;
  constexpr int bytes = wl::Tile<BN, kStages>::kSmemBytes;
  const int allowed = max_shared_memory_per_block();
  HL_CHECK(bytes <= allowed, "wgmma_tma: a 128x", BN, "x64 tile with ", kStages, " stages needs ", bytes,
           " bytes of shared memory per block; this GPU allows ", allowed);
  static std::once_flag opted_in;  // more than 48 KiB of dynamic shared memory: allowed once per kernel
  std::call_once(opted_in,
                 [&] { HL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)); });
  check_grid_y(g, wl::kBM, "wgmma_tma");
  constexpr bool kAKMajor = op_a == Op::N, kBKMajor = op_b == Op::T;
  // The stored matrices: A is M x K (op N) or K x M (op T), B is K x N (op N) or N x K (op T).
  const CUtensorMap map_a = make_tensor_map(g.A, kAKMajor ? g.M : g.K, kAKMajor ? g.K : g.M, g.lda,
                                            tp::Boxes<kAKMajor, wl::kBM>::kRows, "A", g);
  const CUtensorMap map_b =
      make_tensor_map(g.B, kBKMajor ? g.N : g.K, kBKMajor ? g.K : g.N, g.ldb, tp::Boxes<kBKMajor, BN>::kRows, "B", g);
  const dim3 grid(blocks_for(g.N, BN), blocks_for(g.M, wl::kBM), static_cast<unsigned>(slices));
  kernel<<<grid, tp::kThreads, bytes, stream()>>>(map_a, map_b, g, split);
  HL_LAUNCH_CHECK("gemm_wgmma_tma_kernel");
}

// Tile I for one layout; kSplitK (wgmma_tma_split_k): the reduction split across blocks where the
// tiles are few and K is long (kernels/gemm_split.h's plan, with this rung's tile and 64-deep K step).
template <Op op_a, Op op_b, int I, bool kSplitK>
void launch_tile(const GemmArgs& g) {
  constexpr int BN = tp::kTiles[I].bn, S = tp::kTiles[I].stages, F = tp::kTiles[I].in_flight;
  const int64_t tiles = static_cast<int64_t>(blocks_for(g.M, wl::kBM)) * blocks_for(g.N, BN);
  const SplitKPlan plan = kSplitK ? plan_split_k(tiles, g.K, sm_count(), wl::kBK) : SplitKPlan{1, g.K};
  if (plan.slices > 1) {
    HL_CHECK(plan.k_len % wl::kBK == 0, "wgmma_tma_split_k: slices of ", plan.k_len,
             " K values do not start on a 64-deep K tile (", g.describe(), ")");
    run_split_k(g, plan, [&](const SplitK& s) { launch<op_a, op_b, BN, S, F, true>(g, s, plan.slices); });
  } else {
    launch<op_a, op_b, BN, S, F, false>(g, SplitK{}, 1);
  }
}

template <int I, bool kSplitK>
void run_tile(const GemmArgs& g) {
  if (g.op_a == Op::N) {
    g.op_b == Op::N ? launch_tile<Op::N, Op::N, I, kSplitK>(g) : launch_tile<Op::N, Op::T, I, kSplitK>(g);
  } else {
    g.op_b == Op::N ? launch_tile<Op::T, Op::N, I, kSplitK>(g) : launch_tile<Op::T, Op::T, I, kSplitK>(g);
  }
}

template <bool kSplitK>
void run(const GemmArgs& g) {
  const int forced = wgmma_tma::tile_for_tuning().load(std::memory_order_relaxed);
  const int tile = forced >= 0 ? forced : tp::own_tile(g.M, g.N, sm_count());
  HL_CHECK(tile < tp::kTileCount, "gemm wgmma_tma: the tuning hook names tile #", tile, "; wgmma_tma_plan.h lists ",
           tp::kTileCount);
  static_assert(tp::kTileCount == 4, "run() dispatches every tile of wgmma_tma_plan.h's table");
  switch (tile) {
    case 1:
      return run_tile<1, kSplitK>(g);
    case 2:
      return run_tile<2, kSplitK>(g);
    case 3:
      return run_tile<3, kSplitK>(g);
    default:
      return run_tile<0, kSplitK>(g);
  }
}

const char* unsupported(const GemmArgs& g) {
  if (const char* why = unsupported_wmma(g)) return why;
  const int cc = runtime::cuda_compute_capability();  // cached; 0 without a GPU
  if (cc != 0 && cc != 90)
    return "wgmma_tma needs compute capability 9.0: wgmma.mma_async and setmaxnreg are sm_90a instructions, for "
           "Hopper GPUs only";
  if (!vector_aligned(g.A, g.lda) || !vector_aligned(g.B, g.ldb))
    return "wgmma_tma copies with the TMA unit, which needs 16-byte aligned rows: A and B 16-byte aligned, lda and "
           "ldb multiples of 8 halves";
  constexpr int64_t kMaxCoordinate = std::numeric_limits<int32_t>::max();
  if (g.M > kMaxCoordinate || g.N > kMaxCoordinate || g.K > kMaxCoordinate)
    return "wgmma_tma addresses boxes with signed 32-bit coordinates: M, N and K up to 2^31 - 1";
  return nullptr;
}

}  // namespace

// Priority 65, above rung 7, and its split-K form above it (the pattern of wmma_pipelined_split_k: the
// same kernel wherever the plan does not split). Written without a GPU, opt-in until its tests, the
// sanitizers and gemm_bench ran on an H100 (2026-11-27: 79% of cuBLAS at 4096^3 with tile #0, 94% with
// #1, against 29% for wmma_pipelined_split_k); promoted then, so wgmma_tma_split_k is the FP16 default on
// Hopper. Operands it declines (rows not 16-byte aligned, other GPUs) go to the rungs below.
HL_REGISTER_VARIANT(GemmArgs, {"wgmma_tma", DeviceType::cuda, 65,
                               "wgmma.mma_async (sm_90a), operands copied by the TMA unit; a producer warpgroup "
                               "and two consumers synchronized by mbarriers",
                               run<false>, unsupported});
HL_REGISTER_VARIANT(GemmArgs, {"wgmma_tma_split_k", DeviceType::cuda, 66,
                               "wgmma_tma, and a long reduction over few output tiles split across blocks",
                               run<true>, unsupported});

}  // namespace hl::kernels::cuda
