// The CPU softmax family (kernels/softmax.h): the `reference` variant against an independent long
// double computation (tests/kernels/softmax_reference.h), the documented conventions (all -inf rows,
// masked entries, bad labels), large-magnitude logits, long rows, the FP16 overflow lesson
// (naive_fp16_nomax), the registry plumbing, and the framework's fused cross-entropy against the
// unfused composition, with central-difference gradient checks (framework/gradcheck.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/autograd.h"
#include "framework/gradcheck.h"
#include "framework/ops.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/softmax.h"
#include "tests/kernels/softmax_reference.h"
#include "tests/kernels/xent_runs.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
namespace k = hl::kernels;
namespace ref = hl::test::softmax_ref;

const double kInf = ref::kInf;
const double kNaN = ref::kNaN;

Tensor make(const std::vector<double>& v, int64_t rows, int64_t cols, DType t) {
  return Tensor::from_vector(v, {rows, cols}, t);
}
Tensor labels_of(const std::vector<int32_t>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

// Run one softmax-family op on the CPU through the registry (variant "" = the default), into an output
// filled with `fill` (NaN: an element left alone where a number is due shows; a finite fill shows one
// left alone where NaN is due).
Tensor run_forward(const Tensor& x, DType out_t, bool log, const std::string& variant = "", double fill = kNaN) {
  Tensor y = Tensor::full(x.shape(), fill, out_t);  // poisoned
  k::SoftmaxArgs a;
  a.op = log ? k::SoftmaxOp::log_softmax : k::SoftmaxOp::softmax;
  a.rows = x.size(0);
  a.cols = x.size(1);
  a.x = x.data_ptr();
  a.x_type = x.dtype();
  a.y = y.data_ptr();
  a.y_type = out_t;
  k::softmax(a, variant);
  return y;
}

// Every element within the FP32-math bound of tests/kernels/softmax_reference.h (the CPU computes in
// double, so it lands far inside it; the bound is shared with the GPU tests). NaN where the reference
// is NaN, and nowhere else.
void expect_forward_matches(const std::vector<double>& x, int64_t rows, int64_t cols, const std::vector<double>& out,
                            bool log, bool f16_out, const std::string& what) {
  const auto stats = ref::row_stats(rows, cols, x);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    const auto& s = stats[static_cast<size_t>(i / cols)];
    const double xi = x[static_cast<size_t>(i)], o = out[static_cast<size_t>(i)];
    const double want = log ? ref::log_prob(xi, s) : ref::prob(xi, s);
    bool ok;
    if (std::isnan(want)) {
      ok = std::isnan(o);
    } else if (xi == -kInf) {  // a masked entry: exactly 0 / -inf
      ok = o == want;
    } else if (std::isinf(want)) {
      ok = o == want;
    } else if (f16_out && std::fabs(want) > 65504) {  // a log-probability below -65504 is -inf in FP16
      ok = std::signbit(o) == std::signbit(want) && (std::isinf(o) || std::fabs(o) == 65504);
    } else {
      const double lt = ref::logprob_tol(xi, s, cols);
      const double tol = log ? lt + ref::out_rel(f16_out) * std::fabs(want) + ref::out_abs(f16_out)
                             : want * (lt + 4 * ref::kU32) + ref::out_rel(f16_out) * want + ref::out_abs(f16_out);
      ok = std::fabs(o - want) <= tol;
    }
    if (!ok && ++bad <= 5)
      ADD_FAILURE() << what << ": element " << i << " (row " << i / cols << ") = " << o << ", want " << want
                    << " (x = " << xi << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

class SoftmaxCpu : public ::testing::Test {
 protected:
  uint64_t seed = hl::test::fresh_seed();
};

TEST_F(SoftmaxCpu, ReferenceMatchesLongDoubleOnRandomShapes) {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 7}, {5, 33}, {4, 1000}, {2, 4097}}) {
    for (DType tx : {DType::f16, DType::f32}) {
      for (DType ty : {DType::f32, DType::f16}) {
        for (double range : {8.0, 60000.0}) {
          const auto x = hl::test::random_values(static_cast<size_t>(rows * cols), seed++, -range, range, tx);
          const Tensor tx_t = make(x, rows, cols, tx);
          for (bool log : {false, true}) {
            const Tensor y = run_forward(tx_t, ty, log);
            expect_forward_matches(x, rows, cols, y.to_double(), log, ty == DType::f16,
                                   std::string(log ? "log_softmax " : "softmax ") + dtype_name(tx) + "->" +
                                       dtype_name(ty) + " " + std::to_string(rows) + "x" + std::to_string(cols));
          }
        }
      }
    }
  }
}

TEST_F(SoftmaxCpu, AllMinusInfRowIsNaNEverywhere) {
  // Row 0 all -inf, row 1 ordinary, row 2 contains +inf, row 3 contains NaN: the documented convention.
  const std::vector<double> x = {-kInf, -kInf, -kInf, 1, 2, 3, 0, kInf, 1, 0, kNaN, 1};
  for (DType t : {DType::f16, DType::f32, DType::f64}) {
    const Tensor xt = make(x, 4, 3, t);
    for (bool log : {false, true}) {
      // NaN, then 7 (no probability or log-probability): with NaN alone, a kernel that left the rows
      // without a finite maximum alone would pass.
      for (double fill : {kNaN, 7.0}) {
        const auto y = run_forward(xt, t == DType::f64 ? DType::f64 : DType::f32, log, "", fill).to_double();
        for (int i = 0; i < 12; ++i) {
          if (i / 3 == 1) {
            EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(i)])) << i;
          } else {
            EXPECT_TRUE(std::isnan(y[static_cast<size_t>(i)])) << "element " << i << " of " << dtype_name(t);
          }
        }
        expect_forward_matches(x, 4, 3, y, log, false, "special rows");
      }
    }
    // Cross-entropy of the all -inf row: NaN loss and NaN gradient; the ordinary row is untouched.
    Tensor logits = make(x, 4, 3, t).slice_rows(0, 2).clone();
    logits.requires_grad_();
    const Tensor loss = cross_entropy(logits, labels_of({0, 2}));
    EXPECT_TRUE(std::isnan(loss.item()));
    loss.backward();
    const auto g = logits.grad().to_double();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(g[static_cast<size_t>(i)])) << i;
    for (int i = 3; i < 6; ++i) EXPECT_TRUE(std::isfinite(g[static_cast<size_t>(i)])) << i;
  }
}

TEST_F(SoftmaxCpu, MaskedEntriesGetZeroProbability) {
  const int64_t rows = 6, cols = 37;
  auto x = hl::test::random_values(static_cast<size_t>(rows * cols), seed, -5, 5, DType::f32);
  for (size_t i = 0; i < x.size(); i += 3) x[i] = -kInf;  // every third entry masked (never a whole row)
  const Tensor xt = make(x, rows, cols, DType::f32);
  const auto p = run_forward(xt, DType::f32, false).to_double();
  const auto lp = run_forward(xt, DType::f32, true).to_double();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      if (x[i] == -kInf) {
        EXPECT_EQ(p[i], 0.0);
        EXPECT_EQ(lp[i], -kInf);
      }
      sum += p[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
  expect_forward_matches(x, rows, cols, p, false, false, "masked softmax");
  expect_forward_matches(x, rows, cols, lp, true, false, "masked log_softmax");

  // The log-softmax backward passes the upstream gradient through unchanged at a masked entry (its
  // probability is 0), and the fused cross-entropy gives it exactly zero gradient.
  Tensor logits = xt.clone();
  logits.requires_grad_();
  std::vector<int32_t> lab;
  for (int64_t r = 0; r < rows; ++r) {  // an unmasked label in every row
    int32_t l = static_cast<int32_t>((r * 7) % cols);
    while (x[static_cast<size_t>(r * cols + l)] == -kInf) l = (l + 1) % static_cast<int32_t>(cols);
    lab.push_back(l);
  }
  cross_entropy(logits, labels_of(lab)).backward();
  const auto g = logits.grad().to_double();
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] == -kInf) {
      EXPECT_EQ(g[i], 0.0) << i;
    }
}

// A label on a masked (-inf) entry: the loss is +inf (the label's probability is 0) and the gradient
// row stays finite: 0 at the other masked entries, -1/batch at the label's own (probability 0 minus
// the one-hot 1), the probabilities / batch elsewhere. Finite gradients mean the loss scaler does not
// skip the step, as in PyTorch; docs/softmax.md says so. The fused and the unfused paths agree.
TEST_F(SoftmaxCpu, MaskedLabelGivesAnInfiniteLossAndAFiniteGradient) {
  const std::vector<double> x = {-kInf, 1, 2, 0.5, -kInf, 1};  // row 0's label is masked, row 1's is not
  const double e = std::exp(-1.0), e2 = std::exp(-0.5);
  const std::vector<double> want = {-0.5, 0.5 * e / (1 + e), 0.5 / (1 + e), 0.5 * e2 / (1 + e2), 0.0,
                                    0.5 / (1 + e2) - 0.5};
  for (DType t : {DType::f32, DType::f64}) {
    for (bool fused : {true, false}) {
      Tensor logits = make(x, 2, 3, t);
      logits.requires_grad_();
      const Tensor loss = fused ? cross_entropy(logits, labels_of({0, 2})) : cross_entropy_unfused(logits, labels_of({0, 2}));
      const std::string what = std::string(fused ? "fused " : "unfused ") + dtype_name(t);
      EXPECT_EQ(loss.item(), kInf) << what;
      loss.backward();
      const auto g = logits.grad().to_double();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-6) << what << " element " << i;
      EXPECT_EQ(g[4], 0.0) << what << ": a masked entry that is not the label";
    }
  }
}

TEST_F(SoftmaxCpu, LongRowsAndLargeMagnitudes) {
  // 70000 columns: one row sums to 1; ±1e4 in f32 and ±60000 in f16 would overflow exp() without the
  // maximum subtracted, and lose every digit if the loss were computed as lse - x[label].
  const int64_t cols = 70000;
  for (auto [t, range] : std::vector<std::pair<DType, double>>{{DType::f32, 1e4}, {DType::f16, 60000.0}}) {
    auto x = hl::test::random_values(static_cast<size_t>(2 * cols), seed++, -range, range, t);
    const Tensor xt = make(x, 2, cols, t);
    const auto p = run_forward(xt, DType::f32, false).to_double();
    expect_forward_matches(x, 2, cols, p, false, false, std::string("long rows ") + dtype_name(t));
    expect_forward_matches(x, 2, cols, run_forward(xt, DType::f32, true).to_double(), true, false,
                           std::string("long rows log ") + dtype_name(t));
  }
  // A hand-checkable row: [1e4, 1e4 - 1, -1e4] -> [1/(1+e^-1), e^-1/(1+e^-1), 0].
  const auto p = run_forward(make({1e4, 1e4 - 1, -1e4}, 1, 3, DType::f32), DType::f32, false).to_double();
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(-1.0)), 1e-7);
  EXPECT_NEAR(p[1], std::exp(-1.0) / (1 + std::exp(-1.0)), 1e-7);
  EXPECT_EQ(p[2], 0.0);
  // Cross-entropy with f16 logits of ±60000: the loss of the label at the maximum is log(1 + ...) ~ 0.
  const Tensor big = make({60000, -60000, 59968}, 1, 3, DType::f16);
  EXPECT_NEAR(cross_entropy(big, labels_of({0})).item(), std::log1p(std::exp(-32.0)), 1e-9);
  EXPECT_NEAR(cross_entropy(big, labels_of({2})).item(), 32.0, 1e-5);
}

// ---- the numerics lesson: FP16 without max subtraction overflows at a logit of 12 ----------------------

TEST_F(SoftmaxCpu, Fp16WithoutMaxSubtractionOverflowsAtTwelve) {
  EXPECT_GT(std::exp(12.0), 65504.0);  // 162754.79...
  EXPECT_TRUE(std::isinf(static_cast<float>(half(std::exp(12.0f)))));
  const Tensor x = make({12, 1, 0, -1}, 1, 4, DType::f16);
  const auto bad = run_forward(x, DType::f16, false, "naive_fp16_nomax").to_double();
  EXPECT_TRUE(std::isnan(bad[0])) << bad[0];  // inf / inf
  for (int c = 1; c < 4; ++c) EXPECT_EQ(bad[static_cast<size_t>(c)], 0.0);  // finite / inf
  // The FP32-math reference gets it right, in either output dtype.
  for (DType ty : {DType::f16, DType::f32}) {
    const auto good = run_forward(x, ty, false).to_double();
    const double z = std::exp(12.0) + std::exp(1.0) + 1 + std::exp(-1.0);
    const double want[4] = {std::exp(12.0) / z, std::exp(1.0) / z, 1 / z, std::exp(-1.0) / z};
    for (int c = 0; c < 4; ++c)
      EXPECT_NEAR(good[static_cast<size_t>(c)], want[c], want[c] * (ty == DType::f16 ? ref::kU16 : 1e-6) + 0x1p-25) << c;
  }
  // For small logits the teaching variant is merely FP16-inaccurate: within a few FP16 ulps.
  const auto xs = hl::test::random_values(4 * 10, seed, -3, 3, DType::f16);
  const Tensor small = make(xs, 4, 10, DType::f16);
  const auto a = run_forward(small, DType::f16, false, "naive_fp16_nomax").to_double();
  const auto b = run_forward(small, DType::f32, false).to_double();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 16 * ref::kU16 * b[i] + 0x1p-24) << i;
}

TEST_F(SoftmaxCpu, Fp16NoMaxIsBitExactFp16Emulation) {
  // The emulation, step by step, written out again here with hl::half: exp rounded to FP16, the sum
  // and the quotient rounded to FP16 after each operation.
  const auto xs = hl::test::random_values(3 * 9, seed, -4, 11, DType::f16);
  const auto y = run_forward(make(xs, 3, 9, DType::f16), DType::f16, false, "naive_fp16_nomax").to_double();
  for (int r = 0; r < 3; ++r) {
    half sum(0.0f);
    for (int c = 0; c < 9; ++c)
      sum = half(static_cast<float>(sum) + static_cast<float>(half(std::exp(static_cast<float>(xs[static_cast<size_t>(r * 9 + c)])))));
    for (int c = 0; c < 9; ++c) {
      const half e(std::exp(static_cast<float>(xs[static_cast<size_t>(r * 9 + c)])));
      const double want = static_cast<float>(half(static_cast<float>(e) / static_cast<float>(sum)));
      EXPECT_EQ(y[static_cast<size_t>(r * 9 + c)], want) << r << "," << c;
    }
  }
}

// ---- registry plumbing -------------------------------------------------------------------------------

TEST_F(SoftmaxCpu, RegistryNamesDefaultsAndErrors) {
  const auto names = k::SoftmaxRegistry::instance().names(DeviceType::cpu);
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "naive_fp16_nomax"), names.end());
  k::SoftmaxArgs a;
  a.op = k::SoftmaxOp::softmax;
  a.rows = 2;
  a.cols = 3;
  Tensor x = Tensor::zeros({2, 3}, DType::f16), y = Tensor::zeros({2, 3}, DType::f16);
  a.x = x.data_ptr();
  a.x_type = DType::f16;
  a.y = y.data_ptr();
  a.y_type = DType::f16;
  // Never the default, even where it could run.
  if (std::getenv("HALFLING_SOFTMAX") == nullptr) {
    EXPECT_EQ(k::softmax_variant_for(a), "reference");
  }
  EXPECT_EQ(a.describe(), "softmax 2x3 f16->f16 on cpu");
  // A teaching variant asked for what it cannot do, an unknown name, a null pointer: clear errors.
  a.op = k::SoftmaxOp::log_softmax;
  try {
    k::softmax(a, "naive_fp16_nomax");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("naive_fp16_nomax"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("log_softmax 2x3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(k::softmax(a, "no_such_rung"), Error);
  // The teaching variant is FP16 on both sides: an f32 input or an f32 output alone is refused.
  a.op = k::SoftmaxOp::softmax;
  for (auto [tx, ty] : std::vector<std::pair<DType, DType>>{{DType::f32, DType::f16}, {DType::f16, DType::f32}}) {
    a.x_type = tx, a.y_type = ty;
    const std::string e = test::error_of([&] { k::softmax(a, "naive_fp16_nomax"); });
    EXPECT_NE(e.find("the teaching variant is FP16 in, FP16 out"), std::string::npos) << e;
  }
  a.x_type = a.y_type = DType::f16;
  a.op = k::SoftmaxOp::log_softmax;
  a.y = nullptr;
  EXPECT_THROW(k::softmax(a), Error);
  a.y = y.data_ptr();
  a.op = k::SoftmaxOp::xent_forward;
  EXPECT_THROW(k::softmax(a), Error);  // no labels, no loss
}

// softmax()'s argument checks (kernels/softmax.cpp) at their edges: each size alone, the empty problems
// that read nothing, and every op's own pointers. Each message names the check and the whole problem.
TEST_F(SoftmaxCpu, ArgumentChecksAtTheirEdges) {
  const auto args = [](k::SoftmaxOp op, int64_t rows, int64_t cols) {
    k::SoftmaxArgs a;
    a.op = op;
    a.rows = rows;
    a.cols = cols;
    return a;
  };
  const auto error = [](const k::SoftmaxArgs& a) { return test::error_of([&] { k::softmax(a); }); };
  EXPECT_EQ(error(args(k::SoftmaxOp::softmax, -1, 3)),
            "softmax: rows and cols must be >= 0, got rows=-1 cols=3 (softmax -1x3 f32->f32 on cpu)");
  EXPECT_EQ(error(args(k::SoftmaxOp::softmax, 3, -1)),
            "softmax: rows and cols must be >= 0, got rows=3 cols=-1 (softmax 3x-1 f32->f32 on cpu)");
  // Nothing to read or write: null pointers are fine when either side is 0.
  for (k::SoftmaxOp op : {k::SoftmaxOp::softmax, k::SoftmaxOp::log_softmax, k::SoftmaxOp::log_softmax_backward}) {
    EXPECT_NO_THROW(k::softmax(args(op, 0, 5))) << k::softmax_op_name(op);
    EXPECT_NO_THROW(k::softmax(args(op, 5, 0))) << k::softmax_op_name(op);
    EXPECT_NO_THROW(k::softmax(args(op, 0, 0))) << k::softmax_op_name(op);
  }
  // A row of one column, or one row, is a real problem whose pointers are checked.
  EXPECT_EQ(error(args(k::SoftmaxOp::softmax, 1, 3)),
            "softmax: the input is a null pointer (softmax 1x3 f32->f32 on cpu)");
  EXPECT_EQ(error(args(k::SoftmaxOp::softmax, 3, 1)),
            "softmax: the input is a null pointer (softmax 3x1 f32->f32 on cpu)");
  // Cross-entropy needs a class in every row it has, and is a no-op for no rows.
  for (k::SoftmaxOp op : {k::SoftmaxOp::xent_forward, k::SoftmaxOp::xent_backward, k::SoftmaxOp::xent_fused}) {
    EXPECT_NO_THROW(k::softmax(args(op, 0, 0))) << k::softmax_op_name(op);
    EXPECT_NO_THROW(k::softmax(args(op, 0, 4))) << k::softmax_op_name(op);
    const std::string e = error(args(op, 1, 0));
    EXPECT_NE(e.find("softmax: cross-entropy needs at least one class"), std::string::npos) << e;
  }
  // Every cross-entropy op checks its labels and statistics, and names them in its description.
  std::vector<float> x(6, 0.0f), y(6), loss(2), stats(4);
  std::vector<int32_t> labels = {0, 2};
  for (k::SoftmaxOp op : {k::SoftmaxOp::xent_forward, k::SoftmaxOp::xent_backward, k::SoftmaxOp::xent_fused}) {
    k::SoftmaxArgs a = args(op, 2, 3);
    a.x = x.data();
    a.y = y.data();
    a.loss = loss.data();
    a.stats = stats.data();
    const std::string name = k::softmax_op_name(op);
    const std::string out = op == k::SoftmaxOp::xent_forward ? "" : "->f32";
    EXPECT_EQ(error(a), "softmax: labels is a null pointer (" + name + " 2x3 f32" + out + " stats f32 on cpu)");
    a.labels = labels.data();
    a.stat_type = DType::f64;
    EXPECT_NE(error(a).find("loss, statistics and grad_scale must be f32 for f32 logits"), std::string::npos)
        << name;
    a.stat_type = DType::f32;
    EXPECT_NO_THROW(k::softmax(a)) << name;
  }
}

// The nll kernels (the unfused loss's pick) with a label outside [0, cols): a NaN loss, and a NaN
// gradient row, as cross-entropy's fused gradient gives: the loss scaler checks the gradients, so a zero
// row would let the step through. The framework refuses such labels on the CPU, so the kernels are
// called directly, as the GPU's unfused path calls its own when labels are not read back.
TEST_F(SoftmaxCpu, NllBadLabelGivesANaNLossAndGradientRow) {
  for (DType t : {DType::f32, DType::f64}) {
    const int64_t rows = 4, cols = 3;
    const Tensor logp = make(test::random_values(12, seed++, -3, 0, t), rows, cols, t);
    const std::vector<int32_t> labels = {2, -1, 0, 3};
    Tensor loss = Tensor::full({rows}, 7.0, t), gloss = make({1.0, 2.0, 3.0, 4.0}, rows, 1, t);
    k::nll_forward(DeviceType::cpu, rows, cols, logp.data_ptr(), t, labels.data(), loss.data_ptr());
    const auto lp = logp.to_double(), lo = loss.to_double();
    EXPECT_EQ(lo[0], -lp[2]);
    EXPECT_TRUE(std::isnan(lo[1]) && std::isnan(lo[3])) << lo[1] << " " << lo[3];
    EXPECT_EQ(lo[2], -lp[6]);
    Tensor g = Tensor::full({rows, cols}, 7.0, t);
    k::nll_backward(DeviceType::cpu, rows, cols, labels.data(), gloss.data_ptr(), g.data_ptr(), t);
    const std::vector<double> want = {0, 0, -1, kNaN, kNaN, kNaN, -3, 0, 0, kNaN, kNaN, kNaN};
    const auto got = g.to_double();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << dtype_name(t) << " element " << i << " = " << got[i] << ", want " << want[i];
  }
}

TEST_F(SoftmaxCpu, NllKernelsCheckTheirArguments) {
  std::vector<float> logp(6, -1.0f), loss(2), g(6);
  std::vector<int32_t> labels = {0, 1};
  const auto fwd = [&](int64_t rows, int64_t cols, const void* lp, const int32_t* l, void* out) {
    return test::error_of([&] { k::nll_forward(DeviceType::cpu, rows, cols, lp, DType::f32, l, out); });
  };
  const auto bwd = [&](int64_t rows, int64_t cols, const int32_t* l, const void* gl, void* out) {
    return test::error_of([&] { k::nll_backward(DeviceType::cpu, rows, cols, l, gl, out, DType::f32); });
  };
  EXPECT_EQ(fwd(-2, -3, logp.data(), labels.data(), loss.data()),
            "nll_forward: rows and cols must be >= 0, got rows=-2 cols=-3");
  EXPECT_EQ(bwd(2, -3, labels.data(), loss.data(), g.data()),
            "nll_backward: rows and cols must be >= 0, got rows=2 cols=-3");
  EXPECT_EQ(fwd(2, 3, logp.data(), nullptr, loss.data()),
            "nll_forward: the labels or the loss is a null pointer (2 rows)");
  EXPECT_EQ(fwd(2, 3, nullptr, labels.data(), loss.data()),
            "nll_forward: the log-probabilities is a null pointer (2x3)");
  EXPECT_EQ(bwd(2, 3, labels.data(), nullptr, g.data()),
            "nll_backward: the labels or the loss gradient is a null pointer (2 rows)");
  EXPECT_EQ(bwd(2, 3, labels.data(), loss.data(), nullptr),
            "nll_backward: the log-probabilities' gradient is a null pointer (2x3)");
  // Nothing to read or write: no pointer is needed.
  EXPECT_EQ(fwd(0, 3, nullptr, nullptr, nullptr), "(no error)");
  EXPECT_EQ(bwd(2, 0, labels.data(), loss.data(), nullptr), "(no error)");
  EXPECT_EQ(fwd(2, 3, logp.data(), labels.data(), loss.data()), "(no error)");
}

// fused_xent's loss reads the label's logit after the row's gradient may have been written, so its
// gradient may not overlap the logits, in whole or in part; xent_backward's may.
TEST_F(SoftmaxCpu, XentFusedRefusesAGradientOverTheLogits) {
  // The logits sit in the middle of a larger buffer, so that a gradient may start before them.
  std::vector<float> buffer(36, 0.5f), stats(8), loss(4);
  float* x = buffer.data() + 12;
  std::vector<int32_t> labels = {0, 1, 2, 0};
  k::SoftmaxArgs a;
  a.op = k::SoftmaxOp::xent_fused;
  a.rows = 4;
  a.cols = 3;
  a.x = x;
  a.labels = labels.data();
  a.loss = loss.data();
  // The same buffer, its last logit, and a gradient that starts 11 floats before the logits and ends on
  // their first: every overlap, whole or in part, at either end.
  for (float* y : {x, x + 11, x - 11}) {
    a.y = y;
    const std::string e = test::error_of([&] { k::softmax(a); });
    EXPECT_NE(e.find("xent_fused cannot write the gradient over the logits it reads (y overlaps x)"),
              std::string::npos)
        << e;
  }
  // Gradients that end where the logits start, or start where they end, touch them without overlapping.
  for (float* y : {x - 12, x + 12}) {
    a.y = y;
    EXPECT_NO_THROW(k::softmax(a)) << "y at x" << (y < x ? "-" : "+") << "12 floats";
  }
  std::vector<float> dx(12);
  a.y = dx.data();
  EXPECT_NO_THROW(k::softmax(a));
  a.stats = stats.data();
  a.op = k::SoftmaxOp::xent_forward;
  k::softmax(a);
  a.op = k::SoftmaxOp::xent_backward;
  a.y = x;
  EXPECT_NO_THROW(k::softmax(a));
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(x[i], dx[i], 1e-6) << i;  // in place, the same gradient
}

// softmax_can_run with nothing pinned: as Registry::select chooses, a non-opt-in variant of the
// arguments' own device that supports them. The CPU's reference runs every op; f64 cross-entropy has
// no GPU rung (fused_xent is f16/f32, and in a CPU-only build there is no GPU rung at all), and the
// CPU's variants must not answer for the GPU.
TEST_F(SoftmaxCpu, CanRunWithoutAPinAsksTheArgumentsDevice) {
  if (std::getenv(k::SoftmaxArgs::env_var) != nullptr) GTEST_SKIP() << "HALFLING_SOFTMAX pins a rung";
  ASSERT_EQ(k::SoftmaxRegistry::instance().default_name(), "");
  k::SoftmaxArgs a;
  a.op = k::SoftmaxOp::xent_forward;
  a.rows = 4;
  a.cols = 3;
  a.x_type = DType::f64;
  a.stat_type = DType::f64;
  EXPECT_TRUE(k::softmax_can_run(a));
  a.device = DeviceType::cuda;
  EXPECT_FALSE(k::softmax_can_run(a));
}

// softmax() selects the variant, then returns before running it when there is nothing to compute: a
// GPU rung would launch an empty grid, which CUDA refuses. A spy variant on the CPU counts its runs.
int g_spy_runs = 0;
TEST_F(SoftmaxCpu, AnEmptyProblemRunsNoVariant) {
  auto& reg = k::SoftmaxRegistry::instance();
  if (reg.find("test_spy", DeviceType::cpu) == nullptr)
    reg.add({"test_spy", DeviceType::cpu, -1000, "tests only: counts its runs", [](const k::SoftmaxArgs&) {
               ++g_spy_runs;
             },
             nullptr, /*opt_in=*/true});
  std::vector<float> x(6, 0.0f), y(6);
  k::SoftmaxArgs a;
  a.x = x.data();
  a.y = y.data();
  g_spy_runs = 0;
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {2, 0}, {0, 0}}) {
    a.rows = rows;
    a.cols = cols;
    k::softmax(a, "test_spy");
  }
  EXPECT_EQ(g_spy_runs, 0);
  a.rows = 2;
  a.cols = 3;
  k::softmax(a, "test_spy");
  EXPECT_EQ(g_spy_runs, 1);
}

TEST_F(SoftmaxCpu, PinnedRungWithoutFusedLossFallsBackToUnfused) {
  auto& reg = k::SoftmaxRegistry::instance();
  Generator gen(seed);
  const Tensor logits = Tensor::uniform({5, 4}, gen, -2, 2);
  const Tensor labels = labels_of({0, 3, 1, 2, 3});
  const double fused = cross_entropy(logits, labels).item();
  reg.set_default("naive_fp16_nomax");  // softmax only: cross_entropy must not use it for the loss
  try {
    cross_entropy(logits, labels);
    ADD_FAILURE() << "the unfused path should have asked the pinned rung for log_softmax";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("naive_fp16_nomax"), std::string::npos) << e.what();
  }
  reg.set_default("reference");
  EXPECT_NEAR(cross_entropy(logits, labels).item(), fused, 1e-7);
  // What cross_entropy asks: can the pinned rung run the fused loss itself?
  k::SoftmaxArgs xent;
  xent.op = k::SoftmaxOp::xent_forward;
  xent.rows = 5;
  xent.cols = 4;
  xent.x_type = DType::f32;
  EXPECT_TRUE(k::softmax_can_run(xent));  // reference does every op
  reg.set_default("naive_fp16_nomax");
  EXPECT_FALSE(k::softmax_can_run(xent));
  reg.set_default("");
  // The fused loss's description names its multiplier (1/batch for a mean) when it is not 1.
  EXPECT_EQ(xent.describe(), "xent_forward 5x4 f32 stats f32 on cpu");
  xent.multiplier = 0.2;
  EXPECT_EQ(xent.describe(), "xent_forward 5x4 f32 stats f32 multiplier=0.2 on cpu");
}

TEST_F(SoftmaxCpu, APinnedGpuRungLeavesCpuCallsToTheAutomaticChoice) {
  // --softmax warp_row pins the GPU's rung; a softmax on a host tensor keeps working (the same rule as
  // kernels/registry.h). In a CPU-only build no device knows warp_row, so the pin is a reported typo.
  auto& reg = k::SoftmaxRegistry::instance();
  Generator gen(seed);
  const Tensor logits = Tensor::uniform({3, 5}, gen, -2, 2);
  const Tensor labels = labels_of({0, 4, 2});
  const double expected = cross_entropy(logits, labels).item();
  reg.set_default("warp_row");
  if (reg.known_anywhere("warp_row")) {
    EXPECT_NEAR(cross_entropy(logits, labels).item(), expected, 0.0);
    EXPECT_NO_THROW(log_softmax(logits));
  } else {
    EXPECT_THROW(log_softmax(logits), Error);
  }
  reg.set_default("");
}

// ---- fused cross-entropy: the kernels and the framework op ---------------------------------------------

TEST_F(SoftmaxCpu, XentFusedEqualsForwardThenBackward) {
  const int64_t rows = 9, cols = 13;
  for (DType t : {DType::f16, DType::f32}) {
    const auto x = hl::test::random_values(static_cast<size_t>(rows * cols), seed++, -6, 6, t);
    std::vector<int32_t> lab(rows);
    for (int64_t r = 0; r < rows; ++r) lab[static_cast<size_t>(r)] = static_cast<int32_t>((r * 5 + seed) % cols);
    lab[3] = -1;                          // bad labels: NaN loss and NaN gradient row,
    lab[6] = static_cast<int32_t>(cols);  // below the range and just past it
    const Tensor xt = make(x, rows, cols, t), lt = labels_of(lab);
    const Tensor scale = Tensor::scalar(1024.0);
    // The outputs poisoned with NaN, then filled with values no correct kernel writes (xent_runs.h:
    // losses -1, gradients 60000; |gradient| <= 1024 / 9 here): with NaN alone a kernel that skipped the
    // bad labels' rows would pass.
    for (const hl::test::XentFill& fill : {hl::test::xent_nan_fill(), hl::test::xent_sentinel_fill()}) {
      const hl::test::XentRuns run = hl::test::run_xent_split_and_fused(xt, lt, scale, 1.0 / rows, t, fill);
      const auto l1 = run.loss.to_double(), l2 = run.loss_fused.to_double(), a1 = run.g.to_double(),
                 a2 = run.g_fused.to_double();
      const auto st = ref::row_stats(rows, cols, x);
      for (int64_t r = 0; r < rows; ++r) {
        const size_t ri = static_cast<size_t>(r);
        if (r == 3 || r == 6) {
          EXPECT_TRUE(std::isnan(l1[ri]) && std::isnan(l2[ri]));
        } else {
          const double xl = x[static_cast<size_t>(r * cols + lab[ri])];
          const double want = ref::log_prob(xl, st[ri]) * -1;
          // An FP32-math log-probability's bound (the reference variant computes in double, well inside
          // it), and the loss's rounding to FP32.
          EXPECT_NEAR(l1[ri], want, ref::logprob_tol(xl, st[ri], cols) + ref::kU32 * std::fabs(want));
          EXPECT_EQ(l1[ri], l2[ri]);
        }
        for (int64_t c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          if (r == 3 || r == 6) {
            EXPECT_TRUE(std::isnan(a1[i]) && std::isnan(a2[i])) << i;
            continue;
          }
          const double p = ref::prob(x[i], st[ri]), per_row = 1024.0 / rows;
          const double want = (p - (c == lab[ri] ? 1.0 : 0.0)) * per_row;
          // p's error is p times its log's (logprob_tol), the subtraction and the scaling round in FP32,
          // and the output rounds once to its dtype (relative, with the subnormal floor).
          const double tol = per_row * p * ref::logprob_tol(x[i], st[ri], cols) + 2 * ref::kU32 * std::fabs(want) +
                             ref::out_rel(t == DType::f16) * std::fabs(want) + ref::out_abs(t == DType::f16);
          EXPECT_NEAR(a1[i], want, tol) << i;
          EXPECT_EQ(a1[i], a2[i]) << i;  // the same arithmetic either way
        }
      }
    }
  }
}

TEST_F(SoftmaxCpu, CrossEntropyFusedMatchesUnfused) {
  // Loss and gradient under a loss scale (the trainer's scaler.scale(loss).backward()), for f32, f16
  // and f64 logits: the fused op against nll_loss(log_softmax(x)).
  Generator gen(seed);
  for (DType t : {DType::f32, DType::f16, DType::f64}) {
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {128, 10}, {7, 1000}}) {
      const Tensor base = Tensor::uniform({rows, cols}, gen, -8, 8, t);
      std::vector<int32_t> lab(static_cast<size_t>(rows));
      for (auto& l : lab) l = static_cast<int32_t>(gen.uniform() * static_cast<double>(cols)) % static_cast<int32_t>(cols);
      const Tensor labels = labels_of(lab);
      Tensor a = base.clone(), b = base.clone();
      a.requires_grad_();
      b.requires_grad_();
      const Tensor la = cross_entropy(a, labels), lb = cross_entropy_unfused(b, labels);
      EXPECT_EQ(la.dtype(), lb.dtype());
      EXPECT_NEAR(la.item(), lb.item(), (t == DType::f64 ? 1e-13 : 1e-6) * (1 + std::fabs(lb.item())));
      mul(la, 4096.0).backward();
      mul(lb, 4096.0).backward();
      ASSERT_EQ(a.grad().dtype(), t);
      ASSERT_EQ(b.grad().dtype(), t);
      const auto ga = a.grad().to_double(), gb = b.grad().to_double();
      // Both compute in double on the CPU, but each stores an intermediate in f32: the unfused path the
      // log-probabilities (|y| up to ~2^5 here, so exp(y) carries up to 2^5 * 2^-24 relative error), the
      // fused one the row statistics; f16 gradients may then round the last bit differently.
      const double rel = t == DType::f16 ? 2 * ref::kU16 + 64 * ref::kU32 : t == DType::f32 ? 64 * ref::kU32 : 1e-12;
      for (size_t i = 0; i < ga.size(); ++i)
        ASSERT_NEAR(ga[i], gb[i], rel * std::fabs(gb[i]) + 1e-7) << dtype_name(t) << " " << rows << "x" << cols << " " << i;
    }
  }
}

TEST_F(SoftmaxCpu, GradientChecks) {
  Generator gen(seed);
  GradcheckOptions skip_labels;
  skip_labels.skip = {1};
  // Many classes and wide logits (e^12 between a row's extremes): the fused loss and log_softmax.
  // (Masked, -inf, logits have no central difference: SoftmaxCpu.MaskedEntriesGetZeroProbability checks them.)
  const Tensor logits = Tensor::uniform({6, 40}, gen, -6.0, 6.0, DType::f64);
  std::vector<int32_t> lab = {0, 39, 17, 17, 5, 22};
  const Tensor labels = labels_of(lab);
  for (const auto& [name, f] : std::vector<std::pair<std::string, GradcheckFn>>{
           {"cross_entropy", [](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1]); }},
           {"log_softmax", [](const std::vector<Tensor>& x) { return log_softmax(x[0]); }}}) {
    const GradcheckResult r = gradcheck(f, {logits, labels}, skip_labels);
    EXPECT_TRUE(r.ok) << name << ": " << r.report;
    EXPECT_LT(r.max_abs_error, 1e-6) << name << ": " << r.report;
  }
  // The loss under an upstream multiplier other than 1 (the loss scale): d(S * loss)/dx.
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) { return mul(cross_entropy(x[0], x[1]), 8.0); }, {logits, labels}, skip_labels);
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace
