// Every CPU GEMM variant in the registry against a float64 reference computed here, from the same
// (already rounded) inputs. A variant added to the registry is tested here without a line of change.
//
// What each check guards against:
//   - fresh random data on every run (the seed is printed; HALFLING_TEST_SEED=<seed> replays it);
//   - C poisoned with NaN when beta == 0: a kernel that reads C when it must not shows up as NaN;
//   - padding of non-dense A, B poisoned with NaN: a kernel that reads past a row shows up as NaN;
//   - padding of non-dense C checked byte for byte after the run: no write past a row;
//   - every element checked, two ways: the relative error of the whole matrix (DESIGN.md §6) and a
//     per-element bound from floating-point error analysis (|error| <= (K + 8) * u * sum |terms|),
//     which cannot fail by bad luck and catches a single wrong element the norm would average away.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/error.h"
#include "kernels/gemm.h"
#include "kernels/half.h"
#include "tests/kernels/typed_buffer.h"
#include "tests/test_util.h"

namespace hl::kernels {
namespace {

using test::TypedBuffer;

// ---- host buffers of any dtype ---------------------------------------------------------------------

// A stored (rows x ld) matrix whose first `cols` columns hold values and whose padding holds NaN.
TypedBuffer make_matrix(int64_t rows, int64_t cols, int64_t ld, DType t, const std::vector<double>& values) {
  TypedBuffer m(t, static_cast<size_t>(rows * ld));
  m.fill_nan();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      m.set(static_cast<size_t>(r * ld + c), values[static_cast<size_t>(r * cols + c)]);
  return m;
}

// Unit roundoff of the accumulation: 2^-24 for f32 (f16 and f32 inputs), 2^-53 for f64.
double unit_roundoff(DType ab_type) { return ab_type == DType::f64 ? 0x1p-53 : 0x1p-24; }

std::string layout_name(Op a, Op b) { return std::string(a == Op::N ? "N" : "T") + (b == Op::N ? "N" : "T"); }

// ---- one problem, its float64 reference, and the checks -----------------------------------------

struct Shape {
  int64_t M, N, K;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra row length beyond the dense minimum
};

struct EpilogueCase {
  const char* name;
  float alpha, beta;
  bool bias, relu;
};

// The epilogues every shape runs through. alpha and beta are not powers of two, so their products
// really round; beta == 0 cases poison C with NaN.
constexpr EpilogueCase kEpilogues[] = {
    {"plain", 1.0f, 0.0f, false, false},
    {"alpha_beta", -1.3f, 0.6f, false, false},
    {"alpha_bias_relu", 0.7f, 0.0f, true, true},
};

class GemmProblem {
 public:
  GemmProblem(Op op_a, Op op_b, DType ab_type, Shape s) : op_a_(op_a), op_b_(op_b), ab_type_(ab_type), s_(s) {
    const uint64_t seed = test::fresh_seed();
    seed_ = seed;
    // op(A) as row-major M x K and op(B) as row-major K x N, already rounded to ab_type.
    a_ = test::random_values(static_cast<size_t>(s.M * s.K), seed, -1.0, 1.0, ab_type);
    b_ = test::random_values(static_cast<size_t>(s.K * s.N), seed + 1, -1.0, 1.0, ab_type);

    // The product and the sum of magnitudes (for the per-element error bound), in float64.
    prod_.assign(static_cast<size_t>(s.M * s.N), 0.0);
    mag_.assign(static_cast<size_t>(s.M * s.N), 0.0);
    for (int64_t i = 0; i < s.M; ++i) {
      for (int64_t k = 0; k < s.K; ++k) {
        const double aik = a_[static_cast<size_t>(i * s.K + k)];
        for (int64_t j = 0; j < s.N; ++j) {
          const double t = aik * b_[static_cast<size_t>(k * s.N + j)];
          prod_[static_cast<size_t>(i * s.N + j)] += t;
          mag_[static_cast<size_t>(i * s.N + j)] += std::fabs(t);
        }
      }
    }

    lda_ = (op_a == Op::N ? s.K : s.M) + s.pad_a;
    ldb_ = (op_b == Op::N ? s.N : s.K) + s.pad_b;
    ldc_ = s.N + s.pad_c;
    a_store_.emplace(store(op_a, s.M, s.K, lda_, ab_type, a_));
    b_store_.emplace(store(op_b, s.K, s.N, ldb_, ab_type, b_));
  }

  // Run `variant` with output type c_type and epilogue e; check every element. Returns the relative error.
  double run_and_check(const std::string& variant, DType c_type, const EpilogueCase& e, DType bias_type) {
    const int64_t M = s_.M, N = s_.N;
    SCOPED_TRACE(::testing::Message() << variant << " " << layout_name(op_a_, op_b_) << " M=" << M << " N=" << N
                                      << " K=" << s_.K << " " << dtype_name(ab_type_) << "->" << dtype_name(c_type)
                                      << " epilogue=" << e.name << " seed=" << seed_);

    TypedBuffer C(c_type, static_cast<size_t>(M * ldc_));
    C.fill_nan();  // beta == 0: C must not be read; the padding must not be written
    std::vector<double> c_old;
    if (e.beta != 0.0f) {
      c_old = test::random_values(static_cast<size_t>(M * N), seed_ + 2, -1.0, 1.0, c_type);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C.set(static_cast<size_t>(i * ldc_ + j), c_old[static_cast<size_t>(i * N + j)]);
    }
    std::vector<double> bias_values;
    std::optional<TypedBuffer> bias;
    if (e.bias) {
      bias_values = test::random_values(static_cast<size_t>(N), seed_ + 3, -1.0, 1.0, bias_type);
      bias.emplace(bias_type, static_cast<size_t>(N));
      for (int64_t j = 0; j < N; ++j) bias->set(static_cast<size_t>(j), bias_values[static_cast<size_t>(j)]);
    }
    const std::vector<unsigned char> c_before = C.bytes();

    GemmArgs g;
    g.op_a = op_a_;
    g.op_b = op_b_;
    g.M = M;
    g.N = N;
    g.K = s_.K;
    g.A = a_store_->data();
    g.lda = lda_;
    g.B = b_store_->data();
    g.ldb = ldb_;
    g.ab_type = ab_type_;
    g.C = C.data();
    g.ldc = ldc_;
    g.c_type = c_type;
    g.alpha = e.alpha;
    g.beta = e.beta;
    g.bias = bias ? bias->data() : nullptr;
    g.bias_type = bias_type;
    g.relu = e.relu;
    gemm(g, variant);

    // Per element: |out - ref| <= (K + 8) u (|alpha| sum|a b| + |beta c| + |bias|)  (accumulation and
    // the few epilogue roundings; relu cannot increase an error), plus half an f16 ulp for an f16 store.
    const double u = unit_roundoff(ab_type_);
    const double gamma = static_cast<double>(s_.K + 8) * u;
    std::vector<double> out(static_cast<size_t>(M * N)), ref(static_cast<size_t>(M * N)),
        scales(static_cast<size_t>(M * N));
    int64_t nan_count = 0, over_bound = 0;
    std::string first_problem;
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const size_t ij = static_cast<size_t>(i * N + j);
        double r = static_cast<double>(e.alpha) * prod_[ij];
        double scale = std::fabs(static_cast<double>(e.alpha)) * mag_[ij];
        if (e.beta != 0.0f) {
          r += static_cast<double>(e.beta) * c_old[ij];
          scale += std::fabs(static_cast<double>(e.beta) * c_old[ij]);
        }
        if (e.bias) {
          r += bias_values[static_cast<size_t>(j)];
          scale += std::fabs(bias_values[static_cast<size_t>(j)]);
        }
        if (e.relu && r < 0.0) r = 0.0;
        double bound = gamma * scale;
        if (c_type == DType::f16) bound += 0x1p-11 * (std::fabs(r) + bound) + 0x1p-25;

        const double o = C.get(static_cast<size_t>(i * ldc_ + j));
        out[ij] = o;
        ref[ij] = r;
        // Below FP16's smallest normal (2^-14) an f16 store rounds by an absolute 2^-25, not a
        // relative 2^-11: measure such elements against 2^-14, as the per-element bound does with 2^-25.
        scales[ij] = c_type == DType::f16 ? std::max(scale, 0x1p-14) : scale;
        if (std::isnan(o)) {
          if (nan_count++ == 0) first_problem = "NaN at (" + std::to_string(i) + ", " + std::to_string(j) + ")";
        } else if (!(std::fabs(o - r) <= bound)) {
          if (over_bound++ == 0 && first_problem.empty())
            first_problem = "(" + std::to_string(i) + ", " + std::to_string(j) + "): got " + std::to_string(o) +
                            ", expected " + std::to_string(r) + " +- " + std::to_string(bound);
        }
      }
    }
    EXPECT_EQ(nan_count, 0) << first_problem;
    EXPECT_EQ(over_bound, 0) << first_problem;

    // The padding of C (columns N..ldc-1) is untouched.
    int64_t padding_written = 0;
    const size_t esize = dtype_size(c_type);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = N; j < ldc_; ++j) {
        const size_t at = static_cast<size_t>(i * ldc_ + j) * esize;
        padding_written += std::memcmp(C.bytes().data() + at, c_before.data() + at, esize) != 0;
      }
    EXPECT_EQ(padding_written, 0) << "elements written past N in the padding of C";
    // The norm-wise error, relative to the size of the terms that were summed (|alpha| sum|ab| +
    // |beta c| + |bias|), not to the result: when they nearly cancel (a 1x1x1 case with a bias,
    // say) a result-relative error is unbounded although every rounding was as small as it can be.
    // Since |ref| <= scale element by element, this is never larger than ||out - ref|| / ||ref||.
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < out.size(); ++k) {
      num += (out[k] - ref[k]) * (out[k] - ref[k]);
      den += scales[k] * scales[k];
    }
    return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
  }

 private:
  // op(X) (rows x cols, row-major values) stored as the layout asks: op == T stores the transpose.
  static TypedBuffer store(Op op, int64_t rows, int64_t cols, int64_t ld, DType t, const std::vector<double>& v) {
    if (op == Op::N) return make_matrix(rows, cols, ld, t, v);
    std::vector<double> transposed(v.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        transposed[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
    return make_matrix(cols, rows, ld, t, transposed);
  }

  Op op_a_, op_b_;
  DType ab_type_;
  Shape s_;
  uint64_t seed_ = 0;
  std::vector<double> a_, b_, prod_, mag_;
  int64_t lda_ = 0, ldb_ = 0, ldc_ = 0;
  std::optional<TypedBuffer> a_store_, b_store_;
};

// A variant pinned to an instruction set this CPU lacks (e.g. "blocked_avx512") cannot run here: the
// test skips with the variant's own reason rather than pass vacuously.
const char* unsupported_here(const std::string& variant) {
  const auto* v = GemmRegistry::instance().find(variant, DeviceType::cpu);
  if (v == nullptr || v->unsupported == nullptr) return nullptr;
  GemmArgs g;
  g.M = g.N = g.K = 1;
  set_dense_ld(g);
  return v->unsupported(g);
}

#define HL_SKIP_IF_UNSUPPORTED(variant)                                                        \
  do {                                                                                         \
    if (const char* why = unsupported_here(variant)) GTEST_SKIP() << (variant) << ": " << why; \
  } while (0)

// ---- the sweep: variant x layout x input type, each over every shape, output type and epilogue ----

struct SweepParam {
  std::string variant;
  Op op_a, op_b;
  DType ab_type;
};

std::vector<SweepParam> cpu_sweep() {
  std::vector<SweepParam> out;
  for (const std::string& v : GemmRegistry::instance().names(DeviceType::cpu))
    for (const auto& [a, b] : {std::pair{Op::N, Op::N}, {Op::N, Op::T}, {Op::T, Op::N}})
      for (DType t : {DType::f32, DType::f16}) out.push_back({v, a, b, t});
  return out;
}

std::string sweep_name(const ::testing::TestParamInfo<SweepParam>& info) {
  std::string name =
      info.param.variant + "_" + layout_name(info.param.op_a, info.param.op_b) + "_" + dtype_name(info.param.ab_type);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';  // gtest names: letters, digits, _
  return name;
}

class GemmCpuSweep : public ::testing::TestWithParam<SweepParam> {};

// Edge shapes (1x1x1; sizes that are not multiples of any tile), the MLP-512 training shapes, the
// 10-class output layer, and a non-dense case (lda, ldb, ldc larger than the rows they hold).
const Shape kShapes[] = {
    {1, 1, 1}, {7, 13, 5}, {17, 33, 65}, {128, 784, 512}, {128, 512, 10}, {64, 96, 200, 3, 5, 7},
};

TEST_P(GemmCpuSweep, MatchesFloat64Reference) {
  const SweepParam& p = GetParam();
  HL_SKIP_IF_UNSUPPORTED(p.variant);
  int shape_index = 0;
  for (const Shape& s : kShapes) {
    GemmProblem problem(p.op_a, p.op_b, p.ab_type, s);
    for (DType c_type : {DType::f32, DType::f16}) {
      // f32 accumulation of K terms: ~sqrt(K) * 2^-24 relative in practice, far below 1e-5.
      // An f16 output adds at most half an ulp, 2^-11 relative, per element.
      const double tolerance = c_type == DType::f16 ? 0x1p-11 + 1e-5 : 1e-5;
      for (const EpilogueCase& e : kEpilogues) {
        // Rotate the bias dtype over the shapes so f16, f32 and f64 biases all get exercised.
        const DType bias_type = std::array{DType::f32, DType::f16, DType::f64}[shape_index % 3];
        const double err = problem.run_and_check(p.variant, c_type, e, bias_type);
        EXPECT_LE(err, tolerance) << p.variant << " " << layout_name(p.op_a, p.op_b) << " " << s.M << "x" << s.N << "x"
                                  << s.K << " " << dtype_name(p.ab_type) << "->" << dtype_name(c_type) << " " << e.name;
      }
    }
    ++shape_index;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCpuVariants, GemmCpuSweep, ::testing::ValuesIn(cpu_sweep()), sweep_name);

// ---- f64 inputs (gradient checks) ---------------------------------------------------------------------

class GemmCpuVariant : public ::testing::TestWithParam<std::string> {};

std::string variant_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

TEST_P(GemmCpuVariant, Float64InputsAccumulateInFloat64) {
  HL_SKIP_IF_UNSUPPORTED(GetParam());
  // All four layouts here (TT too: A and B are packed independently, so the sweep's three layouts
  // already cover each packing path; this closes the set cheaply).
  for (const auto& [a, b] : {std::pair{Op::N, Op::N}, {Op::N, Op::T}, {Op::T, Op::N}, {Op::T, Op::T}}) {
    for (const Shape& s : {Shape{17, 33, 65}, Shape{64, 96, 200, 3, 5, 7}}) {
      GemmProblem problem(a, b, DType::f64, s);
      for (const EpilogueCase& e : kEpilogues) {
        // f64 accumulation: ~sqrt(K) * 2^-53 ~ 1e-15 relative; the float64 reference rounds the same way.
        EXPECT_LE(problem.run_and_check(GetParam(), DType::f64, e, DType::f64), 1e-14);
      }
    }
  }
}

// C = A * B on dense row-major buffers (no transposes); f32 unless the caller sets the dtypes.
GemmArgs dense_problem(int64_t M, int64_t N, int64_t K, const void* a, const void* b, void* c) {
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  set_dense_ld(g);
  g.A = a;
  g.B = b;
  g.C = c;
  return g;
}

// ---- accumulation really is f32 (paper §3.3) ---------------------------------------------------------

// Summing 4096 ones: an f16 accumulator stops at 2048 (2048 + 1 rounds back to 2048, the spacing of
// halves there is 2); an f32 accumulator reaches 4096 exactly. Both output types hold 4096 exactly.
TEST_P(GemmCpuVariant, Float16OnesSumToExactly4096) {
  HL_SKIP_IF_UNSUPPORTED(GetParam());
  constexpr int64_t M = 3, N = 19, K = 4096;
  std::vector<half> a(M * K, half(1.0f)), b(K * N, half(1.0f));
  for (DType c_type : {DType::f32, DType::f16}) {
    TypedBuffer c(c_type, M * N);
    c.fill_nan();
    GemmArgs g = dense_problem(M, N, K, a.data(), b.data(), c.data());
    g.ab_type = DType::f16;
    g.c_type = c_type;
    gemm(g, GetParam());
    for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c.get(i), 4096.0) << dtype_name(c_type) << " element " << i;
  }
}

// A K so deep that not even one task's columns of packed B fit the packing budget (blocked packs
// at least that many anyway), with N wider than one task, so that B is packed in several passes.
// Small integers keep every sum exact in f32: the result must equal the integer one everywhere.
TEST_P(GemmCpuVariant, DeepKBeyondThePackingBudgetCoversEveryColumn) {
  HL_SKIP_IF_UNSUPPORTED(GetParam());
  constexpr int64_t M = 2, N = 300, K = 30011;
  std::vector<float> a(M * K), b(K * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[static_cast<size_t>(m * K + k)] = static_cast<float>((k + m) % 3 - 1);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) b[static_cast<size_t>(k * N + n)] = static_cast<float>((k * 7 + n) % 5 - 2);
  std::vector<float> c(M * N, std::numeric_limits<float>::quiet_NaN());
  gemm(dense_problem(M, N, K, a.data(), b.data(), c.data()), GetParam());
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      int64_t want = 0;
      for (int64_t k = 0; k < K; ++k) {
        const auto ai = static_cast<int64_t>(a[static_cast<size_t>(m * K + k)]);
        want += ai * static_cast<int64_t>(b[static_cast<size_t>(k * N + n)]);
      }
      ASSERT_EQ(c[static_cast<size_t>(m * N + n)], static_cast<float>(want)) << "C(" << m << ", " << n << ")";
    }
  }
}

// Every one of the 65536 f16 bit patterns (subnormals, infinities, NaNs included), times 1, stored as
// f32: each must come out as exactly hl::half's own conversion (up to the sign of zero). A variant that converts f16
// its own way (the packing of "blocked" does) is checked here on every input it can ever see, through A and B.
TEST_P(GemmCpuVariant, EveryFloat16BitPatternIsWidenedExactly) {
  HL_SKIP_IF_UNSUPPORTED(GetParam());
  std::vector<half> patterns(65536);
  for (uint32_t i = 0; i < 65536; ++i) patterns[i] = half::from_bits(static_cast<uint16_t>(i));
  const half one(1.0f);
  for (bool patterns_in_a : {false, true}) {
    std::vector<float> c(65536, std::numeric_limits<float>::quiet_NaN());
    GemmArgs g;
    g.M = patterns_in_a ? 65536 : 1;  // A: 65536 x 1 column of patterns, B: 1 x 1
    g.N = patterns_in_a ? 1 : 65536;  // A: 1 x 1, B: 1 x 65536 row of patterns
    g.K = 1;
    set_dense_ld(g);
    g.A = patterns_in_a ? patterns.data() : &one;
    g.B = patterns_in_a ? &one : patterns.data();
    g.ab_type = DType::f16;
    g.C = c.data();
    gemm(g, GetParam());
    int64_t wrong = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const float want = half_bits_to_float(static_cast<uint16_t>(i));
      // == rather than bits: -0 comes out as +0, because a sum starts from +0 and +0 + -0 = +0.
      const bool same = std::isnan(want) ? std::isnan(c[i]) : c[i] == want;
      if (!same && wrong++ < 5)
        ADD_FAILURE() << "f16 bits 0x" << std::hex << i << std::dec << " became " << c[i] << ", want " << want
                      << (patterns_in_a ? " (through A)" : " (through B)");
    }
    EXPECT_EQ(wrong, 0);
  }
}

// Overflow must stay visible: dynamic loss scaling (paper §3.2) skips a step when it finds inf/NaN,
// so a NaN or inf entering a GEMM must come out of it, through the bias and the relu too.
TEST_P(GemmCpuVariant, NonFiniteInputsPropagateThroughTheEpilogue) {
  HL_SKIP_IF_UNSUPPORTED(GetParam());
  constexpr int64_t M = 4, N = 5, K = 6;
  // C poisoned with NaN: rows 2 and 3 must be written as 0, which a zero-filled C would hold already.
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), bias(N, -100.0f), c(M * N, std::numeric_limits<float>::quiet_NaN());
  a[0 * K + 2] = std::numeric_limits<float>::quiet_NaN();  // row 0 of C: NaN
  a[1 * K + 3] = std::numeric_limits<float>::infinity();   // row 1: +inf (b > 0)
  a[2 * K + 4] = -std::numeric_limits<float>::infinity();  // row 2: -inf, which relu clamps to 0
  GemmArgs g = dense_problem(M, N, K, a.data(), b.data(), c.data());
  g.bias = bias.data();
  g.relu = true;
  gemm(g, GetParam());
  for (int64_t j = 0; j < N; ++j) {
    EXPECT_TRUE(std::isnan(c[0 * N + j])) << "relu(NaN) must stay NaN, got " << c[0 * N + j];
    EXPECT_EQ(c[1 * N + j], std::numeric_limits<float>::infinity());
    EXPECT_EQ(c[2 * N + j], 0.0f);
    EXPECT_EQ(c[3 * N + j], 0.0f);  // 6 * 0.5 * 0.25 - 100 < 0
  }
}

// ReLU's rule is the same everywhere (the elementwise relu, the conv epilogues, the CUDA GEMMs):
// x > 0 or NaN keeps x, anything else gives +0. So -0 becomes +0, bit for bit: alpha = -1 times an
// all-zero product is -0 before the ReLU. (Without the ReLU it stays -0.)
TEST_P(GemmCpuVariant, ReluTurnsNegativeZeroIntoPositiveZero) {
  HL_SKIP_IF_UNSUPPORTED(GetParam());
  constexpr int64_t M = 3, N = 20, K = 7;
  std::vector<float> a(M * K, 0.0f), b(K * N, 1.0f), c(M * N);
  GemmArgs g = dense_problem(M, N, K, a.data(), b.data(), c.data());
  g.alpha = -1.0f;
  for (bool relu : {false, true}) {
    g.relu = relu;
    std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
    gemm(g, GetParam());
    for (int64_t i = 0; i < M * N; ++i)
      ASSERT_EQ(hl::float_bits(c[i]), relu ? 0x00000000u : 0x80000000u) << (relu ? "relu" : "no relu") << " at " << i;
  }
}

std::vector<std::string> cpu_variants() { return GemmRegistry::instance().names(DeviceType::cpu); }

INSTANTIATE_TEST_SUITE_P(AllCpuVariants, GemmCpuVariant, ::testing::ValuesIn(cpu_variants()), variant_name);

// ---- the registry and argument checking ---------------------------------------------------------------

// The ladder's order (tutorial 04 lists it): "blocked" picks among the ISA variants, and "reference", the
// definition, comes last, below the portable blocked rung, so it is never the automatic choice.
TEST(GemmCpuRegistry, VariantsAreListedInPriorityOrderWithTheReferenceLast) {
  const std::vector<std::string> ladder = {"blocked", "blocked_avx512", "blocked_avx2", "blocked_portable",
                                           "reference"};
  std::vector<std::string> listed;
  for (const std::string& name : GemmRegistry::instance().names(DeviceType::cpu))
    if (std::find(ladder.begin(), ladder.end(), name) != ladder.end()) listed.push_back(name);
  EXPECT_EQ(listed, ladder);
  // Strictly: two rungs of one priority would be listed, and chosen, in the order their static
  // initializers happened to register them.
  for (size_t i = 0; i + 1 < ladder.size(); ++i) {
    const auto* higher = GemmRegistry::instance().find(ladder[i], DeviceType::cpu);
    const auto* lower = GemmRegistry::instance().find(ladder[i + 1], DeviceType::cpu);
    ASSERT_TRUE(higher != nullptr && lower != nullptr) << ladder[i] << ", " << ladder[i + 1];
    EXPECT_GT(higher->priority, lower->priority) << ladder[i] << " over " << ladder[i + 1];
  }
}

TEST(GemmCpuRegistry, ListsReferenceAndBlockedAndPicksBlocked) {
  const std::vector<std::string> names = GemmRegistry::instance().names(DeviceType::cpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "blocked"), names.end());

  // The automatic choice, with no pinned default and no HALFLING_GEMM in the environment.
  ASSERT_EQ(GemmRegistry::instance().default_name(), "") << "a test left a pinned default behind";
  std::optional<std::string> saved_env;
  if (const char* env = std::getenv(GemmArgs::env_var)) saved_env = env;
  unsetenv(GemmArgs::env_var);
  GemmArgs g;
  g.M = g.N = g.K = 8;
  set_dense_ld(g);
  EXPECT_EQ(GemmRegistry::instance().select(g).name, "blocked");
  if (saved_env) setenv(GemmArgs::env_var, saved_env->c_str(), 1);
}

TEST(GemmCpuArgs, DescribeNamesTheProblem) {
  GemmArgs g;
  g.op_b = Op::T;
  g.M = 128;
  g.N = 512;
  g.K = 784;
  g.ab_type = DType::f16;
  set_dense_ld(g);
  EXPECT_EQ(g.describe(), "gemm NT M=128 N=512 K=784 f16->f32 on cpu");
  // A stride that is not the dense one is spelled out, whichever of the three it is.
  g.lda += 8;
  EXPECT_EQ(g.describe(), "gemm NT M=128 N=512 K=784 f16->f32 lda=792 ldb=784 ldc=512 on cpu");
  set_dense_ld(g);
  g.ldb += 8;
  EXPECT_EQ(g.describe(), "gemm NT M=128 N=512 K=784 f16->f32 lda=784 ldb=792 ldc=512 on cpu");
}

// gemm_rows, what the GPU's gemm() runs a problem taller than kCudaGemmRowChunk rows through: slabs of
// rows computed one by one give the whole problem's bytes, C's padding included, for both ways A can be
// stored, with strided operands, beta, a bias and ReLU (on the CPU's variants, which do not split K; a
// GPU split-K rung may split a short last slab, kernels/gemm.h).
TEST(GemmCpuArgs, RowSlabsGiveTheWholeProblemsBits) {
  uint64_t seed = test::fresh_seed();
  for (Op op_a : {Op::N, Op::T})
    for (Op op_b : {Op::N, Op::T}) {
      GemmArgs g;
      g.op_a = op_a;
      g.op_b = op_b;
      g.M = 23;
      g.N = 9;
      g.K = 17;
      set_dense_ld(g);
      g.lda += 3;
      g.ldb += 1;
      g.ldc += 2;
      g.ab_type = DType::f16;
      g.c_type = DType::f16;
      g.alpha = 0.75f;
      g.beta = 0.5f;
      g.relu = true;
      const int64_t a_rows = op_a == Op::N ? g.M : g.K, b_rows = op_b == Op::N ? g.K : g.N;
      TypedBuffer a(DType::f16, static_cast<size_t>(a_rows * g.lda));
      TypedBuffer b(DType::f16, static_cast<size_t>(b_rows * g.ldb));
      TypedBuffer bias(DType::f32, static_cast<size_t>(g.N)), c0(DType::f16, static_cast<size_t>(g.M * g.ldc));
      a.set_all(test::random_values(a.size(), seed++, -1, 1, DType::f16));
      b.set_all(test::random_values(b.size(), seed++, -1, 1, DType::f16));
      bias.set_all(test::random_values(bias.size(), seed++, -1, 1, DType::f32));
      c0.set_all(test::random_values(c0.size(), seed++, -1, 1, DType::f16));
      g.A = a.data();
      g.B = b.data();
      g.bias = bias.data();
      TypedBuffer whole = c0, slabs = c0;
      g.C = whole.data();
      gemm(g);
      g.C = slabs.data();
      for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 7}, {8, 14}, {22, 1}}) {
        const GemmArgs part = gemm_rows(g, first, count);
        EXPECT_EQ(part.M, count);
        gemm(part);
      }
      EXPECT_EQ(slabs.bytes(), whole.bytes()) << g.describe();
      EXPECT_NE(whole.bytes(), c0.bytes());  // the check compares results, not two untouched copies
    }
}

TEST(GemmCpuArgs, RowSlabsOutsideTheProblemAreRefused) {
  GemmArgs g;
  g.M = 10;
  g.N = g.K = 4;
  set_dense_ld(g);
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{-1, 2}, {0, 0}, {9, 2}, {10, 1}}) {
    try {
      (void)gemm_rows(g, first, count);
      ADD_FAILURE() << "rows [" << first << ", " << first + count << ") accepted";
    } catch (const Error& e) {
      // The rows named are the slab asked for, [first, first + count).
      const std::string want = "gemm_rows: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                               ") are not inside the M=10 rows of gemm NN M=10";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// A valid 4 x 5 x 6 problem that each case below breaks in one way.
class GemmCpuBadArgs : public ::testing::Test {
 protected:
  GemmCpuBadArgs() {
    g.M = 4;
    g.N = 5;
    g.K = 6;
    set_dense_ld(g);
    g.A = a.data();
    g.B = b.data();
    g.C = c.data();
  }

  // gemm() throws hl::Error whose message starts with "gemm:" and mentions `what`.
  void expect_error(const std::string& what, const std::string& variant = "") {
    try {
      gemm(g, variant);
      ADD_FAILURE() << "no error for " << g.describe() << " (expected one about '" << what << "')";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("gemm:", 0), 0u) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << "'" << msg << "' does not mention '" << what << "'";
    }
  }

  std::vector<double> a = std::vector<double>(64, 1.0), b = std::vector<double>(64, 1.0), c = std::vector<double>(64);
  GemmArgs g;
};

TEST_F(GemmCpuBadArgs, ValidProblemRuns) { EXPECT_NO_THROW(gemm(g)); }

TEST_F(GemmCpuBadArgs, ZeroSizes) {
  g.K = 0;
  expect_error("K=0");
  g.K = 6;
  g.M = -1;
  expect_error("M=-1");
  // Each size at 0 alone.
  g.M = 0;
  expect_error("M, N and K must all be >= 1, got M=0 N=5 K=6");
  g.M = 4;
  g.N = 0;
  expect_error("M, N and K must all be >= 1, got M=4 N=0 K=6");
}

TEST_F(GemmCpuBadArgs, NullPointers) {
  g.A = nullptr;
  expect_error("A is a null pointer");
  g.A = a.data();
  g.B = nullptr;
  expect_error("B is a null pointer");
  g.B = b.data();
  g.C = nullptr;
  expect_error("C is a null pointer");
}

TEST_F(GemmCpuBadArgs, LeadingDimensionsTooSmall) {
  g.lda = 5;  // op_a == N: a row of A holds K = 6
  expect_error("lda=5 is smaller than 6, the row length of A as stored (K for op_a=N)");
  g.op_a = Op::T;
  g.lda = 3;  // op_a == T: a row of A holds M = 4
  expect_error("lda=3 is smaller than 4, the row length of A as stored (M for op_a=T)");
  g.op_a = Op::N;
  set_dense_ld(g);
  g.ldb = 4;  // op_b == N: a row of B holds N = 5
  expect_error("ldb=4 is smaller than 5, the row length of B as stored (N for op_b=N)");
  g.op_b = Op::T;
  g.ldb = 5;  // op_b == T: a row of B holds K = 6
  expect_error("ldb=5 is smaller than 6, the row length of B as stored (K for op_b=T)");
  set_dense_ld(g);
  g.ldc = 4;
  expect_error("ldc=4");
}

TEST_F(GemmCpuBadArgs, DtypeCombinations) {
  g.ab_type = DType::f64;
  g.c_type = DType::f16;
  expect_error("f64 inputs need an f64 output");
  g.c_type = DType::f32;
  expect_error("f64 inputs need an f64 output");
  g.ab_type = DType::f16;
  g.c_type = DType::f64;
  expect_error("an f64 output needs f64 inputs");
  g.c_type = DType::i32;
  g.ab_type = DType::f32;
  expect_error("C must be f16, f32 or f64");
  g.c_type = DType::f32;
  g.ab_type = DType::i32;
  expect_error("A and B must be f16, f32 or f64");
  // The variants' own hooks say the same to a caller that asks them directly (the registry's
  // chooser does), for either operand.
  const std::vector<std::pair<DType, DType>> not_floats{{DType::i32, DType::f32}, {DType::f32, DType::i32}};
  for (const auto& v : GemmRegistry::instance().all()) {
    if (v.device != DeviceType::cpu) continue;
    ASSERT_NE(v.unsupported, nullptr) << v.name;
    GemmArgs one = g;
    for (const auto& [ab, out] : not_floats) {
      one.ab_type = ab;
      one.c_type = out;
      const char* why = v.unsupported(one);
      ASSERT_NE(why, nullptr) << v.name << " takes " << one.describe();
      EXPECT_NE(std::string(why).find("f16, f32 and f64"), std::string::npos) << why;
    }
  }
  g.ab_type = DType::f32;
  g.bias = b.data();
  g.bias_type = DType::i32;
  expect_error("bias must be f16, f32 or f64");
}

TEST_F(GemmCpuBadArgs, UnknownVariant) { expect_error("no variant named 'no_such_gemm'", "no_such_gemm"); }

}  // namespace
}  // namespace hl::kernels
