// GEMM ladder, rung 2: "smem_tiled" — shared-memory tiles and register blocking (the classic SGEMM).
//
// What changes from rung 1 (naive): naive reads 2K values from global memory for every output, and
// neighbouring threads read the same values again. Here a block of 256 threads computes a 128 x 128
// tile of C. For each step of 8 along K it copies an 128 x 8 slab of op(A) and an 8 x 128 slab of
// op(B) into shared memory once (each value loaded from global memory by one thread, reused by 128
// outputs), and each thread then computes an 8 x 8 block of outputs from registers: per k it reads 8
// values of A and 8 of B from shared memory and does 64 fused multiply-adds. Arithmetic per byte
// moved grows from ~1/4 FMA per load (naive) to 4 FMAs per shared-memory load, so the kernel stops
// waiting on memory and starts being limited by the FP32 units.
//
// Precision (paper §3.3): FP16 inputs are widened to FP32 when they are staged in shared memory, the
// products are accumulated in FP32 and rounded to C's dtype once, in the epilogue. This rung still
// uses the ordinary FP32 units (no Tensor Cores), so it takes f32 inputs too: it is the fastest
// f32 GEMM of the ladder, and, as smem_tiled_split_k (the same kernel, split along K where that
// pays), the registry's automatic choice for f32 inputs.
//
// Split-K: this is also the GEMM of every FP32 training step (f32 inputs run here), including the
// weight gradients of FP32 convolutions as im2col GEMMs, whose outputs are a tile or two and whose
// K = N*P*Q is up to 100352. The variant smem_tiled_split_k (the default for f32 since its H200 run of 2026-11-26) splits
// such GEMMs along K (kernels/gemm_split.h): blockIdx.z takes a slice, the kernel is unchanged apart
// from its first line (slice_for_block), and split_k.cu adds the slices and applies the epilogue.
//
// Edges: every load is predicated (zero outside op(A)/op(B)) and every store checks m < M, n < N, so
// any M, N, K >= 1 and any leading dimensions work; nothing is assumed to be a multiple of the tile.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

constexpr int kBM = 128, kBN = 128, kBK = 8;  // block tile of C, and the K step per shared-memory slab
constexpr int kTM = 8, kTN = 8;               // outputs per thread (register blocking)
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 16 x 16 = 256

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// kSplit: this block computes the slice blockIdx.z of K into its FP32 partial tile.
template <class TAB, bool kSplit>
__global__ void __launch_bounds__(kThreads) gemm_smem_tiled_kernel(GemmArgs args, gemm_detail::SplitK split) {
  const GemmArgs g = kSplit ? gemm_detail::slice_for_block(args, split) : args;
  // As[k][m] holds op(A) transposed, so that the 8 values of a thread's rows at one k are read from
  // one shared-memory row (a broadcast among the 16 threads of that row group).
  __shared__ float As[kBK][kBM];
  __shared__ float Bs[kBK][kBN];

  const TAB* A = static_cast<const TAB*>(g.A);
  const TAB* B = static_cast<const TAB*>(g.B);
  const int tid = threadIdx.x;
  const int tx = tid % (kBN / kTN), ty = tid / (kBN / kTN);  // 16 x 16 threads
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM, n0 = static_cast<int64_t>(blockIdx.x) * kBN;

  // Thread (ty, tx) owns rows ty + 16 i and columns tx + 16 j (i, j < 8). Interleaving rather than
  // owning 8 adjacent columns means consecutive threads read consecutive shared-memory words (no
  // bank conflicts) and write consecutive columns of C (coalesced stores).
  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < g.K; k0 += kBK) {
    // Stage the slabs: 128 x 8 values of each, 4 per thread. The index order follows the storage
    // order, so that consecutive threads read consecutive addresses of global memory (coalesced).
    for (int e = tid; e < kBM * kBK; e += kThreads) {
      int m, k;
      if (g.op_a == Op::N) {  // A stored M x K: k is contiguous
        m = e / kBK;
        k = e % kBK;
      } else {  // A stored K x M: m is contiguous
        k = e / kBM;
        m = e % kBM;
      }
      const int64_t gm = m0 + m, gk = k0 + k;
      float v = 0.0f;
      if (gm < g.M && gk < g.K) v = to_float(g.op_a == Op::N ? A[gm * g.lda + gk] : A[gk * g.lda + gm]);
      As[k][m] = v;
    }
    for (int e = tid; e < kBK * kBN; e += kThreads) {
      int k, n;
      if (g.op_b == Op::N) {  // B stored K x N: n is contiguous
        k = e / kBN;
        n = e % kBN;
      } else {  // B stored N x K: k is contiguous
        n = e / kBK;
        k = e % kBK;
      }
      const int64_t gk = k0 + k, gn = n0 + n;
      float v = 0.0f;
      if (gk < g.K && gn < g.N) v = to_float(g.op_b == Op::N ? B[gk * g.ldb + gn] : B[gn * g.ldb + gk]);
      Bs[k][n] = v;
    }
    __syncthreads();  // the slabs are complete

#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a[kTM], b[kTN];  // one column of the thread's A rows, one row of its B columns
#pragma unroll
      for (int i = 0; i < kTM; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < kTN; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // everyone is done with the slabs before the next step overwrites them
  }

  // Unrolled, so that acc is indexed by constants and stays in registers.
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int64_t m = m0 + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int64_t n = n0 + tx + 16 * j;
      if (m < g.M && n < g.N) gemm_detail::epilogue_store(g, m, n, acc[i][j]);
    }
  }
}

template <bool kSplit>
void launch(const GemmArgs& g, const gemm_detail::SplitK& split, int64_t slices) {
  const dim3 grid(gemm_detail::blocks_for(g.N, kBN), gemm_detail::blocks_for(g.M, kBM), static_cast<unsigned>(slices));
  if (g.ab_type == DType::f16) {
    gemm_smem_tiled_kernel<__half, kSplit><<<grid, kThreads, 0, stream()>>>(g, split);
  } else {
    gemm_smem_tiled_kernel<float, kSplit><<<grid, kThreads, 0, stream()>>>(g, split);
  }
  HL_LAUNCH_CHECK("gemm_smem_tiled_kernel");
}

// kSplitK: the smem_tiled_split_k variant, which splits K when the plan says so.
template <bool kSplitK>
void run(const GemmArgs& g) {
  gemm_detail::check_grid_y(g, kBM, "smem_tiled");
  const int64_t tiles = static_cast<int64_t>(gemm_detail::blocks_for(g.M, kBM)) * gemm_detail::blocks_for(g.N, kBN);
  const SplitKPlan plan = kSplitK ? plan_split_k(tiles, g.K, sm_count(), kBK) : SplitKPlan{1, g.K};
  if (plan.slices > 1) {
    gemm_detail::run_split_k(g, plan, [&](const gemm_detail::SplitK& s) { launch<true>(g, s, plan.slices); });
  } else {
    launch<false>(g, {}, 1);
  }
}

const char* unsupported(const GemmArgs& g) { return gemm_detail::unsupported_dtypes(g); }

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"smem_tiled", DeviceType::cuda, 20,
                               "128x128 shared-memory tiles, 8x8 outputs per thread in registers (FP32 units)",
                               run<false>, unsupported});

// Split-K takes smem_tiled's place for f32 inputs: the same kernel wherever it does not split, and
// where it does, the GEMM of LeNet conv1's weight gradient (32 x 25 x 100352; gemm_bench's f16 inputs,
// which this rung widens to FP32) went from 21.6 ms to 0.19 ms on an H200
// (bench/results/gpu_short_nvidia_h200_2026-11-26.txt, after its tests and sanitizers passed).
HL_REGISTER_VARIANT(GemmArgs, {"smem_tiled_split_k", DeviceType::cuda, 25,
                               "smem_tiled, and a long reduction over few output tiles split across blocks",
                               run<true>, unsupported});

}  // namespace hl::kernels::cuda
