// Forward values, the precision policy, and argument errors of the ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "framework/ops.h"
#include "tests/framework/seed_dtypes.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector(v, s); }

TEST(Ops, BroadcastingBinaryOps) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor bias = f32({10, 20, 30}, {3});
  EXPECT_EQ((a + bias).to_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor col = f32({2, 4}, {2, 1});
  EXPECT_EQ((a / col).to_vector(), (std::vector<float>{0.5f, 1, 1.5f, 1, 1.25f, 1.5f}));
  EXPECT_EQ((a - 1.0).to_vector(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ((2.0 * a).to_vector(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_EQ((a / 4.0).to_vector(), (std::vector<float>{0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f}));
  EXPECT_EQ((a + 0.5).to_vector(), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}));
  EXPECT_EQ((a * 3.0).to_vector(), (std::vector<float>{3, 6, 9, 12, 15, 18}));
  EXPECT_THROW(a + f32({1, 2}, {2}), Error);
  try {
    a* f32({1, 2}, {2});
    ADD_FAILURE() << "mul of [2, 3] and [2] did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("mul:", 0), 0u) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  }
}

// Random broadcast patterns of up to 5 dimensions against an index-by-index reference. Each operand
// independently drops leading dimensions and keeps others at 1, so a broadcast operand often has
// several dimensions of its own, whose strides must multiply up (a [2, 1, 3] operand read as
// [4, 2, 5, 3] steps 3 elements per step of its first dimension, not 1).
TEST(Ops, BroadcastingMatchesAnIndexByIndexReference) {
  Generator g(hl::test::fresh_seed());
  for (int trial = 0; trial < 300; ++trial) {
    const size_t nd = 1 + g.below(5);
    Shape full(nd);
    for (auto& d : full) d = 1 + static_cast<int64_t>(g.below(4));
    auto operand_shape = [&] {
      const size_t kept = g.below(nd + 1);  // trailing dimensions it has
      Shape s;
      for (size_t i = nd - kept; i < nd; ++i) s.push_back(g.below(3) == 0 ? 1 : full[i]);
      return s;
    };
    const Shape sa = operand_shape(), sb = operand_shape();
    const size_t n = std::max(sa.size(), sb.size());
    Shape out(n);
    auto dim_of = [n](const Shape& s, size_t i) { return i < n - s.size() ? 1 : s[i - (n - s.size())]; };
    for (size_t i = 0; i < n; ++i) out[i] = std::max(dim_of(sa, i), dim_of(sb, i));
    // The element of an operand that output element `flat` reads: its own index in each dimension
    // it has, 0 where it has size 1.
    auto source = [&](const Shape& s, int64_t flat) {
      int64_t idx = 0, stride = 1;
      for (size_t i = n; i-- > 0;) {
        const int64_t coord = flat % out[i];
        flat /= out[i];
        if (i < n - s.size()) continue;
        const int64_t d = s[i - (n - s.size())];
        if (d != 1) idx += coord * stride;
        stride *= d;
      }
      return idx;
    };
    const Tensor a = Tensor::uniform(sa, g, -2.0, 2.0, DType::f64);
    const Tensor b = Tensor::uniform(sb, g, 0.5, 2.0, DType::f64);
    const std::vector<double> va = a.to_double(), vb = b.to_double();
    const Tensor sum = a + b, diff = a - b, prod = a * b, quot = a / b, back = b - a;
    ASSERT_EQ(sum.shape(), out) << "a " << shape_str(sa) << " b " << shape_str(sb);
    ASSERT_EQ(back.shape(), out);
    const std::vector<double> vs = sum.to_double(), vd = diff.to_double(), vp = prod.to_double(),
                              vq = quot.to_double(), vr = back.to_double();
    bool all_equal = true;
    for (int64_t e = 0; e < static_cast<int64_t>(vs.size()) && all_equal; ++e) {
      const double x = va[static_cast<size_t>(source(sa, e))], y = vb[static_cast<size_t>(source(sb, e))];
      const size_t u = static_cast<size_t>(e);
      all_equal = vs[u] == x + y && vd[u] == x - y && vp[u] == x * y && vq[u] == x / y && vr[u] == y - x;
      EXPECT_TRUE(all_equal) << "a " << shape_str(sa) << " b " << shape_str(sb) << " element " << e;
    }
  }
}

// The promotion table: the wider floating dtype wins, whichever side it is on.
TEST(Ops, PromotionPicksTheWiderDtypeOnEitherSide) {
  const DType order[] = {DType::f16, DType::f32, DType::f64};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(promote(order[i], order[j]), order[std::max(i, j)]) << i << " " << j;
      const Tensor x = Tensor::ones({2}, order[i]), y = Tensor::ones({2}, order[j]);
      EXPECT_EQ((x * y).dtype(), order[std::max(i, j)]) << i << " " << j;
    }
}

// A cast to or from an integer dtype is not differentiable: its result is not part of the graph.
TEST(Ops, IntegerCastsLeaveTheGraph) {
  Tensor x = f32({1.5f, -2.0f}, {2});
  x.requires_grad_();
  const Tensor i = cast(x, DType::i32);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_TRUE(i.is_leaf());
  EXPECT_EQ(i.to_int(), (std::vector<int32_t>{1, -2}));
  const Tensor back = cast(i, DType::f32);
  EXPECT_FALSE(back.requires_grad());
  const Tensor h = cast(x, DType::f16);  // floating to floating is differentiable
  EXPECT_TRUE(h.requires_grad());
  EXPECT_FALSE(h.is_leaf());
}

TEST(Ops, PrecisionPolicy) {
  Tensor h = f32({1, 2}, {2}).to(DType::f16);
  Tensor f = f32({3, 4}, {2});
  EXPECT_EQ((h + f).dtype(), DType::f32);   // f16 + f32 promotes to f32
  EXPECT_EQ((h * h).dtype(), DType::f16);
  EXPECT_EQ(sum(h).dtype(), DType::f32);    // reductions compute and return f32
  EXPECT_EQ(mean(h).dtype(), DType::f32);
  Tensor a = Tensor::ones({2, 3}, DType::f16), b = Tensor::ones({3, 4}, DType::f16);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f16);  // GEMM keeps f16 (f32 accumulation inside)
  Tensor logits = f32({12.0f, 0.0f}, {1, 2}).to(DType::f16);
  Tensor lsm = log_softmax(logits);
  EXPECT_EQ(lsm.dtype(), DType::f32);  // log-softmax computes in f32
  for (float v : lsm.to_vector()) EXPECT_TRUE(std::isfinite(v));  // exp(12) > 65504, yet finite
  EXPECT_THROW(matmul(a, Tensor::ones({3, 4})), Error);  // matmul does not mix dtypes silently
}

TEST(Ops, SumOfManyF16OnesIsExact) {
  // 4096 f16 ones: an f16 accumulator would stall at 2048 (2048 + 1 rounds back to 2048).
  Tensor ones = Tensor::ones({4096}, DType::f16);
  EXPECT_EQ(sum(ones).item(), 4096.0);
  Tensor a = Tensor::ones({1, 4096}, DType::f16), b = Tensor::ones({4096, 1}, DType::f16);
  EXPECT_EQ(matmul(a, b).item(), 4096.0);  // f32 accumulation inside the GEMM; 4096 fits in f16
}

TEST(Ops, ReductionsOverDims) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a, {0}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(a, {1}).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_EQ(sum(a, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(mean(a).item(), 3.5);
  EXPECT_EQ(mean(a).shape(), Shape{});  // over every element: a scalar, as in PyTorch
  EXPECT_EQ(sum(a).shape(), Shape{});
  EXPECT_EQ(sum_to(a, {1, 3}).to_vector(), (std::vector<float>{5, 7, 9}));
  EXPECT_THROW(sum(a, {2}), Error);

  // Up to 8 dimensions (the kernels' limit), in reductions and in broadcasting; a clear refusal past it.
  Tensor eight = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                                     {1, 2, 1, 2, 1, 2, 1, 2});
  EXPECT_EQ(sum(eight).item(), 136.0);
  EXPECT_EQ(sum(eight, {1, 7}).shape(), (Shape{1, 1, 2, 1, 2, 1}));
  EXPECT_EQ(sum(eight, {1, 7}).to_vector(), (std::vector<float>{22, 30, 38, 46}));  // 1+2+9+10, ...
  EXPECT_EQ(mean(eight, {-1}, true).shape(), (Shape{1, 2, 1, 2, 1, 2, 1, 1}));
  EXPECT_EQ((eight + f32({100, 200}, {2})).to_vector()[15], 216.0f);
  const Tensor nine = Tensor::ones({1, 1, 1, 1, 1, 1, 1, 1, 2});
  for (const auto& attempt : {std::function<void()>([&] { sum(nine); }),
                              std::function<void()>([&] { mean(nine, {8}); })}) {
    try {
      attempt();
      ADD_FAILURE() << "a 9-dimensional reduction was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("at most 8 dimensions, got f32[1, 1, 1, 1, 1, 1, 1, 1, 2]"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Ops, MatmulLayouts) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});   // [[1,2,3],[4,5,6]]
  Tensor b = f32({1, 0, 0, 1, 1, 1}, {3, 2});   // [[1,0],[0,1],[1,1]]
  EXPECT_EQ(matmul(a, b).to_vector(), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(matmul(a, a, false, true).to_vector(), (std::vector<float>{14, 32, 32, 77}));  // a a^T
  EXPECT_EQ(matmul(a, a, true, false).shape(), (Shape{3, 3}));                            // a^T a
  EXPECT_THROW(matmul(a, a), Error);  // 3 vs 2
  EXPECT_THROW(matmul(f32({1, 2}, {2}), a), Error);
}

TEST(Ops, LinearMatchesMatmulPlusBias) {
  Generator g(hl::test::fresh_seed());
  Tensor x = Tensor::randn({5, 7}, g), w = Tensor::randn({3, 7}, g), b = Tensor::randn({3}, g);
  const auto y = linear(x, w, b).to_vector();
  const auto ref = (matmul(x, w, false, true) + b).to_vector();
  // The fused bias rounds once, matmul then add twice: an ulp of |y| (< 2^-19 for these |y| < 16)
  // apart at most; 1e-5 adds room for the two GEMM calls summing the 7 products in another order.
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-5);
  const auto yr = linear(x, w, b, true).to_vector();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(yr[i], std::max(y[i], 0.0f));
  EXPECT_THROW(linear(x, Tensor::randn({3, 6}, g)), Error);
  EXPECT_THROW(linear(x, w, Tensor::randn({4}, g)), Error);
}

// backward(seed) takes a seed of any floating dtype, and a sum of gradients may promote, so a fused
// linear + ReLU can receive a gradient wider than its output. It must convert it before its f16
// ReLU-backward kernel reads it: an f32 seed and the same values in f16 give the same gradients.
TEST(Ops, FusedLinearReluConvertsAWiderGradient) {
  Generator g(hl::test::fresh_seed());
  const Tensor x0 = Tensor::randn({4, 6}, g, DType::f16), w0 = Tensor::randn({3, 6}, g, DType::f16),
               b0 = Tensor::randn({3}, g, DType::f16);
  const Tensor seed = Tensor::randn({4, 3}, g, DType::f16);  // f16 values: exact in f32 as well
  std::vector<std::vector<double>> grads[2];
  for (int wide = 0; wide < 2; ++wide) {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
    const Tensor y = linear(x, w, b, true);
    y.backward(wide ? seed.to(DType::f32) : seed);
    for (const Tensor* t : {&x, &w, &b}) {
      ASSERT_TRUE(t->grad().defined());
      EXPECT_EQ(t->grad().dtype(), DType::f16);
      grads[wide].push_back(t->grad().to_double());
    }
  }
  EXPECT_EQ(grads[1], grads[0]);
}

TEST(Ops, CrossEntropyValues) {
  // Uniform logits: loss = log(C).
  Tensor logits = Tensor::zeros({4, 10});
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 9}, {4});
  EXPECT_NEAR(cross_entropy(logits, labels).item(), std::log(10.0), 1e-6);
  Tensor l2 = f32({0, 0, 100, 0}, {2, 2});  // row 1 is confidently class 0
  Tensor y2 = Tensor::from_vector(std::vector<int32_t>{1, 0}, {2});
  EXPECT_NEAR(cross_entropy(l2, y2).item(), std::log(2.0) / 2.0, 1e-6);
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 10}, {4})), Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{0, 1}, {2})), Error);
  EXPECT_THROW(cross_entropy(logits, Tensor::zeros({4})), Error);  // labels must be i32
}

TEST(Ops, MixedDtypeOpsGiveEachInputAGradientOfItsOwnDtype) {
  // f16 + f32 is f32 (DESIGN.md §3); the gradient of the f16 side is summed and cast back to f16.
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, DType::f16).requires_grad_();
  Tensor b = f32({0.5f}, {1}).requires_grad_();  // broadcast against a
  const Tensor y = add(a, b);
  ASSERT_EQ(y.dtype(), DType::f32);
  sum(mul(y, y)).backward();  // d/da = 2y = {3, 5, 7}; d/db = their sum
  ASSERT_TRUE(a.grad().defined() && b.grad().defined());
  EXPECT_EQ(a.grad().dtype(), DType::f16);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{15}));
}

TEST(Ops, CrossEntropyTakesAnUpstreamGradientOfAnotherDtype) {
  // The fused backward reads g in the statistics' dtype (f32 here): an f64 or f16 upstream gradient
  // is converted first, and 2 is exact in each.
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{2, 0}, {2});
  const auto grad_with = [&](DType seed_t) {
    Tensor logits = f32({0.5f, -1, 2, 3, 0.25f, -0.5f}, {2, 3}).requires_grad_();
    cross_entropy(logits, labels).backward(Tensor::scalar(2.0, seed_t));
    return logits.grad().to_double();
  };
  const std::vector<double> want = grad_with(DType::f32);
  EXPECT_EQ(grad_with(DType::f64), want);
  EXPECT_EQ(grad_with(DType::f16), want);
}

TEST(Ops, UnfusedCrossEntropyTakesABatchOfOneAndRefusesAnEmptyOne) {
  const Tensor one = f32({1, 2, 3}, {1, 3});
  const Tensor label = Tensor::from_vector(std::vector<int32_t>{2}, {1});
  EXPECT_NEAR(cross_entropy_unfused(one, label).item(), cross_entropy(one, label).item(), 1e-6);
  const Tensor none = Tensor::zeros({0, 3});
  const Tensor no_labels = Tensor::from_vector(std::vector<int32_t>{}, {0});
  for (const bool fused : {false, true}) {
    const std::string e =
        test::error_of([&] { fused ? cross_entropy(none, no_labels) : cross_entropy_unfused(none, no_labels); });
    EXPECT_NE(e.find("cross_entropy: empty batch f32[0, 3] on cpu"), std::string::npos) << e;
  }
}

TEST(Ops, LogSoftmaxOfAllMinusInfinityIsNaN) {
  // Documented behaviour: no finite maximum, so the row is NaN (as in PyTorch), not a crash.
  Tensor t = f32({-INFINITY, -INFINITY, 0.0f, 1.0f}, {2, 2});
  const auto y = log_softmax(t).to_vector();
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_NEAR(y[3], -std::log1p(std::exp(-1.0)), 1e-6);
}

TEST(Ops, ReluKeepsNaNVisible) {
  // An overflow that became NaN must survive the activation, or the loss scaler cannot see it.
  Tensor t = f32({NAN, -1.0f, 2.0f, INFINITY}, {4});
  const auto y = relu(t).to_vector();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
  EXPECT_TRUE(std::isinf(y[3]));
  Tensor w = Tensor::ones({1, 4});
  const auto fused = linear(f32({NAN, 1, 1, 1}, {1, 4}), w, Tensor(), true).to_vector();
  EXPECT_TRUE(std::isnan(fused[0]));  // the GEMM's ReLU epilogue too
}

TEST(Ops, ArgmaxAndAccuracy) {
  Tensor logits = f32({0.1f, 0.9f, 0.5f, 0.2f, 0.3f, 0.3f}, {3, 2});
  EXPECT_EQ(argmax(logits).to_int(), (std::vector<int32_t>{1, 0, 0}));  // ties -> first index
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 1, 0}, {3});
  EXPECT_NEAR(accuracy(logits, labels), 2.0 / 3.0, 1e-12);
}

// The backward functions that hand g to a kernel read it in one dtype, so each converts it first
// (tests/framework/seed_dtypes.h).
TEST(Ops, BackwardsConvertAnUpstreamGradientOfAnotherDtype) {
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{2, 0}, {2});
  test::expect_seed_dtype_does_not_matter(
      {
          {"relu", [](const Tensor& x) { return relu(x); }},
          {"log_softmax", [](const Tensor& x) { return log_softmax(x); }},
          {"nll_loss", [&](const Tensor& x) { return nll_loss(log_softmax(x), labels); }},
      },
      f32({0.5f, -1, 2, 3, 0.25f, -0.5f}, {2, 3}));
  // matmul (every layout) and linear without the fused ReLU hand g to a GEMM, whose operands share a
  // dtype: they refused another seed's with matmul's "operands must share a dtype" until 2026-11-29.
  const Tensor w = f32({1, -2, 0.5f, 3, -1, 2}, {2, 3});
  const Tensor b = f32({0.25f, -4}, {2});
  test::expect_seed_dtype_does_not_matter(
      {
          {"matmul NN", [&](const Tensor& x) { return matmul(x, f32({1, 2, -1, 0.5f, 3, -2}, {3, 2})); }},
          {"matmul NT", [&](const Tensor& x) { return matmul(x, w, false, true); }},
          {"matmul TN", [&](const Tensor& x) { return matmul(x, w, true, false); }},
          {"matmul TT", [&](const Tensor& x) { return matmul(x, f32({1, 2, -1, 0.5f, 3, -2}, {3, 2}), true, true); }},
          {"linear", [&](const Tensor& x) { return linear(x, w, b); }},
          {"weight of linear", [&](const Tensor& x) { return linear(f32({1, 2, 3, 4, 5, 6}, {2, 3}), x); }},
      },
      f32({0.5f, -1, 2, 3, 0.25f, -0.5f}, {2, 3}));
}

// An f16 model's output seeded with backward's default f32 ones (the user's first try): the GEMMs get
// f16 gradients, the same as with an f16 seed.
TEST(Ops, HalfLinearTakesAnF32Seed) {
  const auto grads = [](DType seed_type) {
    Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}, DType::f16).requires_grad_();
    Tensor w = Tensor::from_vector(std::vector<float>{0.5f, -1, 2, 0.25f, 1, 1}, {3, 2}, DType::f16).requires_grad_();
    const Tensor y = linear(x, w);
    y.backward(Tensor::ones(y.shape(), seed_type));
    return std::make_pair(x.grad().to_double(), w.grad().to_double());
  };
  EXPECT_EQ(grads(DType::f32), grads(DType::f16));
}

// Linear with no input features is its bias; with the fused ReLU, the bias through the ReLU.
TEST(Ops, LinearOfNoFeaturesAppliesTheFusedRelu) {
  const Tensor b = f32({-1, 0.5f, -2}, {3});
  EXPECT_EQ(linear(Tensor::zeros({2, 0}), Tensor::zeros({3, 0}), b, true).to_vector(),
            (std::vector<float>{0, 0.5f, 0, 0, 0.5f, 0}));
  EXPECT_EQ(linear(Tensor::zeros({2, 0}), Tensor::zeros({3, 0}), b, false).to_vector(),
            (std::vector<float>{-1, 0.5f, -2, -1, 0.5f, -2}));
}

// x^0 = 1 has gradient 0 everywhere, x = 0 included (0 * 0^-1 would be NaN).
TEST(Ops, PowOfZeroHasAZeroGradientAtZero) {
  Tensor x = f32({0, 2, -3}, {3}).requires_grad_();
  sum(pow(x, 0.0)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0, 0}));
  Tensor y = f32({0, 2}, {2}).requires_grad_();
  sum(pow(y, 2.0)).backward();
  EXPECT_EQ(y.grad().to_vector(), (std::vector<float>{0, 4}));
}

// a / s rounds the quotient once (f32, f64), where a * (1/s) is a last bit off for about a third of
// quotients; a power of two's reciprocal is exact either way. f16 rounds a * (1/s) from FP32 once.
TEST(Ops, DivisionByANumberRoundsTheQuotientOnce) {
  std::vector<double> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i + 1);
  for (DType t : {DType::f32, DType::f64}) {
    const Tensor a = Tensor::from_vector(v, {1000}, t);
    for (double s : {3.0, 7.0, 49.0, 10.0, 0.1, 0.5, -4.0}) {
      const std::vector<double> got = (a / s).to_double();
      for (size_t i = 0; i < v.size(); ++i) {
        const double want = t == DType::f32 ? static_cast<double>(static_cast<float>(v[i]) / static_cast<float>(s))
                                            : v[i] / s;
        ASSERT_EQ(got[i], want) << dtype_name(t) << " " << v[i] << " / " << s;
      }
    }
  }
  EXPECT_EQ((Tensor::from_vector(std::vector<double>{49}, {1}, DType::f64) / 49.0).to_double()[0], 1.0);
  // f16: the quotient 4130 is a tie between 4128 and 4132, and rounds to even; dividing by f16(0.1)
  // (0.0999756, PyTorch's way) would give 4131.0, and 4132.
  const Tensor h = Tensor::from_vector(std::vector<float>{1, 3, 100, 413}, {4}, DType::f16) / 0.1;
  EXPECT_EQ(h.to_vector(), (std::vector<float>{10, 30, 1000, 4128}));

  // Powers of two at the ends of the exponent range: the quotient is a / s in the dtype, as div() gives
  // (a multiply by 1/s gave inf where 1/s overflows the dtype: f64's 1 / 2^-1030, f32's 2^140).
  const auto quotient = [](double x, DType t, double s) { return (Tensor::full({1}, x, t) / s).to_double()[0]; };
  EXPECT_EQ(quotient(0x1p-100, DType::f64, 0x1p-1030), 0x1p930);
  EXPECT_EQ(quotient(0x1p-100, DType::f32, 0x1p-140), 0x1p40);
  EXPECT_EQ(quotient(0x1p-100, DType::f32, 0x1p-149), 0x1p49);   // f32's smallest subnormal
  EXPECT_EQ(quotient(0x1p-100, DType::f32, 0x1p-128), 0x1p28);    // the first exponents past the multiply's
  EXPECT_EQ(quotient(0x1p-100, DType::f32, 0x1p-129), 0x1p29);
  EXPECT_EQ(quotient(0x1p100, DType::f32, 0x1p128), 0.0);
  EXPECT_EQ(quotient(0x1p-100, DType::f64, 0x1p-1024), 0x1p924);
  EXPECT_EQ(quotient(0x1p100, DType::f32, 0x1p130), 0.0);        // 2^130 is inf in f32: a / inf, as div()
  EXPECT_EQ(quotient(0x1p100, DType::f32, -0x1p127), -0x1p-27);  // f32's largest power of two
  EXPECT_EQ(quotient(3.0, DType::f32, 0x1p-126), 0x1.8p127);     // and its smallest normal one
  EXPECT_EQ(quotient(0x1p1000, DType::f64, 0x1p1023), 0x1p-23);   // 1 / 2^1023 is a subnormal double, exact
  EXPECT_EQ(quotient(1.0, DType::f64, 0x1p-1074), std::numeric_limits<double>::infinity());  // 2^1074 overflows
  // An integer tensor is refused under the name the user wrote, for any s.
  for (const double s : {2.0, 3.0}) {
    const std::string e = test::error_of([&] { (void)(Tensor::zeros({2}, DType::i32) / s); });
    EXPECT_NE(e.find("div: needs a floating tensor, got i32"), std::string::npos) << e;
  }
}

// A dim named twice (1 and -1 of a 2-D tensor) is an error that names it, as in PyTorch.
TEST(Ops, ReductionRefusesADimNamedTwice) {
  const Tensor a = Tensor::zeros({2, 3});
  try {
    (void)sum(a, {1, -1});
    FAIL() << "sum over {1, -1} of a 2-D tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dimension 1 of"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("named twice"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)mean(a, {0, 0}), Error);
  EXPECT_EQ(sum(a, {0, 1}).shape(), Shape{});
}

// sum_to undoes a broadcast: a size-1 dim against a 0-sized one sums nothing (zeros), and the result
// keeps the input's dtype (the reduction itself sums f16 in f32).
TEST(Ops, SumToAnEmptyBroadcastAndKeepsTheDtype) {
  const Tensor zeros = sum_to(Tensor::zeros({0, 3}), {1, 3});
  EXPECT_EQ(zeros.shape(), (Shape{1, 3}));
  EXPECT_EQ(zeros.to_vector(), (std::vector<float>{0, 0, 0}));
  Tensor a = f32({1, 2, 3}, {1, 3}).requires_grad_();
  sum(add(a, Tensor::zeros({0, 3}))).backward();  // the broadcast side receives an empty gradient
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{0, 0, 0}));
  const Tensor h = sum_to(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::f16), {1, 3});
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(h.to_vector(), (std::vector<float>{5, 7, 9}));
}

TEST(Ops, LinearNamesTheFeaturesThatDoNotMatch) {
  const Tensor x = Tensor::zeros({2, 5}), w = Tensor::zeros({3, 5});
  std::string e = test::error_of([&] { linear(x, Tensor::zeros({3, 4})); });
  EXPECT_NE(e.find("linear: input f32[2, 5] on cpu does not match weight f32[3, 4] on cpu (5 input features vs 4)"),
            std::string::npos)
      << e;
  e = test::error_of([&] { linear(x, w, Tensor::zeros({5})); });
  EXPECT_NE(e.find("linear: bias f32[5] on cpu does not match weight f32[3, 5] on cpu (needs [3])"),
            std::string::npos)
      << e;
}

// Rows and columns differ, so a kernel handed one for the other is seen; every element is checked.
TEST(Ops, LogSoftmaxOfATallMatrix) {
  const std::vector<float> v{1, 2, -1, 0.5f, 3, 3};
  const auto y = log_softmax(f32(v, {3, 2})).to_double();
  ASSERT_EQ(y.size(), 6u);
  for (int r = 0; r < 3; ++r) {
    const double a = v[2 * r], b = v[2 * r + 1], lse = std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
    EXPECT_NEAR(y[2 * r], a - lse, 1e-6) << r;
    EXPECT_NEAR(y[2 * r + 1], b - lse, 1e-6) << r;
  }
}

TEST(Ops, LossesCheckEveryLabelAndNeedAClass) {
  const Tensor logits = Tensor::zeros({2, 3});
  const Tensor first_bad = Tensor::from_vector(std::vector<int32_t>{3, 0}, {2});
  for (const bool fused : {false, true}) {
    const std::string e =
        test::error_of([&] { fused ? cross_entropy(logits, first_bad) : cross_entropy_unfused(logits, first_bad); });
    EXPECT_NE(e.find("label 3 at row 0 is outside [0, 3)"), std::string::npos) << e;
  }
  const std::string e = test::error_of(
      [&] { cross_entropy(Tensor::zeros({2, 0}), Tensor::from_vector(std::vector<int32_t>{0, 0}, {2})); });
  EXPECT_NE(e.find("cross_entropy: needs at least one class, got f32[2, 0]"), std::string::npos) << e;
}

// One column, one row: the smallest argmax and accuracy there are.
TEST(Ops, ArgmaxOfOneColumnAndAccuracyOfOneRow) {
  EXPECT_EQ(argmax(f32({0.5f, -2}, {2, 1})).to_int(), (std::vector<int32_t>{0, 0}));
  const Tensor one = f32({0.1f, 0.9f}, {1, 2});
  EXPECT_EQ(accuracy(one, Tensor::from_vector(std::vector<int32_t>{1}, {1})), 1.0);
  EXPECT_EQ(accuracy(one, Tensor::from_vector(std::vector<int32_t>{0}, {1})), 0.0);
}

TEST(Ops, DeviceMismatchIsAnError) {
  if (!hl::runtime::cuda_available()) GTEST_SKIP() << "needs a GPU: " << hl::runtime::cuda_unavailable_reason();
  Tensor a = Tensor::ones({2}), b = Tensor::ones({2}, DType::f32, Device::cuda);
  EXPECT_THROW(a + b, Error);
}

}  // namespace
