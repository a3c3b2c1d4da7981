// Training through bad data: a batch with a NaN in it.
//  - mixed + dynamic scaling keeps going: the step is skipped, the scale backs off, weights stay finite;
//  - fp32 with anomaly detection stops at the first non-finite tensor, naming it;
//  - fp32 without it silently poisons every weight (why the detection exists).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "framework/amp.h"
#include "framework/autograd.h"
#include "framework/nn.h"
#include "framework/ops.h"
#include "framework/optim.h"
#include "tests/test_util.h"

namespace {

using namespace hl;

struct PoisonedRun {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::vector<Tensor> xs, ys;
};

// 4 batches of 16 random 20-feature inputs with 3 classes; batch 2 holds one NaN.
PoisonedRun make(uint64_t seed, DType dt) {
  Generator g(seed);
  PoisonedRun s;
  s.model->add(std::make_shared<nn::Linear>(20, 16, g));
  s.model->add(std::make_shared<nn::ReLU>());
  s.model->add(std::make_shared<nn::Linear>(16, 3, g));
  for (int b = 0; b < 4; ++b) {
    std::vector<float> x(16 * 20);
    for (auto& v : x) v = static_cast<float>(g.normal());
    if (b == 2) x[37] = NAN;
    std::vector<int32_t> y(16);
    for (auto& v : y) v = static_cast<int32_t>(g.below(3));
    s.xs.push_back(Tensor::from_vector(x, {16, 20}, dt));
    s.ys.push_back(Tensor::from_vector(y, {16}));
  }
  return s;
}

bool all_finite(const std::vector<Tensor>& ts) {
  for (const auto& t : ts)
    for (float v : t.to_vector())
      if (!std::isfinite(v)) return false;
  return true;
}

TEST(Anomaly, MixedWithDynamicScalingSkipsNaNBatchesAndKeepsGoing) {
  PoisonedRun s = make(hl::test::fresh_seed(), DType::f16);
  optim::SGD sgd(s.model->parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  s.model->to(DType::f16);
  amp::LossScaler scaler(amp::ScalerConfig::parse("dynamic"));
  std::vector<bool> applied;
  for (int step = 0; step < 12; ++step) {
    const int b = step % 4;
    sgd.zero_grad();
    Tensor loss = cross_entropy((*s.model)(s.xs[b]), s.ys[b]);
    scaler.scale(loss).backward();
    scaler.step(sgd);
    scaler.update();
    applied.push_back(!scaler.last_step_skipped());  // the device's decision, read back here
  }
  for (int step = 0; step < 12; ++step) EXPECT_EQ(applied[step], step % 4 != 2) << "step " << step;
  EXPECT_EQ(scaler.skipped_steps(), 3);
  EXPECT_EQ(scaler.get_scale(), 65536.0 / 8);  // one backoff per poisoned step
  EXPECT_TRUE(all_finite(s.model->parameters()));
  EXPECT_TRUE(all_finite(sgd.master_weights()));
  EXPECT_EQ(sgd.steps(), 9);
}

TEST(Anomaly, Fp32WithDetectionStopsAtTheFirstNonFiniteTensor) {
  PoisonedRun s = make(hl::test::fresh_seed(), DType::f32);
  optim::SGD sgd(s.model->parameters(), {.lr = 0.05, .momentum = 0.9});
  DetectAnomalyGuard detect;
  for (int b = 0; b < 2; ++b) {  // clean batches pass the checks
    sgd.zero_grad();
    cross_entropy((*s.model)(s.xs[b]), s.ys[b]).backward();
    sgd.step();
  }
  const std::vector<float> before = s.model->parameters()[0].to_vector();
  try {
    sgd.zero_grad();
    cross_entropy((*s.model)(s.xs[2]), s.ys[2]).backward();
    FAIL() << "the NaN batch must stop the run";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("anomaly"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input 0 of 'linear'"), std::string::npos) << msg;  // the data, entering layer 1
    EXPECT_NE(msg.find("f32[16, 20]"), std::string::npos) << msg;
  }
  EXPECT_EQ(s.model->parameters()[0].to_vector(), before);  // nothing was updated
}

TEST(Anomaly, DetectionChecksEveryInputScalarsAndNotIntegers) {
  DetectAnomalyGuard detect;
  const auto refusal = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Tensor ok = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}).requires_grad_();
  Tensor bad = Tensor::from_vector(std::vector<float>{1.0f, NAN}, {2});
  // The NaN in the second input is named as such (not only the first input is looked at).
  const std::string second = refusal([&] { (void)add(ok, bad); });
  EXPECT_NE(second.find("input 1 of 'add'"), std::string::npos) << second;
  // A one-element tensor (a loss, a scale) is checked like any other.
  Tensor nan_scalar = Tensor::from_vector(std::vector<float>{NAN}, {}).requires_grad_();
  const std::string scalar = refusal([&] { (void)mul(nan_scalar, 2.0); });
  EXPECT_NE(scalar.find("input 0 of 'mul_scalar'"), std::string::npos) << scalar;
  // Integer inputs (class labels) cannot hold NaN or inf: they pass, and the step runs.
  Tensor logits = Tensor::from_vector(std::vector<float>{0.5f, -1.0f, 2.0f, 0.0f}, {2, 2}).requires_grad_();
  EXPECT_NO_THROW(cross_entropy(logits, Tensor::from_vector(std::vector<int32_t>{1, 0}, {2})).backward());
}

TEST(Anomaly, DetectionCatchesNonFiniteGradientsInBackward) {
  // A finite forward whose backward overflows: d(sqrt(x))/dx at x = 0 is inf.
  DetectAnomalyGuard detect;
  Tensor x = Tensor::from_vector(std::vector<float>{0.0f, 1.0f}, {2}).requires_grad_();
  Tensor y = sum(pow(x, 0.5));
  try {
    y.backward();
    FAIL() << "an inf gradient must be reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'pow'"), std::string::npos) << e.what();
  }
}

// Every input's gradient is checked, not only the first: a / b with a tiny b is finite forward, and so
// is the gradient of a (1 / b = 1e20), but the gradient of b (-a / b^2 = -1e40) overflows f32.
TEST(Anomaly, DetectionChecksTheGradientOfEveryInput) {
  DetectAnomalyGuard detect;
  Tensor a = Tensor::from_vector(std::vector<float>{1.0f, 1.0f}, {2}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<float>{1e-20f, 1.0f}, {2}).requires_grad_();
  Tensor y = sum(a / b);
  try {
    y.backward();
    FAIL() << "the inf gradient of b must be reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the gradient of input 1 of 'div' (backward)"), std::string::npos) << e.what();
  }
}

// check_finite looks at floating tensors with values only: integers, empty and undefined tensors pass.
TEST(Anomaly, CheckFiniteSkipsWhatCannotHoldNaN) {
  EXPECT_NO_THROW(check_finite(Tensor::from_vector(std::vector<int32_t>{1, -7}, {2}), "labels"));
  EXPECT_NO_THROW(check_finite(Tensor::zeros({0, 3}), "an empty batch"));
  EXPECT_NO_THROW(check_finite(Tensor(), "nothing"));
  try {
    check_finite(Tensor::from_vector(std::vector<float>{1.0f, INFINITY}, {2}), "the scale");
    FAIL() << "an inf must be reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("anomaly: the scale (f32[2] on cpu) contains NaN or inf"), std::string::npos)
        << e.what();
  }
}

TEST(Anomaly, Fp32WithoutDetectionPoisonsTheWeights) {
  PoisonedRun s = make(hl::test::fresh_seed(), DType::f32);
  optim::SGD sgd(s.model->parameters(), {.lr = 0.05});
  EXPECT_FALSE(detect_anomaly());
  sgd.zero_grad();
  cross_entropy((*s.model)(s.xs[2]), s.ys[2]).backward();
  sgd.step();
  // The NaN (batch 2, row 1, feature 17) makes row 1 of every activation NaN and row 1 of the logits'
  // gradient NaN, so every element of the second layer's weight and bias gradients (each sums over the
  // batch's rows) is NaN. halfling's ReLU backward passes a gradient only where its input is > 0, which
  // NaN is not (kernels/cpu/elementwise_cpu.cpp; PyTorch's, which tests the output for <= 0, would pass
  // it), so the first layer's gradients are NaN only through the input itself: its weight gradient's
  // column 17. One step loses the whole last layer and a column of the first.
  const auto params = s.model->parameters();  // w1 [16, 20], b1 [16], w2 [3, 16], b2 [3]
  ASSERT_EQ(params.size(), 4u);
  const std::vector<float> w1 = params[0].to_vector();
  for (size_t i = 0; i < w1.size(); ++i)
    EXPECT_EQ(std::isfinite(w1[i]), i % 20 != 17) << "w1[" << i / 20 << "][" << i % 20 << "] = " << w1[i];
  EXPECT_TRUE(all_finite({params[1]}));
  for (size_t p : {size_t{2}, size_t{3}})
    for (float v : params[p].to_vector()) EXPECT_FALSE(std::isfinite(v)) << "parameter " << p;
}

// Without detection a bad label on the GPU is not read back: its loss is NaN and, on both paths, its
// gradient row is NaN, so the loss scaler's check of the gradients skips the step (on the unfused path
// a zero row would have let it through).
TEST(Anomaly, BadLabelsOnTheGpuGiveANaNGradientRowOnBothPaths) {
  HL_REQUIRE_CUDA();
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 10, 2}, {3}).to(Device::cuda);
  for (bool fused : {true, false}) {
    Tensor logits = Tensor::zeros({3, 10}).to(Device::cuda).requires_grad_(true);
    Tensor loss = fused ? cross_entropy(logits, labels) : cross_entropy_unfused(logits, labels);
    EXPECT_TRUE(std::isnan(loss.item())) << (fused ? "fused" : "unfused");
    loss.backward();
    const std::vector<float> g = logits.grad().to(Device::cpu).to_vector();
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_EQ(std::isnan(g[i]), i / 10 == 1) << (fused ? "fused" : "unfused") << " element " << i << " = " << g[i];
  }
}

TEST(Anomaly, BadLabelsOnTheGpuAreNamedUnderDetection) {
  HL_REQUIRE_CUDA();
  // Checking GPU labels reads them back, so it happens only under detection; without it the loss is
  // NaN (which a dynamic scaler then skips as an overflow).
  const Tensor logits = Tensor::zeros({3, 10}).to(Device::cuda);
  const Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 10, 2}, {3}).to(Device::cuda);
  EXPECT_TRUE(std::isnan(cross_entropy(logits, labels).item()));
  DetectAnomalyGuard detect;
  for (bool fused : {true, false}) {
    try {
      fused ? cross_entropy(logits, labels) : nll_loss(log_softmax(logits), labels);
      ADD_FAILURE() << "label 10 of 10 classes passed (" << (fused ? "cross_entropy" : "nll_loss") << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("label 10 at row 1 is outside [0, 10)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
