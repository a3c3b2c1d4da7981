// The CUDA GEMM ladder (kernels/cuda/gemm/*.cu) against float64 references computed here.
//
// Every registered CUDA variant runs through the same checks, so a student who adds a rung in one
// file gets it tested without touching this one. Following DESIGN.md §6: fresh random inputs on every
// run (the seed is printed; HALFLING_TEST_SEED=<seed> replays it), C poisoned with NaN before every
// run (an element the kernel forgets to write, or a C it reads when beta == 0, shows up as NaN),
// every element checked against a per-element error bound and the whole matrix against a norm-wise
// relative error, both with the tolerance of the rung and its reason (see RungTolerance).
//
// GPU tests start with HL_REQUIRE_CUDA() and are reported as skipped without a GPU; the registry
// tests at the end need only a CUDA build. For compute-sanitizer, the small cases are addressable:
//   test_kernels --gtest_filter='Shapes/CudaGemmSweep.*/s1x1x1:Shapes/CudaGemmSweep.*/s7x13x5:CudaGemm.AccumulatesInFp32'
// (bench/gpu_gemm.sh runs memcheck and racecheck on such a subset).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <tuple>
#include <vector>

#include "kernels/cuda/gemm/mma_sync_lanes.h"
#include "kernels/cuda/gemm/wgmma_layout.h"
#include "kernels/cuda/gemm/wgmma_tma_plan.h"
#include "kernels/cuda/gemm/wmma_pipelined_tiles.h"
#include "kernels/cuda/gemm/wmma_smem_k_step.h"
#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/gemm_split.h"
#include "kernels/runtime.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/test_util.h"

namespace hl {
namespace {

using kernels::GemmArgs;
using kernels::GemmRegistry;
using kernels::Op;
using namespace test::gpu;

constexpr DeviceType kCuda = DeviceType::cuda;

std::vector<std::string> cuda_variants() { return GemmRegistry::instance().names(kCuda); }

// A rung may refuse f16 inputs only for a limit it states: this GPU's compute capability (mma_sync
// needs 8.0, the wgmma rungs 9.0), or, for wgmma_tma, rows the TMA unit cannot copy (a matrix not
// 16-byte aligned or a row stride not a multiple of 8 halves), when that is really the case. Any other
// refusal of f16 inputs is a bug.
bool refused_as_documented(const std::string& variant, const GemmArgs& g) {
  const auto* v = GemmRegistry::instance().find(variant, kCuda);
  const char* why = v != nullptr && v->unsupported != nullptr ? v->unsupported(g) : nullptr;
  if (why == nullptr) return false;
  const std::string reason(why);
  if (reason.find("compute capability") != std::string::npos) return true;
  const auto rows_aligned = [](const void* p, int64_t ld) { return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % 8 == 0; };
  return reason.find("16-byte aligned rows") != std::string::npos &&
         (!rows_aligned(g.A, g.lda) || !rows_aligned(g.B, g.ldb));
}

// ---- tolerances -----------------------------------------------------------------------------------

// How far a rung's FP32 accumulation may drift, as a multiple of the round-to-nearest bound.
struct RungTolerance {
  double factor;    // per element: |error| <= factor * (K + 3) * 2^-24 * sum |terms|
  double normwise;  // ||out - ref|| / ||ref|| for an f32 C (an f16 C adds 2^-11)
  const char* why;
};

RungTolerance tolerance_for(const std::string& variant, DType ab_type) {
  const bool tensor_cores =
      variant.rfind("wmma", 0) == 0 || variant == "mma_sync" || variant.rfind("wgmma", 0) == 0 ||
      (variant == "cublas" && ab_type == DType::f16);
  if (tensor_cores) {
    return {4.0, 5e-5,
            "Tensor Core adders align each block of 4-16 terms to the largest and truncate (Fasi et al. 2021, "
            "'Numerical behavior of NVIDIA tensor cores'): up to (n+1) ulps per block of n, < 2.5x the "
            "round-to-nearest bound, and biased"};
  }
  return {1.0, 1e-5,
          "FP32 FMAs round to nearest: at most 2^-24 of the running sum per addition, in any order "
          "(K <= 1000 here: a random walk of ~sqrt(K) 2^-24 ~ 2e-6 norm-wise)"};
}

// Per-element bound for one output: the accumulation error e, then one rounding into an f16 C
// (2^-11 relative, or half the f16 subnormal spacing 2^-25 near zero).
double element_tol(const RungTolerance& t, int64_t K, double mag, double ref, DType c_type) {
  const double e = t.factor * (static_cast<double>(K) + 3) * kF32Eps * mag;
  return c_type == DType::f16 ? e + kF16Eps * (std::fabs(ref) + e) + std::ldexp(1.0, -25) : e;
}

double normwise_tol(const RungTolerance& t, DType c_type) {
  return t.normwise + (c_type == DType::f16 ? kF16Eps : 0.0);  // f16 C: one more 2^-11 rounding
}

// ---- the float64 reference ------------------------------------------------------------------------

// op(A) (M x K) and op(B) (K x N) stored as the layout says, dense, FP16-rounded values.
struct Problem {
  Op op_a, op_b;
  int64_t M, N, K;
  std::vector<double> a, b;      // as stored: A is M x K (N) or K x M (T); B is K x N (N) or N x K (T)
  std::vector<double> ref, mag;  // op(A) op(B) and sum |products|, M x N, in float64
};

// The reference is the expensive part for the big shapes (up to 3.2e9 multiply-adds), so it is
// computed once per shape and layout, in parallel, and shared by every variant and dtype.
Problem make_problem(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, uint64_t& seed) {
  Problem p{op_a, op_b, M, N, K, {}, {}, {}, {}};
  p.a = test::random_values(static_cast<size_t>(M * K), seed++, -1, 1, DType::f16);
  p.b = test::random_values(static_cast<size_t>(K * N), seed++, -1, 1, DType::f16);
  // Row m of op(A) and column n of op(B) as contiguous rows, so the inner loop is a plain dot product.
  std::vector<double> ar(static_cast<size_t>(M * K)), bc(static_cast<size_t>(N * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      ar[static_cast<size_t>(m * K + k)] = op_a == Op::N ? p.a[static_cast<size_t>(m * K + k)] : p.a[static_cast<size_t>(k * M + m)];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      bc[static_cast<size_t>(n * K + k)] = op_b == Op::N ? p.b[static_cast<size_t>(k * N + n)] : p.b[static_cast<size_t>(n * K + k)];
  p.ref.assign(static_cast<size_t>(M * N), 0.0);
  p.mag.assign(static_cast<size_t>(M * N), 0.0);
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t m = 0; m < M; ++m) {
    const double* x = ar.data() + m * K;
    for (int64_t n = 0; n < N; ++n) {
      const double* y = bc.data() + n * K;
      double acc = 0, acc_abs = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += x[k] * y[k];
        acc_abs += std::fabs(x[k] * y[k]);
      }
      p.ref[static_cast<size_t>(m * N + n)] = acc;
      p.mag[static_cast<size_t>(m * N + n)] = acc_abs;
    }
  }
  return p;
}

GemmArgs problem(Op op_a, Op op_b, int64_t M, int64_t N, int64_t K, DType ab, DType c) {
  GemmArgs g;
  g.op_a = op_a;
  g.op_b = op_b;
  g.M = M;
  g.N = N;
  g.K = K;
  kernels::set_dense_ld(g);
  g.ab_type = ab;
  g.c_type = c;
  return g;
}

// ---- 1. the sweep: every variant x layout x input/output dtype x shape --------------------------------

struct SweepShape {
  int64_t M, N, K;
};

// How gtest prints the parameter (instead of its bytes) in listings and failures.
void PrintTo(const SweepShape& s, std::ostream* os) { *os << s.M << "x" << s.N << "x" << s.K; }

class CudaGemmSweep : public ::testing::TestWithParam<SweepShape> {};

// The longest chain of additions one output goes through, for the per-element bound: K, one walk of the
// reduction; or, for a split-K variant on an output one tile of every split rung covers (M, N <= 64: each
// rung's tile is at least 64 x 64, so the plan splits whenever K is long enough, gemm_split.h), the
// longest slice plus the second pass's sum of the slices. The test does not know each rung's K step, so
// it takes the longest chain over the three (smem_tiled 8, wmma_pipelined 32, wgmma_tma 64). Without it,
// K + 3 at K = 100352 made a bound of about 600 for outputs of about 300: C = 0 passed, and so did a
// rung that dropped 20 of its 242 slices; with it the bound is about 4, and one slice dropped (about
// 400 products, an error of about 7 rms) fails.
int64_t chain_length(const std::string& variant, const Problem& p) {
  if (!variant.ends_with("_split_k") || p.M > 64 || p.N > 64) return p.K;
  int64_t longest = 0;
  for (const int64_t k_step : {8, 32, 64}) {
    const kernels::SplitKPlan plan = kernels::plan_split_k(1, p.K, runtime::cuda_sm_count(), k_step);
    longest = std::max(longest, plan.slices > 1 ? plan.k_len + plan.slices : p.K);
  }
  return longest;
}

// Every variant x input dtype x output dtype on one problem, C poisoned before each run, every
// element against the float64 reference. `normwise`: also the norm-wise relative error, whose bounds
// (RungTolerance) assume K <= 1000 or so.
void check_every_variant(const Problem& p, bool normwise) {
  const auto variants = cuda_variants();
  ASSERT_FALSE(variants.empty());
  // The same FP16-rounded values as f16 and as f32 inputs (every f16 value is an f32 value), so one
  // reference serves both.
  for (DType ab : {DType::f16, DType::f32}) {
    DeviceBuffer da(p.a, ab), db(p.b, ab);
    DeviceBuffer dc(static_cast<size_t>(p.M * p.N), DType::f32), dc16(static_cast<size_t>(p.M * p.N), DType::f16);
    for (const std::string& variant : variants) {
      const RungTolerance tol = tolerance_for(variant, ab);
      const int64_t chain = chain_length(variant, p);
      for (DType c_type : {DType::f32, DType::f16}) {
        DeviceBuffer& c = c_type == DType::f32 ? dc : dc16;
        GemmArgs g = problem(p.op_a, p.op_b, p.M, p.N, p.K, ab, c_type);
        g.device = kCuda;
        g.A = da.get();
        g.B = db.get();
        g.C = c.get();
        const auto* v = GemmRegistry::instance().find(variant, kCuda);
        if (v->unsupported != nullptr && v->unsupported(g) != nullptr) {
          // Only f32 inputs may be refused (the Tensor Core rungs take f16), or a rung this GPU is too old for.
          EXPECT_TRUE(ab == DType::f32 || refused_as_documented(variant, g))
              << variant << " refused " << g.describe() << ": " << v->unsupported(g);
          continue;
        }
        c.poison();
        kernels::gemm(g, variant);
        const std::vector<double> out = c.download();
        std::ostringstream what;
        what << variant << " " << g.describe() << " (tolerance: " << tol.why << ")";
        expect_all_close(
            out, p.ref, [&](size_t i) { return element_tol(tol, chain, p.mag[i], p.ref[i], c_type); }, what.str());
        if (normwise) {
          EXPECT_LE(test::rel_error(out, p.ref), normwise_tol(tol, c_type)) << what.str();
        }
      }
    }
  }
}

TEST_P(CudaGemmSweep, EveryVariantLayoutAndDtypeMatchesFloat64) {
  HL_REQUIRE_CUDA();
  const SweepShape s = GetParam();
  uint64_t seed = test::fresh_seed();
  for (auto [op_a, op_b] : std::vector<std::pair<Op, Op>>{{Op::N, Op::N}, {Op::N, Op::T}, {Op::T, Op::N}}) {
    check_every_variant(make_problem(op_a, op_b, s.M, s.N, s.K, seed), true);
  }
}

std::string shape_name(const ::testing::TestParamInfo<SweepShape>& info) {
  return "s" + std::to_string(info.param.M) + "x" + std::to_string(info.param.N) + "x" + std::to_string(info.param.K);
}

// M x N x K: the trivial case, odd sizes below and across one tile, the MLP-512 forward (128 x 512 x
// 784 as 128 x 784 x 512's transpose-partner) and classifier GEMMs, a square one, and a BERT-sized one.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemmSweep,
                         ::testing::Values(SweepShape{1, 1, 1}, SweepShape{7, 13, 5}, SweepShape{17, 33, 65},
                                           SweepShape{128, 784, 512}, SweepShape{128, 512, 10},
                                           SweepShape{1000, 1000, 1000}, SweepShape{1024, 4096, 768}),
                         shape_name);

// ---- 2. epilogues, leading dimensions, alignment: one problem at a time --------------------------------

struct CaseOptions {
  bool bias = false;
  int64_t a_offset = 0, b_offset = 0;  // elements: start A / B this far into their buffers (misalignment)
  bool nan_in_a = false;               // A[0] = NaN: row 0 (op N) or row 0 (op T) of C must come out NaN
};

// Runs `variant` on fresh random inputs for g (sizes, ops, leading dims, dtypes, alpha, beta, bias
// dtype, relu) and checks every element of C, padding columns included (they must stay NaN), against
// float64. Returns false when the variant declares the case unsupported (nothing run).
bool run_case(const std::string& variant, GemmArgs g, const CaseOptions& o, uint64_t& seed) {
  const int64_t a_rows = g.op_a == Op::N ? g.M : g.K, b_rows = g.op_b == Op::N ? g.K : g.N;
  std::vector<double> a = test::random_values(static_cast<size_t>(a_rows * g.lda + o.a_offset), seed++, -1, 1, g.ab_type);
  const auto b = test::random_values(static_cast<size_t>(b_rows * g.ldb + o.b_offset), seed++, -1, 1, g.ab_type);
  const auto bias = test::random_values(static_cast<size_t>(g.N), seed++, -1, 1, g.bias_type);
  if (o.nan_in_a) a[static_cast<size_t>(o.a_offset)] = kNaN;
  // beta == 0: C starts as NaN everywhere, which the kernel must not read. Otherwise random values
  // in the columns that are read, NaN in the padding columns (which must stay untouched).
  std::vector<double> c0(static_cast<size_t>(g.M * g.ldc), kNaN);
  if (g.beta != 0.0f) {
    const auto init = test::random_values(c0.size(), seed++, -1, 1, g.c_type);
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t n = 0; n < g.N; ++n) c0[static_cast<size_t>(m * g.ldc + n)] = init[static_cast<size_t>(m * g.ldc + n)];
  }
  DeviceBuffer da(a, g.ab_type), db(b, g.ab_type), dc(c0, g.c_type), dbias(bias, g.bias_type);
  g.A = static_cast<const char*>(da.get()) + o.a_offset * static_cast<int64_t>(dtype_size(g.ab_type));
  g.B = static_cast<const char*>(db.get()) + o.b_offset * static_cast<int64_t>(dtype_size(g.ab_type));
  g.C = dc.get();
  g.bias = o.bias ? dbias.get() : nullptr;
  g.device = kCuda;

  const auto* v = GemmRegistry::instance().find(variant, kCuda);
  EXPECT_NE(v, nullptr) << variant;
  if (v == nullptr) return false;
  if (v->unsupported != nullptr && v->unsupported(g) != nullptr) return false;
  kernels::gemm(g, variant);

  const RungTolerance rt = tolerance_for(variant, g.ab_type);
  std::vector<double> ref(c0.size(), kNaN), tol(c0.size(), 0.0);
  for (int64_t m = 0; m < g.M; ++m) {
    for (int64_t n = 0; n < g.N; ++n) {
      double acc = 0, acc_abs = 0;
      for (int64_t k = 0; k < g.K; ++k) {
        const double x = g.op_a == Op::N ? a[static_cast<size_t>(o.a_offset + m * g.lda + k)]
                                         : a[static_cast<size_t>(o.a_offset + k * g.lda + m)];
        const double y = g.op_b == Op::N ? b[static_cast<size_t>(o.b_offset + k * g.ldb + n)]
                                         : b[static_cast<size_t>(o.b_offset + n * g.ldb + k)];
        acc += x * y;
        acc_abs += std::fabs(x * y);
      }
      const size_t i = static_cast<size_t>(m * g.ldc + n);
      double r = g.alpha * acc, mag = std::fabs(g.alpha) * acc_abs;
      if (g.beta != 0.0f) {
        r += g.beta * c0[i];
        mag += std::fabs(g.beta * c0[i]);
      }
      if (o.bias) {
        r += bias[static_cast<size_t>(n)];
        mag += std::fabs(bias[static_cast<size_t>(n)]);
      }
      if (g.relu && !std::isnan(r)) r = std::max(r, 0.0);  // NaN stays NaN through ReLU
      ref[i] = r;
      tol[i] = element_tol(rt, g.K, mag, r, g.c_type);
    }
  }
  std::ostringstream what;
  what << variant << " " << g.describe() << " a_offset=" << o.a_offset << " b_offset=" << o.b_offset
       << (o.nan_in_a ? " NaN in A" : "") << " (tolerance: " << rt.why << ")";
  expect_all_close(dc.download(), ref, [&](size_t i) { return tol[i]; }, what.str());
  return true;
}

const std::vector<std::pair<Op, Op>> kAllLayouts = {{Op::N, Op::N}, {Op::N, Op::T}, {Op::T, Op::N}, {Op::T, Op::T}};

TEST(CudaGemm, AlphaBetaBiasAndReluEpilogues) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  struct Epilogue {
    float alpha, beta;
    bool bias;
    DType bias_type;
    bool relu;
  };
  const std::vector<Epilogue> epilogues = {
      {1.0f, 1.0f, false, DType::f32, false},   // beta = 1: accumulate into an existing C (a gradient)
      {0.5f, 0.75f, true, DType::f32, true},    // the full epilogue
      {-1.25f, 0.0f, true, DType::f16, false},  // f16 bias, negative alpha, C (NaN) not read
      {2.0f, -1.0f, false, DType::f32, true},   // beta without bias, ReLU
      {1.0f, 0.0f, true, DType::f32, true},     // the forward pass of a linear + ReLU layer
  };
  const std::vector<std::vector<int64_t>> shapes = {{1, 1, 1}, {7, 13, 5}, {17, 33, 65}, {70, 130, 96}};
  for (const std::string& variant : cuda_variants()) {
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType ab : {DType::f16, DType::f32}) {
        for (DType c : {DType::f32, DType::f16}) {
          for (const auto& s : shapes) {
            for (const Epilogue& e : epilogues) {
              GemmArgs g = problem(op_a, op_b, s[0], s[1], s[2], ab, c);
              g.alpha = e.alpha;
              g.beta = e.beta;
              g.bias_type = e.bias_type;
              g.relu = e.relu;
              const bool ran = run_case(variant, g, {.bias = e.bias}, seed);
              if (ab == DType::f16) {
                EXPECT_TRUE(ran || refused_as_documented(variant, g)) << variant << " refused f16 inputs";
              }
            }
          }
        }
      }
    }
  }
}

TEST(CudaGemm, NaNPassesThroughBiasAndRelu) {
  // A NaN in op(A)[0][0] (A[0] in either layout) makes row 0 of C NaN; ReLU must not turn it into 0.
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (const std::string& variant : cuda_variants()) {
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType c : {DType::f32, DType::f16}) {
        GemmArgs g = problem(op_a, op_b, 40, 24, 48, DType::f16, c);
        g.relu = true;
        EXPECT_TRUE(run_case(variant, g, {.bias = true, .nan_in_a = true}, seed) || refused_as_documented(variant, g))
            << variant;
      }
    }
  }
}

TEST(CudaGemm, NonDenseLeadingDimensions) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (const std::string& variant : cuda_variants()) {
    for (auto [op_a, op_b] : kAllLayouts) {
      for (float beta : {0.0f, 1.0f}) {
        // g: odd sizes and strides (the WMMA rungs' scalar fallback). h: pad 3 gives odd strides again,
        // pad 8 strides that keep every row 16-byte aligned (their 128-bit path over a strided matrix).
        for (int64_t pad : {3, 8}) {
          GemmArgs g = problem(op_a, op_b, 67, 45, 83, DType::f16, DType::f32);
          g.lda += pad + 2;  // row strides wider than the rows: submatrices of larger buffers
          g.ldb += pad;
          g.ldc += 7;
          g.beta = beta;
          EXPECT_TRUE(run_case(variant, g, {.bias = true}, seed) || refused_as_documented(variant, g)) << variant;
          GemmArgs h = problem(op_a, op_b, 64, 128, 96, DType::f16, DType::f16);
          h.lda += pad == 8 ? 8 : 5;
          h.ldb += pad == 8 ? 16 : 1;
          h.ldc += 3;
          h.beta = beta;
          EXPECT_TRUE(run_case(variant, h, {}, seed) || refused_as_documented(variant, h)) << variant;
        }
      }
    }
  }
}

// The rungs put their row tiles on gridDim.y, which stops at 65535; gemm() runs a taller problem as
// slabs of kCudaGemmRowChunk rows (kernels/gemm.h). Every rung on a problem of two slabs, the second a
// short one (both ways A is stored, C with a padding column that must stay NaN), then the automatic
// choice on one more row than 65535 tiles of 128 rows, which it refused before the slabs.
TEST(CudaGemm, RowsPastOneGridOfRowTiles) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (const std::string& variant : cuda_variants())
    for (Op op_a : {Op::N, Op::T}) {
      GemmArgs g = problem(op_a, Op::T, kernels::kCudaGemmRowChunk + 37, 8, 16, DType::f16, DType::f32);
      g.ldc += 1;
      g.beta = 0.5f;
      EXPECT_TRUE(run_case(variant, g, {.bias = true}, seed) || refused_as_documented(variant, g)) << variant;
    }
  const GemmArgs tall = problem(Op::N, Op::N, int64_t{65535} * 128 + 1, 8, 8, DType::f16, DType::f16);
  GemmArgs on_gpu = tall;
  on_gpu.device = kCuda;
  const std::string chosen = GemmRegistry::instance().select(on_gpu).name;
  EXPECT_TRUE(run_case(chosen, tall, {}, seed)) << chosen;
}

TEST(CudaGemm, MisalignedPointersGetTheFallbackOrANamedError) {
  // A and B start 1 and 3 halves into their buffers, so no 16-byte (or 32-byte) vector access is
  // aligned. A rung either computes the right result anyway (its scalar fallback) or refuses with a
  // reason; an explicit request for a refusing rung must be an hl::Error naming it.
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (const std::string& variant : cuda_variants()) {
    for (auto [op_a, op_b] : kAllLayouts) {
      GemmArgs g = problem(op_a, op_b, 64, 96, 128, DType::f16, DType::f32);
      const CaseOptions o{.bias = false, .a_offset = 1, .b_offset = 3};
      if (run_case(variant, g, o, seed)) continue;
      DeviceBuffer a(static_cast<size_t>(64 * 128 + 8), DType::f16), b(static_cast<size_t>(96 * 128 + 8), DType::f16),
          c(static_cast<size_t>(64 * 96), DType::f32);
      g.device = kCuda;
      g.A = static_cast<const char*>(a.get()) + 2;
      g.B = static_cast<const char*>(b.get()) + 6;
      g.C = c.get();
      try {
        kernels::gemm(g, variant);
        ADD_FAILURE() << variant << " declared the case unsupported but ran it when asked by name";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'" + variant + "'"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(CudaGemm, AccumulatesInFp32) {
  // Paper §3.3: 4096 products 1 * 1 summed in FP16 stall at 2048 (2048 + 1 rounds back to 2048, the
  // FP16 spacing there being 2); an FP32 accumulator reaches exactly 4096, which an FP16 C can hold.
  // That catches a scalar FP16 sum, but not an FP16 accumulator fragment fed by Tensor Core blocks: each
  // block of 16 (or 8, or 4) ones sums to a multiple of 16 exactly, and every partial sum stays a
  // multiple of 16, which FP16 holds up to 4096. So the products are also 1 * (1 + 2^-7) (exact in f16):
  // in FP32 every partial sum k (1 + 2^-7) needs at most 19 bits, and the total is exactly 4128 (an
  // FP16 C holds it too), while an FP16 accumulator, whose spacing passes 2^-7 from 16 on, gives 4100 in
  // blocks and 4096 one by one. Only with an f32 C for the second case: C's dtype does not change the
  // accumulator, and this test runs under memcheck with every rung. 1 x 1 goes through every rung's edge
  // path, 64 x 48 through the full-tile paths.
  HL_REQUIRE_CUDA();
  const int64_t K = 4096;
  const double b_value[] = {1.0, 1.0 + std::ldexp(1.0, -7)};
  for (const std::string& variant : cuda_variants()) {
    for (auto [op_a, op_b] : kAllLayouts) {
      for (auto [M, N] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {64, 48}}) {
        for (const auto& [c_type, b] : std::vector<std::pair<DType, double>>{
                 {DType::f32, b_value[0]}, {DType::f16, b_value[0]}, {DType::f32, b_value[1]}}) {
          DeviceBuffer a(std::vector<double>(static_cast<size_t>(M * K), 1.0), DType::f16),
              bb(std::vector<double>(static_cast<size_t>(K * N), b), DType::f16), c(static_cast<size_t>(M * N), c_type);
          c.poison();
          GemmArgs g = problem(op_a, op_b, M, N, K, DType::f16, c_type);
          g.device = kCuda;
          g.A = a.get();
          g.B = bb.get();
          g.C = c.get();
          const auto* v = GemmRegistry::instance().find(variant, kCuda);
          if (refused_as_documented(variant, g)) continue;
          ASSERT_TRUE(v->unsupported == nullptr || v->unsupported(g) == nullptr) << variant;
          kernels::gemm(g, variant);
          const double want = static_cast<double>(K) * b;  // 4096 or 4128, exact
          expect_all_equal(c.download(), std::vector<double>(static_cast<size_t>(M * N), want),
                           variant + " " + g.describe() + ": 4096 products " + (b == 1.0 ? "1" : "1 + 2^-7") +
                               " must sum to exactly " + std::to_string(static_cast<int>(want)) + " in FP32");
        }
      }
    }
  }
}

// ---- split-K: the long reductions (kernels/gemm_split.h) ----------------------------------------------

// wmma_pipelined_split_k splits K when its small 64 x 64 tile (K steps of 32) leaves the GPU idle,
// smem_tiled_split_k with its 128 x 128 tile (K steps of 8). The tests below are about that path: they
// check first that both variants take it on this GPU for every shape they use.
void expect_split_by_both_rungs(int64_t M, int64_t N, int64_t K) {
  const int64_t sms = runtime::cuda_sm_count();
  const auto tiles = [&](int64_t t) { return ((M + t - 1) / t) * ((N + t - 1) / t); };
  ASSERT_GT(kernels::plan_split_k(tiles(64), K, sms, 32).slices, 1) << M << "x" << N << "x" << K << " on " << sms << " SMs";
  ASSERT_GT(kernels::plan_split_k(tiles(128), K, sms, 8).slices, 1) << M << "x" << N << "x" << K << " on " << sms << " SMs";
}

TEST(CudaGemm, SplitKLongReductionsMatchFloat64) {
  // LeNet conv1's weight gradient as an im2col GEMM at batch 128 (one tile, K = N*P*Q = 100352), LeNet
  // fc1's forward (8 tiles, K = 3136), and odd sizes whose K no slice length divides. Every element
  // against float64 with the per-element bound (chain + 3) 2^-24 sum|terms| (the norm-wise bounds of the
  // sweep assume K <= 1000), where the chain is K, or a split rung's longest slice plus its slices on the
  // two narrow shapes (chain_length); every variant runs, the unsplit ones as a cross-check.
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  for (const SweepShape s : {SweepShape{32, 25, 100352}, SweepShape{128, 256, 3136}, SweepShape{7, 13, 5001},
                             SweepShape{70, 130, 4099}}) {
    expect_split_by_both_rungs(s.M, s.N, s.K);
    for (auto [op_a, op_b] : kAllLayouts) check_every_variant(make_problem(op_a, op_b, s.M, s.N, s.K, seed), false);
  }
}

// The second pass loads the partials of kernels::kSumBatch slices before adding them (sum_slices in
// gemm_split.h); a slice count of several batches plus a remainder runs both of its loops, with the
// epilogue (alpha, beta, bias, ReLU) after them. Light enough for compute-sanitizer memcheck, which
// leaves out SplitKLongReductionsMatchFloat64 (every variant at K up to 100352).
TEST(CudaGemm, SplitKSecondPassOverBatchesOfSlices) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const int64_t M = 7, N = 13, K = 16384;
  const int64_t sms = runtime::cuda_sm_count();
  for (const auto& [variant, k_step, tile] : {std::tuple<std::string, int64_t, int64_t>{"wmma_pipelined_split_k", 32, 64},
                                              {"smem_tiled_split_k", 8, 128}}) {
    const kernels::SplitKPlan plan = kernels::plan_split_k(((M + tile - 1) / tile) * ((N + tile - 1) / tile), K, sms, k_step);
    ASSERT_GT(plan.slices, 2 * kernels::kSumBatch) << variant << " on " << sms << " SMs";
    ASSERT_NE((plan.slices - 1) % kernels::kSumBatch, 0) << variant << ": the remainder loop must run too";
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType c : {DType::f32, DType::f16}) {
        GemmArgs g = problem(op_a, op_b, M, N, K, DType::f16, c);
        g.alpha = 0.5f;
        g.beta = 1.0f;
        g.relu = true;
        g.bias_type = DType::f32;
        EXPECT_TRUE(run_case(variant, g, {.bias = true}, seed)) << variant << " " << g.describe();
      }
    }
  }
}

TEST(CudaGemm, SplitKEpiloguesApplyOnceToTheWholeSum) {
  // alpha, beta (accumulating into an existing C), bias and ReLU belong to the second pass: applied to
  // each slice they would count beta * C and the bias once per slice, and ReLU would clip partial sums.
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const int64_t M = 70, N = 130, K = 1100;  // 4 slices on an H200 (gemm_split.h)
  expect_split_by_both_rungs(M, N, K);
  for (const std::string variant : {"wmma_pipelined_split_k", "smem_tiled_split_k"}) {
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType ab : {DType::f16, DType::f32}) {
        for (DType c : {DType::f32, DType::f16}) {
          GemmArgs g = problem(op_a, op_b, M, N, K, ab, c);
          g.alpha = -0.75f;
          g.beta = 1.0f;
          g.relu = true;
          g.bias_type = DType::f32;
          const bool ran = run_case(variant, g, {.bias = true}, seed);
          EXPECT_EQ(ran, ab == DType::f16 || variant == "smem_tiled_split_k") << variant << " " << g.describe();
        }
      }
    }
  }
}

TEST(CudaGemm, SplitKOverStridedAndMisalignedOperands) {
  // The slices move A and B along K by whole tiles, so a slice inherits its operand's layout: strides
  // wider than the rows (submatrices), pointers off the 16-byte grid (the scalar loads), an f16 bias
  // and beta = 1, on a K long enough to split (NonDenseLeadingDimensions and MisalignedPointers use
  // K <= 128, which never splits).
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const int64_t M = 70, N = 130, K = 1100;
  expect_split_by_both_rungs(M, N, K);
  for (const std::string variant : {"wmma_pipelined_split_k", "smem_tiled_split_k"}) {
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType c : {DType::f32, DType::f16}) {
        GemmArgs g = problem(op_a, op_b, M, N, K, DType::f16, c);
        g.lda += 3;
        g.ldb += 5;
        g.ldc += 7;
        g.beta = 1.0f;
        g.bias_type = DType::f16;
        EXPECT_TRUE(run_case(variant, g, {.bias = true}, seed)) << variant << " " << g.describe();
        GemmArgs h = problem(op_a, op_b, M, N, K, DType::f16, c);
        EXPECT_TRUE(run_case(variant, h, {.bias = false, .a_offset = 1, .b_offset = 3}, seed))
            << variant << " misaligned " << h.describe();
      }
    }
  }
}

TEST(CudaGemm, SplitKIsDeterministic) {
  // The slices are added in a fixed order by one thread per element (no atomics): the same inputs give
  // the same bits on every run.
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const int64_t M = 32, N = 25, K = 100352;
  expect_split_by_both_rungs(M, N, K);
  const auto a = test::random_values(static_cast<size_t>(M * K), seed++, -1, 1, DType::f16);
  const auto b = test::random_values(static_cast<size_t>(K * N), seed++, -1, 1, DType::f16);
  for (const std::string variant : {"wmma_pipelined_split_k", "smem_tiled_split_k"}) {
    for (DType ab : {DType::f16, DType::f32}) {
      if (variant == "wmma_pipelined_split_k" && ab == DType::f32) continue;  // f16 inputs only
      DeviceBuffer da(a, ab), db(b, ab), c(static_cast<size_t>(M * N), DType::f32);
      GemmArgs g = problem(Op::T, Op::N, M, N, K, ab, DType::f32);  // A stored K x M, as in a weight gradient
      g.device = kCuda;
      g.A = da.get();
      g.B = db.get();
      g.C = c.get();
      std::vector<double> first;
      for (int run = 0; run < 3; ++run) {
        c.poison();
        kernels::gemm(g, variant);
        const std::vector<double> out = c.download();
        if (run == 0) {
          first = out;
        } else {
          expect_all_equal(out, first, variant + " " + g.describe() + ": run " + std::to_string(run) + " vs run 0");
        }
      }
    }
  }
}

// Where the plan does not split, a split-K variant launches its rung's own kernel with its rung's tile
// (wmma_pipelined.cu, smem_tiled.cu), which is what lets promotion swap one for the other: the output
// must be bit for bit the rung's, with the whole epilogue, in every layout and C dtype. Every K is
// below kMinSplitK, so that no plan splits on any GPU (asserted below); 2048 x 2048 takes
// wmma_pipelined's big tile, 300 x 270 its small one.
TEST(CudaGemm, SplitKVariantsEqualTheirRungWhereTheyDoNotSplit) {
  HL_REQUIRE_CUDA();
  uint64_t seed = test::fresh_seed();
  const int64_t sms = runtime::cuda_sm_count();
  struct Pair {
    const char* split;
    const char* rung;
    int64_t tile, k_step;  // the split variant's tile and K step (expect_split_by_both_rungs)
  };
  // wgmma_tma (compute capability 9.0 only) takes only rows of 16-byte multiples: of these shapes, 2048
  // x 2048 and 136 x 200 (its 128 x 128 tile); it declines the others, as on any other GPU.
  const Pair pairs[] = {{"wmma_pipelined_split_k", "wmma_pipelined", 64, 32},
                        {"smem_tiled_split_k", "smem_tiled", 128, 8},
                        {"wgmma_tma_split_k", "wgmma_tma", 128, 64}};
  const SweepShape shapes[] = {{300, 270, kernels::kMinSplitK - 1}, {2048, 2048, 512}, {7, 13, 77}, {136, 200, 1016}};
  for (const Pair& pr : pairs) {
    for (const SweepShape& s : shapes) {
      const int64_t tiles = ((s.M + pr.tile - 1) / pr.tile) * ((s.N + pr.tile - 1) / pr.tile);
      ASSERT_EQ(kernels::plan_split_k(tiles, s.K, sms, pr.k_step).slices, 1) << pr.split << " would split " << s.M
                                                                             << "x" << s.N << "x" << s.K;
      for (auto [op_a, op_b] : kAllLayouts) {
        for (DType ab : {DType::f16, DType::f32}) {
          for (DType c : {DType::f32, DType::f16}) {
            GemmArgs g = problem(op_a, op_b, s.M, s.N, s.K, ab, c);
            const auto* v = GemmRegistry::instance().find(pr.rung, kCuda);
            ASSERT_NE(v, nullptr) << pr.rung;
            if (v->unsupported != nullptr && v->unsupported(g) != nullptr) continue;  // wmma rungs: f16 inputs
            const int64_t a_rows = op_a == Op::N ? s.M : s.K, b_rows = op_b == Op::N ? s.K : s.N;
            const auto a = test::random_values(static_cast<size_t>(a_rows * g.lda), seed++, -1, 1, ab);
            const auto b = test::random_values(static_cast<size_t>(b_rows * g.ldb), seed++, -1, 1, ab);
            const auto bias = test::random_values(static_cast<size_t>(s.N), seed++, -1, 1, DType::f32);
            const auto c0 = test::random_values(static_cast<size_t>(s.M * g.ldc), seed++, -1, 1, c);
            DeviceBuffer da(a, ab), db(b, ab), dbias(bias, DType::f32);
            g.A = da.get();
            g.B = db.get();
            g.bias = dbias.get();
            g.bias_type = DType::f32;
            g.alpha = -0.75f;
            g.beta = 0.5f;
            g.relu = true;
            g.device = kCuda;
            std::vector<double> out[2];
            const char* variants[2] = {pr.rung, pr.split};
            for (int i = 0; i < 2; ++i) {
              DeviceBuffer dc(c0, c);
              g.C = dc.get();
              kernels::gemm(g, variants[i]);
              out[i] = dc.download();
            }
            expect_all_equal(out[1], out[0], std::string(pr.split) + " vs " + pr.rung + " " + g.describe());
          }
        }
      }
    }
  }
}

// A rung with each setting of a tuning hook that bench/gemm_bench --sweep times, so that whichever one
// the measurements pick is already checked. with_setting(i, body) sets setting i for one scope (a
// Scoped* guard: back to the rung's own choice, also when an assertion fails) and calls
// body(label, may_refuse). The hook forces the setting for every problem, small or not, so small
// shapes cross every edge. Every layout and C dtype with the whole epilogue (alpha, beta, bias, ReLU) on
// each shape; with `strided`, also wide leading dimensions and misaligned operands (the copies' scalar
// path) on the first shape. A setting that may be refused (may_refuse) can need more shared memory
// than this GPU allows a block: the rung refuses it at launch with the numbers, as gemm_bench --sweep
// reports, and that refusal is the right answer there, not a failure.
template <class WithSetting>
void check_every_setting(const std::string& variant, int settings, WithSetting&& with_setting,
                         const std::vector<std::vector<int64_t>>& shapes, bool strided) {
  uint64_t seed = test::fresh_seed();
  for (int i = 0; i < settings; ++i) {
    with_setting(i, [&](const std::string& label, bool may_refuse) {
      const auto run = [&](const GemmArgs& g, const CaseOptions& o, const std::string& what) {
        try {
          EXPECT_TRUE(run_case(variant, g, o, seed)) << label << " " << what << g.describe();
        } catch (const Error& e) {
          const std::string why = e.what();
          const bool too_big = why.find("bytes of shared memory per block") != std::string::npos;
          // A cluster tile (wmma_pipelined_tiles.h #19-#20) on a GPU older than Hopper.
          const bool no_clusters = why.find("thread-block cluster needs compute capability 9.0") != std::string::npos &&
                                   runtime::cuda_compute_capability() < 90;
          EXPECT_TRUE((too_big && may_refuse) || no_clusters) << label << " " << what << g.describe() << ": " << why;
          if (too_big || no_clusters) std::cout << "[ info     ] " << label << " refused on this GPU: " << why << "\n";
        }
      };
      for (auto [op_a, op_b] : kAllLayouts) {
        for (DType c : {DType::f32, DType::f16}) {
          for (const auto& sh : shapes) {
            GemmArgs g = problem(op_a, op_b, sh[0], sh[1], sh[2], DType::f16, c);
            g.alpha = 0.5f;
            g.beta = 0.75f;
            g.relu = true;
            g.bias_type = DType::f32;
            run(g, {.bias = true}, "");
          }
          if (!strided) continue;
          GemmArgs h = problem(op_a, op_b, shapes[0][0], shapes[0][1], shapes[0][2], DType::f16, c);
          h.lda += 3;
          h.ldb += 5;
          h.ldc += 7;
          run(h, {.bias = false, .a_offset = 1, .b_offset = 3}, "strided and misaligned ");
        }
      }
    });
  }
}

// wmma_pipelined with each block tile of wmma_pipelined_tiles.h. A candidate tile may need more shared
// memory than this GPU allows (several need more than 99 KiB, up to 162 KiB for #8: fine on an A100 or
// H100, not on an sm_86/89 GPU's 99 KiB); kOwnTile, the tile the rung itself chooses, must fit every
// GPU it runs on.
void check_every_tuning_tile(const std::vector<std::vector<int64_t>>& shapes, bool strided) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "the tuning tiles are for sm_80+; older GPUs keep their tile";
  namespace tiles = kernels::wmma_pipelined;
  check_every_setting(
      "wmma_pipelined", tiles::kBigTileCount,
      [](int i, auto&& body) {
        const tiles::ScopedBigTile forced(i);
        body("tile #" + std::to_string(i) + " (" + tiles::describe(tiles::kBigTiles[i]) + ")", i != tiles::kOwnTile);
      },
      shapes, strided);
}

TEST(CudaGemm, WmmaPipelinedEveryTileTheSweepTimes) {
  // M and N below, across and not a multiple of one tile; K neither a multiple of 32 nor of 64, and long
  // enough (300: 10 steps of 32) that the ring of every tile wraps around; and 1 x 1 x 1.
  check_every_tuning_tile({{300, 270, 300}, {257, 513, 77}, {1, 1, 1}}, true);
}

TEST(CudaGemm, WmmaPipelinedEveryTileOneBlockRingWraps) {
  // One block per tile, K = 300 (the ring wraps): small enough for compute-sanitizer racecheck, which
  // watches the ring's refills against the fragment loads (scripts/gpu_check.sh, bench/gpu_gemm.sh).
  check_every_tuning_tile({{70, 40, 300}}, false);
}

// The planned copies (copy_plan.h: wmma_pipelined's lean tiles, wmma_smem's batched copy) run only in
// blocks that lie inside both matrices, on full K steps, with both matrices 16-byte aligned; the shapes
// above have odd leading dimensions, so there those settings take the general copy throughout. These
// shapes have leading dimensions that are multiples of 8, blocks inside and on the edges along M and N
// (304 and 272: two whole 128-row or -column blocks and a partial one), and a partial last K step
// (296 = 9 x 32 + 8 = 4 x 64 + 40; 104 = 3 x 32 + 8 = 64 + 40), so that one launch mixes both copies,
// step by step and block by block. Small enough for compute-sanitizer racecheck (scripts/gpu_check.sh,
// race_new).
const std::vector<std::vector<int64_t>> kPlannedCopyShapes = {{256, 128, 296}, {304, 272, 104}};

TEST(CudaGemm, WmmaPipelinedLeanTilesInsideAndOnTheEdges) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "the tuning tiles are for sm_80+; older GPUs keep their tile";
  namespace tiles = kernels::wmma_pipelined;
  std::vector<int> lean;
  for (int i = 0; i < tiles::kBigTileCount; ++i)
    if (tiles::kBigTiles[i].lean) lean.push_back(i);
  ASSERT_FALSE(lean.empty()) << "no tile of wmma_pipelined_tiles.h uses the lean copy";
  check_every_setting(
      "wmma_pipelined", static_cast<int>(lean.size()),
      [&](int j, auto&& body) {
        const int i = lean[static_cast<size_t>(j)];
        const tiles::ScopedBigTile forced(i);
        body("tile #" + std::to_string(i) + " (" + tiles::describe(tiles::kBigTiles[i]) + ")", true);
      },
      kPlannedCopyShapes, false);
}

// The cluster tiles (wmma_pipelined_tiles.h #19-#20, cluster_share.h) on grids of several clusters:
// M and N not multiples of a cluster's 256 rows or columns, so that whole clusters need blocks past the
// edges of C, which hold no tile of it but still copy and send the parts their peers need; leading
// dimensions that allow the lean copy inside and a partial last K step (1000 = 31 x 32 + 8; 296 = 9 x
// 32 + 8) for the general copy; and 32 K steps, around the ring of 5 stages six times. Every block of
// a cluster waits for its peers' parts, so a wrong schedule hangs rather than miscomputes: the waits
// trap after 20 s (mbarrier.cuh), which fails the test with a launch error instead.
TEST(CudaGemm, WmmaPipelinedClusterTilesOnSeveralClusters) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 90) GTEST_SKIP() << "the cluster tiles need compute capability 9.0";
  namespace tiles = kernels::wmma_pipelined;
  std::vector<int> clustered;
  for (int i = 0; i < tiles::kBigTileCount; ++i)
    if (tiles::kBigTiles[i].clustered()) clustered.push_back(i);
  ASSERT_FALSE(clustered.empty()) << "no tile of wmma_pipelined_tiles.h uses a cluster";
  check_every_setting(
      "wmma_pipelined", static_cast<int>(clustered.size()),
      [&](int j, auto&& body) {
        const int i = clustered[static_cast<size_t>(j)];
        const tiles::ScopedBigTile forced(i);
        // May be refused, as every candidate tile: in the NT layout their 5 stages need 102,400 bytes of
        // shared memory, more than the 101,376 a block may have on some GPUs of compute capability 9.0+
        // (12.0). On an H100 or H200 (232,448) nothing is refused, and a refusal prints an info line.
        body("tile #" + std::to_string(i) + " (" + tiles::describe(tiles::kBigTiles[i]) + ")", true);
      },
      {{520, 264, 1000}, {136, 40, 296}}, false);
}

// The cluster tiles inside a CUDA graph recording. The trainer records whole training steps
// (TrainOptions::cuda_graph, framework/cuda_graph.h), and a cluster tile that became the rung's own
// (docs/gpu_status.md, the next GPU session's item 6) would be recorded with every large GEMM in them.
// It is launched through cudaLaunchKernelEx with the cluster's shape, where every other tile uses <<<>>>,
// so this checks that the launch records as a graph node that replays the cluster kernel. Nothing may run
// while recording. Each replay's C must be bit for bit that of a direct launch on the same inputs, and
// within the rung's tolerance of float64. The second replay reads new inputs from the same buffers.
TEST(CudaGemm, WmmaPipelinedClusterTilesReplayInACudaGraph) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 90) GTEST_SKIP() << "the cluster tiles need compute capability 9.0";
  namespace tiles = kernels::wmma_pipelined;
  // Several clusters along M and N (3 x 2 blocks of 128 x 128, partly past C), K steps 10 times round
  // the 5-stage ring, and a last K step of 8.
  constexpr int64_t M = 300, N = 200, K = 296;
  uint64_t seed = test::fresh_seed();
  int tried = 0;
  for (int i = 0; i < tiles::kBigTileCount; ++i) {
    if (!tiles::kBigTiles[i].clustered()) continue;
    ++tried;
    const std::string label = "tile #" + std::to_string(i) + " (" + tiles::describe(tiles::kBigTiles[i]) + ")";
    const tiles::ScopedBigTile forced(i);
    Problem p = make_problem(Op::N, Op::N, M, N, K, seed);
    DeviceBuffer da(p.a, DType::f16), db(p.b, DType::f16), dc(static_cast<size_t>(M * N), DType::f32),
        direct(static_cast<size_t>(M * N), DType::f32);
    dc.poison();
    GemmArgs g = problem(Op::N, Op::N, M, N, K, DType::f16, DType::f32);
    g.device = kCuda;
    g.A = da.get();
    g.B = db.get();
    g.C = dc.get();

    runtime::cuda_capture_begin();
    try {
      kernels::gemm(g, "wmma_pipelined");
    } catch (...) {
      runtime::cuda_capture_abort();
      throw;
    }
    void* exec = runtime::cuda_capture_end();
    const std::unique_ptr<void, void (*)(void*)> graph(exec, [](void* e) { runtime::cuda_graph_destroy(e); });
    expect_all_equal(dc.download(), std::vector<double>(static_cast<size_t>(M * N), kNaN),
                     label + ": C after the recording (nothing may have run)");

    const RungTolerance rt = tolerance_for("wmma_pipelined", DType::f16);
    for (int replay = 0; replay < 2; ++replay) {
      if (replay == 1) {
        p = make_problem(Op::N, Op::N, M, N, K, seed);
        da.upload(p.a);
        db.upload(p.b);
        dc.poison();
      }
      runtime::cuda_graph_launch(exec);
      const std::vector<double> replayed = dc.download();
      const std::string what = label + ", replay " + std::to_string(replay + 1);
      expect_all_close(
          replayed, p.ref, [&](size_t e) { return element_tol(rt, K, p.mag[e], p.ref[e], DType::f32); },
          what + " against float64 (tolerance: " + rt.why + ")");
      GemmArgs d = g;
      d.C = direct.get();
      direct.poison();
      kernels::gemm(d, "wmma_pipelined");
      expect_all_equal(replayed, direct.download(), what + " against a direct launch");
    }
  }
  EXPECT_GT(tried, 0) << "no tile of wmma_pipelined_tiles.h uses a cluster";
}

// Two tiles of wmma_pipelined_tiles.h alike in every field but `ahead` (the order of the K loop): one
// comparison, so that a field added to the table is compared wherever tiles are.
bool alike_but_order(const kernels::wmma_pipelined::Tile& u, const kernels::wmma_pipelined::Tile& t) {
  return u.bm == t.bm && u.bn == t.bn && u.bk == t.bk && u.warps_m == t.warps_m && u.warps_n == t.warps_n &&
         u.stages == t.stages && u.lean == t.lean && u.cluster_m == t.cluster_m && u.cluster_n == t.cluster_n;
}

// The fragments-ahead tiles (wmma_pipelined_tiles.h #21-#23; wmma_pipelined.cu, point 5) reorder a K
// tile's loads, copies and barrier, not its arithmetic. Each accumulator gets the same mma_syncs on the
// same fragments in the same order as in the tile it is made from, so C must be the same bits. The shapes
// cover K of 1 to 10 K steps (fewer than the ring's stages, and around it), the lean copy inside and the
// general one at the edges, a matrix the lean copy cannot take (1 x 1 x 1), and a K that is not a
// multiple of 8 (203): then only the T,N layout has 16-byte aligned rows in both matrices, and there the
// lean copy takes the full K steps of the blocks inside (two along N even for #23's 256 columns) and the
// general copy the partial last one, 11 rows of the 32 or 64. Each runs in every
// layout, with both C dtypes, and either with beta = 0 (C poisoned) or with alpha, beta, bias and ReLU.
// (Small: its process runs it under memcheck beside every tile's sweep, scripts/gpu_common.sh.)
TEST(CudaGemm, WmmaPipelinedFragmentsAheadGiveTheirTilesBits) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "the tuning tiles are for sm_80+; older GPUs keep their tile";
  namespace tiles = kernels::wmma_pipelined;
  const std::vector<std::vector<int64_t>> shapes = {
      {256, 256, 296}, {304, 272, 104}, {130, 136, 40}, {1, 1, 1}, {264, 520, 203}};
  uint64_t seed = test::fresh_seed();
  int pairs = 0;
  for (int i = 0; i < tiles::kBigTileCount; ++i) {
    const tiles::Tile& t = tiles::kBigTiles[i];
    if (!t.ahead) continue;
    int base = -1;
    for (int j = 0; j < tiles::kBigTileCount; ++j)
      if (!tiles::kBigTiles[j].ahead && alike_but_order(tiles::kBigTiles[j], t)) base = j;
    ASSERT_GE(base, 0) << "tile #" << i << " (" << tiles::describe(t) << ") has no tile without fragments ahead";
    ++pairs;
    const std::string label = "tile #" + std::to_string(i) + " against #" + std::to_string(base) + " (" +
                              tiles::describe(t) + ")";
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType c : {DType::f32, DType::f16}) {
        for (size_t k = 0; k < shapes.size(); ++k) {
          const std::vector<int64_t>& sh = shapes[k];
          const bool accumulate = k % 2 == 1;
          GemmArgs g = problem(op_a, op_b, sh[0], sh[1], sh[2], DType::f16, c);
          g.device = kCuda;
          if (accumulate) {
            g.alpha = 0.5f;
            g.beta = 0.75f;
            g.relu = true;
            g.bias_type = DType::f32;
          }
          const int64_t a_rows = op_a == Op::N ? g.M : g.K, b_rows = op_b == Op::N ? g.K : g.N;
          DeviceBuffer da(test::random_values(static_cast<size_t>(a_rows * g.lda), seed++, -1, 1, DType::f16),
                          DType::f16);
          DeviceBuffer db(test::random_values(static_cast<size_t>(b_rows * g.ldb), seed++, -1, 1, DType::f16),
                          DType::f16);
          DeviceBuffer dbias(test::random_values(static_cast<size_t>(g.N), seed++, -1, 1, DType::f32), DType::f32);
          const std::vector<double> c0 =
              accumulate ? test::random_values(static_cast<size_t>(g.M * g.ldc), seed++, -1, 1, c)
                         : std::vector<double>(static_cast<size_t>(g.M * g.ldc), kNaN);
          DeviceBuffer dc(c0, c);
          g.A = da.get();
          g.B = db.get();
          g.C = dc.get();
          g.bias = accumulate ? dbias.get() : nullptr;
          const auto run = [&](int tile) {
            const tiles::ScopedBigTile forced(tile);
            dc.upload(c0);
            kernels::gemm(g, "wmma_pipelined");
            return dc.download();
          };
          const std::string what = label + " " + g.describe();
          try {
            const std::vector<double> want = run(base);
            expect_all_equal(run(i), want, what);
          } catch (const Error& e) {
            // A tile needing more shared memory than this GPU allows a block is refused with the numbers
            // (as in check_every_setting); then both are, since they use the same ring.
            const bool too_big = std::string(e.what()).find("bytes of shared memory per block") != std::string::npos;
            EXPECT_TRUE(too_big) << what << ": " << e.what();
            if (too_big) std::cout << "[ info     ] " << label << " refused on this GPU: " << e.what() << "\n";
          }
        }
      }
    }
  }
  EXPECT_GT(pairs, 0) << "no tile of wmma_pipelined_tiles.h loads its fragments ahead";
}

// A tuning hook set to what the rung has no kernel for: `variant` refuses an 8 x 8 x 8 GEMM with an
// Error that names `listed_in`, the file that lists what it has.
void expect_tuning_refused(const std::string& variant, const std::string& setting, const std::string& listed_in) {
  DeviceBuffer a(std::vector<double>(64, 1.0), DType::f16), b(std::vector<double>(64, 1.0), DType::f16);
  DeviceBuffer c(std::vector<double>(64, 0.0), DType::f32);
  GemmArgs g = problem(Op::N, Op::N, 8, 8, 8, DType::f16, DType::f32);
  g.device = kCuda;
  g.A = a.get();
  g.B = b.get();
  g.C = c.get();
  try {
    kernels::gemm(g, variant);
    ADD_FAILURE() << variant << " ran with " << setting;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(listed_in), std::string::npos) << e.what();
  }
}

TEST(CudaGemm, WmmaPipelinedTuningHookRefusesAnIndexPastTheTable) {
  // The hook is read at every launch (the tests above cannot tell the tiles apart by their results): an
  // index past the table is refused, naming the file that lists the tiles.
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "the tuning tiles are for sm_80+; older GPUs keep their tile";
  namespace tiles = kernels::wmma_pipelined;
  const tiles::ScopedBigTile past_the_table(tiles::kBigTileCount);
  for (const std::string variant : {"wmma_pipelined", "wmma_pipelined_split_k"})
    expect_tuning_refused(variant, "tuning tile " + std::to_string(tiles::kBigTileCount), "wmma_pipelined_tiles.h");
}

// wmma_smem with each K step of wmma_smem_k_step.h (every one fits the 48 KiB a block gets without
// asking), with the general copy and with the batched copy, each forced (only_batched: the latter alone).
void check_every_k_step(const std::vector<std::vector<int64_t>>& shapes, bool strided, bool only_batched = false) {
  HL_REQUIRE_CUDA();
  namespace ks = kernels::wmma_smem;
  constexpr int steps = static_cast<int>(sizeof(ks::kCandidateKSteps) / sizeof(ks::kCandidateKSteps[0]));
  check_every_setting(
      "wmma_smem", only_batched ? steps : 2 * steps,
      [&](int i, auto&& body) {
        const int k = ks::kCandidateKSteps[i % steps];
        const bool batched = only_batched || i >= steps;
        const ks::ScopedKStep step(k);
        const ks::ScopedBatchedCopy copy(batched);
        body("K step " + std::to_string(k) + (batched ? ", batched copy" : ", general copy"), false);
      },
      shapes, strided);
}

TEST(CudaGemm, WmmaSmemEveryKStepTheSweepTimes) {
  // K = 300 and 77: multiples of neither step; M and N across and not multiples of the 128 x 128 tile.
  check_every_k_step({{300, 270, 300}, {257, 513, 77}, {1, 1, 1}}, true);
}

TEST(CudaGemm, WmmaSmemEveryKStepOneBlock) {
  // One block, K = 100 (a partial last step for both): small enough for compute-sanitizer racecheck
  // (scripts/gpu_check.sh). A K step the kernel is not compiled for is refused, naming the header.
  check_every_k_step({{70, 40, 100}}, false);
  if (!runtime::cuda_available()) return;
  const kernels::wmma_smem::ScopedKStep odd(48);
  expect_tuning_refused("wmma_smem", "K step 48", "wmma_smem_k_step.h");
}

// mma_sync with the lean copy (the rung's own since 2026-11-27, mma_sync_lanes.h) and with the general
// copy, each forced through its tuning hook: where the general copy does everything (odd leading
// dimensions, strided and misaligned operands) and where both run in one launch (kPlannedCopyShapes;
// racecheck in scripts/gpu_check.sh).
void check_mma_sync_lean(const std::vector<std::vector<int64_t>>& shapes, bool strided) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() < 80) GTEST_SKIP() << "mma_sync needs sm_80+";
  check_every_setting(
      "mma_sync", 2,
      [](int i, auto&& body) {
        const bool lean = i == 0;
        const kernels::mma_sync::ScopedLeanCopy copy(lean);
        body(lean ? "lean copy" : "general copy", false);
      },
      shapes, strided);
}

TEST(CudaGemm, MmaSyncLeanCopyEverywhere) { check_mma_sync_lean({{300, 270, 300}, {257, 513, 77}, {1, 1, 1}}, true); }

TEST(CudaGemm, MmaSyncLeanCopyInsideAndOnTheEdges) { check_mma_sync_lean(kPlannedCopyShapes, false); }

// wgmma (sm_90a, compute capability 9.0 only) with each tile of wgmma_layout.h: entry 0 is the rung's
// own, the others what gemm_bench --sweep times next to it. All fit an H100's or H200's 227 KiB.
void check_every_wgmma_tile(const std::vector<std::vector<int64_t>>& shapes, bool strided) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma runs on compute capability 9.0 only";
  namespace wl = kernels::cuda::wgmma_layout;
  check_every_setting(
      "wgmma", wl::kTileCount,
      [](int i, auto&& body) {
        const kernels::wgmma::ScopedTile forced(i);
        body("wgmma tile #" + std::to_string(i) + " (128x" + std::to_string(wl::kTiles[i].bn) + "x64, " +
                 std::to_string(wl::kTiles[i].stages) + " stages, " + std::to_string(wl::kTiles[i].in_flight) +
                 " wgmma group in flight)",
             false);
      },
      shapes, strided);
}

TEST(CudaGemm, WgmmaEveryTileTheSweepTimes) {
  // M and N across and not multiples of either tile; K = 300 (4 whole 64-deep steps and a partial one:
  // the rings of 3 and 4 stages wrap) and 77; 1 x 1 x 1; and the training shapes' kind, K = 784.
  check_every_wgmma_tile({{300, 270, 300}, {257, 513, 77}, {1, 1, 1}, {128, 512, 784}}, true);
}

TEST(CudaGemm, WgmmaEveryTileInsideAndOnTheEdges) {
  // Leading dimensions multiples of 8 (every copy inside a matrix is a cp.async), whole blocks and a
  // partial one along M and N, a partial last K step: small enough for compute-sanitizer racecheck
  // (scripts/gpu_check.sh, race_new).
  check_every_wgmma_tile(kPlannedCopyShapes, false);
}

TEST(CudaGemm, WgmmaTuningHookRefusesAnIndexPastTheTable) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma runs on compute capability 9.0 only";
  const kernels::wgmma::ScopedTile past_the_table(kernels::cuda::wgmma_layout::kTileCount);
  expect_tuning_refused("wgmma", "tile " + std::to_string(kernels::cuda::wgmma_layout::kTileCount), "wgmma_layout.h");
}

// wgmma_tma (rung 8: TMA copies, a producer and two consumer warpgroups, compute capability 9.0 only)
// with each tile of wgmma_tma_plan.h. Its operands need 16-byte aligned rows, so the shapes here have
// M, N and K multiples of 8 (dense leading dimensions are then aligned) but not of any tile: every
// edge is the TMA unit's zero fill, including boxes that lie wholly outside a matrix (8 x 8 x 8: the
// second 64-wide box of an M-major A tile, rows 64-127).
void check_every_wgmma_tma_tile(const std::vector<std::vector<int64_t>>& shapes) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma_tma runs on compute capability 9.0 only";
  namespace tp = kernels::cuda::wgmma_tma_plan;
  check_every_setting(
      "wgmma_tma", tp::kTileCount,
      [](int i, auto&& body) {
        const kernels::wgmma_tma::ScopedTile forced(i);
        body("wgmma_tma tile #" + std::to_string(i) + " (128x" + std::to_string(tp::kTiles[i].bn) + "x64, " +
                 std::to_string(tp::kTiles[i].stages) + " stages, " + std::to_string(tp::kTiles[i].in_flight) +
                 " wgmma group in flight)",
             false);
      },
      shapes, false);
}

TEST(CudaGemm, WgmmaTmaEveryTileTheSweepTimes) {
  // Boxes wholly outside (8 x 8 x 8), partial tiles along M, N and K (K = 72: one whole 64-deep step
  // and 8 more), and K = 520 (9 steps: the rings of 4 and 6 stages wrap, so every barrier changes
  // phase more than once).
  check_every_wgmma_tma_tile({{8, 8, 8}, {136, 200, 72}, {200, 136, 520}});
}

TEST(CudaGemm, WgmmaTmaEveryTileInsideAndOnTheEdges) {
  // Whole blocks and partial ones along M and N, a partial last K step: small enough for
  // compute-sanitizer racecheck (scripts/gpu_check.sh, race_second).
  check_every_wgmma_tma_tile(kPlannedCopyShapes);
}

TEST(CudaGemm, WgmmaTmaStridedRowsAndARefusedMatrix) {
  // Leading dimensions wider than the rows but still multiples of 8 (a submatrix of a larger buffer):
  // the tensor map's row stride, not its width, steps through rows. Then a row stride of 8k + 4 halves:
  // refused, and named in the error when asked for by name.
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma_tma runs on compute capability 9.0 only";
  uint64_t seed = test::fresh_seed();
  for (auto [op_a, op_b] : kAllLayouts) {
    GemmArgs g = problem(op_a, op_b, 136, 72, 200, DType::f16, DType::f16);
    g.lda += 8;
    g.ldb += 24;
    g.ldc += 3;
    g.beta = 1.0f;
    EXPECT_TRUE(run_case("wgmma_tma", g, {.bias = true}, seed)) << g.describe();
    GemmArgs h = problem(op_a, op_b, 64, 64, 64, DType::f16, DType::f32);
    h.lda += 4;
    EXPECT_FALSE(run_case("wgmma_tma", h, {}, seed)) << h.describe();
    DeviceBuffer a(static_cast<size_t>(64 * h.lda), DType::f16), b(static_cast<size_t>(64 * 64), DType::f16),
        c(static_cast<size_t>(64 * 64), DType::f32);
    h.device = kCuda;
    h.A = a.get();
    h.B = b.get();
    h.C = c.get();
    try {
      kernels::gemm(h, "wgmma_tma");
      ADD_FAILURE() << "wgmma_tma ran with lda = " << h.lda;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'wgmma_tma'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("16-byte aligned rows"), std::string::npos) << e.what();
    }
  }
}

// wgmma_tma_split_k where its plan splits (asserted for every tile on this GPU): each tile, every
// layout and C dtype, the whole epilogue applied once to the sum of the slices. The slices are ranges
// of 64-deep K tiles of the whole matrices' tensor maps, so a K that is not a multiple of 64 leaves
// the last slice's last tile partly past K (the unit's zero fill): 4104 = 64 x 64 + 8.
void check_wgmma_tma_split(const std::vector<std::vector<int64_t>>& shapes) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma_tma runs on compute capability 9.0 only";
  namespace tp = kernels::cuda::wgmma_tma_plan;
  const int64_t sms = runtime::cuda_sm_count();
  for (const auto& sh : shapes)
    for (const tp::TileConfig& t : tp::kTiles) {
      const int64_t tiles = ((sh[0] + 127) / 128) * ((sh[1] + t.bn - 1) / t.bn);
      ASSERT_GT(kernels::plan_split_k(tiles, sh[2], sms, 64).slices, 1)
          << sh[0] << "x" << sh[1] << "x" << sh[2] << ", 128x" << t.bn << " tiles, on " << sms << " SMs";
    }
  check_every_setting(
      "wgmma_tma_split_k", tp::kTileCount,
      [](int i, auto&& body) {
        const kernels::wgmma_tma::ScopedTile forced(i);
        body("wgmma_tma_split_k tile #" + std::to_string(i) + " (128x" + std::to_string(tp::kTiles[i].bn) + "x64)",
             false);
      },
      shapes, false);
}

TEST(CudaGemm, WgmmaTmaSplitKEveryTileOnLongReductions) {
  // LeNet fc1's forward at batch 128 (2 tiles of 128 x 128, K = 3136), and a K one past a multiple of
  // the tile (the last slice ends inside its last tile).
  check_wgmma_tma_split({{128, 256, 3136}, {40, 136, 4104}});
}

TEST(CudaGemm, WgmmaTmaSplitKSecondPassOverBatchesOfSlices) {
  // One tile, K = 16384: 64 slices of 256, so split_k.cu's second pass runs both its loops (batches of
  // kSumBatch and the remainder). Small enough for compute-sanitizer (scripts/gpu_check.sh).
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma_tma runs on compute capability 9.0 only";
  const kernels::SplitKPlan plan = kernels::plan_split_k(1, 16384, runtime::cuda_sm_count(), 64);
  ASSERT_GT(plan.slices, 2 * kernels::kSumBatch);
  ASSERT_NE((plan.slices - 1) % kernels::kSumBatch, 0) << "the remainder loop must run too";
  check_wgmma_tma_split({{8, 8, 16384}});
}

TEST(CudaGemm, WgmmaRungsEpilogueInRunsOfEightAndValueByValue) {
  // The Hopper rungs store C 8 columns at a time where C's row stride is a multiple of 8 (and C and the
  // bias are aligned), value by value otherwise (wgmma_ops.cuh, store_staged). N = 100 with ldc = 104
  // leaves the last run of every row cut by C's last column (100 = 12 x 8 + 4); ldc = 103 takes the
  // other path. Both C dtypes and both bias dtypes, beta and ReLU; for the split-K variant a K long
  // enough to split, whose partial sums are stored the same way (ldc = N = 100: value by value).
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "the wgmma rungs run on compute capability 9.0 only";
  uint64_t seed = test::fresh_seed();
  const auto round8 = [](int64_t x) { return (x + 7) / 8 * 8; };
  for (const std::string variant : {"wgmma", "wgmma_tma", "wgmma_tma_split_k"}) {
    const int64_t K = variant == "wgmma_tma_split_k" ? 4104 : 200;
    for (auto [op_a, op_b] : kAllLayouts) {
      for (DType c : {DType::f16, DType::f32}) {
        for (DType bias : {DType::f16, DType::f32}) {
          for (int64_t ldc : {104, 103}) {
            GemmArgs g = problem(op_a, op_b, 136, 100, K, DType::f16, c);
            g.lda = round8(g.lda);  // rows the TMA unit can copy
            g.ldb = round8(g.ldb);
            g.ldc = ldc;
            g.alpha = 1.5f;
            g.beta = 0.5f;
            g.relu = true;
            g.bias_type = bias;
            EXPECT_TRUE(run_case(variant, g, {.bias = true}, seed)) << variant << " " << g.describe();
          }
        }
      }
    }
  }
}

TEST(CudaGemm, WgmmaTmaTuningHookRefusesAnIndexPastTheTable) {
  HL_REQUIRE_CUDA();
  if (runtime::cuda_compute_capability() != 90) GTEST_SKIP() << "wgmma_tma runs on compute capability 9.0 only";
  const kernels::wgmma_tma::ScopedTile past_the_table(kernels::cuda::wgmma_tma_plan::kTileCount);
  expect_tuning_refused("wgmma_tma", "tile " + std::to_string(kernels::cuda::wgmma_tma_plan::kTileCount),
                        "wgmma_tma_plan.h");
}

TEST(CudaGemm, WmmaSmemBatchedCopyInsideAndOnTheEdges) {
  // The batched copy where it runs, next to the general copy in the same launch (kPlannedCopyShapes).
  check_every_k_step(kPlannedCopyShapes, false, true);
}

// The tuning hooks are off unless the benchmark sets them, and kOwnTile is the tile the rung uses for
// big problems (no GPU needed).
TEST(CudaGemmTiles, HookOffByDefaultAndEveryTileWellFormed) {
  namespace tiles = kernels::wmma_pipelined;
  EXPECT_EQ(tiles::big_tile_for_tuning().load(), -1);
  EXPECT_EQ(kernels::wmma_smem::k_step_for_tuning().load(), 0);         // wmma_smem's K step: its own
  EXPECT_EQ(kernels::wmma_smem::batched_copy_for_tuning().load(), -1);  // and its own copy
  EXPECT_EQ(kernels::mma_sync::lean_copy_for_tuning().load(), -1);      // mma_sync's own copy
  const auto& steps = kernels::wmma_smem::kCandidateKSteps;
  EXPECT_NE(std::find(std::begin(steps), std::end(steps), kernels::wmma_smem::kKStep), std::end(steps));
  // The rung's own choices since the H100 run of 2026-11-27 (the headers say why).
  EXPECT_EQ(kernels::wmma_smem::kKStep, 64);
  EXPECT_TRUE(kernels::wmma_smem::kBatchedCopy);
  EXPECT_TRUE(kernels::mma_sync::kLeanCopy);
  ASSERT_GE(tiles::kBigTileCount, 2);
  ASSERT_LT(tiles::kOwnTile, tiles::kBigTileCount);
  EXPECT_EQ(tiles::describe(tiles::kBigTiles[0]), "128x128x32, 2x4 warps of 64x32, 4 stages");
  const tiles::Tile t0 = tiles::kBigTiles[tiles::kOwnTile];
  EXPECT_EQ(tiles::describe(t0), "128x128x32, 2x4 warps of 64x32, 4 stages, lean copy");
  for (int i = 0; i < tiles::kBigTileCount; ++i) {
    const tiles::Tile t = tiles::kBigTiles[i];
    SCOPED_TRACE(tiles::describe(t));
    EXPECT_EQ(t.bm % (16 * t.warps_m), 0);  // warp tiles of whole 16 x 16 fragments
    EXPECT_EQ(t.bn % (16 * t.warps_n), 0);
    EXPECT_EQ(t.bk % 16, 0);
    EXPECT_GE(t.stages, 2);                     // a ring: one buffer filling while one is read
    EXPECT_LE(32 * t.warps_m * t.warps_n, 1024);  // one block
    // Clusters of 1 or 2 blocks along each of M and N (wmma_pipelined.cu's Config asserts it at compile time,
    // in a CUDA build only); 1 x 1 is no cluster, and an unclustered tile says 1 x 1, not 0.
    EXPECT_TRUE(t.cluster_m == 1 || t.cluster_m == 2) << t.cluster_m;
    EXPECT_TRUE(t.cluster_n == 1 || t.cluster_n == 2) << t.cluster_n;
    if (t.clustered()) {
      EXPECT_GE(t.stages, 3);  // cluster_share.h's step 1 keeps a stage for the send
    }
    if (t.ahead) {  // wmma_pipelined.cu's point 5 (its static_asserts say the same at compile time)
      EXPECT_FALSE(t.clustered()) << "the cluster kernel has no fragments-ahead form";
      EXPECT_EQ(t.bk / 16 % 2, 0) << "each K tile starts on fragment set 0";
      EXPECT_GE(t.stages, 3) << "with fewer stages no copy is in flight while a K tile is computed";
    }
    for (int j = 0; j < i; ++j) {                 // no tile timed twice
      const tiles::Tile u = tiles::kBigTiles[j];
      EXPECT_FALSE(alike_but_order(u, t) && u.ahead == t.ahead);
    }
  }
}

// ---- 3. the registry: what exists, what is picked, what is refused (no GPU needed) -------------------

const kernels::Variant<GemmArgs>* cuda_variant(const std::string& name) {
  return GemmRegistry::instance().find(name, kCuda);
}

GemmArgs dummy_problem(DType ab) {
  // Never run: select() and unsupported() only look at the arguments, so any non-null pointers do
  // (16-byte aligned ones: wgmma_tma refuses others).
  alignas(16) static double storage[4];
  GemmArgs g = problem(Op::N, Op::N, 256, 256, 256, ab, DType::f32);
  g.device = kCuda;
  g.A = g.B = storage;
  g.C = storage;
  return g;
}

TEST(CudaGemmRegistry, ListsEveryRungAndCublas) {
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  const std::vector<std::string> expected = {"wgmma_tma_split_k", "wgmma_tma",  "wgmma",
                                             "wmma_pipelined_split_k", "wmma_pipelined", "mma_sync",
                                             "wmma_smem",         "wmma",       "smem_tiled_split_k",
                                             "smem_tiled",        "naive",      "cublas"};
  std::vector<std::string> names = cuda_variants();
  // Highest priority first: the ladder top to bottom, then the cuBLAS reference point.
  std::vector<std::string> ours;
  for (const auto& n : names)
    if (std::find(expected.begin(), expected.end(), n) != expected.end()) ours.push_back(n);
  EXPECT_EQ(ours, expected);
}

TEST(CudaGemmRegistry, RungsNotYetRunOnAGpuAreOptIn) {
  // A rung written in a session without a GPU lands opt-in (registry.h): it runs when named, never by
  // default, until its tests, the sanitizers and gemm_bench have run on a GPU. Every GEMM rung has
  // (the split-K rungs and mma_sync on an H200, 2026-11-26; wgmma, wgmma_tma and wgmma_tma_split_k on
  // an H100, 2026-11-27). wgmma stays opt-in by choice: it does not split K, so by default it would take
  // the long reductions wgmma_tma declines (LeNet conv1's weight gradient, 32 x 25 x 100352: 2.11 ms
  // against wmma_pipelined_split_k's 0.032 on the H100). A new rung means adding it here, a promotion
  // taking it out.
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  std::vector<std::string> opt_in;
  for (const auto& v : GemmRegistry::instance().all())
    if (v.device == kCuda && v.opt_in) opt_in.push_back(v.name);
  std::sort(opt_in.begin(), opt_in.end());
  EXPECT_EQ(opt_in, (std::vector<std::string>{"wgmma"}));
}

TEST(CudaGemmRegistry, DefaultIsTheFastestRungThatSupportsTheArguments) {
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  if (std::getenv("HALFLING_GEMM") != nullptr || !GemmRegistry::instance().default_name().empty())
    GTEST_SKIP() << "a GEMM variant is pinned (HALFLING_GEMM or --gemm): the automatic choice is not in use";
  // The split-K rungs: the same kernels as wgmma_tma, wmma_pipelined and smem_tiled wherever they do not
  // split. f16 inputs: wgmma_tma_split_k on Hopper (and without a GPU, where nothing runs); on other GPUs,
  // and for rows the TMA unit cannot copy, the WMMA rung below it (wgmma is opt-in).
  const int cc = runtime::cuda_compute_capability();
  EXPECT_EQ(GemmRegistry::instance().select(dummy_problem(DType::f16)).name,
            cc == 0 || cc == 90 ? "wgmma_tma_split_k" : "wmma_pipelined_split_k");
  GemmArgs unaligned = dummy_problem(DType::f16);
  unaligned.lda = 260;  // not a multiple of 8 halves
  EXPECT_EQ(GemmRegistry::instance().select(unaligned).name, "wmma_pipelined_split_k");
  // f32 inputs: the WMMA rungs (and mma_sync) decline, the registry falls back to the fastest FP32 rung.
  EXPECT_EQ(GemmRegistry::instance().select(dummy_problem(DType::f32)).name, "smem_tiled_split_k");
}

TEST(CudaGemmRegistry, WmmaRungsRefuseF32InputsWithAReason) {
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  for (const char* name : {"wmma", "wmma_smem", "wmma_pipelined", "wmma_pipelined_split_k", "mma_sync"}) {
    const auto* v = cuda_variant(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->unsupported(dummy_problem(DType::f16)), nullptr) << name;
    const char* why = v->unsupported(dummy_problem(DType::f32));
    ASSERT_NE(why, nullptr) << name;
    EXPECT_NE(std::string(why).find("f16 inputs only"), std::string::npos) << why;
    // Asked for by name, the refusal is an hl::Error naming the variant, the problem and the reason.
    try {
      kernels::gemm(dummy_problem(DType::f32), name);
      ADD_FAILURE() << name << " accepted f32 inputs";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("variant '") + name + "' cannot run gemm NN M=256"), std::string::npos) << msg;
      EXPECT_NE(msg.find("f16 inputs only"), std::string::npos) << msg;
    }
  }
}

TEST(CudaGemmRegistry, WgmmaRungsTakeF16OnHopperAndRefuseWhatTheyCannotRun) {
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  for (const char* name : {"wgmma", "wgmma_tma", "wgmma_tma_split_k"}) {
    const auto* v = cuda_variant(name);
    ASSERT_NE(v, nullptr) << name;
    const char* why = v->unsupported(dummy_problem(DType::f32));
    ASSERT_NE(why, nullptr) << name;
    EXPECT_NE(std::string(why).find("f16 inputs only"), std::string::npos) << why;
    // f16 inputs: taken on compute capability 9.0 (and without a GPU, where nothing runs), refused with
    // the reason on any other GPU, which cannot load sm_90a code.
    const int cc = runtime::cuda_compute_capability();
    why = v->unsupported(dummy_problem(DType::f16));
    if (cc == 0 || cc == 90) {
      EXPECT_EQ(why, nullptr) << name << ": " << why;
    } else {
      ASSERT_NE(why, nullptr) << name;
      EXPECT_NE(std::string(why).find("compute capability 9.0"), std::string::npos) << why;
    }
  }
}

TEST(CudaGemmRegistry, WgmmaTmaRefusesRowsTheTmaUnitCannotCopy) {
  // The TMA unit needs 16-byte aligned rows: a base address off 16 bytes, or a row stride that is not a
  // multiple of 8 halves, in either input is refused with the reason (the automatic choice then takes
  // a rung below); so are sizes past the 32-bit box coordinates. Rung 7 copies such rows itself.
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  const int cc = runtime::cuda_compute_capability();
  if (cc != 0 && cc != 90) GTEST_SKIP() << "wgmma_tma refuses this GPU before looking at the rows";
  for (const char* name : {"wgmma_tma", "wgmma_tma_split_k"}) {
    SCOPED_TRACE(name);
    const auto* v = cuda_variant(name);
    ASSERT_NE(v, nullptr);
    const auto refusal = [&](const GemmArgs& g) { return std::string(v->unsupported(g) ? v->unsupported(g) : ""); };
    GemmArgs g = dummy_problem(DType::f16);
    EXPECT_EQ(refusal(g), "");
    g.lda = 260;
    EXPECT_NE(refusal(g).find("16-byte aligned rows"), std::string::npos) << refusal(g);
    g = dummy_problem(DType::f16);
    g.ldb = 257;
    EXPECT_NE(refusal(g).find("16-byte aligned rows"), std::string::npos) << refusal(g);
    g = dummy_problem(DType::f16);
    g.A = static_cast<const char*>(g.A) + 8;
    EXPECT_NE(refusal(g).find("16-byte aligned rows"), std::string::npos) << refusal(g);
    g = dummy_problem(DType::f16);
    g.K = int64_t{1} << 31;
    g.lda = g.K;
    EXPECT_NE(refusal(g).find("2^31 - 1"), std::string::npos) << refusal(g);
  }
  // Rung 7 takes such rows (its copies check every row and fall back to scalar loads).
  GemmArgs g = dummy_problem(DType::f16);
  g.lda = 260;
  EXPECT_EQ(cuda_variant("wgmma")->unsupported(g), nullptr);
}

TEST(CudaGemmRegistry, EveryRungRefusesF64AndIntegerOutputs) {
  if (cuda_variant("naive") == nullptr) GTEST_SKIP() << "halfling was built without CUDA: no CUDA GEMM variants";
  for (const std::string& name : cuda_variants()) {
    const auto* v = cuda_variant(name);
    ASSERT_NE(v->unsupported, nullptr) << name;
    GemmArgs g = dummy_problem(DType::f64);
    g.c_type = DType::f64;
    EXPECT_NE(v->unsupported(g), nullptr) << name << ": f64 GEMMs are CPU-only";
    g = dummy_problem(DType::f16);
    g.c_type = DType::i32;
    EXPECT_NE(v->unsupported(g), nullptr) << name << ": an i32 output";
  }
}

}  // namespace
}  // namespace hl
