// GEMM reference point: "cublas" — NVIDIA's cuBLAS (cublasGemmEx), the bar every rung is measured
// against in bench/gemm_bench and tutorial 04. It is not a rung of the ladder: it is registered with
// the lowest priority, so it runs only when asked for by name (--gemm cublas, HALFLING_GEMM=cublas).
//
// Precision as in the ladder (paper §3.3): FP16 inputs with CUBLAS_COMPUTE_32F (FP32 accumulation,
// Tensor Cores allowed), and f32 inputs with CUBLAS_COMPUTE_32F too (plain FP32, no TF32 rounding,
// so that it is compared like for like with smem_tiled).
//
// Layout: cuBLAS is column-major. A row-major M x N matrix C with row stride ldc is, read
// column-major, the N x M matrix C^T with the same leading dimension. So we ask cuBLAS for
// C^T = op(B)^T * op(A)^T: the first operand is B (transposed exactly when op_b == T), the second A
// (transposed when op_a == T), with the sizes N, M, K and the leading dimensions unchanged.
//
// Epilogue: cublasGemmEx computes alpha * op(A) op(B) + beta * C only. With a bias or ReLU, or for
// f32 inputs into an f16 C (a combination cublasGemmEx does not offer), cuBLAS writes
// alpha * op(A) op(B) into an FP32 workspace and a small kernel here applies beta * C, the bias and
// ReLU and rounds once into C (the split-K rungs' second pass, split_k.cu, with one slice) — so the
// result is rounded exactly once, as in the ladder.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/scratch.cuh"
#include "kernels/cuda/gemm/gemm_common.cuh"
#include "kernels/gemm.h"
#include "kernels/runtime.h"

namespace hl::kernels::cuda {

namespace {

#define HL_CUBLAS_CHECK(call)                                                                            \
  do {                                                                                                   \
    const cublasStatus_t hl_cublas_status_ = (call);                                                     \
    if (hl_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      throw ::hl::Error(::hl::detail::concat("gemm cublas: ", #call, " failed at ", __FILE__, ":", __LINE__, \
                                             ": ", cublasGetStatusString(hl_cublas_status_)));           \
    }                                                                                                    \
  } while (0)

// One handle for the process, created on first use. It is never destroyed: destroying it from a
// static destructor can run after the CUDA runtime has shut down.
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    HL_CUBLAS_CHECK(cublasCreate(&created));
    return created;
  }();
  return h;
}

// The FP32 workspace for the epilogue path, grown on demand and kept (for the same reason).
Scratch& workspace() {
  static Scratch* ws = new Scratch();
  return *ws;
}

cudaDataType_t cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : CUDA_R_32F; }

void gemm_ex(const GemmArgs& g, void* C, DType c_type, int64_t ldc, float beta) {
  const float alpha = g.alpha;
  HL_CUBLAS_CHECK(cublasGemmEx(handle(), g.op_b == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T,
                               g.op_a == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T, static_cast<int>(g.N),
                               static_cast<int>(g.M), static_cast<int>(g.K), &alpha, g.B, cuda_type(g.ab_type),
                               static_cast<int>(g.ldb), g.A, cuda_type(g.ab_type), static_cast<int>(g.lda), &beta, C,
                               cuda_type(c_type), static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void run(const GemmArgs& g) {
  HL_CUBLAS_CHECK(cublasSetStream(handle(), stream()));
  const bool direct = g.bias == nullptr && !g.relu && !(g.ab_type == DType::f32 && g.c_type == DType::f16);
  if (direct) {
    // beta == 0: cuBLAS does not read C (documented), so a NaN-filled C is fine.
    gemm_ex(g, g.C, g.c_type, g.ldc, g.beta);
    return;
  }
  Scratch& ws = workspace();
  const std::lock_guard<std::mutex> lock(ws.mu);  // held until both launches are queued
  float* W = static_cast<float*>(ws.reserve(static_cast<size_t>(g.M * g.N) * sizeof(float)));
  gemm_ex(g, W, DType::f32, g.N, 0.0f);
  // W holds alpha * op(A) op(B): the split-K pass with one slice applies beta, bias and ReLU and
  // rounds once into C (gemm_common.cuh).
  GemmArgs unit = g;
  unit.alpha = 1.0f;
  gemm_detail::split_k_reduce(unit, W, 1);
}

const char* unsupported(const GemmArgs& g) {
  if (const char* why = gemm_detail::unsupported_dtypes(g)) return why;
  constexpr int64_t kIntMax = 2147483647;  // cuBLAS takes int sizes and leading dimensions
  if (g.M > kIntMax || g.N > kIntMax || g.K > kIntMax || g.lda > kIntMax || g.ldb > kIntMax || g.ldc > kIntMax)
    return "cuBLAS takes 32-bit sizes and leading dimensions";
  return nullptr;
}

}  // namespace

HL_REGISTER_VARIANT(GemmArgs, {"cublas", DeviceType::cuda, 0,
                               "NVIDIA cuBLAS (cublasGemmEx, FP32 compute): the reference point, not a rung", run,
                               unsupported});

}  // namespace hl::kernels::cuda
