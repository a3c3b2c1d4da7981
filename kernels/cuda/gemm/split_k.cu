// Split-K for the GEMM rungs: the second pass, which adds the slices' FP32 partial sums and applies
// the epilogue. Not a rung of its own: wgmma_tma_split_k and wmma_pipelined_split_k (FP16) and
// smem_tiled_split_k (FP32) split their reduction this way when the output has too few tiles to fill the GPU and K is long
// (kernels/gemm_split.h decides; gemm_common.cuh's slice_for_block gives each block its slice). The
// cublas reference point uses the same pass, with one slice, for the epilogues cublasGemmEx lacks.
//
// Precision (paper §3.3): the slices are FP32 sums of FP16 (or FP32) products, added here in FP32 in
// a fixed order (slice 0 first), so a split GEMM gives the same result on every run; C is rounded
// once, after alpha, beta, bias and ReLU, exactly as an unsplit rung's epilogue does it.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/cuda/scratch.cuh"

namespace hl::kernels::cuda::gemm_detail {

namespace {

// One thread per element of C; consecutive threads take consecutive columns, so both the partial
// matrices (dense M x N) and C are read and written in coalesced runs.
__global__ void split_k_reduce_kernel(GemmArgs g, const float* __restrict__ partial, int64_t slices) {
  const int64_t total = g.M * g.N;
  for (int64_t i = global_thread_index(); i < total; i += global_thread_count()) {
    epilogue_store(g, i / g.N, i % g.N, sum_slices(partial, total, i, slices));
  }
}

}  // namespace

Scratch& split_k_workspace() {
  static Scratch* ws = new Scratch();  // never freed: see kernels/cuda/conv/workspace.cuh
  return *ws;
}

void split_k_reduce(const GemmArgs& g, const float* partial, int64_t slices) {
  split_k_reduce_kernel<<<grid_for(g.M * g.N), kBlock, 0, stream()>>>(g, partial, slices);
  HL_LAUNCH_CHECK("gemm split_k_reduce_kernel");
}

}  // namespace hl::kernels::cuda::gemm_detail
