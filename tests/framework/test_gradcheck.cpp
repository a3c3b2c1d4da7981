// A central-difference gradient check (float64, CPU) for every differentiable op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "framework/gradcheck.h"
#include "framework/ops.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

Tensor rnd(const Shape& s, Generator& g, double lo = -1.0, double hi = 1.0) {
  return Tensor::uniform(s, g, lo, hi, DType::f64);
}

void expect_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& in, GradcheckOptions opt = {}) {
  const GradcheckResult r = gradcheck(f, in, opt);
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_LT(r.max_abs_error, 1e-6) << r.report;
}

class Gradcheck : public ::testing::Test {
 protected:
  Generator g{hl::test::fresh_seed()};
};

TEST_F(Gradcheck, BinaryOpsWithBroadcasting) {
  const Tensor a = rnd({3, 4}, g), b = rnd({4}, g), c = rnd({3, 1}, g);
  expect_gradcheck([](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, {a, b});
  expect_gradcheck([](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, {a, c});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {a, b});
  const Tensor away_from_zero = rnd({4}, g, 0.5, 2.0);
  expect_gradcheck([](const std::vector<Tensor>& x) { return div(x[0], x[1]); }, {a, away_from_zero});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {b, a});  // broadcast on the left
}

TEST_F(Gradcheck, ScalarAndUnaryOps) {
  const Tensor a = rnd({2, 5}, g);
  const Tensor pos = rnd({2, 5}, g, 0.5, 2.0);
  expect_gradcheck([](const std::vector<Tensor>& x) { return add(x[0], 1.5); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], -2.5); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return rsub(3.0, x[0]); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return rdiv(2.0, x[0]); }, {pos});
  expect_gradcheck([](const std::vector<Tensor>& x) { return pow(x[0], 3.0); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return pow(x[0], 0.5); }, {pos});
  expect_gradcheck([](const std::vector<Tensor>& x) { return neg(x[0]); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return exp(x[0]); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return log(x[0]); }, {pos});
}

TEST_F(Gradcheck, Relu) {
  // Keep values away from the kink at 0, where the derivative is undefined.
  std::vector<double> v(12);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? 1 : -1) * (0.1 + g.uniform());
  const Tensor a = Tensor::from_vector(v, {3, 4});
  expect_gradcheck([](const std::vector<Tensor>& x) { return relu(x[0]); }, {a});
}

TEST_F(Gradcheck, Reductions) {
  const Tensor a = rnd({2, 3, 4}, g);
  expect_gradcheck([](const std::vector<Tensor>& x) { return sum(x[0]); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mean(x[0]); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return sum(x[0], {1}); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return sum(x[0], {0, 2}, true); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return mean(x[0], {-1}); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return sum_to(x[0], {3, 1}); }, {a});
}

TEST_F(Gradcheck, MatmulEveryLayout) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = ta ? rnd({5, 3}, g) : rnd({3, 5}, g);  // op(a) is 3x5
      const Tensor b = tb ? rnd({4, 5}, g) : rnd({5, 4}, g);  // op(b) is 5x4
      expect_gradcheck([ta, tb](const std::vector<Tensor>& x) { return matmul(x[0], x[1], ta, tb); }, {a, b});
    }
  }
}

TEST_F(Gradcheck, LinearWithAndWithoutFusedRelu) {
  const Tensor x = rnd({4, 6}, g), w = rnd({3, 6}, g), b = rnd({3}, g);
  expect_gradcheck([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  expect_gradcheck([](const std::vector<Tensor>& v) { return linear(v[0], v[1]); }, {x, w});
  // Fused ReLU: ReLU has no derivative at 0, so shift each output's bias until every pre-activation of
  // that output lies at least 0.05 from the kink (the central differences move it by about 1e-6). Four
  // values exclude at most 0.4 of the shifts in [-0.5, 0.5], so a shift always exists, and the check
  // always runs; both sides of the kink are then checked wherever the column has both signs.
  const std::vector<double> z = matmul(x, w, false, true).to_double();  // [4, 3]: x w^T
  std::vector<double> bb = b.to_double();
  for (int j = 0; j < 3; ++j) {
    const auto clear = [&](double bias) {
      for (int i = 0; i < 4; ++i)
        if (std::abs(z[i * 3 + j] + bias) < 0.05) return false;
      return true;
    };
    double shifted = bb[j];
    for (int k = 0; k <= 100 && !clear(shifted); ++k) shifted = bb[j] - 0.5 + 0.01 * k;
    ASSERT_TRUE(clear(shifted)) << "no bias shift keeps output " << j << " away from the kink";
    bb[j] = shifted;
  }
  const Tensor b_clear = Tensor::from_vector(bb, {3});
  expect_gradcheck([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2], true); }, {x, w, b_clear});
}

TEST_F(Gradcheck, ShapeViewsAndCast) {
  const Tensor a = rnd({2, 3, 2}, g);
  expect_gradcheck([](const std::vector<Tensor>& x) { return reshape(x[0], {3, 4}); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return flatten(x[0]); }, {a});
  expect_gradcheck([](const std::vector<Tensor>& x) { return x[0].slice_rows(1, 2); }, {a});
  // cast f64 -> f32 -> f64 loses precision, so check with a tolerance that f32 can meet.
  GradcheckOptions loose;
  loose.eps = 1e-3;
  loose.atol = 1e-4;
  loose.rtol = 1e-3;
  const GradcheckResult r =
      gradcheck([](const std::vector<Tensor>& x) { return cast(cast(x[0], DType::f32), DType::f64); }, {a}, loose);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST_F(Gradcheck, LogSoftmaxNllCrossEntropy) {
  const Tensor logits = rnd({4, 7}, g, -3.0, 3.0);
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 6, 3, 3}, {4});
  expect_gradcheck([](const std::vector<Tensor>& x) { return log_softmax(x[0]); }, {logits});
  GradcheckOptions skip_labels;
  skip_labels.skip = {1};
  expect_gradcheck([](const std::vector<Tensor>& x) { return nll_loss(log_softmax(x[0]), x[1]); }, {logits, labels},
                   skip_labels);
  expect_gradcheck([](const std::vector<Tensor>& x) { return cross_entropy(x[0], x[1]); }, {logits, labels},
                   skip_labels);
}

TEST_F(Gradcheck, DetectsAWrongGradient) {
  // The checker itself must fail on a wrong backward: exp whose gradient is claimed to be 2*exp.
  const Tensor a = rnd({3}, g);
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) {
        Tensor e = exp(x[0]);
        return add(e, sub(e, e.detach()));  // value e, gradient 2e
      },
      {a});
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.max_abs_error, 0.3);  // |2e - e| = e, at least e^-1 on [-1, 1]
  // One element: the report names it, its error and the numeric derivative, and the error is the
  // numeric value itself (the analytic one claims twice as much).
  const GradcheckResult at0 = gradcheck(
      [](const std::vector<Tensor>& x) {
        Tensor e = exp(x[0]);
        return add(e, sub(e, e.detach()));
      },
      {Tensor::zeros({1}, DType::f64)});
  const std::string worst = "worst element 0 |analytic - numeric| = ", numeric = "(numeric ";
  const size_t w_at = at0.report.find(worst), n_at = at0.report.find(numeric);
  ASSERT_TRUE(w_at != std::string::npos && n_at != std::string::npos) << at0.report;
  const double err = std::strtod(at0.report.c_str() + w_at + worst.size(), nullptr);
  const double num = std::strtod(at0.report.c_str() + n_at + numeric.size(), nullptr);
  EXPECT_NE(num, 0.0) << at0.report;
  EXPECT_NEAR(err, std::fabs(num), 1e-5 * std::fabs(num)) << at0.report;
  EXPECT_NEAR(at0.max_abs_error, err, 1e-5 * err) << at0.report;
  // Every input is checked, not only the first: here only the second one's gradient is wrong
  // (value x0 * x1, gradient with respect to x1 claimed to be x0 + exp(x1)).
  const Tensor b = rnd({3}, g);
  const GradcheckResult second = gradcheck(
      [](const std::vector<Tensor>& x) {
        const Tensor e = exp(x[1]);
        return add(mul(x[0], x[1]), sub(e, e.detach()));
      },
      {a, b});
  EXPECT_FALSE(second.ok);
  EXPECT_NE(second.report.find("input 1 element"), std::string::npos) << second.report;
  EXPECT_EQ(second.report.find("input 0 element"), std::string::npos) << second.report;
}

// A skipped input is handed to the function as it is: a copy in its own dtype (the others are f64
// copies), never perturbed and never checked. Here input 1 carries a wrong gradient (its term is 0 in
// value, e in gradient), and skipping it makes the check pass. The function also writes its skipped
// input in place, as batch norm writes its running statistics: the caller's tensor is not touched.
TEST_F(Gradcheck, SkippedInputsAreCopiedAsTheyAreAndNotChecked) {
  const Tensor a = Tensor::uniform({3}, g, -1.0, 1.0, DType::f32), b = Tensor::uniform({3}, g, -1.0, 1.0, DType::f32);
  const std::vector<float> b_before = b.to_vector();
  std::vector<DType> seen;
  const GradcheckFn f = [&](const std::vector<Tensor>& x) {
    seen = {x[0].dtype(), x[1].dtype()};
    Tensor stats = x[1];  // a handle on the same storage
    stats.copy_(Tensor::zeros({3}));
    const Tensor e = exp(cast(x[1], DType::f64));
    return add(mul(x[0], 2.0), sub(e, e.detach()));
  };
  GradcheckOptions opt;
  opt.skip = {1};
  const GradcheckResult r = gradcheck(f, {a, b}, opt);
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(r.report.find("input 1"), std::string::npos) << r.report;
  EXPECT_EQ(seen, (std::vector<DType>{DType::f64, DType::f32}));
  EXPECT_EQ(b.to_vector(), b_before);
  EXPECT_FALSE(gradcheck(f, {a, b}).ok);  // not skipped, its wrong gradient is found
}

TEST_F(Gradcheck, RefusesAFunctionWithoutAFloatingResult) {
  const Tensor a = rnd({3}, g);
  const std::vector<GradcheckFn> bad = {
      [](const std::vector<Tensor>&) { return Tensor(); },
      [](const std::vector<Tensor>& x) { return argmax(reshape(x[0], {1, 3})); },  // i32
  };
  for (const GradcheckFn& f : bad) {
    const std::string e = test::error_of([&] { gradcheck(f, {a}); });
    EXPECT_NE(e.find("gradcheck: the function must return a floating tensor"), std::string::npos) << e;
  }
}

// The tolerance is atol + rtol * |numeric|. f = 1000 x^3 at x = 1 with eps = 0.01: the central
// difference is off by 1000 eps^2 = 0.1 on a derivative of 3000 (both times the weight w of the
// scalarization), a relative error of 3.3e-5. rtol = 1e-3 accepts it at this scale; atol = 1e-3
// alone refuses it.
TEST_F(Gradcheck, RelativeToleranceScalesWithTheNumericGradient) {
  const Tensor ones = Tensor::ones({4}, DType::f64);
  const GradcheckFn cube = [](const std::vector<Tensor>& x) { return mul(mul(mul(x[0], x[0]), x[0]), 1000.0); };
  GradcheckOptions rel;
  rel.eps = 0.01;
  rel.atol = 0.0;
  rel.rtol = 1e-3;
  const GradcheckResult r = gradcheck(cube, {ones}, rel);
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_GT(r.max_abs_error, 1e-3) << r.report;  // |w| > 0.01 for one of the 4 weights at least
  EXPECT_LE(r.max_abs_error, 0.1 + 1e-6) << r.report;
  GradcheckOptions abs_only = rel;
  abs_only.atol = 1e-3;
  abs_only.rtol = 0.0;
  EXPECT_FALSE(gradcheck(cube, {ones}, abs_only).ok);
}

// A gradient exact to the bit everywhere (f = 0 * x: both sides are 0) has no worst element: the
// report is empty, rather than naming an element that is no worse than the others.
TEST_F(Gradcheck, AnExactGradientHasNoWorstElement) {
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], 0.0); }, {rnd({3}, g)});
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.max_abs_error, 0.0);
  EXPECT_EQ(r.report, "");
}

}  // namespace
