// The public GEMM entry point: check the arguments once, here, so that every variant (CPU or CUDA,
// naive or tuned) can assume a well-formed problem, then hand over to the variant registry.
#include "kernels/gemm.h"

#include <algorithm>
#include <sstream>

#include "kernels/error.h"

namespace hl::kernels {

namespace {

const char* op_name(Op op) { return op == Op::N ? "N" : "T"; }

// Smallest row strides that hold op(A) (M x K), op(B) (K x N) and C (M x N) in row-major storage.
int64_t dense_lda(const GemmArgs& g) { return g.op_a == Op::N ? g.K : g.M; }
int64_t dense_ldb(const GemmArgs& g) { return g.op_b == Op::N ? g.N : g.K; }
int64_t dense_ldc(const GemmArgs& g) { return g.N; }

bool is_gemm_float(DType t) { return t == DType::f16 || t == DType::f32 || t == DType::f64; }

void validate(const GemmArgs& g) {
  // Every message starts with "gemm:" and ends with the whole problem, so a student sees both the
  // broken argument and the call it came from.
  const auto fail = [&](const auto&... what) {
    throw Error(detail::concat("gemm: ", what..., " (", g.describe(), ")"));
  };

  if (g.M < 1 || g.N < 1 || g.K < 1) fail("M, N and K must all be >= 1, got M=", g.M, " N=", g.N, " K=", g.K);
  if (g.A == nullptr) fail("A is a null pointer");
  if (g.B == nullptr) fail("B is a null pointer");
  if (g.C == nullptr) fail("C is a null pointer");
  if (g.lda < dense_lda(g))
    fail("lda=", g.lda, " is smaller than ", dense_lda(g), ", the row length of A as stored (",
         g.op_a == Op::N ? "K" : "M", " for op_a=", op_name(g.op_a), ")");
  if (g.ldb < dense_ldb(g))
    fail("ldb=", g.ldb, " is smaller than ", dense_ldb(g), ", the row length of B as stored (",
         g.op_b == Op::N ? "N" : "K", " for op_b=", op_name(g.op_b), ")");
  if (g.ldc < dense_ldc(g)) fail("ldc=", g.ldc, " is smaller than N=", g.N, ", the row length of C");
  if (!is_gemm_float(g.ab_type)) fail("A and B must be f16, f32 or f64, got ", dtype_name(g.ab_type));
  if (!is_gemm_float(g.c_type)) fail("C must be f16, f32 or f64, got ", dtype_name(g.c_type));
  // f64 exists for gradient checks, which run in f64 from end to end; mixing it with f16/f32 would
  // only hide a precision loss.
  if (g.c_type == DType::f64 && g.ab_type != DType::f64)
    fail("an f64 output needs f64 inputs (", dtype_name(g.ab_type), " inputs accumulate in f32)");
  if (g.ab_type == DType::f64 && g.c_type != DType::f64)
    fail("f64 inputs need an f64 output, got ", dtype_name(g.c_type));
  if (g.bias != nullptr && !is_gemm_float(g.bias_type))
    fail("bias must be f16, f32 or f64, got ", dtype_name(g.bias_type));
}

}  // namespace

std::string GemmArgs::describe() const {
  std::ostringstream os;
  os << "gemm " << op_name(op_a) << op_name(op_b) << " M=" << M << " N=" << N << " K=" << K << ' '
     << dtype_name(ab_type) << "->" << dtype_name(c_type);
  // The common case stays short; anything unusual is spelled out because it is usually the bug.
  if (lda != dense_lda(*this) || ldb != dense_ldb(*this) || ldc != dense_ldc(*this))
    os << " lda=" << lda << " ldb=" << ldb << " ldc=" << ldc;
  if (alpha != 1.0f) os << " alpha=" << alpha;
  if (beta != 0.0f) os << " beta=" << beta;
  if (bias != nullptr) os << " +bias(" << dtype_name(bias_type) << ")";
  if (relu) os << " relu";
  os << " on " << device_name(device);
  return os.str();
}

GemmArgs gemm_rows(const GemmArgs& g, int64_t first, int64_t count) {
  HL_CHECK(first >= 0 && count >= 1 && first + count <= g.M, "gemm_rows: rows [", first, ", ", first + count,
           ") are not inside the M=", g.M, " rows of ", g.describe());
  GemmArgs part = g;
  part.M = count;
  // Row m of op(A) is row m of A as stored (op N, lda apart) or its column m (op T, one element apart).
  const int64_t a_step = g.op_a == Op::N ? g.lda : 1;
  part.A = static_cast<const char*>(g.A) + first * a_step * static_cast<int64_t>(dtype_size(g.ab_type));
  part.C = static_cast<char*>(g.C) + first * g.ldc * static_cast<int64_t>(dtype_size(g.c_type));
  return part;
}

void gemm(const GemmArgs& args, const std::string& variant) {
  validate(args);
  const GemmRegistry& registry = GemmRegistry::instance();
  if (args.device != DeviceType::cuda || args.M <= kCudaGemmRowChunk) {
    registry.select(args, variant).run(args);
    return;
  }
  // The CUDA rungs put their row tiles on gridDim.y, which stops at 65535 (8,388,480 rows for 128-row
  // tiles, 2,097,120 for wmma's 32). Row i of C depends on row i of op(A) alone, so a taller problem is
  // the same GEMM run on slabs of rows, each giving the bits it would give alone: B, the bias and the
  // epilogue are shared, and each slab starts 2^19 rows further down A and C, which keeps any 16-byte
  // alignment the matrices had (2^19 elements of a row-major op(A)^T, 2^19 whole rows otherwise).
  for (int64_t first = 0; first < args.M; first += kCudaGemmRowChunk) {
    const GemmArgs part = gemm_rows(args, first, std::min(kCudaGemmRowChunk, args.M - first));
    registry.select(part, variant).run(part);
  }
}

}  // namespace hl::kernels
