// GEMM ladder, rung 1: "naive" — one thread per output element.
//
// The first version anyone writes, kept as the baseline every faster rung is measured against and as
// the simplest correct statement of what a GEMM computes. Thread (m, n) walks row m of op(A) and
// column n of op(B), multiplies FP16 (or FP32) inputs and accumulates in FP32 (paper §3.3: "FP16
// products accumulated in FP32"; the product of two FP16 values is exact in FP32, so only the
// additions round, and an FP32 sum of 4096 ones is exactly 4096 where an FP16 one stalls at 2048).
// The result is rounded to the output dtype only on the final store.
//
// What makes it slow is the lesson for the next rung: every thread reads its 2K inputs straight
// from global memory, and neighbouring threads read the same values again (no reuse through shared
// memory or registers), so the kernel is bound by memory traffic, not by arithmetic.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/gemm.h"

namespace hl::kernels::cuda {

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// TAB: the element type of A and B (float or __half). threadIdx.x runs along n, so consecutive
// threads write consecutive elements of a row of C (coalesced stores).
template <class TAB>
__global__ void gemm_naive_kernel(GemmArgs g) {
  const TAB* A = static_cast<const TAB*>(g.A);
  const TAB* B = static_cast<const TAB*>(g.B);
  const int64_t a_row_step = g.op_a == Op::N ? g.lda : 1, a_k_step = g.op_a == Op::N ? 1 : g.lda;
  const int64_t b_k_step = g.op_b == Op::N ? g.ldb : 1, b_col_step = g.op_b == Op::N ? 1 : g.ldb;

  for (int64_t m = blockIdx.y * static_cast<int64_t>(blockDim.y) + threadIdx.y; m < g.M;
       m += static_cast<int64_t>(gridDim.y) * blockDim.y) {
    for (int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; n < g.N;
         n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      // op(A)[m, k] and op(B)[k, n], whichever way A and B are stored.
      const TAB* a = A + m * a_row_step;
      const TAB* b = B + n * b_col_step;
      float acc = 0.0f;  // FP32 accumulator, whatever the input type
      for (int64_t k = 0; k < g.K; ++k) acc = fmaf(to_float(a[k * a_k_step]), to_float(b[k * b_k_step]), acc);

      // Epilogue: alpha * AB + beta * C + bias, then ReLU. With beta == 0 C is never read, so it
      // may hold NaN (0 * NaN would be NaN).
      float v = g.alpha * acc;
      const int64_t c = m * g.ldc + n;
      if (g.beta != 0.0f) v += g.beta * load_float(g.C, g.c_type, c);
      if (g.bias != nullptr) v += load_float(g.bias, g.bias_type, n);
      if (g.relu) v = v > 0.0f || v != v ? v : 0.0f;  // NaN stays NaN: an overflow must stay visible
      store_float(g.C, g.c_type, c, v);
    }
  }
}

void run(const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
  // 32 x 8 threads: a warp covers 32 consecutive columns of one row. Grid-stride loops cover shapes
  // beyond the grid limits (gridDim.y is at most 65535).
  const dim3 block(32, 8);
  const auto blocks = [](int64_t n, unsigned b) {
    const int64_t k = (n + b - 1) / b;
    return static_cast<unsigned>(k > 65535 ? 65535 : k);
  };
  const dim3 grid(blocks(g.N, block.x), blocks(g.M, block.y));
  if (g.ab_type == DType::f16) {
    gemm_naive_kernel<__half><<<grid, block, 0, stream()>>>(g);
  } else {
    gemm_naive_kernel<float><<<grid, block, 0, stream()>>>(g);
  }
  HL_LAUNCH_CHECK("gemm_naive_kernel");
}

const char* unsupported(const GemmArgs& g) {
  if (g.ab_type != DType::f16 && g.ab_type != DType::f32) {
    return "the CUDA kernels take f16 or f32 inputs (f64 GEMMs run on the CPU, for gradient checks)";
  }
  if (g.c_type != DType::f16 && g.c_type != DType::f32) return "the output C must be f16 or f32";
  if (g.bias != nullptr && g.bias_type != DType::f16 && g.bias_type != DType::f32) {
    return "the bias must be f16 or f32";
  }
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"naive", DeviceType::cuda, 10,
                               "one thread per output element, FP32 accumulation, no data reuse", run,
                               unsupported});

}  // namespace hl::kernels::cuda
