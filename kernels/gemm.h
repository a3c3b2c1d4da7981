// General matrix multiply, the heart of the project (paper §3.3: FP16 products accumulated in FP32).
//
//   C = act( alpha * op(A) * op(B) + beta * C + bias )
//
// Row-major storage. op(A) is M x K, op(B) is K x N, C is M x N; op(X) = X or X^T. These three
// layouts cover training: forward (A*B^T for x*W^T), input gradient (A*B), weight gradient (A^T*B).
// beta == 0 means C is not read (it may hold garbage or NaN). bias (length N, may be null) is added
// to every row; relu keeps x when x > 0 or x is NaN (an overflow must stay visible to the loss
// scaler) and gives +0 otherwise, -0 included: the rule of the elementwise relu and the conv epilogues. A and B share one dtype (f16, f32, or f64 on the CPU); C is f32 or
// f16 for f16/f32 inputs, and f64 exactly when the inputs are f64. With f16 inputs the
// accumulation is f32 and C is rounded once, on the store.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "kernels/registry.h"

namespace hl::kernels {

enum class Op : uint8_t { N, T };

struct GemmArgs {
  static constexpr const char* family = "gemm";
  static constexpr const char* env_var = "HALFLING_GEMM";

  DeviceType device = DeviceType::cpu;
  Op op_a = Op::N, op_b = Op::N;
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0;  // row stride of A as stored (K for op_a == N, M for op_a == T, when dense)
  const void* B = nullptr;
  int64_t ldb = 0;
  DType ab_type = DType::f32;
  void* C = nullptr;
  int64_t ldc = 0;
  DType c_type = DType::f32;
  float alpha = 1.0f;
  float beta = 0.0f;
  const void* bias = nullptr;  // length N, dtype bias_type
  DType bias_type = DType::f32;
  bool relu = false;

  // "gemm NT M=128 N=512 K=784 f16->f32": used in every error message.
  std::string describe() const;
};

// Checks the arguments (sizes, leading dimensions, dtypes) and runs the selected variant:
// `variant` if given, else the registry's choice (see kernels/registry.h). On the GPU a problem of more
// than kCudaGemmRowChunk rows runs as consecutive slabs of that many rows (gemm_rows), so that no rung
// meets the 65535 limit of gridDim.y, where the rungs put their row tiles: any M works on every rung.
void gemm(const GemmArgs& args, const std::string& variant = "");

// Rows [first, first + count) of the problem as a GEMM of their own: op(A)'s and C's rows moved down,
// B, the bias and the epilogue shared. Row i of C depends on row i of op(A) only, so each slab gives
// the bits it would give as a problem of its own: the whole problem's bits on a rung that treats every
// row tile alike, but a split-K rung may split a short last slab (few tiles) that the whole problem,
// with many, would not, and add its products in another order.
GemmArgs gemm_rows(const GemmArgs& g, int64_t first, int64_t count);
constexpr int64_t kCudaGemmRowChunk = int64_t{1} << 19;  // 65535 row tiles of 8 rows is more

using GemmRegistry = Registry<GemmArgs>;

// Fill in dense leading dimensions for the given ops and sizes.
inline void set_dense_ld(GemmArgs& g) {
  g.lda = g.op_a == Op::N ? g.K : g.M;
  g.ldb = g.op_b == Op::N ? g.N : g.K;
  g.ldc = g.N;
}

}  // namespace hl::kernels
