// GEMM ladder, rung 6: "mma_sync" — the instructions under WMMA: ldmatrix and mma.sync, with the
// accumulators' register layout in plain view.
//
// What changes from rung 5 (wmma_pipelined): the cp.async ring, the padded shared-memory tiles and
// the predicated copies stay (wmma_tile.cuh); the warp-level math is written in the PTX instructions
// that nvcuda::wmma is built on, which exposes three things the API hides:
//   1. ldmatrix.x4 loads four 8x8 blocks of 16-bit values from shared memory in one instruction,
//      each lane supplying the address of one 8-half row, and delivers them already distributed in
//      the register layout mma.sync expects; its .trans form transposes on the way, so an operand
//      stored with M (or N) contiguous needs no other code path.
//   2. mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: a 16x8 FP32 accumulator tile, updated with
//      a 16x16 FP16 A fragment (4 registers of 2 halves) times a 16x8 FP16 B fragment (2 registers),
//      FP32 accumulation (paper §3.3), with a documented mapping of elements to lanes: lane l holds
//      rows l/4 and l/4 + 8, columns 2(l%4) and 2(l%4) + 1. So the epilogue stages the whole block
//      tile in shared memory with plain 8-byte stores (wmma's store_matrix_sync is opaque) and
//      writes C in coalesced rows.
//   3. Bigger warp tiles: each of the 4 warps owns a 64 x 64 block of C (4 x 8 mma tiles, 128 FP32
//      accumulators per lane), so every fragment loaded from shared memory feeds 8 (A) or 4 (B)
//      mma.sync instead of 2 to 4, and shared-memory bandwidth stops limiting the Tensor Cores.
// Block tile 128 x 128 x 32, 4 warps (2 x 2), 4 cp.async stages (68 to 80 KiB of shared memory,
// depending on the layouts).
//
// Needs compute capability 8.0 (m16n8k16 is an Ampere shape); older GPUs are refused with a reason and
// the registry runs the rung below. f16 inputs only, any M, N, K >= 1, any alignment (the copies'
// scalar fallback), every epilogue, as every rung. Not split along K (wmma_pipelined_split_k does
// that for the small outputs with long reductions).
//
// Since the H100 run of 2026-11-27 it copies with the lean copy of wmma_pipelined's tiles #12-#14
// (copy_plan.h, kLeanCopy in mma_sync_lanes.h); a tuning hook there lets `bench/gemm_bench --sweep` and
// the tests force the general copy.
//
// The lane arithmetic (which row each lane hands to ldmatrix, which registers feed which mma, where each
// accumulator goes) lives in mma_sync_lanes.h, where a CPU test plays a whole block through it against
// models of the two instructions written from the PTX ISA (tests/kernels/test_mma_sync_lanes.cpp).
//
// Status: written in a session without a GPU; verified on an H200 on 2026-11-26 (every GPU test,
// memcheck and racecheck; bench/results/gpu_short_nvidia_h200_2026-11-26.txt). Measured there it
// ties wmma_pipelined on big squares (213 vs 214 TFLOP/s at 4096^3, 234 vs 222 at 8192^3, both near
// 30% of cuBLAS) and is slower on the training shapes (its one 128 x 128 tile has no small-tile or
// split-K path): so it stays below wmma_pipelined in priority, and the lesson of this rung is that
// hand-written mma.sync alone does not close the gap to cuBLAS on Hopper (wgmma and TMA do).
#include <cuda_fp16.h>

#include <cstdint>
#include <mutex>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/gemm/mma_sync_lanes.h"
#include "kernels/cuda/gemm/wmma_tile.cuh"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

using namespace gemm_detail;
using namespace mma_lanes;  // the tile sizes and the lane arithmetic (mma_sync_lanes.h)

template <Op op_a, Op op_b>
struct Smem {
  using TA = ATile<op_a, kBM, kBK>;
  using TB = BTile<op_b, kBN, kBK>;
  static constexpr int kStageElems = TA::kElems + TB::kElems;
  static constexpr size_t kBytes = sizeof(__half) * kStageElems * kStages;
  static_assert((sizeof(__half) * TA::kElems) % 128 == 0 && (sizeof(__half) * kStageElems) % 128 == 0,
                "stage buffers stay 128-byte aligned (ldmatrix rows need 16)");
  static_assert(sizeof(float) * kBM * kLdC <= kBytes, "the epilogue's staging tile fits in the ring");
  // The lane arithmetic (and its CPU test) assumes this storage.
  static_assert(TA::kRows == stored_tile(op_a == Op::N, kBM).rows && TA::kLd == stored_tile(op_a == Op::N, kBM).ld &&
                    TB::kRows == stored_tile(op_b == Op::T, kBN).rows && TB::kLd == stored_tile(op_b == Op::T, kBN).ld,
                "mma_sync_lanes.h's stored_tile describes the tiles as wmma_tile.cuh stores them");
};

// The device helpers exist where the kernel has a body: sm_80 and newer (and the host pass).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned smem_address(const __half* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 blocks of halves; lane l gives the address of row l % 8 of block l / 8 and receives, in
// register j, two consecutive halves of block j: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (with
// kTrans, of the transposed block).
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const __half* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row)));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_address(row)));
  }
#endif
}

// acc (16 x 8, FP32) += a (16 x 16, FP16, row-major) * b (16 x 8, FP16, "col": K-major per column).
__device__ __forceinline__ void mma_16816(float (&acc)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The A fragment of mma tile rows [m, m + 16) x K [kk, kk + 16), and the B fragments of the two mma
// tiles of columns [n, n + 16): one ldmatrix.x4 each, from the rows mma_sync_lanes.h computes.
template <Op op_a>
__device__ __forceinline__ void load_a(unsigned (&a)[4], const __half* tile, int m, int kk, int lane) {
  using TA = ATile<op_a, kBM, kBK>;
  constexpr bool kKContiguous = op_a == Op::N;
  const TilePos p = a_ldmatrix_row<kKContiguous>(m, kk, lane);
  ldmatrix_x4<ldmatrix_trans(kKContiguous)>(a, tile + p.row * TA::kLd + p.col);
}

template <Op op_b>
__device__ __forceinline__ void load_b(unsigned (&b)[4], const __half* tile, int n, int kk, int lane) {
  using TB = BTile<op_b, kBN, kBK>;
  constexpr bool kKContiguous = op_b == Op::T;
  const TilePos p = b_ldmatrix_row<kKContiguous>(n, kk, lane);
  ldmatrix_x4<ldmatrix_trans(kKContiguous)>(b, tile + p.row * TB::kLd + p.col);
}

#endif  // sm_80+

// kLean: the lean copy of mma_sync_lanes.h's tuning hook where it applies.
template <Op op_a, Op op_b, bool kLean>
__global__ void __launch_bounds__(kThreads) gemm_mma_sync_kernel(GemmArgs g, bool a_vec, bool b_vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = Smem<op_a, op_b>;
  using TA = typename S::TA;
  using TB = typename S::TB;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  __half* const ring = reinterpret_cast<__half*>(smem_raw);
  const auto a_stage = [&](int s) { return ring + s * S::kStageElems; };
  const auto b_stage = [&](int s) { return ring + s * S::kStageElems + TA::kElems; };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const TilePos w0 = warp_origin(warp);
  const int wm = w0.row, wn = w0.col;

  const int64_t k_tiles = (g.K + kBK - 1) / kBK;

  [[maybe_unused]] PlannedCopiesIf<kLean, op_a, op_b, TA, TB, kBM, kBN, kBK, kThreads, true> lean(g, m0, n0,
                                                                                                a_vec && b_vec);
  const auto load_stage = [&](int s, int64_t kt) {
    if constexpr (kLean) {
      if (lean.copy(a_stage(s), b_stage(s), g, kt * kBK)) return;
    }
    load_operand_tiles<op_a, op_b, TA, TB, kThreads, true>(a_stage(s), b_stage(s), g, m0, n0, kt * kBK, a_vec, b_vec);
  };

  float acc[kMT][kNT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // The ring, as in wmma_pipelined: STAGES - 1 tiles in flight, one commit group per tile.
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt is visible to all; every warp is done with tile kt - 1's buffer
    const int64_t next = kt + kStages - 1;
    if (next < k_tiles) load_stage(static_cast<int>(next % kStages), next);
    cp_async_commit();

    const __half* as = a_stage(static_cast<int>(kt % kStages));
    const __half* bs = b_stage(static_cast<int>(kt % kStages));
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      unsigned a[kMT][4], b[kNT / 2][4];
#pragma unroll
      for (int i = 0; i < kMT; ++i) load_a<op_a>(a[i], as, wm + 16 * i, kk, lane);
#pragma unroll
      for (int j = 0; j < kNT / 2; ++j) load_b<op_b>(b[j], bs, wn + 16 * j, kk, lane);
#pragma unroll
      for (int i = 0; i < kMT; ++i)
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          const BRegs br = b_regs_of_tile(j);
          mma_16816(acc[i][j], a[i], b[br.pair][br.first], b[br.pair][br.first + 1]);
        }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done reading the ring: it becomes the epilogue's staging tile

  // Epilogue. The accumulators' layout is known: lane l holds, of mma tile (i, j), rows l / 4 and
  // l / 4 + 8 and columns 2 (l % 4) and 2 (l % 4) + 1 (acc[i][j][0..3], row-major within the pairs). They
  // go to a 128 x 128 FP32 staging tile in shared memory (pairs as 8-byte stores; rows padded by 8
  // floats, so the 16 lanes of each half-warp hit distinct banks), then every thread takes consecutive
  // columns: coalesced writes of C through the common epilogue. (Calling the epilogue straight from
  // the registers, 128 times per lane, made the compiler keep the accumulators in local memory.)
  float* Cs = reinterpret_cast<float*>(smem_raw);
  const TilePos p01 = accumulator_pos(lane, 0), p23 = accumulator_pos(lane, 2);  // the two pairs
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      float* tile = Cs + (wm + 16 * i) * kLdC + wn + 8 * j;
      *reinterpret_cast<float2*>(tile + p01.row * kLdC + p01.col) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(tile + p23.row * kLdC + p23.col) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kBM * kBN; e += kThreads) {
    const int mi = e / kBN, ni = e % kBN;
    const int64_t m = m0 + mi, n = n0 + ni;
    if (m < g.M && n < g.N) epilogue_store(g, m, n, Cs[mi * kLdC + ni]);
  }
#endif
}

template <Op op_a, Op op_b, bool kLean>
void launch(const GemmArgs& g) {
  const auto kernel = gemm_mma_sync_kernel<op_a, op_b, kLean>;
  constexpr size_t bytes = Smem<op_a, op_b>::kBytes;
  static std::once_flag opted_in;  // more than 48 KiB of dynamic shared memory: allowed once per kernel
  std::call_once(opted_in, [&] {
    HL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  });
  check_grid_y(g, kBM, "mma_sync");
  const dim3 grid(blocks_for(g.N, kBN), blocks_for(g.M, kBM));
  kernel<<<grid, kThreads, bytes, stream()>>>(g, vector_aligned(g.A, g.lda), vector_aligned(g.B, g.ldb));
  HL_LAUNCH_CHECK("gemm_mma_sync_kernel");
}

template <bool kLean>
void run_layout(const GemmArgs& g) {
  if (g.op_a == Op::N) {
    g.op_b == Op::N ? launch<Op::N, Op::N, kLean>(g) : launch<Op::N, Op::T, kLean>(g);
  } else {
    g.op_b == Op::N ? launch<Op::T, Op::N, kLean>(g) : launch<Op::T, Op::T, kLean>(g);
  }
}

void run(const GemmArgs& g) {
  chosen_by_hook(mma_sync::lean_copy_for_tuning(), mma_sync::kLeanCopy) ? run_layout<true>(g) : run_layout<false>(g);
}

const char* unsupported(const GemmArgs& g) {
  if (const char* why = unsupported_wmma(g)) return why;
  const int cc = runtime::cuda_compute_capability();  // cached; 0 without a GPU
  if (cc != 0 && cc < 80) return "mma_sync needs compute capability 8.0 or newer (mma.sync.m16n8k16, ldmatrix)";
  // The kernel's body exists only where it was compiled for sm_80 or newer. A build for older
  // architectures alone (CMAKE_CUDA_ARCHITECTURES=75) would run its empty sm_75 version on an
  // Ampere GPU by JIT, and leave C unwritten: refuse instead. ptxVersion is the virtual architecture
  // of the code the driver loaded for this GPU (0 when unknown, e.g. without a GPU).
  if (cc == 0) return nullptr;  // no GPU: nothing is loaded, nothing would run
  static const int loaded_arch = loaded_ptx_version(gemm_mma_sync_kernel<Op::N, Op::N, false>);
  if (loaded_arch != 0 && loaded_arch < 80)
    return "this build has no code for compute capability 8.0 or newer, which mma_sync needs (add 80 or newer to "
           "CMAKE_CUDA_ARCHITECTURES)";
  return nullptr;
}

}  // namespace

// Priority 48, below wmma_pipelined: not faster there (see the header). Verified, so in the automatic
// choice, where it runs only if both wmma_pipelined rungs refuse a call it takes.
HL_REGISTER_VARIANT(GemmArgs, {"mma_sync", DeviceType::cuda, 48,
                               "ldmatrix + mma.sync.m16n8k16 in PTX, 64x64 warp tiles, 4 cp.async stages",
                               run, unsupported});

}  // namespace hl::kernels::cuda
