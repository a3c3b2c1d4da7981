// Convolutional-network ops and modules (framework/ops_cnn.h, framework/nn.h): float64 gradient
// checks for every op, the batch-norm numerics the paper's policy asks for (FP32 statistics from FP16
// input), dropout's mask, the model builders, a LeNet step in fp32 and mixed, checkpoints with
// batch-norm buffers, and errors that name the op and the shapes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "framework/amp.h"
#include "framework/autograd.h"
#include "framework/checkpoint.h"
#include "framework/gradcheck.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/ops_cnn.h"
#include "framework/optim.h"
#include "kernels/conv.h"
#include "tests/framework/seed_dtypes.h"
#include "tests/test_util.h"

namespace {

using namespace hl;
namespace fs = std::filesystem;

Tensor rnd(const Shape& s, Generator& g, double lo = -1.0, double hi = 1.0, DType t = DType::f64) {
  return Tensor::uniform(s, g, lo, hi, t);
}

void expect_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& in, GradcheckOptions opt = {}) {
  const GradcheckResult r = gradcheck(f, in, opt);
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_LT(r.max_abs_error, 1e-6) << r.report;
}

using test::error_of;

class Cnn : public ::testing::Test {
 protected:
  Generator g{test::fresh_seed()};
};

// ---- gradient checks (f64, CPU) ----

TEST_F(Cnn, GradcheckConv2dWithBiasStridePadding) {
  struct Case {
    Shape x, w;
    Size2 stride, pad;
  };
  const Case cases[] = {
      {{1, 1, 5, 5}, {2, 1, 3, 3}, {1, 1}, {0, 0}},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {2, 2}, {1, 1}},
      {{1, 2, 6, 7}, {3, 2, 5, 5}, {1, 2}, {2, 2}},
      {{2, 3, 4, 4}, {5, 3, 1, 1}, {1, 1}, {0, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const Tensor x = rnd(c.x, g), w = rnd(c.w, g), b = rnd({c.w[0]}, g);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], c.stride, c.pad); },
                     {x, w, b});
    expect_gradcheck([&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor(), c.stride, c.pad); },
                     {x, w});
  }
}

TEST_F(Cnn, NonSquareKernelsStridesAndPaddingByHand) {
  // x = 1..9 in a 3x3 plane. A 2x1 kernel (1 over 10) adds ten times the value below; a 1x2 kernel
  // (1, 10) ten times the value to the right. Square kernels (and gradchecks, which run the same
  // arguments forward and backward) cannot tell height from width.
  std::vector<float> xv(9);
  for (int i = 0; i < 9; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  const Tensor x = Tensor::from_vector(xv, {1, 1, 3, 3});
  const Tensor tall = conv2d(x, Tensor::from_vector(std::vector<float>{1, 10}, {1, 1, 2, 1}));
  EXPECT_EQ(tall.shape(), (Shape{1, 1, 2, 3}));
  EXPECT_EQ(tall.to_vector(), (std::vector<float>{41, 52, 63, 74, 85, 96}));
  const Tensor wide = conv2d(x, Tensor::from_vector(std::vector<float>{1, 10}, {1, 1, 1, 2}));
  EXPECT_EQ(wide.shape(), (Shape{1, 1, 3, 2}));
  EXPECT_EQ(wide.to_vector(), (std::vector<float>{21, 32, 54, 65, 87, 98}));
  // Unequal strides and padding, through a 1x1 kernel: rows 0 and 2 doubled; a zero row above and below.
  const Tensor stepped = conv2d(x, Tensor::from_vector(std::vector<float>{2}, {1, 1, 1, 1}), Tensor(), {2, 1}, {0, 0});
  EXPECT_EQ(stepped.shape(), (Shape{1, 1, 2, 3}));
  EXPECT_EQ(stepped.to_vector(), (std::vector<float>{2, 4, 6, 14, 16, 18}));
  const Tensor padded = conv2d(x, Tensor::from_vector(std::vector<float>{1}, {1, 1, 1, 1}), Tensor(), {1, 1}, {1, 0});
  EXPECT_EQ(padded.shape(), (Shape{1, 1, 5, 3}));
  EXPECT_EQ(padded.to_vector(), (std::vector<float>{0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0}));
  // And the gradients of a non-square kernel with unequal strides and padding.
  const Tensor xr = rnd({2, 2, 6, 5}, g), w = rnd({3, 2, 3, 1}, g), b = rnd({3}, g);
  expect_gradcheck([&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {2, 1}, {1, 0}); },
                   {xr, w, b});
}

TEST_F(Cnn, GradcheckConv2dEveryCpuVariant) {
  const Tensor x = rnd({2, 2, 5, 6}, g), w = rnd({3, 2, 3, 3}, g), b = rnd({3}, g);
  for (const std::string& v : kernels::ConvRegistry::instance().names(DeviceType::cpu)) {
    SCOPED_TRACE(v);
    kernels::ConvRegistry::instance().set_default(v);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {2, 1}, {1, 2}); },
                     {x, w, b});
  }
  kernels::ConvRegistry::instance().set_default("");
}

TEST_F(Cnn, GradcheckPools) {
  // Random values: no ties within a window, and no two values within the finite-difference step.
  const Tensor x = rnd({2, 3, 7, 6}, g);
  expect_gradcheck([](const std::vector<Tensor>& in) { return max_pool2d(in[0], {2, 2}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {2, 2}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 2}, {1, 2}, {1, 1}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return global_avg_pool2d(in[0]); }, {x});
}

TEST_F(Cnn, GradcheckBatchNormTrainAndEval) {
  const Tensor x = rnd({3, 2, 3, 4}, g, -2, 3), gamma = rnd({2}, g, 0.5, 1.5), beta = rnd({2}, g);
  expect_gradcheck(
      [](const std::vector<Tensor>& in) { return batch_norm2d(in[0], in[1], in[2], Tensor(), Tensor(), true); },
      {x, gamma, beta});
  const Tensor rm = rnd({2}, g), rv = rnd({2}, g, 0.5, 2.0);
  expect_gradcheck([&](const std::vector<Tensor>& in) { return batch_norm2d(in[0], in[1], in[2], rm, rv, false); },
                   {x, gamma, beta});
}

TEST_F(Cnn, GradcheckDropoutWithAFixedMask) {
  const Tensor x = rnd({4, 3, 5, 5}, g);
  expect_gradcheck([](const std::vector<Tensor>& in) { return dropout(in[0], 0.3, true, uint64_t{42}); }, {x});
}

// ---- forward values against hand computations ----

TEST_F(Cnn, Conv2dFusedReluEqualsReluOfConv) {
  const Tensor x = rnd({2, 3, 6, 6}, g, -1, 1, DType::f32), w = rnd({4, 3, 3, 3}, g, -1, 1, DType::f32);
  const Tensor b = rnd({4}, g, -1, 1, DType::f32);
  const auto fused = conv2d(x, w, b, {1, 1}, {1, 1}, true).to_vector();
  const auto plain = relu(conv2d(x, w, b, {1, 1}, {1, 1})).to_vector();
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], plain[i]) << i;
}

// ...and so is its gradient: the fused backward masks g where the output is 0 before the convolution's
// own backward. About half the outputs of this random convolution are negative, and the seed is random
// (not a function of y, which would be 0 there already), so an unmasked g shows.
TEST_F(Cnn, Conv2dFusedReluBackwardEqualsReluOfConvBackward) {
  const Tensor x0 = rnd({2, 3, 5, 5}, g), w0 = rnd({4, 3, 3, 3}, g), b0 = rnd({4}, g);
  const Tensor seed = rnd({2, 4, 5, 5}, g);
  std::vector<std::vector<double>> grads[2];
  for (int fused = 0; fused < 2; ++fused) {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
    const Tensor y = fused ? conv2d(x, w, b, {1, 1}, {1, 1}, true) : relu(conv2d(x, w, b, {1, 1}, {1, 1}));
    y.backward(seed);
    for (const Tensor* t : {&x, &w, &b}) grads[fused].push_back(t->grad().to_double());
  }
  EXPECT_EQ(grads[1], grads[0]);  // the same f64 arithmetic in the same order: equal to the bit
}

// Each op's backward converts an upstream gradient of another dtype (tests/framework/seed_dtypes.h).
TEST_F(Cnn, BackwardsConvertAnUpstreamGradientOfAnotherDtype) {
  const Tensor w0 = rnd({3, 2, 3, 3}, g, -1, 1, DType::f32);
  test::expect_seed_dtype_does_not_matter(
      {
          {"conv2d", [&](const Tensor& x) { return conv2d(x, w0, Tensor(), {1, 1}, {1, 1}); }},
          {"conv2d_relu", [&](const Tensor& x) { return conv2d(x, w0, Tensor(), {1, 1}, {1, 1}, true); }},
          {"max_pool2d", [](const Tensor& x) { return max_pool2d(x, {2, 2}); }},
          {"avg_pool2d", [](const Tensor& x) { return avg_pool2d(x, {2, 2}); }},
          {"batch_norm2d",
           [](const Tensor& x) {
             return batch_norm2d(x, Tensor::ones({2}), Tensor::zeros({2}), Tensor(), Tensor(), true);
           }},
          {"dropout", [](const Tensor& x) { return dropout(x, 0.5, true, uint64_t{7}); }},
      },
      rnd({2, 2, 4, 4}, g, -1, 1, DType::f32));
}

TEST_F(Cnn, MaxPoolTiesTakeTheFirstAndNanPropagates) {
  // One 2x2 window: [[1, 3], [3, nan]] -> nan (its gradient goes to the NaN); [[2, 5], [5, 1]] -> 5,
  // gradient to the first 5.
  const double nan = std::nan("");
  Tensor x = Tensor::from_vector(std::vector<double>{2, 5, 1, 3, 5, 1, 3, nan}, {1, 1, 2, 4}, DType::f64);
  x.requires_grad_();
  Tensor y = max_pool2d(x, {2, 2});
  const auto yv = y.to_double();
  EXPECT_EQ(yv[0], 5.0);
  EXPECT_TRUE(std::isnan(yv[1]));
  y.backward(Tensor::ones({1, 1, 1, 2}, DType::f64));
  const auto gx = x.grad().to_double();
  const std::vector<double> want{0, 1, 0, 0, 0, 0, 0, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(gx[i], want[i]) << i;
}

TEST_F(Cnn, AvgPoolCountsPaddingAsZero) {
  const Tensor x = Tensor::ones({1, 1, 2, 2}, DType::f32);
  const auto y = avg_pool2d(x, {2, 2}, {1, 1}, {1, 1}).to_vector();  // 3x3 outputs
  ASSERT_EQ(y.size(), 9u);
  EXPECT_FLOAT_EQ(y[0], 0.25f);  // corner window sees one real element
  EXPECT_FLOAT_EQ(y[4], 1.0f);   // the centre window sees all four
}

TEST_F(Cnn, BatchNormRunningStatsFollowPyTorch) {
  const Tensor x = rnd({4, 2, 3, 3}, g, -3, 5, DType::f32);
  Tensor rm = Tensor::from_vector(std::vector<float>{0.5f, -1.0f}, {2});
  Tensor rv = Tensor::from_vector(std::vector<float>{2.0f, 0.5f}, {2});
  const Tensor gamma = Tensor::ones({2}), beta = Tensor::zeros({2});
  const auto xs = x.to_double();
  const double momentum = 0.1;
  const Tensor y = batch_norm2d(x, gamma, beta, rm, rv, true, momentum, 1e-5);
  const auto rmv = rm.to_double(), rvv = rv.to_double(), yv = y.to_double();
  const double old_m[2] = {0.5, -1.0}, old_v[2] = {2.0, 0.5};
  for (int c = 0; c < 2; ++c) {
    double s = 0;
    std::vector<double> vals;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 9; ++i) vals.push_back(xs[(n * 2 + c) * 9 + i]);
    for (double v : vals) s += v;
    const double mean = s / 36;
    double ss = 0;
    for (double v : vals) ss += (v - mean) * (v - mean);
    // Which formula, not how precise: f32 statistics of 36 values in [-3, 5] are within about 1e-6 of
    // these, and the wrong formulas (the biased running variance, the other momentum convention)
    // miss them by about 1e-2 or more, so 1e-5 (and 1e-4 for y) tells them apart with room.
    EXPECT_NEAR(rmv[c], 0.9 * old_m[c] + 0.1 * mean, 1e-5);
    EXPECT_NEAR(rvv[c], 0.9 * old_v[c] + 0.1 * ss / 35, 1e-5);  // unbiased for the running variance
    // ...and the biased variance for the normalization itself.
    EXPECT_NEAR(yv[(0 * 2 + c) * 9], (vals[0] - mean) / std::sqrt(ss / 36 + 1e-5), 1e-4);
  }
  // Eval mode normalizes with the running statistics.
  const Tensor xe = rnd({2, 2, 2, 2}, g, -1, 1, DType::f32);
  const auto ye = batch_norm2d(xe, gamma, beta, rm, rv, false).to_double();
  const auto xev = xe.to_double();
  for (size_t i = 0; i < xev.size(); ++i) {
    const int c = static_cast<int>((i / 4) % 2);
    EXPECT_NEAR(ye[i], (xev[i] - rmv[c]) / std::sqrt(rvv[c] + 1e-5), 1e-5) << i;
  }
}

TEST_F(Cnn, BatchNormEvalGivesAnF16InputAnF16Gradient) {
  // Under mixed precision the input is f16 and gamma, beta and the running statistics stay f32: the
  // input gradient is computed against f32 gamma and must come back in the input's dtype.
  const Tensor x = rnd({2, 3, 2, 2}, g, -1, 1, DType::f16).requires_grad_();
  const Tensor gamma = rnd({3}, g, 0.5, 1.5, DType::f32).requires_grad_();
  const Tensor beta = Tensor::zeros({3}).requires_grad_();
  const Tensor rm = rnd({3}, g, -0.5, 0.5, DType::f32), rv = rnd({3}, g, 0.5, 2.0, DType::f32);
  const Tensor y = batch_norm2d(x, gamma, beta, rm, rv, false);
  ASSERT_EQ(y.dtype(), DType::f16);
  sum(y).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::f16);
  EXPECT_EQ(gamma.grad().dtype(), DType::f32);
  // d sum(y) / dx = gamma / sqrt(rv + eps) per channel, rounded to f16. Tolerance: one f16 ulp (2^-10
  // relative), since the f32 intermediates may land on the other side of an f16 rounding boundary.
  const auto gx = x.grad().to_double(), gv = gamma.to_double(), rvv = rv.to_double();
  for (size_t i = 0; i < gx.size(); ++i) {
    const double want = gv[(i / 4) % 3] / std::sqrt(rvv[(i / 4) % 3] + 1e-5);
    EXPECT_NEAR(gx[i], want, std::fabs(want) * 0x1p-10) << i;
  }
}

TEST_F(Cnn, BatchNormF16InputWithVarianceAbove65504GivesFiniteF32Stats) {
  // Values 30000 +- 1024 (exact in f16, whose spacing there is 16): variance 2^20 > 65504 (the f16
  // maximum), mean 3e4. A variance computed in f16 would overflow; the f32 two-pass statistics do not.
  std::vector<float> v(2 * 1 * 4 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 30000.0f + (i % 2 ? 1024.0f : -1024.0f);
  const Tensor x = Tensor::from_vector(v, {2, 1, 4, 4}, DType::f16);
  Tensor rm = Tensor::zeros({1}), rv = Tensor::ones({1});
  const Tensor y = batch_norm2d(x, Tensor::ones({1}), Tensor::zeros({1}), rm, rv, true, 1.0, 1e-5);
  EXPECT_EQ(y.dtype(), DType::f16);
  EXPECT_EQ(rv.dtype(), DType::f32);
  EXPECT_NEAR(rm.item(), 30000.0, 1e-2);
  EXPECT_NEAR(rv.item(), 1048576.0 * 32 / 31, 1.0);  // momentum 1: the unbiased batch variance itself
  for (float f : y.to_vector()) EXPECT_NEAR(std::fabs(f), 1.0f, 1e-3f);
}

TEST_F(Cnn, DropoutIsSeededKeepsAboutOneMinusPAndScales) {
  const Tensor x = Tensor::ones({100000}, DType::f32);
  const double p = 0.3;
  const auto a = dropout(x, p, true, uint64_t{7}).to_vector();
  const auto b = dropout(x, p, true, uint64_t{7}).to_vector();
  const auto c = dropout(x, p, true, uint64_t{8}).to_vector();
  EXPECT_EQ(a, b);  // same seed, same mask
  EXPECT_NE(a, c);
  int64_t kept = 0;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || v == scale) << v;
    kept += v != 0.0f;
  }
  // Binomial(1e5, 0.7): standard deviation 145; 6 sigma cannot fail by bad luck.
  EXPECT_NEAR(static_cast<double>(kept), 70000.0, 6 * 145.0);
  // Not training (or p = 0): the input itself.
  EXPECT_EQ(dropout(x, p, false, uint64_t{7}).data_ptr(), x.data_ptr());
  // Backward reuses the mask: the gradient of sum(dropout(x)) is the mask times the scale.
  Tensor xr = Tensor::ones({1000}, DType::f32);
  xr.requires_grad_();
  Tensor y = dropout(xr, p, true, uint64_t{9});
  sum(y).backward();
  EXPECT_EQ(xr.grad().to_vector(), y.to_vector());

  // With a Generator: a fresh seed drawn per call (two calls, two masks), the same masks from the same
  // generator state; p = 0 or evaluation draws nothing.
  Generator g1(hl::test::fresh_seed());
  Generator g2 = g1;
  const auto m1 = dropout(x, p, true, g1).to_vector(), m2 = dropout(x, p, true, g1).to_vector();
  EXPECT_NE(m1, m2);
  EXPECT_EQ(dropout(x, p, true, g2).to_vector(), m1);
  EXPECT_EQ(dropout(x, 0.0, true, g2).data_ptr(), x.data_ptr());
  EXPECT_EQ(dropout(x, p, false, g2).data_ptr(), x.data_ptr());
  EXPECT_EQ(dropout(x, p, true, g2).to_vector(), m2) << "p = 0 and evaluation drew a seed";
}

// ---- modules and models ----

TEST_F(Cnn, LenetAndVggSmallParameterCounts) {
  auto lenet = nn::lenet(g);
  const int64_t want = (32 * 25 + 32) + (64 * 32 * 25 + 64) + (3136 * 256 + 256) + (256 * 10 + 10);
  EXPECT_EQ(lenet->num_parameters(), want);
  auto vgg = nn::vgg_small(g);
  // Bias-free 3x3 convolutions, each followed by a BatchNorm2d (gamma, beta), then linear(256 -> 10).
  const int64_t convs = 9 * (3 * 64 + 64 * 64 + 64 * 128 + 128 * 128 + 128 * 256 + 256 * 256);
  const int64_t bns = 2 * 2 * (64 + 128 + 256);
  EXPECT_EQ(vgg->num_parameters(), convs + bns + 256 * 10 + 10);
  EXPECT_EQ(vgg->named_buffers().size(), 12u);  // running_mean and running_var of 6 BatchNorm2d
  EXPECT_EQ(vgg->named_buffers()[0].first, "1.running_mean");
}

// The canonical models of DESIGN.md §4, layer by layer. The parameter counts above cannot see a
// padding or a pooling window: LeNet's first padding of 3 instead of 2 still ends at 64x7x7 = 3136,
// and VGG-small's global average pool takes any spatial size.
std::vector<std::string> layer_names(const nn::Sequential& m) {
  std::vector<std::string> names;
  for (size_t i = 0; i < m.size(); ++i) names.push_back(m[i].name());
  return names;
}

TEST_F(Cnn, CanonicalModelsLayerByLayer) {
  EXPECT_EQ(layer_names(*nn::mlp512(g)), (std::vector<std::string>{"Flatten()", "Linear(784 -> 512)", "ReLU()",
                                                                   "Linear(512 -> 512)", "ReLU()",
                                                                   "Linear(512 -> 10)"}));
  EXPECT_EQ(layer_names(*nn::lenet(g)),
            (std::vector<std::string>{"Conv2d(1 -> 32, 5x5, stride 1x1, pad 2x2)", "ReLU()", "MaxPool2d(2x2)",
                                      "Conv2d(32 -> 64, 5x5, stride 1x1, pad 2x2)", "ReLU()", "MaxPool2d(2x2)",
                                      "Flatten()", "Linear(3136 -> 256)", "ReLU()", "Linear(256 -> 10)"}));
  std::vector<std::string> vgg;
  int64_t in = 3;
  for (const int64_t w : {64, 128, 256}) {
    for (int rep = 0; rep < 2; ++rep) {
      const std::string c = std::to_string(in) + " -> " + std::to_string(w);
      vgg.insert(vgg.end(), {"Conv2d(" + c + ", 3x3, stride 1x1, pad 1x1, no bias)",
                             "BatchNorm2d(" + std::to_string(w) + ")", "ReLU()"});
      in = w;
    }
    vgg.push_back("MaxPool2d(2x2)");
  }
  vgg.insert(vgg.end(), {"GlobalAvgPool2d()", "Linear(256 -> 10)"});
  EXPECT_EQ(layer_names(*nn::vgg_small(g)), vgg);
}

// A pool's name shows its stride and padding when they are not the usual ones (stride = kernel, no
// padding): MaxPool2d(3x3) with stride 1 and padding 1 was named as the 2x2 kind is.
TEST_F(Cnn, PoolNamesShowAnUnusualStrideOrPadding) {
  EXPECT_EQ(nn::MaxPool2d(2).name(), "MaxPool2d(2x2)");
  EXPECT_EQ(nn::MaxPool2d(Size2{2, 2}, Size2{2, 2}).name(), "MaxPool2d(2x2)");
  EXPECT_EQ(nn::MaxPool2d(Size2{3, 3}, Size2{1, 1}, Size2{1, 1}).name(), "MaxPool2d(3x3, stride 1x1, pad 1x1)");
  EXPECT_EQ(nn::AvgPool2d(Size2{2, 3}, Size2{0, 0}, Size2{1, 0}).name(), "AvgPool2d(2x3, stride 2x3, pad 1x0)");
  // A stride of 0 on one side is the kernel's on that side (it was shown as 0).
  EXPECT_EQ(nn::MaxPool2d(Size2{2, 2}, Size2{0, 1}).name(), "MaxPool2d(2x2, stride 2x1, pad 0x0)");
  EXPECT_EQ(nn::MaxPool2d(Size2{2, 3}, Size2{2, 0}).name(), "MaxPool2d(2x3)");
  EXPECT_EQ(nn::AvgPool2d(Size2{2, 3}, Size2{1, 0}).name(), "AvgPool2d(2x3, stride 1x3, pad 0x0)");
  EXPECT_EQ(nn::MaxPool2d(Size2{2, 2}, Size2{0, 1})(Tensor::zeros({1, 1, 4, 4})).shape(), (Shape{1, 1, 2, 3}));
}

TEST_F(Cnn, Conv2dModuleChecksEveryArgumentAndNamesEachSide) {
  // A kernel, stride and padding different on each side, so that no side can stand in for the other.
  nn::Conv2d conv(2, 64, Size2{1, 5}, g, Size2{1, 2}, Size2{0, 3});
  EXPECT_EQ(conv.name(), "Conv2d(2 -> 64, 1x5, stride 1x2, pad 0x3)");
  EXPECT_EQ(conv.weight.shape(), (Shape{64, 2, 1, 5}));
  EXPECT_EQ(conv(Tensor::zeros({1, 2, 3, 4})).shape(), (Shape{1, 64, 3, 3}));  // W: (4 + 6 - 5) / 2 + 1 = 3
  // PyTorch's init, U(-b, b) with b = 1/sqrt(in * kh * kw) = 1/sqrt(10): 640 draws reach past 0.9 b
  // (all below it has probability 0.9^640), and none past b.
  const double bound = 1.0 / std::sqrt(10.0);
  double largest = 0.0;
  for (float v : conv.weight.to_vector()) largest = std::max(largest, static_cast<double>(std::abs(v)));
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.9 * bound);
  // The smallest valid module, then each argument made invalid alone.
  EXPECT_NO_THROW(nn::Conv2d(1, 1, Size2{1, 1}, g, Size2{1, 1}, Size2{0, 0}));
  struct Bad {
    int64_t in, out;
    Size2 kernel, stride, padding;
  };
  for (const Bad& b : std::vector<Bad>{{0, 1, {1, 1}, {1, 1}, {0, 0}},
                                       {1, 0, {1, 1}, {1, 1}, {0, 0}},
                                       {1, 1, {0, 1}, {1, 1}, {0, 0}},
                                       {1, 1, {1, 0}, {1, 1}, {0, 0}},
                                       {1, 1, {1, 1}, {0, 1}, {0, 0}},
                                       {1, 1, {1, 1}, {1, 0}, {0, 0}},
                                       {1, 1, {1, 1}, {1, 1}, {-1, 0}},
                                       {1, 1, {1, 1}, {1, 1}, {0, -1}}}) {
    const std::string e = error_of([&] { nn::Conv2d(b.in, b.out, b.kernel, g, b.stride, b.padding); });
    EXPECT_EQ(e.rfind("Conv2d: ", 0), 0u) << e;
  }
  EXPECT_EQ(error_of([&] { nn::Conv2d(1, 1, Size2{1, 1}, g, Size2{1, 0}, Size2{0, 0}); }),
            "Conv2d: stride 1x0 must be positive and padding 0x0 non-negative");
}

TEST_F(Cnn, BatchNorm2dModuleSizesAndDtypes) {
  EXPECT_THROW(nn::BatchNorm2d(0), Error);
  nn::BatchNorm2d bn(1);
  EXPECT_EQ(bn.name(), "BatchNorm2d(1)");
  // Parameters and buffers stay f32 under f16 (DESIGN.md §3) and follow a conversion to f64.
  bn.to(DType::f16);
  for (const auto& [name, t] : bn.named_state()) EXPECT_EQ(t.dtype(), DType::f32) << name;
  bn.to(DType::f64);
  ASSERT_EQ(bn.named_state().size(), 4u);
  for (const auto& [name, t] : bn.named_state()) EXPECT_EQ(t.dtype(), DType::f64) << name;
  EXPECT_EQ(bn.running_var.to_vector(), std::vector<float>{1.0f});
}

// One SGD step of LeNet on random data in fp32 and in mixed (FP16 working copy, FP32 masters, dynamic
// loss scaling): the loss is finite, and the step changes every parameter.
void lenet_step(amp::Precision precision, Generator& g) {
  auto model = nn::lenet(g);
  model->fuse_linear_relu(true);
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = amp::uses_master_weights(precision)});
  const DType dt = amp::compute_dtype(precision);
  model->to(dt);
  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.clone());
  const Tensor x = Tensor::randn({4, 1, 28, 28}, g, dt);
  const Tensor y = Tensor::from_vector(std::vector<int32_t>{1, 7, 3, 0}, {4});
  amp::LossScaler scaler(amp::ScalerConfig::parse(precision == amp::Precision::fp32 ? "none" : "static:1024"));
  const Tensor logits = (*model)(x);
  EXPECT_EQ(logits.dtype(), dt);
  EXPECT_EQ(logits.shape(), (Shape{4, 10}));
  const Tensor loss = cross_entropy(logits, y);
  EXPECT_TRUE(std::isfinite(loss.item()));
  scaler.scale(loss).backward();
  scaler.step(sgd);
  scaler.update();
  EXPECT_FALSE(scaler.last_step_skipped());
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].dtype(), dt);
    EXPECT_NE(params[i].to_vector(), before[i].to_vector()) << "parameter " << i << " did not change";
  }
}

TEST_F(Cnn, LenetForwardBackwardFp32AndMixed) {
  lenet_step(amp::Precision::fp32, g);
  lenet_step(amp::Precision::mixed, g);
}

TEST_F(Cnn, BatchNormStaysF32UnderMixedAndVggSmallStepRuns) {
  auto vgg = nn::vgg_small(g);
  optim::SGD sgd(vgg->parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  vgg->to(DType::f16);
  // Layers 0..20 are the three stages (conv, BN, ReLU, conv, BN, ReLU, pool); 21 pools, 22 is the linear.
  for (const auto& [name, p] : vgg->named_parameters()) {
    const bool batch_norm = p.dim() == 1 && name != "22.bias";
    EXPECT_EQ(p.dtype(), batch_norm ? DType::f32 : DType::f16) << name;
  }
  for (const auto& [name, b] : vgg->named_buffers()) EXPECT_EQ(b.dtype(), DType::f32) << name;
  EXPECT_EQ(vgg->named_parameters()[0].second.dtype(), DType::f16);  // the first conv's weight
  const Tensor x = Tensor::randn({2, 3, 32, 32}, g, DType::f16);
  const Tensor y = Tensor::from_vector(std::vector<int32_t>{4, 9}, {2});
  const Tensor loss = cross_entropy((*vgg)(x), y);
  amp::LossScaler scaler(amp::ScalerConfig::parse("dynamic"));
  scaler.scale(loss).backward();
  scaler.step(sgd);
  scaler.update();
  EXPECT_TRUE(std::isfinite(loss.item()));
  // The running statistics moved away from their initial 0 / 1.
  EXPECT_NE(vgg->named_buffers()[0].second.to_vector(), std::vector<float>(64, 0.0f));
}

TEST_F(Cnn, CheckpointRoundTripKeepsBatchNormBuffers) {
  std::string tmpl = (fs::temp_directory_path() / "halfling_cnn_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string path = tmpl + "/bn.safetensors";
  auto a = std::make_shared<nn::Sequential>();
  a->add(std::make_shared<nn::Conv2d>(3, 4, 3, g, 1, 1));
  a->add(std::make_shared<nn::BatchNorm2d>(4));
  (*a)(Tensor::randn({3, 3, 5, 5}, g));  // one training forward: running statistics move
  save_checkpoint(path, *a);
  const SafeTensors file = load_safetensors(path);
  EXPECT_TRUE(file.contains("model.1.running_mean"));
  EXPECT_TRUE(file.contains("model.1.running_var"));

  Generator g2(99);
  auto b = std::make_shared<nn::Sequential>();
  b->add(std::make_shared<nn::Conv2d>(3, 4, 3, g2, 1, 1));
  b->add(std::make_shared<nn::BatchNorm2d>(4));
  load_checkpoint(path, *b);
  const auto sa = a->named_state(), sb = b->named_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_EQ(sa[i].second.to_vector(), sb[i].second.to_vector()) << sa[i].first;
  b->eval();
  a->eval();
  const Tensor x = Tensor::randn({2, 3, 5, 5}, g);
  EXPECT_EQ((*a)(x).to_vector(), (*b)(x).to_vector());
  fs::remove_all(tmpl);
}

// ---- bad input ----

TEST_F(Cnn, BadInputsNameTheOpAndShapes) {
  const Tensor x = Tensor::zeros({2, 3, 8, 8}), w = Tensor::zeros({4, 3, 3, 3});
  EXPECT_NE(error_of([&] { conv2d(Tensor::zeros({3, 8, 8}), w); }).find("conv2d: needs an NCHW input"), std::string::npos);
  const std::string ch = error_of([&] { conv2d(x, Tensor::zeros({4, 2, 3, 3})); });
  EXPECT_NE(ch.find("conv2d: input f32[2, 3, 8, 8] on cpu has 3 channels, the weight f32[4, 2, 3, 3] on cpu expects 2"),
            std::string::npos)
      << ch;
  const std::string big = error_of([&] { conv2d(Tensor::zeros({1, 3, 2, 2}), Tensor::zeros({4, 3, 5, 5}), Tensor(), {1, 1}, {1, 1}); });
  EXPECT_NE(big.find("larger than the input"), std::string::npos) << big;
  EXPECT_NE(error_of([&] { conv2d(x, w, Tensor::zeros({5})); }).find("conv2d: bias"), std::string::npos);
  EXPECT_NE(error_of([&] { conv2d(x, cast(w, DType::f16)); }).find("share a dtype"), std::string::npos);
  EXPECT_NE(error_of([&] { conv2d(x, w, Tensor(), {0, 1}); }).find("stride"), std::string::npos);
  EXPECT_NE(error_of([&] { max_pool2d(x, {9, 9}); }).find("max_pool2d: the 9x9 window is larger"), std::string::npos);
  EXPECT_NE(error_of([&] { max_pool2d(x, {2, 2}, {2, 2}, {2, 2}); }).find("half the"), std::string::npos);
  EXPECT_NE(error_of([&] { avg_pool2d(Tensor::zeros({8, 8}), {2, 2}); }).find("avg_pool2d: needs an NCHW"), std::string::npos);
  EXPECT_NE(error_of([&] { batch_norm2d(x, Tensor::ones({4}), Tensor::zeros({3}), Tensor(), Tensor(), true); })
                .find("gamma f32[4] on cpu does not match the 3 channels"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              batch_norm2d(cast(x, DType::f16), Tensor::ones({3}, DType::f16), Tensor::zeros({3}), Tensor(), Tensor(), true);
            }).find("stay f32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { batch_norm2d(Tensor::zeros({1, 3, 1, 1}), Tensor::ones({3}), Tensor::zeros({3}), Tensor(), Tensor(), true); })
                .find("more than one value per channel"),
            std::string::npos);
  EXPECT_NE(error_of([&] { batch_norm2d(x, Tensor::ones({3}), Tensor::zeros({3}), Tensor(), Tensor(), false); })
                .find("running statistics"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dropout(x, 1.5, true, uint64_t{1}); }).find("dropout: p must be in [0, 1]"), std::string::npos);
  nn::Conv2d conv(3, 4, 3, g);
  EXPECT_NE(error_of([&] { conv(Tensor::zeros({2, 5, 8, 8})); }).find("expected input [N, 3, H, W]"), std::string::npos);
  // The modules name themselves and the input they expected: a wrong channel count, a wrong rank
  // (even one whose second dim happens to match) and an undefined tensor.
  nn::BatchNorm2d bn(3);
  const std::string bn_want = "BatchNorm2d(3): expected input [N, 3, H, W], got ";
  for (const Tensor& bad : {Tensor::zeros({2, 5, 8, 8}), Tensor::zeros({2, 3}), Tensor::zeros({2, 3, 8}), Tensor()}) {
    const std::string e = error_of([&] { bn(bad); });
    EXPECT_NE(e.find(bn_want + (bad.defined() ? bad.describe() : "an undefined tensor")), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { nn::Dropout(1.25, g); }).find("Dropout: p must be in [0, 1], got 1.25"), std::string::npos);
  EXPECT_NE(error_of([&] { nn::Dropout(-0.25, g); }).find("Dropout: p must be in [0, 1], got -0.25"),
            std::string::npos);
}

// The framework's own messages, which name the tensor (the kernel layer repeats some of these checks
// in its own terms, without the tensor, for callers that reach it directly).
TEST_F(Cnn, ErrorsNameTheTensorAndTheLimit) {
  const Tensor x = Tensor::zeros({2, 3, 8, 8});
  std::string e = error_of([&] { conv2d(x, Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({5})); });
  EXPECT_NE(e.find("conv2d: bias f32[5] on cpu does not match weight f32[4, 3, 3, 3] on cpu (needs [4])"),
            std::string::npos)
      << e;
  e = error_of([&] { conv2d(Tensor::zeros({0, 3, 8, 8}), Tensor::zeros({4, 3, 3, 3})); });
  EXPECT_NE(e.find("conv2d: empty input f32[0, 3, 8, 8] on cpu"), std::string::npos) << e;
  e = error_of([&] { batch_norm2d(Tensor::zeros({0, 3, 2, 2}), Tensor::ones({3}), Tensor::zeros({3}), Tensor(),
                                  Tensor(), true); });
  EXPECT_NE(e.find("batch_norm2d: empty input f32[0, 3, 2, 2] on cpu"), std::string::npos) << e;
  e = error_of([&] { batch_norm2d(Tensor::zeros({1, 3, 1, 1}), Tensor::ones({3}), Tensor::zeros({3}), Tensor(),
                                  Tensor(), true); });
  EXPECT_NE(e.find("batch_norm2d: training needs more than one value per channel, got f32[1, 3, 1, 1] on cpu "
                   "(use eval mode, or a larger batch)"),
            std::string::npos)
      << e;
  // p outside [0, 1] is refused in training and in evaluation alike, on either side.
  for (const double p : {-0.5, 1.0000001, 1.5}) {
    for (const bool training : {true, false}) {
      e = error_of([&] { dropout(x, p, training, uint64_t{1}); });
      EXPECT_NE(e.find(detail::concat("dropout: p must be in [0, 1], got ", p, " for f32[2, 3, 8, 8] on cpu")),
                std::string::npos)
          << p << " " << training << ": " << e;
    }
  }
  // A window that fits only with three times the padding, each side alone: refused by the op, by name.
  const Tensor x22 = Tensor::zeros({1, 1, 2, 2});
  for (const auto& [w, p] : {std::pair{Size2{5, 2}, Size2{1, 0}}, std::pair{Size2{2, 5}, Size2{0, 1}}}) {
    const Size2 window = w, pad = p;  // clang 14 (the sanitizer build) cannot capture a binding in a lambda
    e = error_of([&] { max_pool2d(x22, window, {1, 1}, pad); });
    EXPECT_NE(e.find(detail::concat("max_pool2d: the ", window[0], "x", window[1],
                                    " window is larger than the input f32[1, 1, 2, 2] on cpu padded by ", pad[0],
                                    "x", pad[1])),
              std::string::npos)
        << e;
  }
}

// The smallest inputs conv2d and batch_norm2d take: a single value.
TEST_F(Cnn, Conv2dAndBatchNormOfASingleValue) {
  const Tensor x = Tensor::full({1, 1, 1, 1}, 3.0);
  EXPECT_EQ(conv2d(x, Tensor::full({1, 1, 1, 1}, 0.5), Tensor::full({1}, 1.0)).item(), 2.5);
  // Eval mode: (3 - 1) / sqrt(4 + eps) * 2 + 0.5, with eps = 1e-5.
  const double y = batch_norm2d(x, Tensor::full({1}, 2.0), Tensor::full({1}, 0.5), Tensor::full({1}, 1.0),
                                Tensor::full({1}, 4.0), false)
                       .item();
  EXPECT_NEAR(y, 2.0 / std::sqrt(4.0 + 1e-5) * 2.0 + 0.5, 1e-6);
}

// The limits of a pooling window, each accepted exactly at its edge and refused just past it: an
// input one row high, padding up to half the window (checked for height and width separately),
// and a window that fits only with the padding on both sides.
TEST_F(Cnn, PoolingShapeLimitsAreExact) {
  const Tensor one_row = Tensor::from_vector(std::vector<float>{1, 5, 2, 4}, {1, 1, 1, 4});
  EXPECT_EQ(max_pool2d(one_row, {1, 2}).to_vector(), (std::vector<float>{5, 4}));
  EXPECT_EQ(avg_pool2d(one_row, {1, 2}).to_vector(), (std::vector<float>{3, 3}));
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  // A 4x4 window over a 2x2 input fits with padding 1 on every side (and only then): one output.
  EXPECT_EQ(max_pool2d(x, {4, 4}, {1, 1}, {1, 1}).to_vector(), (std::vector<float>{4}));
  // Refused by max_pool2d itself, naming the input and the padding (the kernel layer's own check,
  // behind it, would refuse too, in its own terms).
  for (const Size2 pad : {Size2{0, 1}, Size2{1, 0}}) {
    const std::string e = error_of([&] { max_pool2d(x, {4, 4}, {1, 1}, pad); });
    const std::string want =
        detail::concat("max_pool2d: the 4x4 window is larger than the input f32[1, 1, 2, 2] on cpu padded by ", pad[0],
                       "x", pad[1]);
    EXPECT_NE(e.find(want), std::string::npos) << e;
  }
  const Tensor x4 = Tensor::zeros({1, 1, 4, 4});
  for (const Size2 pad : {Size2{2, 0}, Size2{0, 2}}) {
    const std::string e = error_of([&] { max_pool2d(x4, {2, 2}, {1, 1}, pad); });
    EXPECT_NE(e.find("must be between 0 and half the 2x2 window"), std::string::npos) << pad[0] << "x" << pad[1] << e;
  }
  // A stride of 0 means "the window", on each side alone: {0, 1} steps 2 rows and 1 column.
  const Tensor x16 = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
                                         {1, 1, 4, 4});
  EXPECT_EQ(max_pool2d(x16, {2, 2}, {0, 1}).to_vector(), (std::vector<float>{6, 7, 8, 14, 15, 16}));
  EXPECT_EQ(max_pool2d(x16, {2, 2}, {1, 0}).to_vector(), (std::vector<float>{6, 8, 10, 12, 14, 16}));
  // ...and the window of its own side: a 2x1 window steps 2 rows and 1 column, a 1x2 window the reverse.
  EXPECT_EQ(max_pool2d(x16, {2, 1}).to_vector(), (std::vector<float>{5, 6, 7, 8, 13, 14, 15, 16}));
  EXPECT_EQ(max_pool2d(x16, {1, 2}).to_vector(), (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
  for (const Size2 window : {Size2{0, 2}, Size2{2, 0}}) {  // each side checked alone
    const std::string e = error_of([&] { max_pool2d(x4, window); });
    EXPECT_NE(e.find(detail::concat("max_pool2d: the window must be at least 1x1, got ", window[0], "x", window[1])),
              std::string::npos)
        << e;
  }
  for (const Size2 pad : {Size2{-1, 0}, Size2{0, -1}}) {  // named as such, whatever the input size
    for (const Tensor& in : {x, x4}) {
      const std::string e = error_of([&] { avg_pool2d(in, {2, 2}, {1, 1}, pad); });
      EXPECT_NE(e.find("avg_pool2d: padding must be >= 0, got "), std::string::npos) << e;
    }
  }
}

// batch_norm2d checks each parameter it is given, the optional running statistics included, and
// names it; momentum's range is closed at both ends.
TEST_F(Cnn, BatchNormChecksEveryParameterByName) {
  const Tensor x = Tensor::randn({2, 3, 2, 2}, g), one = Tensor::ones({3}), zero = Tensor::zeros({3});
  struct Case {
    std::string what, expect;
    std::function<void()> call;
  };
  const std::vector<Case> cases{
      {"no gamma", "batch_norm2d: gamma is undefined",
       [&] { batch_norm2d(x, Tensor(), zero, Tensor(), Tensor(), true); }},
      {"no beta", "batch_norm2d: beta is undefined", [&] { batch_norm2d(x, one, Tensor(), Tensor(), Tensor(), true); }},
      {"running_mean's size", "batch_norm2d: running_mean f32[4] on cpu does not match the 3 channels",
       [&] { batch_norm2d(x, one, zero, Tensor::zeros({4}), one.clone(), true); }},
      {"running_var's dtype", "batch_norm2d: running_var must be f32 for f32 input",
       [&] { batch_norm2d(x, one, zero, zero.clone(), Tensor::ones({3}, DType::f16), true); }},
      {"an integer running_var", "batch_norm2d: running_var must be floating",
       [&] { batch_norm2d(x, one, zero, zero.clone(), Tensor::zeros({3}, DType::i32), false); }},
      {"half the statistics", "running_mean and running_var must both be given",
       [&] { batch_norm2d(x, one, zero, zero.clone(), Tensor(), true); }},
      {"eps 0", "batch_norm2d: eps must be > 0, got 0",
       [&] { batch_norm2d(x, one, zero, Tensor(), Tensor(), true, 0.1, 0.0); }},
      {"momentum above 1", "batch_norm2d: momentum must be in [0, 1], got 1.5",
       [&] { batch_norm2d(x, one, zero, Tensor(), Tensor(), true, 1.5); }},
      {"momentum below 0", "batch_norm2d: momentum must be in [0, 1], got -0.25",
       [&] { batch_norm2d(x, one, zero, Tensor(), Tensor(), true, -0.25); }},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.call);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": " << e;
  }
  // Two values per channel are enough to train on (N = 2 of 1x1 planes): the variance has one degree of freedom.
  const Tensor two = Tensor::from_vector(std::vector<float>{1, 2, 3, 5, 8, 13}, {2, 3, 1, 1});
  const std::vector<float> normalized = batch_norm2d(two, one, zero, Tensor(), Tensor(), true).to_vector();
  ASSERT_EQ(normalized.size(), 6u);
  for (size_t i = 0; i < 6; ++i)  // -1 and +1 but for eps = 1e-5 beside variances of 4 to 25: < 2e-6 off
    EXPECT_NEAR(normalized[i], i < 3 ? -1.0f : 1.0f, 2e-6) << i;
  for (const double momentum : {0.0, 1.0}) {  // both ends are valid: keep the old statistics, or take the batch's
    Tensor rm = zero.clone(), rv = one.clone();
    batch_norm2d(x, one, zero, rm, rv, true, momentum);
    EXPECT_EQ(rm.to_vector() == zero.to_vector(), momentum == 0.0) << momentum;
  }
}

// The global average pool of a single value is that value; an empty input is refused by name.
TEST_F(Cnn, GlobalAvgPoolOfOneValueAndOfNone) {
  const Tensor one = Tensor::full({1, 1, 1, 1}, 2.5);
  EXPECT_EQ(global_avg_pool2d(one).shape(), (Shape{1, 1}));
  EXPECT_EQ(global_avg_pool2d(one).item(), 2.5);
  const std::string e = error_of([&] { global_avg_pool2d(Tensor::zeros({0, 3, 2, 2})); });
  EXPECT_NE(e.find("global_avg_pool2d: empty input f32[0, 3, 2, 2]"), std::string::npos) << e;
  // The window is the whole plane, rows by columns: 2x3 here, one mean per channel.
  const Tensor wide = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 12}, {1, 2, 2, 3});
  EXPECT_EQ(global_avg_pool2d(wide).to_vector(), (std::vector<float>{3.5f, 2}));
}

// conv2d's argument limits, each side alone and at its edge, on an input that is not square (2 rows,
// 5 columns), so that a row limit checked against the columns, or the padding of one side used for
// the other, is caught.
TEST_F(Cnn, ConvShapeLimitsAreExact) {
  const Tensor x = Tensor::ones({1, 1, 2, 5});
  auto conv = [&](int64_t r, int64_t s, Size2 stride, Size2 pad) {
    return conv2d(x, Tensor::ones({1, 1, r, s}), Tensor(), stride, pad);
  };
  // With padding 1 above and below the rows (and none beside the columns), a 4x5 kernel fits once.
  EXPECT_EQ(conv(4, 5, {1, 1}, {1, 0}).shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(conv(4, 5, {1, 1}, {1, 0}).item(), 10.0);  // the 2x5 ones inside, padding zeros around
  // With padding 1 beside the columns only, a 2x7 kernel fits once.
  EXPECT_EQ(conv(2, 7, {1, 1}, {0, 1}).shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(conv(2, 7, {1, 1}, {0, 1}).item(), 10.0);
  struct TooLarge {
    int64_t r, s;
    Size2 pad;
  };
  for (const TooLarge& c : {TooLarge{5, 5, {1, 0}}, TooLarge{4, 6, {1, 0}}, TooLarge{3, 7, {0, 1}},
                            TooLarge{2, 8, {0, 1}}}) {
    const std::string e = error_of([&] { conv(c.r, c.s, {1, 1}, c.pad); });
    EXPECT_NE(e.find(detail::concat("conv2d: the ", c.r, "x", c.s, " kernel of")), std::string::npos) << e;
    EXPECT_NE(e.find("is larger than the input f32[1, 1, 2, 5]"), std::string::npos) << e;
  }
  for (const Size2 stride : {Size2{0, 1}, Size2{1, 0}, Size2{-1, 1}}) {
    const std::string e = error_of([&] { conv(1, 1, stride, {0, 0}); });
    EXPECT_NE(e.find(detail::concat("conv2d: stride must be >= 1, got ", stride[0], "x", stride[1])),
              std::string::npos)
        << e;
  }
  for (const Size2 pad : {Size2{-1, 0}, Size2{0, -1}}) {
    const std::string e = error_of([&] { conv(1, 1, {1, 1}, pad); });
    EXPECT_NE(e.find(detail::concat("conv2d: padding must be >= 0, got ", pad[0], "x", pad[1])),
              std::string::npos)
        << e;
  }
}

// The bias gradient of an f16 convolution is summed in f32 and handed back once rounded to f16, the
// bias's own dtype (DESIGN.md §3), so a bias cast from f32 master weights receives what every other
// f16 parameter does. 4097 ones: an f32 sum gives 4097, which rounds to 4096 in f16 (an f16
// accumulator would have stalled at 2048).
TEST_F(Cnn, F16BiasGradientIsSummedInF32AndRoundedOnce) {
  const Tensor x = Tensor::ones({1, 1, 17, 241}, DType::f16);  // 17 * 241 = 4097 output positions
  const Tensor w = Tensor::ones({2, 1, 1, 1}, DType::f16);
  Tensor master = Tensor::zeros({2});
  master.requires_grad_();
  const Tensor y = conv2d(x, w, cast(master, DType::f16));
  y.backward(Tensor::ones(y.shape(), DType::f16));
  ASSERT_TRUE(master.grad().defined());
  EXPECT_EQ(master.grad().to_vector(), (std::vector<float>{4096, 4096}));
}

// p = 0 is a valid Dropout: it keeps every value, in training too.
TEST_F(Cnn, DropoutOfZeroKeepsEverything) {
  nn::Dropout none(0.0, g);
  none.train();
  const Tensor x = Tensor::randn({4, 3, 5, 5}, g);
  EXPECT_EQ(none(x).to_vector(), x.to_vector());
}

// p = 1 drops everything, as PyTorch's F.dropout(x, 1.0): x * 0 (zeros keeping the sign, NaN where x is
// NaN or infinite) and a zero gradient, with no mask drawn. It was refused; the kernels' keep threshold
// and 1/(1-p) are for p < 1, so it never reaches them.
TEST_F(Cnn, DropoutOfOneDropsEverythingAsPyTorch) {
  for (const DType t : {DType::f32, DType::f16}) {
    Tensor x = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, NAN, INFINITY, 0.0f, 3.0f}, {1, 1, 2, 3}, t);
    x.requires_grad_();
    const Tensor y = dropout(x, 1.0, true, uint64_t{7});
    EXPECT_EQ(y.dtype(), t);
    const std::vector<float> v = y.to_vector();
    EXPECT_EQ(v[0], 0.0f);
    EXPECT_TRUE(v[1] == 0.0f && std::signbit(v[1]));
    EXPECT_TRUE(std::isnan(v[2]) && std::isnan(v[3]));
    EXPECT_EQ(v[4], 0.0f);
    EXPECT_EQ(v[5], 0.0f);
    y.backward(Tensor::ones(y.shape(), t));
    EXPECT_EQ(x.grad().to_vector(), std::vector<float>(6, 0.0f));
  }
  nn::Dropout all(1.0, g);
  all.train();
  EXPECT_EQ(all(Tensor::ones({2, 3, 4, 4})).to_vector(), std::vector<float>(96, 0.0f));
}

}  // namespace
